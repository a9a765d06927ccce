//! What a system-account reply says about the node: the `server` envelope every reply carries
//! (nats-server's `ServerInfo`), the `STATSZ` document (`ServerStats`) and `IDZ`.

use serde_json::{Value, json};

use crate::monitor::MonitorView;

/// The `server` object of a reply (numbered by the node's system message counter).
pub(super) fn server_info(view: &MonitorView) -> Value {
    crate::trace::server_info(
        &view.node,
        &view.config.server_tags,
        view.jetstream.get().is_some(),
    )
}

/// `IDZ`: the node's name, host and id (no envelope, as nats-server answers it).
pub(super) fn idz(view: &MonitorView) -> Value {
    json!({"name": view.node.server_name, "host": view.node.host, "id": view.node.server_id})
}

/// `STATSZ` (and the plain `PING`): the node's statistics in nats-server's `ServerStats`
/// shape, read from the same counters as `/varz`.
pub(super) fn statsz(view: &MonitorView) -> Value {
    let varz = crate::monitor::varz_document(view);
    let n = |k: &str| varz.get(k).cloned().unwrap_or(Value::from(0));
    let sent = json!({"msgs": n("out_msgs"), "bytes": n("out_bytes")});
    let received = json!({"msgs": n("in_msgs"), "bytes": n("in_bytes")});
    let mut accounts: Vec<String> = view
        .conns
        .clients
        .open()
        .iter()
        .map(|c| c.account().to_string())
        .collect();
    accounts.sort_unstable();
    accounts.dedup();
    let mut stats = json!({
        "start": n("start"),
        "mem": n("mem"),
        "cores": n("cores"),
        "cpu": n("cpu"),
        "connections": n("connections"),
        "total_connections": n("total_connections"),
        "active_accounts": accounts.len(),
        "subscriptions": n("subscriptions"),
        "sent": sent,
        "sent_to_clients": sent,
        "received": received,
        "received_from_clients": received,
        "slow_consumers": n("slow_consumers"),
    });
    let slow = n("slow_consumers");
    if slow != 0 {
        stats["slow_consumer_stats"] = varz["slow_consumer_stats"].clone();
    }
    let stale = n("stale_connections");
    if stale != 0 {
        stats["stale_connections"] = stale;
        stats["stale_connection_stats"] = varz["stale_connection_stats"].clone();
    }
    let mut active_servers = 1;
    if let Some(js) = varz.get("jetstream").filter(|j| j.get("config").is_some()) {
        let mut js = js.clone();
        if let Some(meta) = js.get("meta_cluster") {
            active_servers += meta
                .get("replicas")
                .and_then(Value::as_array)
                .map_or(0, |r| {
                    r.iter()
                        .filter(|p| p.get("offline") != Some(&Value::Bool(true)))
                        .count()
                });
        }
        if let Value::Object(map) = &mut js {
            // `statsz` shows the meta group without its members, as `meta`.
            if let Some(Value::Object(mut meta)) = map.remove("meta_cluster") {
                meta.remove("replicas");
                map.insert("meta".into(), Value::Object(meta));
            }
            if let Some(Value::Object(config)) = map.get_mut("config") {
                config.remove("store_dir");
            }
        }
        stats["active_servers"] = active_servers.into();
        stats["jetstream"] = js;
    } else {
        stats["active_servers"] = active_servers.into();
    }
    stats["gomaxprocs"] = n("gomaxprocs");
    json!({"statsz": stats})
}
