//! [`ViewsOut`]: the lazy snapshot views of one group that are still being sent, so that the
//! group does not purge the log a replica needs right after the snapshot it is receiving.
//!
//! A snapshot view is taken at the last applied entry when the send starts; the replica that
//! installs it then needs every entry after it from the log. openraft builds a snapshot every
//! `snapshot_policy` entries and purges the log behind it (up to `max_in_snapshot_log_to_keep`
//! entries before it), and it guards only the log ranges in flight, not those a snapshot in
//! flight will need next. A large snapshot takes long to send (2 GB: about a minute), a busy
//! stream adds many more entries than that meanwhile, and the replica that installed the
//! snapshot found its next entries gone and had to receive a second one. While a view is out
//! (the gRPC sender holds it until the replica answered, that is installed it), the group's
//! policy-based snapshot builds are deferred (the log is not purged behind them); builds that
//! replication needs (`force`) still happen. After that, openraft's own guard keeps the entries
//! that replication has in flight.
//!
//! Bounded: a view older than [`HOLD_MAX`] no longer defers builds, so a view that is never
//! dropped cannot make the log grow without end.
//!
//! After the install the replica replays the entries written while the snapshot was on its way
//! (tens of thousands on a busy stream), and openraft's next build (every 5,000 entries, purging
//! up to 1,000 before it) purged them before it got there: on a busy 2 GB stream the replica
//! was sent one snapshot after another, each larger, and never caught up. So builds also wait
//! while a replica the leader heard from recently is further behind than the log a build keeps
//! ([`ViewsOut::replica_needs_log`]). That hold is bounded by what a new snapshot would cost:
//! it lasts while the log since the last build is under [`REPLAYING_HOLD_MIN_ENTRIES`] entries,
//! or smaller in bytes than the last snapshot sent (resending the state costs at least that much,
//! so replaying the log is the cheaper way back). Past both, builds resume, so a replica that
//! never catches up cannot make the log grow without end (at most about the state's size again
//! on disk). A fixed entry bound alone (50,000) still looped on a busy 2 GB stream: its replica
//! replays 15-20 s of 4 KiB publishes after the install, more than 50,000 entries.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::snapshot_data::{SnapshotChunks, SnapshotData, SnapshotSource};

/// The longest one view defers the group's snapshot builds.
pub(crate) const HOLD_MAX: Duration = Duration::from_secs(600);

/// Builds wait for a replaying replica at least while the log since the last build is shorter
/// than this many entries, however small the last snapshot sent was.
pub(crate) const REPLAYING_HOLD_MIN_ENTRIES: u64 = 50_000;

/// When a reachable replica still needs log entries a build would purge: how many entries the
/// log holds since the last snapshot build; `None` when no replica needs them.
pub(crate) type LagCheck = Box<dyn Fn() -> Option<u64> + Send + Sync>;

/// The views of one group handed out for sending and not yet dropped. Cheap to clone (shared).
#[derive(Clone, Default)]
pub(crate) struct ViewsOut {
    inner: Arc<Mutex<Views>>,
    /// Set once the group runs (it reads the group's Raft metrics).
    lag: Arc<OnceLock<LagCheck>>,
    /// Bytes of commands applied since the last snapshot build (about the log a build purges).
    applied_since_build: Arc<AtomicU64>,
    /// Size of the last lazy snapshot handed out for sending (0: none since start).
    last_sent: Arc<AtomicU64>,
}

#[derive(Default)]
struct Views {
    next_id: u64,
    /// When each view still out was taken, by id.
    taken: HashMap<u64, Instant>,
}

impl ViewsOut {
    /// Wraps a lazy snapshot so it counts as out until its last handle (and every pass over
    /// its chunks) is dropped; in-memory snapshots are returned as they are.
    pub(crate) fn track(&self, data: SnapshotData) -> SnapshotData {
        let SnapshotData::Lazy(inner) = data else {
            return data;
        };
        self.last_sent.store(inner.size_hint(), Ordering::Relaxed);
        let id = {
            let mut views = self.inner.lock();
            let id = views.next_id;
            views.next_id += 1;
            views.taken.insert(id, Instant::now());
            id
        };
        SnapshotData::Lazy(Arc::new(Tracked {
            inner,
            _out: Out {
                views: self.clone(),
                id,
            },
        }))
    }

    /// Sets how to tell that a reachable replica still replays the log; set once.
    pub(crate) fn set_lag_check(&self, lag: LagCheck) {
        let _ = self.lag.set(lag);
    }

    /// Notes `bytes` of commands applied (the log grows by about as much).
    pub(crate) fn note_applied(&self, bytes: u64) {
        self.applied_since_build.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Notes a snapshot build: the log behind it may go.
    pub(crate) fn note_built(&self) {
        self.applied_since_build.store(0, Ordering::Relaxed);
    }

    /// Whether a reachable replica still replays log entries a build would purge (see the
    /// group's lag check; false until it is set), and keeping the log for it is still cheaper
    /// than a new snapshot (see the module docs).
    pub(crate) fn replica_needs_log(&self) -> bool {
        let Some(entries) = self.lag.get().and_then(|lag| lag()) else {
            return false;
        };
        entries < REPLAYING_HOLD_MIN_ENTRIES
            || self.applied_since_build.load(Ordering::Relaxed)
                < self.last_sent.load(Ordering::Relaxed)
    }

    /// Whether a view taken less than [`HOLD_MAX`] ago is still out.
    pub(crate) fn holding(&self) -> bool {
        self.holding_at(Instant::now())
    }

    /// [`Self::holding`] as of `now`.
    fn holding_at(&self, now: Instant) -> bool {
        self.inner
            .lock()
            .taken
            .values()
            .any(|at| now.saturating_duration_since(*at) < HOLD_MAX)
    }
}

/// Counts one view out while alive.
struct Out {
    views: ViewsOut,
    id: u64,
}

impl Drop for Out {
    fn drop(&mut self) {
        self.views.inner.lock().taken.remove(&self.id);
    }
}

/// A lazy snapshot that counts as out while any handle or pass is alive.
struct Tracked {
    inner: Arc<dyn SnapshotSource>,
    _out: Out,
}

impl SnapshotSource for Tracked {
    fn chunks(self: Arc<Self>) -> SnapshotChunks {
        // The pass keeps the view counted out until it is dropped, even if every other handle
        // to the snapshot is gone first.
        Box::new(Pass {
            chunks: self.inner.clone().chunks(),
            _view: self,
        })
    }

    fn size_hint(&self) -> u64 {
        self.inner.size_hint()
    }
}

/// One pass over a [`Tracked`] view's chunks, holding the view.
struct Pass {
    chunks: SnapshotChunks,
    _view: Arc<Tracked>,
}

impl Iterator for Pass {
    type Item = <SnapshotChunks as Iterator>::Item;

    fn next(&mut self) -> Option<Self::Item> {
        self.chunks.next()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn a_lazy_view_holds_until_its_last_handle_and_pass_are_dropped() {
        let views = ViewsOut::default();
        let data = views.track(SnapshotData::Lazy(Arc::new(Sized(1))));
        assert!(views.holding());
        let copy = data.clone();
        let pass = data.chunks();
        drop(data);
        drop(copy);
        assert!(
            views.holding(),
            "a pass over the chunks still reads the view"
        );
        assert_eq!(
            pass.map(|c| c.unwrap()).collect::<Vec<_>>(),
            [Bytes::from_static(b"x")]
        );
        assert!(!views.holding());
    }

    /// A snapshot source of `size` bytes (one chunk of `x`s).
    struct Sized(u64);

    impl SnapshotSource for Sized {
        fn chunks(self: Arc<Self>) -> SnapshotChunks {
            Box::new(std::iter::once(Ok(Bytes::from(vec![
                b'x';
                self.0 as usize
            ]))))
        }
        fn size_hint(&self) -> u64 {
            self.0
        }
    }

    /// Views whose lag check reports `entries` since the last build while `lagging` holds.
    fn lagging_views(entries: u64) -> (ViewsOut, Arc<std::sync::atomic::AtomicBool>) {
        let views = ViewsOut::default();
        let lagging = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let flag = lagging.clone();
        views.set_lag_check(Box::new(move || {
            flag.load(Ordering::Relaxed).then_some(entries)
        }));
        (views, lagging)
    }

    #[test]
    fn a_replica_replaying_the_log_holds_while_its_check_says_so() {
        assert!(!ViewsOut::default().replica_needs_log(), "no check set");
        let (views, lagging) = lagging_views(10);
        assert!(views.replica_needs_log());
        lagging.store(false, Ordering::Relaxed);
        assert!(!views.replica_needs_log());
    }

    #[test]
    fn a_long_log_holds_only_while_it_is_smaller_than_the_last_snapshot_sent() {
        let (views, _lagging) = lagging_views(REPLAYING_HOLD_MIN_ENTRIES);
        assert!(
            !views.replica_needs_log(),
            "past the entry bound with no snapshot sent: builds resume"
        );
        let sent = views.track(SnapshotData::Lazy(Arc::new(Sized(1000))));
        drop(sent);
        views.note_applied(999);
        assert!(
            views.replica_needs_log(),
            "replaying is cheaper than resending"
        );
        views.note_applied(1);
        assert!(
            !views.replica_needs_log(),
            "the log is as large as the snapshot"
        );
        views.note_built();
        assert!(views.replica_needs_log(), "a build starts the count again");
    }

    #[test]
    fn in_memory_snapshots_and_old_views_do_not_hold() {
        let views = ViewsOut::default();
        let bytes = views.track(SnapshotData::from(Bytes::from_static(b"abc")));
        assert!(!views.holding());
        assert_eq!(bytes.into_bytes().unwrap(), Bytes::from_static(b"abc"));
        let lazy = views.track(SnapshotData::Lazy(Arc::new(Sized(1))));
        assert!(views.holding());
        assert!(
            !views.holding_at(Instant::now() + HOLD_MAX),
            "a view older than HOLD_MAX no longer holds"
        );
        drop(lazy);
    }
}
