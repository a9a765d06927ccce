//! In-process JetStream clusters for tests: N nodes in one test process, each with its own
//! [`Bus`], [`JetStream`] runtime and RocksDB store (a temp dir per node), talking Raft over the
//! raft crate's [`MemTransport`](jetraft_raft::network::mem::MemTransport) and forwarding client
//! messages over in-process links ([`links`]). A three-node cluster forms in about a second, and
//! partitions, node stops and restarts take milliseconds, so the cluster behaviours (placement,
//! forwarding, leader changes, catch-up) are tested in the unit-test tier; real processes
//! (`tests/`) stay for the end-to-end and chaos tests.
//!
//! What is real: the whole JetStream runtime (API handlers, capture and forwarding, stream and
//! meta state machines, consumer engines, reconcile), openraft with RocksDB logs and file
//! streams, the bus with its sublist and client interest. What is replaced: the gRPC Raft
//! transport (by `MemTransport`), the cluster links (by [`links::Hub`]), formation from
//! `--routes` and peer admission (the meta group is initialised with every node as a voter and
//! each node is recorded as a meta peer directly, as `JetStream::membership_loop` would once
//! the links are up), and client sockets ([`TestClient`] reads the encoded frames).
//!
//! API:
//! - [`JsCluster::start`]`(n)`: nodes `1..=n`, formed, every node recorded in the meta peers.
//! - [`JsCluster::client`]`(node)`: a [`TestClient`] of that node's bus; `request`/`publish`.
//! - [`JsCluster::api`]: one `$JS.API` request through a node, answer as JSON.
//! - Faults: [`JsCluster::isolate`], [`JsCluster::partition`], [`JsCluster::heal`] (Raft and
//!   message links alike), [`JsCluster::stop`] and [`JsCluster::restart`] (same store dir,
//!   same node id); [`JsCluster::net`] for delays and random drops. Like
//!   `JetStream::membership_loop` when links drop or come back, each of them reports the link
//!   state to every running node's Raft registry (`set_peer_reachable`), so the groups a lost
//!   node led elect a successor at once, as in a real cluster.
//! - Waits: [`JsCluster::wait_leader`] (every node in a set agrees), [`eventually`].
//!
//! Every wait is bounded and panics with what it saw. Set `RUST_LOG` to see the nodes' logs in
//! a failing test's output.

mod client;
mod js_cluster_tests;
mod js_replica_tests;
mod links;
mod membership_tests;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use jetraft_proto::meta::{MetaCommand, Peer, meta_command};
use jetraft_raft::network::mem::MemNetwork;
use jetraft_raft::{GroupId, NodeId, PeerNode, RaftError, RaftTiming};
use prost::Message;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::bus::{Bus, PeerLinks};
use crate::config::Config;
use crate::jetstream::runtime::{JetStream, JetStreamContext, JetStreamError};
use crate::node::NodeInfo;

pub(crate) use client::{TestClient, TestMsg};

/// Bound of every wait in the harness (elections take well under a second with
/// [`test_timing`]; this leaves room for a loaded 2-core machine).
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// Raft timing of the test nodes: the raft crate's test timing.
pub(crate) fn test_timing() -> RaftTiming {
    RaftTiming::for_tests()
}

/// Sends tracing output to the test's captured output when `RUST_LOG` is set.
pub(crate) fn init_log() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// Polls `check` every 10 ms until it returns `Some`, for at most [`WAIT`]; panics with `what`
/// and the last `Err` it returned.
pub(crate) async fn eventually<T>(what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match check() {
            Ok(v) => return v,
            Err(last) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{what}: not within {WAIT:?}; last: {last}"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The Raft address of a test node (only recorded; the in-process wire routes by id).
fn mem_addr(node: NodeId) -> String {
    format!("mem://node-{}", node.0)
}

/// One running node.
pub(crate) struct TestNode {
    /// Its routing.
    pub(crate) bus: Bus,
    /// Its JetStream runtime.
    pub(crate) js: Arc<JetStream>,
    /// Its tasks (awaited on stop).
    tasks: TaskTracker,
    /// Cancelled on stop.
    shutdown: CancellationToken,
}

/// A node of the cluster, running or stopped; its store survives a stop.
struct Slot {
    /// Server name (`n<id>`).
    name: String,
    /// The node's store dir.
    dir: tempfile::TempDir,
    /// Its `server_tags`.
    tags: Vec<String>,
    /// The node while it runs.
    running: Option<TestNode>,
}

/// An in-process JetStream cluster (see the module docs).
pub(crate) struct JsCluster {
    /// The Raft wire and its fault knobs.
    net: MemNetwork,
    /// The message links.
    hub: Arc<links::Hub>,
    /// Every node, by id.
    slots: BTreeMap<NodeId, Slot>,
}

impl JsCluster {
    /// Starts nodes `1..=n`, initialises the meta group with all of them as voters, waits for
    /// a meta leader and records every node in the meta peers.
    pub(crate) async fn start(n: u64) -> Self {
        Self::start_tagged(n, &[]).await
    }

    /// [`Self::start`] with `server_tags`: node `i + 1` gets `tags[i]` (none past its end).
    pub(crate) async fn start_tagged(n: u64, tags: &[&[&str]]) -> Self {
        init_log();
        let net = MemNetwork::new(7);
        let mut cluster = Self {
            hub: Arc::new(links::Hub::new(net.clone())),
            net,
            slots: BTreeMap::new(),
        };
        for id in (1..=n).map(NodeId) {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
            let index = usize::try_from(id.0 - 1).unwrap_or(usize::MAX);
            let slot = Slot {
                name: format!("n{}", id.0),
                dir,
                tags: (tags.get(index).copied().unwrap_or_default().iter())
                    .map(|t| t.to_string())
                    .collect(),
                running: None,
            };
            cluster.slots.insert(id, slot);
            let node = cluster.boot(id).await;
            cluster.slot_mut(id).running = Some(node);
        }
        let voters: BTreeMap<NodeId, PeerNode> = cluster
            .ids()
            .into_iter()
            .map(|id| (id, PeerNode::new(mem_addr(id))))
            .collect();
        cluster.node(NodeId(1)).js.initialize_meta(voters).await;
        cluster.wait_leader(GroupId::META, &cluster.ids()).await;
        for id in cluster.ids() {
            let peer = cluster.peer_record(id);
            cluster.propose_meta(meta_command::Op::AddPeer(peer)).await;
        }
        let ids = cluster.ids();
        eventually("every node sees every meta peer", || {
            for id in &ids {
                let peers = cluster.node(*id).js.meta().read(|m| m.peers().len());
                if peers != ids.len() {
                    return Err(format!("{id} knows {peers} peers"));
                }
            }
            Ok(())
        })
        .await;
        cluster
    }

    /// Starts node `id` on its store dir (creating or resuming its data).
    async fn boot(&self, id: NodeId) -> TestNode {
        let slot = &self.slots[&id];
        let config = Arc::new(Config {
            server_name: Some(slot.name.clone()),
            server_tags: slot.tags.clone(),
            cluster: crate::config::ClusterConfig {
                name: Some("inproc".to_string()),
                ..Default::default()
            },
            jetstream: crate::config::JetStreamConfig {
                enabled: true,
                store_dir: slot.dir.path().to_path_buf(),
                ..Default::default()
            },
            ..Config::default()
        });
        let info = Arc::new(NodeInfo::new(
            config.server_name.clone(),
            "127.0.0.1".to_string(),
            client_addr(id),
            config.cluster.name.clone(),
        ));
        let links: Arc<dyn PeerLinks> = Arc::new(links::NodeLinks::new(id, self.hub.clone()));
        let bus = Bus::new(Some(links));
        let tasks = TaskTracker::new();
        let shutdown = CancellationToken::new();
        let ctx = JetStreamContext {
            bus: bus.clone(),
            info,
            config,
            cluster: None,
            tasks: tasks.clone(),
            shutdown: shutdown.clone(),
        };
        // A restarted node's previous run may still be closing its RocksDB (the last handles
        // drop as its tasks end): retry the open for a while.
        let deadline = tokio::time::Instant::now() + WAIT;
        let js = loop {
            let started = JetStream::start(
                ctx.clone(),
                id,
                self.net.transport(id).into(),
                mem_addr(id),
                true,
                test_timing(),
            )
            .await;
            match started {
                Ok(js) => break js,
                Err(JetStreamError::Store { .. }) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("node {id} did not start: {e:?}"),
            }
        };
        self.net.register(id, js.registry().groups().clone());
        self.hub.attach(id, bus.clone());
        TestNode {
            bus,
            js,
            tasks,
            shutdown,
        }
    }

    /// Stops node `id` as a crash would look to the others (its links and Raft endpoint go
    /// first), then shuts its runtime down and waits for its tasks. Its store stays.
    pub(crate) async fn stop(&mut self, id: NodeId) {
        let node = self
            .slot_mut(id)
            .running
            .take()
            .unwrap_or_else(|| panic!("node {id} is not running"));
        self.net.unregister(id);
        self.hub.detach(id);
        self.report_links();
        node.js.shutdown().await;
        node.shutdown.cancel();
        node.tasks.close();
        assert!(
            tokio::time::timeout(WAIT, node.tasks.wait()).await.is_ok(),
            "node {id}: {} tasks still running after stop",
            node.tasks.len()
        );
    }

    /// Starts the stopped node `id` again on the same store dir under the same node id.
    pub(crate) async fn restart(&mut self, id: NodeId) {
        assert!(
            self.slots[&id].running.is_none(),
            "node {id} is still running"
        );
        let node = self.boot(id).await;
        self.slot_mut(id).running = Some(node);
        for other in self.running() {
            if other != id {
                self.node(other).js.registry().peer_restarted(id);
            }
        }
        self.report_links();
    }

    /// Cuts every link of node `id` (Raft and messages).
    pub(crate) fn isolate(&self, id: NodeId) {
        self.net.isolate(id);
        self.report_links();
    }

    /// Cuts the links between `a` and `b` (Raft and messages), both directions.
    pub(crate) fn partition(&self, a: NodeId, b: NodeId) {
        self.net.partition(a, b);
        self.report_links();
    }

    /// Removes every cut and isolation.
    pub(crate) fn heal(&self) {
        self.net.heal();
        self.report_links();
    }

    /// Tells every running node's registry which peers it can reach (running and not cut off),
    /// as the membership loop does from the cluster links' state.
    fn report_links(&self) {
        let running = self.running();
        for a in &running {
            let registry = self.node(*a).js.registry();
            for b in self.ids().into_iter().filter(|b| b != a) {
                let reachable = running.contains(&b) && self.net.is_linked(*a, b);
                registry.set_peer_reachable(b, reachable);
            }
        }
    }

    /// Stops every running node.
    pub(crate) async fn shutdown(mut self) {
        for id in self.running() {
            self.stop(id).await;
        }
    }

    /// The Raft wire, for delays and random drops (cuts go through [`Self::isolate`],
    /// [`Self::partition`] and [`Self::heal`], which also report them to the nodes).
    pub(crate) fn net(&self) -> &MemNetwork {
        &self.net
    }

    /// Every node id, running or not.
    pub(crate) fn ids(&self) -> Vec<NodeId> {
        self.slots.keys().copied().collect()
    }

    /// The ids of the running nodes.
    pub(crate) fn running(&self) -> Vec<NodeId> {
        self.slots
            .iter()
            .filter(|(_, s)| s.running.is_some())
            .map(|(id, _)| *id)
            .collect()
    }

    /// The running node `id`.
    pub(crate) fn node(&self, id: NodeId) -> &TestNode {
        self.slots[&id]
            .running
            .as_ref()
            .unwrap_or_else(|| panic!("node {id} is not running"))
    }

    /// The server name of node `id` (`n<id>`).
    pub(crate) fn name(&self, id: NodeId) -> &str {
        &self.slots[&id].name
    }

    fn slot_mut(&mut self, id: NodeId) -> &mut Slot {
        self.slots
            .get_mut(&id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    /// A client of node `id`.
    pub(crate) fn client(&self, id: NodeId) -> TestClient {
        TestClient::new(&self.node(id).bus)
    }

    /// Sends `$JS.API.<op>` with `body` through node `via` and returns the answer as JSON;
    /// panics when none comes within [`WAIT`].
    pub(crate) async fn api(&self, via: NodeId, op: &str, body: &str) -> serde_json::Value {
        let subject = format!("$JS.API.{op}");
        self.client(via)
            .request(&subject, body.as_bytes(), WAIT)
            .await
            .unwrap_or_else(|| panic!("no answer to {subject} through {via}"))
            .json()
    }

    /// The Raft group of stream `name`, as node `via` knows it.
    pub(crate) fn stream_group(&self, via: NodeId, name: &str) -> Option<GroupId> {
        self.node(via)
            .js
            .meta()
            .read(|m| m.stream(name).map(|s| GroupId(s.uid)))
    }

    /// Waits until every node in `among` sees the same leader of `group`, itself in `among`
    /// and leading in its own view; returns it.
    pub(crate) async fn wait_leader(&self, group: GroupId, among: &[NodeId]) -> NodeId {
        eventually(
            &format!("a leader of group {group} among {among:?}"),
            || {
                let views: Vec<Option<NodeId>> = among
                    .iter()
                    .map(|n| {
                        self.node(*n)
                            .js
                            .registry()
                            .leader(group)
                            .ok()
                            .and_then(|l| l.leader)
                    })
                    .collect();
                match views[0] {
                    Some(l)
                        if among.contains(&l)
                            && views.iter().all(|v| *v == Some(l))
                            && self
                                .node(l)
                                .js
                                .registry()
                                .leader(group)
                                .is_ok_and(|i| i.is_self) =>
                    {
                        Ok(l)
                    }
                    _ => Err(format!("views {views:?}")),
                }
            },
        )
        .await
    }

    /// The voters of `group` as node `via` sees them.
    pub(crate) fn voters(&self, via: NodeId, group: GroupId) -> BTreeSet<u64> {
        self.node(via)
            .js
            .registry()
            .raft(group)
            .map(|r| r.voter_ids().collect())
            .unwrap_or_default()
    }

    /// Node `id` as a meta peer record (what `JetStream::membership_loop` records for a
    /// linked peer).
    fn peer_record(&self, id: NodeId) -> Peer {
        Peer {
            node_id: id.0,
            server_name: self.name(id).to_string(),
            cluster_addr: mem_addr(id),
            client_url: client_addr(id).to_string(),
            tags: self.slots[&id].tags.clone(),
        }
    }

    /// Proposes a meta command through the meta leader among the running nodes.
    async fn propose_meta(&self, op: meta_command::Op) {
        let cmd = MetaCommand { op: Some(op) }.encode_to_vec();
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let leader = self.wait_leader(GroupId::META, &self.running()).await;
            let res = self
                .node(leader)
                .js
                .registry()
                .propose(GroupId::META, cmd.clone().into())
                .await;
            match res {
                Ok(_) => return,
                Err(e @ (RaftError::NotLeader { .. } | RaftError::Timeout { .. }))
                    if tokio::time::Instant::now() < deadline =>
                {
                    tracing::debug!(error = %e, "meta proposal retried");
                }
                Err(e) => panic!("meta proposal failed: {e}"),
            }
        }
    }
}

impl Drop for JsCluster {
    fn drop(&mut self) {
        // Buses hold their links, which hold the hub holding the buses.
        self.hub.clear();
    }
}

/// The client address node `id` reports (nothing listens there).
fn client_addr(id: NodeId) -> SocketAddr {
    let port = 4222 + u16::try_from(id.0).unwrap_or(0);
    SocketAddr::from(([127, 0, 0, 1], port))
}
