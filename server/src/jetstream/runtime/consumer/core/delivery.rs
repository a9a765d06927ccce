//! Choosing and sending messages: redeliveries before new ones, `max_ack_pending`, pacing,
//! `max_bytes`, flow control, heartbeats, and the `num_pending` count.

use jetraft_proto::stream::Delivery;
use jetraft_storage::stream::StoredMsg;
use tracing::debug;

use super::{
    Action, ConsumerCore, ConsumerView, DELIVERIES_PER_ROUND, READ_AHEAD, READ_AHEAD_BYTES,
};
use crate::jetstream::api::types::consumer::DeliverPolicy;
use crate::jetstream::runtime::consumer::deliver::{self, OutMsg, PullStatus};
use crate::jetstream::stream::consumers::{
    count_last_per_subject, count_pending, is_initial_last_per_subject,
};

impl<V: ConsumerView> ConsumerCore<V> {
    /// Keeps `num_pending` current: a full count after removals that may concern messages
    /// not delivered yet, otherwise only the messages appended since the last look.
    pub(super) fn recount(&mut self) {
        let next = self.state.delivered.stream_seq + 1;
        let lps = self.cfg.deliver_policy == DeliverPolicy::LastPerSubject && next <= self.lps_end;
        let (filters, lps_end, counted, prev) =
            (&self.filters, self.lps_end, self.counted, self.num_pending);
        let counted_removals = self.counted_removals;
        let (result, last_seq, removals) = self.view.read(|store, removals| {
            let st = store.state();
            let full = counted.is_none() || counted_removals != removals || lps;
            let result = if full {
                if lps {
                    count_last_per_subject(store, next, lps_end, filters)
                        .and_then(|n| count_pending(store, lps_end + 1, filters).map(|m| n + m))
                } else {
                    count_pending(store, next, filters)
                }
            } else {
                let refs: Vec<&str> = filters.iter().map(String::as_str).collect();
                let mut n = prev;
                let mut at = (counted.unwrap_or(0) + 1).max(next);
                let mut failed = None;
                while at <= st.last_seq {
                    match store.next_matching(at, &refs) {
                        Ok(Some(m)) => {
                            n += 1;
                            at = m.seq + 1;
                        }
                        Ok(None) => break,
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
                match failed {
                    Some(e) => Err(e),
                    None => Ok(n),
                }
            };
            (result, st.last_seq, removals)
        });
        match result {
            Ok(n) => self.num_pending = n,
            Err(e) => debug!(error = %e, "num_pending not recomputed"),
        }
        self.counted = Some(last_seq);
        self.counted_removals = removals;
    }

    /// The next message to deliver: a due redelivery first, then the next new one.
    pub(super) fn next_message(&mut self, allow_new: bool) -> Option<(StoredMsg, bool)> {
        while let Some(seq) = self.due.first().copied() {
            self.due.remove(&seq);
            if !self.state.pending.contains_key(&seq) {
                continue;
            }
            match self.view.read(|store, _| store.get(seq).ok().flatten()) {
                Some(m) => return Some((m, true)),
                None => self.drop_pending(seq),
            }
        }
        if !allow_new {
            return None;
        }
        loop {
            if self.ahead.is_empty() {
                self.read_ahead();
            }
            let m = self.ahead.pop_front()?;
            if self.cfg.deliver_policy == DeliverPolicy::LastPerSubject && m.seq <= self.lps_end {
                // Skip it if a later message on its subject was already there when the
                // consumer was created (later publishes do not count: they come after).
                let end = self.lps_end;
                let initial = self
                    .view
                    .read(|store, _| is_initial_last_per_subject(store, m.seq, &m.subject, end));
                if !initial.unwrap_or(true) {
                    continue;
                }
            }
            return Some((m, false));
        }
    }

    /// Reads the next new messages after the last delivered one into `ahead`, as many as this
    /// round can use (pull: what the waiting requests ask for; push: one round's worth).
    pub(super) fn read_ahead(&mut self) {
        let start = self
            .read_next
            .unwrap_or(self.state.delivered.stream_seq + 1);
        let want = if self.cfg.is_push() {
            DELIVERIES_PER_ROUND
        } else {
            let asked = (self.waiting.iter()).fold(0u64, |n, r| n.saturating_add(r.batch));
            usize::try_from(asked).unwrap_or(usize::MAX)
        };
        let max = want.clamp(1, READ_AHEAD);
        let refs: Vec<&str> = self.filters.iter().map(String::as_str).collect();
        match self
            .view
            .read(|store, _| store.next_matching_batch(start, &refs, max, READ_AHEAD_BYTES))
        {
            Ok(msgs) => {
                if let Some(last) = msgs.last() {
                    self.read_next = Some(last.seq + 1);
                }
                self.ahead.extend(msgs);
            }
            Err(e) => debug!(error = %e, "consumer read failed"),
        }
    }

    /// Delivers as much as targets, limits and flow control allow.
    pub(super) fn pump(&mut self) {
        self.pump_round();
        self.ahead.clear();
        self.read_next = None;
    }

    /// One round of [`ConsumerCore::pump`]; a new message it reads but does not send goes
    /// back to the front of `ahead`.
    pub(super) fn pump_round(&mut self) {
        if self.paused() {
            return;
        }
        let max_ack_pending = u64::try_from(self.cfg.max_ack_pending)
            .ok()
            .filter(|m| *m > 0 && self.acks());
        let push = self.cfg.is_push();
        if push && !self.push_interest() {
            return;
        }
        for _ in 0..DELIVERIES_PER_ROUND {
            if push {
                if self.fc.pending.is_some() && self.fc.outstanding >= self.fc.window {
                    return;
                }
            } else {
                self.drop_dead_requests();
                if self.waiting.is_empty() {
                    return;
                }
            }
            let allow_new = max_ack_pending.is_none_or(|m| (self.state.pending.len() as u64) < m);
            let Some((msg, redelivery)) = self.next_message(allow_new) else {
                return;
            };
            if self.pacer.active() {
                let now = self.now.mono_ns;
                let bytes = (msg.subject.len() + msg.headers.len() + msg.payload.len()) as u64;
                if let Some(at) = self
                    .pacer
                    .ready_at(msg.timestamp_ns, bytes, redelivery, now)
                {
                    if redelivery {
                        self.due.insert(msg.seq);
                    }
                    self.paced_until = Some(at);
                    return;
                }
                self.paced_until = None;
            }
            if !push {
                // Which request takes it (priority groups), chosen once there is a message, as
                // nats-server does: a pin is given, or a stale one refused, only then.
                if !self.select_request() {
                    if redelivery {
                        self.due.insert(msg.seq);
                    } else {
                        self.ahead.push_front(msg);
                    }
                    return;
                }
                let size = deliver::pull_size(&msg, self.ack_len(&msg, redelivery));
                let Some(req) = self.waiting.front_mut() else {
                    return;
                };
                if req.bytes_limited && size > req.max_bytes {
                    // Put the message back for the next request.
                    if redelivery {
                        self.due.insert(msg.seq);
                    } else {
                        self.ahead.push_front(msg);
                    }
                    self.release_fresh_pin();
                    if let Some(req) = self.waiting.pop_front() {
                        self.out.push(Action::Status {
                            to: req.reply,
                            status: PullStatus::MaxBytesExceeded {
                                pending_msgs: req.batch,
                                pending_bytes: req.max_bytes,
                            },
                        });
                    }
                    continue;
                }
            }
            self.settle_pin();
            self.deliver(msg, redelivery);
        }
    }

    /// The length of the ack subject [`deliver`](Self::deliver) gives `msg` now.
    fn ack_len(&self, msg: &StoredMsg, redelivery: bool) -> usize {
        let deliveries = if redelivery {
            self.state
                .pending
                .get(&msg.seq)
                .map_or(1, |p| p.deliveries + 1)
        } else {
            1
        };
        let pending = if redelivery {
            self.num_pending
        } else {
            self.num_pending.saturating_sub(1)
        };
        deliver::ack_subject_len(
            &self.stream,
            &self.name,
            [
                deliveries,
                msg.seq,
                self.state.delivered.consumer_seq + 1,
                msg.timestamp_ns,
                pending,
            ],
        )
    }

    /// Sends one message and records the delivery.
    pub(super) fn deliver(&mut self, msg: StoredMsg, redelivery: bool) {
        let now = self.now;
        let seq = msg.seq;
        let deliveries = if redelivery {
            self.state.pending.get(&seq).map_or(1, |p| p.deliveries + 1)
        } else {
            1
        };
        let dseq = self.state.delivered.consumer_seq + 1;
        if !redelivery && self.num_pending > 0 {
            self.num_pending -= 1;
        }
        let ack_subject = deliver::ack_subject(
            &self.stream,
            &self.name,
            deliveries,
            seq,
            dseq,
            msg.timestamp_ns,
            self.num_pending,
        );
        let (mut hdrs, payload) = deliver::body(&msg, self.cfg.headers_only);
        if let Some(pin) = self.pin_id() {
            let block = hdrs.as_deref().unwrap_or_default();
            hdrs = Some(deliver::add_header(block, "Nats-Pin-Id", pin));
        }
        let timestamp_ns = msg.timestamp_ns;
        let size;
        if self.cfg.is_push() {
            size = (msg.subject.len() + ack_subject.len() + payload.len()) as u64
                + hdrs.as_ref().map_or(0, |h| h.len() as u64);
            self.out.push(Action::Deliver {
                stream_seq: seq,
                deliveries,
                msg: OutMsg {
                    subject: self.cfg.deliver_subject.clone(),
                    shown: Some(msg.subject),
                    reply: Some(ack_subject),
                    hdrs,
                    payload,
                },
            });
            self.push_last_sent = now.mono_ns;
            if self.cfg.flow_control {
                self.fc.outstanding += size;
                if self.fc.pending.is_none() && self.fc.outstanding >= self.fc.window / 2 {
                    let subject = self.fc_subject();
                    self.out.push(Action::FlowControlRequest {
                        to: self.cfg.deliver_subject.clone(),
                        reply: subject.clone(),
                    });
                    self.fc.pending = Some(subject);
                }
            }
        } else if let Some(req) = self.waiting.front_mut() {
            size = deliver::pull_size(&msg, ack_subject.len());
            self.out.push(Action::Deliver {
                stream_seq: seq,
                deliveries,
                msg: OutMsg {
                    subject: req.reply.clone(),
                    shown: Some(msg.subject),
                    reply: Some(ack_subject),
                    hdrs,
                    payload,
                },
            });
            req.batch -= 1;
            req.delivered += 1;
            req.last_sent = now.mono_ns;
            if req.bytes_limited {
                req.max_bytes = req.max_bytes.saturating_sub(size);
            }
            let done = req.batch == 0 || (req.bytes_limited && req.max_bytes == 0);
            if let Some(req) = self.waiting.pop_front()
                && !done
            {
                // Round robin between waiting requests (within one priority: `enqueue`).
                self.enqueue(req);
            }
        } else {
            return;
        }
        if self.pacer.active() {
            self.pacer.sent(timestamp_ns, size, redelivery, now.mono_ns);
        }
        self.state.record_delivery(seq, dseq, now.unix_ns);
        self.last_delivered_ns = now.unix_ns;
        if !self.acks() {
            // Without acks only the position matters: keep the last delivery.
            self.batch.delivered.clear();
        }
        self.batch.delivered.push(Delivery {
            stream_seq: seq,
            consumer_seq: dseq,
            delivered_ns: now.unix_ns,
        });
        if self.acks() {
            self.deadlines.insert(
                seq,
                now.unix_ns.saturating_add(self.ack_wait_ns(deliveries)),
            );
        } else {
            self.state.pending.remove(&seq);
            self.state.ack_floor = self.state.delivered;
        }
    }

    /// A fresh flow-control reply subject: `$JS.FC.<stream>.<consumer>.<4 random chars>`.
    pub(super) fn fc_subject(&mut self) -> String {
        let token = self.token(4);
        format!("$JS.FC.{}.{}.{token}", self.stream, self.name)
    }

    /// `len` random letters and digits (flow-control subjects, pin ids).
    pub(super) fn token(&mut self, len: usize) -> String {
        const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        let mut token = String::with_capacity(len);
        for _ in 0..len {
            // xorshift64
            let mut x = self.token_state;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.token_state = x;
            let i = usize::try_from(x % ALPHABET.len() as u64).unwrap_or(0);
            token.push(ALPHABET[i] as char);
        }
        token
    }

    /// Idle heartbeats for pull requests and push consumers.
    pub(super) fn heartbeats(&mut self) {
        let now = self.now.mono_ns;
        let last_stream = self.state.delivered.stream_seq;
        let last_consumer = self.state.delivered.consumer_seq;
        for req in &mut self.waiting {
            if let Some(hb) = req.heartbeat
                && now.saturating_sub(req.last_sent) >= hb
            {
                self.out.push(Action::Heartbeat {
                    to: req.reply.clone(),
                    last_consumer,
                    last_stream,
                    stalled: None,
                });
                req.last_sent = now;
            }
        }
        if let Some(hb) = self.push_heartbeat_ns()
            && now.saturating_sub(self.push_last_sent) >= hb
            && self.push_interest()
        {
            let stalled = if self.fc.outstanding >= self.fc.window {
                self.fc.pending.clone()
            } else {
                None
            };
            self.out.push(Action::Heartbeat {
                to: self.cfg.deliver_subject.clone(),
                last_consumer,
                last_stream,
                stalled,
            });
            self.push_last_sent = now;
        }
    }
}
