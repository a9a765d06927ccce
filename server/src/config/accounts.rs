//! The accounts model (`accounts { }`, `no_auth_user`, `system_account`): what each account
//! shares with others. Users of an account live in [`AccountConfig::users`]; users of
//! `authorization { }` belong to the global account `$G`.

use std::time::Duration;

use super::UserConfig;

/// The account of users outside any `accounts { }` entry (nats-server's `$G`).
pub const GLOBAL_ACCOUNT: &str = "$G";
/// The system account's name when `system_account` is not set.
pub const DEFAULT_SYSTEM_ACCOUNT: &str = "$SYS";
/// How long a service import waits for responses by default (nats-server's 2 minutes).
pub const DEFAULT_RESPONSE_THRESHOLD: Duration = Duration::from_secs(120);

/// One entry of `accounts { NAME: { users, exports, imports, default_permissions } }`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AccountConfig {
    /// The account's name.
    pub name: String,
    /// Its users (account default permissions already applied).
    pub users: Vec<UserConfig>,
    /// What it offers to other accounts.
    pub exports: Vec<ExportConfig>,
    /// What it takes from other accounts.
    pub imports: Vec<ImportConfig>,
    /// Its JetStream (`jetstream: enabled` or a block of limits); `None` when disabled.
    pub jetstream: Option<AccountJetStream>,
}

/// An account's JetStream limits (`accounts { A: { jetstream: { ... } } }`); -1 is unlimited,
/// as nats-server shows them in account info.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountJetStream {
    /// Bytes of memory storage (`max_mem`, `max_memory_store`, `max_mem_store`).
    pub max_memory: i64,
    /// Bytes of file storage (`max_file`, `max_file_store`, `max_store`).
    pub max_storage: i64,
    /// Streams (`max_streams`, `streams`).
    pub max_streams: i64,
    /// Consumers (`max_consumers`, `consumers`).
    pub max_consumers: i64,
    /// A consumer's `max_ack_pending` at most (`max_ack_pending`).
    pub max_ack_pending: i64,
    /// A memory stream's `max_bytes` at most (`memory_max_stream_bytes`,
    /// `mem_max_stream_bytes`); 0 or less: no bound.
    pub memory_max_stream_bytes: i64,
    /// A file stream's `max_bytes` at most (`store_max_stream_bytes`, `disk_max_stream_bytes`);
    /// 0 or less: no bound.
    pub storage_max_stream_bytes: i64,
    /// Every stream must set `max_bytes` (`max_bytes_required`, `max_stream_bytes`,
    /// `max_bytes`: a boolean in nats-server).
    pub max_bytes_required: bool,
}

impl Default for AccountJetStream {
    /// `jetstream: enabled`: no limits.
    fn default() -> Self {
        Self {
            max_memory: -1,
            max_storage: -1,
            max_streams: -1,
            max_consumers: -1,
            max_ack_pending: -1,
            memory_max_stream_bytes: -1,
            storage_max_stream_bytes: -1,
            max_bytes_required: false,
        }
    }
}

/// A stream (messages flow out) or a service (requests flow in, responses out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareKind {
    /// `stream`: messages published in the exporter reach the importer's subscribers.
    Stream,
    /// `service`: requests published in the importer reach the exporter's responders.
    Service,
}

impl ShareKind {
    /// `stream` or `service`, as in the config and in nats-server's errors.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stream => "stream",
            Self::Service => "service",
        }
    }
}

/// How many responses a service import delivers back per request (`response_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResponseType {
    /// One response, then the reply mapping is gone (the default).
    #[default]
    Singleton,
    /// Any number of responses until the threshold passes.
    Stream,
    /// Any number of responses until the threshold passes (chunked payloads).
    Chunked,
}

/// `exports: [ { stream | service: SUBJECT, accounts: [...], response_type, threshold } ]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportConfig {
    /// Stream or service.
    pub kind: ShareKind,
    /// Subject pattern exported.
    pub subject: String,
    /// Accounts allowed to import it; empty: public.
    pub accounts: Vec<String>,
    /// Services: how many responses a request may get.
    pub response: ResponseType,
    /// Services: how long responses are delivered back.
    pub threshold: Duration,
}

/// `imports: [ { stream | service: { account, subject }, prefix | to } ]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportConfig {
    /// Stream or service.
    pub kind: ShareKind,
    /// The exporting account.
    pub account: String,
    /// The subject in the exporting account.
    pub subject: String,
    /// Streams: the importer sees `<prefix>.<subject>`.
    pub prefix: Option<String>,
    /// Streams: the importer sees this subject instead. Services: the importer publishes
    /// requests on this subject (default: `subject`).
    pub to: Option<String>,
}

impl ImportConfig {
    /// The subject in the importing account: where requests are published (services) or
    /// where messages are seen (streams).
    pub fn local_subject(&self) -> String {
        match (&self.prefix, &self.to) {
            (Some(prefix), _) => format!("{prefix}.{}", self.subject),
            (None, Some(to)) => to.clone(),
            (None, None) => self.subject.clone(),
        }
    }
}

/// `allow_responses`: the user may publish to the reply subjects of requests it received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponsePermission {
    /// Responses allowed per request (negative: unlimited).
    pub max_msgs: i64,
    /// How long after the request the responses are allowed (zero: forever).
    pub expires: Duration,
}

impl Default for ResponsePermission {
    /// nats-server's defaults: one response within two minutes.
    fn default() -> Self {
        Self {
            max_msgs: 1,
            expires: Duration::from_secs(120),
        }
    }
}
