//! `accounts { }`, `no_auth_user` and `system_account`: parsing, and the checks nats-server
//! makes at start (imports of what is not exported, unknown accounts, duplicate users), with
//! its messages.
//!
//! What jetraft does not implement inside an account is refused, never ignored: `mappings`,
//! `limits`, account `nkey`, `msg_trace`, service export `latency`, an account's JetStream
//! `cluster_traffic` (where its Raft traffic goes: jetraft's runs on its node links) and keys
//! of an account's `jetstream { }` block that nats-server does not know either.

use std::collections::HashSet;
use std::time::Duration;

use super::error::{ConfigError, Location};
use super::mapping::{permissions, unsupported, user};
use super::syntax::{Entry, Node, Value};
use crate::config::accounts::{DEFAULT_RESPONSE_THRESHOLD, DEFAULT_SYSTEM_ACCOUNT};
use crate::config::{
    AccountConfig, AccountJetStream, AuthConfig, ExportConfig, GLOBAL_ACCOUNT, ImportConfig,
    ResponseType, ShareKind, UserConfig,
};
use crate::router::subject;

/// `accounts { A: { ... }, B: { ... } }` or `accounts: [A, B]`, with every import checked
/// against the exports it names.
pub(super) fn accounts(entry: &Entry) -> Result<Vec<AccountConfig>, ConfigError> {
    let key = entry.key.as_str();
    let node = &entry.node;
    let mut out: Vec<AccountConfig> = Vec::new();
    let mut names = HashSet::new();
    let mut add = |name: &str, at: &Node| -> Result<(), ConfigError> {
        if name == GLOBAL_ACCOUNT {
            return Err(at.invalid(format!("{name:?} is a Reserved Account")));
        }
        if !names.insert(name.to_string()) {
            return Err(at.invalid(format!("Duplicate Account Entry: {name}")));
        }
        Ok(())
    };
    match &node.value {
        Value::Array(items) => {
            for item in items {
                let name = item.string(key)?;
                add(&name, item)?;
                out.push(AccountConfig {
                    name,
                    ..AccountConfig::default()
                });
            }
        }
        Value::Map(entries) => {
            for e in entries {
                if e.used_as_variable {
                    continue;
                }
                add(&e.key, &e.node)?;
                out.push(account(&e.key, &e.node)?);
            }
        }
        _ => return Err(node.expected("a block { ... } or an array of names", key)),
    }
    check_shares(&out, &entry.at)?;
    Ok(out)
}

/// One `NAME: { users, exports, imports, default_permissions }`.
fn account(name: &str, node: &Node) -> Result<AccountConfig, ConfigError> {
    let mut acc = AccountConfig {
        name: name.to_string(),
        ..AccountConfig::default()
    };
    let mut defaults = None;
    let Value::Map(entries) = &node.value else {
        return Err(node.invalid("Expected map entries for accounts"));
    };
    for Entry {
        key,
        node,
        used_as_variable,
        ..
    } in entries
    {
        let key = key.as_str();
        match key.to_ascii_lowercase().as_str() {
            "users" => {
                acc.users = node
                    .items(key)?
                    .iter()
                    .map(|u| user(u, key))
                    .collect::<Result<_, _>>()?;
            }
            "default_permissions" => defaults = Some(permissions(node, key)?),
            "exports" => {
                acc.exports = node
                    .items(key)?
                    .iter()
                    .map(export)
                    .collect::<Result<_, _>>()?;
            }
            "imports" => {
                acc.imports = node
                    .items(key)?
                    .iter()
                    .map(import)
                    .collect::<Result<_, _>>()?;
            }
            "jetstream" => acc.jetstream = account_jetstream(node, key)?,
            "mappings" | "maps" => {
                return Err(unsupported(
                    node,
                    key,
                    "account subject mappings are not implemented",
                ));
            }
            _ if *used_as_variable => {}
            _ => {
                return Err(unsupported(
                    node,
                    key,
                    "refusing to ignore an account setting",
                ));
            }
        }
    }
    if let Some(defaults) = defaults {
        apply_default_permissions(&mut acc.users, &defaults);
    }
    if acc.jetstream.is_some() && name.contains('/') {
        // Streams of an account are stored under `<account>/<stream>` (stream names cannot
        // contain `/`), so the account's own name must not either.
        return Err(node.invalid(format!(
            "account {name:?} with JetStream: the name must not contain '/'"
        )));
    }
    Ok(acc)
}

/// An account's `jetstream`: `enabled`/`true` (no limits), `disabled`/`false`, or a block
/// of limits (nats-server's keys; a size takes nats-server's suffixes, -1 is unlimited).
fn account_jetstream(node: &Node, key: &str) -> Result<Option<AccountJetStream>, ConfigError> {
    match &node.value {
        Value::Bare(s) | Value::Quoted(s) => match s.to_ascii_lowercase().as_str() {
            "enabled" | "enable" | "true" | "yes" | "on" => Ok(Some(AccountJetStream::default())),
            "disabled" | "disable" | "false" | "no" | "off" => Ok(None),
            _ => Err(node.expected("enabled, disabled or a block of limits", key)),
        },
        Value::Map(entries) => {
            let mut js = AccountJetStream::default();
            for Entry { key, node, .. } in entries {
                let key = key.as_str();
                match key.to_ascii_lowercase().as_str() {
                    "max_mem" | "max_memory" | "max_memory_store" | "max_mem_store" | "mem"
                    | "memory" => js.max_memory = node.size(key)?,
                    "max_file" | "max_store" | "max_file_store" | "max_disk" | "store" | "disk" => {
                        js.max_storage = node.size(key)?
                    }
                    "max_streams" | "streams" => js.max_streams = node.integer(key)?,
                    "max_consumers" | "consumers" => js.max_consumers = node.integer(key)?,
                    "max_ack_pending" => js.max_ack_pending = node.integer(key)?,
                    "max_bytes_required" | "max_stream_bytes" | "max_bytes" => {
                        js.max_bytes_required = node.boolean(key)?;
                    }
                    "mem_max_stream_bytes" | "memory_max_stream_bytes" => {
                        js.memory_max_stream_bytes = node.size(key)?;
                    }
                    "disk_max_stream_bytes" | "store_max_stream_bytes" => {
                        js.storage_max_stream_bytes = node.size(key)?;
                    }
                    _ => {
                        return Err(unsupported(
                            node,
                            key,
                            "refusing to ignore an account JetStream limit",
                        ));
                    }
                }
            }
            Ok(Some(js))
        }
        _ => Err(node.expected("enabled, disabled or a block of limits", key)),
    }
}

/// Gives users without permissions of their own the `default_permissions`.
pub(super) fn apply_default_permissions(
    users: &mut [UserConfig],
    defaults: &crate::config::Permissions,
) {
    for u in users.iter_mut().filter(|u| u.permissions.is_none()) {
        u.permissions = Some(defaults.clone());
    }
}

/// What an export or import shares, from its `stream` / `service` key (`lower`); one of the
/// two only (`seen`: one was already given).
fn share_kind(node: &Node, lower: &str, seen: bool) -> Result<ShareKind, ConfigError> {
    if seen {
        return Err(node.invalid(format!(
            "Detected {lower} but already saw a stream or a service"
        )));
    }
    Ok(if lower == "stream" {
        ShareKind::Stream
    } else {
        ShareKind::Service
    })
}

/// `{ stream | service: SUBJECT, accounts: [...], response_type, threshold }`.
fn export(node: &Node) -> Result<ExportConfig, ConfigError> {
    let key = "exports";
    let mut kind_subject: Option<(ShareKind, String)> = None;
    let mut accounts = Vec::new();
    let mut response = None;
    let mut threshold = None;
    for Entry {
        key,
        node,
        used_as_variable,
        ..
    } in node.entries(key)?
    {
        let key = key.as_str();
        let lower = key.to_ascii_lowercase();
        match lower.as_str() {
            "stream" | "service" => {
                let kind = share_kind(node, &lower, kind_subject.is_some())?;
                kind_subject = Some((kind, valid_subject(node, key)?));
            }
            "accounts" => {
                accounts = node
                    .items(key)?
                    .iter()
                    .map(|n| n.string(key))
                    .collect::<Result<_, _>>()?;
            }
            "response" | "response_type" => {
                response = Some(match node.string(key)?.to_ascii_lowercase().as_str() {
                    "single" | "singleton" => ResponseType::Singleton,
                    "stream" => ResponseType::Stream,
                    "chunk" | "chunked" => ResponseType::Chunked,
                    other => {
                        return Err(node.invalid(format!("Unknown response type: {other:?}")));
                    }
                });
            }
            "threshold" | "response_threshold" | "response_max_time" | "response_time" => {
                threshold = Some(node.duration(key)?);
            }
            "latency" | "account_token_position" | "allow_trace" => {
                return Err(unsupported(node, key, "not implemented for exports"));
            }
            _ if *used_as_variable => {}
            _ => {
                return Err(unsupported(
                    node,
                    key,
                    "refusing to ignore an export setting",
                ));
            }
        }
    }
    let Some((kind, subject)) = kind_subject else {
        return Err(node.invalid("an export needs a \"stream\" or a \"service\" subject"));
    };
    if kind == ShareKind::Stream && (response.is_some() || threshold.is_some()) {
        return Err(node.invalid("Detected response directive on non-service"));
    }
    Ok(ExportConfig {
        kind,
        subject,
        accounts,
        response: response.unwrap_or_default(),
        threshold: threshold
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_RESPONSE_THRESHOLD),
    })
}

/// `{ stream | service: { account, subject }, prefix, to }`.
fn import(node: &Node) -> Result<ImportConfig, ConfigError> {
    let key = "imports";
    let mut what: Option<(ShareKind, String, String)> = None;
    let mut prefix = None;
    let mut to = None;
    for Entry {
        key,
        node,
        used_as_variable,
        ..
    } in node.entries(key)?
    {
        let key = key.as_str();
        let lower = key.to_ascii_lowercase();
        match lower.as_str() {
            "stream" | "service" => {
                let kind = share_kind(node, &lower, what.is_some())?;
                let (account, subject) = import_source(node, key)?;
                what = Some((kind, account, subject));
            }
            "prefix" => prefix = Some(valid_subject(node, key)?),
            "to" => to = Some(valid_subject(node, key)?),
            "share" | "allow_trace" => {
                return Err(unsupported(node, key, "not implemented for imports"));
            }
            _ if *used_as_variable => {}
            _ => {
                return Err(unsupported(
                    node,
                    key,
                    "refusing to ignore an import setting",
                ));
            }
        }
    }
    let Some((kind, account, subject)) = what else {
        return Err(node.invalid("an import needs a \"stream\" or a \"service\""));
    };
    if kind == ShareKind::Stream && prefix.is_some() && to.is_some() {
        return Err(node.invalid("Stream import can not have a 'prefix' and a 'to' property"));
    }
    if kind == ShareKind::Service && prefix.is_some() {
        return Err(unsupported(
            node,
            "prefix",
            "a service import maps its subject with \"to\"",
        ));
    }
    Ok(ImportConfig {
        kind,
        account,
        subject,
        prefix,
        to,
    })
}

/// `{ account: NAME, subject: SUBJECT }`.
fn import_source(node: &Node, key: &str) -> Result<(String, String), ConfigError> {
    let mut account = None;
    let mut subject = None;
    for Entry {
        key,
        node,
        used_as_variable,
        ..
    } in node.entries(key)?
    {
        let key = key.as_str();
        match key.to_ascii_lowercase().as_str() {
            "account" => account = Some(node.string(key)?),
            "subject" => subject = Some(valid_subject(node, key)?),
            _ if *used_as_variable => {}
            _ => {
                return Err(unsupported(
                    node,
                    key,
                    "refusing to ignore an import setting",
                ));
            }
        }
    }
    match (account, subject) {
        (Some(a), Some(s)) if !a.is_empty() => Ok((a, s)),
        _ => Err(node.invalid("Expect an account name and a subject")),
    }
}

/// A subject (wildcards allowed).
fn valid_subject(node: &Node, key: &str) -> Result<String, ConfigError> {
    let s = node.string(key)?;
    if !subject::is_valid_subject(&s) {
        return Err(node.invalid(format!("{s:?} in {key:?} is not a valid subject")));
    }
    Ok(s)
}

/// nats-server's start-time checks of exports and imports: every named account exists, and
/// every import is covered by an export open to the importer.
fn check_shares(accounts: &[AccountConfig], at: &Location) -> Result<(), ConfigError> {
    let defined = |name: &str| accounts.iter().any(|a| a.name == name);
    for acc in accounts {
        for e in &acc.exports {
            if let Some(missing) = e.accounts.iter().find(|n| !defined(n)) {
                return Err(ConfigError::invalid(
                    at,
                    format!(
                        "{missing:?} account not defined for {} export",
                        e.kind.as_str()
                    ),
                ));
            }
        }
        let mut service_subjects: Vec<(&str, String)> = Vec::new();
        for i in &acc.imports {
            let kind = i.kind.as_str();
            let Some(exporter) = accounts.iter().find(|a| a.name == i.account) else {
                return Err(ConfigError::invalid(
                    at,
                    format!("{:?} account not defined for {kind} import", i.account),
                ));
            };
            let authorized = exporter.exports.iter().any(|e| {
                e.kind == i.kind
                    && subject::is_subset(&i.subject, &e.subject)
                    && (e.accounts.is_empty() || e.accounts.contains(&acc.name))
            });
            if !authorized {
                return Err(ConfigError::invalid(
                    at,
                    format!(
                        "Error adding {kind} import {:?}: {kind} import not authorized",
                        i.subject
                    ),
                ));
            }
            if i.kind == ShareKind::Service {
                let local = i.local_subject();
                if let Some((prev, _)) = service_subjects
                    .iter()
                    .find(|(a, s)| *a == i.account && *s == local)
                {
                    return Err(ConfigError::invalid(
                        at,
                        format!(
                            "Duplicate service import subject {local:?}, previously used in \
                             import for account {prev:?}, subject {:?}",
                            i.subject
                        ),
                    ));
                }
                service_subjects.push((&i.account, local));
            }
        }
    }
    Ok(())
}

/// Where the cross-checks of the whole auth configuration report: the keys they concern.
#[derive(Debug, Default)]
pub(super) struct AuthKeys<'a> {
    /// The `accounts` entry.
    pub(super) accounts: Option<&'a Entry>,
    /// The `no_auth_user` entry.
    pub(super) no_auth_user: Option<&'a Entry>,
    /// The `system_account` entry.
    pub(super) system_account: Option<&'a Entry>,
}

/// Checks across `authorization { }`, `accounts { }`, `no_auth_user` and `system_account`,
/// once the whole file is read (nats-server's messages).
pub(super) fn check_auth(auth: &AuthConfig, keys: &AuthKeys<'_>) -> Result<(), ConfigError> {
    if let Some(entry) = keys.accounts
        && auth.accounts.iter().any(|a| !a.users.is_empty())
    {
        if auth.user.is_some() {
            return Err(entry
                .node
                .invalid("Can not have a single user/pass and accounts"));
        }
        if auth.token.is_some() {
            return Err(entry.node.invalid("Can not have a token and accounts"));
        }
    }
    let mut seen = HashSet::new();
    for (u, _) in auth.all_users() {
        let (what, name) = match &u.nkey {
            Some(nkey) => ("nkey", nkey.as_str()),
            None => ("user", u.user.as_str()),
        };
        if !seen.insert(name.to_string())
            && let Some(entry) = keys.accounts
        {
            return Err(ConfigError::invalid(
                &entry.at,
                format!("Duplicate {what} {name:?} detected"),
            ));
        }
    }
    if let (Some(entry), Some(name)) = (keys.no_auth_user, &auth.no_auth_user) {
        if !auth.all_users().any(|_| true) {
            return Err(entry.node.invalid(format!(
                "no_auth_user: \"{name}\" present, but users/nkeys are not defined"
            )));
        }
        if !seen.contains(name) {
            return Err(entry.node.invalid(format!(
                "no_auth_user: \"{name}\" not present as user or nkey in authorization block or \
                 account configuration"
            )));
        }
    }
    if let (Some(entry), Some(name)) = (keys.system_account, &auth.system_account)
        && name != DEFAULT_SYSTEM_ACCOUNT
        && !auth.accounts.iter().any(|a| &a.name == name)
    {
        return Err(entry
            .node
            .invalid("error resolving system account: account missing"));
    }
    Ok(())
}

/// `allow_responses: true | false | { max, expires }` (nats-server's defaults: one response
/// within two minutes; zero keeps the default, a negative value means no limit).
pub(super) fn allow_responses(
    node: &Node,
    key: &str,
) -> Result<Option<crate::config::ResponsePermission>, ConfigError> {
    let mut rp = crate::config::ResponsePermission::default();
    if let Value::Map(entries) = &node.value {
        for Entry {
            key,
            node,
            used_as_variable,
            ..
        } in entries
        {
            let key = key.as_str();
            match key.to_ascii_lowercase().as_str() {
                "max" | "max_msgs" | "max_messages" | "max_responses" => {
                    let n = node.integer(key)?;
                    if n != 0 {
                        rp.max_msgs = n;
                    }
                }
                "expires" | "expiration" | "ttl" => {
                    let d = node.duration(key)?;
                    if d != Duration::ZERO {
                        rp.expires = d;
                    }
                }
                _ if *used_as_variable => {}
                _ => {
                    return Err(node.invalid(format!("Unknown field {key:?} parsing permissions")));
                }
            }
        }
        return Ok(Some(rp));
    }
    Ok(node.boolean(key)?.then_some(rp))
}
