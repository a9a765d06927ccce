//! Answering a STREAM.INFO or CONSUMER.INFO (and their LISTs) as of every publish this node was
//! handed before the request arrived.
//!
//! A publish without a reply is read by the client's connection, handed to the stream's capture
//! queue, proposed to the stream's Raft group and applied a moment later. The client's `flush()`
//! is answered once the connection has read and handed the publish over, not once it is
//! applied, so an INFO asked right after the flush (from any connection) could count the stream
//! without it. nats-server 2.15 queues a stream's publishes too and mostly wins the race by
//! being quick (nats.js's cross-account tests count on it); jetraft makes it a rule: before such
//! an INFO is answered on this node, it waits (at most [`SETTLE_WAIT`]) until:
//! 1. the capture task has finished with (proposed, forwarded or refused) every publish handed
//!    to the stream's capture queue before the request came, counted by the queue's
//!    [`QueueGauge::sent`](crate::bus::internal::QueueGauge::sent) and [`Handoff::taken`];
//! 2. every proposal this replica queued for its ack task by then is answered, that is applied
//!    ([`Applied`]);
//! 3. acks (and pull requests) handed to the account's ack loop before the request have been
//!    passed on to their consumers' engines (a CONSUMER.INFO then reaches an engine behind
//!    them), and, for STREAM.INFO and LIST, whose counts acks change in work queues and
//!    interest streams, the stream's engines have applied the progress batch carrying the
//!    last ack they had handled when asked (`Event::Settled`: a barrier, so steady acks
//!    behind it do not hold the answer).
//!
//! "Before" holds across connections: the hand-over happens inside the publishing
//! connection's read of the publish, before it reads the client's PING and sends the PONG that
//! ends the flush, so a request sent after the flush returned finds the publish counted in the
//! queue's `sent`. The publishing path pays one atomic add per publish and one add and one
//! load per batch (a notification only while an INFO waits).
//!
//! Guaranteed on a node that captured the publishes (and took the acks) and leads the stream
//! (every single-node setup). Not in a cluster: a publish or ack taken on another node is
//! forwarded to the leader after that node counted it as finished, and an INFO answered by the
//! leader sees only its own queues.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::debug;

use super::JetStream;
use crate::bus::internal::QueueGauge;
use crate::jetstream::op::ApiOp;

/// The longest an INFO waits for publishes handed over before it.
pub(super) const SETTLE_WAIT: Duration = Duration::from_millis(200);

/// A count that only grows, and a way to wait for it to reach a value.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// Items finished so far.
    done: AtomicU64,
    /// Tasks in [`Self::reach`]: only then does [`Self::finish`] notify (the counting path
    /// stays one atomic add and one load).
    waiting: AtomicUsize,
    /// Notified whenever `done` grows while someone waits.
    grew: Notify,
}

impl Progress {
    /// Counts `n` more items finished.
    pub(crate) fn finish(&self, n: u64) {
        // SeqCst pairs with `reach`: either it sees this count or this sees it waiting.
        self.done.fetch_add(n, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.grew.notify_waiters();
        }
    }

    /// Items finished so far.
    pub(crate) fn done(&self) -> u64 {
        self.done.load(Ordering::SeqCst)
    }

    /// Waits until at least `target` items are finished or `deadline` passes; whether they
    /// are.
    pub(crate) async fn reach(&self, target: u64, deadline: Instant) -> bool {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&self.waiting);
        loop {
            let grew = self.grew.notified();
            tokio::pin!(grew);
            grew.as_mut().enable();
            if self.done() >= target {
                return true;
            }
            if tokio::time::timeout_at(deadline, grew).await.is_err() {
                return self.done() >= target;
            }
        }
    }
}

/// Counts a task out of [`Progress::waiting`] when it stops waiting (or is dropped).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How far a stream's capture task got with the publishes handed to its queue.
#[derive(Debug)]
pub(crate) struct Handoff {
    /// The capture queue's gauge: publishes handed over ([`QueueGauge::sent`]).
    handed: Arc<QueueGauge>,
    /// Publishes the capture task has finished with.
    pub(crate) taken: Progress,
}

impl Handoff {
    /// The hand-over count of the capture queue measured by `handed`.
    pub(crate) fn new(handed: Arc<QueueGauge>) -> Self {
        Self {
            handed,
            taken: Progress::default(),
        }
    }
}

/// How far a stream replica's ack task got with the proposals queued for it.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    /// Proposals queued for the ack task.
    queued: AtomicU64,
    /// Proposals answered (applied, or failed) by the ack task.
    pub(crate) answered: Progress,
}

impl Applied {
    /// Counts one more proposal queued for the ack task.
    pub(crate) fn queued_one(&self) {
        self.queued.fetch_add(1, Ordering::Release);
    }
}

impl JetStream {
    /// Before answering `op` (asked in `account`): for the requests that count a stream's
    /// messages (STREAM.INFO and LIST, CONSUMER.INFO and LIST), waits (at most
    /// [`SETTLE_WAIT`] in all) until the publishes handed over before now are applied.
    pub(super) async fn settle_before(&self, op: &ApiOp, account: &str) {
        let deadline = Instant::now() + SETTLE_WAIT;
        let streams: Vec<String> = match op {
            ApiOp::StreamInfo(stream)
            | ApiOp::ConsumerInfo(stream, _)
            | ApiOp::ConsumerList(stream) => vec![stream.clone()],
            ApiOp::StreamList => self
                .handoffs
                .lock()
                .keys()
                .filter(|name| crate::jetstream::account::in_account(name, account))
                .cloned()
                .collect(),
            _ => return,
        };
        let mut settled = true;
        for stream in &streams {
            settled &= self.settle_publishes(stream, deadline).await;
        }
        // Acks: handed to their engines, then (for what a stream counts: work queues and
        // interest streams drop acknowledged messages) applied. A CONSUMER.INFO reaches its
        // engine behind the acks handed to it.
        let acks = self.ack_handoffs.lock().get(account).cloned();
        if let Some(h) = acks {
            let handed = h.handed.sent();
            settled &= h.taken.reach(handed, deadline).await;
        }
        if matches!(op, ApiOp::StreamInfo(_) | ApiOp::StreamList) {
            for stream in &streams {
                settled &= self.settle_acks(stream, deadline).await;
            }
        }
        if !settled {
            debug!(?streams, "answered before what was handed over was applied");
        }
    }

    /// Waits (until `deadline`) until the acks the engines of stream `name` on this node
    /// received so far are applied; whether they are.
    async fn settle_acks(&self, name: &str, deadline: Instant) -> bool {
        let Some(ls) = self.local_stream(name) else {
            return true;
        };
        // Only work queues and interest streams drop acknowledged messages; a limits stream's
        // counts do not depend on acks.
        let retention = ls.sm.lock().config().retention;
        if retention == crate::jetstream::api::types::config::RetentionPolicy::Limits {
            return true;
        }
        for rx in ls.engines.settled_all() {
            if tokio::time::timeout_at(deadline, rx).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Waits (until `deadline`) until the publishes handed to stream `name`'s capture on this
    /// node before now are applied by its replica here, as far as this node can tell (see the
    /// module docs); returns whether they are.
    async fn settle_publishes(&self, name: &str, deadline: Instant) -> bool {
        let handoff = self.handoffs.lock().get(name).cloned();
        let mut settled = true;
        if let Some(h) = handoff {
            let handed = h.handed.sent();
            settled &= h.taken.reach(handed, deadline).await;
        }
        if let Some(ls) = self.local_stream(name) {
            let queued = ls.applied.queued.load(Ordering::Acquire);
            settled &= ls.applied.answered.reach(queued, deadline).await;
        }
        settled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reach_waits_for_the_count_and_gives_up_at_the_deadline() {
        let p = Arc::new(Progress::default());
        let soon = Instant::now() + Duration::from_secs(5);
        let waiter = tokio::spawn({
            let p = p.clone();
            async move { p.reach(2, soon).await }
        });
        p.finish(1);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one of two is not enough");
        p.finish(1);
        assert!(waiter.await.expect("waiter"));
        // Past the deadline: the answer is whether the count is there.
        let past = Instant::now();
        assert!(!p.reach(3, past).await);
        assert!(p.reach(2, past).await);
    }
}
