//! [`TailCache`]: the newest entries of one group's log, kept in memory after they are written.
//!
//! Entries are read back right after they are appended: by the state machine worker once they
//! commit and, on a leader, by each follower's replication stream. Served from here, those reads
//! skip a RocksDB iterator, a CRC check, a decode and the copy of every payload. Followers that
//! fall behind, and every read after a restart, go to RocksDB as before.
//!
//! Invariants:
//! - The cached entries have contiguous indexes and, when there are any, end at the log's last
//!   entry: the store reports every append (once the entries are readable), truncation and purge
//!   here, in the order it makes them, under the same lock as the reads.
//! - A read is answered only when the cache holds its first index; otherwise the caller reads
//!   RocksDB. So a cache that dropped entries can only make reads slower, never different.
//! - Bounded: per group by entries and bytes, per process by a shared byte budget. Entries
//!   leave from the oldest end; one that fits nowhere is simply not kept.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Most entries one group keeps.
const MAX_ENTRIES: usize = 256;
/// Most stored bytes one group keeps.
const MAX_BYTES: usize = 4 << 20;
/// Most stored bytes all groups of the process keep together.
const BUDGET_BYTES: usize = 64 << 20;

/// Bytes cached by every group of the process.
static CACHED_BYTES: AtomicUsize = AtomicUsize::new(0);

/// One cached entry: its index, its stored size (what RocksDB holds) and the entry.
struct Slot<E> {
    index: u64,
    bytes: usize,
    entry: E,
}

/// The newest entries of one group's log (see the module doc).
pub(crate) struct TailCache<E> {
    slots: VecDeque<Slot<E>>,
    bytes: usize,
}

impl<E> Default for TailCache<E> {
    fn default() -> Self {
        Self {
            slots: VecDeque::new(),
            bytes: 0,
        }
    }
}

impl<E: Clone> TailCache<E> {
    /// Records an entry just appended at `index`, `bytes` long as stored.
    pub(crate) fn appended(&mut self, index: u64, bytes: usize, entry: E) {
        if self.slots.back().is_some_and(|s| s.index + 1 != index) {
            // Not the next index: the log was truncated or restarted past a snapshot.
            self.clear();
        }
        self.slots.push_back(Slot {
            index,
            bytes,
            entry,
        });
        self.bytes += bytes;
        CACHED_BYTES.fetch_add(bytes, Ordering::Relaxed);
        while !self.slots.is_empty()
            && (self.slots.len() > MAX_ENTRIES
                || self.bytes > MAX_BYTES
                || CACHED_BYTES.load(Ordering::Relaxed) > BUDGET_BYTES)
        {
            self.pop_front();
        }
    }

    /// Drops the entries from index `from` on (the log was truncated there).
    pub(crate) fn truncate_from(&mut self, from: u64) {
        while self.slots.back().is_some_and(|s| s.index >= from) {
            if let Some(s) = self.slots.pop_back() {
                self.release(s.bytes);
            }
        }
    }

    /// Drops the entries up to and including index `upto` (the log was purged there).
    pub(crate) fn purge_through(&mut self, upto: u64) {
        while self.slots.front().is_some_and(|s| s.index <= upto) {
            self.pop_front();
        }
    }

    /// Drops every entry.
    pub(crate) fn clear(&mut self) {
        while !self.slots.is_empty() {
            self.pop_front();
        }
    }

    /// The entries from `start` up to `end` (exclusive, `None` = the last), stopping after the
    /// entry that brings the stored bytes to `max_bytes` (at least one entry), exactly as a read
    /// of the log would; `None` when the cache does not hold `start`.
    pub(crate) fn read(
        &self,
        start: u64,
        end: Option<u64>,
        max_bytes: Option<usize>,
    ) -> Option<Vec<E>> {
        let first = self.slots.front()?.index;
        if start < first {
            return None;
        }
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let from = usize::try_from(start - first).unwrap_or(usize::MAX);
        for s in self.slots.iter().skip(from) {
            if end.is_some_and(|e| s.index >= e) || max_bytes.is_some_and(|max| bytes >= max) {
                break;
            }
            bytes += s.bytes;
            out.push(s.entry.clone());
        }
        Some(out)
    }

    fn pop_front(&mut self) {
        if let Some(s) = self.slots.pop_front() {
            self.release(s.bytes);
        }
    }

    fn release(&mut self, bytes: usize) {
        self.bytes -= bytes;
        CACHED_BYTES.fetch_sub(bytes, Ordering::Relaxed);
    }
}

impl<E> Drop for TailCache<E> {
    fn drop(&mut self) {
        CACHED_BYTES.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(indexes: std::ops::RangeInclusive<u64>) -> TailCache<u64> {
        let mut c = TailCache::default();
        for i in indexes {
            c.appended(i, 10, i);
        }
        c
    }

    #[test]
    fn reads_are_answered_only_from_the_first_cached_index_on() {
        let c = filled(5..=9);
        assert_eq!(c.read(4, None, None), None, "index 4 is not cached");
        assert_eq!(c.read(5, None, None), Some(vec![5, 6, 7, 8, 9]));
        assert_eq!(c.read(7, Some(9), None), Some(vec![7, 8]));
        assert_eq!(
            c.read(10, None, None),
            Some(vec![]),
            "past the last entry: none"
        );
        assert_eq!(c.read(6, None, Some(25)), Some(vec![6, 7, 8]));
        assert_eq!(
            c.read(6, None, Some(1)),
            Some(vec![6]),
            "at least one entry"
        );
        assert_eq!(TailCache::<u64>::default().read(0, None, None), None);
    }

    #[test]
    fn truncation_purge_and_a_gap_keep_the_entries_contiguous() {
        let mut c = filled(1..=6);
        c.truncate_from(4);
        assert_eq!(c.read(1, None, None), Some(vec![1, 2, 3]));
        c.appended(4, 10, 40);
        assert_eq!(c.read(3, None, None), Some(vec![3, 40]));
        c.purge_through(2);
        assert_eq!(c.read(2, None, None), None);
        assert_eq!(c.read(3, None, None), Some(vec![3, 40]));
        // An append that does not follow the last entry starts the cache over.
        c.appended(9, 10, 9);
        assert_eq!(c.read(3, None, None), None);
        assert_eq!(c.read(9, None, None), Some(vec![9]));
        c.truncate_from(0);
        assert_eq!(c.read(9, None, None), None);
    }

    #[test]
    fn a_group_keeps_at_most_its_bounds() {
        let c = filled(1..=(MAX_ENTRIES as u64 + 10));
        assert_eq!(c.slots.len(), MAX_ENTRIES);
        assert_eq!(c.read(11, Some(12), None), Some(vec![11]));
        assert_eq!(c.read(10, None, None), None);
        let mut big = TailCache::default();
        big.appended(1, MAX_BYTES, 1u64);
        big.appended(2, 1, 2);
        assert_eq!(big.read(1, None, None), None, "the oldest made way");
        assert_eq!(big.read(2, None, None), Some(vec![2]));
        big.appended(3, MAX_BYTES + 1, 3);
        assert_eq!(
            big.read(3, None, None),
            None,
            "an entry over the bound is not kept"
        );
    }
}
