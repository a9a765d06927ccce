//! Whether a replica is current (readiness), and handing leadership away (lame duck).
//!
//! A replica is *current* when its group has a leader and either it is that leader, or it has
//! heard from the leader recently (an accepted AppendEntries, heartbeats included, recorded by
//! the inbound transport in [`crate::Groups`]) and has applied everything the leader reported
//! as committed, within a small allowance for entries in flight. A replica that restarted
//! remembers who led before but is not current until the leader has reached it and it caught
//! up: that is what keeps `/healthz` (and so a Kubernetes rollout) waiting after a restart.

use futures_util::FutureExt;
use openraft::async_runtime::WatchReceiver;

use crate::error::RaftError;
use crate::network::Transport;
use crate::registry::GroupRegistry;
use crate::types::GroupRaft;
use crate::{GroupId, NodeId};

/// Committed entries a follower may still be applying and count as current: under steady
/// load a follower is always a few entries behind the leader's last report.
pub const CURRENT_LAG: u64 = 256;

/// How current one replica is ([`GroupRegistry::currency`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Currency {
    /// The group's Raft core is no longer running here (it panicked, or stopped on a fatal
    /// storage error) although the group was not removed: the replica serves nothing until
    /// the node restarts.
    Stopped,
    /// This replica leads the group.
    Leader,
    /// A follower that hears its leader and has applied what the leader committed.
    Current,
    /// No leader is known (election in progress, or no quorum).
    NoLeader,
    /// A leader is remembered but has not been heard from lately (or ever, since start).
    NoContact,
    /// Heard from the leader, but still applying or receiving committed entries.
    Behind {
        /// Last applied index here.
        applied: u64,
        /// Last committed index the leader reported.
        committed: u64,
    },
}

impl Currency {
    /// Whether the replica counts as current (leader or caught-up follower).
    pub fn is_current(&self) -> bool {
        matches!(self, Self::Leader | Self::Current)
    }
}

impl<T: Transport> GroupRegistry<T> {
    /// How current this node's replica of `group` is. Leader contact must be younger than
    /// twice the largest election timeout.
    pub fn currency(&self, group: GroupId) -> Result<Currency, RaftError> {
        let raft = self.raft(group)?;
        if core_stopped(&raft) {
            return Ok(Currency::Stopped);
        }
        let rx = raft.metrics();
        let m = rx.borrow_watched();
        let Some(leader) = m.current_leader else {
            return Ok(Currency::NoLeader);
        };
        if leader == self.node_id().0 {
            return Ok(Currency::Leader);
        }
        let window = self.timing().election_max * 2;
        // A quiet follower agreed with its leader that it is caught up, and would be woken by
        // any write: it counts as heard.
        let heard = self.groups().is_quiet(group)
            || self
                .groups()
                .since_leader_contact(group)
                .is_some_and(|since| since <= window);
        if !heard {
            return Ok(Currency::NoContact);
        }
        let applied = m.last_applied.as_ref().map_or(0, |l| l.index);
        let committed = m.cluster_committed.as_ref().map_or(0, |l| l.index);
        // The slack is for a replica that was caught up and trails a busy group a little; a
        // replica that never caught up since it started (a rebuilt node whose whole log is
        // shorter than the slack) must first apply what was committed when first asked about.
        if !self.groups().caught_up_once(group, applied, committed)
            || applied.saturating_add(CURRENT_LAG) < committed
        {
            return Ok(Currency::Behind { applied, committed });
        }
        Ok(Currency::Current)
    }

    /// Stops (or allows again) this node from starting elections in `group`: a node in lame
    /// duck mode must not take back a leadership it just handed away.
    pub fn set_electable(&self, group: GroupId, electable: bool) -> Result<(), RaftError> {
        self.raft(group)?.runtime_config().elect(electable);
        Ok(())
    }

    /// If this node leads `group`, hands leadership to the voter that is furthest along (least
    /// lag, recently heard) and waits until it took over. Returns the new leader, or `None`
    /// when this node does not lead or no other voter can take over.
    pub async fn hand_off(&self, group: GroupId) -> Result<Option<NodeId>, RaftError> {
        if !self.leader(group)?.is_self {
            return Ok(None);
        }
        let voters: Vec<u64> = self.raft(group)?.voter_ids().collect();
        let window = self.timing().election_min;
        let best = self
            .followers(group)?
            .into_iter()
            .filter(|f| voters.contains(&f.node.0))
            .filter(|f| f.last_ack.is_some_and(|a| a <= window))
            // A voter whose node link is down cannot take over: waiting for it would only
            // hold up a shutdown.
            .filter(|f| self.groups().is_reachable(f.node.0))
            .min_by_key(|f| f.lag)
            .map(|f| f.node);
        let Some(to) = best else {
            return Ok(None);
        };
        self.transfer_leadership(group, to).await?;
        Ok(Some(to))
    }
}

/// Whether `raft`'s core task has ended: it panicked (its metrics channel closed with it) or
/// stopped on a fatal error (its last metrics say so). A group removed or shut down on purpose
/// is no longer in the registry, so for a registered group this means it failed.
pub(crate) fn core_stopped(raft: &GroupRaft) -> bool {
    let mut rx = raft.metrics();
    if rx.borrow_watched().running_state.is_err() {
        return true;
    }
    // `changed` returns an unseen value first, then the closed channel.
    for _ in 0..2 {
        match rx.changed().now_or_never() {
            Some(Err(_closed)) => return true,
            Some(Ok(())) => {
                if rx.borrow_watched().running_state.is_err() {
                    return true;
                }
            }
            None => return false,
        }
    }
    false
}
