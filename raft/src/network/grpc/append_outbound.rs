//! The request side of a pipelined append stream: openraft's AppendEntries requests of one
//! group, encoded for the wire as tonic takes them.
//!
//! tonic (hyper's HTTP/2 client) polls this stream itself, on the task that writes the call's
//! body, so a request goes from openraft's replication task to the connection without a task of
//! our own in between. (It used to pass through a pump task and a channel: one more task wake-up
//! per request on the leader, measured with a timestamp probe as part of the ~90 us from the
//! leader's log write to the request leaving it.)
//!
//! Invariant: once the call's answers are dropped ([`Closer`]), the stream drops openraft's
//! request stream at its next poll and ends, which it is woken for at once. openraft's request
//! stream holds what the group's next replication session needs, so it must not stay alive
//! inside an HTTP/2 body that nobody reads any more.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};

use futures_util::Stream;
use futures_util::task::AtomicWaker;
use jetraft_proto::raft as pb;

use crate::convert::append;
use crate::network::AppendRequests;

/// Whether the answers of the call were dropped, with the waker of the body's task.
#[derive(Debug, Default)]
struct Closed {
    closed: AtomicBool,
    waker: AtomicWaker,
}

/// Ends the [`Outbound`] stream it was made with when dropped.
#[derive(Debug)]
pub(super) struct Closer(Arc<Closed>);

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::Release);
        self.0.waker.wake();
    }
}

/// openraft's requests for one group, encoded on the way out, counted in `sent` and signalled on
/// `more` as each is taken.
pub(super) struct Outbound {
    requests: Option<AppendRequests>,
    group: u64,
    from: u64,
    sent: Arc<AtomicU64>,
    more: Arc<tokio::sync::Notify>,
    closed: Arc<Closed>,
}

impl Outbound {
    /// The stream of `requests` of `group` sent by node `from`, and the [`Closer`] that ends it.
    pub(super) fn new(
        requests: AppendRequests,
        group: u64,
        from: u64,
        sent: Arc<AtomicU64>,
        more: Arc<tokio::sync::Notify>,
    ) -> (Self, Closer) {
        let closed = Arc::new(Closed::default());
        let closer = Closer(closed.clone());
        let outbound = Self {
            requests: Some(requests),
            group,
            from,
            sent,
            more,
            closed,
        };
        (outbound, closer)
    }
}

impl Stream for Outbound {
    type Item = pb::AppendEntriesRequest;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        this.closed.waker.register(cx.waker());
        if this.closed.closed.load(Ordering::Acquire) {
            this.requests = None;
        }
        let Some(requests) = this.requests.as_mut() else {
            return Poll::Ready(None);
        };
        match requests.as_mut().poll_next(cx) {
            Poll::Ready(Some(r)) => {
                this.sent.fetch_add(1, Ordering::Relaxed);
                this.more.notify_one();
                Poll::Ready(Some(append::request_to_pb(this.group, this.from, &r)))
            }
            Poll::Ready(None) => {
                this.requests = None;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use openraft::raft::AppendEntriesRequest;

    use crate::types::{GroupVote, JetraftConfig};

    fn heartbeat() -> AppendEntriesRequest<JetraftConfig> {
        AppendEntriesRequest {
            vote: GroupVote::new(1, 1),
            prev_log_id: None,
            entries: vec![],
            leader_commit: None,
        }
    }

    /// Requests pass through encoded and counted; dropping the closer ends the stream and
    /// drops openraft's request stream while it is waiting for more.
    #[tokio::test]
    async fn requests_are_encoded_and_counted_and_the_closer_ends_the_stream() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        // Dropped with the stream: `tx` then sees the receiver gone.
        let requests: AppendRequests = Box::pin(futures_util::stream::unfold(rx, |mut rx| async {
            rx.recv().await.map(|r| (r, rx))
        }));
        let sent = Arc::new(AtomicU64::new(0));
        let more = Arc::new(tokio::sync::Notify::new());
        let (mut out, closer) = Outbound::new(requests, 7, 2, sent.clone(), more.clone());

        tx.send(heartbeat()).unwrap();
        let first = out.next().await.expect("a request");
        assert_eq!((first.group_id, first.from), (7, 2));
        assert_eq!(sent.load(Ordering::Relaxed), 1);
        // The notification is stored for the answer side.
        tokio::time::timeout(std::time::Duration::from_secs(1), more.notified())
            .await
            .expect("signalled");

        // Waiting for the next request, the stream is woken by the closer and ends.
        let next = tokio::spawn(async move { out.next().await.is_none() });
        tokio::task::yield_now().await;
        drop(closer);
        let ended = tokio::time::timeout(std::time::Duration::from_secs(1), next)
            .await
            .expect("woken by the closer")
            .unwrap();
        assert!(ended);
        assert!(tx.is_closed(), "openraft's request stream was dropped");
    }
}
