//! The API audit advisory on one node: one `$JS.EVENT.ADVISORY.API` event per `$JS.API`
//! request answered, with the request and the response as sent, compared field by field with
//! the reference nats-server run beside the server under test.
//!
//! Allowed differences: `id`, `timestamp`, `client.start`, `client.id` (compared as present),
//! `client.rtt` (nats-server measures it at connect; jetraft only after a PING round trip),
//! `server` (each server's own name), and within `response` everything but its `type` and
//! `error` (the documents differ in versions and times; `js_api_errors.rs` compares them).

use std::time::Duration;

use futures_util::StreamExt as _;
use jetraft_tests::harness::{ServerKind, ServerOptions, ServerProcess, round_trip, within};
use serde_json::Value;

const OP: Duration = Duration::from_secs(5);

/// The requests, in order: `(subject, body)`.
const REQUESTS: [(&str, &str); 6] = [
    (
        "$JS.API.STREAM.CREATE.A",
        r#"{"name":"A","subjects":["a.>"]}"#,
    ),
    ("$JS.API.INFO", ""),
    ("$JS.API.STREAM.INFO.NOPE", ""),
    (
        "$JS.API.CONSUMER.CREATE.A.C",
        r#"{"stream_name":"A","config":{"durable_name":"C","ack_policy":"explicit"}}"#,
    ),
    ("$JS.API.STREAM.CREATE.B", "{not json"),
    ("$JS.API.STREAM.DELETE.A", ""),
];

async fn start(kind: Option<ServerKind>) -> ServerProcess {
    let opts = ServerOptions {
        kind,
        ..ServerOptions::default()
    };
    ServerProcess::start(opts).await.expect("start server")
}

/// Sends [`REQUESTS`] as client "requester" and returns the audit event of each, in the
/// order of [`REQUESTS`] (nats-server answers `$JS.API.INFO` on a queue of its own, so the
/// events may arrive in another order).
async fn audits(srv: &ServerProcess) -> Vec<Value> {
    let watcher = async_nats::connect(srv.client_url())
        .await
        .expect("connect");
    let opts = async_nats::ConnectOptions::new().name("requester");
    let requester = within(OP, "connect", Box::pin(opts.connect(srv.client_url())))
        .await
        .expect("connect");
    let mut events = watcher
        .subscribe("$JS.EVENT.ADVISORY.API")
        .await
        .expect("sub");
    round_trip(&watcher).await;
    for (subject, body) in REQUESTS {
        within(
            OP,
            subject,
            requester.request(subject, body.to_string().into()),
        )
        .await
        .unwrap_or_else(|e| panic!("{subject}: {e}"));
    }
    let mut by_subject = std::collections::BTreeMap::new();
    for _ in REQUESTS {
        let m = within(OP, "audit", events.next()).await.expect("audit");
        let e: Value = serde_json::from_slice(&m.payload).expect("JSON");
        let subject = e["subject"].as_str().expect("subject").to_string();
        assert!(
            by_subject.insert(subject, e).is_none(),
            "a request audited twice"
        );
    }
    let out = REQUESTS
        .iter()
        .map(|(s, _)| {
            by_subject
                .remove(*s)
                .unwrap_or_else(|| panic!("{s} not audited"))
        })
        .collect();
    // Exactly one per request: the next one is the marker's.
    within(
        OP,
        "marker",
        requester.request("$JS.API.STREAM.NAMES", "".into()),
    )
    .await
    .expect("marker");
    let m = within(OP, "audit", events.next()).await.expect("audit");
    let marker: Value = serde_json::from_slice(&m.payload).expect("JSON");
    assert_eq!(marker["subject"], "$JS.API.STREAM.NAMES", "{marker}");
    out
}

fn parsed(v: &Value) -> Value {
    serde_json::from_str(v.as_str().expect("response is a string")).expect("response is JSON")
}

#[tokio::test]
async fn every_answered_request_is_audited_as_nats_server_does() {
    let srv = start(None).await;
    let reference = start(Some(ServerKind::NatsServer)).await;
    let got = Box::pin(audits(&srv)).await;
    let want = Box::pin(audits(&reference)).await;
    for (((subject, body), g), w) in REQUESTS.iter().zip(&got).zip(&want) {
        assert_eq!(g["type"], "io.nats.jetstream.advisory.v1.api_audit", "{g}");
        assert_eq!(g["type"], w["type"]);
        assert!(g["id"].as_str().is_some_and(|id| id.len() == 22), "{g}");
        assert!(g["timestamp"].is_string(), "{g}");
        assert_eq!(g["server"], srv.name(), "{g}");
        assert_eq!(g["subject"], *subject);
        assert_eq!(g["subject"], w["subject"]);
        assert_eq!(g.get("request"), w.get("request"), "{subject}");
        if !body.is_empty() {
            assert_eq!(g["request"], *body);
        }
        let (gr, wr) = (parsed(&g["response"]), parsed(&w["response"]));
        assert_eq!(gr["type"], wr["type"], "{subject}");
        assert_eq!(gr.get("error"), wr.get("error"), "{subject}");
        // The requester, as nats-server describes it.
        let (gc, wc) = (&g["client"], &w["client"]);
        for k in ["host", "acc", "name", "lang", "ver", "kind", "client_type"] {
            assert_eq!(gc[k], wc[k], "{subject}: client.{k}: {gc} / {wc}");
        }
        assert_eq!(gc["server"], srv.name(), "{gc}");
        assert!(gc["id"].is_u64() && gc["start"].is_string(), "{gc}");
        let extra: Vec<&String> = gc
            .as_object()
            .expect("client")
            .keys()
            .filter(|k| wc.get(k.as_str()).is_none())
            .collect();
        assert!(extra.is_empty(), "client keys nats-server lacks: {extra:?}");
        let keys = |v: &Value| -> Vec<String> {
            v.as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default()
        };
        assert_eq!(keys(g), keys(w), "{subject}");
    }
}
