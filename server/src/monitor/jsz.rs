//! `/jsz`: JetStream usage of this node, as nats-server reports it
//! (spec/nats-protocol-and-jetstream.md §2.5).
//!
//! Query: `accounts`, `streams`, `consumers`, `config` (details, each implying the ones before
//! it as on nats-server), `acc` (one account's details) and `leader-only` (400 `filtered response: not leader` from a node that
//! does not lead the meta group, so an exporter asking every node counts the cluster once).
//! Without JetStream the body says `"disabled": true`.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::MonitorView;
use super::{Params, QueryParams, Refused, json_response, rfc3339};
use crate::jetstream::runtime::{JetStream, JszDetail, JszStats};

/// Bad values are refused with a plain-text 400 in nats-server's order of decoding.
pub(super) async fn handler(
    State(s): State<Arc<MonitorView>>,
    Query(q): Params,
) -> Result<Response, Refused> {
    let q = QueryParams(q);
    let accounts = q.bool("accounts")?;
    let streams = q.bool("streams")?;
    let consumers = q.bool("consumers")?;
    q.bool("direct-consumers")?;
    let with_config = q.bool("config")?;
    q.offset()?;
    q.limit(1024)?;
    let leader_only = q.bool("leader-only")?;
    q.bool("raft")?;
    q.bool("stream-leader-only")?;
    let want = Detail {
        accounts,
        streams,
        consumers,
        config: with_config,
        account: q.get("acc").map(str::to_string),
    };
    Ok(respond(&s, want, leader_only).await)
}

/// The levels of detail asked for.
#[derive(Debug, Clone)]
struct Detail {
    accounts: bool,
    streams: bool,
    consumers: bool,
    config: bool,
    /// `acc`: only this account's details, when it has JetStream (else as without it).
    account: Option<String>,
}

/// The `/jsz` body for the decoded parameters.
async fn respond(s: &MonitorView, want: Detail, leader_only: bool) -> Response {
    let Some(js) = s.jetstream.get() else {
        return json_response(StatusCode::OK, &disabled(s));
    };
    if leader_only && !js.is_meta_leader() {
        let mut resp = (StatusCode::BAD_REQUEST, "filtered response: not leader").into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        return resp;
    }
    let stats = js.jsz_stats();
    let accounts_count = u32::try_from(js.accounts().names().len()).unwrap_or(u32::MAX);
    let mut body = head(s, &stats, accounts_count);
    body["config"] = config(s);
    body["limits"] = json!({});
    body["streams"] = stats.streams.into();
    body["consumers"] = stats.consumers.into();
    body["messages"] = stats.messages.into();
    body["bytes"] = stats.bytes.into();
    if let Some(meta) = js.meta_cluster() {
        body["meta_cluster"] = meta;
    }
    // Each level of detail includes the ones before it.
    let Detail {
        accounts,
        streams,
        consumers,
        config,
        account,
    } = want;
    let streams = streams || consumers || config;
    let names = js.accounts().names();
    // A targeted account with JetStream is detailed alone, as on nats-server.
    let names = match account {
        Some(acc) if names.iter().any(|n| **n == *acc) => vec![std::sync::Arc::from(acc)],
        // Stream details imply every account only when no account is named.
        Some(_) if accounts => names,
        None if accounts || streams => names,
        _ => Vec::new(),
    };
    if !names.is_empty() {
        let detail = streams.then_some(JszDetail { config, consumers });
        let mut details = Vec::new();
        for name in names {
            details.push(account_detail(js, &name, detail).await);
        }
        body["account_details"] = details.into();
    }
    body["total"] = 1.into();
    json_response(StatusCode::OK, &body)
}

/// One account's entry (nats-server's `AccountDetail`): the usage of its replicas on this node,
/// its API counters and, with `streams`, its streams in that detail.
async fn account_detail(js: &JetStream, name: &str, streams: Option<JszDetail>) -> Value {
    let usage = js.account_usage(name);
    let api = js.api_counts(name);
    let mut account = json!({
        "name": name,
        "id": name,
        "memory": usage.memory,
        "storage": usage.storage,
        "reserved_memory": u64::MAX,
        "reserved_storage": u64::MAX,
        "accounts": 0,
        "ha_assets": 0,
        "api": {"level": 0, "total": api.total, "errors": api.errors},
    });
    if let Some(detail) = streams {
        account["stream_detail"] = js.stream_details(detail, name).await.into();
    }
    account
}

/// `$SYS.REQ.ACCOUNT.<account>.JSZ` (nats-server's `JszAccount`): the account's detail with
/// the streams, consumers and configs `opts` ask for, or nats-server's error.
pub(crate) async fn jsz_account(
    s: &MonitorView,
    account: &str,
    opts: &Value,
) -> Result<Value, String> {
    let on = |k: &str| opts.get(k).and_then(Value::as_bool).unwrap_or(false);
    let js = s
        .jetstream
        .get()
        .filter(|js| js.accounts().enabled(account));
    let Some(js) = js else {
        let (_, names) = super::accountz::account_names(&s.conns.settings.load().config.auth);
        return Err(if names.iter().any(|n| n == account) {
            format!("account {account:?} not jetstream enabled")
        } else {
            format!("account {account:?} not found")
        });
    };
    let (consumers, config) = (on("consumer"), on("config"));
    let detail = (on("streams") || consumers || config).then_some(JszDetail { config, consumers });
    Ok(account_detail(js, account, detail).await)
}

/// The usage and identity fields every body starts with (`accounts`: 1 with JetStream, else 0).
fn head(s: &MonitorView, st: &JszStats, accounts: u32) -> Value {
    json!({
        "memory": st.memory,
        "storage": st.storage,
        "reserved_memory": 0,
        "reserved_storage": 0,
        "accounts": accounts,
        "ha_assets": st.ha_assets,
        "api": {"level": st.api_level, "total": st.api_total, "errors": st.api_errors},
        "server_id": s.node.server_id,
        "now": rfc3339(time::OffsetDateTime::now_utc()),
    })
}

/// The JetStream config section (also `/varz`'s `jetstream.config`). jetraft fsyncs before every
/// acknowledgement: `sync_always`.
pub(super) fn config(s: &MonitorView) -> Value {
    let c = &s.config.jetstream;
    json!({
        "max_memory": c.max_memory_store.unwrap_or(0),
        "max_storage": c.max_file_store.unwrap_or(0),
        "store_dir": c.store_dir.display().to_string(),
        "sync_interval": 0,
        "sync_always": true,
        "strict": true,
    })
}

/// The body of a server without JetStream.
fn disabled(s: &MonitorView) -> Value {
    let mut body = head(s, &JszStats::default(), 0);
    body["disabled"] = true.into();
    body["config"] = json!({"max_memory": 0, "max_storage": 0});
    for key in ["streams", "consumers", "messages", "bytes", "total"] {
        body[key] = 0.into();
    }
    body
}
