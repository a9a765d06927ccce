//! Accounts across a 3-node cluster: each account stays an isolated namespace over the cluster
//! links, and service and stream imports work with the parties on different nodes. Runs
//! against nats-server too (`JETRAFT_TEST_SERVER=nats-server NATS_SERVER_BIN=...`).

use std::time::Duration;

use futures_util::StreamExt as _;
use jetraft_tests::harness::{Cluster, login, round_trip, wait_for};

/// Bound for interest to reach every node.
const SPREAD: Duration = Duration::from_secs(20);

const CONFIG: &str = r#"
accounts {
  A: {
    users: [ { user: a, password: a } ]
    exports: [ { service: "svc.>" }, { stream: "ev.>" } ]
  }
  B: {
    users: [ { user: b, password: b } ]
    imports: [
      { service: { account: A, subject: "svc.time" }, to: "time.now" }
      { stream: { account: A, subject: "ev.>" }, prefix: "from_a" }
    ]
  }
  C: { users: [ { user: c, password: c } ] }
}
"#;

async fn cluster() -> Cluster {
    Cluster::start_with(3, "accounts", Some(CONFIG))
        .await
        .expect("start cluster")
}

#[tokio::test]
async fn accounts_stay_isolated_across_nodes() {
    let cluster = cluster().await;
    let a1 = login(cluster.node(0), "a").await;
    let a2 = login(cluster.node(1), "a").await;
    let c2 = login(cluster.node(1), "c").await;
    let c3 = login(cluster.node(2), "c").await;
    let mut in_a = a1.subscribe("x.>").await.expect("sub a");
    let mut in_c = c3.subscribe("x.>").await.expect("sub c");
    round_trip(&a1).await;
    round_trip(&c3).await;
    // Until A's interest reached node 2, publish in C first, then in A, on the same subjects:
    // every message A's subscriber gets must be A's, and C's subscriber gets only C's.
    let deadline = tokio::time::Instant::now() + SPREAD;
    for n in 0u32.. {
        assert!(
            tokio::time::Instant::now() < deadline,
            "A's message never crossed nodes"
        );
        c2.publish("x.same", format!("c-{n}").into())
            .await
            .expect("pub c");
        round_trip(&c2).await;
        a2.publish("x.same", format!("a-{n}").into())
            .await
            .expect("pub a");
        round_trip(&a2).await;
        if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(200), in_a.next()).await {
            let body = String::from_utf8_lossy(&m.payload).into_owned();
            assert!(body.starts_with("a-"), "A's subscriber got {body:?}");
            break;
        }
    }
    // C's subscriber (node 3) gets C's messages from node 2 once its interest spread, and never
    // A's (published on the same subject in the loop above).
    let deadline = tokio::time::Instant::now() + SPREAD;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "C's message never crossed nodes"
        );
        if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(200), in_c.next()).await {
            let body = String::from_utf8_lossy(&m.payload).into_owned();
            assert!(body.starts_with("c-"), "C's subscriber got {body:?}");
            break;
        }
        c2.publish("x.same", "c-late".into()).await.expect("pub c");
        round_trip(&c2).await;
    }
}

#[tokio::test]
async fn a_service_import_works_with_requester_and_responder_on_different_nodes() {
    let cluster = cluster().await;
    let a1 = login(cluster.node(0), "a").await;
    let b3 = login(cluster.node(2), "b").await;
    let mut svc = a1.subscribe("svc.>").await.expect("responder");
    round_trip(&a1).await;
    tokio::spawn({
        let a1 = a1.clone();
        async move {
            while let Some(req) = svc.next().await {
                if let Some(reply) = req.reply {
                    let _ = a1.publish(reply, req.subject.to_string().into()).await;
                }
            }
        }
    });
    let answer = wait_for("an answer through the import", SPREAD, || {
        let b3 = b3.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(1), b3.request("time.now", "?".into()))
                .await
                .ok()?
                .ok()
        }
    })
    .await;
    assert_eq!(answer.payload.as_ref(), b"svc.time");
    // Again from the responder's own node's neighbour: answers keep coming back.
    let b2 = login(cluster.node(1), "b").await;
    let answer = wait_for("an answer from node 2", SPREAD, || {
        let b2 = b2.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(1), b2.request("time.now", "?".into()))
                .await
                .ok()?
                .ok()
        }
    })
    .await;
    assert_eq!(answer.payload.as_ref(), b"svc.time");
}

#[tokio::test]
async fn a_stream_import_reaches_a_subscriber_on_another_node() {
    let cluster = cluster().await;
    let a1 = login(cluster.node(0), "a").await;
    let b2 = login(cluster.node(1), "b").await;
    let mut in_b = b2.subscribe("from_a.>").await.expect("sub b");
    round_trip(&b2).await;
    let deadline = tokio::time::Instant::now() + SPREAD;
    let m = loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the imported message never reached node 2"
        );
        a1.publish("ev.x", "e".into()).await.expect("pub");
        round_trip(&a1).await;
        if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(200), in_b.next()).await {
            break m;
        }
    };
    assert_eq!(m.subject.as_str(), "from_a.ev.x");
}
