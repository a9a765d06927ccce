//! Acks of every kind, ack-wait expiry, `max_deliver` and the catch-up after a change of
//! leader: how a pending message ends (acked, terminated, dropped) or becomes due again.

use jetraft_proto::stream::Delivery;
use tracing::debug;

use super::{Action, Advisory, CATCH_UP_MAX, ConsumerCore, ConsumerView, READ_AHEAD};
use crate::jetstream::ack::AckKind;
use crate::jetstream::api::types::consumer::{AckPolicy, DeliverPolicy};
use crate::jetstream::runtime::consumer::deliver;
use crate::jetstream::stream::consumers::is_initial_last_per_subject;

impl<V: ConsumerView> ConsumerCore<V> {
    pub(super) fn on_ack(&mut self, seq: u64, kind: AckKind, reply: Option<String>) {
        if !self.acks() {
            // nats-server has no ack subscription for an `ack_policy: none` consumer: whoever
            // acks with a reply subject (AckSync, +NXT) learns that no one answers.
            if let Some(to) = reply {
                self.out.push(Action::NoResponders { to });
            }
            return;
        }
        let now = self.now.unix_ns;
        if matches!(kind, AckKind::Ack | AckKind::Next { .. }) {
            self.catch_up_to(seq, now);
        }
        let known = self.state.pending.contains_key(&seq);
        if !known {
            debug!(consumer = %self.name, seq, "ack for a message not pending");
        }
        match kind {
            AckKind::Ack => {
                let replicated = self.ack(seq, now, known);
                self.answer(reply, replicated);
            }
            AckKind::Next { request } => {
                // Ack, then the ack's reply subject becomes a pull request.
                self.ack(seq, now, known);
                if let Some(reply) = reply {
                    self.on_pull(reply, &request);
                }
            }
            AckKind::Nak { delay_ns } => {
                let mut dropped = false;
                if known && self.acks() {
                    let (dseq, deliveries) = self.pending_info(seq);
                    self.actions.push_back(Action::Advisory(Advisory::Nak {
                        stream_seq: seq,
                        consumer_seq: dseq,
                        deliveries,
                    }));
                    let delay = delay_ns.unwrap_or(0);
                    if delay == 0 {
                        // A NAK counts as a delivery (nats-server): past max_deliver the
                        // message is dropped rather than redelivered.
                        self.deadlines.remove(&seq);
                        dropped = !self.make_due(seq);
                    } else {
                        self.due.remove(&seq);
                        self.deadlines.insert(seq, now.saturating_add(delay));
                    }
                }
                if dropped {
                    debug!(consumer = %self.name, seq, "nak past max_deliver: dropped");
                }
                self.answer(reply, false);
            }
            AckKind::Progress => {
                if known {
                    let (_, deliveries) = self.pending_info(seq);
                    self.deadlines
                        .insert(seq, now.saturating_add(self.ack_wait_ns(deliveries)));
                }
                self.answer(reply, false);
            }
            AckKind::Unknown => self.answer(reply, false),
            AckKind::Term { reason } => {
                if known && self.acks() {
                    let (dseq, deliveries) = self.pending_info(seq);
                    self.dead_letter(seq, deliveries, "terminated");
                    self.drop_pending(seq);
                    self.last_ack_ns = now;
                    self.actions
                        .push_back(Action::Advisory(Advisory::Terminated {
                            stream_seq: seq,
                            consumer_seq: dseq,
                            deliveries,
                            reason,
                        }));
                }
                self.answer(reply, known);
            }
        }
    }

    /// Records as delivered now every matching message after the last recorded delivery up to
    /// `seq`: an ack for `seq` means the previous leader delivered it (and, in order, the ones
    /// before it) without getting that committed. Nothing happens for `seq` at or below the
    /// last recorded delivery, past the stream's end, or further than [`CATCH_UP_MAX`] ahead.
    pub(super) fn catch_up_to(&mut self, seq: u64, now: u64) {
        if !self.acks() || seq <= self.state.delivered.stream_seq {
            return;
        }
        let from = self.state.delivered.stream_seq + 1;
        let refs: Vec<&str> = self.filters.iter().map(String::as_str).collect();
        let lps =
            (self.cfg.deliver_policy == DeliverPolicy::LastPerSubject).then_some(self.lps_end);
        let gap: Option<Vec<(u64, bool)>> = self.view.read(|store, _| {
            if seq > store.state().last_seq {
                return None;
            }
            let mut out = Vec::new();
            let mut at = from;
            while at <= seq && out.len() <= CATCH_UP_MAX {
                let msgs = match store.next_matching_batch(at, &refs, READ_AHEAD, usize::MAX) {
                    Ok(m) => m,
                    Err(e) => {
                        debug!(error = %e, "ack catch-up read failed");
                        return None;
                    }
                };
                let Some(last) = msgs.last() else {
                    break;
                };
                at = last.seq + 1;
                for m in msgs.iter().filter(|m| m.seq <= seq) {
                    let skip = lps.is_some_and(|end| {
                        m.seq <= end
                            && !is_initial_last_per_subject(store, m.seq, &m.subject, end)
                                .unwrap_or(true)
                    });
                    out.push((m.seq, skip));
                }
            }
            Some(out)
        });
        let Some(gap) = gap else {
            return;
        };
        if gap.len() > CATCH_UP_MAX || gap.last().is_none_or(|(s, _)| *s != seq) {
            debug!(consumer = %self.name, seq, "ack far above the last delivery ignored");
            return;
        }
        debug!(consumer = %self.name, from, seq, "ack above the last recorded delivery");
        for (s, skip) in gap {
            if skip {
                continue;
            }
            let dseq = self.state.delivered.consumer_seq + 1;
            self.state.record_delivery(s, dseq, now);
            self.batch.delivered.push(Delivery {
                stream_seq: s,
                consumer_seq: dseq,
                delivered_ns: now,
            });
            self.deadlines
                .insert(s, now.saturating_add(self.ack_wait_ns(1)));
            self.num_pending = self.num_pending.saturating_sub(1);
        }
    }

    /// (consumer sequence, deliveries) of a pending message.
    pub(super) fn pending_info(&self, seq: u64) -> (u64, u64) {
        self.state
            .pending
            .get(&seq)
            .map_or((0, 0), |p| (p.consumer_seq, p.deliveries))
    }

    /// Sends an AckSync reply now, or once the current batch is committed.
    pub(super) fn answer(&mut self, reply: Option<String>, after_commit: bool) {
        if let Some(r) = reply {
            if after_commit {
                self.ack_replies.push(r);
            } else {
                self.out.push(Action::Reply { to: r });
            }
        }
    }

    /// Acks `seq` (and below for `ack_policy: all`); true when something was acknowledged.
    pub(super) fn ack(&mut self, seq: u64, now: u64, known: bool) -> bool {
        if !self.acks() {
            return false;
        }
        let acked: Vec<u64> = match self.cfg.ack_policy {
            AckPolicy::All => self.state.pending.range(..=seq).map(|(s, _)| *s).collect(),
            _ if known => vec![seq],
            _ => Vec::new(),
        };
        for s in &acked {
            self.state.ack(*s);
            self.deadlines.remove(s);
            self.due.remove(s);
        }
        if acked.is_empty() {
            return false;
        }
        self.batch.acked.push(seq);
        self.last_ack_ns = now;
        true
    }

    /// Removes a pending message without an ack (term, max deliver, gone from the stream).
    pub(super) fn drop_pending(&mut self, seq: u64) {
        if self.state.ack(seq) {
            self.batch.dropped.push(seq);
        }
        self.deadlines.remove(&seq);
        self.due.remove(&seq);
    }

    /// Makes pending `seq` due for redelivery, or drops it (advisory, dead letter) when it was
    /// delivered `max_deliver` times already; false when it was dropped.
    pub(super) fn make_due(&mut self, seq: u64) -> bool {
        let deliveries = self.state.pending.get(&seq).map_or(0, |p| p.deliveries);
        if self.max_deliver().is_some_and(|m| deliveries >= m) {
            self.drop_pending(seq);
            self.actions
                .push_back(Action::Advisory(Advisory::MaxDeliveries {
                    stream_seq: seq,
                    deliveries,
                }));
            self.dead_letter(seq, deliveries, "max_deliver");
            return false;
        }
        self.deadlines.remove(&seq);
        self.due.insert(seq);
        true
    }

    /// Moves pending messages whose ack wait expired to `due`, or drops them at max_deliver.
    pub(super) fn expire_and_redeliver(&mut self) {
        if self.deadlines.is_empty() {
            return;
        }
        for seq in self.deadlines.expired(self.now.unix_ns) {
            self.make_due(seq);
        }
    }

    /// Queues a dropped message's copy for the consumer's dead-letter subject, if it names one.
    pub(super) fn dead_letter(&mut self, seq: u64, deliveries: u64, reason: &'static str) {
        let Some(subject) = self.cfg.metadata.get(deliver::DEAD_LETTER_KEY) else {
            return;
        };
        let msg = self.view.read(|store, _| store.get(seq).ok().flatten());
        if let Some(msg) = msg {
            self.actions.push_back(Action::DeadLetter {
                subject: subject.clone(),
                msg,
                deliveries,
                reason,
            });
        }
    }
}
