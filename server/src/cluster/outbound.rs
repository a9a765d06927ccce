//! [`PeerSender`]: the send side of one outbound link. Publishers push messages into a bounded
//! queue under a short mutex (never waiting), interest changes are coalesced per pattern, and
//! the link's request stream ([`PeerSender::frames`]) takes everything queued at once and turns
//! it into a few frames, so a burst of publishes becomes one `MsgBatch`.
//!
//! Invariants: the first frame is the `Hello`, the second (once the link is registered) the
//! interest snapshot; later interest deltas were all recorded after that snapshot was taken. A
//! later `Hello` (new route gossip) may follow the snapshot.
//! The queue never holds more than [`MAX_QUEUED_BYTES`]; a message that does not fit is dropped
//! and counted, as nats-server drops for a slow route rather than stalling publishers.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::Stream;
use jetraft_proto::cluster::{Frame, Hello, Interest, InterestChange, Msg, MsgBatch, frame::Kind};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::interest::InterestKey;

/// Most message bytes queued for one peer before new messages are dropped.
pub const MAX_QUEUED_BYTES: usize = 64 * 1024 * 1024;
/// Most messages put into one `MsgBatch` frame.
const MAX_BATCH_MSGS: usize = 4096;
/// Bytes per `MsgBatch` frame we aim below (gRPC's default message limit is 4 MiB).
const MAX_BATCH_BYTES: usize = 1024 * 1024;

/// What is waiting to be sent.
#[derive(Debug, Default)]
struct Queue {
    /// The interest snapshot, set when the link is registered, sent before anything else.
    snapshot: Option<Vec<InterestChange>>,
    /// A later `Hello` (new route gossip), sent after the snapshot.
    hello: Option<Hello>,
    /// Coalesced interest deltas per pattern.
    interest: HashMap<InterestKey, i32>,
    /// Messages in publish order.
    msgs: Vec<Msg>,
    /// Approximate bytes of `msgs`.
    bytes: usize,
}

/// The send side of one outbound link.
#[derive(Debug)]
pub struct PeerSender {
    /// Pending frames' contents.
    queue: Mutex<Queue>,
    /// Wakes the request stream when the queue went from empty to not empty.
    ready: Notify,
    /// Cancelled when the link ends, so the request stream finishes.
    pub(crate) closed: CancellationToken,
    /// Messages dropped because the queue was full (shared, server-wide).
    dropped: Arc<AtomicU64>,
}

impl PeerSender {
    /// A sender for a new link; `dropped` counts messages that did not fit.
    pub(crate) fn new(dropped: Arc<AtomicU64>) -> Self {
        Self {
            queue: Mutex::new(Queue::default()),
            ready: Notify::new(),
            closed: CancellationToken::new(),
            dropped,
        }
    }

    /// Sets the interest snapshot; called once, when the link is registered.
    pub(crate) fn set_snapshot<'a>(&self, keys: impl Iterator<Item = &'a InterestKey>) {
        let changes = keys
            .map(|(a, s, q)| change(a, s, q.as_deref(), 1))
            .collect();
        self.queue.lock().snapshot = Some(changes);
        self.ready.notify_one();
    }

    /// Queues a later `Hello` (replacing one not sent yet).
    pub(crate) fn push_hello(&self, hello: Hello) {
        self.queue.lock().hello = Some(hello);
        self.ready.notify_one();
    }

    /// Records an interest delta for the peer.
    pub(crate) fn push_interest(&self, key: InterestKey, delta: i32) {
        let mut q = self.queue.lock();
        *q.interest.entry(key).or_insert(0) += delta;
        drop(q);
        self.ready.notify_one();
    }

    /// Queues a message; returns `false` (and counts it) when the queue is full.
    pub(crate) fn push_msg(&self, msg: Msg) -> bool {
        let size = msg.subject.len() + msg.reply.len() + msg.headers.len() + msg.payload.len();
        let mut q = self.queue.lock();
        if q.bytes + size > MAX_QUEUED_BYTES {
            drop(q);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let was_empty = q.msgs.is_empty();
        q.msgs.push(msg);
        q.bytes += size;
        drop(q);
        if was_empty {
            self.ready.notify_one();
        }
        true
    }

    /// The request stream of the link: `hello`, then whatever gets queued, until the link is
    /// closed.
    pub(crate) fn frames(self: Arc<Self>, hello: Hello) -> impl Stream<Item = Frame> + Send {
        let first = Frame {
            kind: Some(Kind::Hello(hello)),
        };
        let state = (
            self,
            Some(first),
            std::collections::VecDeque::<Frame>::new(),
        );
        futures_util::stream::unfold(state, |(me, mut first, mut ready)| async move {
            if let Some(f) = first.take() {
                return Some((f, (me, None, ready)));
            }
            loop {
                if let Some(f) = ready.pop_front() {
                    return Some((f, (me, None, ready)));
                }
                me.drain_into(&mut ready);
                if !ready.is_empty() {
                    continue;
                }
                tokio::select! {
                    () = me.closed.cancelled() => return None,
                    () = me.ready.notified() => {}
                }
            }
        })
    }

    /// Moves everything queued into frames: snapshot first, then interest, then messages.
    fn drain_into(&self, out: &mut std::collections::VecDeque<Frame>) {
        let mut q = self.queue.lock();
        let snapshot = q.snapshot.take();
        let hello = q.hello.take();
        let interest = std::mem::take(&mut q.interest);
        let msgs = std::mem::take(&mut q.msgs);
        q.bytes = 0;
        drop(q);
        if let Some(changes) = snapshot {
            out.push_back(interest_frame(true, changes));
        }
        if let Some(hello) = hello {
            out.push_back(Frame {
                kind: Some(Kind::Hello(hello)),
            });
        }
        let changes: Vec<InterestChange> = interest
            .into_iter()
            .filter(|(_, d)| *d != 0)
            .map(|((a, s, q), d)| change(&a, &s, q.as_deref(), d))
            .collect();
        if !changes.is_empty() {
            out.push_back(interest_frame(false, changes));
        }
        let mut batch = Vec::new();
        let mut bytes = 0;
        for m in msgs {
            bytes += m.subject.len() + m.reply.len() + m.headers.len() + m.payload.len();
            batch.push(m);
            if batch.len() >= MAX_BATCH_MSGS || bytes >= MAX_BATCH_BYTES {
                out.push_back(msgs_frame(std::mem::take(&mut batch)));
                bytes = 0;
            }
        }
        if !batch.is_empty() {
            out.push_back(msgs_frame(batch));
        }
    }
}

fn change(account: &str, subject: &str, queue: Option<&str>, delta: i32) -> InterestChange {
    InterestChange {
        subject: subject.to_string(),
        queue: queue.unwrap_or_default().to_string(),
        delta,
        account: account.to_string(),
    }
}

fn interest_frame(snapshot: bool, changes: Vec<InterestChange>) -> Frame {
    Frame {
        kind: Some(Kind::Interest(Interest { snapshot, changes })),
    }
}

fn msgs_frame(msgs: Vec<Msg>) -> Frame {
    Frame {
        kind: Some(Kind::Msgs(MsgBatch { msgs })),
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    use super::*;

    fn key(s: &str) -> InterestKey {
        (String::new(), s.to_string(), None)
    }

    #[tokio::test]
    async fn hello_then_snapshot_then_coalesced_interest_then_one_batch() {
        let s = Arc::new(PeerSender::new(Arc::default()));
        let mut frames = Box::pin(s.clone().frames(Hello::default()));
        assert!(matches!(
            frames.next().await.unwrap().kind,
            Some(Kind::Hello(_))
        ));
        let k = key("a");
        s.set_snapshot([k.clone()].iter());
        s.push_interest(key("b"), 1);
        s.push_interest(key("c"), 1);
        s.push_interest(key("c"), -1);
        for i in 0..3 {
            assert!(s.push_msg(crate::bus::Msg::new("a", &[i]).to_wire(Vec::new())));
        }
        let Some(Kind::Interest(snap)) = frames.next().await.unwrap().kind else {
            panic!("expected snapshot");
        };
        assert!(snap.snapshot);
        assert_eq!(snap.changes.len(), 1);
        let Some(Kind::Interest(delta)) = frames.next().await.unwrap().kind else {
            panic!("expected interest delta");
        };
        assert!(!delta.snapshot);
        assert_eq!(
            delta.changes,
            vec![change("", "b", None, 1)],
            "c cancelled out"
        );
        let Some(Kind::Msgs(batch)) = frames.next().await.unwrap().kind else {
            panic!("expected messages");
        };
        let payloads: Vec<u8> = batch.msgs.iter().map(|m| m.payload[0]).collect();
        assert_eq!(payloads, vec![0, 1, 2]);
        s.closed.cancel();
        assert!(frames.next().await.is_none());
    }

    #[tokio::test]
    async fn a_later_hello_follows_the_snapshot() {
        let s = Arc::new(PeerSender::new(Arc::default()));
        let mut frames = Box::pin(s.clone().frames(Hello::default()));
        assert!(matches!(
            frames.next().await.unwrap().kind,
            Some(Kind::Hello(h)) if !h.has_meta_state
        ));
        s.set_snapshot(std::iter::empty());
        s.push_hello(Hello {
            has_meta_state: true,
            ..Hello::default()
        });
        assert!(matches!(
            frames.next().await.unwrap().kind,
            Some(Kind::Interest(i)) if i.snapshot
        ));
        assert!(matches!(
            frames.next().await.unwrap().kind,
            Some(Kind::Hello(h)) if h.has_meta_state
        ));
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let dropped = Arc::new(AtomicU64::new(0));
        let s = PeerSender::new(dropped.clone());
        let big = vec![0u8; MAX_QUEUED_BYTES / 2];
        assert!(s.push_msg(crate::bus::Msg::new("a", &big).to_wire(Vec::new())));
        assert!(!s.push_msg(crate::bus::Msg::new("a", &big).to_wire(Vec::new())));
        assert_eq!(dropped.load(Ordering::Relaxed), 1);
    }
}
