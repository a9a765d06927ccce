//! Ack deadlines of pending messages, indexed both by stream sequence and by time, so finding
//! what expired and when to wake next costs O(log n) instead of a scan of every pending message.

use std::collections::{BTreeMap, BTreeSet};

/// Deadlines (Unix ns) by stream sequence.
#[derive(Debug, Default)]
pub(crate) struct Deadlines {
    by_seq: BTreeMap<u64, u64>,
    by_time: BTreeSet<(u64, u64)>,
}

impl Deadlines {
    /// Sets (or moves) the deadline of `seq`.
    pub(crate) fn insert(&mut self, seq: u64, at: u64) {
        if let Some(old) = self.by_seq.insert(seq, at) {
            self.by_time.remove(&(old, seq));
        }
        self.by_time.insert((at, seq));
    }

    /// Clears the deadline of `seq`.
    pub(crate) fn remove(&mut self, seq: &u64) {
        if let Some(old) = self.by_seq.remove(seq) {
            self.by_time.remove(&(old, *seq));
        }
    }

    /// Whether no deadline is set.
    pub(crate) fn is_empty(&self) -> bool {
        self.by_seq.is_empty()
    }

    /// Sequences whose deadline is at or before `now`, earliest first (they stay set).
    pub(crate) fn expired(&self, now: u64) -> Vec<u64> {
        self.by_time
            .iter()
            .take_while(|(at, _)| *at <= now)
            .map(|(_, seq)| *seq)
            .collect()
    }

    /// The earliest deadline.
    pub(crate) fn earliest(&self) -> Option<u64> {
        self.by_time.first().map(|(at, _)| *at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_and_expiry() {
        let mut d = Deadlines::default();
        d.insert(1, 50);
        d.insert(2, 10);
        d.insert(3, 30);
        assert_eq!(d.earliest(), Some(10));
        d.insert(2, 100);
        assert_eq!(d.expired(50), vec![3, 1]);
        d.remove(&3);
        assert_eq!(d.expired(60), vec![1]);
        assert_eq!(d.earliest(), Some(50));
        d.remove(&1);
        d.remove(&2);
        assert!(d.is_empty());
        assert_eq!(d.earliest(), None);
    }
}
