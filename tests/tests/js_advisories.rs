//! JetStream advisories (`$JS.EVENT.ADVISORY.>`) through async-nats: stream and consumer
//! create/update/delete and consumer pause on one node, in nats-server's order and JSON; on
//! three nodes each event is published once (not once per replica), and a stream leader change
//! announces the new leader.
//!
//! Runs against the real nats-server too (`JETRAFT_TEST_SERVER=nats-server`).

use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use futures_util::StreamExt;
use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::jsapi::{api, info_with_leader};
use jetraft_tests::harness::{connect, start_server, within};
use serde_json::{Value, json};

const OP: Duration = Duration::from_secs(10);

/// The next advisory on `sub`: its subject and JSON body.
async fn next(sub: &mut async_nats::Subscriber) -> (String, Value) {
    let m = within(OP, "advisory", sub.next())
        .await
        .expect("subscription open");
    let body = serde_json::from_slice(&m.payload).expect("advisory is JSON");
    (m.subject.to_string(), body)
}

/// Advisories on `sub` until one on `subject` arrives (others of no interest here, e.g. API
/// audits, are skipped); fails after [`OP`].
async fn until(sub: &mut async_nats::Subscriber, subject: &str) -> Value {
    let deadline = tokio::time::Instant::now() + OP;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let (s, body) = within(left, subject, next(sub)).await;
        if s == subject {
            return body;
        }
    }
}

fn assert_event(body: &Value, kind: &str) {
    assert_eq!(body["type"], kind, "{body}");
    assert_eq!(body["id"].as_str().map(str::len), Some(22), "{body}");
    assert!(
        body["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{body}"
    );
}

#[tokio::test]
async fn stream_and_consumer_lifecycle_advisories() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let mut sub = nc
        .subscribe("$JS.EVENT.ADVISORY.>")
        .await
        .expect("subscribe");
    nc.flush().await.expect("flush");

    let cfg = stream::Config {
        name: "ADV".into(),
        subjects: vec!["adv.>".into()],
        ..Default::default()
    };
    let s = within(OP, "create", js.create_stream(cfg.clone()))
        .await
        .expect("create");
    let b = until(&mut sub, "$JS.EVENT.ADVISORY.STREAM.CREATED.ADV").await;
    assert_event(&b, "io.nats.jetstream.advisory.v1.stream_action");
    assert_eq!(
        (b["stream"].as_str(), b["action"].as_str()),
        (Some("ADV"), Some("create"))
    );

    within(
        OP,
        "update",
        js.update_stream(stream::Config {
            max_messages: 10,
            ..cfg
        }),
    )
    .await
    .expect("update");
    let b = until(&mut sub, "$JS.EVENT.ADVISORY.STREAM.UPDATED.ADV").await;
    assert_eq!(b["action"], "modify", "{b}");

    s.create_consumer(pull::Config {
        durable_name: Some("C".into()),
        ..Default::default()
    })
    .await
    .expect("consumer");
    let b = until(&mut sub, "$JS.EVENT.ADVISORY.CONSUMER.CREATED.ADV.C").await;
    assert_event(&b, "io.nats.jetstream.advisory.v1.consumer_action");
    assert_eq!(
        (b["consumer"].as_str(), b["action"].as_str()),
        (Some("C"), Some("create"))
    );

    // Pause, then resume.
    let r = api(
        &nc,
        "$JS.API.CONSUMER.PAUSE.ADV.C",
        json!({"pause_until": "2099-01-01T00:00:00Z"}),
    )
    .await;
    assert!(r["error"].is_null(), "{r}");
    let b = until(&mut sub, "$JS.EVENT.ADVISORY.CONSUMER.PAUSE.ADV.C").await;
    assert_event(&b, "io.nats.jetstream.advisory.v1.consumer_pause");
    assert_eq!(b["paused"], true, "{b}");
    assert!(
        b["pause_until"]
            .as_str()
            .is_some_and(|t| t.starts_with("2099-01-01")),
        "{b}"
    );
    api(&nc, "$JS.API.CONSUMER.PAUSE.ADV.C", json!({})).await;
    let b = until(&mut sub, "$JS.EVENT.ADVISORY.CONSUMER.PAUSE.ADV.C").await;
    assert_eq!(b["paused"], false, "{b}");

    s.delete_consumer("C").await.expect("delete consumer");
    let b = until(&mut sub, "$JS.EVENT.ADVISORY.CONSUMER.DELETED.ADV.C").await;
    assert_eq!(b["action"], "delete", "{b}");

    js.delete_stream("ADV").await.expect("delete stream");
    let b = until(&mut sub, "$JS.EVENT.ADVISORY.STREAM.DELETED.ADV").await;
    assert_eq!(b["action"], "delete", "{b}");
}

#[tokio::test]
async fn an_idempotent_create_sends_no_second_advisory() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let mut sub = nc
        .subscribe("$JS.EVENT.ADVISORY.STREAM.CREATED.>")
        .await
        .expect("subscribe");
    nc.flush().await.expect("flush");
    let cfg = stream::Config {
        name: "ONCE".into(),
        subjects: vec!["once".into()],
        ..Default::default()
    };
    js.create_stream(cfg.clone()).await.expect("create");
    js.create_stream(cfg).await.expect("same config again");
    next(&mut sub).await;
    let again = tokio::time::timeout(Duration::from_millis(500), sub.next()).await;
    assert!(again.is_err(), "a second created advisory: {again:?}");
}

#[tokio::test]
async fn three_nodes_publish_each_event_once_and_announce_new_leaders() {
    let cluster = Cluster::start(3, "adv").await.expect("cluster");
    let nc = connect(cluster.node(0)).await;
    let mut sub = nc
        .subscribe("$JS.EVENT.ADVISORY.STREAM.>")
        .await
        .expect("subscribe");
    nc.flush().await.expect("flush");
    // `api` retries while the cluster's JetStream is still forming.
    let r = api(
        &nc,
        "$JS.API.STREAM.CREATE.R3",
        json!({"name": "R3", "subjects": ["r3"], "num_replicas": 3}),
    )
    .await;
    assert!(r["error"].is_null(), "{r}");
    let before = info_with_leader(&nc, "R3").await["cluster"]["leader"].clone();

    // The creation and the first leader, each once, whatever node sent them.
    let mut created = 0;
    let mut elected = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while let Ok(Some(m)) = tokio::time::timeout_at(deadline, sub.next()).await {
        let b: Value = serde_json::from_slice(&m.payload).expect("json");
        match m.subject.as_str() {
            "$JS.EVENT.ADVISORY.STREAM.CREATED.R3" => created += 1,
            "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.R3" => elected.push(b),
            _ => {}
        }
    }
    assert_eq!(created, 1);
    assert_eq!(elected.len(), 1, "{elected:?}");
    assert_event(
        &elected[0],
        "io.nats.jetstream.advisory.v1.stream_leader_elected",
    );
    assert_eq!(elected[0]["leader"], before, "{elected:?}");
    assert!(elected[0]["replicas"].is_array(), "{elected:?}");

    // A stepdown: the new leader announces itself.
    let r = api(&nc, "$JS.API.STREAM.LEADER.STEPDOWN.R3", Value::Null).await;
    assert_eq!(r["success"], true, "{r}");
    let b = until(&mut sub, "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.R3").await;
    assert_ne!(b["leader"], before, "{b}");
    assert!(b["leader"].as_str().is_some_and(|l| !l.is_empty()), "{b}");
}
