//! Message schedules on three nodes (R3): a schedule still pending when the stream's leader
//! steps down is fired by the new leader, exactly once (the fired message and the removal of
//! the schedule are one replicated entry).
//!
//! Runs against the real nats-server too (`JETRAFT_TEST_SERVER=nats-server`).

use std::time::Duration;

use async_nats::HeaderMap;
use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::connect;
use jetraft_tests::harness::jsapi::{api, info_with_leader, leader_index};
use jetraft_tests::harness::schedule::{at_in, fired, msg_headers, publish};
use serde_json::{Value, json};

#[tokio::test]
async fn r3_schedule_fires_once_after_a_leader_stepdown() {
    let cluster = Cluster::start(3, "sched").await.expect("cluster");
    let nc = connect(cluster.node(0)).await;
    let r = api(
        &nc,
        "$JS.API.STREAM.CREATE.RSCH",
        json!({"name": "RSCH", "subjects": ["rsch.>"], "num_replicas": 3,
               "allow_msg_schedules": true}),
    )
    .await;
    assert!(r["error"].is_null(), "{r}");
    info_with_leader(&nc, "RSCH").await;
    let before = leader_index(&cluster, &nc, "RSCH").await;
    let mut h = HeaderMap::new();
    h.insert(
        "Nats-Schedule",
        format!("@at {}", at_in(Duration::from_secs(3)).0).as_str(),
    );
    h.insert("Nats-Schedule-Target", "rsch.out");
    let ack = publish(&nc, "rsch.plan", h, "once").await;
    assert_eq!(ack["seq"], 1, "{ack}");
    let r = api(&nc, "$JS.API.STREAM.LEADER.STEPDOWN.RSCH", Value::Null).await;
    assert_eq!(r["success"], true, "{r}");
    info_with_leader(&nc, "RSCH").await;
    assert_ne!(leader_index(&cluster, &nc, "RSCH").await, before);

    let msg = fired(&nc, "RSCH", "rsch.out").await;
    assert!(
        msg_headers(&msg).contains("Nats-Scheduler: rsch.plan"),
        "{msg}"
    );
    // Give a second firing every chance, then count.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let info = info_with_leader(&nc, "RSCH").await;
    assert_eq!(info["state"]["messages"], 1, "{info}");
    assert_eq!(info["state"]["last_seq"], 2, "fired exactly once: {info}");
    // Every replica agrees: each node leads in turn and reports the same state.
    for _ in 0..2 {
        let r = api(&nc, "$JS.API.STREAM.LEADER.STEPDOWN.RSCH", Value::Null).await;
        assert_eq!(r["success"], true, "{r}");
        let info = info_with_leader(&nc, "RSCH").await;
        assert_eq!(
            (&info["state"]["messages"], &info["state"]["last_seq"]),
            (&json!(1), &json!(2)),
            "{info}"
        );
    }
}
