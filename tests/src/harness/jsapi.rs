//! `$JS.API` request helpers for cluster tests: requests retried through elections, waiting
//! for a stream leader, publishing until acknowledged.

use std::time::Duration;

use async_nats::HeaderMap;
use bytes::Bytes;
use serde_json::Value;

use super::{Cluster, wait_for};

/// Bound on a leader election after a kill or stepdown.
pub const ELECTION: Duration = Duration::from_secs(30);

/// One raw API request; `None` when it timed out or had no responders.
pub async fn try_api(nc: &async_nats::Client, subject: &str, body: &Value) -> Option<Value> {
    let payload = if body.is_null() {
        Bytes::new()
    } else {
        Bytes::from(body.to_string())
    };
    let req = nc.request(subject.to_string(), payload);
    let msg = tokio::time::timeout(Duration::from_secs(3), req)
        .await
        .ok()?
        .ok()?;
    serde_json::from_slice(&msg.payload).ok()
}

/// An API request retried (bounded by [`ELECTION`]) until it is answered. A 10008 answer
/// ("temporarily unavailable": the meta group or a stream is still settling after formation or
/// a leader change) counts as not answered yet, as clients retry it.
pub async fn api(nc: &async_nats::Client, subject: &str, body: Value) -> Value {
    wait_for(subject, ELECTION, || {
        let nc = nc.clone();
        let body = body.clone();
        async move {
            let r = try_api(&nc, subject, &body).await?;
            (r["error"]["err_code"] != 10008).then_some(r)
        }
    })
    .await
}

/// Waits until `STREAM.INFO` names a leader; returns the info.
pub async fn info_with_leader(nc: &async_nats::Client, stream: &str) -> Value {
    let subject = format!("$JS.API.STREAM.INFO.{stream}");
    wait_for("stream leader", ELECTION, || {
        let nc = nc.clone();
        let subject = subject.clone();
        async move {
            let info = try_api(&nc, &subject, &Value::Null).await?;
            let leader = info["cluster"]["leader"].as_str()?;
            (!leader.is_empty()).then_some(info)
        }
    })
    .await
}

/// Publishes with `Nats-Msg-Id: id` until acknowledged (retrying through elections).
pub async fn publish_acked(nc: &async_nats::Client, subject: &str, id: &str, body: &str) -> Value {
    wait_for("publish ack", ELECTION, || {
        let nc = nc.clone();
        let subject = subject.to_string();
        let body = Bytes::from(body.to_string());
        let mut h = HeaderMap::new();
        h.insert("Nats-Msg-Id", id);
        async move {
            let req = nc.request_with_headers(subject, h, body);
            let msg = tokio::time::timeout(Duration::from_secs(2), req)
                .await
                .ok()?
                .ok()?;
            let ack: Value = serde_json::from_slice(&msg.payload).ok()?;
            ack["seq"].as_u64().is_some().then_some(ack)
        }
    })
    .await
}

/// The index of the node called `name`.
pub fn index_of(cluster: &Cluster, name: &str) -> usize {
    (0..cluster.len())
        .find(|&i| cluster.node(i).name() == name)
        .unwrap_or_else(|| panic!("no node named {name}"))
}

/// The index of the stream's current leader.
pub async fn leader_index(cluster: &Cluster, nc: &async_nats::Client, stream: &str) -> usize {
    let info = info_with_leader(nc, stream).await;
    let leader = info["cluster"]["leader"].as_str().unwrap_or_default();
    index_of(cluster, leader)
}

/// A `$JS.API` base64 field (MSG.GET `data`/`hdrs`) decoded, as text (lossy).
pub fn base64_text(field: &str) -> String {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(field)
        .unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}
