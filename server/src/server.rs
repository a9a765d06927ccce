//! The running server: listeners, the client registry, message routing and shutdown.
//!
//! [`Server::start`] binds the client (and monitoring) listeners and returns a
//! [`ServerHandle`]. Tests can run a server in-process this way; the `jetraft` binary does the
//! same from `main.rs`.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use rand::Rng;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::auth::Authenticator;
use crate::cluster::{self, ClusterState, NodeId, identity};
use crate::config::Config;
use crate::conn::{Client, CloseReason, SubRef, Subscription, reader, writer};
use crate::internal::InternalSubs;
use crate::jetstream::runtime::JetStream;
use crate::protocol::encode::{self, ServerInfo};
use crate::protocol::headers;
use crate::router::sublist::{Sublist, SublistError};

/// The nats-server version whose client-visible behaviour jetraft implements.
pub const NATS_VERSION: &str = "2.11.0";
/// JetStream API level advertised in INFO.
pub const API_LEVEL: u32 = 1;
/// Closed connections remembered for `/connz?state=closed`.
const CLOSED_CONNS_KEPT: usize = 1000;
/// A Raft group (stream or meta) that logged nothing for this long stops its timers on every
/// replica until the next write ([`jetraft_raft::quiesce`]): idle streams cost no CPU.
const QUIESCE_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener could not bind.
    #[error("bind {what} listener on {addr}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// Address tried.
        addr: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The node id could not be read or created.
    #[error("node identity")]
    Identity(#[from] identity::IdentityError),
    /// The data directory could not be created.
    #[error("create store dir {path}")]
    StoreDir {
        /// Directory tried.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// JetStream (its store or its Raft groups) could not start.
    #[error("start jetstream: {reason}")]
    JetStream {
        /// What failed.
        reason: String,
    },
}

/// Server-wide counters (monotonic unless noted).
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Messages received from clients.
    pub in_msgs: AtomicU64,
    /// Payload bytes received from clients.
    pub in_bytes: AtomicU64,
    /// Messages delivered to clients.
    pub out_msgs: AtomicU64,
    /// Payload bytes delivered to clients.
    pub out_bytes: AtomicU64,
    /// Connections accepted since start.
    pub total_connections: AtomicU64,
    /// Connections closed as slow consumers.
    pub slow_consumers: AtomicU64,
    /// Connections closed as stale.
    pub stale_connections: AtomicU64,
}

/// A connection that has ended, for `/connz?state=closed`.
#[derive(Debug, Clone)]
pub struct ClosedConn {
    /// The connection's state at close.
    pub client: Arc<Client>,
    /// When it closed.
    pub stop: time::OffsetDateTime,
    /// Why it closed.
    pub reason: CloseReason,
}

/// Shared server state.
#[derive(Debug)]
pub struct Server {
    /// Effective configuration.
    pub config: Arc<Config>,
    /// Unique server id (56 chars starting with `N`, like nats-server's).
    pub server_id: String,
    /// Server name (the id when not configured).
    pub server_name: String,
    /// The interest index.
    pub sublist: Sublist<SubRef>,
    /// Server-internal subscribers (JetStream), local to this node.
    pub internal: InternalSubs,
    /// Open connections by cid.
    pub clients: RwLock<HashMap<u64, Arc<Client>>>,
    /// Recently closed connections, oldest first.
    pub closed: Mutex<VecDeque<ClosedConn>>,
    /// Counters.
    pub stats: ServerStats,
    /// Credential checks.
    pub auth: Authenticator,
    /// Wall-clock start time.
    pub start: time::OffsetDateTime,
    /// Monotonic start time (for uptime).
    pub start_instant: Instant,
    /// Cancelled on shutdown; parent of every connection's token.
    pub shutdown: CancellationToken,
    /// Cancelled when the server enters lame duck mode (it stops accepting clients).
    pub lame_duck: CancellationToken,
    /// Bound client address.
    pub client_addr: SocketAddr,
    /// Bound monitoring address, if enabled.
    pub http_addr: Mutex<Option<SocketAddr>>,
    /// Tasks to wait for at shutdown.
    pub tasks: TaskTracker,
    /// Cluster links, peers and interest; `None` without a cluster port.
    pub cluster: Option<Arc<ClusterState>>,
    /// Bound cluster address, if clustered.
    pub cluster_addr: Option<SocketAddr>,
    /// The JetStream runtime, set once at start.
    pub jetstream: std::sync::OnceLock<Arc<JetStream>>,
    /// The `connect_urls` last advertised, to send async INFO only on a change.
    connect_urls: Mutex<Vec<String>>,
    next_cid: AtomicU64,
}

/// Where a routed message comes from.
#[derive(Debug, Clone, Copy)]
pub enum Origin<'a> {
    /// A client of this node published it; with `echo` off its own subscriptions are skipped.
    /// It goes to local subscribers and is forwarded once to each peer with interest.
    Client {
        /// The publisher.
        client: &'a Arc<Client>,
        /// Whether the publisher receives its own messages.
        echo: bool,
    },
    /// A peer forwarded it: local subscribers only (one hop), and of the queue groups only the
    /// ones the peer picked this node for.
    Peer {
        /// Queue groups this node must serve.
        queues: &'a [String],
    },
    /// The server itself (JetStream answers and deliveries): like a client publish, with no
    /// echo rule.
    Server,
}

/// Receivers touched by one read batch of a producer: writers to wake once at the end of the
/// batch, and receivers so far behind that the producer should pause for them.
#[derive(Debug, Default)]
pub struct FlushSet {
    /// Writers to wake.
    pub wake: Vec<Arc<Client>>,
    /// Receivers above their stall threshold.
    pub stalled: Vec<Arc<Client>>,
}

impl FlushSet {
    /// Wakes every collected writer and empties the set, so it can collect the next batch.
    pub fn wake_all(&mut self) {
        for client in self.wake.drain(..) {
            client.wake_writer();
        }
        self.stalled.clear();
    }

    fn record(&mut self, client: &Arc<Client>, pending: usize) {
        if client.schedule_flush() {
            self.wake.push(client.clone());
        }
        if pending > client.stall_threshold()
            && !self.stalled.iter().any(|c| Arc::ptr_eq(c, client))
        {
            self.stalled.push(client.clone());
        }
    }
}

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    /// The shared state.
    pub server: Arc<Server>,
}

impl ServerHandle {
    /// Starts a graceful shutdown: stop accepting, close connections, wait for tasks.
    pub async fn shutdown(&self) {
        let s = &self.server;
        info!("server shutting down");
        if let Some(js) = s.jetstream.get() {
            js.shutdown().await;
        }
        s.shutdown.cancel();
        s.tasks.close();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), s.tasks.wait()).await;
        info!("server exiting");
    }
}

impl Server {
    /// Binds the listeners and starts serving.
    pub async fn start(config: Config) -> Result<ServerHandle, StartError> {
        let config = Arc::new(config);
        std::fs::create_dir_all(&config.jetstream.store_dir).map_err(|source| {
            StartError::StoreDir {
                path: config.jetstream.store_dir.display().to_string(),
                source,
            }
        })?;
        let (listener, client_addr) =
            bind("client", &format!("{}:{}", config.host, config.port)).await?;
        let server_id = new_server_id();
        let server_name = config
            .server_name
            .clone()
            .unwrap_or_else(|| server_id.clone());
        let (cluster_state, cluster_listener) = match config.cluster.port {
            Some(port) => {
                let host = config.cluster.host.as_deref().unwrap_or("0.0.0.0");
                let (listener, addr) = bind("cluster", &format!("{host}:{port}")).await?;
                let node_id = identity::load_or_create(&config.jetstream.store_dir)?;
                let identity = jetraft_proto::node::NodeIdentity {
                    node_id: node_id.0,
                    server_name: server_name.clone(),
                    client_url: format!("{}:{}", config.host, client_addr.port()),
                    cluster_name: config.cluster.name.clone().unwrap_or_default(),
                    server_id: server_id.clone(),
                    cluster_addr: format!("{host}:{}", addr.port()),
                };
                (
                    Some(Arc::new(ClusterState::new(identity))),
                    Some((listener, addr)),
                )
            }
            None => (None, None),
        };
        let server = Arc::new(Server {
            server_name,
            server_id,
            auth: Authenticator::new(&config.auth),
            config: config.clone(),
            sublist: Sublist::new(),
            internal: InternalSubs::default(),
            clients: RwLock::new(HashMap::new()),
            closed: Mutex::new(VecDeque::new()),
            stats: ServerStats::default(),
            start: time::OffsetDateTime::now_utc(),
            start_instant: Instant::now(),
            shutdown: CancellationToken::new(),
            lame_duck: CancellationToken::new(),
            client_addr,
            http_addr: Mutex::new(None),
            tasks: TaskTracker::new(),
            cluster: cluster_state.clone(),
            cluster_addr: cluster_listener.as_ref().map(|(_, a)| *a),
            jetstream: std::sync::OnceLock::new(),
            connect_urls: Mutex::new(
                cluster_state
                    .as_deref()
                    .map(connect_urls)
                    .unwrap_or_default(),
            ),
            next_cid: AtomicU64::new(1),
        });
        if let Some(port) = config.http_port {
            let host = config
                .http_host
                .clone()
                .unwrap_or_else(|| config.host.clone());
            let bound = crate::monitor::serve(server.clone(), &host, port).await?;
            *server.http_addr.lock() = Some(bound);
            info!(addr = %bound, "starting http monitor");
        }
        info!(
            version = NATS_VERSION,
            name = %server.server_name,
            id = %server.server_id,
            "starting jetraft {}",
            env!("CARGO_PKG_VERSION")
        );
        info!(addr = %client_addr, "listening for client connections");
        let js = start_jetstream(&server).await?;
        if let (Some(cluster), Some((listener, addr))) = (&server.cluster, cluster_listener) {
            info!(addr = %addr, node_id = %cluster.node_id(), "listening for route connections");
            let routes = cluster::listener::routes(&server).add_service(
                jetraft_raft::network::grpc::service(
                    js.registry().node_id(),
                    js.registry().groups().clone(),
                ),
            );
            server.tasks.spawn(cluster::listener::serve(
                listener,
                routes,
                server.shutdown.clone(),
            ));
            for route in &config.cluster.routes {
                cluster::link::ensure_dialer(&server, route, None);
            }
            let js = js.clone();
            let cluster = cluster.clone();
            server
                .tasks
                .spawn(async move { js.membership_loop(cluster).await });
        } else {
            js.form_single_node().await;
        }
        info!("server is ready");
        let s = server.clone();
        server
            .tasks
            .spawn(async move { s.accept_loop(listener).await });
        Ok(ServerHandle { server })
    }

    async fn accept_loop(self: Arc<Self>, listener: TcpListener) {
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => break,
                // Lame duck: the listener closes, new clients go to other nodes.
                () = self.lame_duck.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok((sock, addr)) => self.clone().on_accept(sock, addr),
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning.
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                },
            }
        }
    }

    fn on_accept(self: Arc<Self>, sock: TcpStream, addr: SocketAddr) {
        let _ = sock.set_nodelay(true);
        let cid = self.next_cid.fetch_add(1, Ordering::Relaxed);
        self.stats.total_connections.fetch_add(1, Ordering::Relaxed);
        let client = Arc::new(Client::new(
            cid,
            addr,
            self.config.max_pending,
            &self.shutdown,
        ));
        {
            let mut out = client.out.lock();
            encode::info(&mut out.buf, &self.info_for(&client, false));
        }
        client.wake_writer();
        let too_many = {
            let mut clients = self.clients.write();
            let full = clients.len() >= self.config.max_connections as usize;
            if !full {
                clients.insert(cid, client.clone());
            }
            full
        };
        debug!(cid, %addr, "client connection created");
        if too_many {
            client.send_err("maximum connections exceeded");
            client.close(CloseReason::MaxConnections);
        }
        let (rd, wr) = sock.into_split();
        let s = self.clone();
        let c = client.clone();
        self.tasks.spawn(writer::run(s, c, wr));
        if !too_many {
            let s = self.clone();
            self.tasks.spawn(reader::run(s, client, rd));
        }
    }

    /// The INFO a client sees; `connect_info` marks the one sent after the first PONG.
    pub fn info_for(&self, client: &Client, connect_info: bool) -> ServerInfo {
        ServerInfo {
            server_id: self.server_id.clone(),
            server_name: self.server_name.clone(),
            version: NATS_VERSION.to_string(),
            proto: 1,
            git_commit: String::new(),
            go: format!("jetraft {}", env!("CARGO_PKG_VERSION")),
            host: self.config.host.clone(),
            port: self.client_addr.port(),
            headers: true,
            auth_required: self.auth.required(),
            max_payload: self.config.max_payload,
            jetstream: true,
            client_id: client.cid,
            client_ip: client.addr.ip().to_string(),
            connect_urls: self.connect_urls.lock().clone(),
            cluster: self.config.cluster.name.clone(),
            api_lvl: API_LEVEL,
            ldm: self.lame_duck.is_cancelled(),
            connect_info,
            remote_account: connect_info.then(|| "$G".to_string()),
        }
    }

    /// Removes a closed client and its subscriptions, and records it for `/connz`.
    pub fn remove_client(&self, client: &Arc<Client>) {
        let subs: Vec<Arc<Subscription>> = client.subs.lock().drain().map(|(_, s)| s).collect();
        for sub in subs {
            self.remove_subscription(&sub);
        }
        if self.clients.write().remove(&client.cid).is_none() {
            return;
        }
        let reason = client
            .close_reason
            .lock()
            .unwrap_or(CloseReason::ClientClosed);
        match reason {
            CloseReason::SlowConsumer => {
                self.stats.slow_consumers.fetch_add(1, Ordering::Relaxed);
                warn!(cid = client.cid, addr = %client.addr, "slow consumer detected, connection closed");
            }
            CloseReason::StaleConnection => {
                self.stats.stale_connections.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
        debug!(
            cid = client.cid,
            reason = reason.as_str(),
            "client connection closed"
        );
        let mut closed = self.closed.lock();
        if closed.len() >= CLOSED_CONNS_KEPT {
            closed.pop_front();
        }
        closed.push_back(ClosedConn {
            client: client.clone(),
            stop: time::OffsetDateTime::now_utc(),
            reason,
        });
    }

    /// Routes a message to every matching subscription (one member per queue group cluster
    /// wide, preferring a local one) and forwards it once to each peer with interest. Returns
    /// the number of local deliveries plus forwards, so a request answered only by a remote
    /// responder does not get no-responders.
    pub fn route(
        &self,
        origin: Origin<'_>,
        subject: &str,
        reply: Option<&[u8]>,
        hdrs: Option<&[u8]>,
        payload: &[u8],
        flush: &mut FlushSet,
    ) -> usize {
        self.route_as(origin, subject, subject, reply, hdrs, payload, flush)
    }

    /// [`Self::route`] by `subject`, but receivers see the message under `shown` (JetStream
    /// deliveries are routed by the deliver/inbox subject and carry the stored subject).
    #[allow(clippy::too_many_arguments)]
    pub fn route_as(
        &self,
        origin: Origin<'_>,
        subject: &str,
        shown: &str,
        reply: Option<&[u8]>,
        hdrs: Option<&[u8]>,
        payload: &[u8],
        flush: &mut FlushSet,
    ) -> usize {
        let result = self.sublist.match_subject(subject);
        let (from, peer_queues) = match origin {
            Origin::Client { client, echo } => (Some((client, echo)), None),
            Origin::Peer { queues } => (None, Some(queues)),
            Origin::Server => (None, None),
        };
        let skip = |sub: &Subscription| match from {
            Some((c, echo)) => !echo && Arc::ptr_eq(&sub.client, c),
            None => false,
        };
        let mut delivered = 0;
        let mut forwards: Vec<(NodeId, Vec<String>)> = Vec::new();
        for sub in &result.plain {
            match sub {
                SubRef::Local(sub) => {
                    if !skip(sub) && self.deliver(sub, shown, reply, hdrs, payload, flush) {
                        delivered += 1;
                    }
                }
                SubRef::Remote(node) => {
                    if peer_queues.is_none() {
                        add_forward(&mut forwards, *node, None);
                    }
                }
            }
        }
        for group in &result.queues {
            if let Some(qs) = peer_queues
                && !qs.iter().any(|q| *q == *group.name)
            {
                continue;
            }
            let members = &group.members;
            let n = members.len();
            if n == 0 {
                continue;
            }
            let start = rand::rng().random_range(0..n);
            let mut served = false;
            for i in 0..n {
                let SubRef::Local(sub) = &members[(start + i) % n] else {
                    continue;
                };
                if skip(sub) || sub.client.is_closed() {
                    continue;
                }
                if self.deliver(sub, shown, reply, hdrs, payload, flush) {
                    delivered += 1;
                    served = true;
                    break;
                }
            }
            if served || peer_queues.is_some() {
                continue;
            }
            let remote = (0..n)
                .map(|i| &members[(start + i) % n])
                .find_map(|m| match m {
                    SubRef::Remote(node) => Some(*node),
                    SubRef::Local(_) => None,
                });
            if let Some(node) = remote {
                add_forward(&mut forwards, node, Some(&group.name));
            }
        }
        delivered += self
            .internal
            .deliver(subject, reply, hdrs, payload, peer_queues.is_some());
        if delivered > 0 {
            self.stats
                .out_msgs
                .fetch_add(delivered as u64, Ordering::Relaxed);
            let size = (payload.len() + hdrs.map_or(0, <[u8]>::len)) as u64;
            self.stats
                .out_bytes
                .fetch_add(size * delivered as u64, Ordering::Relaxed);
        }
        if let Some(cluster) = &self.cluster {
            for (node, queues) in forwards {
                let mut msg = cluster::outbound::msg(subject, reply, hdrs, payload, queues);
                if shown != subject {
                    msg.shown_subject = shown.to_string();
                }
                cluster.forward(node, msg);
                delivered += 1;
            }
        }
        delivered
    }

    fn deliver(
        &self,
        sub: &Arc<Subscription>,
        subject: &str,
        reply: Option<&[u8]>,
        hdrs: Option<&[u8]>,
        payload: &[u8],
        flush: &mut FlushSet,
    ) -> bool {
        let client = &sub.client;
        if let Some(p) = client.permissions()
            && p.has_subscribe_deny()
            && p.deliver_denied(subject)
        {
            return false;
        }
        let max = sub.max.load(Ordering::Relaxed);
        let n = sub.delivered.fetch_add(1, Ordering::Relaxed) + 1;
        if max > 0 && n > max {
            return false;
        }
        let queued = client.queue_msg(subject.as_bytes(), &sub.sid, reply, hdrs, payload);
        if let Some(pending) = queued {
            flush.record(client, pending);
        }
        if max > 0 && n == max {
            self.unsubscribe(client, &sub.sid);
        }
        queued.is_some()
    }

    /// Publishes a message on behalf of the server (JetStream answers, advisories, deliveries):
    /// routes it like a client publish and wakes the receivers' writers. Returns the number of
    /// deliveries.
    pub fn publish(
        &self,
        subject: &str,
        reply: Option<&str>,
        hdrs: Option<&[u8]>,
        payload: &[u8],
    ) -> usize {
        self.publish_as(subject, subject, reply, hdrs, payload)
    }

    /// [`Self::publish`] routed by `subject` and shown to receivers as `shown`.
    pub fn publish_as(
        &self,
        subject: &str,
        shown: &str,
        reply: Option<&str>,
        hdrs: Option<&[u8]>,
        payload: &[u8],
    ) -> usize {
        let mut flush = FlushSet::default();
        let n = self.publish_as_into(subject, shown, reply, hdrs, payload, &mut flush);
        flush.wake_all();
        n
    }

    /// [`Self::publish_as`] without waking the receivers' writers: they are collected in
    /// `flush`, so a batch of messages (consumer deliveries) wakes each writer once, after
    /// the last one, with [`FlushSet::wake_all`].
    pub fn publish_as_into(
        &self,
        subject: &str,
        shown: &str,
        reply: Option<&str>,
        hdrs: Option<&[u8]>,
        payload: &[u8],
        flush: &mut FlushSet,
    ) -> usize {
        self.route_as(
            Origin::Server,
            subject,
            shown,
            reply.map(str::as_bytes),
            hdrs,
            payload,
            flush,
        )
    }

    /// Sends a message straight to the node `node` over its cluster link (JetStream forwarding);
    /// the receiver routes it to its local subscribers. Returns false without a link.
    pub fn send_to_node(
        &self,
        node: u64,
        subject: &str,
        reply: Option<&str>,
        hdrs: Option<&[u8]>,
        payload: &[u8],
    ) -> bool {
        let Some(cluster) = &self.cluster else {
            return false;
        };
        let node = NodeId(node);
        if !cluster.has_outbound(node) {
            return false;
        }
        let msg =
            cluster::outbound::msg(subject, reply.map(str::as_bytes), hdrs, payload, Vec::new());
        cluster.forward(node, msg);
        true
    }

    /// Removes one subscription of `client`.
    pub fn unsubscribe(&self, client: &Client, sid: &Bytes) -> bool {
        let Some(sub) = client.subs.lock().remove(sid) else {
            return false;
        };
        self.remove_subscription(&sub);
        true
    }

    /// Adds a client subscription to the sublist and announces it to peers.
    pub fn add_subscription(&self, sub: &Arc<Subscription>) -> Result<(), SublistError> {
        let queue = sub.queue.as_deref();
        self.sublist
            .insert(&sub.subject, queue, SubRef::Local(sub.clone()))?;
        if let Some(c) = &self.cluster {
            c.local_subscribed(&sub.subject, queue);
        }
        Ok(())
    }

    /// Removes a client subscription from the sublist and announces it to peers.
    pub fn remove_subscription(&self, sub: &Arc<Subscription>) {
        let queue = sub.queue.as_deref();
        if self
            .sublist
            .remove(&sub.subject, queue, &SubRef::Local(sub.clone()))
            && let Some(c) = &self.cluster
        {
            c.local_unsubscribed(&sub.subject, queue);
        }
    }

    /// Called when a peer link goes up or down: when the client URLs of the connected peers
    /// changed, clients that take async INFO get a new INFO with the new `connect_urls`.
    pub fn cluster_changed(&self) {
        let Some(cluster) = &self.cluster else {
            return;
        };
        {
            // Computed under the lock: two links changing at once must not let the older
            // view be stored last (a node would advertise a stale list until the next change).
            let mut last = self.connect_urls.lock();
            let urls = connect_urls(cluster);
            if *last == urls {
                return;
            }
            *last = urls;
        }
        self.send_async_info();
    }

    /// Sends a fresh INFO to every client that takes async INFO (`connect_urls` changed, or
    /// lame duck mode began).
    pub fn send_async_info(&self) {
        let clients: Vec<Arc<Client>> = self.clients.read().values().cloned().collect();
        for c in clients {
            if c.async_info.load(Ordering::Relaxed) && !c.is_closed() {
                let info = self.info_for(&c, false);
                encode::info(&mut c.out.lock().buf, &info);
                c.wake_writer();
            }
        }
    }

    /// Sends the no-responders status (503) to the publisher's own subscription matching
    /// `reply`, as nats-server does.
    pub fn send_no_responders(&self, client: &Arc<Client>, subject: &str, reply: &str) {
        let result = self.sublist.match_subject(reply);
        let own = result
            .plain
            .iter()
            .chain(result.queues.iter().flat_map(|g| g.members.iter()))
            .find_map(|s| match s {
                SubRef::Local(s) if Arc::ptr_eq(&s.client, client) => Some(s),
                _ => None,
            });
        if let Some(sub) = own {
            let hdr = headers::status_block(503, None, &[("Nats-Subject", subject)]);
            if client
                .queue_msg(reply.as_bytes(), &sub.sid, None, Some(&hdr), b"")
                .is_some()
            {
                client.wake_writer();
            }
        }
    }

    /// Server uptime.
    pub fn uptime(&self) -> std::time::Duration {
        self.start_instant.elapsed()
    }
}

/// Binds a listener and reports the address it got (port 0 picks a free port).
pub(crate) async fn bind(
    what: &'static str,
    addr: &str,
) -> Result<(TcpListener, SocketAddr), StartError> {
    let err = |source| StartError::Bind {
        what,
        addr: addr.to_string(),
        source,
    };
    let listener = TcpListener::bind(addr).await.map_err(err)?;
    let bound = listener.local_addr().map_err(err)?;
    Ok((listener, bound))
}

/// INFO `connect_urls` of a clustered node, as nats-server sends them: this node's own client
/// URL first (left out when it listens on an unspecified address, which no client can dial),
/// then those of the peers connected in both directions.
fn connect_urls(cluster: &ClusterState) -> Vec<String> {
    let own = &cluster.identity.client_url;
    let own_dialable = own
        .rsplit_once(':')
        .and_then(|(h, _)| h.trim_matches(['[', ']']).parse::<std::net::IpAddr>().ok())
        .is_none_or(|ip| !ip.is_unspecified());
    let mut urls: Vec<String> = own_dialable.then(|| own.clone()).into_iter().collect();
    for u in cluster.peers.connected_client_urls() {
        if !urls.contains(&u) {
            urls.push(u);
        }
    }
    urls
}

/// Adds `queue` (if any) to the forward for `node`, creating it on first use.
fn add_forward(forwards: &mut Vec<(NodeId, Vec<String>)>, node: NodeId, queue: Option<&str>) {
    let idx = match forwards.iter().position(|(n, _)| *n == node) {
        Some(i) => i,
        None => {
            forwards.push((node, Vec::new()));
            forwards.len() - 1
        }
    };
    if let Some(q) = queue {
        forwards[idx].1.push(q.to_string());
    }
}

/// A random 56-character id in nats-server's style (`N` + base32 alphabet).
fn new_server_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut rng = rand::rng();
    std::iter::once('N')
        .chain((0..55).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char))
        .collect()
}

/// Starts JetStream: the node's Raft groups over gRPC (on the cluster port when clustered).
async fn start_jetstream(server: &Arc<Server>) -> Result<Arc<JetStream>, StartError> {
    let config = &server.config;
    let node = match &server.cluster {
        Some(c) => c.node_id(),
        None => identity::load_or_create(&config.jetstream.store_dir)?,
    };
    let raft_node = jetraft_raft::NodeId(node.0);
    let transport = jetraft_raft::network::grpc::GrpcTransport::new(raft_node);
    let cluster_addr = server
        .cluster
        .as_ref()
        .map(|c| c.identity.cluster_addr.clone())
        .unwrap_or_default();
    let js = JetStream::start(
        server.clone(),
        raft_node,
        transport,
        cluster_addr,
        server.cluster.is_some(),
        jetraft_raft::RaftTiming {
            quiesce_after: Some(QUIESCE_AFTER),
            ..jetraft_raft::RaftTiming::default()
        },
    )
    .await
    .map_err(|e| StartError::JetStream {
        reason: error_chain(&e),
    })?;
    let _ = server.jetstream.set(js.clone());
    Ok(js)
}

/// `error` and every source under it, joined with `": "` (`{:#}` prints the chain only for
/// anyhow errors; a thiserror type shows its own message alone).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut next = error.source();
    while let Some(e) = next {
        out.push_str(": ");
        out.push_str(&e.to_string());
        next = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_error_names_every_cause() {
        let io = std::io::Error::other("Invalid argument: atomic_flush is incompatible");
        let e = crate::jetstream::runtime::JetStreamError::Store {
            path: "/data/jetraft".into(),
            source: jetraft_storage::StorageError::Io(io),
        };
        let chain = error_chain(&e);
        assert!(
            chain.starts_with("opening the store in /data/jetraft: "),
            "{chain}"
        );
        assert!(chain.ends_with("atomic_flush is incompatible"), "{chain}");
    }

    #[test]
    fn server_ids_look_like_nats_server_ids() {
        let id = new_server_id();
        assert_eq!(id.len(), 56);
        assert!(id.starts_with('N'));
        assert_ne!(id, new_server_id());
    }
}
