//! Server-internal subscriptions: how JetStream (API handlers, stream capture, acks) receives
//! messages from the router without being a client connection.
//!
//! An [`InternalSubs`] index sits beside the client sublist; [`Bus::route`](super::Bus::route)
//! consults both. A match is handed to the subscriber's channel ([`InternalMsg`]) and counts as a
//! delivery (so a request to `$JS.API.>` never gets a no-responders status). Internal interest is
//! local to the node: it is never propagated to peers, so a message published on one node reaches
//! the internal subscribers of that node only; JetStream forwards to owners itself, through node
//! inboxes ([`InternalSubs::subscribe_inbox`]), the only subscriptions that take messages a peer
//! sent.
//!
//! Invariants:
//! - Delivery never blocks the publisher: routing runs inline in a connection's reader (or a
//!   cluster link's task), which must neither wait nor drop a message another subscriber may
//!   take, so the channel is unbounded and the handler task drains it.
//!
//! What bounds a subscriber's queue is its producers. API requests and acks come from clients
//! that wait for their answers (a request per reply subject, acks up to `max_ack_pending`). A
//! stream's capture queue holds the publishes its leader has not yet proposed: publishers that
//! wait for their PubAcks keep at most their in-flight window there. A client that publishes
//! without waiting (fire-and-forget to a stream subject) is paced instead: each queue counts
//! what it holds ([`QueueGauge`]); a delivery that finds more than [`PACE_ABOVE`] messages
//! queued marks the queue in the producer's [`FlushSet`](super::FlushSet), and the client's
//! reader pauses (at most its stall bound per read) until the queue drained to half of that,
//! as it pauses for a slow client receiver. Messages from peers are not paced (a cluster link
//! must not stop for one queue); their senders are paced on their own nodes.
//! - Dropping an [`InternalSub`] removes its interest.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use jetraft_raft::rt::mpsc::{self as growing, TryRecvError};
use tokio::sync::Notify;

use crate::router::{Sublist, SublistError};

/// One message delivered to an internal subscriber.
#[derive(Debug, Clone, PartialEq)]
pub struct InternalMsg {
    /// Subject it was published to.
    pub subject: String,
    /// Reply subject, if any.
    pub reply: Option<String>,
    /// Header block (`NATS/1.0\r\n...`), if any.
    pub hdrs: Option<Bytes>,
    /// Payload.
    pub payload: Bytes,
    /// The account it was published in (the namespace of the subscription that took it).
    pub account: Arc<str>,
}

impl InternalMsg {
    /// A message in the global account `$G` (made by the server itself).
    pub fn global(
        subject: String,
        reply: Option<String>,
        hdrs: Option<Bytes>,
        payload: Bytes,
    ) -> Self {
        Self {
            subject,
            reply,
            hdrs,
            payload,
            account: Arc::from(crate::config::GLOBAL_ACCOUNT),
        }
    }
}

/// Decides synchronously whether a matching subject is taken (a declined message does not
/// count as delivered, so the publisher may get a no-responders status).
pub type AcceptFn = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Queued messages above which a client publishing into an internal queue is paced.
pub const PACE_ABOVE: usize = 16 * 1024;
/// A paced producer goes on once the queue is down to this.
const RESUME_AT: usize = PACE_ABOVE / 2;

/// How many messages an internal subscription's queue holds, and a signal when it drained.
#[derive(Debug, Default)]
pub struct QueueGauge {
    /// Messages sent and not yet received.
    queued: AtomicUsize,
    /// Messages sent since the subscription began (JetStream answers an INFO as of every
    /// publish handed to a stream's capture before the request came, `jetstream::runtime::settle`).
    sent: AtomicU64,
    /// Notified when `queued` falls to [`RESUME_AT`].
    drained: Notify,
}

impl QueueGauge {
    /// Messages queued now.
    pub fn len(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Messages sent since the subscription began.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Acquire)
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a paced producer may go on.
    pub fn resumable(&self) -> bool {
        self.len() <= RESUME_AT
    }

    /// Waits (bounded by the caller) until the queue is down to [`RESUME_AT`].
    pub async fn wait_resumable(&self) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.resumable() {
                return;
            }
            drained.await;
        }
    }

    fn received(&self) {
        if self.queued.fetch_sub(1, Ordering::AcqRel) == RESUME_AT + 1 {
            self.drained.notify_waiters();
        }
    }
}

/// The receiving side of an internal subscription: the messages in routing order, each counted
/// off its [`QueueGauge`] as it is taken.
#[derive(Debug)]
pub struct InternalRx {
    /// `None` once taken by [`InternalSub::take_rx`] (a closed receiver without a channel).
    /// The channel's queue grows with use (a Tokio channel allocates a 32-message block, ~4 KB,
    /// up front: per stream, its capture subscription).
    rx: Option<growing::Receiver<InternalMsg>>,
    gauge: Arc<QueueGauge>,
}

impl InternalRx {
    /// The next message; `None` once the subscription ended and its queue is empty.
    pub async fn recv(&mut self) -> Option<InternalMsg> {
        let msg = self.rx.as_mut()?.recv().await?;
        self.gauge.received();
        Some(msg)
    }

    /// The next message if one is queued.
    pub fn try_recv(&mut self) -> Result<InternalMsg, TryRecvError> {
        let rx = self.rx.as_mut().ok_or(TryRecvError::Disconnected)?;
        let msg = rx.try_recv()?;
        self.gauge.received();
        Ok(msg)
    }

    /// The gauge of this receiver's queue.
    pub fn gauge(&self) -> Arc<QueueGauge> {
        self.gauge.clone()
    }

    fn closed() -> Self {
        Self {
            rx: None,
            gauge: Arc::default(),
        }
    }
}

/// A subscriber entry in the internal index.
#[derive(Clone)]
pub struct InternalRef {
    /// Unique per subscription; equality is by id.
    id: u64,
    /// Where matches go.
    tx: growing::Sender<InternalMsg>,
    /// Optional filter on matching subjects.
    accept: Option<AcceptFn>,
    /// Whether messages forwarded by peers reach it (only node inboxes: a publish is captured
    /// and an API request answered by the node the client used, never again by a peer).
    from_peers: bool,
    /// What its queue holds.
    gauge: Arc<QueueGauge>,
}

impl std::fmt::Debug for InternalRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InternalRef").field("id", &self.id).finish()
    }
}

impl PartialEq for InternalRef {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

/// The node's internal interest index of one account; clones share it.
#[derive(Debug, Clone)]
pub struct InternalSubs {
    /// Patterns to subscribers.
    list: Arc<Sublist<InternalRef>>,
    /// Id source.
    next_id: Arc<AtomicU64>,
    /// The account whose namespace this is (stamped on every message delivered).
    account: Arc<str>,
}

impl Default for InternalSubs {
    fn default() -> Self {
        Self::for_account(Arc::from(crate::config::GLOBAL_ACCOUNT))
    }
}

/// A live internal subscription; dropping it unsubscribes.
#[derive(Debug)]
pub struct InternalSub {
    /// Matched messages, in routing order.
    pub rx: InternalRx,
    /// The entry to remove on drop.
    entry: InternalRef,
    /// The patterns it was inserted under (all feed the one receiver, in routing order).
    subjects: Vec<String>,
    /// The queue group it was inserted under.
    queue: Option<String>,
    /// The index it lives in.
    subs: InternalSubs,
}

impl InternalSub {
    /// Takes the receiver out, leaving a closed one: the caller reads the messages while this
    /// handle stays the subscription (dropping it unsubscribes at once, and the taken receiver
    /// then ends once it has handed out what was already queued).
    pub fn take_rx(&mut self) -> InternalRx {
        std::mem::replace(&mut self.rx, InternalRx::closed())
    }
}

impl Drop for InternalSub {
    fn drop(&mut self) {
        for subject in &self.subjects {
            self.subs
                .list
                .remove(subject, self.queue.as_deref(), &self.entry);
        }
    }
}

impl InternalSubs {
    /// An empty index for `account`'s namespace.
    pub fn for_account(account: Arc<str>) -> Self {
        Self {
            list: Arc::default(),
            next_id: Arc::default(),
            account,
        }
    }

    /// Subscribes to `subject` (wildcards allowed) for messages published on this node.
    pub fn subscribe(&self, subject: &str) -> Result<InternalSub, SublistError> {
        self.insert(subject, None, false)
    }

    /// Subscribes to `subject` for messages published on this node that `accept` approves.
    pub fn subscribe_filtered(
        &self,
        subject: &str,
        accept: AcceptFn,
    ) -> Result<InternalSub, SublistError> {
        self.insert(subject, Some(accept), false)
    }

    /// Subscribes to every pattern of `subjects` with one receiver: messages matching any of
    /// them arrive in the order they were routed (the patterns must not overlap).
    pub fn subscribe_many(&self, subjects: &[&str]) -> Result<InternalSub, SublistError> {
        self.insert_many(subjects, false)
    }

    /// [`Self::subscribe_many`] for messages peers send to this node (a node inbox on several
    /// patterns).
    pub fn subscribe_many_inbox(&self, subjects: &[&str]) -> Result<InternalSub, SublistError> {
        self.insert_many(subjects, true)
    }

    fn insert_many(
        &self,
        subjects: &[&str],
        from_peers: bool,
    ) -> Result<InternalSub, SublistError> {
        let (first, rest) = subjects
            .split_first()
            .ok_or_else(|| SublistError::InvalidSubject {
                subject: String::new(),
            })?;
        let mut sub = self.insert(first, None, from_peers)?;
        for subject in rest {
            // On an error the subscription made so far is dropped, removing what was inserted.
            self.list.insert(subject, None, sub.entry.clone())?;
            sub.subjects.push((*subject).to_string());
        }
        Ok(sub)
    }

    /// Subscribes to `subject` for messages peers send to this node (a node inbox).
    pub fn subscribe_inbox(&self, subject: &str) -> Result<InternalSub, SublistError> {
        self.insert(subject, None, true)
    }

    fn insert(
        &self,
        subject: &str,
        accept: Option<AcceptFn>,
        from_peers: bool,
    ) -> Result<InternalSub, SublistError> {
        let (tx, rx) = growing::unbounded();
        let gauge = Arc::new(QueueGauge::default());
        let entry = InternalRef {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            tx,
            accept,
            from_peers,
            gauge: gauge.clone(),
        };
        self.list.insert(subject, None, entry.clone())?;
        Ok(InternalSub {
            rx: InternalRx {
                rx: Some(rx),
                gauge,
            },
            entry,
            subjects: vec![subject.to_string()],
            queue: None,
            subs: self.clone(),
        })
    }

    /// Hands a message to every matching internal subscriber; returns how many took it.
    /// `from_peer` marks a message a peer forwarded: only inboxes take those. Queues holding
    /// more than [`PACE_ABOVE`] messages are added to `paced` (when given), for the producer
    /// to wait on.
    pub fn deliver(
        &self,
        subject: &str,
        reply: Option<&[u8]>,
        hdrs: Option<&[u8]>,
        payload: &[u8],
        from_peer: bool,
        mut paced: Option<&mut Vec<Arc<QueueGauge>>>,
    ) -> usize {
        let result = self.list.match_subject(subject);
        if result.plain.is_empty() {
            return 0;
        }
        let msg = InternalMsg {
            subject: subject.to_string(),
            reply: reply.map(|r| String::from_utf8_lossy(r).into_owned()),
            hdrs: hdrs.map(Bytes::copy_from_slice),
            payload: Bytes::copy_from_slice(payload),
            account: self.account.clone(),
        };
        let mut taken = 0;
        for r in &result.plain {
            if r.from_peers != from_peer || r.accept.as_ref().is_some_and(|accept| !accept(subject))
            {
                continue;
            }
            let queued = r.gauge.queued.fetch_add(1, Ordering::AcqRel) + 1;
            if r.tx.send_now(msg.clone()).is_err() {
                r.gauge.queued.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
            r.gauge.sent.fetch_add(1, Ordering::Release);
            taken += 1;
            if queued > PACE_ABOVE
                && let Some(paced) = paced.as_deref_mut()
                && !paced.iter().any(|g| Arc::ptr_eq(g, &r.gauge))
            {
                paced.push(r.gauge.clone());
            }
        }
        taken
    }

    /// Whether any internal subscriber matches `subject`.
    pub fn has_interest(&self, subject: &str) -> bool {
        self.list.has_interest(subject)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_subscription_on_several_patterns_keeps_their_routing_order() {
        let subs = InternalSubs::default();
        let mut both = subs.subscribe_many(&["a.>", "b.*"]).unwrap();
        assert_eq!(subs.deliver("b.1", None, None, b"", false, None), 1);
        assert_eq!(subs.deliver("a.x.y", None, None, b"", false, None), 1);
        assert_eq!(subs.deliver("b.2", None, None, b"", false, None), 1);
        let order: Vec<String> = (0..3)
            .filter_map(|_| both.rx.try_recv().ok().map(|m| m.subject))
            .collect();
        assert_eq!(order, ["b.1", "a.x.y", "b.2"]);
        drop(both);
        assert_eq!(subs.deliver("a.x", None, None, b"", false, None), 0);
        assert_eq!(subs.deliver("b.1", None, None, b"", false, None), 0);
        assert!(subs.subscribe_many(&[]).is_err());
    }

    #[test]
    fn matching_messages_reach_the_subscriber_and_drop_unsubscribes() {
        let subs = InternalSubs::default();
        let mut a = subs.subscribe("$JS.API.>").unwrap();
        assert_eq!(
            subs.deliver("$JS.API.INFO", Some(b"r"), None, b"{}", false, None),
            1
        );
        assert_eq!(subs.deliver("other", None, None, b"", false, None), 0);
        // Forwarded by a peer: not for a local-publish subscription.
        assert_eq!(subs.deliver("$JS.API.INFO", None, None, b"", true, None), 0);
        let m = a.rx.try_recv().unwrap();
        assert_eq!(m.subject, "$JS.API.INFO");
        assert_eq!(m.reply.as_deref(), Some("r"));
        assert_eq!(m.payload, Bytes::from_static(b"{}"));
        drop(a);
        assert!(!subs.has_interest("$JS.API.INFO"));
        assert_eq!(
            subs.deliver("$JS.API.INFO", None, None, b"", false, None),
            0
        );
    }

    #[tokio::test]
    async fn a_taken_receiver_gets_the_messages_and_the_one_left_is_closed() {
        let subs = InternalSubs::default();
        let mut sub = subs.subscribe("t.>").unwrap();
        assert_eq!(subs.deliver("t.1", None, None, b"", false, None), 1);
        let mut taken = sub.take_rx();
        assert_eq!(subs.deliver("t.2", None, None, b"", false, None), 1);
        assert!(matches!(sub.rx.try_recv(), Err(TryRecvError::Disconnected)));
        assert!(sub.rx.recv().await.is_none(), "the left one ends at once");
        assert_eq!(taken.recv().await.unwrap().subject, "t.1");
        assert_eq!(taken.try_recv().unwrap().subject, "t.2");
        // Dropping the handle unsubscribes; the taken receiver then ends.
        drop(sub);
        assert_eq!(subs.deliver("t.3", None, None, b"", false, None), 0);
        assert!(taken.recv().await.is_none());
    }

    #[test]
    fn inboxes_take_only_messages_from_peers() {
        let subs = InternalSubs::default();
        let mut inbox = subs.subscribe_inbox("$JSC.F.1.>").unwrap();
        assert_eq!(
            subs.deliver("$JSC.F.1.0.x", None, None, b"", false, None),
            0
        );
        assert_eq!(subs.deliver("$JSC.F.1.0.x", None, None, b"", true, None), 1);
        assert_eq!(inbox.rx.try_recv().unwrap().subject, "$JSC.F.1.0.x");
    }

    #[test]
    fn declined_messages_do_not_count_as_delivered() {
        let subs = InternalSubs::default();
        let accept: AcceptFn = Arc::new(|s: &str| !s.ends_with(".no"));
        let mut sub = subs.subscribe_filtered("a.*", accept).unwrap();
        assert_eq!(subs.deliver("a.no", None, None, b"", false, None), 0);
        assert_eq!(subs.deliver("a.yes", None, None, b"", false, None), 1);
        assert_eq!(sub.rx.try_recv().unwrap().subject, "a.yes");
        assert!(sub.rx.try_recv().is_err());
    }

    #[tokio::test]
    async fn a_queue_past_the_pacing_threshold_is_reported_until_it_drains() {
        let subs = InternalSubs::default();
        let mut sub = subs.subscribe("cap.>").unwrap();
        let mut paced = Vec::new();
        for _ in 0..PACE_ABOVE {
            assert_eq!(
                subs.deliver("cap.a", None, None, b"x", false, Some(&mut paced)),
                1
            );
        }
        assert!(paced.is_empty(), "at the threshold nobody is paced yet");
        for _ in 0..3 {
            subs.deliver("cap.a", None, None, b"x", false, Some(&mut paced));
        }
        assert_eq!(paced.len(), 1, "one entry per queue, however many messages");
        let gauge = paced.pop().unwrap();
        assert_eq!(gauge.len(), PACE_ABOVE + 3);
        assert!(!gauge.resumable());
        // Messages from peers are never paced.
        subs.deliver("cap.a", None, None, b"x", true, Some(&mut paced));
        assert!(paced.is_empty());
        // A paced producer waits until the consumer drained the queue to half the threshold.
        let waiter = tokio::spawn({
            let gauge = gauge.clone();
            async move { gauge.wait_resumable().await }
        });
        while gauge.len() > RESUME_AT + 1 {
            sub.rx.try_recv().unwrap();
        }
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "still one above the resume mark");
        sub.rx.recv().await.unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken at the resume mark")
            .unwrap();
        assert!(gauge.resumable());
        while sub.rx.try_recv().is_ok() {}
        assert!(gauge.is_empty());
    }
}
