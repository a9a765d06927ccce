//! `$JS.API.SERVER.REMOVE`: a node leaves the cluster for good (what `nats server raft
//! peer-remove` sends), and the evacuation of the replicas a removed node held.
//!
//! The meta leader answers as nats-server's `jsLeaderServerRemoveRequest` does: an empty body is
//! 10003, a body that is not JSON 10025, a server that is not a member (by `peer`, its server
//! name, or `peer_id`, its node id in hex, which wins when given) 10044, and a request while an
//! earlier removal is still under way 10202. Not clustered: no answer, as nats-server.
//!
//! A removal, in order:
//! 1. the node id is retired in the meta state (`RemovePeer`; the answer waits for this commit):
//!    from then on it is never admitted again, under that id (a node that comes back with its
//!    old data stays outside the cluster; with a fresh store dir it joins under a new id);
//! 2. every stream replica it held is moved to a voter without a replica of that stream (the
//!    stream's leader adds the new node as a learner, lets it catch up, then swaps the voters:
//!    [`JetStream::replace_replica`]); when no such voter exists the replica is dropped and the
//!    stream runs with one replica fewer than configured. An R1 stream whose only replica was on
//!    a stopped node keeps it: its data is on that node only, and the stream reports no leader;
//! 3. once no stream assignment names it, it leaves the meta group's voters, so it no longer
//!    counts against the meta quorum ([`JetStream::drop_retired_voters`]).
//!
//! The answer comes once step 1 committed; steps 2 and 3 run in a task of the request (one at a
//! time, retried once a second for up to 30 s), and the meta leader's membership loop retries
//! moves and the voter change every tick. A replica that has to be dropped is only dropped by
//! that task (the loop also serves nodes that lost their data, whose new id is about to become
//! the spare). While a removal has not left the meta group, a new request answers 10202 at
//! once, as nats-server does while a peer removal is in flight, and restarts the task if it
//! ended.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use jetraft_proto::meta::{StreamAssignment, meta_command};
use jetraft_raft::{GroupId, NodeId, RemovedVoters};
use serde::Deserialize;
use tracing::{info, warn};

use super::JetStream;
use super::api::meta_answer;
use crate::bus::internal::InternalMsg;
use crate::jetstream::api::types::requests::{ApiRequest, BodyRule, parse_body};
use crate::jetstream::api::{ApiError, ErrorKind};

/// `$JS.API.SERVER.REMOVE` request body (nats-server's `JSApiMetaServerRemoveRequest`).
#[derive(Debug, Clone, Default, Deserialize)]
pub(super) struct ServerRemoveRequest {
    /// Server name of the node to remove.
    #[serde(default)]
    pub(super) peer: String,
    /// Its peer id (jetraft: the node id in hex); wins over `peer` when given.
    #[serde(default)]
    pub(super) peer_id: String,
}

impl ApiRequest for ServerRemoveRequest {
    const GO_TYPE: &'static str = "server.JSApiMetaServerRemoveRequest";
}

/// How often the evacuation task of a removal tries before it leaves the rest to a new
/// request and the membership loop.
const EVACUATION_ATTEMPTS: u32 = 30;

/// Pause between two evacuation attempts.
const EVACUATION_RETRY: Duration = Duration::from_secs(1);

/// The success answer.
const REMOVED: &str =
    "{\"type\":\"io.nats.jetstream.api.v1.meta_server_remove_response\",\"success\":true}";

/// What to do with one stream replica of a removed node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Evacuation {
    /// Move it to this voter.
    MoveTo(u64),
    /// No spare voter: drop it (the stream keeps its other replicas).
    Drop,
    /// Its only replica: keep the assignment (the data is nowhere else).
    Keep,
}

/// Where a replica of `sa` held by the removed node `gone` goes, given the meta voters and
/// which of them are retired; `place` picks the least loaded of the candidates.
pub(super) fn evacuation(
    sa: &StreamAssignment,
    gone: u64,
    voters: &[u64],
    is_retired: impl Fn(u64) -> bool,
    place: impl Fn(&[u64]) -> Option<u64>,
) -> Evacuation {
    let candidates: Vec<u64> = voters
        .iter()
        .copied()
        .filter(|v| *v != gone && !sa.replicas.contains(v) && !is_retired(*v))
        .collect();
    if let Some(new) = place(&candidates) {
        return Evacuation::MoveTo(new);
    }
    if sa.replicas.iter().any(|r| *r != gone) {
        Evacuation::Drop
    } else {
        Evacuation::Keep
    }
}

impl JetStream {
    /// Answers SERVER.REMOVE on the meta leader; `None` when not clustered (no answer).
    pub(super) async fn server_remove(
        self: &Arc<Self>,
        msg: &InternalMsg,
    ) -> Option<Result<String, ApiError>> {
        if !self.clustered() {
            return None;
        }
        Some(self.server_remove_clustered(msg).await)
    }

    async fn server_remove_clustered(
        self: &Arc<Self>,
        msg: &InternalMsg,
    ) -> Result<String, ApiError> {
        let req: ServerRemoveRequest =
            parse_body(BodyRule::Required, &msg.payload)?.ok_or_else(ApiError::bad_request)?;
        if self.retired_voters() > 0 {
            // An earlier removal is not finished: refuse at once (as nats-server does while a
            // peer removal is in flight) and have its steps retried.
            self.spawn_evacuation();
            return Err(ApiError::new(ErrorKind::ClusterServerMemberChangeInflight));
        }
        let voters = self.voters();
        let Some(gone) = self.member_named(&req, &voters) else {
            return Err(ApiError::new(ErrorKind::ClusterServerNotMember));
        };
        meta_answer(
            self.propose_meta(meta_command::Op::RemovePeer(gone))
                .await?,
        )?;
        info!(
            node = format!("{gone:x}"),
            "server removed from the cluster"
        );
        // The answer does not wait for the moves and the voter change: both wait on other
        // nodes (a slow one would make the client time out and retry into a 10202).
        self.spawn_evacuation();
        Ok(REMOVED.to_string())
    }

    /// Starts the evacuation of retired nodes' replicas (dropping those without a spare voter)
    /// and the voter change that follows, unless it already runs. It retries once a tick
    /// (bounded) until no retired id is a voter; the membership loop keeps retrying the voter
    /// change after that.
    fn spawn_evacuation(self: &Arc<Self>) {
        if self.removal_running.swap(true, Ordering::AcqRel) {
            return;
        }
        let js = self.clone();
        self.tasks.spawn(async move {
            for _ in 0..EVACUATION_ATTEMPTS {
                if js.cancel.is_cancelled() {
                    break;
                }
                js.evacuate_retired(true).await;
                js.drop_retired_voters().await;
                if js.retired_voters() == 0 {
                    break;
                }
                tokio::select! {
                    () = js.cancel.cancelled() => break,
                    () = tokio::time::sleep(EVACUATION_RETRY) => {}
                }
            }
            js.removal_running.store(false, Ordering::Release);
        });
    }

    /// The member the request names: by node id in hex when `peer_id` is given, else by server
    /// name (meta peer records first, then the link table for a voter without a record).
    fn member_named(&self, req: &ServerRemoveRequest, voters: &[u64]) -> Option<u64> {
        let peers = self.meta.read(|m| m.peers().clone());
        let members = voters
            .iter()
            .copied()
            .chain(peers.keys().copied())
            .filter(|id| !self.meta.read(|m| m.is_retired(*id)));
        let links = self
            .cluster
            .as_ref()
            .map(|c| c.peers.snapshot())
            .unwrap_or_default();
        let name_of = |id: u64| -> Option<String> {
            if let Some(c) = self.cluster.as_ref().filter(|_| id == self.node.0) {
                return Some(c.identity.server_name.clone());
            }
            peers.get(&id).map(|p| p.server_name.clone()).or_else(|| {
                links
                    .get(&crate::cluster::NodeId(id))
                    .map(|p| p.server_name.clone())
            })
        };
        let mut found = None;
        for id in members {
            let hit = if req.peer_id.is_empty() {
                name_of(id).is_some_and(|n| n == req.peer)
            } else {
                format!("{id:x}") == req.peer_id
            };
            if hit {
                found = Some(id);
                break;
            }
        }
        found
    }

    /// How many meta voters are retired ids (removals not finished).
    fn retired_voters(&self) -> usize {
        self.voters()
            .into_iter()
            .filter(|v| self.meta.read(|m| m.is_retired(*v)))
            .count()
    }

    /// On the meta leader: every stream replica assigned to a retired node id is moved to a
    /// voter without a replica of that stream, or, with `drop`, dropped when there is none (see
    /// the module doc). R1 streams move only while their node still answers (it drives the
    /// move). Without `drop` (a node that lost its data and came back under a new id, which is
    /// about to become the spare voter) a replica without a place waits.
    ///
    /// The stream's leader then catches the new replica up, and a node whose data was lost
    /// does not count towards anything until it did: /healthz on the other nodes reports the
    /// stream as not current meanwhile (see `health`).
    pub(super) async fn evacuate_retired(&self, drop: bool) {
        let voters = self.voters();
        let broken: Vec<(StreamAssignment, u64)> = self.meta.read(|m| {
            m.streams()
                .filter_map(|s| {
                    let old = s.replicas.iter().find(|r| m.is_retired(**r))?;
                    Some((s.clone(), *old))
                })
                .collect()
        });
        for (sa, old) in broken {
            let plan = self.meta.read(|m| {
                evacuation(
                    &sa,
                    old,
                    &voters,
                    |n| m.is_retired(n),
                    |c| m.place(1, c).and_then(|p| p.first().copied()),
                )
            });
            let name = sa.name.clone();
            let lone_and_gone = sa.replicas.len() == 1 && !self.peer_connected(old);
            let result = match plan {
                Evacuation::MoveTo(_) if lone_and_gone => continue,
                Evacuation::MoveTo(new) => self.replace_replica(sa, old, new).await,
                Evacuation::Drop if drop => self.drop_replica(sa, old).await,
                Evacuation::Drop | Evacuation::Keep => continue,
            };
            match result.and_then(meta_answer) {
                Ok(_) => {
                    info!(stream = %name, old = format!("{old:x}"), ?plan, "replica of a removed node evacuated")
                }
                Err(e) => {
                    warn!(stream = %name, error = ?e, "evacuating a removed node's replica failed")
                }
            }
        }
    }

    /// Proposes `sa` without replica `old` (the stream's leader then removes it from the
    /// group's voters).
    async fn drop_replica(
        &self,
        sa: StreamAssignment,
        old: u64,
    ) -> Result<jetraft_proto::meta::MetaResult, ApiError> {
        let updated = StreamAssignment {
            replicas: sa.replicas.iter().copied().filter(|r| *r != old).collect(),
            joining: sa.joining.iter().copied().filter(|r| *r != old).collect(),
            ..sa
        };
        self.propose_meta(meta_command::Op::UpdateStream(updated))
            .await
    }

    /// On the meta leader: retired ids that no stream assignment names any more leave the meta
    /// group's voters.
    pub(super) async fn drop_retired_voters(&self) {
        let _changing = self.meta_members.lock().await;
        let Ok(raft) = self.registry.raft(GroupId::META) else {
            return;
        };
        let voters: Vec<u64> = raft.voter_ids().collect();
        let (retired, kept): (Vec<u64>, Vec<u64>) = voters
            .iter()
            .partition(|v| self.meta.read(|m| m.is_retired(**v)));
        let leaving: Vec<u64> = retired
            .into_iter()
            .filter(|r| {
                !self
                    .meta
                    .read(|m| m.streams().any(|s| s.replicas.contains(r)))
            })
            .collect();
        if leaving.is_empty() || kept.is_empty() {
            return;
        }
        let next = voters
            .iter()
            .copied()
            .filter(|v| !leaving.contains(v))
            .map(NodeId)
            .collect();
        match self
            .registry
            .change_voters(GroupId::META, next, RemovedVoters::Remove)
            .await
        {
            Ok(()) => info!(left = ?leaving, "removed servers left the meta group"),
            Err(e) => warn!(error = %e, "removing servers from the meta group failed"),
        }
    }

    /// Whether `node` runs: this node, or one the link table shows connected both ways.
    pub(super) fn peer_connected(&self, node: u64) -> bool {
        node == self.node.0
            || self.cluster.as_ref().is_some_and(|c| {
                c.peers
                    .snapshot()
                    .get(&crate::cluster::NodeId(node))
                    .is_some_and(crate::cluster::PeerInfo::is_connected)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(replicas: &[u64]) -> StreamAssignment {
        StreamAssignment {
            name: "S".into(),
            replicas: replicas.to_vec(),
            ..StreamAssignment::default()
        }
    }

    fn first(c: &[u64]) -> Option<u64> {
        c.first().copied()
    }

    #[test]
    fn a_replica_moves_to_a_spare_voter() {
        let plan = evacuation(&sa(&[1, 2, 3]), 3, &[1, 2, 3, 4, 5], |_| false, first);
        assert_eq!(plan, Evacuation::MoveTo(4));
    }

    #[test]
    fn retired_voters_are_no_candidates() {
        let plan = evacuation(&sa(&[1, 2, 3]), 3, &[1, 2, 3, 4], |n| n == 4, first);
        assert_eq!(plan, Evacuation::Drop, "4 is retired too: nothing spare");
    }

    #[test]
    fn without_a_spare_voter_the_replica_is_dropped() {
        let plan = evacuation(&sa(&[1, 2, 3]), 3, &[1, 2, 3], |_| false, first);
        assert_eq!(plan, Evacuation::Drop);
    }

    #[test]
    fn a_lone_replica_is_kept_when_nowhere_to_go() {
        let plan = evacuation(&sa(&[3]), 3, &[3], |_| false, first);
        assert_eq!(plan, Evacuation::Keep);
        let plan = evacuation(&sa(&[3]), 3, &[1, 3], |_| false, first);
        assert_eq!(plan, Evacuation::MoveTo(1));
    }
}
