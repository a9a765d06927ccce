//! JetStream per account on a 3-node cluster: two accounts each have an R3 stream named
//! ORDERS, published to and consumed through different nodes (requests, publishes, pulls and
//! acks forwarded in their account), and A's stream keeps its messages through a kill of its
//! leader; a backup of an R3 stream of A restores into B through other nodes. Runs against
//! nats-server too (`JETRAFT_TEST_SERVER=nats-server NATS_SERVER_BIN=...`).

use std::time::Duration;

use futures_util::StreamExt as _;
use jetraft_tests::harness::jsapi::{api, info_with_leader, leader_index, publish_acked};
use jetraft_tests::harness::{Cluster, login, wait_for, within};
use serde_json::{Value, json};

const OP: Duration = Duration::from_secs(5);

const CONFIG: &str = r#"
accounts {
  A: { users: [ { user: a, password: a } ], jetstream: enabled }
  B: { users: [ { user: b, password: b } ], jetstream: enabled }
}
"#;

#[tokio::test]
async fn r3_streams_of_the_same_name_stay_apart_and_survive_a_leader_kill() {
    let mut cluster = Cluster::start_with(3, "acctjs", Some(CONFIG))
        .await
        .expect("start cluster");
    let a1 = login(cluster.node(0), "a").await;
    let b2 = login(cluster.node(1), "b").await;
    let cfg = json!({"name": "ORDERS", "subjects": ["orders.>"], "num_replicas": 3});
    for nc in [&a1, &b2] {
        let created = api(nc, "$JS.API.STREAM.CREATE.ORDERS", cfg.clone()).await;
        assert_eq!(created["config"]["num_replicas"], 3, "{created}");
    }
    let a3 = login(cluster.node(2), "a").await;
    let b3 = login(cluster.node(2), "b").await;
    for i in 1..=5 {
        let ack = publish_acked(&a3, "orders.a", &format!("a{i}"), "from a").await;
        assert_eq!(ack["seq"], i, "{ack}");
    }
    let ack = publish_acked(&b3, "orders.b", "b1", "from b").await;
    assert_eq!(ack["seq"], 1, "{ack}");
    let info = info_with_leader(&b2, "ORDERS").await;
    assert_eq!(info["state"]["messages"], 1);

    // A pull consumer of A through the node that is not A's publisher nor creator.
    let js = async_nats::jetstream::new(a3.clone());
    let stream = js.get_stream("ORDERS").await.expect("A's stream");
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("work".into()),
            ..Default::default()
        })
        .await
        .expect("consumer");
    let mut batch = consumer
        .fetch()
        .max_messages(2)
        .expires(OP)
        .messages()
        .await
        .expect("fetch");
    let mut got = 0;
    while let Some(m) = within(OP, "pull", batch.next()).await {
        let m = m.expect("message");
        assert_eq!(m.payload.as_ref(), b"from a");
        m.double_ack().await.expect("ack");
        got += 1;
    }
    assert_eq!(got, 2);

    // Kill A's stream leader: the other replicas keep every acknowledged message.
    let leader = leader_index(&cluster, &a1, "ORDERS").await;
    let killed = cluster.node(leader).name().to_string();
    cluster.kill(leader);
    assert!(!cluster.node_running(leader), "{killed} still runs");
    let survivor = (0..3).find(|&i| i != leader).expect("a survivor");
    let a = login(cluster.node(survivor), "a").await;
    let info = wait_for("A's stream after the kill", Duration::from_secs(30), || {
        let (a, killed) = (a.clone(), killed.clone());
        async move {
            let info = api(&a, "$JS.API.STREAM.INFO.ORDERS", Value::Null).await;
            let led = info["cluster"]["leader"]
                .as_str()
                .is_some_and(|l| !l.is_empty());
            let moved = info["cluster"]["leader"] != killed.as_str();
            (led && moved && info["state"]["messages"] == 5).then_some(info)
        }
    })
    .await;
    assert_eq!(info["state"]["last_seq"], 5);
    let ack = publish_acked(&a, "orders.a", "a6", "from a").await;
    assert_eq!(ack["seq"], 6, "{ack}");
    let consumer = api(&a, "$JS.API.CONSUMER.INFO.ORDERS.work", Value::Null).await;
    assert_eq!(consumer["ack_floor"]["stream_seq"], 2, "{consumer}");
    let b = login(cluster.node(survivor), "b").await;
    let info = info_with_leader(&b, "ORDERS").await;
    assert_eq!(
        info["state"]["messages"], 1,
        "B's stream is B's own: {info}"
    );
}

#[tokio::test]
async fn kv_per_account_across_nodes() {
    let cluster = Cluster::start_with(3, "acctkv", Some(CONFIG))
        .await
        .expect("start cluster");
    // Retried while the cluster's JetStream settles after formation (nats-server needs it).
    let bucket = |nc: async_nats::Client| async move {
        let js = async_nats::jetstream::new(nc);
        wait_for("bucket", Duration::from_secs(30), || {
            let js = js.clone();
            async move {
                js.create_key_value(async_nats::jetstream::kv::Config {
                    bucket: "cfg".into(),
                    num_replicas: 3,
                    ..Default::default()
                })
                .await
                .ok()
            }
        })
        .await
    };
    let kv_a = bucket(login(cluster.node(0), "a").await).await;
    let kv_b = bucket(login(cluster.node(1), "b").await).await;
    kv_a.put("k", "for a".into()).await.expect("put a");
    kv_b.put("k", "for b".into()).await.expect("put b");
    // Read through the third node: each account gets its own value.
    let a3 = async_nats::jetstream::new(login(cluster.node(2), "a").await)
        .get_key_value("cfg")
        .await
        .expect("A's bucket");
    let b3 = async_nats::jetstream::new(login(cluster.node(2), "b").await)
        .get_key_value("cfg")
        .await
        .expect("B's bucket");
    let value = |kv: async_nats::jetstream::kv::Store| async move {
        wait_for("kv value", Duration::from_secs(10), || {
            let kv = kv.clone();
            async move { kv.get("k").await.ok().flatten() }
        })
        .await
    };
    assert_eq!(value(a3).await.as_ref(), b"for a");
    assert_eq!(value(b3).await.as_ref(), b"for b");
}

#[tokio::test]
async fn an_accounts_r3_backup_restores_into_another_account_through_any_node() {
    use jetraft_tests::harness::backup::{Acks, messages, restore, snapshot};
    let cluster = Cluster::start_with(3, "acctbak", Some(CONFIG))
        .await
        .expect("start cluster");
    let a1 = login(cluster.node(0), "a").await;
    let cfg = json!({"name": "ORDERS", "subjects": ["orders.>"], "num_replicas": 3});
    let created = api(&a1, "$JS.API.STREAM.CREATE.ORDERS", cfg).await;
    assert_eq!(created["config"]["num_replicas"], 3, "{created}");
    for i in 1..=3 {
        let ack = publish_acked(&a1, "orders.a", &format!("a{i}"), "from a").await;
        assert_eq!(ack["seq"], i, "{ack}");
    }
    info_with_leader(&a1, "ORDERS").await;
    // Taken through a node that need not lead the stream, restored through another one.
    let a3 = login(cluster.node(2), "a").await;
    let backup = snapshot(&a3, "ORDERS", json!({"no_consumers": true}), Acks::Prompt).await;
    assert_eq!(
        backup.response["state"]["messages"], 3,
        "{}",
        backup.response
    );
    let b2 = login(cluster.node(1), "b").await;
    let (answer, done) = restore(&b2, "ORDERS", &backup, 1024).await;
    let done = done.unwrap_or_else(|| panic!("no final answer: {answer}"));
    assert_eq!(
        (&done["state"]["messages"], &done["config"]["num_replicas"]),
        (&json!(3), &json!(3)),
        "{done}"
    );
    let info = info_with_leader(&b2, "ORDERS").await;
    assert_eq!(info["state"]["messages"], 3, "{info}");
    assert_eq!(
        messages(&b2, "ORDERS", 1, 3).await,
        messages(&a1, "ORDERS", 1, 3).await
    );
    // The restored stream captures B's publishes only.
    let ack = publish_acked(&b2, "orders.b", "b4", "from b").await;
    assert_eq!(ack["seq"], 4, "{ack}");
    let info = info_with_leader(&a3, "ORDERS").await;
    assert_eq!(info["state"]["messages"], 3, "{info}");
}

#[tokio::test]
async fn account_info_adds_up_the_api_counters_of_every_node() {
    let cluster = Cluster::start_with(3, "acctapi", Some(CONFIG))
        .await
        .expect("start cluster");
    let b: Vec<async_nats::Client> =
        futures_util::future::join_all((0..3).map(|i| login(cluster.node(i), "b"))).await;
    // R3: every node hosts the account's stream (nats-server's nodes then send the account's
    // usage, API counts included, to each other periodically).
    let cfg = json!({"name": "C1", "subjects": ["c1"], "num_replicas": 3});
    let created = api(&b[0], "$JS.API.STREAM.CREATE.C1", cfg).await;
    assert_eq!(created["config"]["name"], "C1", "{created}");
    let missing = api(&b[1], "$JS.API.STREAM.INFO.NOPE", Value::Null).await;

    assert_eq!(missing["error"]["err_code"], 10059, "{missing}");
    let other = json!({"name": "C1", "subjects": ["other"], "num_replicas": 3});
    let taken = api(&b[2], "$JS.API.STREAM.CREATE.C1", other).await;
    assert_eq!(taken["error"]["err_code"], 10058, "{taken}");
    let names = api(&b[1], "$JS.API.STREAM.NAMES", Value::Null).await;

    assert_eq!(names["streams"], json!(["C1"]), "{names}");
    // 4 answers, 2 of them errors, each counted once wherever it was answered, and every
    // account info after its own answer. nats-server adds up its servers' counts from usage
    // updates it sends at most every 250 ms, and may hold a server's last answer back until
    // that server has more to send: one answer may be missing there, none more, none extra.
    let mut polls = 0u64;
    wait_for("the account's API counters over the cluster", OP, || {
        let nc = b[2].clone();
        let want = 4 + polls;
        polls += 1;
        async move {
            let info = api(&nc, "$JS.API.INFO", Value::Null).await;
            let total = info["api"]["total"].as_u64().unwrap_or(0);
            (info["api"]["errors"] == 2 && (want - 1..=want).contains(&total)).then_some(())
        }
    })
    .await;
    // A's counters are its own.
    let a = login(cluster.node(0), "a").await;
    let info = api(&a, "$JS.API.INFO", Value::Null).await;
    assert_eq!(
        (&info["api"]["total"], &info["api"]["errors"]),
        (&json!(0), &json!(0)),
        "{info}"
    );
}
