//! From parsed entries to [`Config`]: which keys jetraft reads, their aliases and their types.
//!
//! Rules:
//! - Keys match case-insensitively. Entries apply in file order, so a later key wins.
//! - Unknown keys at the top level and in `jetstream { }` and `cluster { }` are ignored: a
//!   nats-server config has many settings jetraft does not implement.
//! - Settings that would grant access if ignored are refused instead: operator (JWT) mode,
//!   what `accounts { }` holds that jetraft does not implement (see [`super::accounts`]), and
//!   any key inside `authorization { }`, a user, permissions, `tls { }` or
//!   `cluster { authorization { } }` that jetraft does not implement (nats-server also rejects
//!   unknown keys there). Security settings of the protocols jetraft does not serve
//!   (websocket, leafnodes, gateway, mqtt) and OCSP are refused too: see [`super::security`].
//! - A known key with a value of the wrong type or out of range is an error at the value.

use std::path::PathBuf;
use std::time::Duration;

use super::accounts::{AuthKeys, accounts, allow_responses, apply_default_permissions, check_auth};
use super::addr;
use super::error::ConfigError;
use super::security::{refused_top_level, route_authorization, tls_block};
use super::syntax::{Entry, Node, Value};
use super::value::parse_bool;
use crate::config::{
    AuthConfig, ClusterConfig, Config, JetStreamConfig, Permissions, SubjectPermission, UserConfig,
};

/// Applies top-level entries to `cfg`.
pub(super) fn apply_entries(entries: &[Entry], cfg: &mut Config) -> Result<(), ConfigError> {
    let defaults = Config::default();
    let mut auth_keys = AuthKeys::default();
    for entry in entries {
        let Entry { key, node, .. } = entry;
        let key = key.as_str();
        match key.to_ascii_lowercase().as_str() {
            "listen" => {
                let (host, port) = listen(node, key)?;
                if let Some(host) = host {
                    cfg.host = host;
                }
                cfg.port = addr::client_port(port).map_err(|why| node.invalid(why))?;
            }
            "port" => {
                cfg.port = addr::client_port(node.integer(key)?).map_err(|why| node.invalid(why))?
            }
            "host" | "net" => cfg.host = node.string(key)?,
            "http" => {
                let (host, port) = listen(node, key)?;
                if host.is_some() {
                    cfg.http_host = host;
                }
                cfg.http_port = addr::optional_port(port).map_err(|why| node.invalid(why))?;
            }
            "http_port" | "monitor_port" => {
                cfg.http_port =
                    addr::optional_port(node.integer(key)?).map_err(|why| node.invalid(why))?;
            }
            "https" => {
                let (host, port) = listen(node, key)?;
                if host.is_some() {
                    cfg.http_host = host;
                }
                cfg.https_port = addr::optional_port(port).map_err(|why| node.invalid(why))?;
            }
            "https_port" => {
                cfg.https_port =
                    addr::optional_port(node.integer(key)?).map_err(|why| node.invalid(why))?;
            }
            "tls" => cfg.tls = Some(tls_block(node, key)?),
            "allow_non_tls" => cfg.allow_non_tls = node.boolean(key)?,
            "server_name" => cfg.server_name = Some(name_without_spaces(node, key)?),
            "server_tags" => cfg.server_tags = server_tags(node, key)?,
            "jetstream" => jetstream(node, key, &mut cfg.jetstream)?,
            "store_dir" | "storedir" => cfg.jetstream.store_dir = PathBuf::from(node.string(key)?),
            "cluster" => cluster(node, key, &mut cfg.cluster)?,
            "authorization" => {
                let previous = std::mem::take(&mut cfg.auth);
                cfg.auth = AuthConfig {
                    accounts: previous.accounts,
                    no_auth_user: previous.no_auth_user,
                    system_account: previous.system_account,
                    ..authorization(node, key)?
                };
            }
            "accounts" => {
                cfg.auth.accounts = accounts(entry)?;
                auth_keys.accounts = Some(entry);
            }
            "no_auth_user" => {
                cfg.auth.no_auth_user = Some(node.string(key)?);
                auth_keys.no_auth_user = Some(entry);
            }
            "system_account" | "system" => {
                cfg.auth.system_account = Some(node.string(key)?);
                auth_keys.system_account = Some(entry);
            }
            "max_payload" => cfg.max_payload = bounded_size(node, key, i32::MAX.into())?,
            "max_control_line" => cfg.max_control_line = bounded_size(node, key, i32::MAX.into())?,
            "max_pending" => cfg.max_pending = bounded_size(node, key, i64::MAX)?,
            "max_subscriptions" | "max_subs" => {
                cfg.max_subscriptions = bounded_size(node, key, u32::MAX.into())?
            }
            "max_connections" | "max_conn" => {
                cfg.max_connections = bounded_size(node, key, u32::MAX.into())?
            }
            "ping_interval" => {
                cfg.ping_interval = or_default(node.duration(key)?, defaults.ping_interval)
            }
            "ping_max" => {
                let n: u32 = bounded(node, key, node.integer(key)?, u32::MAX.into())?;
                cfg.ping_max = if n == 0 { defaults.ping_max } else { n };
            }
            "write_deadline" => {
                cfg.write_deadline = or_default(node.duration(key)?, defaults.write_deadline)
            }
            "console" => cfg.console = node.boolean(key)?,
            "debug" => cfg.log.debug = node.boolean(key)?,
            "trace" => cfg.log.trace = node.boolean(key)?,
            "log_file" | "logfile" => cfg.log.file = Some(PathBuf::from(node.string(key)?)),
            "pid_file" | "pidfile" => cfg.pid_file = Some(PathBuf::from(node.string(key)?)),
            "ports_file_dir" => cfg.ports_file_dir = Some(PathBuf::from(node.string(key)?)),
            "lame_duck_duration" => {
                cfg.lame_duck_duration =
                    or_default(node.duration(key)?, defaults.lame_duck_duration)
            }
            "lame_duck_grace_period" => cfg.lame_duck_grace_period = node.duration(key)?,
            "operator" | "operators" | "trusted" | "trusted_keys" | "resolver" => {
                return Err(unsupported(
                    node,
                    key,
                    "operator (JWT) mode is not implemented; use accounts { } instead",
                ));
            }
            "no_system_account" | "no_system" | "no_sys_acc" => {
                return Err(unsupported(
                    node,
                    key,
                    "the system account cannot be turned off",
                ));
            }
            _ => refused_top_level(node, key)?,
        }
    }
    check_auth(&cfg.auth, &auth_keys)
}

/// `server_tags`: a string or an array of strings, lower-cased and trimmed, empty ones and
/// duplicates dropped (as nats-server's tag lists).
fn server_tags(node: &Node, key: &str) -> Result<Vec<String>, ConfigError> {
    let items = match &node.value {
        Value::Array(items) => items.as_slice(),
        _ => std::slice::from_ref(node),
    };
    let mut tags: Vec<String> = Vec::new();
    for item in items {
        let tag = item.string(key)?.trim().to_lowercase();
        if !tag.is_empty() && !tags.contains(&tag) {
            tags.push(tag);
        }
    }
    Ok(tags)
}

/// `listen`-style values: a port (`4222`), `host:port`, `:port` or `[v6]:port`.
/// The host is `None` when not given.
fn listen(node: &Node, key: &str) -> Result<(Option<String>, i64), ConfigError> {
    if let Ok(port) = node.integer(key) {
        return Ok((None, port));
    }
    let (Value::Bare(text) | Value::Quoted(text)) = &node.value else {
        return Err(node.expected("a port or host:port", key));
    };
    let (host, port) =
        addr::split_host_port(text).map_err(|why| node.invalid(format!("{key:?}: {why}")))?;
    let port = addr::port_number(&port).map_err(|why| node.invalid(format!("{key:?}: {why}")))?;
    Ok(((!host.is_empty()).then_some(host), port))
}

/// A size (or count) in `0..=max`, converted to the field's type.
fn bounded_size<T: TryFrom<i64>>(node: &Node, key: &str, max: i64) -> Result<T, ConfigError> {
    bounded(node, key, node.size(key)?, max)
}

/// `n` in `0..=max`, converted to the field's type.
fn bounded<T: TryFrom<i64>>(node: &Node, key: &str, n: i64, max: i64) -> Result<T, ConfigError> {
    if n < 0 {
        return Err(node.invalid(format!("{key:?} can not be negative, got {n}")));
    }
    if n > max {
        return Err(node.invalid(format!("{key:?} value {n} is too big (at most {max})")));
    }
    T::try_from(n).map_err(|_| node.invalid(format!("{key:?} value {n} is out of range")))
}

/// nats-server treats a zero interval as "use the default".
pub(super) fn or_default(d: Duration, default: Duration) -> Duration {
    if d.is_zero() { default } else { d }
}

/// A server or cluster name; nats-server rejects names with spaces.
fn name_without_spaces(node: &Node, key: &str) -> Result<String, ConfigError> {
    let name = node.string(key)?;
    if name.contains(' ') {
        return Err(node.invalid(format!("{key:?} can not contain spaces, got {name:?}")));
    }
    Ok(name)
}

/// A setting jetraft refuses rather than ignores.
pub(super) fn unsupported(node: &Node, key: &str, hint: &str) -> ConfigError {
    node.invalid(format!("{key:?} is not supported by jetraft; {hint}"))
}

/// `jetstream: true|enabled|disabled|...` or `jetstream { ... }`: the switch forms turn
/// JetStream on or off; a block turns it on unless it says `enabled: false` (nats-server's rules).
fn jetstream(node: &Node, key: &str, js: &mut JetStreamConfig) -> Result<(), ConfigError> {
    let switch = |s: &str| match s.to_ascii_lowercase().as_str() {
        "enabled" | "enable" => Some(true),
        "disabled" | "disable" => Some(false),
        _ => None,
    };
    match &node.value {
        Value::Bare(s) if parse_bool(s).is_some() || switch(s).is_some() => {
            js.enabled = parse_bool(s).or(switch(s)).unwrap_or_default();
            Ok(())
        }
        Value::Quoted(s) if switch(s).is_some() => {
            js.enabled = switch(s).unwrap_or_default();
            Ok(())
        }
        Value::Map(entries) => {
            js.enabled = true;
            for Entry { key, node, .. } in entries {
                let key = key.as_str();
                match key.to_ascii_lowercase().as_str() {
                    "store_dir" | "store" | "storedir" => {
                        js.store_dir = PathBuf::from(node.string(key)?)
                    }
                    "max_memory_store" | "max_mem_store" | "max_mem" => {
                        js.max_memory_store = store_limit(node, key)?
                    }
                    "max_file_store" | "max_file" => js.max_file_store = store_limit(node, key)?,
                    "enabled" | "enable" => js.enabled = node.boolean(key)?,
                    "repair_store" => js.repair_store = node.boolean(key)?,
                    "domain" => {
                        let domain = node.string(key)?;
                        js.domain = (!domain.is_empty()).then_some(domain);
                    }
                    _ => {}
                }
            }
            Ok(())
        }
        _ => Err(node.expected("true, \"enabled\" or a block { ... }", key)),
    }
}

/// A JetStream storage limit; negative (nats-server's -1) means "not set".
fn store_limit(node: &Node, key: &str) -> Result<Option<u64>, ConfigError> {
    Ok(u64::try_from(node.size(key)?).ok())
}

/// `cluster { name, listen, host, port, routes }`.
fn cluster(node: &Node, key: &str, cluster: &mut ClusterConfig) -> Result<(), ConfigError> {
    for Entry { key, node, .. } in node.entries(key)? {
        let key = key.as_str();
        match key.to_ascii_lowercase().as_str() {
            "name" => cluster.name = Some(name_without_spaces(node, key)?),
            "listen" => {
                let (host, port) = listen(node, key)?;
                if host.is_some() {
                    cluster.host = host;
                }
                cluster.port = addr::optional_port(port).map_err(|why| node.invalid(why))?;
            }
            "host" | "net" => cluster.host = Some(node.string(key)?),
            "port" => {
                cluster.port =
                    addr::optional_port(node.integer(key)?).map_err(|why| node.invalid(why))?
            }
            "routes" => {
                let mut routes = Vec::new();
                for item in node.items(key)? {
                    let url = item.string(key)?;
                    routes.push(addr::route(&url).map_err(|why| item.invalid(why))?);
                }
                cluster.routes = routes;
            }
            "authorization" => cluster.auth = Some(route_authorization(node, key)?),
            "tls" => cluster.tls = Some(tls_block(node, key)?),
            _ => {}
        }
    }
    Ok(())
}

/// `authorization { user, password, token, timeout, users }`, replacing any earlier block.
fn authorization(node: &Node, key: &str) -> Result<AuthConfig, ConfigError> {
    let mut auth = AuthConfig::default();
    let mut defaults = None;
    for Entry {
        key,
        node,
        used_as_variable,
        ..
    } in node.entries(key)?
    {
        let key = key.as_str();
        match key.to_ascii_lowercase().as_str() {
            "user" | "username" => auth.user = Some(node.string(key)?),
            "pass" | "password" => auth.password = Some(node.string(key)?),
            "token" => auth.token = Some(node.string(key)?),
            "timeout" => {
                auth.timeout = or_default(node.duration(key)?, AuthConfig::default().timeout)
            }
            "users" => {
                auth.users = node
                    .items(key)?
                    .iter()
                    .map(|u| user(u, key))
                    .collect::<Result<_, _>>()?;
            }
            "default_permission" | "default_permissions" | "permissions" => {
                defaults = Some(permissions(node, key)?);
            }
            _ if *used_as_variable => {}
            _ => {
                return Err(unsupported(
                    node,
                    key,
                    "refusing to ignore an authorization setting",
                ));
            }
        }
    }
    if let Some(defaults) = defaults {
        apply_default_permissions(&mut auth.users, &defaults);
    }
    if !auth.users.is_empty() && auth.user.is_some() {
        return Err(
            node.invalid("can not have a single user/pass and a users array in \"authorization\"")
        );
    }
    if !auth.users.is_empty() && auth.token.is_some() {
        return Err(node.invalid("can not have a token and a users array in \"authorization\""));
    }
    Ok(auth)
}

/// One `{ user, password, permissions }` of `users = [ ... ]`.
pub(super) fn user(node: &Node, key: &str) -> Result<UserConfig, ConfigError> {
    let mut user = UserConfig::default();
    let mut named = false;
    for Entry {
        key,
        node,
        used_as_variable,
        ..
    } in node.entries(key)?
    {
        let key = key.as_str();
        match key.to_ascii_lowercase().as_str() {
            "user" | "username" => {
                user.user = node.string(key)?;
                named = true;
            }
            "pass" | "password" => user.password = node.string(key)?,
            "nkey" => {
                let nkey = node.string(key)?;
                if !super::security::is_user_nkey(&nkey) {
                    return Err(node.invalid(format!("not a valid public user nkey: {nkey:?}")));
                }
                user.nkey = Some(nkey);
                named = true;
            }
            "permission" | "permissions" | "authorization" => {
                user.permissions = Some(permissions(node, key)?)
            }
            _ if *used_as_variable => {}
            _ => return Err(unsupported(node, key, "refusing to ignore a user setting")),
        }
    }
    if !named {
        return Err(node.invalid("user entry requires a \"user\" or an \"nkey\""));
    }
    Ok(user)
}

/// `permissions { publish, subscribe }`.
pub(super) fn permissions(node: &Node, key: &str) -> Result<Permissions, ConfigError> {
    let mut perms = Permissions::default();
    for Entry {
        key,
        node,
        used_as_variable,
        ..
    } in node.entries(key)?
    {
        let key = key.as_str();
        match key.to_ascii_lowercase().as_str() {
            "pub" | "publish" | "import" => perms.publish = subject_permission(node, key, false)?,
            "sub" | "subscribe" | "export" => {
                perms.subscribe = subject_permission(node, key, true)?
            }
            "publish_allow_responses" | "allow_responses" => {
                perms.responses = allow_responses(node, key)?;
            }
            _ if *used_as_variable => {}
            _ => return Err(unsupported(node, key, "refusing to ignore a permission")),
        }
    }
    Ok(perms)
}

/// `"a.>"`, `["a", "b"]` (allow only) or `{ allow: ..., deny: ... }`; an empty block is `None`.
fn subject_permission(
    node: &Node,
    key: &str,
    queue: bool,
) -> Result<Option<SubjectPermission>, ConfigError> {
    let Value::Map(entries) = &node.value else {
        return Ok(Some(SubjectPermission {
            allow: subjects(node, key, queue)?,
            deny: Vec::new(),
        }));
    };
    if entries.is_empty() {
        return Ok(None);
    }
    let mut perm = SubjectPermission::default();
    for Entry {
        key,
        node,
        used_as_variable,
        ..
    } in entries
    {
        let key = key.as_str();
        match key.to_ascii_lowercase().as_str() {
            "allow" => perm.allow = subjects(node, key, queue)?,
            "deny" => perm.deny = subjects(node, key, queue)?,
            _ if *used_as_variable => {}
            _ => return Err(node.invalid(format!("unknown key {key:?} in subject permissions; only \"allow\" and \"deny\" are permitted"))),
        }
    }
    Ok(Some(perm))
}

/// A subject or an array of subjects, each checked.
fn subjects(node: &Node, key: &str, queue: bool) -> Result<Vec<String>, ConfigError> {
    let nodes = match &node.value {
        Value::Array(items) => items.as_slice(),
        Value::Map(_) => return Err(node.expected("a subject or an array of subjects", key)),
        _ => std::slice::from_ref(node),
    };
    let mut out = Vec::with_capacity(nodes.len());
    for item in nodes {
        let subject = item.string(key)?;
        if !valid_permission_subject(&subject, queue) {
            return Err(item.invalid(format!("{subject:?} in {key:?} is not a valid subject")));
        }
        out.push(subject);
    }
    Ok(out)
}

/// A subject (wildcards allowed); for subscribe, also `subject queue`.
fn valid_permission_subject(s: &str, queue: bool) -> bool {
    let mut parts = s.split(' ');
    let subject = parts.next().unwrap_or_default();
    match (parts.next(), parts.next()) {
        (None, _) => valid_subject(subject),
        (Some(group), None) if queue => valid_subject(subject) && valid_subject(group),
        _ => false,
    }
}

/// Non-empty tokens separated by `.`; `*` and `>` only as whole tokens, `>` only last.
fn valid_subject(s: &str) -> bool {
    let tokens: Vec<&str> = s.split('.').collect();
    let last = tokens.len() - 1;
    !s.is_empty()
        && tokens.iter().enumerate().all(|(i, t)| {
            !t.is_empty()
                && !t.chars().any(char::is_whitespace)
                && (*t == ">" && i == last || !t.contains('>'))
                && (*t == "*" || !t.contains('*'))
        })
}
