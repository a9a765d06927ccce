//! `$JS.API.STREAM.PEER.REMOVE.<stream>` and the replica moves it causes.
//!
//! The meta leader answers the request as nats-server does (`jsStreamRemovePeerRequest`):
//! 10010 when not clustered, 10003 for an empty body or peer, 10059 for an unknown stream, 10040
//! when the peer (a server name, or a node id in hex) holds no replica of the stream, and 10075
//! when no other node can take its place (e.g. an R3 stream on three nodes). Otherwise it
//! replaces the peer in the stream assignment with the least loaded node that has no replica,
//! records that node as `joining`, and answers success at once; the move happens afterwards:
//!
//! 1. the joining node starts the stream's group uninitialised and waits (it never initialises a
//!    group it joins: that would make it a second, empty group);
//! 2. the stream's leader ([`JetStream::drive_membership`], from reconcile) adds every assigned
//!    node that is not a voter as a learner (which waits until it caught up, by log or snapshot),
//!    then makes the assigned nodes the voter set, removing the replaced peer;
//! 3. the removed peer keeps its replica while it is still a voter (an R1 stream's only copy is
//!    its data; a follower's vote may be needed to commit the change), and drops it once the
//!    new membership excludes it; a leader that is removed hands its leadership to a staying
//!    voter first.
//!
//! A change of `num_replicas` or `placement` (`scale`) moves replicas the same way.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jetraft_proto::meta::{StreamAssignment, meta_command};
use jetraft_raft::{NodeId, PeerNode, RemovedVoters};
use jetraft_storage::stream::StreamUid;
use serde::Deserialize;
use tracing::{info, warn};

use super::JetStream;
use super::api::meta_answer;
use super::replica::LocalStream;
use crate::bus::internal::InternalMsg;
use crate::jetstream::api::types::StreamConfig;
use crate::jetstream::api::types::requests::{ApiRequest, BodyRule, parse_body};
use crate::jetstream::api::{ApiError, ErrorKind};

/// A follower of a stream it is no longer assigned that has not heard from the leader for this
/// long was removed from the group (see [`JetStream::still_needed_here`]).
const LEAVE_GRACE: Duration = Duration::from_secs(4);
/// The same while the move is not finished in the follower's view.
const LEAVE_LONG: Duration = Duration::from_secs(60);

/// A replica that is no longer assigned here but still runs (see
/// [`JetStream::still_needed_here`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Leaving {
    /// When this node last led the group, or, when `led` is false, when the replica was first
    /// found unassigned.
    pub(super) since: Instant,
    /// Whether this node led the group since the replica was unassigned here.
    pub(super) led: bool,
}

/// Whether a replica no longer assigned here, on a node that is still one of the group's
/// voters in its own view but does not lead it, must keep running. `since` and `led` are its
/// [`Leaving`] record's, `heard` the time since a leader last replicated to it, and `settled`
/// whether every assigned node is a voter in its view.
///
/// - A leader that handed its leadership off (a leader that is not wanted does so before the
///   change, `change_members`) has heard from no leader since: its vote may be needed to elect
///   the successor (a group of two voters, e.g. an R1 stream moving off a removed server) and
///   to commit its own removal, so it stays until a leader contacts it, for up to
///   [`LEAVE_LONG`].
/// - Otherwise the signal is silence, as a removed follower is not told so (the leader stops
///   replicating to it): it stays while it heard from a leader (or was found unassigned) less
///   than [`LEAVE_GRACE`] ago (an R3 stream going to R1 cannot commit without one of the
///   followers), or less than [`LEAVE_LONG`] ago while some assigned node is not a voter in
///   its view yet (a move still in progress whose leader may need it after a failover).
pub(super) fn keeps_leaving_replica(
    since: Duration,
    led: bool,
    heard: Option<Duration>,
    settled: bool,
) -> bool {
    let heard_since = heard.filter(|h| *h < since);
    if led && heard_since.is_none() {
        return since < LEAVE_LONG;
    }
    let quiet = heard.map_or(since, |h| h.min(since));
    quiet < LEAVE_GRACE || (!settled && quiet < LEAVE_LONG)
}

/// `$JS.API.STREAM.PEER.REMOVE` request body.
#[derive(Debug, Clone, Default, Deserialize)]
pub(super) struct PeerRemoveRequest {
    /// The peer to remove: a server name or a node id.
    #[serde(default)]
    pub(super) peer: String,
}

impl ApiRequest for PeerRemoveRequest {
    const GO_TYPE: &'static str = "server.JSApiStreamRemovePeerRequest";
}

impl JetStream {
    /// Answers STREAM.PEER.REMOVE on the meta leader.
    pub(super) async fn stream_peer_remove(
        &self,
        name: &str,
        msg: &InternalMsg,
    ) -> Result<String, ApiError> {
        if !self.clustered() {
            return Err(ApiError::new(ErrorKind::ClusterRequired));
        }
        let req: PeerRemoveRequest =
            parse_body(BodyRule::Required, &msg.payload)?.ok_or_else(ApiError::bad_request)?;
        if req.peer.is_empty() {
            return Err(ApiError::bad_request());
        }
        let sa = self
            .meta
            .read(|m| m.stream(name).cloned())
            .ok_or_else(ApiError::stream_not_found)?;
        let peer = self.meta.read(|m| {
            m.peers()
                .values()
                .find(|p| p.server_name == req.peer || format!("{:x}", p.node_id) == req.peer)
                .map(|p| p.node_id)
        });
        let Some(peer) = peer.filter(|p| sa.replicas.contains(p)) else {
            return Err(ApiError::new(ErrorKind::ClusterPeerNotMember));
        };
        // The replacement fits the stream's placement too.
        let cfg = serde_json::from_slice::<StreamConfig>(&sa.config_json).unwrap_or_default();
        let Some(replacement) =
            (self.pick_new(&cfg, &sa.replicas, 1).ok()).and_then(|p| p.first().copied())
        else {
            return Err(ApiError::new(ErrorKind::PeerRemap));
        };
        meta_answer(self.replace_replica(sa, peer, replacement).await?)?;
        info!(stream = %name, removed = peer, added = replacement, "stream peer replaced");
        Ok(
            "{\"type\":\"io.nats.jetstream.api.v1.stream_remove_peer_response\",\"success\":true}"
                .to_string(),
        )
    }

    /// Proposes `sa` with replica `old` replaced by `new`, recorded as joining (the stream's
    /// leader then adds it as a learner and swaps the voters). Used by STREAM.PEER.REMOVE and
    /// when a node that lost its data came back under a new id.
    pub(super) async fn replace_replica(
        &self,
        sa: StreamAssignment,
        old: u64,
        new: u64,
    ) -> Result<jetraft_proto::meta::MetaResult, ApiError> {
        let replicas: Vec<u64> = sa
            .replicas
            .iter()
            .map(|r| if *r == old { new } else { *r })
            .collect();
        let mut joining: Vec<u64> = sa
            .joining
            .iter()
            .copied()
            .filter(|j| replicas.contains(j) && *j != new)
            .collect();
        joining.push(new);
        let updated = StreamAssignment {
            replicas,
            joining,
            ..sa
        };
        self.propose_meta(meta_command::Op::UpdateStream(updated))
            .await
    }

    /// Whether this node must keep its replica of a stream it is no longer assigned (the
    /// `assigned` nodes): it is still one of the group's voters as far as it knows, and it
    /// leads the group or [`keeps_leaving_replica`] says its vote may still be needed.
    /// `leaving` records, per replica, since when it is unassigned here and whether this node
    /// led it since.
    pub(super) fn still_needed_here(
        &self,
        ls: &LocalStream,
        assigned: &[u64],
        leaving: &mut HashMap<StreamUid, Leaving>,
    ) -> bool {
        let Ok(raft) = self.registry.raft(ls.group()) else {
            return false;
        };
        let voters: BTreeSet<u64> = raft.voter_ids().collect();
        if !voters.contains(&self.node.0) {
            return false;
        }
        let leads = self
            .registry
            .leader(ls.group())
            .is_ok_and(|info| info.is_self);
        if leads {
            leaving.insert(
                ls.uid,
                Leaving {
                    since: Instant::now(),
                    led: true,
                },
            );
            return true;
        }
        let entry = leaving.entry(ls.uid).or_insert_with(|| Leaving {
            since: Instant::now(),
            led: false,
        });
        keeps_leaving_replica(
            entry.since.elapsed(),
            entry.led,
            self.registry.groups().since_leader_contact(ls.group()),
            assigned.iter().all(|a| voters.contains(a)),
        )
    }

    /// On the stream's leader: makes the group's voters the assigned replicas (adding the new
    /// ones as learners first). Runs in its own task, one at a time per stream.
    pub(super) fn drive_membership(
        self: &Arc<Self>,
        moving: &mut HashMap<StreamUid, tokio::task::JoinHandle<()>>,
        ls: &Arc<LocalStream>,
        assigned: &[u64],
    ) {
        let Ok(raft) = self.registry.raft(ls.group()) else {
            return;
        };
        if !self
            .registry
            .leader(ls.group())
            .is_ok_and(|info| info.is_self)
        {
            return;
        }
        let voters: BTreeSet<u64> = raft.voter_ids().collect();
        let wanted: BTreeSet<u64> = assigned.iter().copied().collect();
        if voters == wanted || wanted.is_empty() {
            return;
        }
        if moving.get(&ls.uid).is_some_and(|task| !task.is_finished()) {
            return;
        }
        let js = self.clone();
        let uid = ls.uid;
        let ls = ls.clone();
        let task = self.tasks.spawn(async move {
            let result = js.change_members(&ls, &voters, &wanted).await;
            match result {
                Ok(()) => info!(stream = %ls.name, voters = ?wanted, "stream replicas moved"),
                Err(e) => warn!(stream = %ls.name, error = %e, "stream replica move not done yet"),
            }
        });
        moving.insert(uid, task);
    }

    /// Adds the new nodes as learners (each waits until it caught up), then makes `wanted`
    /// the voters. A leader that is not wanted never removes itself: it first makes sure a
    /// wanted node votes, then hands its leadership to one, which finishes the change.
    async fn change_members(
        &self,
        ls: &LocalStream,
        voters: &BTreeSet<u64>,
        wanted: &BTreeSet<u64>,
    ) -> Result<(), String> {
        // Retired and gone: a node that lost its data (or a removed one that stopped). A
        // removed node still running keeps voting until its replacement caught up.
        let dead = |v: u64| self.meta.read(|m| m.is_retired(v)) && !self.peer_connected(v);
        let replaces_dead = replaces_dead_voters(voters, wanted, dead);
        for node in wanted.difference(voters) {
            let addr = self
                .peer_cluster_addr(*node)
                .ok_or_else(|| format!("no address for node {node:x}"))?;
            let peer = PeerNode::new(addr);
            let added = if replaces_dead {
                self.registry
                    .add_learner_now(ls.group(), NodeId(*node), peer)
                    .await
            } else {
                self.registry
                    .add_learner(ls.group(), NodeId(*node), peer)
                    .await
            };
            added.map_err(|e| e.to_string())?;
        }
        let to_voters = |set: &BTreeSet<u64>| set.iter().copied().map(NodeId).collect();
        if wanted.contains(&self.node.0) {
            return (self.registry)
                .change_voters(ls.group(), to_voters(wanted), RemovedVoters::Remove)
                .await
                .map_err(|e| e.to_string());
        }
        let mut successor = wanted.intersection(voters).next().copied();
        if successor.is_none() {
            let both: BTreeSet<u64> = voters.union(wanted).copied().collect();
            (self.registry)
                .change_voters(ls.group(), to_voters(&both), RemovedVoters::Remove)
                .await
                .map_err(|e| e.to_string())?;
            successor = wanted.iter().next().copied();
        }
        let Some(to) = successor else {
            return Ok(());
        };
        (self.registry)
            .transfer_leadership(ls.group(), NodeId(to))
            .await
            .map_err(|e| e.to_string())
    }
}

/// Whether changing the voters from `voters` to `wanted` only replaces voters that can never
/// answer again (`dead`: retired ids no longer running, whose node lost its data and came back
/// under a new id, or was removed and stopped) by as many new ones. The new ones then become voters at once instead of first
/// catching up as learners. A dead voter counts as a "no" in every quorum for as long as the
/// group keeps it: waiting for its replacement to catch up (a snapshot of the whole stream)
/// would leave the group without any fault tolerance for the whole rebuild, and stuck for good
/// if another voter lost its data meanwhile (no majority of the old voters could ever commit
/// the change again). The replacement is a new id with an empty log that never voted or
/// acknowledged anything, so making it a voter is an ordinary joint-consensus change: it is
/// committed by a majority of the old voters and of the new ones, every committed entry stays
/// on a majority of the old voters, and the new voter counts only for what it stored. Until it
/// caught up, the group commits with the same live voters it needed before.
pub(super) fn replaces_dead_voters(
    voters: &BTreeSet<u64>,
    wanted: &BTreeSet<u64>,
    dead: impl Fn(u64) -> bool,
) -> bool {
    let leaving: Vec<u64> = voters.difference(wanted).copied().collect();
    let joining = wanted.difference(voters).count();
    !leaving.is_empty() && joining <= leaving.len() && leaving.iter().all(|v| dead(*v))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn only_a_replacement_of_dead_voters_skips_the_catch_up() {
        let set = |v: &[u64]| v.iter().copied().collect::<BTreeSet<u64>>();
        let dead = |v: u64| v >= 10;
        // A lost node's old id (10) replaced by its new id (4).
        assert!(replaces_dead_voters(
            &set(&[1, 2, 10]),
            &set(&[1, 2, 4]),
            dead
        ));
        assert!(replaces_dead_voters(
            &set(&[1, 10, 11]),
            &set(&[1, 4, 5]),
            dead
        ));
        // A live voter leaving (peer remove): the new one catches up first.
        assert!(!replaces_dead_voters(
            &set(&[1, 2, 3]),
            &set(&[1, 2, 4]),
            dead
        ));
        assert!(!replaces_dead_voters(
            &set(&[1, 3, 10]),
            &set(&[1, 4, 5]),
            dead
        ));
        // Growing (scale up) with or without a dead voter, or nothing leaving.
        assert!(!replaces_dead_voters(&set(&[1]), &set(&[1, 4, 5]), dead));
        assert!(!replaces_dead_voters(
            &set(&[1, 2, 10]),
            &set(&[1, 2, 4, 5, 6]),
            dead
        ));
        assert!(!replaces_dead_voters(&set(&[1, 2]), &set(&[1, 2]), dead));
    }

    #[test]
    fn a_leader_that_handed_off_stays_until_the_successor_contacts_it() {
        assert!(keeps_leaving_replica(10 * S, true, None, true));
        assert!(keeps_leaving_replica(10 * S, true, Some(100 * S), true));
        assert!(!keeps_leaving_replica(61 * S, true, None, true));
        // Contacted by the successor, then removed: silence counts from the contact.
        assert!(keeps_leaving_replica(10 * S, true, Some(S), true));
        assert!(!keeps_leaving_replica(10 * S, true, Some(5 * S), true));
    }

    #[test]
    fn a_removed_follower_leaves_once_its_leader_is_silent() {
        assert!(keeps_leaving_replica(10 * S, false, Some(S), true));
        assert!(!keeps_leaving_replica(10 * S, false, Some(5 * S), true));
        // Found unassigned only now, after a long silence: a short grace still.
        assert!(keeps_leaving_replica(S, false, Some(100 * S), true));
        assert!(!keeps_leaving_replica(5 * S, false, None, true));
    }

    #[test]
    fn an_unfinished_move_keeps_a_silent_follower_longer() {
        assert!(keeps_leaving_replica(30 * S, false, Some(20 * S), false));
        assert!(!keeps_leaving_replica(90 * S, false, Some(61 * S), false));
    }
}
