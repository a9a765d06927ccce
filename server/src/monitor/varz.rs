//! `/varz`: server configuration and counters.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::MonitorView;
use super::{Params, json_response, rfc3339, uptime_string};
use crate::node::NATS_VERSION;

/// `GET /varz`.
pub(super) async fn handler(State(s): State<Arc<MonitorView>>, _q: Params) -> Response {
    json_response(StatusCode::OK, &varz(&s))
}

/// Builds the `/varz` document.
pub(crate) fn varz(s: &MonitorView) -> Value {
    // The configuration in force (a reload may have changed limits since start).
    let settings = s.conns.settings.load();
    let c = &*settings.config;
    let traffic = s.bus.stats();
    let st = &s.conns.clients.stats;
    let http_port = s.http_addr.port();
    let subscriptions = s.bus.subscription_count();
    let connections = s.conns.clients.len();
    let mem = resident_memory_bytes();
    let mut v = json!({
        "server_id": s.node.server_id,
        "server_name": s.node.server_name,
        "version": NATS_VERSION,
        "proto": 1,
        "git_commit": "",
        "go": format!("jetraft {}", env!("CARGO_PKG_VERSION")),
        "host": c.host,
        "port": s.node.client_addr.port(),
        "auth_required": settings.auth.required(),
        "max_connections": c.max_connections,
        "ping_interval": c.ping_interval.as_nanos() as u64,
        "ping_max": c.ping_max,
        "http_host": c.http_host.clone().unwrap_or_else(|| c.host.clone()),
        "http_port": http_port,
        "http_base_path": "",
        "https_port": 0,
        "auth_timeout": c.auth.timeout.as_secs_f64(),
        "max_control_line": c.max_control_line,
        "max_payload": c.max_payload,
        "max_pending": c.max_pending,
        "cluster": {"name": c.cluster.name.clone().unwrap_or_default(), "addr": c.cluster.host.clone().unwrap_or_default(), "cluster_port": c.cluster.port.unwrap_or(0)},
        "gateway": {},
        "leaf": {},
        "mqtt": {},
        "websocket": {},
        "jetstream": jetstream(s),
        "tls_timeout": 2.0,
        "write_deadline": c.write_deadline.as_nanos() as u64,
        "start": rfc3339(s.node.start),
        "now": rfc3339(time::OffsetDateTime::now_utc()),
        "uptime": uptime_string(s.node.uptime()),
        "mem": mem,
        "cores": std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        "gomaxprocs": std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        "cpu": cpu_percent(s.node.uptime()),
        "connections": connections,
        "total_connections": st.total_connections.load(Ordering::Relaxed),
        "routes": 0,
        "remotes": 0,
        "leafnodes": 0,
        "in_msgs": traffic.in_msgs.load(Ordering::Relaxed),
        "out_msgs": traffic.out_msgs.load(Ordering::Relaxed),
        "in_bytes": traffic.in_bytes.load(Ordering::Relaxed),
        "out_bytes": traffic.out_bytes.load(Ordering::Relaxed),
        "slow_consumers": st.slow_consumers.load(Ordering::Relaxed),
        "stale_connections": st.stale_connections.load(Ordering::Relaxed),
        "stalled_clients": 0,
        "subscriptions": subscriptions,
        "http_req_stats": {},
        "config_load_time": rfc3339(settings.loaded_at),
        "system_account": c.auth.system_account.as_deref().unwrap_or(crate::config::accounts::DEFAULT_SYSTEM_ACCOUNT),
        "slow_consumer_stats": {"clients": st.slow_consumers.load(Ordering::Relaxed), "routes": 0, "gateways": 0, "leafs": 0},
        "stale_connection_stats": {"clients": st.stale_connections.load(Ordering::Relaxed), "routes": 0, "gateways": 0, "leafs": 0},
    });
    // `server_tags`, left out when there are none (as nats-server's `omitempty`).
    if !c.server_tags.is_empty() {
        v["tags"] = json!(c.server_tags);
    }
    // The cluster's client URLs, as INFO advertises them (nats-server's `omitempty`).
    let urls = s.conns.clients.connect_urls();
    if !urls.is_empty() {
        v["connect_urls"] = json!(urls);
    }
    v
}

/// Average CPU use of the process since start, in percent of one core (from `/proc/self/stat`;
/// 0 where unavailable).
/// The `jetstream` section: config, this node's usage and API counters, the meta group.
fn jetstream(s: &MonitorView) -> Value {
    let Some(js) = s.jetstream.get() else {
        // nats-server shows an empty section when JetStream is off.
        if !s.config.jetstream.enabled {
            return json!({});
        }
        return json!({"config": super::jsz::config(s), "stats": {}, "limits": {}});
    };
    let st = js.jsz_stats();
    let mut v = json!({
        "config": super::jsz::config(s),
        "stats": {
            "memory": st.memory, "storage": st.storage, "reserved_memory": 0, "reserved_storage": 0,
            "accounts": 1, "ha_assets": st.ha_assets,
            "api": {"level": st.api_level, "total": st.api_total, "errors": st.api_errors},
        },
        "limits": {},
    });
    if let Some(meta) = js.meta_cluster() {
        v["meta_cluster"] = meta;
    }
    v
}

fn cpu_percent(uptime: std::time::Duration) -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // `rest` starts at field 3, so utime (14) is index 11 and stime (15) index 12.
    let cpu_secs = (ticks(11) + ticks(12)) / 100.0;
    let secs = uptime.as_secs_f64();
    if secs <= 0.0 {
        0.0
    } else {
        (cpu_secs / secs * 1000.0).round() / 10.0
    }
}

/// Resident set size from `/proc/self/statm` (0 where unavailable).
fn resident_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}
