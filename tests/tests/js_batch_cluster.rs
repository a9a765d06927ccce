//! Atomic batch publish on three nodes (R3): a batch published through a node that does not
//! lead the stream is committed as one entry and is on every replica (checked after the
//! leadership moved); a refused batch stores nothing anywhere; a batch whose first messages
//! were held by a leader that stepped down cannot be committed on the new one (10176).
//!
//! Runs against the real nats-server too (`JETRAFT_TEST_SERVER=nats-server`).

use jetraft_tests::harness::batch::{Part, headers, json_of, part, publish_batch, request};
use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::connect;
use jetraft_tests::harness::jsapi::{api, info_with_leader, leader_index};
use serde_json::{Value, json};

#[tokio::test]
async fn r3_batches_are_all_or_nothing_on_every_replica() {
    let cluster = Cluster::start(3, "batch").await.expect("cluster");
    let nc0 = connect(cluster.node(0)).await;
    let r = api(
        &nc0,
        "$JS.API.STREAM.CREATE.R3B",
        json!({"name": "R3B", "subjects": ["r3b.>"], "num_replicas": 3, "allow_atomic": true}),
    )
    .await;
    assert!(r["error"].is_null(), "{r}");
    info_with_leader(&nc0, "R3B").await;
    let leader = leader_index(&cluster, &nc0, "R3B").await;
    let nc = connect(cluster.node((leader + 1) % 3)).await;

    let ack = publish_batch(
        &nc,
        "r3-1",
        &[part("r3b.a", "1"), part("r3b.b", "2"), part("r3b.a", "3")],
        "1",
    )
    .await;
    assert_eq!(
        ack,
        json!({"stream": "R3B", "seq": 3, "batch": "r3-1", "count": 3})
    );
    let refused = Part {
        headers: vec![("Nats-Expected-Last-Subject-Sequence", "1")],
        ..part("r3b.b", "x")
    };
    let ack = publish_batch(&nc, "r3-2", &[part("r3b.c", "4"), refused], "1").await;
    assert_eq!(ack["error"]["err_code"], 10071, "{ack}");

    // Hold the first message of a batch on this leader, then move the leadership.
    let held = request(&nc, "r3b.d", headers("moved", 1, &[]), "5").await;
    assert!(held.is_empty(), "{held:?}");
    let r = api(&nc, "$JS.API.STREAM.LEADER.STEPDOWN.R3B", Value::Null).await;
    assert_eq!(r["success"], true, "{r}");
    let info = info_with_leader(&nc, "R3B").await;
    assert_ne!(leader_index(&cluster, &nc, "R3B").await, leader, "{info}");
    // The new leader has the committed batch, and nothing of the refused one.
    assert_eq!(info["state"]["messages"], 3, "{info}");
    assert_eq!(info["state"]["num_subjects"], 2, "{info}");
    let commit = request(
        &nc,
        "r3b.d",
        headers("moved", 2, &[("Nats-Batch-Commit", "1")]),
        "6",
    )
    .await;
    assert_eq!(json_of(&commit)["error"]["err_code"], 10176);
    let info = info_with_leader(&nc, "R3B").await;
    assert_eq!(info["state"]["messages"], 3, "{info}");
}
