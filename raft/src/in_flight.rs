//! Proposals in flight per group, for the log's inline-fsync decision.
//!
//! A single-voter group's commit waits for its own log append only, so the append may fsync on
//! the proposing thread instead of waking the storage syncer and being woken back
//! (`jetraft_storage::rocks::InlineSyncPolicy`): a lone publish then skips two thread
//! wake-ups. That pays only when that proposal is the only work of the group: with more
//! proposals in flight, an fsync on the group's Raft core would stop it from appending the
//! next ones while the disk works (the syncer lets both overlap), and a worker thread held on the
//! disk is missed by everything else. So the registry counts, per group, the proposals a client
//! waits on alone ([`GroupRegistry::submit_for_client`](crate::GroupRegistry::submit_for_client),
//! a publish) and every other proposal, and the policy allows an inline fsync only for exactly
//! one of the first kind and none of the second.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counters of one group's proposals between submission and answer.
#[derive(Debug, Default)]
pub struct InFlight {
    /// Proposals a client waits on (publishes).
    client: AtomicUsize,
    /// Every other proposal (consumer progress, API writes, expiry, sourcing).
    other: AtomicUsize,
}

/// Which counter a proposal is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A proposal a client waits on.
    Client,
    /// Any other proposal.
    Other,
}

impl InFlight {
    /// Counts one proposal of `kind` until the returned guard is dropped.
    pub(crate) fn enter(self: &Arc<Self>, kind: Kind) -> InFlightGuard {
        self.counter(kind).fetch_add(1, Ordering::AcqRel);
        InFlightGuard {
            of: self.clone(),
            kind,
        }
    }

    /// True while exactly one client proposal and nothing else is in flight.
    pub fn lone_client_proposal(&self) -> bool {
        self.client.load(Ordering::Acquire) == 1 && self.other.load(Ordering::Acquire) == 0
    }

    fn counter(&self, kind: Kind) -> &AtomicUsize {
        match kind {
            Kind::Client => &self.client,
            Kind::Other => &self.other,
        }
    }
}

/// Keeps one proposal counted; dropped when its answer arrived (or never will).
#[derive(Debug)]
pub(crate) struct InFlightGuard {
    of: Arc<InFlight>,
    kind: Kind,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.of.counter(self.kind).fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_lone_client_proposal_counts_as_lone() {
        let f = Arc::new(InFlight::default());
        assert!(!f.lone_client_proposal(), "nothing in flight");
        let first = f.enter(Kind::Client);
        assert!(f.lone_client_proposal());
        let second = f.enter(Kind::Client);
        assert!(!f.lone_client_proposal(), "two publishes in flight");
        drop(second);
        let other = f.enter(Kind::Other);
        assert!(
            !f.lone_client_proposal(),
            "a consumer's progress in flight too"
        );
        drop(other);
        assert!(f.lone_client_proposal());
        drop(first);
        assert!(!f.lone_client_proposal());
    }
}
