//! The quorum-lost advisories: an R3 stream whose two followers are killed stalls, and its
//! leader's node publishes `$JS.EVENT.ADVISORY.STREAM.QUORUM_LOST.<stream>`
//! (`stream_quorum_lost`, with the replicas) and one `CONSUMER.QUORUM_LOST` per consumer, as
//! nats-server does (it sends them when its leader steps down for lack of quorum, about 10 s
//! after the followers went silent). Runs against nats-server too.

use std::time::Duration;

use futures_util::StreamExt as _;
use jetraft_tests::harness::{Cluster, jsapi, round_trip};
use serde_json::{Value, json};

/// Bound on the advisory: nats-server's lost-quorum interval (10 s) plus election slack.
const ADVISE: Duration = Duration::from_secs(40);

#[tokio::test]
async fn a_stream_without_quorum_is_advised() {
    let mut cluster = Cluster::start(3, "quorum").await.expect("start cluster");
    cluster.wait_formed().await.expect("formed");
    let nc = async_nats::connect(cluster.node(0).client_url())
        .await
        .expect("connect");
    let created = jsapi::api(
        &nc,
        "$JS.API.STREAM.CREATE.Q",
        json!({"name": "Q", "subjects": ["q.>"], "num_replicas": 3}),
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");
    let consumer = jsapi::api(
        &nc,
        "$JS.API.CONSUMER.CREATE.Q.C",
        json!({"stream_name": "Q", "config": {"durable_name": "C", "ack_policy": "explicit"}}),
    )
    .await;
    assert!(consumer.get("error").is_none(), "{consumer}");
    let leader = jsapi::leader_index(&cluster, &nc, "Q").await;
    let on_leader = async_nats::connect(cluster.node(leader).client_url())
        .await
        .expect("connect");
    let mut advisories = on_leader
        .subscribe("$JS.EVENT.ADVISORY.*.QUORUM_LOST.>")
        .await
        .expect("sub");
    round_trip(&on_leader).await;
    for i in 0..3 {
        if i != leader {
            cluster.kill(i);
        }
    }
    let mut stream = None;
    let mut consumer = None;
    let deadline = tokio::time::Instant::now() + ADVISE;
    while stream.is_none() || consumer.is_none() {
        let Ok(Some(m)) = tokio::time::timeout_at(deadline, advisories.next()).await else {
            panic!("no quorum-lost advisory (stream {stream:?}, consumer {consumer:?})");
        };
        let a: Value = serde_json::from_slice(&m.payload).expect("JSON");
        match m.subject.as_str() {
            "$JS.EVENT.ADVISORY.STREAM.QUORUM_LOST.Q" => stream = Some(a),
            "$JS.EVENT.ADVISORY.CONSUMER.QUORUM_LOST.Q.C" => consumer = Some(a),
            other => panic!("unexpected advisory {other}: {a}"),
        }
    }
    let s = stream.expect("stream advisory");
    assert_eq!(
        s["type"], "io.nats.jetstream.advisory.v1.stream_quorum_lost",
        "{s}"
    );
    assert_eq!(s["stream"], "Q");
    assert!(s["id"].is_string() && s["timestamp"].is_string(), "{s}");
    assert!(
        s["replicas"].as_array().is_some_and(|r| !r.is_empty()),
        "{s}"
    );
    let keys = |v: &Value| -> Vec<String> {
        v.as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    assert_eq!(
        keys(&s),
        ["id", "replicas", "stream", "timestamp", "type"],
        "{s}"
    );
    let c = consumer.expect("consumer advisory");
    assert_eq!(
        keys(&c),
        ["consumer", "id", "replicas", "stream", "timestamp", "type"],
        "{c}"
    );
    assert_eq!(
        c["type"], "io.nats.jetstream.advisory.v1.consumer_quorum_lost",
        "{c}"
    );
    assert_eq!(c["stream"], "Q");
    assert_eq!(c["consumer"], "C");
}
