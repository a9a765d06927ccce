//! JetStream on a three-node cluster: R1 and R3 streams used from any node, leader failover
//! with no acknowledged message lost, meta and stream leader stepdown, rejoin after restart.
//!
//! Every test first ran against a real nats-server cluster (`JETRAFT_TEST_SERVER=nats-server`).

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::connect;
use jetraft_tests::harness::jsapi::{api, index_of, info_with_leader, publish_acked, try_api};
use jetraft_tests::harness::{ServerKind, server_kind, wait_for, within};
use serde_json::{Value, json};

const OP: Duration = Duration::from_secs(10);
/// Bound on a leader election after a kill or stepdown.
const ELECTION: Duration = Duration::from_secs(30);

/// One client per node, in node order.
async fn connect_all(cluster: &Cluster) -> Vec<async_nats::Client> {
    let mut conns = Vec::with_capacity(cluster.len());
    for i in 0..cluster.len() {
        conns.push(connect(cluster.node(i)).await);
    }
    conns
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
        // `api` retries 10008: right after formation the meta leader can still move.
        let subject = format!("$JS.API.STREAM.CREATE.{s}");
        let body = json!({"name": s, "subjects": [format!("{}.*", s.to_lowercase())]});
        let r = api(&c0, &subject, body).await;
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
    // jetraft's least-loaded placement puts three R1 streams on three different nodes
    // (nats-server's placement may put them together: not checked there).
    if server_kind() == ServerKind::Jetraft {
        assert_eq!(leaders.len(), 3, "{leaders:?}");
    }
}

/// A stream created through any node is in STREAM.NAMES, STREAM.LIST and the account info
/// asked at once through the same connection, as on nats-server (whose meta leader answers
/// those, and whose stream leader answers the create): a node that has not applied the new
/// stream yet must not answer from its own state. 30 creates; before the fix 1 in 60 were
/// missing from NAMES and 8 in 60 from LIST.
#[tokio::test]
async fn a_created_stream_is_listed_at_once_through_every_node() {
    let cluster = Cluster::start(3, "js").await.expect("cluster");
    let conns = connect_all(&cluster).await;
    for i in 0..30usize {
        let nc = &conns[i % 3];
        let name = format!("RYW{i}");
        let body = json!({"name": name, "subjects": [format!("ryw{i}.>")]});
        let r = api(nc, &format!("$JS.API.STREAM.CREATE.{name}"), body).await;
        assert!(r["error"].is_null(), "{r}");
        let names = api(nc, "$JS.API.STREAM.NAMES", Value::Null).await;
        let listed = |v: &Value| v.as_array().is_some_and(|a| a.iter().any(|n| *n == name));
        assert!(listed(&names["streams"]), "{name} not in {names}");
        let list = api(nc, "$JS.API.STREAM.LIST", Value::Null).await;
        let configs: Value = list["streams"]
            .as_array()
            .map(|a| a.iter().map(|s| s["config"]["name"].clone()).collect())
            .unwrap_or_default();
        assert!(listed(&configs), "{name} not in {list}");
        let account = api(nc, "$JS.API.INFO", Value::Null).await;
        assert_eq!(account["streams"], i + 1, "{account}");
    }
}

/// An update answered through any node is in force at its stream leader: the answer carries the
/// stream's state and the next STREAM.INFO through the same connection shows the new config.
/// (nats-server's stream leader answers the update; jetraft's meta leader waits, bounded, until
/// the stream leader reports the new config.)
#[tokio::test]
async fn an_update_is_in_force_when_answered_through_every_node() {
    let cluster = Cluster::start(3, "js").await.expect("cluster");
    let conns = connect_all(&cluster).await;
    for i in 0..9usize {
        let nc = &conns[i % 3];
        let name = format!("UPD{i}");
        let body = json!({"name": name, "subjects": [format!("upd{i}.a")]});
        let r = api(nc, &format!("$JS.API.STREAM.CREATE.{name}"), body).await;
        assert!(r["error"].is_null(), "{r}");
        publish_acked(nc, &format!("upd{i}.a"), &format!("{name}-1"), "v").await;
        let update = json!({
            "name": name,
            "subjects": [format!("upd{i}.a"), format!("upd{i}.b")],
            "max_msgs": 100,
        });
        let r = api(nc, &format!("$JS.API.STREAM.UPDATE.{name}"), update).await;
        assert!(r["error"].is_null(), "{r}");
        assert_eq!(r["config"]["max_msgs"], 100, "{r}");
        assert_eq!(
            r["state"]["messages"], 1,
            "the answer carries the state: {r}"
        );
        let info = api(nc, &format!("$JS.API.STREAM.INFO.{name}"), Value::Null).await;
        assert_eq!(info["config"]["max_msgs"], 100, "{info}");
        // The client's node answers only once it routes the added subject (one try).
        let ack = publish_once(nc, &format!("upd{i}.b")).await;
        assert_eq!(ack["stream"], name.as_str(), "{ack}");
        assert_eq!(ack["seq"], 2, "{ack}");
    }
}

/// One publish with a reply, no retry: the PubAck, or what went wrong.
async fn publish_once(nc: &async_nats::Client, subject: &str) -> Value {
    publish_within(nc, subject, OP).await
}

/// [`publish_once`] waiting at most `bound` for the answer.
async fn publish_within(nc: &async_nats::Client, subject: &str, bound: Duration) -> Value {
    match tokio::time::timeout(bound, nc.request(subject.to_string(), Bytes::from("v"))).await {
        Ok(Ok(msg)) => serde_json::from_slice(&msg.payload).unwrap_or(Value::Null),
        Ok(Err(e)) => json!({"request_error": e.to_string(), "kind": format!("{:?}", e.kind())}),
        Err(_) => json!({"request_error": "timed out"}),
    }
}

/// A publish sent right after a stream create, update or delete was answered, through the same
/// connection, is routed by it on whichever node the client is on, as on nats-server (whose
/// servers propagate interest over the route before the answer travels it): stored after a
/// create or an update that added its subject, not acknowledged after a delete (jetraft answers
/// "no responders" at once; nats-server lets the request time out). Before the fix the client's
/// node could answer before its own meta replica had applied the change (no responders after
/// an update, or a publish captured for the deleted stream).
#[tokio::test]
async fn a_publish_right_after_create_update_or_delete_is_routed_by_it() {
    let cluster = Cluster::start(3, "js").await.expect("cluster");
    let conns = connect_all(&cluster).await;
    for i in 0..15usize {
        let nc = &conns[i % 3];
        let name = format!("RT{i}");
        let body = json!({"name": name, "subjects": [format!("rt{i}.a")], "num_replicas": 1 + 2 * (i % 2)});
        let r = api(nc, &format!("$JS.API.STREAM.CREATE.{name}"), body).await;
        assert!(r["error"].is_null(), "{r}");
        let ack = publish_once(nc, &format!("rt{i}.a")).await;
        assert_eq!(
            (&ack["stream"], &ack["seq"]),
            (&json!(name), &json!(1)),
            "after create: {ack}"
        );

        let update = json!({"name": name, "subjects": [format!("rt{i}.a"), format!("rt{i}.b")], "num_replicas": 1 + 2 * (i % 2)});
        let r = api(nc, &format!("$JS.API.STREAM.UPDATE.{name}"), update).await;
        assert!(r["error"].is_null(), "{r}");
        let ack = publish_once(nc, &format!("rt{i}.b")).await;
        assert_eq!(
            (&ack["stream"], &ack["seq"]),
            (&json!(name), &json!(2)),
            "after update: {ack}"
        );

        let r = api(nc, &format!("$JS.API.STREAM.DELETE.{name}"), Value::Null).await;
        assert_eq!(r["success"], true, "{r}");
        let after = publish_within(nc, &format!("rt{i}.a"), Duration::from_secs(1)).await;
        assert!(after["seq"].is_null(), "after delete: {after}");
        if server_kind() == ServerKind::Jetraft {
            assert_eq!(after["kind"], "NoResponders", "after delete: {after}");
        }
    }
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
        let (victim, survivor) = kill_stream_leader(&mut cluster, &c0, "F").await;
        let nc = connect(cluster.node(survivor)).await;
        for _ in 0..50 {
            let ack = publish_acked(&nc, "f", &format!("m{next_id}"), "payload").await;
            // Every id is published until acked once: an attempt whose ack was lost in the
            // failover and its retry (answered `duplicate`) store one message between them.
            assert_eq!(ack["seq"], acked + 1, "{ack}");
            acked += 1;
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
            if let Some(info) = try_api(&nc, "$JS.API.STREAM.INFO.S", &Value::Null).await {
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

#[tokio::test]
async fn stream_peer_remove_moves_an_r1_stream_and_refuses_what_nats_server_refuses() {
    let cluster = Cluster::start(3, "js").await.expect("cluster");
    let nc = connect(cluster.node(0)).await;
    for (name, replicas) in [("PR", 1), ("P3", 3)] {
        // Right after formation the meta group may still settle (10008): retried like a client.
        let subject = format!("$JS.API.STREAM.CREATE.{name}");
        let body = json!({"name": name, "subjects": [name.to_lowercase()],
                          "num_replicas": replicas, "allow_direct": true});
        let r = wait_for("stream create", ELECTION, || {
            let (nc, subject, body) = (nc.clone(), subject.clone(), body.clone());
            async move {
                let r = try_api(&nc, &subject, &body).await?;
                (r["error"]["err_code"] != 10008).then_some(r)
            }
        })
        .await;
        assert!(r["error"].is_null(), "{r}");
    }
    for i in 0..20 {
        let ack = publish_acked(&nc, "pr", &format!("m{i}"), &format!("v{i}")).await;
        assert_eq!(ack["seq"], i + 1);
    }
    let host = info_with_leader(&nc, "PR").await["cluster"]["leader"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let other = (0..3)
        .map(|i| cluster.node(i).name().to_string())
        .find(|n| *n != host)
        .expect("another node");
    let remove = |stream: &str| format!("$JS.API.STREAM.PEER.REMOVE.{stream}");
    let code = |v: &Value| v["error"]["err_code"].as_u64();
    // Refusals, in nats-server's order of checks.
    let r = api(&nc, &remove("PR"), Value::Null).await;
    assert_eq!(code(&r), Some(10003), "{r}");
    assert_eq!(
        r["type"],
        "io.nats.jetstream.api.v1.stream_remove_peer_response"
    );
    let r = api(&nc, &remove("PR"), json!({"peer": ""})).await;
    assert_eq!(code(&r), Some(10003), "{r}");
    let r = api(&nc, &remove("NOPE"), json!({"peer": host})).await;
    assert_eq!(code(&r), Some(10059), "{r}");
    let r = api(&nc, &remove("PR"), json!({"peer": "no-such-server"})).await;
    assert_eq!(code(&r), Some(10040), "{r}");
    let r = api(&nc, &remove("PR"), json!({"peer": other})).await;
    assert_eq!(code(&r), Some(10040), "not a replica of the R1 stream: {r}");
    // Every node holds a replica of an R3 stream on three nodes: nobody can replace one.
    let r = api(&nc, &remove("P3"), json!({"peer": host})).await;
    assert_eq!(code(&r), Some(10075), "{r}");
    assert_eq!(r["error"]["code"], 503, "{r}");

    // The R1 stream moves to another node with its messages.
    let r = api(&nc, &remove("PR"), json!({"peer": host})).await;
    assert_eq!(
        r,
        json!({"type": "io.nats.jetstream.api.v1.stream_remove_peer_response", "success": true})
    );
    let moved = wait_for("R1 stream moved", ELECTION, || {
        let nc = nc.clone();
        let host = host.clone();
        async move {
            let info = try_api(&nc, "$JS.API.STREAM.INFO.PR", &Value::Null).await?;
            let leader = info["cluster"]["leader"].as_str()?;
            // nats-server 2.15.1 recreates an R1 stream empty on the new peer (its messages
            // are lost); jetraft moves them.
            let kept = server_kind() == ServerKind::NatsServer || info["state"]["messages"] == 20;
            (!leader.is_empty() && leader != host && kept).then_some(info)
        }
    })
    .await;
    // The old host is no longer a member: removing it again is refused.
    let r = api(&nc, &remove("PR"), json!({"peer": host})).await;
    assert_eq!(code(&r), Some(10040), "{r}");
    if server_kind() == ServerKind::NatsServer {
        return;
    }
    assert_eq!(moved["state"]["last_seq"], 20, "{moved}");
    let new_host = moved["cluster"]["leader"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // The new host's own replica (direct get through it) holds every message.
    let via_new = connect(cluster.node(index_of(&cluster, &new_host))).await;
    for seq in 1..=20u64 {
        let m = within(
            OP,
            "direct get",
            via_new.request(
                "$JS.API.DIRECT.GET.PR",
                Bytes::from(format!(r#"{{"seq":{seq}}}"#)),
            ),
        )
        .await
        .expect("direct get");
        assert_eq!(m.payload, Bytes::from(format!("v{}", seq - 1)), "seq {seq}");
    }
    // The stream keeps working, deduplicating against what moved.
    let dup = publish_acked(&nc, "pr", "m3", "again").await;
    assert_eq!(dup["duplicate"], true, "{dup}");
    let ack = publish_acked(&nc, "pr", "m20", "v20").await;
    assert_eq!(ack["seq"], 21, "{ack}");
    let info = info_with_leader(&nc, "PR").await;
    assert_eq!(info["cluster"]["leader"], new_host.as_str(), "{info}");
    cluster.assert_clean_logs();
}

#[tokio::test]
async fn stream_info_and_list_are_right_through_nodes_without_a_replica() {
    let mut cluster = Cluster::start(3, "js").await.expect("cluster");
    let nc = connect(cluster.node(0)).await;
    // Three R1 streams land on three different nodes, so each node hosts one and not the others.
    for (i, s) in ["A", "B", "C"].iter().enumerate() {
        let subject = format!("$JS.API.STREAM.CREATE.{s}");
        let body = json!({"name": s, "subjects": [s.to_lowercase()]});
        let r = wait_for("stream create", ELECTION, || {
            let (nc, subject, body) = (nc.clone(), subject.clone(), body.clone());
            async move {
                let r = try_api(&nc, &subject, &body).await?;
                (r["error"]["err_code"] != 10008).then_some(r)
            }
        })
        .await;
        assert!(r["error"].is_null(), "{r}");
        for k in 0..=i {
            publish_acked(&nc, &s.to_lowercase(), &format!("{s}{k}"), "x").await;
        }
    }
    let hosts: Vec<String> = {
        let mut v = Vec::new();
        for s in ["A", "B", "C"] {
            let info = info_with_leader(&nc, s).await;
            v.push(
                info["cluster"]["leader"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
        v
    };
    for i in 0..3 {
        let c = connect(cluster.node(i)).await;
        let list = api(&c, "$JS.API.STREAM.LIST", Value::Null).await;
        assert_eq!(list["total"], 3, "{list}");
        assert!(
            list.get("missing").is_none(),
            "every stream answered: {list}"
        );
        let streams = list["streams"].as_array().cloned().unwrap_or_default();
        for (k, s) in ["A", "B", "C"].iter().enumerate() {
            let entry = streams
                .iter()
                .find(|e| e["config"]["name"] == *s)
                .unwrap_or_else(|| panic!("{s} not listed: {list}"));
            assert_eq!(
                entry["state"]["messages"],
                k as u64 + 1,
                "via n{}: {entry}",
                i + 1
            );
            assert_eq!(
                entry["cluster"]["leader"],
                hosts[k].as_str(),
                "via n{}: {entry}",
                i + 1
            );
            let info = api(&c, &format!("$JS.API.STREAM.INFO.{s}"), Value::Null).await;
            assert_eq!(
                info["state"]["messages"],
                k as u64 + 1,
                "via n{}: {info}",
                i + 1
            );
            assert_eq!(info["cluster"]["leader"], hosts[k].as_str(), "{info}");
        }
    }

    // An R3 stream's replicas are current while they keep up, and a killed one is not.
    let r = api(
        &nc,
        "$JS.API.STREAM.CREATE.R",
        json!({"name": "R", "subjects": ["r"], "num_replicas": 3}),
    )
    .await;
    assert!(r["error"].is_null(), "{r}");
    publish_acked(&nc, "r", "r1", "x").await;
    // Current (holding what the leader applied, as nats-server counts it) and, once the
    // last entries reached them, without lag.
    let all_current = |info: &Value| {
        info["cluster"]["replicas"].as_array().is_some_and(|r| {
            r.len() == 2
                && r.iter()
                    .all(|p| p["current"] == true && p.get("lag").is_none_or(|l| l == 0))
        })
    };
    let info = wait_for("replicas current", ELECTION, || {
        let nc = nc.clone();
        async move {
            let info = try_api(&nc, "$JS.API.STREAM.INFO.R", &Value::Null).await?;
            all_current(&info).then_some(info)
        }
    })
    .await;
    for p in info["cluster"]["replicas"].as_array().into_iter().flatten() {
        assert!(p["active"].as_u64().is_some_and(|a| a > 0), "{info}");
        assert!(p.get("lag").is_none_or(|l| l == 0), "{info}");
    }
    let leader = info["cluster"]["leader"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let follower = (0..3)
        .find(|&i| cluster.node(i).name() != leader)
        .expect("a follower");
    let follower_name = cluster.node(follower).name().to_string();
    cluster.kill(follower);
    let survivor = (0..3).find(|&i| i != follower).expect("a survivor");
    let nc = connect(cluster.node(survivor)).await;
    for k in 0..5 {
        publish_acked(&nc, "r", &format!("after{k}"), "x").await;
    }
    let deadline = tokio::time::Instant::now() + ELECTION;
    let mut last = Value::Null;
    let info = loop {
        if let Some(info) = try_api(&nc, "$JS.API.STREAM.INFO.R", &Value::Null).await {
            let dead = info["cluster"]["replicas"].as_array().and_then(|r| {
                r.iter()
                    .find(|p| p["name"] == follower_name.as_str())
                    .cloned()
            });
            if dead.is_some_and(|p| p["current"] == false) {
                break info;
            }
            last = info;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{follower_name} (killed) still reported current: {last}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let dead = info["cluster"]["replicas"]
        .as_array()
        .and_then(|r| r.iter().find(|p| p["name"] == follower_name.as_str()))
        .cloned()
        .unwrap_or_default();
    assert!(dead["lag"].as_u64().is_some_and(|l| l > 0), "{info}");
}

/// `jetraft_raft_groups` and `jetraft_raft_groups_quiet` from a node's `/metrics`.
async fn raft_groups(cluster: &Cluster, i: usize) -> Option<(u64, u64)> {
    let body = cluster.node(i).http_get("/metrics").await.ok()?.body;
    let gauge = |name: &str| {
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
    };
    Some((
        gauge("jetraft_raft_groups")? as u64,
        gauge("jetraft_raft_groups_quiet")? as u64,
    ))
}

/// Waits until every Raft group on every running node is quiet (idle, timers stopped).
async fn all_quiet(cluster: &Cluster, nodes: &[usize], what: &str) {
    for &i in nodes {
        wait_for(what, ELECTION, || async move {
            let (groups, quiet) = raft_groups(cluster, i).await?;
            (groups >= 2 && quiet == groups).then_some(())
        })
        .await;
    }
}

/// Idle groups go quiet on every node (jetraft's quiescence, seen through `/metrics`), and a
/// quiet R3 stream still fails over when its leader is killed: the survivors elect on the
/// dropped node links, publishing goes on, and the restarted node catches up, after which
/// every group goes quiet again.
#[tokio::test]
async fn quiet_r3_stream_fails_over_and_the_restarted_node_catches_up() {
    if server_kind() != ServerKind::Jetraft {
        return;
    }
    let mut cluster = Cluster::start(3, "js").await.expect("cluster");
    let c0 = connect(cluster.node(0)).await;
    api(
        &c0,
        "$JS.API.STREAM.CREATE.Q",
        json!({"name": "Q", "subjects": ["q"], "num_replicas": 3, "allow_direct": true}),
    )
    .await;
    for i in 0..20 {
        let ack = publish_acked(&c0, "q", &format!("q{i}"), "payload").await;
        assert_eq!(ack["seq"], i + 1, "{ack}");
    }
    all_quiet(&cluster, &[0, 1, 2], "every group quiet").await;
    // Quiet for longer than the leader lease (3 s): the first publish is still acknowledged at
    // the first try (the leader renews its lease before writing).
    tokio::time::sleep(Duration::from_secs(4)).await;
    let ack = nc_request_once(&c0, "q", "q-after-idle").await;
    assert_eq!(ack["seq"], 21, "{ack}");
    let c0_next = 21;
    all_quiet(&cluster, &[0, 1, 2], "every group quiet before the kill").await;

    let (victim, survivor) = kill_stream_leader(&mut cluster, &c0, "Q").await;
    let nc = connect(cluster.node(survivor)).await;
    for i in c0_next..c0_next + 10 {
        let ack = publish_acked(&nc, "q", &format!("q{i}"), "payload").await;
        assert_eq!(ack["seq"], i + 1, "{ack}");
    }
    cluster.restart(victim).await.expect("restart");
    let back = connect(cluster.node(victim)).await;
    wait_for("restarted replica caught up", ELECTION, || {
        let back = back.clone();
        async move {
            let r = back
                .request("$JS.API.DIRECT.GET.Q", Bytes::from_static(br#"{"seq":31}"#))
                .await
                .ok()?;
            let seq = r
                .headers
                .as_ref()?
                .get("Nats-Sequence")?
                .as_str()
                .to_string();
            (seq == "31").then_some(())
        }
    })
    .await;
    // Quiet again everywhere: the leader quiesces only once every reachable member holds its
    // whole log, so this also says the restarted replica caught up.
    all_quiet(&cluster, &[0, 1, 2], "every group quiet again").await;
}

/// One publish with a reply, no retry: the PubAck, or a panic after 3 s.
async fn nc_request_once(nc: &async_nats::Client, subject: &str, id: &str) -> Value {
    let mut h = async_nats::HeaderMap::new();
    h.insert("Nats-Msg-Id", id);
    let req = nc.request_with_headers(subject.to_string(), h, Bytes::from_static(b"payload"));
    let msg = tokio::time::timeout(Duration::from_secs(3), req)
        .await
        .expect("a PubAck within 3 s")
        .expect("a PubAck, not an error");
    serde_json::from_slice(&msg.payload).expect("PubAck JSON")
}

/// Kills the node leading `stream` (as STREAM.INFO through `nc` names it); returns its index
/// and that of a surviving node.
async fn kill_stream_leader(
    cluster: &mut Cluster,
    nc: &async_nats::Client,
    stream: &str,
) -> (usize, usize) {
    let info = info_with_leader(nc, stream).await;
    let leader = info["cluster"]["leader"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let victim = index_of(cluster, &leader);
    cluster.kill(victim);
    let survivor = (0..cluster.len())
        .find(|&i| i != victim)
        .expect("a survivor");
    (victim, survivor)
}

/// The node whose `/jsz?leader-only=true` answers: the meta leader (waits for every node to
/// name the same one).
async fn meta_leader_index(cluster: &Cluster) -> usize {
    wait_for("one meta leader named by every node", ELECTION, || async {
        let mut named = BTreeSet::new();
        let mut answering = Vec::new();
        for i in 0..cluster.len() {
            let jsz = cluster.node(i).monitor_json("/jsz").await.ok()?;
            named.insert(jsz["meta_cluster"]["leader"].as_str()?.to_string());
            let led = cluster
                .node(i)
                .http_get("/jsz?leader-only=true")
                .await
                .ok()?;
            if led.status == 200 {
                answering.push(i);
            } else {
                assert_eq!(led.status, 400, "{}", led.body);
                assert_eq!(led.body, "filtered response: not leader");
            }
        }
        let [leader] = answering[..] else {
            return None;
        };
        (named.len() == 1 && named.contains(cluster.node(leader).name())).then_some(leader)
    })
    .await
}

/// `/jsz` on a cluster: every node names the same meta leader, only that node answers
/// `leader-only`, and each node counts the replicas it hosts (an R3 stream on all three).
#[tokio::test]
async fn jsz_names_the_meta_leader_and_counts_hosted_replicas() {
    let cluster = Cluster::start(3, "js").await.expect("cluster");
    let nc = connect(cluster.node(0)).await;
    let body = json!({"name": "J3", "subjects": ["j3"], "num_replicas": 3});
    let r = api(&nc, "$JS.API.STREAM.CREATE.J3", body).await;
    assert!(r["error"].is_null(), "{r}");
    for i in 0..4 {
        publish_acked(&nc, "j3", &format!("j{i}"), "v").await;
    }
    let leader = meta_leader_index(&cluster).await;
    for i in 0..3 {
        let node = cluster.node(i);
        let jsz = wait_for("replica applied", OP, || async move {
            let jsz = node.monitor_json("/jsz").await.ok()?;
            (jsz["messages"] == 4).then_some(jsz)
        })
        .await;
        assert_eq!(jsz["streams"], 1, "{jsz}");
        assert_eq!(jsz["meta_cluster"]["cluster_size"], 3, "{jsz}");
        assert_eq!(
            jsz["meta_cluster"]["leader"],
            cluster.node(leader).name(),
            "{jsz}"
        );
        let others = jsz["meta_cluster"]["replicas"].as_array().map(Vec::len);
        assert_eq!(others, Some(2), "every voter but this node: {jsz}");
    }
}

/// STREAM.LIST answers within a client's usual 5 s while one node is frozen (SIGSTOP): the
/// streams it leads are listed as `missing` instead of holding the answer back. jetraft asked
/// the leaders of a page one after another (2 s each), so three frozen streams took 6 s.
#[tokio::test]
async fn stream_list_answers_in_time_while_a_node_is_frozen() {
    let cluster = Cluster::start(3, "js").await.expect("cluster");
    let nc = connect(cluster.node(0)).await;
    for i in 0..9 {
        let body = json!({"name": format!("L{i}"), "subjects": [format!("l{i}")]});
        let r = api(&nc, &format!("$JS.API.STREAM.CREATE.L{i}"), body).await;
        assert!(r["error"].is_null(), "{r}");
    }
    let leader = meta_leader_index(&cluster).await;
    let mut hosted: Vec<Vec<String>> = vec![Vec::new(); 3];
    for i in 0..9 {
        let info = info_with_leader(&nc, &format!("L{i}")).await;
        let node = index_of(
            &cluster,
            info["cluster"]["leader"].as_str().unwrap_or_default(),
        );
        hosted[node].push(format!("L{i}"));
    }
    let Some(frozen) = (0..3)
        .filter(|&i| i != leader)
        .max_by_key(|&i| hosted[i].len())
    else {
        panic!("no node besides the meta leader");
    };
    if hosted[frozen].is_empty() {
        // nats-server's placement may leave both followers empty: nothing to check.
        assert_ne!(server_kind(), ServerKind::Jetraft, "{hosted:?}");
        return;
    }
    let via = connect(cluster.node(leader)).await;
    cluster.node(frozen).freeze().await.expect("SIGSTOP");
    let listed = tokio::time::timeout(
        Duration::from_secs(5),
        via.request("$JS.API.STREAM.LIST", Bytes::new()),
    )
    .await;
    cluster
        .node(frozen)
        .signal(rustix::process::Signal::CONT)
        .expect("SIGCONT");
    let msg = listed
        .expect("STREAM.LIST answered within 5 s")
        .expect("STREAM.LIST");
    let list: Value = serde_json::from_slice(&msg.payload).expect("JSON");
    let mut missing: Vec<String> = list["missing"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    missing.sort();
    let mut expected = hosted[frozen].clone();
    expected.sort();
    assert_eq!(missing, expected, "{list}");
    assert_eq!(
        list["streams"].as_array().map(Vec::len),
        Some(9 - expected.len()),
        "{list}"
    );
}
