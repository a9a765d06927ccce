//! Message tracing (ADR-41) on one node: a message with `Nats-Trace-Dest` makes the server
//! publish a trace event there: ingress, one egress per delivery, the stream that captures it,
//! and with `Nats-Trace-Only` nothing is delivered or stored. Every event is compared field by
//! field with the one the reference nats-server (run beside the server under test) sends for
//! the same steps.
//!
//! Allowed differences: `ts`, `cid` (compared as numbers), the `server` object's `id`, `time`,
//! `seq`, `ver`, `flags` and nats-server's `feature_flags` (see `sys_account.rs`), its `name`
//! (each server has its own), and the order of the events after the first (nats-server lists
//! the stream's `js` event where the stream's subscription sits among the receivers).

use std::time::Duration;

use async_nats::HeaderMap;
use futures_util::StreamExt as _;
use jetraft_tests::harness::{ServerKind, ServerOptions, ServerProcess, round_trip, within};
use serde_json::Value;

/// Bound on any one wait for a message.
const OP: Duration = Duration::from_secs(5);

async fn start(kind: Option<ServerKind>) -> ServerProcess {
    let opts = ServerOptions {
        kind,
        ..ServerOptions::default()
    };
    ServerProcess::start(opts).await.expect("start server")
}

async fn named(srv: &ServerProcess, name: &str) -> async_nats::Client {
    let opts = async_nats::ConnectOptions::new().name(name);
    within(OP * 2, "connect", Box::pin(opts.connect(srv.client_url())))
        .await
        .expect("connect")
}

/// What one server says in the steps below.
struct Run {
    /// The trace event of each step, by step name.
    events: Vec<(&'static str, Value)>,
    /// The server's name.
    name: String,
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, *v);
    }
    h
}

/// One step: its name, the subject published to and the message's headers.
type Step = (
    &'static str,
    &'static str,
    Vec<(&'static str, &'static str)>,
);

/// Publishes the traced messages of every step and collects their events.
async fn run(srv: &ServerProcess) -> Run {
    let pubber = named(srv, "pubber").await;
    let subber = named(srv, "subber").await;
    let mut traces = pubber.subscribe("trace.>").await.expect("sub trace");
    let mut plain = subber.subscribe("foo.*").await.expect("sub");
    let mut queued = subber
        .queue_subscribe("foo.bar", "q".into())
        .await
        .expect("queue sub");
    let js = async_nats::jetstream::new(pubber.clone());
    within(
        OP,
        "create stream",
        js.create_stream(async_nats::jetstream::stream::Config {
            name: "S".into(),
            subjects: vec!["st.>".into()],
            ..Default::default()
        }),
    )
    .await
    .expect("create stream");
    round_trip(&subber).await;
    round_trip(&pubber).await;

    let steps: [Step; 5] = [
        (
            "core",
            "foo.bar",
            vec![("Nats-Trace-Dest", "trace.1"), ("X-Other", "v")],
        ),
        (
            "core trace only",
            "foo.bar",
            vec![("Nats-Trace-Dest", "trace.2"), ("Nats-Trace-Only", "true")],
        ),
        ("stream", "st.x", vec![("Nats-Trace-Dest", "trace.3")]),
        (
            "stream trace only",
            "st.x",
            vec![("Nats-Trace-Dest", "trace.4"), ("Nats-Trace-Only", "1")],
        ),
        (
            "no interest",
            "none.here",
            vec![("Nats-Trace-Dest", "trace.5")],
        ),
    ];
    let mut events = Vec::new();
    for (step, subject, hdrs) in steps {
        pubber
            .publish_with_headers(subject, headers(&hdrs), "hello".into())
            .await
            .expect("publish");
        let msg = within(OP, step, traces.next()).await.expect("trace event");
        let event: Value = serde_json::from_slice(&msg.payload).expect("event is JSON");
        events.push((step, event));
    }
    // The traced core message was delivered once to each subscription, with its headers; the
    // trace-only one was not (the next message each gets is the marker published after it).
    pubber
        .publish("foo.bar", "marker".into())
        .await
        .expect("marker");
    for sub in [&mut plain, &mut queued] {
        let first = within(OP, "traced delivery", sub.next())
            .await
            .expect("msg");
        assert_eq!(&first.payload[..], b"hello");
        let h = first.headers.expect("headers kept");
        assert_eq!(
            h.get("Nats-Trace-Dest").map(|v| v.as_str()),
            Some("trace.1")
        );
        assert!(
            h.get("Nats-Trace-Hop").is_none(),
            "no hop header on local delivery"
        );
        let next = within(OP, "marker", sub.next()).await.expect("msg");
        assert_eq!(
            &next.payload[..],
            b"marker",
            "trace-only message was delivered"
        );
    }
    // The stream stored the traced message and not the trace-only one: a marker published
    // after them on the same connection is the second message.
    let ack = within(OP, "publish marker", async {
        js.publish("st.marker", "marker".into())
            .await
            .expect("publish")
            .await
    })
    .await
    .expect("ack");
    assert_eq!(ack.sequence, 2, "stored messages before the marker: 1");
    Run {
        events,
        name: srv.name().to_string(),
    }
}

/// `event` without what may differ: `ts`, `cid` (checked to be numbers), the server object
/// (checked apart); the events after the ingress sorted.
fn normalize(event: &Value) -> Value {
    let mut e = event.clone();
    if let Some(map) = e.as_object_mut() {
        map.remove("server");
    }
    if let Some(list) = e["events"].as_array_mut() {
        for ev in list.iter_mut() {
            let m = ev.as_object_mut().expect("event object");
            assert!(m.remove("ts").is_some_and(|t| t.is_string()), "ts: {event}");
            let kind_has_cid = m.get("type").is_some_and(|t| t == "in" || t == "eg");
            let cid = m.remove("cid");
            assert_eq!(
                cid.is_some_and(|c| c.is_u64()),
                kind_has_cid,
                "cid: {event}"
            );
        }
        if list.len() > 1 {
            list[1..].sort_by_key(|v| v.to_string());
        }
    }
    e
}

#[tokio::test]
async fn trace_events_match_nats_server() {
    let srv = start(None).await;
    let reference = start(Some(ServerKind::NatsServer)).await;
    let got = run(&srv).await;
    let want = run(&reference).await;
    for ((step, g), (_, w)) in got.events.iter().zip(&want.events) {
        assert_eq!(normalize(g), normalize(w), "{step}:\n got {g}\nwant {w}");
        assert_eq!(g["server"]["name"], got.name.as_str(), "{step}");
        assert_eq!(w["server"]["name"], want.name.as_str(), "{step}");
        assert_eq!(g["server"]["host"], w["server"]["host"], "{step}");
        assert_eq!(g["server"]["jetstream"], true, "{step}");
    }
    // The step names the expected shapes, independent of the reference.
    let types = |e: &Value| -> Vec<String> {
        e["events"]
            .as_array()
            .map(|l| {
                l.iter()
                    .map(|x| x["type"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let by_step = |name: &str| &got.events.iter().find(|(s, _)| *s == name).expect("step").1;
    assert_eq!(types(by_step("core")), ["in", "eg", "eg"]);
    assert_eq!(types(by_step("stream")), ["in", "js"]);
    assert_eq!(by_step("stream")["events"][1]["stream"], "S");
    assert_eq!(types(by_step("no interest")), ["in"]);
}

#[tokio::test]
async fn an_invalid_or_forbidden_destination_is_not_traced() {
    let srv = start(None).await;
    let client = named(&srv, "pubber").await;
    let mut traces = client.subscribe("trace.>").await.expect("sub");
    let mut sub = client.subscribe("foo").await.expect("sub");
    round_trip(&client).await;
    // A wildcard destination is no trace: the message is delivered, no event is sent.
    client
        .publish_with_headers(
            "foo",
            headers(&[("Nats-Trace-Dest", "trace.*")]),
            "a".into(),
        )
        .await
        .expect("publish");
    client
        .publish_with_headers(
            "foo",
            headers(&[("Nats-Trace-Dest", "trace.ok")]),
            "b".into(),
        )
        .await
        .expect("publish");
    for want in [&b"a"[..], b"b"] {
        let m = within(OP, "delivery", sub.next()).await.expect("msg");
        assert_eq!(&m.payload[..], want);
    }
    let first = within(OP, "event", traces.next()).await.expect("event");
    assert_eq!(
        first.subject.as_str(),
        "trace.ok",
        "only the valid destination gets an event"
    );
}
