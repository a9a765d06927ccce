//! [`GroupRegistry`]: the Raft groups hosted by one node, created and removed at runtime.
//!
//! The registry owns the node's groups and its shared transport. [`Groups`] is the read-mostly
//! group table, shared with inbound dispatch (the in-memory wire today, the gRPC service later),
//! which routes each RPC by its group id.
//!
//! Invariants:
//! - One `Raft` instance per (node, group); creating a group that exists is an error.
//! - Every operation that waits on Raft (propose, membership, initialise) has a deadline.
//! - The table lock is a `parking_lot::RwLock` held only to clone a handle out, never across
//!   `.await`; it is the only lock here.
//! - Removing a group shuts its Raft core down; deleting its data is the caller's job.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use openraft::async_runtime::WatchReceiver;
use openraft::error::{ClientWriteError, ForwardToLeader};
use openraft::impls::ProgressResponder;
use openraft::metrics::RaftServerMetrics;
use openraft::metrics::WaitError;
use openraft::storage::RaftLogStorage;
use openraft::type_config::alias::WatchReceiverOf;
use openraft::vote::RaftLeaderId;
use parking_lot::RwLock;

use crate::error::RaftError;
use crate::in_flight::{InFlight, Kind};
use crate::network::{GroupNetwork, Transport};
use crate::quiesce::{GroupFlags, QuietFlag};
use crate::sm::{ReplicatedStateMachine, StateMachineAdapter};
use crate::snapshot_hold::LagCheck;
use crate::stopping::Stopping;
use crate::types::{Command, GroupRaft, JetraftConfig, PeerNode};
use crate::{GroupId, NodeId, RaftTiming};

/// How long shutdown waits for the calls waiting on a group to give up before stopping the
/// groups (they give up at once; this only bounds a call stuck outside an await point).
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(1);

/// One running group: its Raft handle and whether its timers are stopped (see
/// [`crate::quiesce`]).
#[derive(Clone)]
struct GroupEntry {
    raft: GroupRaft,
    quiet: Arc<QuietFlag>,
    /// Proposals made here and not yet answered.
    in_flight: Arc<InFlight>,
}

/// The node's table of running groups. Clones share the table.
#[derive(Clone, Default)]
pub struct Groups {
    /// Read on every inbound RPC, written on group create/remove.
    map: Arc<RwLock<HashMap<GroupId, GroupEntry>>>,
    /// When each group last accepted an AppendEntries (entries or heartbeat) from a leader.
    contact: Arc<RwLock<HashMap<GroupId, std::time::Instant>>>,
    /// Per group, the committed index its leader reported when this replica was first asked
    /// about, and whether the replica has applied up to it since (see
    /// [`GroupRegistry::currency`]).
    caught_up: Arc<RwLock<HashMap<GroupId, (u64, bool)>>>,
    /// Peers whose node link the cluster layer reports down (see
    /// [`GroupRegistry::set_peer_reachable`]).
    unreachable: Arc<RwLock<BTreeSet<u64>>>,
    /// Notified whenever a group is added (see [`Groups::get_soon`]).
    created: Arc<tokio::sync::Notify>,
    /// The registry's shutdown state, shared with the inbound transport so that calls from
    /// peers stop reaching the groups once shutdown began (see [`Groups::run`]).
    stopping: Stopping,
}

impl Groups {
    /// Records that `group` accepted an AppendEntries from its leader just now (called by the
    /// inbound transport; [`GroupRegistry::currency`] uses it to tell a follower that hears
    /// its leader from one that only remembers it).
    pub fn note_leader_contact(&self, group: GroupId) {
        self.contact
            .write()
            .insert(group, std::time::Instant::now());
    }

    /// Whether the replica of `group` here has applied, since it started, everything that was
    /// committed when it was first asked about with a known commit (`committed > 0`). Once
    /// true, it stays true; before that, the target does not move, so a follower of a busy
    /// group that always trails by a few entries still gets there.
    pub(crate) fn caught_up_once(&self, group: GroupId, applied: u64, committed: u64) -> bool {
        if let Some((target, done)) = self.caught_up.read().get(&group).copied() {
            if done || applied < target {
                return done;
            }
        } else if committed == 0 {
            return false;
        }
        let mut map = self.caught_up.write();
        let entry = map.entry(group).or_insert((committed, false));
        entry.1 = entry.1 || applied >= entry.0;
        entry.1
    }

    /// Whether a vote request from `candidate` in `group` may be granted before the lease of
    /// the leader this replica follows runs out: that leader is reported unreachable (its node
    /// link dropped, as when its process died) and is not the candidate. The inbound transport
    /// then marks the request like a leadership transfer, which openraft grants despite the
    /// lease; every other rule of the vote (term, log up to date) still applies. jetraft serves
    /// no lease-based reads, so the lease only delays failover here.
    pub fn leader_unreachable(&self, group: GroupId, candidate: u64) -> bool {
        let Some(raft) = self.get(group) else {
            return false;
        };
        let leader = raft.metrics().borrow_watched().current_leader;
        leader.is_some_and(|l| l != candidate && self.unreachable.read().contains(&l))
    }

    /// How long ago `group` last accepted an AppendEntries from a leader, if ever.
    pub fn since_leader_contact(&self, group: GroupId) -> Option<std::time::Duration> {
        self.contact.read().get(&group).map(|t| t.elapsed())
    }

    /// Runs `call` (a call into one of the groups on behalf of a peer) unless or until the
    /// node's shutdown begins; `None` if it did. Once shutdown begins no call reaches a group
    /// that is about to stop (openraft logs every call into a stopped group as an error), and
    /// the shutdown waits (briefly) for the calls running to give up.
    pub async fn run<F: std::future::Future>(&self, call: F) -> Option<F::Output> {
        self.stopping.run(call).await
    }

    /// Resolves once the node's shutdown began (at once if it did).
    pub async fn stopped(&self) {
        self.stopping.stopped().await;
    }

    /// Whether the node's shutdown began.
    pub fn is_stopping(&self) -> bool {
        self.stopping.is_stopped()
    }

    /// The Raft handle of `group`, if it runs here.
    pub fn get(&self, group: GroupId) -> Option<GroupRaft> {
        self.map.read().get(&group).map(|e| e.raft.clone())
    }

    /// The Raft handle of `group`, waiting up to `within` for it to be created. Every replica
    /// of a new group creates it when it applies the same meta entry, within milliseconds of
    /// the others; the first replica's vote request can still arrive before a peer created the
    /// group, and refusing it would leave the group leaderless for an election timeout.
    pub async fn get_soon(&self, group: GroupId, within: std::time::Duration) -> Option<GroupRaft> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let created = self.created.notified();
            tokio::pin!(created);
            // Registered before the look-up, so a creation in between is not missed.
            created.as_mut().enable();
            if let Some(raft) = self.get(group) {
                return Some(raft);
            }
            if tokio::time::timeout_at(deadline, created).await.is_err() {
                return None;
            }
        }
    }

    /// The Raft handle and quiet flag of `group`, if it runs here.
    pub(crate) fn flag(&self, group: GroupId) -> Option<(GroupRaft, Arc<QuietFlag>)> {
        self.map
            .read()
            .get(&group)
            .map(|e| (e.raft.clone(), e.quiet.clone()))
    }

    /// Every group's id, Raft handle and quiet flag.
    pub(crate) fn flags(&self) -> GroupFlags {
        self.map
            .read()
            .iter()
            .map(|(g, e)| (*g, e.raft.clone(), e.quiet.clone()))
            .collect()
    }

    /// Whether `peer`'s node link is up as far as this node was told (see
    /// [`GroupRegistry::set_peer_reachable`]; peers never reported count as reachable).
    pub(crate) fn is_reachable(&self, peer: u64) -> bool {
        !self.unreachable.read().contains(&peer)
    }

    /// Ids of the groups running here, sorted.
    pub fn ids(&self) -> Vec<GroupId> {
        let mut ids: Vec<GroupId> = self.map.read().keys().copied().collect();
        ids.sort();
        ids
    }
}

/// Who leads a group, as this replica sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderInfo {
    /// The leader, if one is known.
    pub leader: Option<NodeId>,
    /// The term this replica is in.
    pub term: u64,
    /// Whether this replica is the leader.
    pub is_self: bool,
}

/// How far one follower is, as the group's leader sees it ([`GroupRegistry::followers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowerProgress {
    /// The follower.
    pub node: NodeId,
    /// Log entries the leader has that the follower has not acknowledged.
    pub lag: u64,
    /// The follower holds every entry the leader applied (so every acknowledged write), as
    /// nats-server counts a peer current (its last index at or past the leader's applied
    /// one): entries still in flight to a healthy follower under steady writes do not count.
    pub has_applied: bool,
    /// Time since the follower last acknowledged a heartbeat; `None` if it never did.
    pub last_ack: Option<std::time::Duration>,
}

/// Follows leadership changes of one group on this replica.
pub struct LeaderWatch {
    /// openraft's server metrics channel (vote, state, leader, membership). Not the full
    /// metrics: openraft sends those on every turn of the group's core loop (each tick, each
    /// replication answer), which would wake every watcher as often; the server metrics are
    /// sent only when one of their fields changed.
    rx: WatchReceiverOf<JetraftConfig, RaftServerMetrics<JetraftConfig>>,
    /// This node, to compute [`LeaderInfo::is_self`].
    node: NodeId,
    /// The group watched, for errors.
    group: GroupId,
    /// The view last returned by [`changed`](Self::changed) (or seen at creation).
    seen: LeaderInfo,
}

impl LeaderWatch {
    /// Leadership as last seen. openraft names the initialising node leader of term 0 for the
    /// moment between initialising a group and starting its first election; that is no
    /// leadership (it cannot commit anything), so it is reported as no leader.
    pub fn current(&self) -> LeaderInfo {
        let m = self.rx.borrow_watched();
        let term = m.vote.leader_id().term();
        let leader = m.current_leader.filter(|_| term > 0);
        LeaderInfo {
            leader: leader.map(NodeId),
            term,
            is_self: leader == Some(self.node.0),
        }
    }

    /// Returns the view as soon as the leader or term differs from the one last returned (or
    /// seen when the watch was made), waiting if needed. Fails once the group stopped.
    /// Cancel-safe: nothing is consumed until a changed view is returned.
    pub async fn changed(&mut self) -> Result<LeaderInfo, RaftError> {
        loop {
            let now = self.current();
            if now != self.seen {
                self.seen = now.clone();
                return Ok(now);
            }
            self.rx
                .changed()
                .await
                .map_err(|_closed| RaftError::Stopped {
                    group: self.group,
                    reason: "metrics channel closed".to_string(),
                })?;
        }
    }
}

/// What happens to voters left out of a [`GroupRegistry::change_voters`] call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemovedVoters {
    /// They stay in the group as learners and keep receiving the log.
    KeepAsLearners,
    /// They leave the group entirely (e.g. a node whose data was wiped and that rejoined under
    /// a new id).
    Remove,
}

/// The Raft groups of one node. Clones share the groups and the transport.
#[derive(Clone)]
pub struct GroupRegistry<T: Transport> {
    /// This node's id; every group on the node uses it.
    node: NodeId,
    /// Shared outbound transport, cloned into every group's network factory.
    transport: T,
    /// Validated timing, kept for deadlines.
    timing: RaftTiming,
    /// openraft config derived from `timing`; each group gets a copy named after it.
    config: openraft::Config,
    /// The running groups.
    groups: Groups,
    /// Set by [`shutdown`](Self::shutdown); stops the background tasks and the calls still
    /// waiting on a group. The same as `groups.stopping`.
    stopping: Stopping,
    /// The registry's background tasks (quiescence, watchdog, failover turns), awaited by
    /// [`shutdown`](Self::shutdown).
    tasks: tokio_util::task::TaskTracker,
}

impl<T: Transport> GroupRegistry<T> {
    /// A registry for `node` with no groups yet.
    pub fn new(node: NodeId, transport: T, timing: RaftTiming) -> Result<Self, RaftError> {
        let config = timing.to_openraft_config()?;
        let groups = Groups::default();
        Ok(Self {
            node,
            transport,
            timing,
            config,
            stopping: groups.stopping.clone(),
            groups,
            tasks: tokio_util::task::TaskTracker::new(),
        })
    }

    /// Runs `task` in the background until it ends or shutdown begins (it is dropped then);
    /// [`shutdown`](Self::shutdown) waits for it.
    pub(crate) fn spawn_task<F>(&self, task: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let stopping = self.stopping.clone();
        self.tasks.spawn(async move {
            stopping.run(task).await;
        });
    }

    /// The timing every group on the node uses.
    pub fn timing(&self) -> RaftTiming {
        self.timing
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.node
    }

    /// The group table, for inbound RPC dispatch.
    pub fn groups(&self) -> &Groups {
        &self.groups
    }

    /// The node's shared outbound transport.
    pub(crate) fn transport(&self) -> &T {
        &self.transport
    }

    /// Whether [`shutdown`](Self::shutdown) ran.
    pub(crate) fn is_shut_down(&self) -> bool {
        self.stopping.is_stopped()
    }

    /// Starts `group` on this node over `log` and `sm`. The group is not initialised: either
    /// call [`initialize`](Self::initialize) on one replica or let a leader add this node.
    pub async fn create_group<LS>(
        &self,
        group: GroupId,
        log: LS,
        sm: Box<dyn ReplicatedStateMachine>,
    ) -> Result<GroupRaft, RaftError>
    where
        LS: RaftLogStorage<JetraftConfig>,
    {
        if self.groups.get(group).is_some() {
            return Err(RaftError::GroupExists { group });
        }
        let network = GroupNetwork::new(self.transport.clone(), group);
        let sm = StateMachineAdapter::new(sm).map_err(|e| RaftError::Stopped {
            group,
            reason: e.to_string(),
        })?;
        let views = sm.views_out();
        let config = self.group_config(group);
        let keep = config.max_in_snapshot_log_to_keep;
        let raft = GroupRaft::new(self.node.0, config, network, log, sm)
            .await
            .map_err(|e| RaftError::Stopped {
                group,
                reason: e.to_string(),
            })?;
        views.set_lag_check(replica_replaying_log(&raft, keep));
        let inserted = match self.groups.map.write().entry(group) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(GroupEntry {
                    raft: raft.clone(),
                    quiet: Arc::default(),
                    in_flight: Arc::default(),
                });
                true
            }
        };
        if inserted {
            self.groups.created.notify_waiters();
        } else {
            // Lost a race with a concurrent create: keep the first, stop ours.
            let _ = raft.shutdown().await;
            return Err(RaftError::GroupExists { group });
        }
        tracing::info!(group = %group, node = %self.node, "raft group started");
        Ok(raft)
    }

    /// The shared config with `cluster_name` set to the group, so openraft's spans and logs
    /// (`cluster=g<id>`) say which group they belong to.
    fn group_config(&self, group: GroupId) -> Arc<openraft::Config> {
        Arc::new(openraft::Config {
            cluster_name: format!("g{group}"),
            ..self.config.clone()
        })
    }

    /// Stops `group` on this node and forgets it.
    pub async fn remove_group(&self, group: GroupId) -> Result<(), RaftError> {
        let raft = self
            .groups
            .map
            .write()
            .remove(&group)
            .ok_or(RaftError::GroupNotFound { group })?
            .raft;
        self.groups.contact.write().remove(&group);
        self.groups.caught_up.write().remove(&group);
        self.deadline(group, raft.shutdown())
            .await?
            .map_err(|e| RaftError::Stopped {
                group,
                reason: e.to_string(),
            })?;
        tracing::info!(group = %group, node = %self.node, "raft group removed");
        Ok(())
    }

    /// Stops every group (node shutdown).
    pub async fn shutdown(&self) {
        let started = tokio::time::Instant::now();
        self.stopping.stop(SHUTDOWN_DRAIN).await;
        tracing::debug!(took = ?started.elapsed(), "raft shutdown: calls drained");
        self.tasks.close();
        if tokio::time::timeout(SHUTDOWN_DRAIN, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                tasks = self.tasks.len(),
                "raft background tasks still running"
            );
        }
        tracing::debug!(took = ?started.elapsed(), "raft shutdown: background tasks ended");
        let all: Vec<(GroupId, GroupRaft)> = self
            .groups
            .map
            .write()
            .drain()
            .map(|(g, e)| (g, e.raft))
            .collect();
        for (group, raft) in all {
            let after = self.timing.propose_timeout;
            match tokio::time::timeout(after, raft.shutdown())
                .await
                .map_err(|_elapsed| RaftError::Timeout { group, after })
            {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(group = %group, error = %e, "raft group did not stop cleanly");
                }
                Err(e) => tracing::warn!(group = %group, error = %e, "raft group stop timed out"),
            }
            tracing::debug!(group = %group, took = ?started.elapsed(), "raft shutdown: group stopped");
        }
    }

    /// Records whether `peer`'s node link is up, as the cluster layer sees it. When a peer
    /// becomes unreachable, the quiet groups it leads or that this node leads with it wake
    /// ([`crate::quiesce`]), and the voters of every group it leads elect a successor at once,
    /// staggered by rank (`crate::failover`), instead of waiting out the election timeout and
    /// then the lease on the other voters (up to twice `election_max`); see
    /// [`Groups::leader_unreachable`]. When it comes back, the quiet groups this node leads
    /// with it wake, so that it hears heartbeats and catches up.
    pub fn set_peer_reachable(&self, peer: NodeId, reachable: bool) {
        if peer == self.node {
            return;
        }
        let changed = if reachable {
            self.groups.unreachable.write().remove(&peer.0)
        } else {
            self.groups.unreachable.write().insert(peer.0)
        };
        if !changed {
            return;
        }
        if reachable {
            self.transport.peer_link_up(peer.0);
            self.wake_groups_led_with(peer);
        } else {
            self.wake_groups_of(peer);
            self.elect_successors(peer);
        }
    }

    /// The Raft handle of `group`.
    pub fn raft(&self, group: GroupId) -> Result<GroupRaft, RaftError> {
        self.groups
            .get(group)
            .ok_or(RaftError::GroupNotFound { group })
    }

    /// The Raft handle of `group`, its timers started first if the group was quiet, and its
    /// leader lease renewed if it is too old for openraft to accept a membership change (a
    /// leader quiet for longer than half its lease, or one that just won an election): for
    /// every call that changes membership, hands leadership on or confirms a read.
    async fn awake_raft(&self, group: GroupId) -> Result<GroupRaft, RaftError> {
        let raft = self.awake_raft_unleased(group)?;
        if self.lease_unbacked(&raft) {
            self.renew_lease(&raft).await;
        }
        Ok(raft)
    }

    /// The Raft handle of `group`, its timers started first if the group was quiet, for a
    /// client write: openraft (patched, `vendor/openraft/JETRAFT-PATCH.md`) accepts those
    /// without a leader lease, so a write to a quiet group costs one round trip (its own
    /// AppendEntries, which also wakes the followers), not a heartbeat round first.
    fn awake_raft_unleased(&self, group: GroupId) -> Result<GroupRaft, RaftError> {
        let (raft, flag) = self
            .groups
            .flag(group)
            .ok_or(RaftError::GroupNotFound { group })?;
        flag.wake(&raft);
        Ok(raft)
    }

    /// Initialises `group` with `members` as its voters. Call on one replica only.
    pub async fn initialize(
        &self,
        group: GroupId,
        members: BTreeMap<NodeId, PeerNode>,
    ) -> Result<(), RaftError> {
        let raft = self.awake_raft(group).await?;
        let members: BTreeMap<u64, PeerNode> =
            members.into_iter().map(|(id, node)| (id.0, node)).collect();
        self.deadline(group, raft.initialize(members))
            .await?
            .map_err(|e| RaftError::Initialize {
                group,
                reason: e.to_string(),
            })
    }

    /// Proposes `command` to `group` and returns the state machine's response once it is
    /// committed and applied here. Only the leader accepts proposals; it needs no leader lease
    /// for them (see `awake_raft_unleased`).
    pub async fn propose(&self, group: GroupId, command: Bytes) -> Result<Bytes, RaftError> {
        let raft = self.awake_raft_unleased(group)?;
        let _counted = self.in_flight(group).map(|f| f.enter(Kind::Other));
        let resp = self
            .deadline(group, raft.client_write(Command(command)))
            .await?
            .map_err(|e| write_error(group, e))?;
        Ok(resp.data.0)
    }

    /// Submits `command` to `group` and returns once it is queued for the log, with a future
    /// that resolves to the state machine's answer once the entry is committed and applied.
    /// Commands submitted one after another (each awaited before the next) are logged in that
    /// order, while their commits overlap: this is how a leader keeps many proposals in flight
    /// without reordering them. The answer future is bounded by the proposal deadline.
    pub async fn submit(
        &self,
        group: GroupId,
        command: Bytes,
    ) -> Result<impl Future<Output = Result<Bytes, RaftError>> + Send + 'static, RaftError> {
        self.submit_counted(group, command, Kind::Other).await
    }

    /// [`submit`](Self::submit) for a proposal a client waits on (a publish): while it is the
    /// group's only proposal in flight, a single-voter group may fsync it inline
    /// ([`crate::in_flight`]).
    pub async fn submit_for_client(
        &self,
        group: GroupId,
        command: Bytes,
    ) -> Result<impl Future<Output = Result<Bytes, RaftError>> + Send + 'static, RaftError> {
        self.submit_counted(group, command, Kind::Client).await
    }

    /// The proposals made to `group` here and not answered yet (`None`: not running here).
    pub fn in_flight(&self, group: GroupId) -> Option<Arc<InFlight>> {
        let map = self.groups.map.read();
        map.get(&group).map(|e| e.in_flight.clone())
    }

    async fn submit_counted(
        &self,
        group: GroupId,
        command: Bytes,
        kind: Kind,
    ) -> Result<impl Future<Output = Result<Bytes, RaftError>> + Send + 'static, RaftError> {
        let raft = self.awake_raft_unleased(group)?;
        // Counted from before the core sees it until its answer arrived or was given up.
        let counted = self.in_flight(group).map(|f| f.enter(kind));
        let (responder, rx) = ProgressResponder::<JetraftConfig, _>::complete_only();
        self.deadline(
            group,
            raft.client_write_ff(Command(command), Some(responder)),
        )
        .await?
        .map_err(|e| RaftError::Stopped {
            group,
            reason: e.to_string(),
        })?;
        let after = self.timing.propose_timeout;
        Ok(async move {
            let _counted = counted;
            match tokio::time::timeout(after, rx).await {
                Err(_elapsed) => Err(RaftError::Timeout { group, after }),
                Ok(Err(_closed)) => Err(RaftError::Stopped {
                    group,
                    reason: "the group stopped before answering".to_string(),
                }),
                Ok(Ok(Ok(resp))) => Ok(resp.data.0),
                Ok(Ok(Err(e))) => Err(write_error(group, openraft::error::RaftError::APIError(e))),
            }
        })
    }

    /// Whether `group` was initialised (here or by a leader that reached this replica); `None`
    /// if that is unknown: the group is not here, stopped, or the node is shutting down.
    pub async fn is_initialized(&self, group: GroupId) -> Option<bool> {
        let raft = self.groups.get(group)?;
        // Not cut off when shutdown begins (see `Stopping::run_to_end`): the core answers at
        // once, and shutdown waits for it.
        let after = self.timing.propose_timeout;
        self.stopping
            .run_to_end(tokio::time::timeout(after, raft.is_initialized()))
            .await?
            .ok()?
            .ok()
    }

    /// Adds `node` (reachable at `peer`) to `group` as a learner and waits until it caught up
    /// (as openraft counts it: within its replication lag threshold, 5,000 entries, of the
    /// leader's log; so a group with a shorter log does not wait).
    pub async fn add_learner(
        &self,
        group: GroupId,
        node: NodeId,
        peer: PeerNode,
    ) -> Result<(), RaftError> {
        self.add_learner_with(group, node, peer, true).await
    }

    /// Adds `node` (reachable at `peer`) to `group` as a learner once the change is committed,
    /// without waiting for it to catch up: for a node about to replace a voter that can never
    /// answer again (see `JetStream::change_members` in the server).
    pub async fn add_learner_now(
        &self,
        group: GroupId,
        node: NodeId,
        peer: PeerNode,
    ) -> Result<(), RaftError> {
        self.add_learner_with(group, node, peer, false).await
    }

    async fn add_learner_with(
        &self,
        group: GroupId,
        node: NodeId,
        peer: PeerNode,
        catch_up: bool,
    ) -> Result<(), RaftError> {
        let raft = self.awake_raft(group).await?;
        self.deadline(group, raft.add_learner(node.0, peer, catch_up))
            .await?
            .map_err(|e| write_error(group, e))?;
        Ok(())
    }

    /// Makes `voters` the voter set of `group` (joint consensus). New voters must already be
    /// learners; voters left out are kept as learners or removed as `removed` says.
    pub async fn change_voters(
        &self,
        group: GroupId,
        voters: BTreeSet<NodeId>,
        removed: RemovedVoters,
    ) -> Result<(), RaftError> {
        let raft = self.awake_raft(group).await?;
        let voters: BTreeSet<u64> = voters.into_iter().map(|n| n.0).collect();
        let retain = removed == RemovedVoters::KeepAsLearners;
        self.deadline(group, raft.change_membership(voters, retain))
            .await?
            .map_err(|e| write_error(group, e))?;
        Ok(())
    }

    /// Hands leadership of `group` from this node (which must lead it) to `to`, and waits until
    /// this replica sees `to` as leader.
    pub async fn transfer_leadership(&self, group: GroupId, to: NodeId) -> Result<(), RaftError> {
        let raft = self.awake_raft(group).await?;
        let info = self.leader(group)?;
        if !info.is_self {
            return Err(RaftError::NotLeader {
                group,
                leader: info.leader,
                leader_addr: None,
            });
        }
        // Waiting for the new leader is bounded by the same deadline as proposals.
        raft.trigger()
            .transfer_leader(to.0)
            .await
            .map_err(|e| RaftError::Stopped {
                group,
                reason: e.to_string(),
            })?;
        raft.wait(Some(self.timing.propose_timeout))
            .current_leader(to.0, "leadership transferred")
            .await
            .map_err(|e| match e {
                WaitError::Timeout(after, _) => RaftError::Timeout { group, after },
                other => RaftError::Stopped {
                    group,
                    reason: other.to_string(),
                },
            })?;
        Ok(())
    }

    /// Who leads `group`, as this replica sees it (no network round).
    pub fn leader(&self, group: GroupId) -> Result<LeaderInfo, RaftError> {
        Ok(self.watch_leader(group)?.current())
    }

    /// Whether this replica leads `group` and has applied everything committed before it took
    /// over: a new leader first commits an entry of its own term, and once that is applied its
    /// state holds every write acknowledged by any earlier leader. Until then its reads (stream
    /// and consumer info, message gets) could miss such writes, as after a restart that is
    /// still re-applying its log.
    pub fn leader_caught_up(&self, group: GroupId) -> Result<bool, RaftError> {
        let raft = self.raft(group)?;
        let rx = raft.metrics();
        let m = rx.borrow_watched();
        Ok(m.state == openraft::ServerState::Leader
            && m.last_applied
                .as_ref()
                .is_some_and(|l| l.leader_id.term == m.current_term))
    }

    /// On the leader of `group`: makes the read it answers next linearizable. It confirms this
    /// node still leads and then waits until it applied everything committed at that point.
    /// The confirmation is a quorum's answer to a heartbeat sent at most `lease` ago, while this
    /// node's links reach a quorum of the voters (see below); otherwise (Raft's read index) it
    /// sends heartbeats now and waits for a quorum to answer them. Concurrent reads share
    /// heartbeat rounds. False on a follower, when leadership is lost meanwhile, or after
    /// `bound`; so a leader cut off from its majority stops answering reads within `lease`.
    ///
    /// Why a short lease is safe here although openraft's own lease is not: a follower whose
    /// node link to the leader is down votes for a successor at once (fast failover, see
    /// `network`), without waiting out the leader's lease. A silent cut is noticed by the link
    /// keepalive only seconds after the last message, so `lease` must stay well below that; a
    /// link closed outright is seen by both ends at once, and this node then no longer counts
    /// the peer towards the quorum of links it needs for a lease read. Followers that still
    /// have their links refuse other candidates until a full election timeout passed without
    /// the leader, so `lease` is also capped at half the shortest election timeout.
    pub async fn confirm_read(
        &self,
        group: GroupId,
        lease: Duration,
        bound: Duration,
    ) -> Result<bool, RaftError> {
        let confirm = async {
            let raft = self.awake_raft(group).await?;
            if self.sole_voter(&raft) {
                // Nobody else can lead: every acknowledged write was applied before its answer.
                return Ok(true);
            }
            let option = if self.links_reach_quorum(&raft) {
                let lease = lease.min(self.timing().election_min / 2);
                openraft::LinearizerOption::new(Some(lease), true)
            } else {
                openraft::ReadPolicy::ReadIndex.into()
            };
            Ok(raft.ensure_linearizable(option).await.is_ok())
        };
        tokio::time::timeout(bound, confirm)
            .await
            .unwrap_or(Ok(false))
    }

    /// Whether this node leads `raft`'s group as its only voter.
    fn sole_voter(&self, raft: &GroupRaft) -> bool {
        let rx = raft.metrics();
        let m = rx.borrow_watched();
        m.current_leader == Some(self.node.0)
            && m.membership_config
                .membership()
                .voter_ids()
                .all(|v| v == self.node.0)
    }

    /// Whether this node (counted) and the voters of `raft`'s group it has a node link to make
    /// a quorum.
    fn links_reach_quorum(&self, raft: &GroupRaft) -> bool {
        let rx = raft.metrics();
        let m = rx.borrow_watched();
        let unreachable = self.groups.unreachable.read();
        let voters: Vec<u64> = m.membership_config.membership().voter_ids().collect();
        let linked = voters
            .iter()
            .filter(|v| **v == self.node.0 || !unreachable.contains(v))
            .count();
        linked * 2 > voters.len()
    }

    /// The members of `group` as this replica knows its membership: the voters (during a joint
    /// change, those of both configurations), then the learners; empty before the group has a
    /// membership.
    pub fn members(&self, group: GroupId) -> Result<Vec<u64>, RaftError> {
        let raft = self.raft(group)?;
        let rx = raft.server_metrics();
        let m = rx.borrow_watched();
        let membership = m.membership_config.membership();
        Ok(membership
            .voter_ids()
            .chain(membership.learner_ids())
            .collect())
    }

    /// On the leader of `group`: the replication progress of every other member (voters and
    /// learners). Empty on a follower (only the leader tracks replication).
    pub fn followers(&self, group: GroupId) -> Result<Vec<FollowerProgress>, RaftError> {
        use openraft::async_runtime::Instant as _;
        let raft = self.raft(group)?;
        let rx = raft.metrics();
        let m = rx.borrow_watched();
        let last = m.last_log_index.unwrap_or(0);
        let applied = m.last_applied.as_ref().map_or(0, |id| id.index);
        let Some(replication) = &m.replication else {
            return Ok(Vec::new());
        };
        // A quiet group sends no heartbeats: a follower that agreed to go quiet and whose
        // node link is up counts as just heard.
        let quiet = self.groups.is_quiet(group);
        Ok(replication
            .iter()
            .filter(|(node, _)| **node != self.node.0)
            .map(|(node, matched)| FollowerProgress {
                node: NodeId(*node),
                lag: last.saturating_sub(matched.as_ref().map_or(0, |id| id.index)),
                has_applied: matched.as_ref().map_or(0, |id| id.index) >= applied,
                last_ack: if quiet && self.groups.is_reachable(*node) {
                    Some(Duration::ZERO)
                } else {
                    m.heartbeat
                        .as_ref()
                        .and_then(|h| h.get(node).cloned().flatten())
                        .map(|at| at.elapsed())
                },
            })
            .collect())
    }

    /// A watch on who leads `group` (for tasks that run only on the leader).
    pub fn watch_leader(&self, group: GroupId) -> Result<LeaderWatch, RaftError> {
        let raft = self.raft(group)?;
        let mut watch = LeaderWatch {
            rx: raft.server_metrics(),
            node: self.node,
            group,
            seen: LeaderInfo {
                leader: None,
                term: 0,
                is_self: false,
            },
        };
        watch.seen = watch.current();
        Ok(watch)
    }

    /// Runs a call on `group` within the proposal deadline; it gives up early, with
    /// [`RaftError::Stopped`], if the node starts shutting down meanwhile.
    async fn deadline<F: Future>(&self, group: GroupId, fut: F) -> Result<F::Output, RaftError> {
        let after = self.timing.propose_timeout;
        match self.stopping.run(tokio::time::timeout(after, fut)).await {
            None => Err(RaftError::Stopped {
                group,
                reason: "the node is shutting down".to_string(),
            }),
            Some(out) => out.map_err(|_elapsed| RaftError::Timeout { group, after }),
        }
    }
}

/// A replica this leader heard from within this long counts as reachable.
const REPLAYING_HEARD_WITHIN: Duration = Duration::from_secs(5);

/// As this node leads `raft`'s group: when a replica heard from recently is more than `keep`
/// entries (what a snapshot build leaves of the log before it) behind the last one, the number
/// of entries since the last snapshot (the hold's bounds are in `snapshot_hold`).
fn replica_replaying_log(raft: &GroupRaft, keep: u64) -> LagCheck {
    use openraft::async_runtime::Instant as _;
    let metrics = raft.metrics();
    Box::new(move || {
        let m = metrics.borrow_watched();
        let last = m.last_log_index.unwrap_or(0);
        let since_snapshot = last.saturating_sub(m.snapshot.as_ref().map_or(0, |id| id.index));
        let (Some(replication), Some(heard)) = (&m.replication, &m.heartbeat) else {
            return None;
        };
        let lagging = replication.iter().any(|(node, matched)| {
            let behind = matched.as_ref().map_or(0, |id| id.index) + keep < last;
            let reachable = heard
                .get(node)
                .cloned()
                .flatten()
                .is_some_and(|at| at.elapsed() < REPLAYING_HEARD_WITHIN);
            behind && reachable
        });
        lagging.then_some(since_snapshot)
    })
}

fn not_leader(group: GroupId, f: ForwardToLeader<JetraftConfig>) -> RaftError {
    RaftError::NotLeader {
        group,
        leader: f.leader_id.map(NodeId),
        leader_addr: f.leader_node.map(|n| n.addr),
    }
}

fn write_error(
    group: GroupId,
    e: openraft::error::RaftError<JetraftConfig, ClientWriteError<JetraftConfig>>,
) -> RaftError {
    match e {
        openraft::error::RaftError::APIError(api) => match api {
            ClientWriteError::ForwardToLeader(f) => not_leader(group, f),
            ClientWriteError::LogEntryDiscarded(f) => RaftError::OutcomeUnknown {
                group,
                leader: f.leader_id.map(NodeId),
            },
            ClientWriteError::ChangeMembershipError(e) => RaftError::Membership {
                group,
                reason: e.to_string(),
            },
            ClientWriteError::PreconditionFailed(e) => RaftError::Rejected {
                group,
                reason: e.to_string(),
            },
        },
        openraft::error::RaftError::Fatal(f) => RaftError::Stopped {
            group,
            reason: f.to_string(),
        },
    }
}
