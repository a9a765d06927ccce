//! Failover without waiting for timeouts: when the node link to a group's leader drops, the
//! voters that follow it elect a successor at once instead of waiting out the election timeout
//! (and then the lease on the other voters, up to twice `election_max`), which a quiet group
//! ([`crate::quiesce`]) would never even start.
//!
//! The surviving voters must not split their votes: two candidates of one term that each vote
//! for themselves leave the group leaderless, and a candidate that starts a new term while
//! another's election is still being counted unseats the winner. So they stagger by rank: the
//! voters still reachable, ordered by node id, wait [`STAGGER`] per rank before their first
//! election, and after an election each waits a round (every voter's turn) for it to produce a
//! leader before trying again. A voter skips its turn when its vote went to another candidate
//! while it waited (that election may still be counted), and gives up as soon as any leader
//! other than the lost one is known, or the lost leader is reachable again. A node that, with
//! the voters it still reaches, makes no majority does not campaign: it could not win, and the
//! term it raised would depose the working leader once the cut heals.

use std::time::Duration;

use openraft::async_runtime::WatchReceiver;

use crate::network::Transport;
use crate::registry::GroupRegistry;
use crate::types::GroupRaft;
use crate::{GroupId, NodeId};

/// Delay per rank between the surviving voters' elections: several round trips and a log
/// fsync, so that the first candidate's votes are counted before the next voter looks.
const STAGGER: Duration = Duration::from_millis(250);

/// Random delay added to each wait, so that two voters that disagree on their ranks (one of
/// them has not noticed the loss yet) still rarely collide.
const JITTER_MS: u64 = 50;

/// Rounds of elections (each voter at most one per round) before the election timeout is left
/// to finish the job.
const ROUNDS: u32 = 5;

/// One survivor's view: the group, its Raft handle, the lost leader, and its rank among the
/// voters still reachable.
struct Succession {
    group: GroupId,
    raft: GroupRaft,
    lost: u64,
    rank: u32,
    voters: u32,
}

impl<T: Transport> GroupRegistry<T> {
    /// `peer`'s link dropped: every group here that it leads and in which this node votes gets
    /// a successor elected (see the module documentation).
    pub(crate) fn elect_successors(&self, peer: NodeId) {
        let me = self.node_id().0;
        for (group, raft, _) in self.groups().flags() {
            let (survivors, voters) = {
                let rx = raft.metrics();
                let m = rx.borrow_watched();
                if m.current_leader != Some(peer.0) {
                    continue;
                }
                let voters = m.membership_config.membership().voter_ids().count();
                let mut v: Vec<u64> = m
                    .membership_config
                    .membership()
                    .voter_ids()
                    .filter(|id| *id == me || (*id != peer.0 && self.groups().is_reachable(*id)))
                    .collect();
                v.sort_unstable();
                (v, voters)
            };
            // A node cut off from its majority cannot win: campaigning would only raise its
            // term, and that higher term would depose the working leader once the cut heals.
            if survivors.len() * 2 <= voters {
                continue;
            }
            let Some(rank) = survivors.iter().position(|id| *id == me) else {
                continue;
            };
            let s = Succession {
                group,
                raft,
                lost: peer.0,
                rank: u32::try_from(rank).unwrap_or(u32::MAX),
                voters: u32::try_from(survivors.len()).unwrap_or(u32::MAX),
            };
            let this = self.clone();
            self.spawn_task(async move { this.succeed(s).await });
        }
    }

    /// Whether this node and the voters of `s`'s group it still reaches make a majority.
    fn reaches_majority(&self, s: &Succession) -> bool {
        let me = self.node_id().0;
        let rx = s.raft.metrics();
        let m = rx.borrow_watched();
        let voters: Vec<u64> = m.membership_config.membership().voter_ids().collect();
        let reached = voters
            .iter()
            .filter(|id| **id == me || (**id != s.lost && self.groups().is_reachable(**id)))
            .count();
        reached * 2 > voters.len()
    }

    /// Runs one survivor's turns until a leader other than the lost one is known, the lost one
    /// is reachable again, or [`ROUNDS`] rounds passed.
    async fn succeed(&self, s: Succession) {
        let me = self.node_id().0;
        let round = STAGGER * s.voters.max(1);
        let mut wait = STAGGER * s.rank;
        let mut seen = s.raft.metrics().borrow_watched().vote;
        for attempt in 0..ROUNDS {
            let jitter = Duration::from_millis(rand::random_range(0..JITTER_MS));
            tokio::time::sleep(wait + jitter).await;
            wait = round;
            if self.is_shut_down() || self.groups().is_reachable(s.lost) {
                return;
            }
            let (leader, vote) = {
                let rx = s.raft.metrics();
                let m = rx.borrow_watched();
                (m.current_leader, m.vote)
            };
            if leader.is_some_and(|l| l != s.lost) || !self.reaches_majority(&s) {
                return;
            }
            if vote != seen && vote.leader_id.node_id != me {
                // Another voter's election started while this one waited: give it a round.
                seen = vote;
                continue;
            }
            tracing::info!(group = %s.group, leader = s.lost, attempt, rank = s.rank, "leader unreachable: electing");
            if s.raft.trigger().elect(false).await.is_err() {
                return;
            }
        }
    }
}
