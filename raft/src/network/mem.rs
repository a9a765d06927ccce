//! [`MemTransport`]: an in-process transport with fault injection, for tests.
//!
//! All nodes of a test cluster share one [`MemNetwork`] (the "wire"). Each node registers its
//! [`Groups`] table with it and gets a [`MemTransport`] (its outbound router, shared by all its
//! groups). A call goes: fault check → optional delay → look up target node and group → call the
//! target's `Raft` directly, with no serialisation. On the receiving side it does what the gRPC
//! service does around that call: a vote for a candidate is marked like a leadership transfer
//! when the voter's leader is reported unreachable ([`Groups::leader_unreachable`]), and an
//! accepted AppendEntries is noted as leader contact ([`Groups::note_leader_contact`]).
//!
//! Fault knobs (all on [`MemNetwork`]): [`partition`](MemNetwork::partition) cuts the link
//! between two nodes in both directions, [`isolate`](MemNetwork::isolate) cuts every link of a
//! node, [`heal`](MemNetwork::heal) removes cuts and isolation, [`set_delay`](MemNetwork::set_delay)
//! delays one direction of a link, [`set_drop_probability`](MemNetwork::set_drop_probability)
//! drops calls at random from a seeded RNG (reproducible for a given seed and call order).
//!
//! Invariants:
//! - Every call is bounded by openraft's `hard_ttl` and fails with `Timeout` past it.
//! - A cut link fails fast with `Unreachable` so openraft backs off.
//! - The fault state lock is a `parking_lot` mutex, held only to decide a call's fate, never
//!   across `.await`. Lock order: faults before the node table (they are never nested today).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use openraft::OptionalSend;
use openraft::RPCTypes;
use openraft::error::{
    NetworkError, RPCError, ReplicationClosed, StreamingError, Timeout, Unreachable,
};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft_multi::GroupRouter;
use parking_lot::{Mutex, RwLock};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::quiesce::QuiesceRequest;
use crate::registry::Groups;
use crate::types::{GroupRaft, GroupSnapshot, GroupVote, JetraftConfig, SnapshotData};
use crate::{GroupId, NodeId};

/// Why an in-process call did not reach its target.
#[derive(Debug, thiserror::Error)]
enum LinkError {
    #[error("link {from}->{to} is cut")]
    Cut { from: NodeId, to: NodeId },
    #[error("call {from}->{to} dropped")]
    Dropped { from: NodeId, to: NodeId },
    #[error("node {node} is not on the network")]
    NodeDown { node: NodeId },
    #[error("group {group} not on node {node}")]
    GroupMissing { node: NodeId, group: GroupId },
    #[error("target raft failed: {reason}")]
    Remote { reason: String },
}

/// What happens to one call, decided under the fault lock.
enum Fate {
    Deliver(Duration),
    Fail(LinkError),
}

struct Faults {
    /// Cut links, stored with the smaller node id first.
    cut: HashSet<(NodeId, NodeId)>,
    /// Nodes cut from everyone.
    isolated: HashSet<NodeId>,
    /// Extra latency per direction (from, to).
    delay: HashMap<(NodeId, NodeId), Duration>,
    /// Probability in [0, 1] that a call is dropped.
    drop_probability: f64,
    /// Seeded so a failing schedule can be replayed.
    rng: StdRng,
}

struct Wire {
    /// Each node's group table, by node id; absent means the node is down.
    nodes: RwLock<HashMap<NodeId, Groups>>,
    faults: Mutex<Faults>,
}

/// The shared in-process "wire" of a test cluster. Clones share state.
#[derive(Clone)]
pub struct MemNetwork {
    wire: Arc<Wire>,
}

fn link(a: NodeId, b: NodeId) -> (NodeId, NodeId) {
    if a <= b { (a, b) } else { (b, a) }
}

impl MemNetwork {
    /// A healed network whose drop decisions come from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            wire: Arc::new(Wire {
                nodes: RwLock::new(HashMap::new()),
                faults: Mutex::new(Faults {
                    cut: HashSet::new(),
                    isolated: HashSet::new(),
                    delay: HashMap::new(),
                    drop_probability: 0.0,
                    rng: StdRng::seed_from_u64(seed),
                }),
            }),
        }
    }

    /// Attaches `node`'s group table so other nodes can reach its groups.
    pub fn register(&self, node: NodeId, groups: Groups) {
        self.wire.nodes.write().insert(node, groups);
    }

    /// Detaches `node`: calls to it fail as if it were down.
    pub fn unregister(&self, node: NodeId) {
        self.wire.nodes.write().remove(&node);
    }

    /// The outbound transport of `node`, to share among its groups.
    pub fn transport(&self, node: NodeId) -> MemTransport {
        MemTransport {
            net: self.clone(),
            from: node,
        }
    }

    /// Cuts the link between `a` and `b` in both directions.
    pub fn partition(&self, a: NodeId, b: NodeId) {
        self.wire.faults.lock().cut.insert(link(a, b));
    }

    /// Cuts every link of `node`.
    pub fn isolate(&self, node: NodeId) {
        self.wire.faults.lock().isolated.insert(node);
    }

    /// Removes all cuts and isolation (delays and drop probability stay).
    pub fn heal(&self) {
        let mut f = self.wire.faults.lock();
        f.cut.clear();
        f.isolated.clear();
    }

    /// Delays calls from `from` to `to` by `delay` (zero removes the delay).
    pub fn set_delay(&self, from: NodeId, to: NodeId, delay: Duration) {
        let mut f = self.wire.faults.lock();
        if delay.is_zero() {
            f.delay.remove(&(from, to));
        } else {
            f.delay.insert((from, to), delay);
        }
    }

    /// Drops each call with probability `p` (clamped to [0, 1]).
    pub fn set_drop_probability(&self, p: f64) {
        self.wire.faults.lock().drop_probability = p.clamp(0.0, 1.0);
    }

    /// Whether the link between `a` and `b` is up: neither is isolated and it is not cut (delays
    /// and random drops left aside). Lets other in-process traffic between the same nodes (a
    /// test's node-to-node message links) share this network's partitions.
    pub fn is_linked(&self, a: NodeId, b: NodeId) -> bool {
        let f = self.wire.faults.lock();
        !(f.isolated.contains(&a) || f.isolated.contains(&b) || f.cut.contains(&link(a, b)))
    }

    fn fate(&self, from: NodeId, to: NodeId) -> Fate {
        let mut f = self.wire.faults.lock();
        if f.isolated.contains(&from) || f.isolated.contains(&to) || f.cut.contains(&link(from, to))
        {
            return Fate::Fail(LinkError::Cut { from, to });
        }
        let p = f.drop_probability;
        if p > 0.0 && f.rng.random_bool(p) {
            return Fate::Fail(LinkError::Dropped { from, to });
        }
        Fate::Deliver(f.delay.get(&(from, to)).copied().unwrap_or_default())
    }

    fn target(&self, node: NodeId, group: GroupId) -> Result<(GroupRaft, Groups), LinkError> {
        let nodes = self.wire.nodes.read();
        let groups = nodes.get(&node).ok_or(LinkError::NodeDown { node })?;
        let raft = groups
            .get(group)
            .ok_or(LinkError::GroupMissing { node, group })?;
        Ok((raft, groups.clone()))
    }
}

/// One node's outbound router over a [`MemNetwork`], shared by all the node's groups.
#[derive(Clone)]
pub struct MemTransport {
    net: MemNetwork,
    /// The sending node, so link faults apply per direction.
    from: NodeId,
}

impl MemTransport {
    /// Delivers one call to `(target, group)` within `ttl`, applying the link's faults; wakes
    /// the target's group afterwards if `wakes` (every message but a heartbeat, as the gRPC
    /// service does; see `crate::quiesce`).
    async fn call<T, F, Fut>(
        &self,
        target: u64,
        group: GroupId,
        (action, wakes): (RPCTypes, bool),
        ttl: Duration,
        f: F,
    ) -> Result<T, RPCError<JetraftConfig>>
    where
        F: FnOnce(GroupRaft, Groups) -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        let to = NodeId(target);
        let delay = match self.net.fate(self.from, to) {
            Fate::Deliver(d) => d,
            Fate::Fail(e @ LinkError::Dropped { .. }) => {
                return Err(RPCError::Network(NetworkError::new(&e)));
            }
            Fate::Fail(e) => return Err(RPCError::Unreachable(Unreachable::new(&e))),
        };
        let attempt = async {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let (raft, groups) = self
                .net
                .target(to, group)
                .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
            let answer = f(raft, groups.clone()).await.map_err(|reason| {
                RPCError::Unreachable(Unreachable::new(&LinkError::Remote { reason }))
            });
            if wakes {
                groups.wake(group);
            }
            answer
        };
        match tokio::time::timeout(ttl, attempt).await {
            Ok(result) => result,
            Err(_elapsed) => Err(RPCError::Timeout(Timeout {
                action,
                id: self.from.0,
                target,
                timeout: ttl,
            })),
        }
    }
}

/// Peers are found by node id on the shared wire; addresses are not needed.
impl super::Transport for MemTransport {
    async fn quiesce(
        &self,
        target: u64,
        req: QuiesceRequest,
        ttl: Duration,
    ) -> Result<bool, String> {
        let to = NodeId(target);
        let delay = match self.net.fate(self.from, to) {
            Fate::Deliver(d) => d,
            Fate::Fail(e) => return Err(e.to_string()),
        };
        let attempt = async {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let (_, groups) = self.net.target(to, req.group).map_err(|e| e.to_string())?;
            Ok(groups.accept_quiesce(&req))
        };
        tokio::time::timeout(ttl, attempt)
            .await
            .map_err(|_elapsed| format!("no answer within {ttl:?}"))?
    }
}

fn rpc_to_streaming(e: RPCError<JetraftConfig>) -> StreamingError<JetraftConfig> {
    match e {
        RPCError::Timeout(t) => StreamingError::Timeout(t),
        RPCError::Unreachable(u) => StreamingError::Unreachable(u),
        RPCError::Network(n) => StreamingError::Network(n),
        RPCError::RemoteError(r) => StreamingError::Unreachable(Unreachable::new(&r)),
    }
}

impl GroupRouter<JetraftConfig, GroupId> for MemTransport {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &self,
        target: u64,
        group: GroupId,
        rpc: AppendEntriesRequest<JetraftConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<JetraftConfig>, RPCError<JetraftConfig>> {
        self.call(
            target,
            group,
            (RPCTypes::AppendEntries, !rpc.entries.is_empty()),
            option.hard_ttl(),
            |raft, groups| async move {
                let resp = raft.append_entries(rpc).await.map_err(|e| e.to_string())?;
                if !matches!(resp, AppendEntriesResponse::HigherVote(_)) {
                    groups.note_leader_contact(group);
                }
                Ok(resp)
            },
        )
        .await
    }

    async fn vote(
        &self,
        target: u64,
        group: GroupId,
        rpc: VoteRequest<JetraftConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<JetraftConfig>, RPCError<JetraftConfig>> {
        self.call(
            target,
            group,
            (RPCTypes::Vote, true),
            option.hard_ttl(),
            |raft, groups| async move {
                let mut rpc = rpc;
                if !rpc.leadership_transfer
                    && groups.leader_unreachable(group, rpc.vote.leader_id.node_id)
                {
                    rpc.leadership_transfer = true;
                }
                raft.vote(rpc).await.map_err(|e| e.to_string())
            },
        )
        .await
    }

    async fn pre_vote(
        &self,
        target: u64,
        group: GroupId,
        rpc: VoteRequest<JetraftConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<JetraftConfig>, RPCError<JetraftConfig>> {
        self.call(
            target,
            group,
            (RPCTypes::Vote, true),
            option.hard_ttl(),
            |raft, _| async move { raft.pre_vote(rpc).await.map_err(|e| e.to_string()) },
        )
        .await
    }

    async fn transfer_leader(
        &self,
        target: u64,
        group: GroupId,
        req: TransferLeaderRequest<JetraftConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<JetraftConfig>, RPCError<JetraftConfig>> {
        self.call(
            target,
            group,
            (RPCTypes::TransferLeader, true),
            option.hard_ttl(),
            |raft, _| async move {
                raft.handle_transfer_leader(req)
                    .await
                    .map_err(|e| e.to_string())
            },
        )
        .await
    }

    async fn full_snapshot(
        &self,
        target: u64,
        group: GroupId,
        vote: GroupVote,
        snapshot: GroupSnapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<JetraftConfig>, StreamingError<JetraftConfig>> {
        let send = self.call(
            target,
            group,
            (RPCTypes::InstallSnapshot, true),
            option.hard_ttl(),
            |raft, _| async move {
                raft.install_full_snapshot(vote, snapshot)
                    .await
                    .map_err(|e| e.to_string())
            },
        );
        // Both arms are cancel-safe: dropping `send` abandons an in-process call.
        tokio::select! {
            result = send => result.map_err(rpc_to_streaming),
            closed = cancel => Err(StreamingError::Closed(closed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::GroupVote;

    fn vote_req() -> VoteRequest<JetraftConfig> {
        VoteRequest::new(GroupVote::new(1, 1), None)
    }

    fn opt(ms: u64) -> RPCOption {
        RPCOption::new(Duration::from_millis(ms))
    }

    #[tokio::test]
    async fn call_to_unknown_node_is_unreachable() {
        let net = MemNetwork::new(1);
        let t = net.transport(NodeId(1));
        let err = t
            .vote(2, GroupId(1), vote_req(), opt(100))
            .await
            .unwrap_err();
        assert!(matches!(err, RPCError::Unreachable(_)), "{err:?}");
    }

    #[tokio::test]
    async fn call_to_missing_group_is_unreachable() {
        let net = MemNetwork::new(1);
        net.register(NodeId(2), Groups::default());
        let t = net.transport(NodeId(1));
        let err = t
            .vote(2, GroupId(9), vote_req(), opt(100))
            .await
            .unwrap_err();
        assert!(matches!(err, RPCError::Unreachable(_)), "{err:?}");
    }

    #[tokio::test]
    async fn partition_and_isolate_cut_both_directions_until_heal() {
        let net = MemNetwork::new(1);
        net.partition(NodeId(1), NodeId(2));
        assert!(matches!(
            net.fate(NodeId(2), NodeId(1)),
            Fate::Fail(LinkError::Cut { .. })
        ));
        assert!(matches!(net.fate(NodeId(1), NodeId(3)), Fate::Deliver(_)));
        net.isolate(NodeId(3));
        assert!(matches!(
            net.fate(NodeId(1), NodeId(3)),
            Fate::Fail(LinkError::Cut { .. })
        ));
        assert!(matches!(
            net.fate(NodeId(3), NodeId(2)),
            Fate::Fail(LinkError::Cut { .. })
        ));
        assert!(!net.is_linked(NodeId(2), NodeId(3)));
        assert!(!net.is_linked(NodeId(2), NodeId(1)));
        net.heal();
        assert!(net.is_linked(NodeId(2), NodeId(1)) && net.is_linked(NodeId(3), NodeId(2)));
        assert!(matches!(net.fate(NodeId(1), NodeId(2)), Fate::Deliver(_)));
        assert!(matches!(net.fate(NodeId(3), NodeId(2)), Fate::Deliver(_)));
    }

    #[tokio::test(start_paused = true)]
    async fn delay_beyond_the_deadline_times_out() {
        let net = MemNetwork::new(1);
        net.register(NodeId(2), Groups::default());
        net.set_delay(NodeId(1), NodeId(2), Duration::from_secs(10));
        let t = net.transport(NodeId(1));
        let err = t
            .vote(2, GroupId(1), vote_req(), opt(200))
            .await
            .unwrap_err();
        assert!(matches!(err, RPCError::Timeout(_)), "{err:?}");
        // The reverse direction is not delayed.
        assert!(matches!(net.fate(NodeId(2), NodeId(1)), Fate::Deliver(d) if d.is_zero()));
    }

    #[test]
    fn drops_are_reproducible_for_a_seed() {
        let pattern = |seed| {
            let net = MemNetwork::new(seed);
            net.set_drop_probability(0.5);
            (0..64)
                .map(|_| matches!(net.fate(NodeId(1), NodeId(2)), Fate::Fail(_)))
                .collect::<Vec<bool>>()
        };
        let a = pattern(42);
        assert_eq!(a, pattern(42));
        assert!(a.iter().any(|d| *d) && a.iter().any(|d| !*d));
    }
}
