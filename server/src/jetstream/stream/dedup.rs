//! The `Nats-Msg-Id` de-duplication index of one stream.
//!
//! An entry lives while `timestamp + duplicate_window > now`, where `now` is the timestamp of
//! the newest applied command (never the local clock), so every replica prunes identically.
//! It is part of the state machine's snapshot; after a restart of a file stream it is rebuilt
//! from the stored messages' `Nats-Msg-Id` headers within the window, as nats-server does (ids of
//! messages removed since then are forgotten, exactly like nats-server after a restart).

use std::collections::{HashMap, VecDeque};

/// A remembered id: where the original was stored and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupHit {
    /// Sequence of the original message.
    pub seq: u64,
    /// Its timestamp (ns).
    pub timestamp_ns: u64,
}

/// Ids seen within the duplicate window, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DedupIndex {
    /// Lookup by id.
    by_id: HashMap<String, DedupHit>,
    /// Insertion order for pruning: `(id, timestamp)`.
    order: VecDeque<(String, u64)>,
}

impl DedupIndex {
    /// The original of `id`, if it is still remembered.
    pub fn get(&self, id: &str) -> Option<DedupHit> {
        self.by_id.get(id).copied()
    }

    /// Remembers `id` (a newer message with the same id replaces the entry).
    pub fn insert(&mut self, id: &str, seq: u64, timestamp_ns: u64) {
        self.by_id
            .insert(id.to_string(), DedupHit { seq, timestamp_ns });
        self.order.push_back((id.to_string(), timestamp_ns));
    }

    /// Forgets entries that fell out of the window as of `now_ns`.
    pub fn prune(&mut self, now_ns: u64, window_ns: u64) {
        while let Some((id, ts)) = self.order.front() {
            if ts.saturating_add(window_ns) > now_ns {
                break;
            }
            if self
                .by_id
                .get(id)
                .is_some_and(|hit| hit.timestamp_ns == *ts)
            {
                self.by_id.remove(id);
            }
            self.order.pop_front();
        }
    }

    /// Entries oldest first: `(id, seq, timestamp)`, for snapshots.
    pub fn entries(&self) -> Vec<(String, u64, u64)> {
        self.order
            .iter()
            .filter_map(|(id, ts)| {
                let hit = self.by_id.get(id)?;
                (hit.timestamp_ns == *ts).then(|| (id.clone(), hit.seq, *ts))
            })
            .collect()
    }

    /// Number of remembered ids.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_after_the_window() {
        let mut d = DedupIndex::default();
        d.insert("a", 1, 100);
        d.insert("b", 2, 150);
        d.prune(199, 100);
        assert_eq!(d.get("a").map(|h| h.seq), Some(1));
        d.prune(200, 100);
        assert_eq!(d.get("a"), None);
        assert_eq!(d.get("b").map(|h| h.seq), Some(2));
        assert_eq!(d.len(), 1);
    }

    #[test]
    fn reinserted_id_survives_pruning_of_its_old_entry() {
        let mut d = DedupIndex::default();
        d.insert("a", 1, 100);
        d.insert("a", 5, 180);
        d.prune(210, 100);
        assert_eq!(d.get("a").map(|h| h.seq), Some(5));
        assert_eq!(d.entries(), vec![("a".to_string(), 5, 180)]);
    }
}
