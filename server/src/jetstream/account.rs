//! Per-account JetStream: which accounts have it, and how their streams are named inside.
//!
//! Every account with JetStream has streams of its own; two accounts may both have a stream
//! named `ORDERS`. Inside the server (meta assignments, replica and routing tables) a stream is
//! known by its key: its name in the global account `$G` (so data written before accounts had
//! JetStream keeps its keys), `<account>/<name>` in any other. Stream names cannot contain `/`
//! (10128) and neither can the name of an account with JetStream (the config loader refuses
//! it), so a key names one account and one stream. Raft group ids and storage keys come from
//! the stream's uid, which is unique across accounts.
//!
//! Clients never see a key: requests name the stream, and the account they were published in
//! picks the key ([`stream_key`]); answers, deliveries, ack subjects and advisories use the name
//! ([`stream_name`]) and are published in the stream's account ([`stream_account`]).

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{AccountJetStream, AuthConfig, GLOBAL_ACCOUNT};

/// Separates the account from the stream name in a key.
const SEPARATOR: char = '/';

/// The key of stream `name` in `account`. A name containing `/` (never a stream's) maps to a
/// key no stream has, in any account: a request naming `B/ORDERS` in `$G` does not reach
/// account `B`'s `ORDERS`.
pub fn stream_key(account: &str, name: &str) -> String {
    if account == GLOBAL_ACCOUNT && !name.contains(SEPARATOR) {
        name.to_string()
    } else {
        format!("{account}{SEPARATOR}{name}")
    }
}

/// The account of the stream with `key`.
pub fn stream_account(key: &str) -> &str {
    key.split_once(SEPARATOR).map_or(GLOBAL_ACCOUNT, |(a, _)| a)
}

/// The name clients know the stream with `key` by.
pub fn stream_name(key: &str) -> &str {
    key.split_once(SEPARATOR).map_or(key, |(_, n)| n)
}

/// Whether the stream with `key` belongs to `account`.
pub fn in_account(key: &str, account: &str) -> bool {
    stream_account(key) == account
}

/// The accounts with JetStream and their limits. nats-server's rule (2.15.1, observed): without
/// `accounts { }` the global account `$G` has JetStream (with the server's limits); once
/// accounts are configured only those with `jetstream: enabled` or a block of limits have it,
/// and `$G` does not (its users get 10039), whether or not any account enabled it.
#[derive(Debug, Clone, Default)]
pub struct JsAccounts {
    /// Limits by account name.
    limits: HashMap<Arc<str>, AccountJetStream>,
    /// With accounts configured, the system account: only its requests run the cluster
    /// operations (meta leader stepdown, server removal, drain), with or without JetStream of
    /// its own, as on nats-server. Without accounts, `$G`'s users run them.
    system: Option<Arc<str>>,
}

impl JsAccounts {
    /// The accounts with JetStream under `auth`.
    pub fn from_config(auth: &AuthConfig) -> Self {
        let limits = if auth.accounts.is_empty() {
            HashMap::from([(Arc::from(GLOBAL_ACCOUNT), AccountJetStream::default())])
        } else {
            auth.accounts
                .iter()
                .filter_map(|a| Some((Arc::from(a.name.as_str()), a.jetstream?)))
                .collect()
        };
        let system = (!auth.accounts.is_empty()).then(|| {
            Arc::from(
                auth.system_account
                    .as_deref()
                    .unwrap_or(crate::config::accounts::DEFAULT_SYSTEM_ACCOUNT),
            )
        });
        Self { limits, system }
    }

    /// Whether requests made in `account` may run the cluster operations (see
    /// [`ApiOp::is_cluster_op`](crate::jetstream::op::ApiOp::is_cluster_op)).
    pub fn runs_cluster_ops(&self, account: &str) -> bool {
        match &self.system {
            Some(system) => &**system == account,
            None => account == GLOBAL_ACCOUNT,
        }
    }

    /// The system account when it has no JetStream of its own: it still takes the cluster
    /// operations.
    pub fn system_without_jetstream(&self) -> Option<&Arc<str>> {
        self.system.as_ref().filter(|s| !self.enabled(s))
    }

    /// Whether `account` has JetStream.
    pub fn enabled(&self, account: &str) -> bool {
        self.limits.contains_key(account)
    }

    /// The limits of `account`, if it has JetStream.
    pub fn limits(&self, account: &str) -> Option<&AccountJetStream> {
        self.limits.get(account)
    }

    /// Every account with JetStream, sorted by name.
    pub fn names(&self) -> Vec<Arc<str>> {
        let mut names: Vec<Arc<str>> = self.limits.keys().cloned().collect();
        names.sort();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AccountConfig;

    #[test]
    fn keys_keep_global_names_and_separate_accounts() {
        assert_eq!(stream_key("$G", "ORDERS"), "ORDERS");
        assert_eq!(stream_key("A", "ORDERS"), "A/ORDERS");
        assert_ne!(stream_key("A", "ORDERS"), stream_key("B", "ORDERS"));
        for (account, name) in [("$G", "ORDERS"), ("A", "ORDERS"), ("A.b", "KV_x")] {
            let key = stream_key(account, name);
            assert_eq!((stream_account(&key), stream_name(&key)), (account, name));
            assert!(in_account(&key, account));
        }
        // A name with the separator never reaches another account's stream.
        assert_eq!(stream_key("$G", "B/ORDERS"), "$G/B/ORDERS");
        assert_ne!(stream_key("$G", "B/ORDERS"), stream_key("B", "ORDERS"));
        assert_ne!(stream_key("A", "B/ORDERS"), stream_key("B", "ORDERS"));
    }

    #[test]
    fn global_account_has_jetstream_only_without_accounts() {
        let none = JsAccounts::from_config(&AuthConfig::default());
        assert!(none.enabled("$G"));
        let auth = AuthConfig {
            accounts: vec![
                AccountConfig {
                    name: "A".into(),
                    jetstream: Some(AccountJetStream::default()),
                    ..AccountConfig::default()
                },
                AccountConfig {
                    name: "B".into(),
                    ..AccountConfig::default()
                },
            ],
            ..AuthConfig::default()
        };
        let some = JsAccounts::from_config(&auth);
        assert!(some.enabled("A") && !some.enabled("B") && !some.enabled("$G"));
        assert_eq!(some.names(), vec![Arc::<str>::from("A")]);
    }
}
