//! Stream capture and publishing: a message on a stream's subject becomes an `Append` entry of
//! the stream's Raft group, proposed by its leader; the PubAck goes out after commit.
//!
//! Every node captures publishes made through it (captures are local internal subscriptions),
//! so each publish is captured exactly once cluster-wide, then proposed locally or forwarded to
//! the stream leader.
//!
//! Batching: a capture task takes every publish already waiting for it (up to
//! [`BATCH_MAX_PUBLISHES`] and [`BATCH_MAX_BYTES`]) and proposes them as one `AppendBatch`
//! entry, applied exactly as that many `Append` entries would be. Raft, log and apply work is
//! then paid per batch rather than per publish, and a lone publish waits for nothing.
//!
//! Answers: one ack task per local stream replica ([`AckQueue`]) awaits the proposals' answers in
//! submission order, which is log order and so the order they complete in, and publishes every
//! PubAck that is ready before waking the receivers' writers once, instead of one task and one
//! wake-up per publish.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use jetraft_raft::{NodeId, RaftError};
use jetraft_storage::stream::StreamUid;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::atomic_batch::{self, BatchRules, Staging};
use super::replica::LocalStream;
use super::settle::{Applied, Handoff};
use super::{JetStream, now_ns};
use crate::bus::internal::{InternalMsg, InternalRx};
use crate::bus::{FlushSet, Msg, Origin};
use crate::jetstream::api::validate::subjects_overlap;
use crate::jetstream::stream::{command, headers};

/// Whether a publish whose outcome is unknown may be proposed again (see
/// `JetStream::answer`): it has a `Nats-Msg-Id` and no `Nats-Expected-Last-*` condition.
fn retry_is_safe(msg: &InternalMsg) -> bool {
    let Some(block) = msg.hdrs.as_deref() else {
        return false;
    };
    // An atomic batch is all or none: one of its messages alone is not proposed again.
    if atomic_batch::batch_id(msg).is_some() {
        return false;
    }
    headers::get(block, headers::MSG_ID).is_some_and(|id| !id.is_empty())
        && [
            headers::EXPECTED_LAST_SEQ,
            headers::EXPECTED_LAST_SUBJECT_SEQ,
            headers::EXPECTED_LAST_MSG_ID,
        ]
        .iter()
        .all(|h| headers::get(block, h).is_none())
}

/// A publish whose outcome is unknown is proposed again only while it has been forwarded or
/// proposed fewer times than this (each try counts as a hop).
const REPROPOSE_MAX_HOPS: u32 = 3;
/// How long a publish waits for a stream group without a known leader.
const LEADER_WAIT: Duration = Duration::from_secs(3);
/// Most publishes proposed as one entry.
pub(super) const BATCH_MAX_PUBLISHES: usize = 1024;
/// A batch stops growing once its subjects, headers and payloads reach this many bytes.
pub(super) const BATCH_MAX_BYTES: usize = 1 << 20;

/// The answer of one proposal, resolving within the proposal deadline.
type Answer = Pin<Box<dyn Future<Output = Result<Bytes, RaftError>> + Send>>;

/// A proposed batch of publishes waiting for its answer.
pub(super) struct PendingAck {
    /// The state machine's answer (the batch's PubAck JSONs, framed).
    answer: Answer,
    /// The publishes, for their reply subjects or to forward them to a new leader.
    msgs: Vec<InternalMsg>,
    /// Forwarding hops so far.
    hops: u32,
    /// An atomic batch: only its last answer (the commit's) goes out, to the last message.
    atomic: bool,
}

/// The sending side of a stream replica's ack task. Unbounded: every entry is a proposal Raft
/// accepted, whose answer arrives within the proposal deadline, so the queue is bounded by the
/// publishes in flight.
pub(super) type AckQueue = jetraft_raft::rt::mpsc::Sender<PendingAck>;

/// A capture subscription set of one stream (every node has one per stream).
pub(super) struct Capture {
    /// The stream's uid when the capture was set up (recreated streams get new captures).
    uid: StreamUid,
    /// Subjects captured.
    pub(super) subjects: Vec<String>,
    /// Stops the capture tasks.
    cancel: CancellationToken,
    /// The subscription (one for all subjects): dropping the capture unsubscribes at once, so a node that no longer
    /// captures a stream (deleted, subjects changed) takes no more publishes for it.
    _subs: Vec<crate::bus::internal::InternalSub>,
}

/// This node's capture subscriptions by stream name, owned by the meta task (`reconcile`).
pub(super) type Captures = HashMap<String, Capture>;

impl JetStream {
    /// Makes the capture subscriptions match the meta state: one set per stream, recreated when
    /// a stream's uid or subjects change, dropped when the stream is gone.
    pub(super) fn sync_captures(
        self: &Arc<Self>,
        caps: &mut Captures,
        streams: &[(String, StreamUid, Vec<String>)],
    ) {
        let by_name: HashMap<&str, (StreamUid, &Vec<String>)> = streams
            .iter()
            .map(|(n, uid, subjects)| (n.as_str(), (*uid, subjects)))
            .collect();
        caps.retain(|name, cap| {
            let keep = by_name
                .get(name.as_str())
                .is_some_and(|(uid, subjects)| *uid == cap.uid && **subjects == cap.subjects);
            if !keep {
                cap.cancel.cancel();
                self.handoffs.lock().remove(name);
            }
            keep
        });
        for (name, uid, subjects) in streams {
            if caps.contains_key(name) {
                continue;
            }
            let cancel = self.cancel.child_token();
            // One subscription for all of the stream's (non-overlapping) subjects: one
            // receiver and one task, so publishes reach the leader in the order they were
            // routed whatever subject they used (an atomic batch may span subjects).
            let mut subs = Vec::with_capacity(1);
            let patterns: Vec<&str> = subjects.iter().map(String::as_str).collect();
            if !patterns.is_empty() {
                let account = crate::jetstream::account::stream_account(name);
                match self
                    .bus
                    .namespace(account)
                    .internal
                    .subscribe_many(&patterns)
                {
                    Ok(mut sub) => {
                        let rx = sub.take_rx();
                        subs.push(sub);
                        let handoff = Arc::new(Handoff::new(rx.gauge()));
                        self.handoffs.lock().insert(name.clone(), handoff.clone());
                        let js = self.clone();
                        let name = name.clone();
                        let cancel = cancel.clone();
                        self.tasks.spawn(async move {
                            js.capture_loop(name, rx, handoff, cancel).await;
                        });
                    }
                    Err(e) => warn!(stream = %name, ?subjects, error = %e, "capture not set up"),
                }
            }
            caps.insert(
                name.clone(),
                Capture {
                    uid: *uid,
                    subjects: subjects.clone(),
                    cancel,
                    _subs: subs,
                },
            );
        }
    }

    async fn capture_loop(
        self: Arc<Self>,
        name: String,
        mut rx: InternalRx,
        handoff: Arc<Handoff>,
        cancel: CancellationToken,
    ) {
        loop {
            let first = tokio::select! {
                () = cancel.cancelled() => None,
                m = rx.recv() => m,
            };
            let Some(first) = first else {
                break;
            };
            // One batch at a time: a connection's publishes are logged in the order they came.
            let mut batch = take_batch(first, &mut rx);
            for msg in &mut batch {
                if let Some(hdrs) = &msg.hdrs {
                    // Streams do not store who asked (nats-server removes it too).
                    msg.hdrs = crate::accounts::request_info::strip(hdrs);
                }
            }
            let taken = batch.len() as u64;
            // Boxed: this task lives as long as the stream and mostly waits; holding the
            // batch's future inline made every stream's task ~6.8 KB (BENCHMARKS.md, Memory).
            // One allocation per batch instead (bench-ab: no measurable cost).
            Box::pin(self.on_captured(Some(name.clone()), batch, 0)).await;
            handoff.taken.finish(taken);
        }
    }

    /// The name of the stream of `account` capturing `subject` (message tracing's `js`
    /// event).
    pub fn stream_capturing(&self, account: &str, subject: &str) -> Option<String> {
        self.stream_for_subject(account, subject)
            .map(|(key, _)| crate::jetstream::account::stream_name(&key).to_string())
    }

    /// The stream of `account` capturing `subject`, per the meta state.
    pub(super) fn stream_for_subject(
        &self,
        account: &str,
        subject: &str,
    ) -> Option<(String, Vec<u64>)> {
        self.meta.read(|m| {
            m.streams()
                .filter(|s| crate::jetstream::account::in_account(&s.name, account))
                .find(|s| s.subjects.iter().any(|f| subjects_overlap(f, subject)))
                .map(|s| (s.name.clone(), s.replicas.clone()))
        })
    }

    /// Publishes to one stream captured here (`stream` known) or forwarded here (`stream`
    /// looked up from the first one's subject). Returns once they are proposed (or forwarded);
    /// the PubAcks go out from a task of their own.
    pub(super) async fn on_captured(
        self: &Arc<Self>,
        stream: Option<String>,
        msgs: Vec<InternalMsg>,
        hops: u32,
    ) {
        let Some((account, subject)) = msgs.first().map(|m| (&*m.account, m.subject.as_str()))
        else {
            return;
        };
        let Some((name, replicas)) = (match stream {
            Some(name) => self
                .meta
                .read(|m| m.stream(&name).map(|s| s.replicas.clone()))
                .map(|r| (name, r)),
            None => self.stream_for_subject(account, subject),
        }) else {
            return;
        };
        let Some(local) = self.local_stream(&name) else {
            // Not a replica here: the first replica knows (or finds) the leader.
            if let Some(first) = replicas.first() {
                self.forward_all(NodeId(*first), hops, &msgs);
            }
            return;
        };
        let group = local.group();
        match self.registry.leader(group).ok().and_then(|l| l.leader) {
            Some(l) if l == self.node => self.submit_append(&local, msgs, hops).await,
            Some(l) => self.forward_all(l, hops, &msgs),
            None => {
                // An election is running: wait for it off the capture path.
                let js = self.clone();
                self.tasks.spawn(async move {
                    match js.wait_group_leader(group, LEADER_WAIT).await {
                        Some(l) if l == js.node => js.submit_append(&local, msgs, hops).await,
                        Some(l) => js.forward_all(l, hops, &msgs),
                        None => debug!(stream = %name, "publish dropped: stream has no leader"),
                    }
                });
            }
        }
    }

    /// Forwards each publish to `node`, in order.
    fn forward_all(&self, node: NodeId, hops: u32, msgs: &[InternalMsg]) {
        for msg in msgs {
            self.forward_to(node, hops, msg);
        }
    }

    /// Proposes publishes on the leader; messages of atomic batches are staged until their
    /// commit (`atomic_batch`), the others proposed in runs between them, in order.
    async fn submit_append(self: &Arc<Self>, ls: &LocalStream, msgs: Vec<InternalMsg>, hops: u32) {
        if !msgs.iter().any(|m| atomic_batch::batch_id(m).is_some()) {
            return self.propose_publishes(ls, msgs, hops).await;
        }
        let mut run = Vec::new();
        for msg in msgs {
            if atomic_batch::batch_id(&msg).is_none() {
                run.push(msg);
                continue;
            }
            if !run.is_empty() {
                self.propose_publishes(ls, std::mem::take(&mut run), hops)
                    .await;
            }
            self.stage_atomic(ls, msg, hops).await;
        }
        if !run.is_empty() {
            self.propose_publishes(ls, run, hops).await;
        }
    }

    /// Stages one message of an atomic batch; proposes the batch at its commit.
    async fn stage_atomic(self: &Arc<Self>, ls: &LocalStream, msg: InternalMsg, hops: u32) {
        let (rules, no_ack) = {
            let sm = ls.sm.lock();
            let cfg = sm.config();
            let rules = BatchRules {
                allow_atomic: cfg.allow_atomic,
                sealed: cfg.sealed,
                max_msg_size: u64::try_from(cfg.max_msg_size).ok().filter(|m| *m > 0),
            };
            (rules, cfg.no_ack)
        };
        let (staging, abandoned) = {
            let mut batches = ls.batches.lock();
            let staging = batches.on_msg(rules, msg, std::time::Instant::now());
            (staging, batches.take_abandoned())
        };
        for (id, reason) in abandoned {
            self.advise_batch_abandoned(&ls.name, &id, reason);
        }
        let (reply, body) = match staging {
            Staging::Commit { id, msgs, eob } => {
                return self.propose_atomic(ls, id, msgs, eob, hops).await;
            }
            Staging::Staged(reply) => (reply, Bytes::new()),
            Staging::Refused(reply, e) => (
                reply,
                Bytes::from(
                    crate::jetstream::api::types::PubAck::error(
                        crate::jetstream::account::stream_name(&ls.name),
                        e,
                    )
                    .to_json(),
                ),
            ),
        };
        if let Some(reply) = reply.filter(|_| !no_ack) {
            let mut flush = FlushSet::default();
            let account = crate::jetstream::account::stream_account(&ls.name);
            self.bus.route(
                Origin::Server,
                &Msg::new(&reply, &body).in_account(account),
                &mut flush,
            );
            flush.wake_all();
        }
    }

    /// Proposes a committed atomic batch as one entry.
    async fn propose_atomic(
        self: &Arc<Self>,
        ls: &LocalStream,
        id: String,
        msgs: Vec<InternalMsg>,
        eob: bool,
        hops: u32,
    ) {
        let stored = if eob {
            &msgs[..msgs.len() - 1]
        } else {
            &msgs[..]
        };
        let last = stored.len().saturating_sub(1);
        let publishes = stored.iter().enumerate().map(|(i, m)| {
            let mut hdrs = m.hdrs.clone().unwrap_or_default();
            if eob && i == last {
                // The last stored message carries the commit, as in nats-server.
                hdrs = headers::filtered(&hdrs, |_| true, &[(atomic_batch::BATCH_COMMIT, "1")]);
            }
            (m.subject.as_str(), hdrs, m.payload.clone())
        });
        let cmd = command::atomic_batch(publishes, now_ns(), &id);
        self.submit_pending(ls, cmd, msgs, hops, true).await;
    }

    /// Proposes publishes as one `AppendBatch`; their PubAcks go out from the ack task.
    async fn propose_publishes(
        self: &Arc<Self>,
        ls: &LocalStream,
        mut msgs: Vec<InternalMsg>,
        hops: u32,
    ) {
        let refused = self.split_over_account_limit(ls, &mut msgs);
        self.refuse_over_limit(ls, &refused);
        if msgs.is_empty() {
            return;
        }
        let cmd = command::append_batch(
            msgs.iter().map(|m| {
                (
                    m.subject.as_str(),
                    m.hdrs.clone().unwrap_or_default(),
                    m.payload.clone(),
                )
            }),
            now_ns(),
        );
        self.submit_pending(ls, cmd, msgs, hops, false).await;
    }

    /// Submits a proposal and queues its answer for the ack task.
    async fn submit_pending(
        self: &Arc<Self>,
        ls: &LocalStream,
        cmd: Bytes,
        msgs: Vec<InternalMsg>,
        hops: u32,
        atomic: bool,
    ) {
        let pending = match self.registry.submit_for_client(ls.group(), cmd).await {
            Ok(p) => p,
            Err(e) => {
                debug!(stream = %ls.name, error = %e, "publishes not queued");
                return;
            }
        };
        let ack = PendingAck {
            answer: Box::pin(pending),
            msgs,
            hops,
            atomic,
        };
        if ls.acks.send_now(ack).is_err() {
            // The replica is being removed: its group is stopping and cannot answer.
            debug!(stream = %ls.name, "publishes proposed as the replica stopped");
        } else {
            ls.applied.queued_one();
        }
    }

    /// The ack task of a stream replica: answers its publishes in order until the replica is
    /// removed (`cancel`) or the runtime stops.
    pub(super) async fn ack_loop(
        self: Arc<Self>,
        mut rx: jetraft_raft::rt::mpsc::Receiver<PendingAck>,
        applied: Arc<Applied>,
        cancel: CancellationToken,
    ) {
        loop {
            let mut next = tokio::select! {
                () = cancel.cancelled() => return,
                next = rx.recv() => match next {
                    Some(p) => p,
                    None => return,
                },
            };
            // Answer every publish whose answer is ready, then wake the writers once.
            let mut flush = FlushSet::default();
            loop {
                let result = match (&mut next.answer).now_or_never() {
                    Some(r) => r,
                    None => {
                        flush.wake_all();
                        next.answer.as_mut().await
                    }
                };
                self.answer(result, next, &mut flush);
                applied.answered.finish(1);
                match rx.try_recv() {
                    Ok(p) => next = p,
                    Err(_) => break,
                }
            }
            flush.wake_all();
        }
    }

    /// Sends the PubAcks of one batch (or forwards its publishes to the new leader).
    fn answer(
        self: &Arc<Self>,
        result: Result<Bytes, RaftError>,
        p: PendingAck,
        flush: &mut FlushSet,
    ) {
        match result {
            Ok(framed) if p.atomic => {
                let answers = command::split_answers(&framed);
                if let (Some(msg), Some(ack)) = (p.msgs.last(), answers.last())
                    && let Some(reply) = msg.reply.as_deref()
                {
                    let out = Msg::new(reply, ack).in_account(&msg.account);
                    self.bus.route(Origin::Server, &out, flush);
                }
            }
            Ok(framed) => {
                for (msg, ack) in p.msgs.iter().zip(command::split_answers(&framed)) {
                    if let Some(reply) = &msg.reply
                        && !ack.is_empty()
                    {
                        let out = Msg::new(reply, &ack).in_account(&msg.account);
                        self.bus.route(Origin::Server, &out, flush);
                    }
                }
            }
            Err(RaftError::NotLeader {
                leader: Some(l), ..
            }) => self.forward_all(l, p.hops, &p.msgs),
            // Refused before it was logged (a leader whose lease no quorum backed yet, or one
            // stepping down): proposing it again cannot store it twice.
            Err(RaftError::NotLeader { leader: None, .. }) if p.hops < REPROPOSE_MAX_HOPS => {
                let js = self.clone();
                self.tasks
                    .spawn(async move { js.on_captured(None, p.msgs, p.hops + 1).await });
            }
            // The entry was logged, then dropped or overtaken by a leader change, so its
            // publishes may or may not be stored. Those with a Nats-Msg-Id (and no
            // expected-sequence condition, which a stored first copy would fail) are proposed
            // again safely: the dedup window answers with the first copy's sequence if it was
            // stored. The others get no answer.
            Err(RaftError::OutcomeUnknown { .. }) if p.hops < REPROPOSE_MAX_HOPS => {
                let again: Vec<InternalMsg> = p.msgs.into_iter().filter(retry_is_safe).collect();
                if !again.is_empty() {
                    let js = self.clone();
                    self.tasks
                        .spawn(async move { js.on_captured(None, again, p.hops + 1).await });
                }
            }
            // Otherwise (or after a timeout) no answer: the client retries, and its
            // Nats-Msg-Id, if it set one, makes the retry safe.
            Err(e) => debug!(error = %e, publishes = p.msgs.len(), "publishes not acknowledged"),
        }
    }
}

/// `first` and the publishes already waiting behind it on `rx`, within the batch limits.
fn take_batch(first: InternalMsg, rx: &mut InternalRx) -> Vec<InternalMsg> {
    let mut bytes = msg_bytes(&first);
    let mut batch = vec![first];
    while batch.len() < BATCH_MAX_PUBLISHES && bytes < BATCH_MAX_BYTES {
        match rx.try_recv() {
            Ok(msg) => {
                bytes += msg_bytes(&msg);
                batch.push(msg);
            }
            Err(_) => break,
        }
    }
    batch
}

/// What a publish adds to an entry: subject, headers and payload bytes.
pub(super) fn msg_bytes(msg: &InternalMsg) -> usize {
    msg.subject.len() + msg.hdrs.as_ref().map_or(0, Bytes::len) + msg.payload.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(headers: &[(&str, &str)]) -> InternalMsg {
        let hdrs = (!headers.is_empty()).then(|| {
            let mut block = String::from("NATS/1.0\r\n");
            for (k, v) in headers {
                block.push_str(&format!("{k}: {v}\r\n"));
            }
            block.push_str("\r\n");
            Bytes::from(block)
        });
        InternalMsg::global(
            "s".into(),
            Some("_INBOX.1".into()),
            hdrs,
            Bytes::from_static(b"x"),
        )
    }

    #[test]
    fn only_a_msg_id_without_expectations_makes_a_repeat_proposal_safe() {
        assert!(retry_is_safe(&msg(&[("Nats-Msg-Id", "a")])));
        assert!(!retry_is_safe(&msg(&[])));
        assert!(!retry_is_safe(&msg(&[("Nats-Msg-Id", "")])));
        assert!(!retry_is_safe(&msg(&[("Other", "a")])));
        for expectation in [
            "Nats-Expected-Last-Sequence",
            "Nats-Expected-Last-Subject-Sequence",
            "Nats-Expected-Last-Msg-Id",
        ] {
            assert!(
                !retry_is_safe(&msg(&[("Nats-Msg-Id", "a"), (expectation, "1")])),
                "{expectation}"
            );
        }
    }
}
