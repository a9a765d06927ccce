//! `/connz`: open and closed client connections with paging and sorting.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::MonitorView;
use super::{
    Params, QueryParams, Refused, bad_request, go_duration, json_response, rfc3339, uptime_string,
};
use crate::bus::Client;

/// Default page size, as in nats-server.
const DEFAULT_LIMIT: usize = 1024;

/// One row before paging: the client and, for closed ones, when and why.
struct Row {
    client: Arc<Client>,
    closed: Option<(time::OffsetDateTime, &'static str)>,
}

/// The `sort` values nats-server accepts.
const SORTS: [&str; 14] = [
    "cid",
    "start",
    "subs",
    "pending",
    "msgs_to",
    "msgs_from",
    "bytes_to",
    "bytes_from",
    "last",
    "idle",
    "uptime",
    "stop",
    "reason",
    "rtt",
];

/// `GET /connz?offset&limit&subs&state&cid&sort&auth&acc`. Bad values are refused with 400 in
/// nats-server's order: `auth`, `subs`, `offset`, `limit`, `cid`, `state`, then `sort`.
pub(super) async fn handler(
    State(s): State<Arc<MonitorView>>,
    Query(q): Params,
) -> Result<Response, Refused> {
    let q = QueryParams(q);
    q.bool("auth")?;
    let (subs, subs_detail) = q.subs()?;
    let subs = match (subs, subs_detail) {
        (_, true) => Subs::Detail,
        (true, false) => Subs::List,
        (false, false) => Subs::None,
    };
    let offset = q.offset()?;
    let mut limit = q.limit(DEFAULT_LIMIT)?;
    let cid = q.uint("cid")?;
    let state = match q.get("state").map(str::to_ascii_lowercase).as_deref() {
        None | Some("open") => "open",
        Some("closed") => "closed",
        Some("any" | "all") => "any",
        Some(_) => {
            let raw = q.get("state").unwrap_or_default();
            return Err(bad_request(format!("Error decoding state for {raw}")));
        }
    };
    let sort = q.get("sort").unwrap_or("cid");
    if !SORTS.contains(&sort) {
        return Err(bad_request(format!("invalid sorting option: {sort}")));
    }
    if matches!(sort, "stop" | "reason") && state != "closed" {
        return Err(bad_request(format!(
            "sort by {sort} only valid on closed connections"
        )));
    }
    let cid_filter = (cid > 0).then_some(cid);
    if cid_filter.is_some() {
        limit = 1;
    }

    let mut rows: Vec<Row> = Vec::new();
    if matches!(state, "open" | "any") {
        rows.extend(s.conns.clients.open().iter().map(|c| Row {
            client: c.clone(),
            closed: None,
        }));
    }
    if matches!(state, "closed" | "any") {
        rows.extend(s.conns.clients.closed().iter().map(|c| Row {
            client: c.client.clone(),
            closed: Some((c.stop, c.reason.as_str())),
        }));
    }
    if let Some(cid) = cid_filter {
        rows.retain(|r| r.client.cid == cid);
    }
    // `acc`: one account's connections (the system account's per-account CONNZ too).
    if let Some(acc) = q.get("acc") {
        rows.retain(|r| r.client.account() == acc);
    }
    sort_rows(&mut rows, sort);
    let total = rows.len();
    let page: Vec<Value> = rows
        .iter()
        .skip(offset)
        .take(limit)
        .map(|r| connection(r, subs))
        .collect();
    let body = json!({
        "server_id": s.node.server_id,
        "now": rfc3339(time::OffsetDateTime::now_utc()),
        "num_connections": page.len(),
        "total": total,
        "offset": offset,
        "limit": limit,
        "connections": page,
    });
    Ok(json_response(StatusCode::OK, &body))
}

fn sort_rows(rows: &mut [Row], sort: &str) {
    let stat = |r: &Row, f: fn(&Client) -> u64| f(&r.client);
    match sort {
        "msgs_to" => rows.sort_by_key(|r| {
            std::cmp::Reverse(stat(r, |c| c.stats.out_msgs.load(Ordering::Relaxed)))
        }),
        "msgs_from" => rows.sort_by_key(|r| {
            std::cmp::Reverse(stat(r, |c| c.stats.in_msgs.load(Ordering::Relaxed)))
        }),
        "bytes_to" => rows.sort_by_key(|r| {
            std::cmp::Reverse(stat(r, |c| c.stats.out_bytes.load(Ordering::Relaxed)))
        }),
        "bytes_from" => rows.sort_by_key(|r| {
            std::cmp::Reverse(stat(r, |c| c.stats.in_bytes.load(Ordering::Relaxed)))
        }),
        "subs" => rows.sort_by_key(|r| std::cmp::Reverse(r.client.subs.lock().len())),
        "pending" => rows.sort_by_key(|r| std::cmp::Reverse(r.client.pending_bytes())),
        "start" | "uptime" => rows.sort_by_key(|r| r.client.start),
        "last" => rows.sort_by_key(|r| std::cmp::Reverse(*r.client.last_activity.lock())),
        "idle" => rows.sort_by_key(|r| *r.client.last_activity.lock()),
        "rtt" => rows.sort_by_key(|r| std::cmp::Reverse(*r.client.rtt.lock())),
        "stop" => rows.sort_by_key(|r| std::cmp::Reverse(r.closed.map(|(stop, _)| stop))),
        "reason" => rows.sort_by_key(|r| r.closed.map(|(_, reason)| reason)),
        _ => rows.sort_by_key(|r| r.client.cid),
    }
}

/// What a connection shows of its subscriptions (`subs=true`, `subs=detail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subs {
    /// Only the count.
    None,
    /// `subscriptions_list`: the subjects.
    List,
    /// `subscriptions_list_detail`: subject, queue group, sid, messages, max, cid.
    Detail,
}

fn connection(r: &Row, with_subs: Subs) -> Value {
    let c = &r.client;
    let now = time::OffsetDateTime::now_utc();
    let last = *c.last_activity.lock();
    let meta = c.meta.lock().clone();
    let end = r.closed.map_or(now, |(stop, _)| stop);
    let mut m = Map::new();
    m.insert("cid".into(), json!(c.cid));
    m.insert("kind".into(), json!("Client"));
    m.insert("type".into(), json!("nats"));
    m.insert("ip".into(), json!(c.addr.ip().to_string()));
    m.insert("port".into(), json!(c.addr.port()));
    m.insert("start".into(), json!(rfc3339(c.start)));
    m.insert("last_activity".into(), json!(rfc3339(last)));
    if let Some((stop, reason)) = r.closed {
        m.insert("stop".into(), json!(rfc3339(stop)));
        m.insert("reason".into(), json!(reason));
    }
    let rtt = c
        .rtt
        .lock()
        .map(go_duration)
        .unwrap_or_else(|| "0s".to_string());
    m.insert("rtt".into(), json!(rtt));
    m.insert(
        "uptime".into(),
        json!(uptime_string((end - c.start).unsigned_abs())),
    );
    m.insert(
        "idle".into(),
        json!(uptime_string((end - last).unsigned_abs())),
    );
    m.insert("pending_bytes".into(), json!(c.pending_bytes()));
    m.insert(
        "in_msgs".into(),
        json!(c.stats.in_msgs.load(Ordering::Relaxed)),
    );
    m.insert(
        "out_msgs".into(),
        json!(c.stats.out_msgs.load(Ordering::Relaxed)),
    );
    m.insert(
        "in_bytes".into(),
        json!(c.stats.in_bytes.load(Ordering::Relaxed)),
    );
    m.insert(
        "out_bytes".into(),
        json!(c.stats.out_bytes.load(Ordering::Relaxed)),
    );
    let (count, list, detail) = {
        let subs = c.subs.lock();
        let list: Vec<String> = subs.values().map(|s| s.subject.clone()).collect();
        let detail: Vec<Value> = match with_subs {
            Subs::Detail => subs.values().map(|s| sub_detail(s, c.cid)).collect(),
            _ => Vec::new(),
        };
        (subs.len(), list, detail)
    };
    m.insert("subscriptions".into(), json!(count));
    if !meta.name.is_empty() {
        m.insert("name".into(), json!(meta.name));
    }
    if !meta.lang.is_empty() {
        m.insert("lang".into(), json!(meta.lang));
    }
    if !meta.version.is_empty() {
        m.insert("version".into(), json!(meta.version));
    }
    if !meta.tls_version.is_empty() {
        m.insert("tls_version".into(), json!(meta.tls_version));
        m.insert("tls_cipher_suite".into(), json!(meta.tls_cipher));
    }
    if !meta.user.is_empty() {
        m.insert("authorized_user".into(), json!(meta.user));
    }
    // As nats-server: the account is named when it is not the global one.
    if c.account() != crate::config::GLOBAL_ACCOUNT {
        m.insert("account".into(), json!(c.account()));
    }
    match with_subs {
        Subs::List if !list.is_empty() => {
            m.insert("subscriptions_list".into(), json!(list));
        }
        Subs::Detail if !detail.is_empty() => {
            m.insert("subscriptions_list_detail".into(), json!(detail));
        }
        _ => {}
    }
    Value::Object(m)
}

/// One subscription as nats-server's `SubDetail` under a connection.
fn sub_detail(s: &crate::bus::client::Subscription, cid: u64) -> Value {
    let mut d = Map::new();
    d.insert("subject".into(), json!(s.subject));
    if let Some(q) = &s.queue {
        d.insert("qgroup".into(), json!(q));
    }
    d.insert("sid".into(), json!(String::from_utf8_lossy(&s.sid)));
    d.insert("msgs".into(), json!(s.delivered.load(Ordering::Relaxed)));
    let max = s.max.load(Ordering::Relaxed);
    if max > 0 {
        d.insert("max".into(), json!(max));
    }
    d.insert("cid".into(), json!(cid));
    Value::Object(d)
}
