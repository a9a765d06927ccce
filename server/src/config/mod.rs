//! Server configuration: the model ([`Config`]), the nats-server compatible command line
//! ([`cli`]) and the nats-server config-file syntax ([`file`]).
//!
//! Precedence: defaults < config file (`-c`) < command-line flags, as in nats-server.

pub mod accounts;
pub mod cli;
pub mod file;
pub mod reload;

pub use accounts::{
    AccountConfig, AccountJetStream, ExportConfig, GLOBAL_ACCOUNT, ImportConfig,
    ResponsePermission, ResponseType, ShareKind,
};
pub use file::ConfigError;

use std::path::PathBuf;
use std::time::Duration;

/// Default client port.
pub const DEFAULT_PORT: u16 = 4222;
/// Default maximum payload (1 MiB).
pub const DEFAULT_MAX_PAYLOAD: u32 = 1024 * 1024;
/// Default maximum control line length.
pub const DEFAULT_MAX_CONTROL_LINE: u32 = 4096;
/// Default per-connection outbound buffer limit (64 MiB).
pub const DEFAULT_MAX_PENDING: u64 = 64 * 1024 * 1024;
/// Default maximum number of client connections.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 64 * 1024;
/// Default `lame_duck_duration` (nats-server's).
pub const DEFAULT_LAME_DUCK_DURATION: Duration = Duration::from_secs(120);
/// Default `lame_duck_grace_period` (nats-server's).
pub const DEFAULT_LAME_DUCK_GRACE_PERIOD: Duration = Duration::from_secs(10);

/// Everything the server needs to start. Built by [`cli::parse`] from flags and an optional file.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Client listen host (`-a`, `listen`, `host`/`net`).
    pub host: String,
    /// Client listen port (`-p`, `port`, `listen`).
    pub port: u16,
    /// Monitoring host (`http: host:port`); defaults to [`Config::host`].
    pub http_host: Option<String>,
    /// Monitoring port (`-m`, `http_port`, `http`); `None` disables monitoring.
    pub http_port: Option<u16>,
    /// HTTPS monitoring port (`-ms`, `https_port`), served with the client [`Config::tls`]
    /// certificate; `None` disables it.
    pub https_port: Option<u16>,
    /// Client TLS (`tls { }`, `--tls*` flags); `None` means plaintext clients.
    pub tls: Option<TlsConfig>,
    /// With client TLS, also accept clients that do not upgrade (`allow_non_tls`).
    pub allow_non_tls: bool,
    /// Whether the monitoring port serves the web console at `/` (`console`, `--no_console`).
    pub console: bool,
    /// Server name (`-n`, `server_name`); defaults to the server id when unset.
    pub server_name: Option<String>,
    /// Server tags (`server_tags`), lower-cased and without duplicates, for stream placement.
    pub server_tags: Vec<String>,
    /// JetStream settings.
    pub jetstream: JetStreamConfig,
    /// Cluster settings.
    pub cluster: ClusterConfig,
    /// Authentication and authorization.
    pub auth: AuthConfig,
    /// Largest accepted message (headers + payload) in bytes.
    pub max_payload: u32,
    /// Longest accepted control line in bytes.
    pub max_control_line: u32,
    /// Per-connection outbound bytes before the connection is a slow consumer.
    pub max_pending: u64,
    /// Maximum concurrent client connections.
    pub max_connections: u32,
    /// Maximum subscriptions per connection (0: unlimited).
    pub max_subscriptions: u32,
    /// Interval between server PINGs to an idle client.
    pub ping_interval: Duration,
    /// Outstanding PINGs tolerated before `Stale Connection`.
    pub ping_max: u32,
    /// Longest a blocked write may take before the client is a slow consumer.
    pub write_deadline: Duration,
    /// Logging.
    pub log: LogConfig,
    /// File the server writes its process id to (`-P`, `pid_file`), for `--signal`.
    pub pid_file: Option<PathBuf>,
    /// Directory the server writes `<exe>_<pid>.ports` into once it listens (`ports_file_dir`,
    /// `--ports_file_dir`): test launchers read the ports of a server started on random ports.
    pub ports_file_dir: Option<PathBuf>,
    /// Lame duck mode: how long closing the clients is spread over (`lame_duck_duration`).
    pub lame_duck_duration: Duration,
    /// Lame duck mode: how long clients keep working before the first is closed
    /// (`lame_duck_grace_period`).
    pub lame_duck_grace_period: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            host: "0.0.0.0".to_string(),
            port: DEFAULT_PORT,
            http_host: None,
            http_port: None,
            https_port: None,
            tls: None,
            allow_non_tls: false,
            console: true,
            server_name: None,
            server_tags: Vec::new(),
            jetstream: JetStreamConfig::default(),
            cluster: ClusterConfig::default(),
            auth: AuthConfig::default(),
            max_payload: DEFAULT_MAX_PAYLOAD,
            max_control_line: DEFAULT_MAX_CONTROL_LINE,
            max_pending: DEFAULT_MAX_PENDING,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_subscriptions: 0,
            ping_interval: Duration::from_secs(120),
            ping_max: 2,
            write_deadline: Duration::from_secs(10),
            log: LogConfig::default(),
            pid_file: None,
            ports_file_dir: None,
            lame_duck_duration: DEFAULT_LAME_DUCK_DURATION,
            lame_duck_grace_period: DEFAULT_LAME_DUCK_GRACE_PERIOD,
        }
    }
}

/// JetStream settings. As in nats-server, JetStream runs only when enabled (`-js`, a
/// `jetstream { }` block, `jetstream: enabled`); without it the server answers no `$JS.API`
/// request and never opens the store.
#[derive(Debug, Clone, PartialEq)]
pub struct JetStreamConfig {
    /// Whether JetStream runs (`-js`, `jetstream { }`, `jetstream: true|enabled`).
    pub enabled: bool,
    /// Where the node keeps its data (`-sd`, `jetstream { store_dir }`).
    pub store_dir: PathBuf,
    /// Memory-storage limit in bytes (`max_memory_store`); `None` means "75% of RAM" as in nats-server.
    pub max_memory_store: Option<u64>,
    /// File-storage limit in bytes (`max_file_store`); `None` means unlimited by config.
    pub max_file_store: Option<u64>,
    /// JetStream domain (`jetstream { domain }`): the API also answers on
    /// `$JS.<domain>.API.>` and PubAcks and account info name it.
    pub domain: Option<String>,
    /// Move a damaged store aside at start and rejoin the cluster under a new node id, whatever
    /// is damaged (`--repair_store`, `jetstream { repair_store: true }`, a jetraft extension).
    /// Damage in table files is repaired without it; WAL or MANIFEST damage only with it.
    pub repair_store: bool,
}

impl Default for JetStreamConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            store_dir: default_store_dir(),
            max_memory_store: None,
            max_file_store: None,
            domain: None,
            repair_store: false,
        }
    }
}

/// nats-server's store dir when none is given: `<temp dir>/nats/jetstream` (`/tmp/nats/jetstream`).
pub fn default_store_dir() -> PathBuf {
    std::env::temp_dir().join("nats").join("jetstream")
}

/// Cluster settings (`--cluster_name`, `--cluster`, `--routes`, `cluster { }`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterConfig {
    /// Cluster name; nodes only link with peers of the same name.
    pub name: Option<String>,
    /// Cluster listen host.
    pub host: Option<String>,
    /// Cluster listen port; `None` means no cluster listener (single node).
    pub port: Option<u16>,
    /// Peers as `host:port` (scheme `nats://` or `nats-route://` stripped), possibly including self.
    pub routes: Vec<String>,
    /// Mutual TLS on the cluster port (`cluster { tls { } }`): every link is encrypted and
    /// both ends verify the other's certificate against the CA.
    pub tls: Option<TlsConfig>,
    /// Route credentials (`cluster { authorization { user, password } }`): required from every
    /// peer that connects, and presented to every peer this node connects to.
    pub auth: Option<RouteAuth>,
}

/// User and password every route must present (`cluster { authorization { } }`).
#[derive(Clone, PartialEq, Default)]
pub struct RouteAuth {
    /// Route user.
    pub user: String,
    /// Route password (plain or bcrypt when checking; sent as configured when dialing).
    pub password: String,
}

impl std::fmt::Debug for RouteAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteAuth")
            .field("user", &self.user)
            .field("password", &REDACTED)
            .finish()
    }
}

/// Default TLS handshake timeout (nats-server's `DEFAULT_TLS_TIMEOUT`).
pub const DEFAULT_TLS_TIMEOUT: Duration = Duration::from_secs(2);

/// A `tls { }` block (clients, or routes inside `cluster { }`).
#[derive(Debug, Clone, PartialEq)]
pub struct TlsConfig {
    /// PEM certificate chain of this server (`cert_file`, `--tlscert`).
    pub cert_file: PathBuf,
    /// PEM private key (`key_file`, `--tlskey`).
    pub key_file: PathBuf,
    /// PEM CA certificates that client (or peer) certificates must chain to (`ca_file`,
    /// `--tlscacert`).
    pub ca_file: Option<PathBuf>,
    /// Clients must present a certificate signed by the CA (`verify`, `--tlsverify`).
    pub verify: bool,
    /// As `verify`, and the certificate's subject names the user (`verify_and_map`).
    pub verify_and_map: bool,
    /// Longest a TLS handshake may take (`timeout`, seconds or a duration).
    pub timeout: Duration,
    /// The client starts TLS before the server sends INFO (`handshake_first`).
    pub handshake_first: bool,
    /// Lowest TLS version accepted (`min_version`: "1.2" or "1.3").
    pub min_version: TlsVersion,
}

/// TLS protocol versions rustls speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsVersion {
    /// TLS 1.2 (nats-server's default minimum).
    #[default]
    V1_2,
    /// TLS 1.3.
    V1_3,
}

impl TlsConfig {
    /// A block with the certificate and key only; the rest as nats-server defaults them.
    pub fn new(cert_file: PathBuf, key_file: PathBuf) -> Self {
        Self {
            cert_file,
            key_file,
            ca_file: None,
            verify: false,
            verify_and_map: false,
            timeout: DEFAULT_TLS_TIMEOUT,
            handshake_first: false,
            min_version: TlsVersion::default(),
        }
    }

    /// Whether clients must present a certificate.
    pub fn requires_client_cert(&self) -> bool {
        self.verify || self.verify_and_map
    }
}

/// Authentication and authorization (`authorization { }`, `--user/--pass/--auth`).
#[derive(Clone, PartialEq)]
pub struct AuthConfig {
    /// Single user name.
    pub user: Option<String>,
    /// Single user's password; bcrypt hashes (`$2a$`, `$2b$`, `$2y$`) are verified as such.
    pub password: Option<String>,
    /// Token (`--auth`, `authorization { token }`); may itself be a bcrypt hash.
    pub token: Option<String>,
    /// Time a client has to send CONNECT when auth is required.
    pub timeout: Duration,
    /// Users list with optional permissions (users of the global account `$G`).
    pub users: Vec<UserConfig>,
    /// Accounts (`accounts { }`) with their users, exports and imports.
    pub accounts: Vec<AccountConfig>,
    /// `no_auth_user`: the user a client without credentials is.
    pub no_auth_user: Option<String>,
    /// `system_account`: the system account's name (`$SYS` when unset).
    pub system_account: Option<String>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            user: None,
            password: None,
            token: None,
            timeout: Duration::from_secs(2),
            users: Vec::new(),
            accounts: Vec::new(),
            no_auth_user: None,
            system_account: None,
        }
    }
}

/// Shown instead of a secret in debug output.
const REDACTED: &str = "[REDACTED]";

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| REDACTED))
            .field("token", &self.token.as_ref().map(|_| REDACTED))
            .field("timeout", &self.timeout)
            .field("users", &self.users)
            .field("accounts", &self.accounts)
            .field("no_auth_user", &self.no_auth_user)
            .field("system_account", &self.system_account)
            .finish()
    }
}

impl std::fmt::Debug for UserConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserConfig")
            .field("user", &self.user)
            .field("password", &REDACTED)
            .field("nkey", &self.nkey)
            .field("permissions", &self.permissions)
            .finish()
    }
}

impl AuthConfig {
    /// Whether clients must authenticate.
    pub fn required(&self) -> bool {
        self.user.is_some()
            || self.token.is_some()
            || !self.users.is_empty()
            || self.accounts.iter().any(|a| !a.users.is_empty())
    }

    /// Every user with the account it belongs to (`None`: the global account `$G`).
    pub fn all_users(&self) -> impl Iterator<Item = (&UserConfig, Option<&str>)> {
        self.users.iter().map(|u| (u, None)).chain(
            self.accounts
                .iter()
                .flat_map(|a| a.users.iter().map(move |u| (u, Some(a.name.as_str())))),
        )
    }
}

/// One entry of `authorization { users = [ ... ] }`.
#[derive(Clone, PartialEq, Default)]
pub struct UserConfig {
    /// User name.
    pub user: String,
    /// Password, plain or bcrypt.
    pub password: String,
    /// Public NKEY (`U...`) identifying the user instead of a password.
    pub nkey: Option<String>,
    /// Publish/subscribe permissions; `None` allows everything.
    pub permissions: Option<Permissions>,
}

/// Publish and subscribe permissions of a user.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Permissions {
    /// Subjects the user may publish to.
    pub publish: Option<SubjectPermission>,
    /// Subjects the user may subscribe to (`"subject queue"` entries name a queue group).
    pub subscribe: Option<SubjectPermission>,
    /// `allow_responses`: replies to received requests are allowed.
    pub responses: Option<ResponsePermission>,
}

/// Allow and deny lists of subjects (wildcards allowed). An empty allow list allows everything
/// not denied; deny wins over allow. `publish: "a.>"` or `publish: ["a", "b"]` set `allow` only.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SubjectPermission {
    /// Subjects allowed.
    pub allow: Vec<String>,
    /// Subjects denied.
    pub deny: Vec<String>,
}

/// Logging settings (`-D`, `-V`, `-DV`, `-l`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LogConfig {
    /// Debug level (`-D`).
    pub debug: bool,
    /// Trace level (`-V`), which logs protocol operations.
    pub trace: bool,
    /// Log to this file instead of stderr (`-l`, `log_file`).
    pub file: Option<PathBuf>,
}
