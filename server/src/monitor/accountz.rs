//! `/accountz` (and `?acc=`) and `/accstatz`: the accounts of the node, one account's
//! details and the accounts' traffic, in nats-server's shapes (its `monitor.go`:
//! `Accountz`, `AccountInfo`, `AccountStatz`).
//!
//! Differences: accounts are listed in a fixed order (the system account, `$G`, then the
//! configured ones; nats-server's order is its map's); an account's details show the imports
//! and exports of the configuration only (nats-server adds the system account's service
//! imports it wires into every account, e.g. `$SYS.REQ.ACCOUNT.<acc>.CONNZ`) and its
//! `subscriptions` count the account's client subscriptions and the cluster peers' interest
//! (nats-server's also count its internal ones). `/accstatz` counts the messages the
//! account's clients published (`received`) and the messages delivered to them (`sent`);
//! nats-server counts `sent` per message routed in the account. Gateways, routes and leaf
//! nodes are always 0 (jetraft has none of them).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::{MonitorView, Params, QueryParams, Refused, bad_request, json_response, now, rfc3339};
use crate::config::accounts::{ExportConfig, ImportConfig, ResponseType, ShareKind};
use crate::config::{AccountConfig, AuthConfig, GLOBAL_ACCOUNT};

/// The accounts of the node: the system account, `$G`, then the configured ones.
pub(super) fn account_names(auth: &AuthConfig) -> (String, Vec<String>) {
    let system = auth
        .system_account
        .clone()
        .unwrap_or_else(|| crate::config::accounts::DEFAULT_SYSTEM_ACCOUNT.to_string());
    let mut names = vec![system.clone(), GLOBAL_ACCOUNT.to_string()];
    for a in &auth.accounts {
        if !names.contains(&a.name) {
            names.push(a.name.clone());
        }
    }
    (system, names)
}

/// `GET /accountz[?acc=NAME]`: the account names, or one account's details (400 `Account
/// <name> does not exist` for an unknown one).
pub(super) async fn accountz(
    State(s): State<Arc<MonitorView>>,
    Query(q): Params,
) -> Result<Response, Refused> {
    let (system, names) = account_names(&s.conns.settings.load().config.auth);
    let mut body = json!({"server_id": s.node.server_id, "now": now(), "system_account": system});
    match QueryParams(q).get("acc").filter(|a| !a.is_empty()) {
        None => body["accounts"] = json!(names),
        Some(acc) => body["account_detail"] = account_info(&s, acc).map_err(bad_request)?,
    }
    Ok(json_response(StatusCode::OK, &body))
}

/// nats-server's `AccountInfo` of account `name` (also `$SYS.REQ.ACCOUNT.<name>.INFO`), or
/// its error for an unknown account.
pub(crate) fn account_info(s: &MonitorView, name: &str) -> Result<Value, String> {
    let settings = s.conns.settings.load();
    let auth = &settings.config.auth;
    let (system, names) = account_names(auth);
    if !names.iter().any(|n| n == name) {
        return Err(format!("Account {name} does not exist"));
    }
    let config = auth.accounts.iter().find(|a| a.name == name);
    Ok(detail(s, name, name == system, config))
}

/// nats-server's `AccountInfo` of `name` (`config`: its `accounts { }` entry, if any).
fn detail(s: &MonitorView, name: &str, system: bool, config: Option<&AccountConfig>) -> Value {
    let ns = s.bus.namespace(name);
    let st = ns.sublist.stats();
    let jetstream = s
        .jetstream
        .get()
        .is_some_and(|js| js.accounts().enabled(name));
    let clients = s
        .conns
        .clients
        .open()
        .iter()
        .filter(|c| c.account() == name)
        .count();
    let mut d = Map::new();
    d.insert("account_name".into(), json!(name));
    d.insert("update_time".into(), json!(rfc3339(s.node.start)));
    if system {
        d.insert("is_system".into(), json!(true));
    }
    d.insert("expired".into(), json!(false));
    d.insert("complete".into(), json!(true));
    d.insert("jetstream_enabled".into(), json!(jetstream));
    d.insert("leafnode_connections".into(), json!(0));
    d.insert("client_connections".into(), json!(clients));
    d.insert("subscriptions".into(), json!(st.num_subscriptions));
    if let Some(cfg) = config {
        // Go leaves empty lists out (`omitempty`).
        if !cfg.exports.is_empty() {
            // Services first, then streams, as nats-server lists them.
            let (services, streams): (Vec<_>, Vec<_>) = cfg
                .exports
                .iter()
                .partition(|e| e.kind == ShareKind::Service);
            let exports: Vec<Value> = services.into_iter().chain(streams).map(export).collect();
            d.insert("exports".into(), exports.into());
        }
        if !cfg.imports.is_empty() {
            // Stream imports first, then services, as nats-server lists them.
            let (streams, services): (Vec<_>, Vec<_>) = cfg
                .imports
                .iter()
                .partition(|i| i.kind == ShareKind::Stream);
            let imports: Vec<Value> = streams.into_iter().chain(services).map(import).collect();
            d.insert("imports".into(), imports.into());
        }
    }
    d.insert("name_tag".into(), json!(name));
    d.insert(
        "sublist_stats".into(),
        Value::Object(super::subsz::stats_json(&st)),
    );
    Value::Object(d)
}

/// An export as nats-server's `ExtExport` shows it.
fn export(e: &ExportConfig) -> Value {
    let mut m = Map::new();
    m.insert("subject".into(), json!(e.subject));
    m.insert("type".into(), json!(e.kind.as_str()));
    if e.kind == ShareKind::Service {
        let response = match e.response {
            ResponseType::Singleton => "Singleton",
            ResponseType::Stream => "Streamed",
            ResponseType::Chunked => "Chunked",
        };
        m.insert("response_type".into(), json!(response));
    }
    if !e.accounts.is_empty() {
        m.insert("approved_accounts".into(), json!(e.accounts));
    }
    Value::Object(m)
}

/// An import as nats-server's `ExtImport` shows it: a stream's `subject` is the exporter's and
/// `local_subject` the importer's; a service's `to` and `local_subject` are the subject the
/// importer publishes on.
fn import(i: &ImportConfig) -> Value {
    let mut m = Map::new();
    m.insert("subject".into(), json!(i.subject));
    m.insert("account".into(), json!(i.account));
    if i.kind == ShareKind::Service {
        m.insert("to".into(), json!(i.local_subject()));
    }
    m.insert("local_subject".into(), json!(i.local_subject()));
    m.insert("type".into(), json!(i.kind.as_str()));
    m.insert("invalid".into(), json!(false));
    m.insert("share".into(), json!(false));
    m.insert("tracking".into(), json!(false));
    Value::Object(m)
}

/// `GET /accstatz[?unused=true]`: each account with a client connection here (every account
/// with `unused`), its connections, subscriptions and traffic.
pub(super) async fn accstatz(
    State(s): State<Arc<MonitorView>>,
    Query(q): Params,
) -> Result<Response, Refused> {
    let unused = QueryParams(q).bool("unused")?;
    Ok(json_response(
        StatusCode::OK,
        &account_statz(&s, None, unused),
    ))
}

/// nats-server's `AccountStatz` (also the system account's STATZ requests): of the accounts
/// in `only` that exist (every account when `None`), those with a client connection here,
/// or all of them with `unused`.
pub(crate) fn account_statz(s: &MonitorView, only: Option<&[String]>, unused: bool) -> Value {
    let (_, names) = account_names(&s.conns.settings.load().config.auth);
    let names: Vec<&String> = match only {
        Some(only) => only.iter().filter(|a| names.contains(a)).collect(),
        None => names.iter().collect(),
    };
    let open = s.conns.clients.open();
    let stats: Vec<Value> = names
        .into_iter()
        .filter_map(|name| {
            let conns = open.iter().filter(|c| c.account() == name).count();
            (unused || conns > 0).then(|| statz(s, name, conns))
        })
        .collect();
    json!({"server_id": s.node.server_id, "now": now(), "account_statz": stats})
}

/// nats-server's `AccountStat` of `name` with `conns` client connections.
fn statz(s: &MonitorView, name: &str, conns: usize) -> Value {
    let ns = s.bus.namespace(name);
    let t = &ns.traffic;
    let n = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let none = json!({"msgs": 0, "bytes": 0});
    let data = |msgs: u64, bytes: u64| json!({"msgs": msgs, "bytes": bytes, "gateways": none, "routes": none, "leafs": none});
    json!({
        "acc": name,
        "name": name,
        "conns": conns,
        "leafnodes": 0,
        "total_conns": conns,
        "num_subscriptions": ns.sublist.count(),
        "sent": data(n(&t.stats.out_msgs), n(&t.stats.out_bytes)),
        "received": data(n(&t.stats.in_msgs), n(&t.stats.in_bytes)),
        "slow_consumers": n(&t.slow_consumers),
    })
}
