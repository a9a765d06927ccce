//! JetStream on a three-node cluster: R1 and R3 streams used from any node, leader failover
//! with no acknowledged message lost, meta and stream leader stepdown, rejoin after restart.
//!
//! Every test first ran against a real nats-server cluster (`JETRAFT_TEST_SERVER=nats-server`).

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::HeaderMap;
use bytes::Bytes;
use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::{ServerKind, ServerProcess, server_kind, wait_for, within};
use serde_json::{Value, json};

const OP: Duration = Duration::from_secs(10);
/// Bound on a leader election after a kill or stepdown.
const ELECTION: Duration = Duration::from_secs(30);

async fn connect(srv: &ServerProcess) -> async_nats::Client {
    within(
        OP,
        "connect",
        Box::pin(async_nats::connect(srv.client_url())),
    )
    .await
    .expect("connect")
}

/// A raw API request; `None` when it timed out or had no responders.
async fn try_api(nc: &async_nats::Client, subject: &str, body: Value) -> Option<Value> {
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

async fn api(nc: &async_nats::Client, subject: &str, body: Value) -> Value {
    wait_for(subject, OP, || {
        let nc = nc.clone();
        let body = body.clone();
        async move { try_api(&nc, subject, body).await }
    })
    .await
}

/// Waits until the stream answers STREAM.INFO with a leader and returns the info.
async fn info_with_leader(nc: &async_nats::Client, stream: &str) -> Value {
    let subject = format!("$JS.API.STREAM.INFO.{stream}");
    wait_for("stream leader", ELECTION, || {
        let nc = nc.clone();
        let subject = subject.clone();
        async move {
            let info = try_api(&nc, &subject, Value::Null).await?;
            let leader = info["cluster"]["leader"].as_str()?;
            (!leader.is_empty()).then_some(info)
        }
    })
    .await
}

/// Publishes until acknowledged (retrying through elections); returns the PubAck.
async fn publish_acked(nc: &async_nats::Client, subject: &str, id: &str, body: &str) -> Value {
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

fn index_of(cluster: &Cluster, name: &str) -> usize {
    (0..cluster.len())
        .find(|&i| cluster.node(i).name() == name)
        .unwrap_or_else(|| panic!("no node named {name}"))
}

#[tokio::test]
async fn r3_stream_is_usable_from_every_node() {
    let cluster = Cluster::start(3, "js").await.expect("cluster");
    let c0 = connect(cluster.node(0)).await;
    let c1 = connect(cluster.node(1)).await;
    let c2 = connect(cluster.node(2)).await;
    let created = api(
        &c0,
        "$JS.API.STREAM.CREATE.R3",
        json!({"name": "R3", "subjects": ["r3.>"], "num_replicas": 3}),
    )
    .await;
    assert!(created["error"].is_null(), "{created}");
    assert_eq!(created["config"]["num_replicas"], 3);
    for (i, nc) in [&c0, &c1, &c2].iter().enumerate() {
        let ack = publish_acked(nc, &format!("r3.{i}"), &format!("id{i}"), "x").await;
        assert_eq!(ack["stream"], "R3");
        assert_eq!(ack["seq"], i as u64 + 1);
    }
    for nc in [&c0, &c1, &c2] {
        let info = info_with_leader(nc, "R3").await;
        assert_eq!(info["state"]["messages"], 3, "{info}");
        assert_eq!(
            info["cluster"]["replicas"].as_array().map(Vec::len),
            Some(2),
            "{info}"
        );
        let names = api(nc, "$JS.API.STREAM.NAMES", Value::Null).await;
        assert_eq!(names["streams"], json!(["R3"]));
    }
    let got = api(&c2, "$JS.API.STREAM.MSG.GET.R3", json!({"seq": 2})).await;
    assert_eq!(got["message"]["subject"], "r3.1");
}

#[tokio::test]
async fn r1_streams_spread_and_answer_through_any_node() {
    let cluster = Cluster::start(3, "js").await.expect("cluster");
    let c0 = connect(cluster.node(0)).await;
    let c2 = connect(cluster.node(2)).await;
    let mut leaders = BTreeSet::new();
    for s in ["A", "B", "C"] {
        let r = api(
            &c0,
            &format!("$JS.API.STREAM.CREATE.{s}"),
            json!({"name": s, "subjects": [format!("{}.*", s.to_lowercase())]}),
        )
        .await;
        assert!(r["error"].is_null(), "{r}");
    }
    for s in ["A", "B", "C"] {
        let ack = publish_acked(&c2, &format!("{}.x", s.to_lowercase()), "one", "v").await;
        assert_eq!(ack["stream"], s);
        let info = info_with_leader(&c2, s).await;
        assert_eq!(info["state"]["messages"], 1);
        leaders.insert(
            info["cluster"]["leader"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    // Least-loaded placement puts three R1 streams on three different nodes.
    assert_eq!(leaders.len(), 3, "{leaders:?}");
}

#[tokio::test]
async fn acked_messages_survive_leader_kill_and_restart() {
    let mut cluster = Cluster::start(3, "js").await.expect("cluster");
    let c0 = connect(cluster.node(0)).await;
    api(
        &c0,
        "$JS.API.STREAM.CREATE.F",
        json!({"name": "F", "subjects": ["f"], "num_replicas": 3, "allow_direct": true}),
    )
    .await;
    let mut acked = 0u64;
    let mut next_id = 0u64;
    for round in 0..2 {
        for _ in 0..50 {
            let ack = publish_acked(&c0, "f", &format!("m{next_id}"), "payload").await;
            assert_eq!(ack["seq"], acked + 1, "{ack}");
            acked += 1;
            next_id += 1;
        }
        let info = info_with_leader(&c0, "F").await;
        let leader = info["cluster"]["leader"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let victim = index_of(&cluster, &leader);
        cluster.kill(victim);
        let survivor = (0..3).find(|&i| i != victim).expect("a survivor");
        let nc = connect(cluster.node(survivor)).await;
        for _ in 0..50 {
            let ack = publish_acked(&nc, "f", &format!("m{next_id}"), "payload").await;
            // A retried publish may be a duplicate of one already stored; dedup keeps it once.
            assert!(ack["seq"].as_u64().unwrap() <= acked + 1, "{ack}");
            if ack["duplicate"] != true {
                acked += 1;
            }
            next_id += 1;
        }
        cluster.restart(victim).await.expect("restart");
        let info = info_with_leader(&nc, "F").await;
        assert_eq!(info["state"]["messages"], acked, "round {round}: {info}");
    }
    // Every replica holds every acknowledged message, in order (direct get reads the local
    // replica of the node the client is connected to).
    for i in 0..3 {
        let nc = connect(cluster.node(i)).await;
        wait_for("replica caught up", ELECTION, || {
            let nc = nc.clone();
            async move {
                let r = nc
                    .request(
                        "$JS.API.DIRECT.GET.F",
                        Bytes::from(format!(r#"{{"seq":{acked}}}"#)),
                    )
                    .await
                    .ok()?;
                r.headers
                    .as_ref()
                    .and_then(|h| h.get("Nats-Sequence").map(|v| v.as_str().to_string()))
                    .filter(|s| *s == acked.to_string())
            }
        })
        .await;
    }
}

#[tokio::test]
async fn meta_and_stream_leader_stepdown() {
    let cluster = Cluster::start(3, "js").await.expect("cluster");
    let nc = connect(cluster.node(1)).await;
    api(
        &nc,
        "$JS.API.STREAM.CREATE.S",
        json!({"name": "S", "subjects": ["s"], "num_replicas": 3}),
    )
    .await;
    let before = info_with_leader(&nc, "S").await["cluster"]["leader"].clone();
    // A stepdown hands leadership to another replica. On a loaded machine an election may
    // occasionally hand it back before the test looks, so a stepdown is retried (at most 3).
    let mut after = Value::Null;
    for _attempt in 0..3 {
        let r = api(&nc, "$JS.API.STREAM.LEADER.STEPDOWN.S", Value::Null).await;
        assert_eq!(r["success"], true, "{r}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while tokio::time::Instant::now() < deadline {
            if let Some(info) = try_api(&nc, "$JS.API.STREAM.INFO.S", Value::Null).await {
                let leader = info["cluster"]["leader"].clone();
                if leader.as_str().is_some_and(|l| !l.is_empty()) && leader != before {
                    after = leader;
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !after.is_null() {
            break;
        }
    }
    assert!(
        !after.is_null(),
        "leadership never moved away from {before}"
    );
    assert_ne!(before, after);
    // nats-server answers META.LEADER.STEPDOWN only to its system account (no accounts here).
    if server_kind() == ServerKind::Jetraft {
        let r = api(&nc, "$JS.API.META.LEADER.STEPDOWN", Value::Null).await;
        assert_eq!(r["success"], true, "{r}");
    }
    // The cluster still creates streams after the meta leader moved.
    let created = api(
        &nc,
        "$JS.API.STREAM.CREATE.T",
        json!({"name": "T", "subjects": ["t"], "num_replicas": 3}),
    )
    .await;
    assert!(created["error"].is_null(), "{created}");
    let ack = publish_acked(&nc, "t", "x", "v").await;
    assert_eq!(ack["seq"], 1);
}

#[tokio::test]
async fn r3_stream_deleted_and_recreated_at_once_starts_empty() {
    let cluster = Cluster::start(3, "js").await.expect("cluster");
    let nc = connect(cluster.node(0)).await;
    for round in 0..3 {
        let created = api(
            &nc,
            "$JS.API.STREAM.CREATE.RE",
            json!({"name": "RE", "subjects": ["re"], "num_replicas": 3}),
        )
        .await;
        assert!(created["error"].is_null(), "round {round}: {created}");
        assert_eq!(created["state"]["messages"], 0, "round {round}: {created}");
        for i in 1..=3u64 {
            let ack = publish_acked(&nc, "re", &format!("r{round}-{i}"), "x").await;
            assert_eq!(ack["seq"], i, "round {round}: {ack}");
        }
        let del = api(&nc, "$JS.API.STREAM.DELETE.RE", Value::Null).await;
        assert_eq!(del["success"], true, "round {round}: {del}");
    }
}
