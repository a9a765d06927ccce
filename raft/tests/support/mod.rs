//! In-process test cluster for raft tests: N nodes, each a `GroupRegistry` over one shared
//! `MemNetwork`, hosting groups whose state machine is an append-only list of commands.
//!
//! `wait_for_*` / `must_*` helpers poll with a bound and panic with context on timeout.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code, unreachable_pub)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use jetraft_raft::mem_log::MemLogStore;
use jetraft_raft::network::mem::{MemNetwork, MemTransport};
use jetraft_raft::{
    AppliedState, GroupId, GroupRegistry, LogIndex, NodeId, PeerNode, RaftError, RaftTiming,
    ReplicatedStateMachine, StateMachineError,
};
use openraft::async_runtime::WatchReceiver;
use parking_lot::Mutex;

/// Sends tracing output to the test's captured output when `RUST_LOG` is set (nextest shows
/// it for failing tests only); a no-op otherwise or when already installed.
pub fn init_log() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// Test timing: fast enough for tests, slow enough for a busy 2-core debug build.
pub fn test_timing() -> RaftTiming {
    RaftTiming::for_tests()
}

/// Deterministic test state machine: appends every command; answers with the new length (u64 BE).
#[derive(Default)]
pub struct ListMachine {
    /// Shared with the test so it can compare replicas.
    items: Arc<Mutex<Vec<Bytes>>>,
}

impl ReplicatedStateMachine for ListMachine {
    fn apply(&mut self, _index: LogIndex, command: &[u8]) -> Result<Bytes, StateMachineError> {
        let mut items = self.items.lock();
        items.push(Bytes::copy_from_slice(command));
        Ok(Bytes::copy_from_slice(&(items.len() as u64).to_be_bytes()))
    }

    fn snapshot(&self) -> Result<Bytes, StateMachineError> {
        let mut out = Vec::new();
        for item in self.items.lock().iter() {
            out.extend_from_slice(&(item.len() as u32).to_be_bytes());
            out.extend_from_slice(item);
        }
        Ok(Bytes::from(out))
    }

    fn restore(&mut self, mut snapshot: &[u8]) -> Result<(), StateMachineError> {
        let mut items = Vec::new();
        while !snapshot.is_empty() {
            let corrupt = || StateMachineError::CorruptSnapshot {
                reason: "truncated item".into(),
            };
            let len_bytes: [u8; 4] = snapshot.get(..4).ok_or_else(corrupt)?.try_into().unwrap();
            let len = u32::from_be_bytes(len_bytes) as usize;
            let item = snapshot.get(4..4 + len).ok_or_else(corrupt)?;
            items.push(Bytes::copy_from_slice(item));
            snapshot = &snapshot[4 + len..];
        }
        *self.items.lock() = items;
        Ok(())
    }
}

/// The "disk" of a [`DurableList`]: what survives a restart.
#[derive(Default)]
pub struct Disk {
    pub items: Vec<Bytes>,
    pub applied: Option<AppliedState>,
    /// How many times `save_applied` ran.
    pub saves: usize,
}

/// A list state machine whose items and applied state only become durable in `save_applied`,
/// like a RocksDB-backed one writing one batch.
pub struct DurableList {
    pub disk: Arc<Mutex<Disk>>,
    /// Applied but not yet saved.
    pending: Vec<Bytes>,
}

impl DurableList {
    /// A state machine over `disk` (empty or left by a previous instance).
    pub fn open(disk: Arc<Mutex<Disk>>) -> Self {
        Self {
            disk,
            pending: Vec::new(),
        }
    }
}

impl ReplicatedStateMachine for DurableList {
    fn apply(&mut self, _index: LogIndex, command: &[u8]) -> Result<Bytes, StateMachineError> {
        self.pending.push(Bytes::copy_from_slice(command));
        let len = self.disk.lock().items.len() + self.pending.len();
        Ok(Bytes::copy_from_slice(&(len as u64).to_be_bytes()))
    }

    fn snapshot(&self) -> Result<Bytes, StateMachineError> {
        let mut all = self.disk.lock().items.clone();
        all.extend(self.pending.iter().cloned());
        ListMachine {
            items: Arc::new(Mutex::new(all)),
        }
        .snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), StateMachineError> {
        let mut list = ListMachine::default();
        list.restore(snapshot)?;
        self.pending.clear();
        self.disk.lock().items = list.items.lock().clone();
        Ok(())
    }

    fn save_applied(&mut self, state: &AppliedState) -> Result<(), StateMachineError> {
        let mut disk = self.disk.lock();
        disk.items.append(&mut self.pending);
        disk.applied = Some(state.clone());
        disk.saves += 1;
        Ok(())
    }

    fn load_applied(&self) -> Result<Option<AppliedState>, StateMachineError> {
        Ok(self.disk.lock().applied.clone())
    }
}

/// What the test keeps of one replica: the state machine's list and its log store.
pub type Replica = (Arc<Mutex<Vec<Bytes>>>, MemLogStore);

/// One node of the test cluster.
pub struct TestNode {
    pub registry: GroupRegistry<MemTransport>,
    /// Per group: the state machine's list and the log store (to inspect purging).
    pub replicas: Mutex<BTreeMap<GroupId, Replica>>,
}

impl TestNode {
    /// Tries to create `group` again and returns the error.
    pub async fn start_group_twice_error(&self, group: GroupId) -> RaftError {
        self.registry
            .create_group(group, MemLogStore::new(), Box::new(ListMachine::default()))
            .await
            .unwrap_err()
    }
}

pub struct TestCluster {
    pub net: MemNetwork,
    pub nodes: BTreeMap<NodeId, TestNode>,
    /// The timing of every node added.
    timing: RaftTiming,
}

pub fn addr(node: NodeId) -> PeerNode {
    PeerNode::new(format!("mem://node-{}", node.0))
}

impl TestCluster {
    /// `n` nodes with ids 1..=n, no groups.
    pub fn new(n: u64) -> Self {
        Self::with_nodes(&(1..=n).map(NodeId).collect::<Vec<_>>())
    }

    pub fn with_nodes(ids: &[NodeId]) -> Self {
        Self::with_timing(ids, test_timing())
    }

    /// Nodes `ids`, each with `timing`.
    pub fn with_timing(ids: &[NodeId], timing: RaftTiming) -> Self {
        let mut c = Self {
            net: MemNetwork::new(7),
            nodes: BTreeMap::new(),
            timing,
        };
        for &id in ids {
            c.add_node(id);
        }
        c
    }

    /// Adds an empty node `id` to the network.
    pub fn add_node(&mut self, id: NodeId) {
        let registry = GroupRegistry::new(id, self.net.transport(id), self.timing).unwrap();
        self.net.register(id, registry.groups().clone());
        self.nodes.insert(
            id,
            TestNode {
                registry,
                replicas: Mutex::new(BTreeMap::new()),
            },
        );
    }

    /// Stops node `id` and forgets it along with all its data (a wiped disk).
    pub async fn wipe_node(&mut self, id: NodeId) {
        self.net.unregister(id);
        let node = self.nodes.remove(&id).unwrap();
        node.registry.shutdown().await;
    }

    pub fn ids(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    pub fn node(&self, id: NodeId) -> &TestNode {
        &self.nodes[&id]
    }

    /// Starts `group` (uninitialised) on `on`.
    pub async fn start_group(&self, group: GroupId, on: &[NodeId]) {
        for id in on {
            let node = self.node(*id);
            let items = Arc::new(Mutex::new(Vec::new()));
            let log = MemLogStore::new();
            let sm = ListMachine {
                items: items.clone(),
            };
            node.registry
                .create_group(group, log.clone(), Box::new(sm))
                .await
                .unwrap();
            node.replicas.lock().insert(group, (items, log));
        }
    }

    /// Starts `group` on `members` and initialises it with them as voters.
    pub async fn must_create_group(&self, group: GroupId, members: &[NodeId]) {
        self.start_group(group, members).await;
        let voters: BTreeMap<NodeId, PeerNode> = members.iter().map(|&n| (n, addr(n))).collect();
        self.node(members[0])
            .registry
            .initialize(group, voters)
            .await
            .unwrap();
    }

    /// Waits until every node in `among` agrees on one leader that is itself in `among`.
    pub async fn wait_for_leader(&self, group: GroupId, among: &[NodeId]) -> NodeId {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
        loop {
            let views: Vec<_> = among
                .iter()
                .map(|n| self.node(*n).registry.leader(group).unwrap())
                .collect();
            if let Some(leader) = views[0].leader
                && among.contains(&leader)
                && views.iter().all(|v| v.leader == Some(leader))
                && self.node(leader).registry.leader(group).unwrap().is_self
            {
                return leader;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no agreed leader for group {group} among {among:?}: {views:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Proposes `cmd` through the current leader among `among`, following NotLeader hints.
    /// A proposal whose outcome is unknown is settled (see [`Self::settle`]) before it is made
    /// again, so `cmd` is applied once.
    pub async fn must_propose(&self, group: GroupId, among: &[NodeId], cmd: &str) -> Bytes {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let cmd_bytes = Bytes::copy_from_slice(cmd.as_bytes());
        let before = among
            .iter()
            .map(|&n| {
                self.raw_items(group, n)
                    .iter()
                    .filter(|i| **i == cmd_bytes)
                    .count()
            })
            .max()
            .unwrap_or(0);
        let mut target = self.wait_for_leader(group, among).await;
        loop {
            let res = self
                .node(target)
                .registry
                .propose(group, Bytes::copy_from_slice(cmd.as_bytes()))
                .await;
            match res {
                Ok(resp) => return resp,
                Err(RaftError::NotLeader {
                    leader: Some(l), ..
                }) if among.contains(&l) => target = l,
                Err(e) => {
                    if matches!(
                        e,
                        RaftError::OutcomeUnknown { .. } | RaftError::Timeout { .. }
                    ) && let Some(resp) = self.settle(group, among, &cmd_bytes, before).await
                    {
                        return resp;
                    }
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "propose {cmd:?} to group {group} failed: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    target = self.wait_for_leader(group, among).await;
                }
            }
        }
    }

    /// Settles a proposal of unknown outcome: commits a marker (an empty command, which
    /// [`Self::items`] hides) through the current leader, so every entry before it in that
    /// leader's log is applied and any entry not in it can never commit. Returns the answer
    /// `cmd` got (the list length after it) if the leader now holds more than `before` copies.
    async fn settle(
        &self,
        group: GroupId,
        among: &[NodeId],
        cmd: &Bytes,
        before: usize,
    ) -> Option<Bytes> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let leader = self.wait_for_leader(group, among).await;
            match self
                .node(leader)
                .registry
                .propose(group, Bytes::new())
                .await
            {
                Ok(_) => {
                    let items = self.raw_items(group, leader);
                    let copies = items.iter().filter(|i| *i == cmd).count();
                    let at = items.iter().rposition(|i| i == cmd)?;
                    return (copies > before)
                        .then(|| Bytes::copy_from_slice(&((at + 1) as u64).to_be_bytes()));
                }
                Err(e) => {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "marker for group {group} failed: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// The state machine contents of `group` on `node`, markers (see [`Self::settle`]) left out.
    pub fn items(&self, group: GroupId, node: NodeId) -> Vec<Bytes> {
        let mut items = self.raw_items(group, node);
        items.retain(|i| !i.is_empty());
        items
    }

    /// The state machine contents of `group` on `node`, markers included; empty for a group
    /// a test started by itself (outside [`Self::start_group`]).
    fn raw_items(&self, group: GroupId, node: NodeId) -> Vec<Bytes> {
        let replicas = self.node(node).replicas.lock();
        replicas
            .get(&group)
            .map(|(items, _)| items.lock().clone())
            .unwrap_or_default()
    }

    /// The log store of `group` on `node`.
    pub fn log(&self, group: GroupId, node: NodeId) -> MemLogStore {
        self.node(node).replicas.lock()[&group].1.clone()
    }

    /// Waits until every node in `nodes` has exactly `expected` applied, in that order.
    pub async fn wait_for_items(&self, group: GroupId, nodes: &[NodeId], expected: &[&str]) {
        let want: Vec<Bytes> = expected
            .iter()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let states: Vec<Vec<Bytes>> = nodes.iter().map(|n| self.items(group, *n)).collect();
            if states.iter().all(|s| *s == want) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "group {group} replicas did not converge to {expected:?}: {states:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until every node in `nodes` applied the leader's whole log and they hold the same
    /// list; returns it.
    pub async fn wait_for_agreement(&self, group: GroupId, nodes: &[NodeId]) -> Vec<Bytes> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let leader = self.wait_for_leader(group, nodes).await;
            let raft = self.node(leader).registry.raft(group).unwrap();
            let last = raft.metrics().borrow_watched().last_log_index;
            let applied: Vec<Option<u64>> = nodes
                .iter()
                .map(|n| {
                    let r = self.node(*n).registry.raft(group).unwrap();
                    r.metrics().borrow_watched().last_applied.map(|id| id.index)
                })
                .collect();
            let states: Vec<Vec<Bytes>> = nodes.iter().map(|n| self.items(group, *n)).collect();
            if applied.iter().all(|a| *a == last) && states.iter().all(|s| *s == states[0]) {
                return states[0].clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "group {group} replicas disagree (applied {applied:?}, last {last:?}): {states:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Voter ids of `group` as `node` sees them.
    pub fn voters(&self, group: GroupId, node: NodeId) -> BTreeSet<u64> {
        let raft = self.node(node).registry.raft(group).unwrap();
        raft.voter_ids().collect()
    }

    pub async fn shutdown(&self) {
        for node in self.nodes.values() {
            node.registry.shutdown().await;
        }
    }
}

/// Decodes a `ListMachine` response (list length after the apply).
pub fn len_of(resp: &Bytes) -> u64 {
    u64::from_be_bytes(resp.as_ref().try_into().unwrap())
}
