//! Client connections: the accept loop ([`accept`]), the registry of open and recently closed
//! connections ([`Clients`]), and each connection's reader task ([`reader`]) and writer task
//! ([`writer`]). The per-connection state everyone delivers to is [`crate::bus::Client`].
//!
//! Connections reach the rest of the node only through [`ConnContext`]: the bus they publish
//! to and subscribe on, the credential checks, the limits, and what INFO says about the node.

pub mod accept;
pub mod reader;
mod reauth;
mod registry;
pub mod settings;
pub mod writer;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use registry::{Clients, ClosedConn, ConnStats};
pub use settings::{ConnSettings, LiveSettings};

use crate::auth::Authenticator;
use crate::bus::{Bus, Client};
use crate::config::Config;
use crate::node::{API_LEVEL, NATS_VERSION, NodeInfo};
use crate::protocol::encode::{self, ServerInfo};

/// What connections need from the node.
#[derive(Debug)]
pub struct ConnContext {
    /// Where messages go.
    pub bus: Bus,
    /// Open and recently closed connections.
    pub clients: Arc<Clients>,
    /// The reloadable settings: configuration (limits, timeouts, ...), credential checks and
    /// client TLS, swapped whole by a config reload.
    pub settings: LiveSettings,
    /// What INFO says about the node.
    pub node: Arc<NodeInfo>,
    /// Connection tasks, awaited at shutdown.
    pub tasks: TaskTracker,
    /// Cancelled on shutdown; parent of every connection's token.
    pub shutdown: CancellationToken,
    /// Cancelled when the node enters lame duck mode (it stops accepting clients).
    pub lame_duck: CancellationToken,
}

/// Client TLS: the rustls configuration and the settings the accept path follows.
#[derive(Clone)]
pub struct ClientTls {
    /// Certificates and client verification.
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// The settings (`timeout`, `handshake_first`, `verify`).
    pub settings: crate::config::TlsConfig,
    /// `allow_non_tls`: clients may stay in plaintext.
    pub allow_non_tls: bool,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("settings", &self.settings)
            .field("allow_non_tls", &self.allow_non_tls)
            .finish_non_exhaustive()
    }
}

impl ConnContext {
    /// The credential checks in force.
    pub fn auth(&self) -> Arc<Authenticator> {
        self.settings.load().auth.clone()
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        self.settings.load().config.clone()
    }

    /// The INFO a client sees; `connect_info` marks the one sent after the first PONG.
    pub fn info_for(&self, client: &Client, connect_info: bool) -> ServerInfo {
        let node = &self.node;
        let settings = self.settings.load();
        let tls = settings.tls.as_ref();
        ServerInfo {
            server_id: node.server_id.clone(),
            server_name: node.server_name.clone(),
            version: NATS_VERSION.to_string(),
            proto: 1,
            git_commit: String::new(),
            go: format!("jetraft {}", env!("CARGO_PKG_VERSION")),
            host: node.host.clone(),
            port: node.client_addr.port(),
            headers: true,
            auth_required: settings.auth.info_auth_required(),
            tls_required: tls.is_some_and(|t| !t.allow_non_tls),
            tls_verify: tls.is_some_and(|t| t.settings.requires_client_cert()),
            tls_available: tls.is_some_and(|t| t.allow_non_tls),
            nonce: client.nonce.get().cloned(),
            max_payload: settings.config.max_payload,
            jetstream: settings.config.jetstream.enabled,
            client_id: client.cid,
            client_ip: client.addr.ip().to_string(),
            connect_urls: self.clients.connect_urls(),
            cluster: node.cluster_name.clone(),
            api_lvl: API_LEVEL,
            ldm: self.lame_duck.is_cancelled(),
            connect_info,
            remote_account: connect_info.then(|| client.account().to_string()),
        }
    }

    /// Sends a fresh INFO to every client that takes async INFO (`connect_urls` changed, or
    /// lame duck mode began).
    pub fn send_async_info(&self) {
        for c in self.clients.live() {
            if c.async_info.load(std::sync::atomic::Ordering::Acquire) {
                let info = self.info_for(&c, false);
                encode::info(&mut c.out.lock().buf, &info);
                c.wake_writer();
            }
        }
    }

    /// Sets the `connect_urls` clients are told; when they changed, clients that take async
    /// INFO get a new INFO.
    pub fn set_connect_urls(&self, urls: Vec<String>) {
        if self.clients.replace_connect_urls(urls) {
            self.send_async_info();
        }
    }
}
