//! Message tracing across a 3-node cluster: a traced message published on one node and
//! delivered to a subscriber on another gives two events, the publisher's node's (ingress,
//! an egress to the peer with hop `1`, `hops: 1`) and the receiving node's (ingress from the
//! peer with `Nats-Trace-Hop: 1` in its request headers, egress to the subscriber), as
//! nats-server sends them; trace-only delivers nothing on either node; a message a stream
//! stores is reported with the stream's `js` event. Runs against nats-server too.

use std::time::Duration;

use async_nats::HeaderMap;
use futures_util::StreamExt as _;
use jetraft_tests::harness::{Cluster, ServerProcess, jsapi, round_trip, within};
use serde_json::Value;

/// Bound on one wait for a message.
const OP: Duration = Duration::from_secs(5);
/// Bound for interest to spread to every node.
const SPREAD: Duration = Duration::from_secs(20);

async fn named(srv: &ServerProcess, name: &str) -> async_nats::Client {
    let opts = async_nats::ConnectOptions::new().name(name);
    within(OP * 2, "connect", Box::pin(opts.connect(srv.client_url())))
        .await
        .expect("connect")
}

fn traced(dest: &str, only: bool) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("Nats-Trace-Dest", dest);
    if only {
        h.insert("Nats-Trace-Only", "true");
    }
    h
}

async fn event(sub: &mut async_nats::Subscriber) -> Value {
    let m = within(OP, "trace event", sub.next()).await.expect("event");
    serde_json::from_slice(&m.payload).expect("event is JSON")
}

fn types(e: &Value) -> Vec<&str> {
    e["events"]
        .as_array()
        .map(|l| l.iter().filter_map(|x| x["type"].as_str()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_traced_message_reports_each_node_it_passes() {
    let mut cluster = Cluster::start(3, "trace").await.expect("start cluster");
    cluster.wait_formed().await.expect("formed");
    let pub_node = cluster.node(0);
    let sub_node = cluster.node(1);
    let pubber = named(pub_node, "pubber").await;
    let subber = named(sub_node, "subber").await;
    let mut traces = pubber.subscribe("trace.>").await.expect("sub trace");
    let mut sub = subber.subscribe("foo.*").await.expect("sub");
    round_trip(&pubber).await;
    round_trip(&subber).await;
    // Until node 1's interest reached node 0, untraced probes go nowhere.
    let deadline = tokio::time::Instant::now() + SPREAD;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "interest never spread"
        );
        pubber
            .publish("foo.probe", "probe".into())
            .await
            .expect("probe");
        round_trip(&pubber).await;
        if tokio::time::timeout(Duration::from_millis(200), sub.next())
            .await
            .is_ok()
        {
            break;
        }
    }
    // Later probes may still be in flight: a sentinel marks the end of them.
    pubber
        .publish("foo.sentinel", "s".into())
        .await
        .expect("sentinel");
    loop {
        let m = within(OP, "sentinel", sub.next()).await.expect("msg");
        if m.subject.as_str() == "foo.sentinel" {
            break;
        }
    }

    pubber
        .publish_with_headers("foo.bar", traced("trace.1", false), "hello".into())
        .await
        .expect("publish");
    let (mut a, mut b) = (event(&mut traces).await, event(&mut traces).await);
    if a["server"]["name"] != pub_node.name() {
        std::mem::swap(&mut a, &mut b);
    }
    // The publisher's node: ingress from the client, egress to the peer.
    assert_eq!(a["server"]["name"], pub_node.name(), "{a}");
    assert_eq!(a["hops"], 1, "{a}");
    assert_eq!(types(&a), ["in", "eg"], "{a}");
    assert_eq!(a["events"][0]["kind"], 0);
    assert_eq!(a["events"][0]["name"], "pubber");
    assert_eq!(a["events"][0]["subj"], "foo.bar");
    let eg = &a["events"][1];
    assert_eq!(eg["kind"], 1, "{a}");
    assert_eq!(eg["name"], sub_node.name(), "{a}");
    assert_eq!(eg["hop"], "1", "{a}");
    // The receiving node: ingress from the peer with the hop header, egress to the client.
    assert_eq!(b["server"]["name"], sub_node.name(), "{b}");
    assert!(b.get("hops").is_none(), "{b}");
    assert_eq!(
        b["request"]["header"]["Nats-Trace-Hop"],
        serde_json::json!(["1"]),
        "{b}"
    );
    assert_eq!(types(&b), ["in", "eg"], "{b}");
    assert_eq!(b["events"][0]["kind"], 1, "{b}");
    assert_eq!(b["events"][0]["name"], pub_node.name(), "{b}");
    assert_eq!(b["events"][0]["acc"], "$G", "{b}");
    assert_eq!(b["events"][1]["kind"], 0, "{b}");
    assert_eq!(b["events"][1]["name"], "subber", "{b}");
    assert_eq!(b["events"][1]["sub"], "foo.*", "{b}");
    let a_size = a["request"]["msgsize"].as_u64().expect("msgsize");
    let b_size = b["request"]["msgsize"].as_u64().expect("msgsize");
    assert_eq!(b_size, a_size + "Nats-Trace-Hop: 1\r\n".len() as u64);
    // The subscriber got the message with the hop header.
    let m = within(OP, "traced delivery", sub.next())
        .await
        .expect("msg");
    assert_eq!(&m.payload[..], b"hello");
    let h = m.headers.expect("headers");
    assert_eq!(h.get("Nats-Trace-Hop").map(|v| v.as_str()), Some("1"));

    // Trace only: both nodes report, the subscriber gets nothing (the marker comes next).
    pubber
        .publish_with_headers("foo.bar", traced("trace.2", true), "only".into())
        .await
        .expect("publish");
    let (a, b) = (event(&mut traces).await, event(&mut traces).await);
    for e in [&a, &b] {
        assert_eq!(types(e), ["in", "eg"], "{e}");
        assert_eq!(
            e["request"]["header"]["Nats-Trace-Only"],
            serde_json::json!(["true"])
        );
    }
    pubber
        .publish("foo.marker", "marker".into())
        .await
        .expect("marker");
    let m = within(OP, "marker", sub.next()).await.expect("msg");
    assert_eq!(
        &m.payload[..],
        b"marker",
        "the trace-only message was delivered"
    );
}

#[tokio::test]
async fn a_message_stored_by_a_replicated_stream_is_reported() {
    let mut cluster = Cluster::start(3, "tracejs").await.expect("start cluster");
    cluster.wait_formed().await.expect("formed");
    let admin = named(cluster.node(0), "admin").await;
    let created = jsapi::api(
        &admin,
        "$JS.API.STREAM.CREATE.S",
        serde_json::json!({"name": "S", "subjects": ["st.>"], "num_replicas": 3}),
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");
    jsapi::info_with_leader(&admin, "S").await;
    // Published through a node that does not lead the stream, so jetraft forwards it to the
    // leader (a forward that must not be traced as a delivery).
    let leader = jsapi::leader_index(&cluster, &admin, "S").await;
    let pubber = named(cluster.node((leader + 1) % 3), "pubber").await;
    let js = async_nats::jetstream::new(pubber.clone());
    let mut traces = pubber.subscribe("trace.>").await.expect("sub trace");
    round_trip(&pubber).await;
    pubber
        .publish_with_headers("st.x", traced("trace.js", false), "stored".into())
        .await
        .expect("publish");
    // nats-server reports the stream from its leader's node (the message reaches it over a
    // route), jetraft from the node that captured it: some node reports it.
    let deadline = tokio::time::Instant::now() + OP * 2;
    let mut found = None;
    while found.is_none() {
        let Ok(Some(m)) = tokio::time::timeout_at(deadline, traces.next()).await else {
            panic!("no trace event named the stream");
        };
        let e: Value = serde_json::from_slice(&m.payload).expect("JSON");
        assert_eq!(
            e["events"][0]["subj"], "st.x",
            "an event of another message: {e}"
        );
        found = e["events"]
            .as_array()
            .and_then(|l| l.iter().find(|x| x["type"] == "js").cloned());
    }
    // Whatever else comes (other nodes' events) is about the same message: JetStream's own
    // forwards between nodes are not traced.
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(1), traces.next()).await {
        let e: Value = serde_json::from_slice(&m.payload).expect("JSON");
        assert_eq!(
            e["events"][0]["subj"], "st.x",
            "an event of another message: {e}"
        );
    }
    let js_event = found.expect("js event");
    assert_eq!(js_event["stream"], "S");
    assert_eq!(js_event["subject"], "st.x");
    // It was stored: the next acknowledged publish is the second message.
    let ack = within(OP * 2, "ack", async {
        js.publish("st.y", "next".into())
            .await
            .expect("publish")
            .await
    })
    .await
    .expect("ack");
    assert_eq!(ack.sequence, 2);
}
