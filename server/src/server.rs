//! The node's wiring: [`start`] binds the listeners and builds the parts (the [`Bus`], the
//! connection registry, the cluster links, JetStream, monitoring), each with only the handles
//! and views it needs; the [`ServerHandle`] it returns shuts them down. Only `main` uses this
//! module: nothing under `conn`, `cluster`, `jetstream` or `monitor` imports it (the `tidy`
//! test checks), so the parts never reach back into the whole.

mod lame_duck;
mod ports_file;
mod reload;
mod store_lock;
mod store_repair;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::info;

use crate::auth::Authenticator;
use crate::bus::{Bus, PeerLinks};
use crate::cluster::{self, ClusterContext, ClusterState, identity};
use crate::config::Config;
use crate::conn::{self, Clients, ConnContext};
use crate::jetstream::runtime::{JetStream, JetStreamContext};
use crate::monitor::{self, MonitorView};
use crate::node::{NATS_VERSION, NodeInfo};

pub use reload::ReloadError;

/// Directory under the JetStream store dir where received Raft snapshots are spooled.
const SNAPSHOT_SPOOL_DIR: &str = "snapshot-spool";

/// A Raft group (stream or meta) that logged nothing for this long stops its timers on every
/// replica until the next write ([`jetraft_raft::quiesce`]): idle streams cost no CPU. Short,
/// because an awake group ticks ~20 times a second on every replica: publishing round-robin
/// to 1,000 R3 streams (each woken by every write) cost a quarter less CPU per message at
/// 100 ms than at 500 ms.
const QUIESCE_AFTER: Duration = Duration::from_millis(100);
/// Longest a shutdown waits for the node's tasks to end.
const SHUTDOWN_BOUND: Duration = Duration::from_secs(10);
/// Longest a shutdown (SIGTERM) spends handing this node's Raft leaderships to other voters:
/// one round, no retries (lame duck mode does the thorough version). A group whose leadership
/// was handed off keeps serving at once instead of after an election timeout.
const SHUTDOWN_HANDOFF: Duration = Duration::from_secs(1);

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
    /// Another server uses the store dir.
    #[error(transparent)]
    StoreLock(#[from] store_lock::StoreLockError),
    /// The store is damaged and was not repaired (see `store_repair`).
    #[error(transparent)]
    StoreRepair(#[from] store_repair::StoreRepairError),
    /// A TLS certificate, key or CA file could not be used.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// Both `http_port` and `https_port` are set (nats-server refuses that too).
    #[error("can't specify both HTTP ({http}) and HTTPs ({https}) ports")]
    BothMonitorPorts {
        /// The HTTP port.
        http: u16,
        /// The HTTPS port.
        https: u16,
    },
    /// `https_port` is set but there is no `tls { }` to serve it with.
    #[error("https_port needs a tls {{ }} block (or --tls, --tlscert, --tlskey)")]
    HttpsWithoutTls,
    /// JetStream (its store or its Raft groups) could not start.
    #[error("start jetstream: {reason}")]
    JetStream {
        /// What failed.
        reason: String,
    },
}

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    /// Connections (lame duck closes them; shutdown cancels them).
    conns: Arc<ConnContext>,
    /// The JetStream runtime; `None` when JetStream is not enabled.
    jetstream: Option<Arc<JetStream>>,
    /// Every task of the node.
    tasks: TaskTracker,
    /// Cancelled on shutdown.
    shutdown: CancellationToken,
    /// The ports file written at startup (`ports_file_dir`), removed on shutdown.
    ports_file: Option<std::path::PathBuf>,
    /// This server's hold on its store dir (JetStream only), released when the process ends.
    _store_lock: Option<store_lock::StoreLock>,
}

impl ServerHandle {
    /// Graceful shutdown, in order:
    /// 1. stop accepting clients (the client listener closes);
    /// 2. hand the Raft leaderships this node holds to other voters, one bounded round
    ///    ([`SHUTDOWN_HANDOFF`]), and start no more elections here;
    /// 3. stop JetStream's tasks, then its Raft groups (calls still waiting on a group give
    ///    up first, inbound Raft calls are refused from then on: no call reaches a stopped
    ///    group, which openraft would log as an error);
    /// 4. close the client connections (each writer flushes what its client was sent, answers
    ///    included, then closes) and the other listeners, and wait (bounded) for every task.
    pub async fn shutdown(&self) {
        let started = tokio::time::Instant::now();
        info!("server shutting down");
        self.conns.lame_duck.cancel();
        if let Some(js) = &self.jetstream {
            hand_off_briefly(js, SHUTDOWN_HANDOFF).await;
            tracing::debug!(took = ?started.elapsed(), "shutdown: leaderships handed off");
            js.shutdown().await;
            tracing::debug!(took = ?started.elapsed(), "shutdown: jetstream stopped");
        }
        self.shutdown.cancel();
        self.tasks.close();
        if tokio::time::timeout(SHUTDOWN_BOUND, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                tasks = self.tasks.len(),
                "tasks still running at the shutdown bound"
            );
        }
        if let Some(path) = &self.ports_file {
            ports_file::remove(path);
        }
        info!(took = ?started.elapsed(), "server exiting");
    }
}

/// One round of leadership hand-offs of every group this node leads, bounded by `bound`;
/// elections here are off from then on. Groups nobody can take over (no other voter is
/// caught up and reachable) are left as they are.
async fn hand_off_briefly(js: &JetStream, bound: Duration) {
    let registry = js.registry();
    let groups = registry.groups().ids();
    for g in &groups {
        let _ = registry.set_electable(*g, false);
    }
    let tries = groups.iter().map(|g| async move {
        if let Ok(Some(to)) = registry.hand_off(*g).await {
            tracing::debug!(group = %g, to = %to, "shutdown: leadership handed off");
        }
    });
    if tokio::time::timeout(bound, futures_util::future::join_all(tries))
        .await
        .is_err()
    {
        tracing::debug!(?bound, "shutdown: leadership hand-offs cut short");
    }
}

/// Binds the listeners and starts serving.
pub async fn start(config: Config) -> Result<ServerHandle, StartError> {
    let config = Arc::new(config);
    let store_dir = &config.jetstream.store_dir;
    let js_enabled = config.jetstream.enabled;
    // Without JetStream the store is never touched, as in nats-server.
    // Taken before anything listens: a second server on the same dir stops here.
    let store_lock = if js_enabled {
        std::fs::create_dir_all(store_dir).map_err(|source| StartError::StoreDir {
            path: store_dir.display().to_string(),
            source,
        })?;
        let lock = store_lock::StoreLock::acquire(store_dir)?;
        // Before the node id is read: a repair moves the id aside with the damaged store.
        store_repair::prepare(
            store_dir,
            config.jetstream.repair_store,
            config.cluster.port.is_some(),
        )?;
        Some(lock)
    } else {
        None
    };
    let client_tls = client_tls(&config)?;
    if let (Some(http), Some(https)) = (config.http_port, config.https_port) {
        return Err(StartError::BothMonitorPorts { http, https });
    }
    if config.https_port.is_some() && client_tls.is_none() {
        return Err(StartError::HttpsWithoutTls);
    }
    let route_tls = cluster::security::server_tls(&config.cluster)?;
    let link_security = cluster::security::link_security(&config.cluster)?;
    let (listener, client_addr) =
        bind("client", &format!("{}:{}", config.host, config.port)).await?;
    let node = Arc::new(NodeInfo::new(
        config.server_name.clone(),
        config.host.clone(),
        client_addr,
        config.cluster.name.clone(),
    ));
    let tasks = TaskTracker::new();
    let shutdown = CancellationToken::new();
    let (cluster, cluster_listener) = match config.cluster.port {
        Some(port) => {
            let host = config.cluster.host.as_deref().unwrap_or("0.0.0.0");
            let (listener, addr) = bind("cluster", &format!("{host}:{port}")).await?;
            // The id is kept in the store so a restarted node keeps its Raft identity; a node
            // without JetStream has no Raft state, and takes a new id on every start.
            let node_id = if js_enabled {
                identity::load_or_create(store_dir)?
            } else {
                identity::ephemeral()
            };
            let identity = jetraft_proto::node::NodeIdentity {
                node_id: node_id.0,
                server_name: node.server_name.clone(),
                client_url: format!("{}:{}", config.host, client_addr.port()),
                cluster_name: config.cluster.name.clone().unwrap_or_default(),
                server_id: node.server_id.clone(),
                cluster_addr: format!("{host}:{}", addr.port()),
                tags: config.server_tags.clone(),
            };
            (
                Some(Arc::new(ClusterState::new(identity))),
                Some((listener, addr)),
            )
        }
        None => (None, None),
    };
    let bus = Bus::new(cluster.clone().map(|c| c as Arc<dyn PeerLinks>));
    let auth = Arc::new(Authenticator::with_cert_mapping(
        &config.auth,
        config.tls.as_ref().is_some_and(|t| t.verify_and_map),
    ));
    bus.set_accounts(auth.accounts().clone());
    let conns = Arc::new(ConnContext {
        bus: bus.clone(),
        clients: Arc::new(Clients::new(
            cluster.as_deref().map(connect_urls).unwrap_or_default(),
        )),
        settings: conn::LiveSettings::new(conn::ConnSettings::new(
            config.clone(),
            auth,
            client_tls.clone(),
        )),
        node: node.clone(),
        tasks: tasks.clone(),
        shutdown: shutdown.clone(),
        lame_duck: CancellationToken::new(),
    });
    let jetstream_slot = Arc::new(OnceLock::new());
    let mut listeners = ports_file::Listeners {
        client: Some(client_addr),
        client_tls: client_tls.is_some(),
        ..ports_file::Listeners::default()
    };
    // What the monitoring endpoints (plain and HTTPS) read, for the address each is bound to.
    let monitor_view = |http_addr| MonitorView {
        node: node.clone(),
        config: config.clone(),
        bus: bus.clone(),
        conns: conns.clone(),
        jetstream: jetstream_slot.clone(),
        http_addr,
        shutdown: shutdown.clone(),
    };
    if let Some(port) = config.http_port {
        let host = config.http_host.as_deref().unwrap_or(&config.host);
        let (http, bound) = bind("monitoring", &format!("{host}:{port}")).await?;
        tasks.spawn(monitor::serve(Arc::new(monitor_view(bound)), http));
        info!(addr = %bound, "starting http monitor");
        listeners.monitoring = Some(bound);
    }
    if let (Some(port), Some(tls)) = (config.https_port, &client_tls) {
        let host = config.http_host.as_deref().unwrap_or(&config.host);
        let (https, bound) = bind("https monitoring", &format!("{host}:{port}")).await?;
        let view = monitor_view(bound);
        let mut server_config = (*crate::tls::server_config(&tls.settings)?).clone();
        server_config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
        tasks.spawn(monitor::serve_tls(
            Arc::new(view),
            https,
            acceptor,
            tls.settings.timeout,
        ));
        info!(addr = %bound, "starting https monitor");
        listeners.monitoring_tls = Some(bound);
    }
    info!(
        version = NATS_VERSION,
        name = %node.server_name,
        id = %node.server_id,
        "starting jetraft {}",
        env!("CARGO_PKG_VERSION")
    );
    // This line and "Server is ready" keep nats-server's exact wording (not our lowercase
    // fragment with fields): launchers parse them to find the port and to know the server is up
    // (nats.py's `nats.server.run` waits for both on stderr).
    info!("Listening for client connections on {client_addr}");
    if let Some(tls) = &client_tls {
        if tls.allow_non_tls {
            info!("TLS available for client connections (allow_non_tls)");
        } else {
            info!("TLS required for client connections");
        }
    }
    let js = if js_enabled {
        let js = start_jetstream(JetStreamContext {
            bus: bus.clone(),
            info: node.clone(),
            config: config.clone(),
            cluster: cluster.clone(),
            tasks: tasks.clone(),
            shutdown: shutdown.clone(),
        })
        .await?;
        let _ = jetstream_slot.set(js.clone());
        // Message tracing names the stream a publish goes to.
        let weak = Arc::downgrade(&js);
        bus.set_stream_lookup(Arc::new(move |account: &str, subject: &str| {
            weak.upgrade()?.stream_capturing(account, subject)
        }));
        crate::jetstream::runtime::account_off::serve_accounts_without_jetstream(
            &bus,
            js.accounts(),
            &tasks,
            &shutdown,
        )
        .map_err(|e| StartError::JetStream {
            reason: e.to_string(),
        })?;
        Some(js)
    } else {
        None
    };
    let sys_addr = listeners
        .monitoring
        .or(listeners.monitoring_tls)
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    if let Err(e) = crate::system::serve(Arc::new(monitor_view(sys_addr)), &tasks, &shutdown) {
        tracing::error!(error = %e, "system account services not started");
    }
    if let (Some(cluster), Some((listener, addr))) = (&cluster, cluster_listener) {
        info!(addr = %addr, node_id = %cluster.node_id(), "listening for route connections");
        listeners.cluster = Some(addr);
        let ctx = ClusterContext {
            bus: bus.clone(),
            cluster: cluster.clone(),
            tasks: tasks.clone(),
            shutdown: shutdown.clone(),
            security: link_security.clone(),
            node: node.clone(),
            jetstream: js.is_some(),
        };
        let mut routes = cluster::listener::routes(&ctx);
        if let Some(js) = &js {
            let raft = jetraft_raft::network::grpc::RaftGrpcService::new(
                js.registry().node_id(),
                js.registry().groups().clone(),
            );
            // Received snapshots go to disk, not memory (a wiped replica of a large stream).
            let spool_dir = config.jetstream.store_dir.join(SNAPSHOT_SPOOL_DIR);
            let raft = match std::fs::create_dir_all(&spool_dir) {
                Ok(()) => raft.spooling(jetraft_raft::SnapshotSpool::new(spool_dir)),
                Err(e) => {
                    tracing::warn!(path = %spool_dir.display(), error = %e,
                        "no snapshot spool directory: received snapshots are held in memory");
                    raft
                }
            };
            routes = routes.add_service(raft.into_server());
        }
        tasks.spawn(cluster::listener::serve(
            listener,
            routes,
            route_tls.clone(),
            cluster::security::RouteGate::new(config.cluster.auth.as_ref()),
            shutdown.clone(),
        ));
        for route in &config.cluster.routes {
            cluster::link::ensure_dialer(&ctx, route, None);
        }
        tasks.spawn(advertise_connect_urls(
            cluster.clone(),
            conns.clone(),
            shutdown.clone(),
        ));
        if let Some(js) = &js {
            tasks.spawn(js.clone().membership_loop(cluster.clone()));
        }
    } else if let Some(js) = &js {
        js.form_single_node().await;
    }
    info!("Server is ready");
    tasks.spawn(conn::accept::run(conns.clone(), listener));
    let ports_file = config
        .ports_file_dir
        .as_deref()
        .and_then(|dir| ports_file::write(dir, &listeners));
    Ok(ServerHandle {
        conns,
        jetstream: js,
        tasks,
        shutdown,
        ports_file,
        _store_lock: store_lock,
    })
}

/// The client TLS `config` asks for (certificates and CA read now).
fn client_tls(config: &Config) -> Result<Option<conn::ClientTls>, crate::tls::TlsError> {
    Ok(match &config.tls {
        Some(t) => Some(conn::ClientTls {
            acceptor: tokio_rustls::TlsAcceptor::from(crate::tls::server_config(t)?),
            settings: t.clone(),
            allow_non_tls: config.allow_non_tls,
        }),
        None => None,
    })
}

/// The credential checks `config` asks for.
fn authenticator(config: &Config) -> Authenticator {
    Authenticator::with_cert_mapping(
        &config.auth,
        config.tls.as_ref().is_some_and(|t| t.verify_and_map),
    )
}

/// Keeps INFO's `connect_urls` in step with the cluster's links: when a link goes up or down
/// and the client URLs of the connected peers changed, clients that take async INFO get a new
/// INFO. One task does it, so two links changing at once cannot leave an older list in place.
async fn advertise_connect_urls(
    cluster: Arc<ClusterState>,
    conns: Arc<ConnContext>,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = cluster.wait_links_changed() => conns.set_connect_urls(connect_urls(&cluster)),
        }
    }
}

/// Binds a listener and reports the address it got (port 0 picks a free port).
async fn bind(what: &'static str, addr: &str) -> Result<(TcpListener, SocketAddr), StartError> {
    let err = |source| StartError::Bind {
        what,
        addr: addr.to_string(),
        source,
    };
    if let Some(port) = addr.strip_prefix("0.0.0.0:").and_then(|p| p.parse().ok())
        && let Some(listener) = bind_dual_stack(port)
    {
        let bound = listener.local_addr().map_err(err)?;
        return Ok((
            listener,
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, bound.port())),
        ));
    }
    let listener = TcpListener::bind(addr).await.map_err(err)?;
    let bound = listener.local_addr().map_err(err)?;
    Ok((listener, bound))
}

/// A listener on every IPv6 and IPv4 address for `0.0.0.0:port`, as nats-server's Go listener
/// is: a client dialing `[::1]` (or `localhost` resolved to it first) reaches the server too.
/// `None` where IPv6 is unavailable; the caller then binds the IPv4 wildcard alone.
fn bind_dual_stack(port: u16) -> Option<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP)).ok()?;
    socket.set_only_v6(false).ok()?;
    // As tokio's own bind does on Unix: a restarted server gets its port back at once.
    socket.set_reuse_address(true).ok()?;
    socket
        .bind(&SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)).into())
        .ok()?;
    socket.listen(1024).ok()?;
    socket.set_nonblocking(true).ok()?;
    TcpListener::from_std(socket.into()).ok()
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

/// Starts JetStream: the node's Raft groups over gRPC (on the cluster port when clustered).
async fn start_jetstream(ctx: JetStreamContext) -> Result<Arc<JetStream>, StartError> {
    let node = match &ctx.cluster {
        Some(c) => c.node_id(),
        None => identity::load_or_create(&ctx.config.jetstream.store_dir)?,
    };
    let transport = jetraft_raft::network::grpc::GrpcTransport::with_security(
        node,
        jetraft_raft::network::grpc::GrpcSettings::default(),
        cluster::security::link_security(&ctx.config.cluster)?,
    )
    .into();
    let cluster_addr = ctx
        .cluster
        .as_ref()
        .map(|c| c.identity.cluster_addr.clone())
        .unwrap_or_default();
    let clustered = ctx.cluster.is_some();
    JetStream::start(
        ctx,
        node,
        transport,
        cluster_addr,
        clustered,
        jetraft_raft::RaftTiming {
            quiesce_after: Some(QUIESCE_AFTER),
            ..jetraft_raft::RaftTiming::default()
        },
    )
    .await
    .map_err(|e| StartError::JetStream {
        reason: error_chain(&e),
    })
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
}
