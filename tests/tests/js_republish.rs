//! Stream `republish` and the stream-level `subject_transform` through async-nats: stored
//! messages come out again on the mapped subject with nats-server's headers (and only the
//! headers with `headers_only`); messages are stored under the transformed subject; a republish
//! destination inside the stream's own subjects is refused. On three nodes each message is
//! republished once, also while the stream's leader changes.
//!
//! Runs against the real nats-server too (`JETRAFT_TEST_SERVER=nats-server`).

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use futures_util::StreamExt;
use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::jsapi::{api, publish_acked};
use jetraft_tests::harness::{connect, start_server, within};
use serde_json::{Value, json};

const OP: Duration = Duration::from_secs(10);

fn header(m: &async_nats::Message, name: &str) -> String {
    m.headers
        .as_ref()
        .and_then(|h| h.get(name))
        .map(|v| v.as_str().to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn stored_messages_are_republished_with_their_position() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let mut copies = nc.subscribe("copy.>").await.expect("subscribe");
    let mut sizes = nc.subscribe("sizes.>").await.expect("subscribe");
    nc.flush().await.expect("flush");
    within(
        OP,
        "create",
        js.create_stream(stream::Config {
            name: "ORD".into(),
            subjects: vec!["ord.*".into()],
            republish: Some(stream::Republish {
                source: "ord.*".into(),
                destination: "copy.{{wildcard(1)}}".into(),
                headers_only: false,
            }),
            ..Default::default()
        }),
    )
    .await
    .expect("create");
    for (subject, body) in [("ord.a", "one"), ("ord.b", "two"), ("ord.a", "three")] {
        js.publish(subject, Bytes::from(body))
            .await
            .expect("publish")
            .await
            .expect("ack");
    }
    let mut got = Vec::new();
    for _ in 0..3 {
        let m = within(OP, "copy", copies.next()).await.expect("copy");
        got.push((
            m.subject.to_string(),
            String::from_utf8_lossy(&m.payload).into_owned(),
            header(&m, "Nats-Stream"),
            header(&m, "Nats-Subject"),
            header(&m, "Nats-Sequence"),
            header(&m, "Nats-Last-Sequence"),
        ));
        assert!(!header(&m, "Nats-Time-Stamp").is_empty());
    }
    let row = |s: &str, p: &str, subj: &str, seq: &str, last: &str| {
        (
            s.into(),
            p.into(),
            "ORD".to_string(),
            subj.into(),
            seq.into(),
            last.into(),
        )
    };
    assert_eq!(
        got,
        [
            row("copy.a", "one", "ord.a", "1", "0"),
            row("copy.b", "two", "ord.b", "2", "0"),
            row("copy.a", "three", "ord.a", "3", "1"),
        ]
    );

    // headers_only: the size instead of the payload.
    let mut cfg = js
        .get_stream("ORD")
        .await
        .expect("stream")
        .cached_info()
        .config
        .clone();
    cfg.republish = Some(stream::Republish {
        source: ">".into(),
        destination: "sizes.>".into(),
        headers_only: true,
    });
    js.update_stream(cfg).await.expect("update");
    js.publish("ord.c", Bytes::from_static(b"12345"))
        .await
        .expect("publish")
        .await
        .expect("ack");
    let m = within(OP, "size", sizes.next()).await.expect("size");
    assert_eq!(m.subject.as_str(), "sizes.ord.c");
    assert!(m.payload.is_empty());
    assert_eq!(header(&m, "Nats-Msg-Size"), "5");
    assert_eq!(header(&m, "Nats-Sequence"), "4");
}

#[tokio::test]
async fn subject_transform_stores_under_the_mapped_subject_and_cycles_are_refused() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let r = api(
        &nc,
        "$JS.API.STREAM.CREATE.TR",
        json!({"name": "TR", "subjects": ["in.*"],
               "subject_transform": {"src": "in.*", "dest": "kept.{{wildcard(1)}}"}}),
    )
    .await;
    assert!(r["error"].is_null(), "{r}");
    let ack = publish_acked(&nc, "in.x", "id1", "hello").await;
    assert_eq!(ack["seq"], 1, "{ack}");
    let m = api(&nc, "$JS.API.STREAM.MSG.GET.TR", json!({"seq": 1})).await;
    assert_eq!(m["message"]["subject"], "kept.x", "{m}");

    let r = api(
        &nc,
        "$JS.API.STREAM.CREATE.CYC",
        json!({"name": "CYC", "subjects": ["cyc.>"], "republish": {"src": ">", "dest": "cyc.again"}}),
    )
    .await;
    assert_eq!(r["error"]["err_code"], 10052, "{r}");
    assert!(
        r["error"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("republish destination forms a cycle")),
        "{r}"
    );
}

#[tokio::test]
async fn three_nodes_republish_each_message_once_through_a_leader_change() {
    let cluster = Cluster::start(3, "rep").await.expect("cluster");
    let nc = connect(cluster.node(1)).await;
    let mut copies = nc.subscribe("mirror.>").await.expect("subscribe");
    nc.flush().await.expect("flush");
    let r = api(
        &nc,
        "$JS.API.STREAM.CREATE.R3P",
        json!({"name": "R3P", "subjects": ["r3p.>"], "num_replicas": 3,
               "republish": {"src": ">", "dest": "mirror.>"}}),
    )
    .await;
    assert!(r["error"].is_null(), "{r}");
    const N: u64 = 300;
    for i in 1..=N {
        if i == N / 2 {
            let r = api(&nc, "$JS.API.STREAM.LEADER.STEPDOWN.R3P", Value::Null).await;
            assert_eq!(r["success"], true, "{r}");
        }
        publish_acked(&nc, &format!("r3p.{}", i % 7), &format!("id{i}"), "x").await;
    }
    let info = api(&nc, "$JS.API.STREAM.INFO.R3P", Value::Null).await;
    let stored = info["state"]["messages"].as_u64().expect("messages");
    assert_eq!(stored, N, "{info}");
    // Collect what arrives within a quiet second after the last one.
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(1), copies.next()).await {
        let seq: u64 = header(&m, "Nats-Sequence").parse().expect("sequence");
        *seen.entry(seq).or_default() += 1;
    }
    let dups: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dups.is_empty(), "republished twice: {dups:?}");
    assert!(seen.keys().all(|s| (1..=N).contains(s)), "{seen:?}");
    // Only messages whose proposer lost its leadership between commit and apply can be
    // missed (the stepdown above); everything else is republished.
    let missed = N - seen.len() as u64;
    eprintln!("republished {} of {N} once, {missed} missed", seen.len());
    assert!(missed <= 5, "{missed} of {N} never republished");
}
