//! Consumers on a three-node cluster: used through any node, ack state replicated with the
//! stream, and a stream leader kill that neither redelivers acknowledged messages nor forgets
//! unacknowledged ones.
//!
//! Run against a real nats-server cluster too (`JETRAFT_TEST_SERVER=nats-server`).

use std::collections::BTreeSet;
use std::time::Duration;

use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::connect;
use jetraft_tests::harness::jsapi::{ELECTION, api, leader_index, publish_acked, try_api};
use jetraft_tests::harness::pull::{ack_sync, pull};
use jetraft_tests::harness::wait_for;
use serde_json::{Value, json};

const OP: Duration = Duration::from_secs(10);

async fn consumer_info(nc: &async_nats::Client, stream: &str, name: &str) -> Value {
    let subject = format!("$JS.API.CONSUMER.INFO.{stream}.{name}");
    wait_for("consumer info", ELECTION, || {
        let nc = nc.clone();
        let subject = subject.clone();
        async move {
            let v = try_api(&nc, &subject, &Value::Null).await?;
            v["error"].is_null().then_some(v)
        }
    })
    .await
}

#[tokio::test]
async fn consumers_work_through_every_node() {
    let cluster = Cluster::start(3, "jc").await.expect("cluster");
    let nodes: Vec<async_nats::Client> = {
        let mut v = Vec::new();
        for i in 0..3 {
            v.push(connect(cluster.node(i)).await);
        }
        v
    };
    let created = api(
        &nodes[0],
        "$JS.API.STREAM.CREATE.C3",
        json!({"name": "C3", "subjects": ["c3.>"], "num_replicas": 3}),
    )
    .await;
    assert!(created["error"].is_null(), "{created}");
    for i in 0..20 {
        publish_acked(&nodes[1], "c3.x", &format!("id{i}"), &format!("m{i}")).await;
    }
    let r = api(
        &nodes[2],
        "$JS.API.CONSUMER.CREATE.C3.d",
        json!({"stream_name": "C3", "config": {"durable_name": "d", "ack_policy": "explicit"}}),
    )
    .await;
    assert!(r["error"].is_null(), "{r}");
    assert_eq!(r["num_pending"], 20, "{r}");
    // Pull through node 0, ack through node 1.
    let got = wait_for("first pull", ELECTION, || {
        let nc = nodes[0].clone();
        async move {
            let v = pull(&nc, "C3", "d", 5, Duration::from_secs(2)).await;
            (!v.is_empty()).then_some(v)
        }
    })
    .await;
    assert_eq!(got.len(), 5);
    for (k, d) in got.iter().enumerate() {
        assert_eq!(d.stream_seq, k as u64 + 1);
        assert_eq!(d.payload, format!("m{k}"));
        assert!(ack_sync(&nodes[1], d, OP).await, "ack {k} confirmed");
    }
    for nc in &nodes {
        let i = consumer_info(nc, "C3", "d").await;
        assert_eq!(i["ack_floor"]["stream_seq"], 5, "{i}");
        assert_eq!(i["num_ack_pending"], 0, "{i}");
        assert_eq!(i["num_pending"], 15, "{i}");
        assert_eq!(
            i["cluster"]["replicas"].as_array().map(Vec::len),
            Some(2),
            "{i}"
        );
    }
}

#[tokio::test]
async fn leader_kill_neither_redelivers_acked_nor_forgets_unacked() {
    let mut cluster = Cluster::start(3, "jk").await.expect("cluster");
    let c0 = connect(cluster.node(0)).await;
    api(
        &c0,
        "$JS.API.STREAM.CREATE.K",
        json!({"name": "K", "subjects": ["k"], "num_replicas": 3}),
    )
    .await;
    for i in 0..60 {
        publish_acked(&c0, "k", &format!("id{i}"), "x").await;
    }
    api(
        &c0,
        "$JS.API.CONSUMER.CREATE.K.w",
        json!({"stream_name": "K", "config": {
            "durable_name": "w", "ack_policy": "explicit", "ack_wait": 2_000_000_000u64
        }}),
    )
    .await;
    let first = wait_for("pull", ELECTION, || {
        let nc = c0.clone();
        async move {
            let v = pull(&nc, "K", "w", 30, Duration::from_secs(2)).await;
            (v.len() == 30).then_some(v)
        }
    })
    .await;
    for d in &first[..20] {
        assert!(ack_sync(&c0, d, OP).await, "ack {} confirmed", d.stream_seq);
    }
    let victim = leader_index(&cluster, &c0, "K").await;
    cluster.kill(victim);
    let survivor = (0..3).find(|&i| i != victim).expect("survivor");
    let nc = connect(cluster.node(survivor)).await;
    let info = consumer_info(&nc, "K", "w").await;
    assert_eq!(info["ack_floor"]["stream_seq"], 20, "{info}");
    // Everything not acknowledged comes back (21..30 after their ack wait), nothing acked does.
    let mut seen = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + ELECTION;
    while seen.len() < 40 && tokio::time::Instant::now() < deadline {
        for d in pull(&nc, "K", "w", 50, Duration::from_secs(1)).await {
            assert!(
                d.stream_seq > 20,
                "acknowledged message {} redelivered",
                d.stream_seq
            );
            if d.stream_seq <= 30 {
                assert!(d.delivered >= 2, "redelivery counts: {d:?}");
            }
            seen.insert(d.stream_seq);
            ack_sync(&nc, &d, OP).await;
        }
    }
    assert_eq!(seen, (21..=60).collect::<BTreeSet<u64>>());
    cluster.restart(victim).await.expect("restart");
    let rejoined = connect(cluster.node(victim)).await;
    let info = consumer_info(&rejoined, "K", "w").await;
    assert_eq!(info["num_pending"], 0, "{info}");
}

/// Through every node (the stream leader's and the followers'), a pull sent right after a NAK
/// gets the NAKed message again: the NAK and the pull reach the leader's engine in the order
/// the client sent them, forwarded or not. A jetraft guarantee that nats-server does not give
/// (there this fails within ten rounds), so it runs against jetraft only.
#[tokio::test]
async fn a_pull_right_after_a_nak_gets_it_again_through_every_node() {
    if jetraft_tests::harness::server_kind() != jetraft_tests::harness::ServerKind::Jetraft {
        return;
    }
    let cluster = Cluster::start(3, "js").await.expect("cluster");
    let c0 = connect(cluster.node(0)).await;
    let body = json!({"name": "NK", "subjects": ["nk"], "num_replicas": 3});
    let r = api(&c0, "$JS.API.STREAM.CREATE.NK", body).await;
    assert!(r["error"].is_null(), "{r}");
    publish_acked(&c0, "nk", "one", "1").await;
    publish_acked(&c0, "nk", "two", "2").await;
    for i in 0..3 {
        let name = format!("C{i}");
        let cfg = json!({"stream_name": "NK", "config": {"durable_name": name, "ack_policy": "explicit"}});
        let r = api(&c0, &format!("$JS.API.CONSUMER.CREATE.NK.{name}"), cfg).await;
        assert!(r["error"].is_null(), "{r}");
        let nc = connect(cluster.node(i)).await;
        let mut got = wait_for("first pull", ELECTION, || {
            let (nc, name) = (nc.clone(), name.clone());
            async move {
                let got = pull(&nc, "NK", &name, 1, Duration::from_secs(1)).await;
                (!got.is_empty()).then_some(got)
            }
        })
        .await;
        for round in 1..=10 {
            assert_eq!(got[0].stream_seq, 1, "node {i} round {round}: {got:?}");
            assert_eq!(got[0].delivered, round, "node {i} round {round}");
            nc.publish(got[0].reply.clone(), "-NAK".into())
                .await
                .expect("nak");
            got = pull(&nc, "NK", &name, 1, Duration::from_secs(2)).await;
            assert_eq!(got.len(), 1, "node {i} round {round}");
        }
    }
}
