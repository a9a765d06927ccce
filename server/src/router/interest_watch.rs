//! Calls back whoever watches a literal subject when the interest in it may have changed.
//!
//! A push consumer delivers only while its deliver subject has a subscriber, and an ephemeral
//! one is deleted some time after the last one left. Instead of reading the interest on a timer
//! (every consumer engine woke four times a second for it, which for 10,000 idle consumers was
//! a third of a core), an engine watches its deliver subject here and is called back when a
//! subscription that matches it is added or removed, on this node or announced by a peer (both
//! go through the same [`Sublist`](super::Sublist)).
//!
//! Invariants: a callback runs after the change is in the sublist (so a reader it wakes sees
//! it), outside the sublist's lock, and at most once per change; a [`WatchGuard`] removes its
//! watch when dropped. With nobody watching, a change costs one atomic load.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::subject;

/// What a watcher is called with nothing: it reads the interest again itself.
pub type WatchCallback = Arc<dyn Fn() + Send + Sync>;

/// The watches of one sublist, by literal subject.
#[derive(Default)]
pub struct InterestWatch {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// Watches in `by_subject`, for the lock-free fast path.
    count: AtomicUsize,
    next_id: AtomicU64,
    by_subject: Mutex<HashMap<String, Vec<(u64, WatchCallback)>>>,
}

/// Keeps a watch alive; dropping it removes the watch.
pub struct WatchGuard {
    shared: Arc<Shared>,
    subject: String,
    id: u64,
}

impl std::fmt::Debug for WatchGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchGuard")
            .field("subject", &self.subject)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for InterestWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterestWatch")
            .field("watches", &self.shared.count.load(Ordering::Relaxed))
            .finish()
    }
}

impl InterestWatch {
    /// Calls `callback` whenever a subscription matching the literal `subject` is added or
    /// removed, until the guard is dropped.
    pub fn watch(&self, subject: &str, callback: WatchCallback) -> WatchGuard {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        self.shared
            .by_subject
            .lock()
            .entry(subject.to_string())
            .or_default()
            .push((id, callback));
        self.shared.count.fetch_add(1, Ordering::SeqCst);
        WatchGuard {
            shared: self.shared.clone(),
            subject: subject.to_string(),
            id,
        }
    }

    /// A subscription on `pattern` was added or removed: calls back every watch of a subject
    /// it matches.
    pub fn changed(&self, pattern: &str) {
        if self.shared.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let due: Vec<WatchCallback> = {
            let map = self.shared.by_subject.lock();
            if subject::is_literal(pattern) {
                map.get(pattern)
                    .map(|w| w.iter().map(|(_, cb)| cb.clone()).collect())
                    .unwrap_or_default()
            } else {
                map.iter()
                    .filter(|(watched, _)| subject::matches_unchecked(pattern, watched))
                    .flat_map(|(_, w)| w.iter().map(|(_, cb)| cb.clone()))
                    .collect()
            }
        };
        for callback in due {
            callback();
        }
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        let mut map = self.shared.by_subject.lock();
        if let Some(watches) = map.get_mut(&self.subject) {
            let before = watches.len();
            watches.retain(|(id, _)| *id != self.id);
            if watches.len() < before {
                self.shared.count.fetch_sub(1, Ordering::SeqCst);
            }
            if watches.is_empty() {
                map.remove(&self.subject);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(w: &InterestWatch, subject: &str) -> (Arc<AtomicUsize>, WatchGuard) {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let guard = w.watch(
            subject,
            Arc::new(move || {
                c.fetch_add(1, Ordering::SeqCst);
            }),
        );
        (calls, guard)
    }

    #[test]
    fn literal_and_wildcard_changes_reach_the_matching_watches_only() {
        let w = InterestWatch::default();
        let (a, _ga) = counter(&w, "deliver.a");
        let (b, gb) = counter(&w, "deliver.b");
        let (a2, _ga2) = counter(&w, "deliver.a");
        w.changed("deliver.a");
        w.changed("other");
        w.changed("deliver.*");
        w.changed(">");
        w.changed("deliver.c.>");
        assert_eq!(a.load(Ordering::SeqCst), 3);
        assert_eq!(a2.load(Ordering::SeqCst), 3);
        assert_eq!(b.load(Ordering::SeqCst), 2);
        drop(gb);
        w.changed("deliver.b");
        w.changed("deliver.*");
        assert_eq!(
            b.load(Ordering::SeqCst),
            2,
            "no calls after the guard is gone"
        );
        assert_eq!(a.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn dropping_every_guard_empties_the_registry() {
        let w = InterestWatch::default();
        let (_a, g1) = counter(&w, "x");
        let (_b, g2) = counter(&w, "x");
        assert_eq!(w.shared.count.load(Ordering::SeqCst), 2);
        drop(g1);
        drop(g2);
        assert_eq!(w.shared.count.load(Ordering::SeqCst), 0);
        assert!(w.shared.by_subject.lock().is_empty());
    }
}
