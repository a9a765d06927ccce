//! [`JetStream`]: the node's JetStream runtime. It owns the node's Raft registry (meta group +
//! the stream groups assigned here), keeps local stream replicas in step with the meta state,
//! captures publishes on stream subjects, and answers `$JS.API` requests it owns, forwarding the
//! rest to the node that owns them.
//!
//! - `account_limits`: an account's JetStream limits, checked where nats-server checks them.
//! - [`replica`]: a stream replica on this node (the handle everything reaches it through) and
//!   the shared state machine Raft applies to.
//! - `owner`: each replica's owner task (leadership, consumers, expiry, sourcing).
//! - `reconcile`: the meta task: starts/stops local replicas and capture subscriptions from the
//!   meta state, drives replica moves, publishes the routing view.
//! - `api`: the `$JS.API` request loop and its handlers, one file per API family.
//! - `dispatch`: where a request is answered (a pure decision, tested on its own).
//! - `publish`: stream capture and proposals of `Append` entries.
//! - `atomic_batch`: the leader staging atomic batches until their commit.
//! - `expiry`: the leader proposing `Expire` for `max_age` and per-message TTLs.
//! - `forward`: sending a request to the node that owns it.
//! - `remote`: asking another node for an API answer (STREAM.LIST of remote streams).
//! - `in_force`: stream create/update/delete answered once the client's node routes by them.
//! - `jsz`: what the monitoring endpoints report (`/jsz`, `/varz`).
//! - `peer_remove`: STREAM.PEER.REMOVE and moving a stream's replicas between nodes.
//! - `membership`: cluster formation, admission of new nodes to the meta group.
//! - `server_remove`: SERVER.REMOVE (a node leaves for good) and evacuating its replicas.
//! - `scale`: where replicas go on create and when an update changes their count or placement.
//! - `sourcing`: the leader's copy tasks of mirrors and sources.
//! - `drain`: draining a node for maintenance (it hands off every leadership and keeps none).
//! - `health`: `/healthz` checks (is every group here current?) and lame duck hand-off.
//!
//! Invariants:
//! - Only leaders answer: the meta leader for stream create/update/delete, the stream leader
//!   for stream reads and writes. Followers forward or stay silent.
//! - A PubAck is sent only after the `Append` is committed (fsynced on a quorum) and applied.
//! - One writer per piece of state: the meta task writes `local` (the replica handles) and
//!   `routing`, and owns the captures and replica moves; a replica's owner task writes its
//!   copy tasks. `local` is a `parking_lot` lock held only to clone handles out.

pub(crate) mod account_limits;
pub mod account_off;
mod advisory;
mod api;
mod api_stats;
mod atomic_batch;
mod audit;
pub(crate) mod consumer;
mod dispatch;
mod drain;
mod expiry;
mod forward;
mod health;
mod in_force;
mod jsz;
mod membership;
mod owner;
mod peer_remove;
mod publish;
mod quorum;
mod reconcile;
mod remote;
pub mod replica;
mod scale;
mod server_remove;
mod settle;
mod sourcing;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jetraft_raft::network::NodeTransport;
use jetraft_raft::rocks_log::RocksLogs;
use jetraft_raft::{GroupId, GroupRegistry, NodeId, PeerNode, RaftTiming};
use jetraft_storage::stream::StreamUid;
use parking_lot::RwLock;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::bus::Bus;
use crate::cluster::ClusterState;
use crate::config::Config;
use crate::jetstream::account::JsAccounts;
use crate::jetstream::meta::machine::{MetaMachine, MetaView};
use crate::jetstream::op::ApiOp;
use crate::jetstream::stream::ServerIdentity;
use crate::node::{API_LEVEL, NATS_VERSION, NodeInfo};
pub(crate) use advisory::random_id;
pub use api_stats::ApiCounts;
pub use health::{HealthProblem, HealthScope};
pub use jsz::{AccountUsage, JszDetail, JszStats};
pub use membership::JOIN_ONLY_FILE;
use replica::LocalStream;

/// Why JetStream could not start.
#[derive(Debug, thiserror::Error)]
pub enum JetStreamError {
    /// The node's RocksDB could not be opened.
    #[error("opening the store in {path}")]
    Store {
        /// Database directory.
        path: String,
        /// The storage error.
        #[source]
        source: jetraft_storage::StorageError,
    },
    /// A Raft group could not be started.
    #[error("starting raft")]
    Raft(#[from] jetraft_raft::RaftError),
    /// The meta state could not be loaded.
    #[error("loading the meta state")]
    Meta(#[from] jetraft_raft::StateMachineError),
}

/// What JetStream needs from the node it runs on.
#[derive(Debug, Clone)]
pub struct JetStreamContext {
    /// Routing, internal subscriptions, publishing answers and deliveries.
    pub bus: Bus,
    /// What answers say about this node.
    pub info: Arc<NodeInfo>,
    /// The node's configuration (store dir, max_payload).
    pub config: Arc<Config>,
    /// The cluster's peer table; `None` without a cluster port.
    pub cluster: Option<Arc<ClusterState>>,
    /// JetStream's tasks, awaited at shutdown.
    pub tasks: tokio_util::task::TaskTracker,
    /// Cancelled on node shutdown.
    pub shutdown: CancellationToken,
}

/// The node's JetStream runtime.
pub struct JetStream {
    /// Routing, internal subscriptions, publishing answers and deliveries.
    bus: Bus,
    /// What answers say about this node.
    info: Arc<NodeInfo>,
    /// The node's configuration.
    config: Arc<Config>,
    /// The cluster's peer table; `None` without a cluster port.
    cluster: Option<Arc<ClusterState>>,
    /// Every task JetStream spawns (awaited at shutdown).
    tasks: tokio_util::task::TaskTracker,
    /// This node's Raft id.
    node: NodeId,
    /// The node's Raft groups.
    registry: GroupRegistry<NodeTransport>,
    /// Outbound Raft transport (peer addresses are registered here): gRPC in a server process,
    /// in-process in the multi-node tests (`crate::testkit`).
    transport: NodeTransport,
    /// The node's RocksDB and group-commit log writer.
    logs: RocksLogs,
    /// Read handle on the meta state.
    meta: MetaView,
    /// Handles of the stream replicas hosted here, by stream name (written by the meta task).
    local: RwLock<HashMap<String, Arc<LocalStream>>>,
    /// Notified whenever `local` gains or loses a replica (a create's answer waits on it).
    local_changed: tokio::sync::Notify,
    /// The progress of each stream capture on this node, by stream name (`settle`).
    handoffs: parking_lot::Mutex<HashMap<String, Arc<settle::Handoff>>>,
    /// The progress of each account's ack loop on this node, by account (`settle`).
    ack_handoffs: parking_lot::Mutex<HashMap<Arc<str>, Arc<settle::Handoff>>>,
    /// What requests are routed by (written by the meta task).
    routing: tokio::sync::watch::Sender<reconcile::StreamRouting>,
    /// What responses say about this server.
    identity: ServerIdentity,
    /// This node's cluster (gRPC) address, recorded in Raft membership.
    cluster_addr: String,
    /// Whether the node was started with cluster routes (clustered mode).
    clustered: bool,
    /// API requests received (account info `api.total`).
    api_total: AtomicU64,
    /// API requests answered with an error (account info `api.errors`).
    api_errors: AtomicU64,
    /// Each account's API counters (account info `api`).
    api_counts: api_stats::ApiCounters,
    /// Requests to other nodes waiting for their answer (see `remote`).
    pending: remote::Pending,
    /// Held while this node changes the meta group's voters (admission, SERVER.REMOVE): openraft
    /// refuses a membership change while another one is under way, and logs it as an error.
    meta_members: tokio::sync::Mutex<()>,
    /// Set while a SERVER.REMOVE's evacuation task runs (one at a time, see `server_remove`).
    removal_running: std::sync::atomic::AtomicBool,
    /// The accounts with JetStream and their limits.
    accounts: JsAccounts,
    /// Stops the runtime's tasks.
    cancel: CancellationToken,
}

impl std::fmt::Debug for JetStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStream")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// An internal subscription JetStream needs could not be made (a bad subject pattern).
fn subscribe_failed(e: impl std::fmt::Display) -> JetStreamError {
    JetStreamError::Raft(jetraft_raft::RaftError::Config {
        reason: e.to_string(),
    })
}

/// The next message of an internal subscription, or `None` once `cancel` fired or the
/// subscription ended.
pub(crate) async fn next_msg(
    sub: &mut crate::bus::internal::InternalSub,
    cancel: &CancellationToken,
) -> Option<crate::bus::internal::InternalMsg> {
    tokio::select! {
        () = cancel.cancelled() => None,
        m = sub.rx.recv() => m,
    }
}

/// Current wall-clock time in Unix nanoseconds (stamped by leaders into commands).
pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl JetStream {
    /// Opens the node's store under `store_dir`, starts the meta group (forming a one-node
    /// cluster when there are no peers) and the request/capture/reconcile tasks. The groups
    /// talk to peers over `transport` (gRPC in a server process).
    pub async fn start(
        ctx: JetStreamContext,
        node: NodeId,
        transport: NodeTransport,
        cluster_addr: String,
        clustered: bool,
        timing: RaftTiming,
    ) -> Result<Arc<Self>, JetStreamError> {
        let path = ctx.config.jetstream.store_dir.join("jetraft");
        let logs = RocksLogs::open(&path).map_err(|source| JetStreamError::Store {
            path: path.display().to_string(),
            source,
        })?;
        let registry = GroupRegistry::new(node, transport.clone(), timing)?;
        registry.spawn_quiescence();
        registry.spawn_leaderless_watchdog();
        let (meta_sm, meta) = MetaMachine::open(Some(logs.db().clone()))?;
        logs.create_group(&registry, GroupId::META, Box::new(meta_sm))
            .await?;
        let domain = ctx.config.jetstream.domain.clone();
        let accounts = JsAccounts::from_config(&ctx.config.auth);
        let js = Arc::new(Self {
            bus: ctx.bus,
            info: ctx.info,
            config: ctx.config,
            cluster: ctx.cluster,
            tasks: ctx.tasks,
            node,
            registry,
            transport,
            logs,
            meta,
            local: RwLock::new(HashMap::new()),
            local_changed: tokio::sync::Notify::new(),
            handoffs: parking_lot::Mutex::default(),
            ack_handoffs: parking_lot::Mutex::default(),
            routing: tokio::sync::watch::Sender::new(reconcile::StreamRouting::default()),
            identity: ServerIdentity {
                version: NATS_VERSION.to_string(),
                api_level: API_LEVEL,
                domain,
            },
            cluster_addr,
            clustered,
            api_total: AtomicU64::new(0),
            api_errors: AtomicU64::new(0),
            api_counts: api_stats::ApiCounters::default(),
            pending: remote::Pending::default(),
            meta_members: tokio::sync::Mutex::new(()),
            removal_running: std::sync::atomic::AtomicBool::new(false),
            accounts,
            cancel: ctx.shutdown.child_token(),
        });
        js.spawn_tasks()?;
        info!(node = %node, "jetstream started");
        Ok(js)
    }

    fn spawn_tasks(self: &Arc<Self>) -> Result<(), JetStreamError> {
        for account in self.accounts.names() {
            self.spawn_account_tasks(&account)?;
        }
        if !self.accounts.enabled(crate::config::GLOBAL_ACCOUNT) {
            // Node-to-node requests (drain, server removal) and their answers travel in `$G`
            // even when its users have no JetStream.
            let fwd = self
                .bus
                .internal()
                .subscribe_inbox(&forward::inbox_pattern(self.node))
                .map_err(subscribe_failed)?;
            let js = self.clone();
            self.tasks.spawn(async move { js.forward_loop(fwd).await });
        }
        if let Some(system) = self.accounts.system_without_jetstream().cloned() {
            self.spawn_cluster_op_tasks(&system)?;
        }
        let js = self.clone();
        self.tasks.spawn(async move { js.reconcile_loop().await });
        Ok(())
    }

    /// The cluster operations' subscriptions in `account` (the system account) when it has no
    /// JetStream of its own: its requests for them and their forwards (see
    /// `account_off`, which leaves these subjects to them there).
    fn spawn_cluster_op_tasks(self: &Arc<Self>, account: &Arc<str>) -> Result<(), JetStreamError> {
        let internal = self.bus.namespace(account).internal.clone();
        let api = internal
            .subscribe_many(&ApiOp::CLUSTER_OP_SUBJECTS)
            .map_err(subscribe_failed)?;
        let fwd = internal
            .subscribe_inbox(&forward::inbox_pattern(self.node))
            .map_err(subscribe_failed)?;
        let js = self.clone();
        self.tasks.spawn(async move { js.api_loop(api).await });
        let js = self.clone();
        self.tasks.spawn(async move { js.forward_loop(fwd).await });
        Ok(())
    }

    /// The request, forward and ack subscriptions of one account with JetStream, in its
    /// namespace: what arrives there is that account's (`InternalMsg::account`).
    fn spawn_account_tasks(self: &Arc<Self>, account: &Arc<str>) -> Result<(), JetStreamError> {
        let internal = self.bus.namespace(account).internal.clone();
        let routing = self.routing.subscribe();
        let direct_account = account.clone();
        let accept: crate::bus::internal::AcceptFn = Arc::new(move |subject: &str| {
            if subject.starts_with(consumer::NEXT_PREFIX) {
                // Pull requests travel with the acks (`consumer_ack_loop`), in their order.
                return false;
            }
            match subject.strip_prefix("$JS.API.DIRECT.GET.") {
                // Only streams with allow_direct answer; others leave no responder (503).
                Some(rest) => {
                    let name = rest.split('.').next().unwrap_or_default();
                    let key = crate::jetstream::account::stream_key(&direct_account, name);
                    routing.borrow().direct.contains(&key)
                }
                None => true,
            }
        });
        let api = internal
            .subscribe_filtered("$JS.API.>", accept)
            .map_err(subscribe_failed)?;
        let fwd = internal
            .subscribe_inbox(&forward::inbox_pattern(self.node))
            .map_err(subscribe_failed)?;
        // Acks, flow-control replies and pull requests on one receiver: a client's NAK and
        // its next pull reach the consumer's engine in the order the client sent them.
        let next = format!("{}>", consumer::NEXT_PREFIX);
        let sub = internal
            .subscribe_many(&["$JS.ACK.>", "$JS.FC.>", &next])
            .map_err(subscribe_failed)?;
        let handoff = Arc::new(settle::Handoff::new(sub.rx.gauge()));
        self.ack_handoffs
            .lock()
            .insert(account.clone(), handoff.clone());
        let js = self.clone();
        self.tasks
            .spawn(async move { js.consumer_ack_loop(sub, handoff).await });
        let js = self.clone();
        self.tasks.spawn(async move { js.api_loop(api).await });
        if let Some(domain) = &self.identity.domain {
            // `$JS.<domain>.API.>` is this node's API too (nats-server answers both).
            let prefix = format!("$JS.{domain}.API.");
            let sub = internal
                .subscribe(&format!("{prefix}>"))
                .map_err(subscribe_failed)?;
            let js = self.clone();
            self.tasks
                .spawn(async move { js.domain_api_loop(sub, prefix).await });
        }
        let js = self.clone();
        self.tasks.spawn(async move { js.forward_loop(fwd).await });
        Ok(())
    }

    /// Initialises the meta group with `voters` (formation). Idempotent: an initialised group
    /// is left alone.
    pub async fn initialize_meta(&self, voters: BTreeMap<NodeId, PeerNode>) {
        if self
            .registry
            .is_initialized(GroupId::META)
            .await
            .unwrap_or(true)
        {
            return;
        }
        match self.registry.initialize(GroupId::META, voters).await {
            Ok(()) => info!("meta group initialised"),
            Err(e) => warn!(error = %e, "meta group initialisation failed"),
        }
    }

    /// Forms a one-node cluster if the meta group was never initialised.
    pub async fn form_single_node(&self) {
        let mut voters = BTreeMap::new();
        voters.insert(self.node, PeerNode::new(self.cluster_addr.clone()));
        self.initialize_meta(voters).await;
        // Ready means the API answers: wait (bounded) for this node to lead.
        if self
            .wait_group_leader(GroupId::META, Duration::from_secs(10))
            .await
            .is_none()
        {
            warn!("meta group has no leader yet");
        }
    }

    /// Whether the meta group has state here (this node has been part of a cluster).
    pub async fn has_meta_state(&self) -> bool {
        self.registry
            .is_initialized(GroupId::META)
            .await
            .unwrap_or(false)
    }

    /// The node's Raft groups (for the cluster listener's Raft service).
    pub fn registry(&self) -> &GroupRegistry<NodeTransport> {
        &self.registry
    }

    /// The server's `max_payload` (consumer rate limits use it as their burst).
    pub(crate) fn server_max_payload(&self) -> u32 {
        self.config.max_payload
    }

    /// The accounts with JetStream.
    pub fn accounts(&self) -> &JsAccounts {
        &self.accounts
    }

    /// The meta state view.
    pub fn meta(&self) -> &MetaView {
        &self.meta
    }

    /// Whether this node runs clustered (started with routes).
    pub fn clustered(&self) -> bool {
        self.clustered
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.node
    }

    /// Where `node` listens for Raft: the meta peer record, else the cluster layer's peer table,
    /// else what the transport learned.
    pub(crate) fn peer_cluster_addr(&self, node: u64) -> Option<String> {
        if node == self.node.0 {
            return Some(self.cluster_addr.clone());
        }
        let from_meta = self
            .meta
            .read(|m| m.peers().get(&node).map(|p| p.cluster_addr.clone()))
            .filter(|a| !a.is_empty());
        from_meta
            .or_else(|| {
                self.cluster.as_ref().and_then(|c| {
                    c.peers
                        .snapshot()
                        .get(&NodeId(node))
                        .map(|p| p.cluster_addr.clone())
                })
            })
            .or_else(|| self.transport.peer_addr(NodeId(node)))
            .filter(|a| !a.is_empty())
    }

    /// The meta leader, if known.
    fn meta_leader(&self) -> Option<NodeId> {
        self.registry
            .leader(GroupId::META)
            .ok()
            .and_then(|l| l.leader)
    }

    /// The local replica of `name`, if hosted here and still the stream the meta state knows
    /// (a stream deleted and recreated under the same name has a new uid; until reconcile swaps
    /// the replicas, the old one must not answer or take publishes).
    fn local_stream(&self, name: &str) -> Option<Arc<LocalStream>> {
        let ls = self.local.read().get(name).cloned()?;
        let current = self.meta.read(|m| m.stream(name).map(|s| StreamUid(s.uid)));
        (current == Some(ls.uid)).then_some(ls)
    }

    /// On `group`'s leader: waits (bounded) until it applied everything committed before it
    /// took over ([`jetraft_raft::registry::GroupRegistry::leader_caught_up`]), so that its
    /// answers see every acknowledged write. Past `bound` (or on a follower) it returns anyway:
    /// the caller answers from what it has, or finds out that leadership moved.
    async fn wait_leader_caught_up(&self, group: GroupId, bound: Duration) {
        let deadline = tokio::time::Instant::now() + bound;
        while self.registry.leader(group).is_ok_and(|l| l.is_self)
            && !self.registry.leader_caught_up(group).unwrap_or(true)
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits (bounded) until `group` has a leader visible from this node; gives up at once
    /// when JetStream shuts down (its groups are gone, and the wait would hold up the exit).
    /// Woken by the group's leadership watch (a new stream's first election answers its create
    /// at once, not at the next poll), polling only while the group is not registered yet.
    async fn wait_group_leader(&self, group: GroupId, bound: Duration) -> Option<NodeId> {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            if let Ok(info) = self.registry.leader(group)
                && let Some(leader) = info.leader
            {
                return Some(leader);
            }
            if tokio::time::Instant::now() >= deadline || self.cancel.is_cancelled() {
                return None;
            }
            let Ok(mut watch) = self.registry.watch_leader(group) else {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            };
            if let Some(leader) = watch.current().leader {
                return Some(leader);
            }
            tokio::select! {
                changed = watch.changed() => {
                    if changed.is_err() {
                        // The group stopped: look again (it may be registered anew).
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
                () = tokio::time::sleep_until(deadline) => return None,
                () = self.cancel.cancelled() => return None,
            }
        }
    }

    /// Stops every group (node shutdown).
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        self.registry.shutdown().await;
    }
}
