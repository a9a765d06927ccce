//! Interest bookkeeping, pure and lock-free: [`LocalInterest`] counts this node's client
//! subscriptions per `(subject, queue)` and reports when a pattern appears or disappears, which
//! is all peers need to know; [`RemoteInterest`] holds what one peer told us, and reports when a
//! pattern must be inserted into or removed from the sublist.
//!
//! Only presence crosses the wire: a node forwards a message to a peer once however many of the
//! peer's subscriptions match, and picks one node per queue group, so counts stay local.

use std::collections::HashMap;

/// The account (as the links name it: empty for `$G`), a subscription pattern and its queue
/// group (`None`: plain subscription).
pub type InterestKey = (String, String, Option<String>);

/// A pattern became present (`Added`) or absent (`Removed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// First subscription on the pattern.
    Added,
    /// Last subscription on the pattern went away.
    Removed,
}

impl Transition {
    /// The delta sent to peers for this transition.
    pub fn delta(self) -> i32 {
        match self {
            Self::Added => 1,
            Self::Removed => -1,
        }
    }
}

/// This node's client subscriptions, counted per pattern.
#[derive(Debug, Default)]
pub struct LocalInterest {
    /// Live subscriptions per pattern; a key is present only while its count is positive.
    counts: HashMap<InterestKey, u32>,
}

impl LocalInterest {
    /// Counts one more subscription; `Some(Added)` when it is the first on the pattern.
    pub fn add(&mut self, key: InterestKey) -> Option<Transition> {
        let n = self.counts.entry(key).or_insert(0);
        *n += 1;
        (*n == 1).then_some(Transition::Added)
    }

    /// Counts one subscription less; `Some(Removed)` when it was the last on the pattern.
    pub fn remove(&mut self, key: &InterestKey) -> Option<Transition> {
        let n = self.counts.get_mut(key)?;
        *n -= 1;
        if *n == 0 {
            self.counts.remove(key);
            return Some(Transition::Removed);
        }
        None
    }

    /// Every present pattern, for the snapshot sent on a new link.
    pub fn keys(&self) -> impl Iterator<Item = &InterestKey> {
        self.counts.keys()
    }
}

/// What one peer told us about its interest, during one link session.
#[derive(Debug, Default)]
pub struct RemoteInterest {
    /// The inbound link session these counts came from.
    pub session: u64,
    /// Count per pattern as announced by the peer; present only while positive.
    counts: HashMap<InterestKey, u32>,
}

impl RemoteInterest {
    /// Empty interest for a new link session.
    pub fn new(session: u64) -> Self {
        Self {
            session,
            counts: HashMap::new(),
        }
    }

    /// Applies a peer's delta; returns the sublist change it causes, if any. Negative counts
    /// (a peer removing what it never announced) are clamped at zero.
    pub fn apply(&mut self, key: InterestKey, delta: i32) -> Option<Transition> {
        if delta == 0 {
            return None;
        }
        let before = self.counts.get(&key).copied().unwrap_or(0);
        let after = before.saturating_add_signed(delta);
        if after == 0 {
            self.counts.remove(&key);
        } else {
            self.counts.insert(key, after);
        }
        match (before, after) {
            (0, a) if a > 0 => Some(Transition::Added),
            (b, 0) if b > 0 => Some(Transition::Removed),
            _ => None,
        }
    }

    /// Removes everything, returning the patterns that were present.
    pub fn drain(&mut self) -> Vec<InterestKey> {
        self.counts.drain().map(|(k, _)| k).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str, q: Option<&str>) -> InterestKey {
        (String::new(), s.to_string(), q.map(str::to_string))
    }

    #[test]
    fn local_interest_reports_only_first_and_last() {
        let mut l = LocalInterest::default();
        assert_eq!(l.add(key("a", None)), Some(Transition::Added));
        assert_eq!(l.add(key("a", None)), None);
        assert_eq!(l.add(key("a", Some("q"))), Some(Transition::Added));
        assert_eq!(l.remove(&key("a", None)), None);
        assert_eq!(l.remove(&key("a", None)), Some(Transition::Removed));
        assert_eq!(
            l.remove(&key("a", None)),
            None,
            "removing the absent is a no-op"
        );
        let keys: Vec<_> = l.keys().cloned().collect();
        assert_eq!(keys, vec![key("a", Some("q"))]);
    }

    #[test]
    fn remote_interest_follows_counts_and_clamps_at_zero() {
        let mut r = RemoteInterest::new(7);
        assert_eq!(r.apply(key("x.>", None), 2), Some(Transition::Added));
        assert_eq!(r.apply(key("x.>", None), -1), None);
        assert_eq!(r.apply(key("x.>", None), -1), Some(Transition::Removed));
        assert_eq!(r.apply(key("x.>", None), -1), None);
        assert_eq!(r.apply(key("x.>", None), 1), Some(Transition::Added));
        assert_eq!(r.apply(key("y", None), 0), None);
        assert_eq!(r.drain(), vec![key("x.>", None)]);
        assert!(r.drain().is_empty());
    }
}
