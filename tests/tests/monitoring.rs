//! Monitoring HTTP endpoints (spec nats-protocol-and-jetstream.md §2): `/healthz`, `/varz`,
//! `/connz`, `/subsz`, and jetraft's Prometheus `/metrics`.
//!
//! The reference server has internal (system account, JetStream) connections and
//! subscriptions, so counts are compared relative to a baseline or with `>=`.

use std::time::Duration;

use async_nats::{Client, ConnectOptions};
use bytes::Bytes;
use futures_util::StreamExt as _;
use jetraft_tests::harness::start_server;
use jetraft_tests::harness::{
    ServerKind, ServerProcess, assert_clean_log, round_trip, server_kind, wait_for, within,
};
use serde_json::Value;

const OP: Duration = Duration::from_secs(5);

async fn connect_named(srv: &ServerProcess, name: &str) -> Client {
    within(
        OP,
        "connect",
        Box::pin(
            ConnectOptions::new()
                .name(name)
                .connection_timeout(OP)
                .connect(srv.client_url()),
        ),
    )
    .await
    .expect("connect")
}

async fn json(srv: &ServerProcess, path: &str) -> Value {
    srv.monitor_json(path)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e:#}"))
}

fn u64_field(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not an unsigned integer in {v}"))
}

#[tokio::test]
async fn healthz_reports_ok() {
    let srv = start_server().await;
    for path in [
        "/healthz",
        "/healthz?js-enabled-only=true",
        "/healthz?js-server-only=true",
    ] {
        let resp = srv.http_get(path).await.unwrap();
        assert_eq!(resp.status, 200, "{path}: {}", resp.body);
        assert_eq!(
            resp.header("Content-Type"),
            Some("application/json"),
            "{path}"
        );
        // Byte-exact: shell health checks grep for it. nats-server sends it compact, unlike
        // the other endpoints, which are pretty-printed.
        assert_eq!(resp.body, r#"{"status":"ok"}"#, "{path}");
    }
    assert_clean_log(&srv);
}

#[tokio::test]
async fn healthz_for_stream_without_account_is_a_400_error() {
    let srv = start_server().await;
    let resp = srv.http_get("/healthz?stream=S").await.unwrap();
    assert_eq!(resp.status, 400, "{}", resp.body);
    assert_eq!(
        resp.json().unwrap(),
        serde_json::json!({"status": "error", "error": "\"account\" must not be empty when checking stream health"})
    );
    assert_clean_log(&srv);
}

#[tokio::test]
async fn varz_reports_identity_limits_and_traffic_counters() {
    let srv = start_server().await;
    let client = connect_named(&srv, "varz-probe").await;
    let base = json(&srv, "/varz").await;
    let mut sub = client.subscribe("varz.x").await.unwrap();
    round_trip(&client).await;
    for _ in 0..3 {
        client
            .publish("varz.x", Bytes::from_static(b"0123456789"))
            .await
            .unwrap();
    }
    for _ in 0..3 {
        within(OP, "message", sub.next()).await.unwrap();
    }
    // nats-server folds per-connection counters into /varz lazily: poll until they show.
    let v = wait_for("varz counters to include the traffic", OP, || async {
        let v = srv.monitor_json("/varz").await.ok()?;
        let grew = |key: &str, by: u64| {
            v[key].as_u64().unwrap_or(0) >= base[key].as_u64().unwrap_or(u64::MAX - by) + by
        };
        (grew("in_msgs", 3) && grew("out_msgs", 3) && grew("in_bytes", 30) && grew("out_bytes", 30))
            .then_some(v)
    })
    .await;

    assert_eq!(
        v["server_id"].as_str(),
        Some(client.server_info().server_id.as_str())
    );
    assert_eq!(v["server_name"], srv.name());
    assert!(v["version"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(v["port"], srv.port());
    assert_eq!(v["http_port"], srv.http_port());
    assert_eq!(v["max_payload"], 1_048_576);
    assert!(v["max_connections"].as_u64().is_some());
    assert!(
        v["ping_interval"].as_u64().is_some(),
        "ping_interval is integer ns"
    );
    for key in ["now", "start", "uptime"] {
        assert!(
            v[key].as_str().is_some_and(|s| !s.is_empty()),
            "{key} must be a string: {v}"
        );
    }
    assert!(
        v["now"].as_str().unwrap().ends_with('Z'),
        "now is RFC 3339 UTC"
    );
    assert!(u64_field(&v, "connections") >= 1);
    assert!(u64_field(&v, "total_connections") >= 1);
    assert!(u64_field(&v, "subscriptions") > u64_field(&base, "subscriptions"));
    assert_eq!(u64_field(&v, "slow_consumers"), 0);
    assert_clean_log(&srv);
}

#[tokio::test]
async fn connz_lists_client_connections_with_details() {
    let srv = start_server().await;
    let client = connect_named(&srv, "connz-probe").await;
    let _a = client.subscribe("connz.a").await.unwrap();
    let _b = client.subscribe("connz.b").await.unwrap();
    client
        .publish("connz.none", Bytes::from_static(b"1"))
        .await
        .unwrap();
    client
        .publish("connz.none", Bytes::from_static(b"2"))
        .await
        .unwrap();
    within(OP, "flush", client.flush()).await.unwrap();

    // Poll: the publishes are processed asynchronously (async-nats flush is not a round trip).
    let (v, c) = wait_for("connz-probe listed with its traffic", OP, || async {
        let v = srv.monitor_json("/connz").await.ok()?;
        let c = v["connections"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == "connz-probe")?
            .clone();
        (c["in_msgs"] == 2 && c["subscriptions"] == 2).then_some((v, c))
    })
    .await;
    assert_eq!(
        v["server_id"].as_str(),
        Some(client.server_info().server_id.as_str())
    );
    assert!(v["now"].as_str().is_some());
    assert!(u64_field(&v, "num_connections") >= 1);
    assert_eq!(c["cid"].as_u64(), Some(client.server_info().client_id));
    assert_eq!(c["ip"], "127.0.0.1");
    assert!(c["port"].as_u64().is_some_and(|p| p > 0));
    assert_eq!(c["lang"], "rust");
    assert_eq!(c["version"], "0.51.0");
    assert_eq!(c["subscriptions"], 2);
    assert_eq!(c["in_msgs"], 2);
    assert_eq!(c["in_bytes"], 2);
    for key in ["start", "last_activity", "uptime", "idle"] {
        assert!(c[key].as_str().is_some(), "{key} is a string: {c}");
    }
    assert!(
        c.get("subscriptions_list").is_none(),
        "listed only with subs=1: {c}"
    );

    // With subs=1 each connection lists its subscriptions as plain subject strings.
    let with_subs = json(&srv, "/connz?subs=1").await;
    let c = with_subs["connections"]
        .as_array()
        .expect("connections array")
        .iter()
        .find(|c| c["name"] == "connz-probe")
        .expect("connz-probe listed")
        .clone();
    let mut subs: Vec<&str> = c["subscriptions_list"]
        .as_array()
        .unwrap_or_else(|| panic!("subscriptions_list: {c}"))
        .iter()
        .map(|s| s.as_str().expect("subject string"))
        .collect();
    subs.sort_unstable();
    assert_eq!(subs, ["connz.a", "connz.b"]);

    // With subs=detail: subject, queue group, sid, messages delivered, max and cid instead.
    let _q = client
        .queue_subscribe("connz.q", "workers".into())
        .await
        .unwrap();
    client
        .publish("connz.q", Bytes::from_static(b"x"))
        .await
        .unwrap();
    within(OP, "flush", client.flush()).await.unwrap();
    let c = wait_for("connz.q delivered once in the detail", OP, || async {
        let v = srv.monitor_json("/connz?subs=detail").await.ok()?;
        let c = v["connections"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == "connz-probe")?
            .clone();
        let q = c["subscriptions_list_detail"]
            .as_array()?
            .iter()
            .find(|d| d["subject"] == "connz.q")?
            .clone();
        (q["msgs"] == 1).then_some(c)
    })
    .await;
    assert!(c.get("subscriptions_list").is_none(), "{c}");
    let details = c["subscriptions_list_detail"].as_array().expect("details");
    assert_eq!(details.len(), 3, "{c}");
    let q = details
        .iter()
        .find(|d| d["subject"] == "connz.q")
        .expect("connz.q");
    assert_eq!(q["qgroup"], "workers", "{q}");
    assert_eq!(q["cid"], c["cid"], "{q}");
    assert!(q["sid"].as_str().is_some_and(|s| !s.is_empty()), "{q}");
    let a = details
        .iter()
        .find(|d| d["subject"] == "connz.a")
        .expect("connz.a");
    assert!(a.get("qgroup").is_none() && a["msgs"] == 0, "{a}");
    assert_clean_log(&srv);
}

#[tokio::test]
async fn connz_pages_with_offset_and_limit() {
    let srv = start_server().await;
    let mut clients = Vec::new();
    for i in 0..3 {
        clients.push(connect_named(&srv, &format!("page-{i}")).await);
    }
    wait_for("3 connections in /connz", OP, || async {
        let v = srv.monitor_json("/connz").await.ok()?;
        (v["num_connections"].as_u64()? >= 3).then_some(())
    })
    .await;

    let first = json(&srv, "/connz?limit=1").await;
    assert_eq!(first["limit"], 1);
    assert_eq!(first["offset"], 0);
    assert_eq!(first["connections"].as_array().unwrap().len(), 1);
    let second = json(&srv, "/connz?offset=1&limit=1").await;
    assert_eq!(second["offset"], 1);
    assert_eq!(second["connections"].as_array().unwrap().len(), 1);
    assert_ne!(
        first["connections"][0]["cid"],
        second["connections"][0]["cid"]
    );

    // An offset past the end is an empty page, not an error.
    let beyond = json(&srv, "/connz?offset=1000").await;
    assert_eq!(beyond["offset"], 1000);
    assert_eq!(beyond["num_connections"], 0);
    assert_eq!(beyond["connections"], serde_json::json!([]));
    assert!(u64_field(&beyond, "total") >= 3);
    assert_clean_log(&srv);
}

#[tokio::test]
async fn subsz_counts_and_lists_subscriptions() {
    let srv = start_server().await;
    let client = connect_named(&srv, "subsz-probe").await;
    let base = u64_field(&json(&srv, "/subsz").await, "num_subscriptions");
    let _a = client.subscribe("subsz.a").await.unwrap();
    let _q = client
        .queue_subscribe("subsz.q", "grp".into())
        .await
        .unwrap();
    within(OP, "flush", client.flush()).await.unwrap();

    let v = wait_for("two more subscriptions in /subsz", OP, || async {
        let v = srv.monitor_json("/subsz").await.ok()?;
        (v["num_subscriptions"].as_u64()? == base + 2).then_some(v)
    })
    .await;
    assert!(v.get("subscriptions_list").is_none() || v["subscriptions_list"].as_array().is_some());

    let cid = client.server_info().client_id;
    let listed = json(&srv, "/subsz?subs=1&limit=100000").await;
    let list = listed["subscriptions_list"]
        .as_array()
        .expect("subscriptions_list");
    let a = list
        .iter()
        .find(|s| s["subject"] == "subsz.a")
        .unwrap_or_else(|| panic!("subsz.a not listed: {listed}"));
    assert_eq!(a["cid"].as_u64(), Some(cid));
    assert_eq!(a["account"], "$G");
    assert!(a["sid"].as_str().is_some(), "sid is a string: {a}");
    let q = list
        .iter()
        .find(|s| s["subject"] == "subsz.q")
        .expect("subsz.q listed");
    assert_eq!(q["qgroup"], "grp");
    assert_clean_log(&srv);
}

#[tokio::test]
async fn metrics_exposes_jetraft_prometheus_series() {
    if server_kind() == ServerKind::NatsServer {
        // /metrics is jetraft's own endpoint; nats-server has none.
        return;
    }
    let srv = start_server().await;
    let client = connect_named(&srv, "metrics-probe").await;
    let mut sub = client.subscribe("m.x").await.unwrap();
    round_trip(&client).await;
    client
        .publish("m.x", Bytes::from_static(b"hello"))
        .await
        .unwrap();
    within(OP, "message", sub.next()).await.unwrap();

    let body = wait_for(
        "metrics reflecting traffic",
        Duration::from_secs(5),
        || async {
            let resp = srv.http_get("/metrics").await.ok()?;
            (resp.status == 200
                && sample(&resp.body, "jetraft_msgs_in_total").is_some_and(|v| v >= 1.0))
            .then_some(resp.body)
        },
    )
    .await;
    for name in [
        "jetraft_connections",
        "jetraft_msgs_in_total",
        "jetraft_msgs_out_total",
        "jetraft_bytes_in_total",
        "jetraft_bytes_out_total",
        "jetraft_subscriptions",
        "jetraft_slow_consumers_total",
    ] {
        assert!(
            sample(&body, name).is_some(),
            "metric {name} missing from:\n{body}"
        );
    }
    assert!(sample(&body, "jetraft_connections").unwrap() >= 1.0);
    assert!(sample(&body, "jetraft_subscriptions").unwrap() >= 1.0);
    assert!(sample(&body, "jetraft_msgs_out_total").unwrap() >= 1.0);
    assert!(sample(&body, "jetraft_bytes_in_total").unwrap() >= 5.0);
    assert_clean_log(&srv);
}

/// Value of the first sample of metric `name` (with or without labels) in Prometheus text.
fn sample(body: &str, name: &str) -> Option<f64> {
    body.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let rest = l.strip_prefix(name)?;
        let rest = if rest.starts_with('{') {
            &rest[rest.find('}')? + 1..]
        } else {
            rest
        };
        if !rest.starts_with(' ') {
            return None;
        }
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// `/jsz` reports the streams, consumers, messages and bytes stored here, the API counters,
/// and with `streams`/`consumers` the per-stream details; a single server leads itself, so
/// `leader-only` answers too. `/varz` carries the same usage in `jetstream.stats`.
#[tokio::test]
async fn jsz_reports_usage_details_and_api_counters() {
    let srv = start_server().await;
    let nc = connect_named(&srv, "jsz").await;
    let js = async_nats::jetstream::new(nc.clone());
    let before = json(&srv, "/jsz").await;
    assert_eq!(before["streams"], 0, "{before}");
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "JSZ".into(),
        subjects: vec!["jsz.>".into()],
        ..Default::default()
    })
    .await
    .expect("create");
    for i in 0..3 {
        js.publish(format!("jsz.{i}"), Bytes::from("hello"))
            .await
            .expect("publish")
            .await
            .expect("ack");
    }
    js.get_stream("JSZ")
        .await
        .expect("stream")
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("C".into()),
            ..Default::default()
        })
        .await
        .expect("consumer");

    let jsz = json(&srv, "/jsz").await;
    assert_eq!(jsz["streams"], 1, "{jsz}");
    assert_eq!(jsz["consumers"], 1, "{jsz}");
    assert_eq!(jsz["messages"], 3, "{jsz}");
    assert!(jsz["bytes"].as_u64().is_some_and(|b| b > 0), "{jsz}");
    assert_eq!(jsz["storage"], jsz["bytes"], "{jsz}");
    assert_eq!(jsz["memory"], 0, "{jsz}");
    let total = |v: &Value| v["api"]["total"].as_u64().unwrap_or(0);
    assert!(total(&jsz) > total(&before), "{before} then {jsz}");
    assert!(jsz["meta_cluster"].is_null(), "{jsz}");
    assert!(jsz["account_details"].is_null(), "{jsz}");

    let detailed = json(&srv, "/jsz?consumers=true").await;
    let streams = &detailed["account_details"][0]["stream_detail"];
    assert_eq!(streams[0]["name"], "JSZ", "{detailed}");
    assert_eq!(streams[0]["state"]["messages"], 3, "{detailed}");
    assert_eq!(streams[0]["consumer_detail"][0]["name"], "C", "{detailed}");
    assert_eq!(
        streams[0]["consumer_detail"][0]["num_pending"], 3,
        "{detailed}"
    );

    let led = srv.http_get("/jsz?leader-only=true").await.expect("GET");
    assert_eq!(led.status, 200, "{}", led.body);
    let varz = json(&srv, "/varz").await;
    assert_eq!(
        varz["jetstream"]["stats"]["storage"], jsz["storage"],
        "{varz}"
    );
    assert!(total(&varz["jetstream"]["stats"]) >= total(&jsz), "{varz}");
}
