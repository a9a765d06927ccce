//! A node's shutdown without calls left dangling: once it begins, every Raft call the registry
//! is waiting on gives up with an error before the groups stop, instead of being cut off by
//! the stopped core (which openraft reports as an error in the log).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};

/// Whether the registry is shutting down, and how many calls are still waiting.
#[derive(Debug, Clone)]
pub(crate) struct Stopping {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    stopped: watch::Sender<bool>,
    calls: AtomicUsize,
    idle: Notify,
}

impl Default for Stopping {
    fn default() -> Self {
        Self {
            inner: Arc::new(Inner {
                stopped: watch::Sender::new(false),
                calls: AtomicUsize::new(0),
                idle: Notify::new(),
            }),
        }
    }
}

/// Counts one running call; the last one to finish after shutdown began wakes [`Stopping::stop`].
struct CallGuard<'a>(&'a Inner);

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if self.0.calls.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Stopping {
    /// Whether shutdown began.
    pub(crate) fn is_stopped(&self) -> bool {
        *self.inner.stopped.borrow()
    }

    /// Runs `fut` unless or until shutdown begins; `None` if it did first.
    pub(crate) async fn run<F: Future>(&self, fut: F) -> Option<F::Output> {
        self.inner.calls.fetch_add(1, Ordering::SeqCst);
        let _guard = CallGuard(&self.inner);
        let mut stopped = self.inner.stopped.subscribe();
        if *stopped.borrow_and_update() {
            return None;
        }
        tokio::select! {
            out = fut => Some(out),
            _ = stopped.wait_for(|s| *s) => None,
        }
    }

    /// Runs `fut` to its end unless shutdown began before it started (`None` then). For calls
    /// that must not be dropped halfway: openraft logs an error when the answer to a query
    /// (`with_raft_state`) finds its caller gone. [`stop`](Self::stop) waits for it (bounded).
    pub(crate) async fn run_to_end<F: Future>(&self, fut: F) -> Option<F::Output> {
        self.inner.calls.fetch_add(1, Ordering::SeqCst);
        let _guard = CallGuard(&self.inner);
        if self.is_stopped() {
            return None;
        }
        Some(fut.await)
    }

    /// Resolves once shutdown began (at once if it did). Cancel-safe.
    pub(crate) async fn stopped(&self) {
        let mut stopped = self.inner.stopped.subscribe();
        let _ = stopped.wait_for(|s| *s).await;
    }

    /// Begins shutdown and waits (at most `within`) until no call is running.
    pub(crate) async fn stop(&self, within: Duration) {
        self.inner.stopped.send_replace(true);
        let drained = async {
            loop {
                let idle = self.inner.idle.notified();
                tokio::pin!(idle);
                idle.as_mut().enable();
                if self.inner.calls.load(Ordering::SeqCst) == 0 {
                    return;
                }
                idle.await;
            }
        };
        let _ = tokio::time::timeout(within, drained).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiting_call_gives_up_and_stop_waits_for_it() {
        let s = Stopping::default();
        let call = tokio::spawn({
            let s = s.clone();
            async move { s.run(std::future::pending::<()>()).await }
        });
        tokio::task::yield_now().await;
        tokio::time::timeout(Duration::from_secs(5), s.stop(Duration::from_secs(5)))
            .await
            .expect("stop returns once the call gave up");
        assert_eq!(call.await.ok(), Some(None));
        assert!(s.is_stopped());
        assert_eq!(
            s.run(async { 1 }).await,
            None,
            "no call starts after shutdown"
        );
    }

    #[tokio::test]
    async fn calls_finish_normally_before_shutdown() {
        let s = Stopping::default();
        assert_eq!(s.run(async { 7 }).await, Some(7));
        tokio::time::timeout(Duration::from_secs(1), s.stop(Duration::from_secs(5)))
            .await
            .expect("nothing to wait for");
    }
}
