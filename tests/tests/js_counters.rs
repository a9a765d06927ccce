//! Message counters (nats-server 2.12, ADR-49, `allow_msg_counter`): `Nats-Incr` publishes add
//! to the subject's total, stored as `{"val":"<total>"}` and answered with `val` in the PubAck;
//! integers of any size; the refusals (10168-10172, the config errors); a stream sourcing two
//! counter streams holds the sum of both.
//!
//! Runs against the real nats-server too (`JETRAFT_TEST_SERVER=nats-server`).

use std::time::Duration;

use async_nats::HeaderMap;
use bytes::Bytes;
use jetraft_tests::harness::jsapi::{api, base64_text};
use jetraft_tests::harness::{connect, start_server, wait_for};
use serde_json::{Value, json};

/// Publishes `payload` with `headers` to `subject` and returns the PubAck as JSON.
async fn publish(
    nc: &async_nats::Client,
    subject: &str,
    headers: &[(&str, &str)],
    payload: &'static [u8],
) -> Value {
    let mut h = HeaderMap::new();
    for (k, v) in headers {
        h.insert(*k, *v);
    }
    let req = nc.request_with_headers(subject.to_string(), h, Bytes::from_static(payload));
    let msg = tokio::time::timeout(Duration::from_secs(5), req)
        .await
        .expect("PubAck in time")
        .expect("PubAck");
    serde_json::from_slice(&msg.payload).expect("PubAck JSON")
}

/// Adds `by` to the counter on `subject`; returns the PubAck.
async fn incr(nc: &async_nats::Client, subject: &str, by: &str) -> Value {
    publish(nc, subject, &[("Nats-Incr", by)], b"").await
}

async fn create(nc: &async_nats::Client, cfg: Value) -> Value {
    let name = cfg["name"].as_str().expect("name").to_string();
    api(nc, &format!("$JS.API.STREAM.CREATE.{name}"), cfg).await
}

/// The last message on `subject` of `stream` (payload as text, headers as JSON object).
async fn last(nc: &async_nats::Client, stream: &str, subject: &str) -> Value {
    let got = api(
        nc,
        &format!("$JS.API.STREAM.MSG.GET.{stream}"),
        json!({"last_by_subj": subject}),
    )
    .await;
    assert!(got["error"].is_null(), "{got}");
    got["message"].clone()
}

#[tokio::test]
async fn increments_add_up_and_are_answered_with_the_total() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let created = create(
        &nc,
        json!({"name": "HITS", "subjects": ["hits.>"], "allow_msg_counter": true}),
    )
    .await;
    assert_eq!(created["config"]["allow_msg_counter"], true, "{created}");
    let ack = incr(&nc, "hits.a", "1").await;
    assert_eq!(ack, json!({"stream": "HITS", "seq": 1, "val": "1"}));
    assert_eq!(incr(&nc, "hits.a", "+5").await["val"], "6");
    assert_eq!(incr(&nc, "hits.b", "10").await["val"], "10");
    assert_eq!(incr(&nc, "hits.a", "-8").await["val"], "-2");
    let huge = "99999999999999999999999999999999";
    assert_eq!(
        incr(&nc, "hits.b", huge).await["val"],
        "100000000000000000000000000000009"
    );
    assert_eq!(
        incr(&nc, "hits.b", huge).await["val"],
        "200000000000000000000000000000008"
    );
    let msg = last(&nc, "HITS", "hits.a").await;
    assert_eq!(
        base64_text(msg["data"].as_str().unwrap_or_default()),
        r#"{"val":"-2"}"#
    );
    let hdrs = base64_text(msg["hdrs"].as_str().unwrap_or_default());
    assert!(hdrs.contains("Nats-Incr: -8"), "{hdrs}");
    // A duplicate is answered as one, without a total.
    let id = [("Nats-Incr", "1"), ("Nats-Msg-Id", "once")];
    assert_eq!(publish(&nc, "hits.c", &id, b"").await["val"], "1");
    let dup = publish(&nc, "hits.c", &id, b"").await;
    assert_eq!(dup["duplicate"], true, "{dup}");
    assert!(dup.get("val").is_none(), "{dup}");
}

/// A publish nats-server refuses: subject, headers, payload, err_code.
type Refused = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static [u8],
    u64,
);

#[tokio::test]
async fn counter_publishes_and_configs_are_refused_as_nats_server_does() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let created = create(
        &nc,
        json!({"name": "C", "subjects": ["c.>"], "allow_msg_counter": true}),
    )
    .await;
    assert!(created["error"].is_null(), "{created}");
    let plain = create(&nc, json!({"name": "P", "subjects": ["p.>"]})).await;
    assert!(plain["error"].is_null(), "{plain}");
    let cases: [Refused; 7] = [
        ("c.x", &[("Nats-Incr", "abc")], b"", 10171),
        ("c.x", &[("Nats-Incr", "1.5")], b"", 10171),
        ("c.x", &[("Nats-Incr", "1")], b"body", 10170),
        ("c.x", &[], b"", 10169),
        (
            "c.x",
            &[("Nats-Incr", "1"), ("Nats-Expected-Last-Sequence", "0")],
            b"",
            10171,
        ),
        (
            "c.x",
            &[("Nats-Incr", "1"), ("Nats-Rollup", "sub")],
            b"",
            10171,
        ),
        ("p.x", &[("Nats-Incr", "1")], b"", 10168),
    ];
    for (subject, headers, payload, code) in cases {
        let ack = publish(&nc, subject, headers, payload).await;
        assert_eq!(
            ack["error"]["err_code"], code,
            "{subject} {headers:?}: {ack}"
        );
    }
    // Nothing of that was stored.
    let info = api(&nc, "$JS.API.STREAM.INFO.C", Value::Null).await;
    assert_eq!(info["state"]["messages"], 0, "{info}");
    for (extra, description) in [
        (
            json!({"discard": "new"}),
            "counter stream cannot use discard new",
        ),
        (
            json!({"allow_msg_ttl": true}),
            "counter stream cannot use message TTLs",
        ),
        (
            json!({"retention": "interest"}),
            "counter stream can only use limits retention",
        ),
    ] {
        let mut cfg = json!({"name": "BAD", "subjects": ["bad"], "allow_msg_counter": true});
        for (k, v) in extra.as_object().expect("object") {
            cfg[k] = v.clone();
        }
        let r = create(&nc, cfg).await;
        assert_eq!(r["error"]["err_code"], 10052, "{extra}: {r}");
        assert_eq!(r["error"]["description"], description, "{extra}: {r}");
    }
    let mirror = create(
        &nc,
        json!({"name": "M", "mirror": {"name": "C"}, "allow_msg_counter": true}),
    )
    .await;
    assert_eq!(mirror["error"]["err_code"], 10173, "{mirror}");
    for (name, subjects, counter) in [("C", "c.>", false), ("P", "p.>", true)] {
        let r = api(
            &nc,
            &format!("$JS.API.STREAM.UPDATE.{name}"),
            json!({"name": name, "subjects": [subjects], "allow_msg_counter": counter}),
        )
        .await;
        assert_eq!(r["error"]["err_code"], 10052, "{r}");
        assert_eq!(
            r["error"]["description"],
            "stream configuration update can not change message counter setting"
        );
    }
}

#[tokio::test]
async fn a_stream_sourcing_two_counters_holds_their_sum() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    for (name, subject) in [("EU", "eu.hits"), ("US", "us.hits")] {
        let r = create(
            &nc,
            json!({"name": name, "subjects": [subject], "allow_msg_counter": true}),
        )
        .await;
        assert!(r["error"].is_null(), "{r}");
    }
    let all = create(
        &nc,
        json!({
            "name": "ALL",
            "allow_msg_counter": true,
            "subjects": [],
            "sources": [
                {"name": "EU", "subject_transforms": [{"src": "eu.hits", "dest": "hits"}]},
                {"name": "US", "subject_transforms": [{"src": "us.hits", "dest": "hits"}]}
            ]
        }),
    )
    .await;
    assert!(all["error"].is_null(), "{all}");
    for by in ["3", "4"] {
        incr(&nc, "eu.hits", by).await;
    }
    incr(&nc, "us.hits", "10").await;
    incr(&nc, "us.hits", "-1").await;
    let total = wait_for("ALL to count 16", Duration::from_secs(20), || {
        let nc = nc.clone();
        async move {
            let got = api(
                &nc,
                "$JS.API.STREAM.MSG.GET.ALL",
                json!({"last_by_subj": "hits"}),
            )
            .await;
            let text = base64_text(got["message"]["data"].as_str()?);
            (text == r#"{"val":"16"}"#).then_some(got)
        }
    })
    .await;
    let hdrs = base64_text(total["message"]["hdrs"].as_str().unwrap_or_default());
    assert!(
        hdrs.contains(r#"Nats-Counter-Sources: {"EU":{"eu.hits":"7"},"US":{"us.hits":"9"}}"#),
        "{hdrs}"
    );
}
