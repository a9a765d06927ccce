//! Atomic batch publish (ADR-50, nats-server 2.12) through async-nats on one node: messages
//! with `Nats-Batch-Id`/`Nats-Batch-Sequence` are held until the one with `Nats-Batch-Commit`,
//! then stored all or none; the commit's PubAck names the batch and its count; nats-server's
//! error codes for every refusal.
//!
//! Runs against the real nats-server too (`JETRAFT_TEST_SERVER=nats-server`).

use async_nats::HeaderMap;
use bytes::Bytes;
use jetraft_tests::harness::batch::{Part, headers, json_of, part, publish_batch, request};
use jetraft_tests::harness::jsapi::{api, base64_text};
use jetraft_tests::harness::{connect, start_server};
use serde_json::{Value, json};

async fn create(nc: &async_nats::Client, config: Value) -> Value {
    let name = config["name"].as_str().expect("name").to_string();
    api(nc, &format!("$JS.API.STREAM.CREATE.{name}"), config).await
}

async fn msgs(nc: &async_nats::Client, stream: &str) -> u64 {
    let info = api(nc, &format!("$JS.API.STREAM.INFO.{stream}"), Value::Null).await;
    info["state"]["messages"].as_u64().expect("messages")
}

async fn get(nc: &async_nats::Client, stream: &str, seq: u64) -> Value {
    api(
        nc,
        &format!("$JS.API.STREAM.MSG.GET.{stream}"),
        json!({ "seq": seq }),
    )
    .await
}

fn err_code(v: &Value) -> u64 {
    v["error"]["err_code"]
        .as_u64()
        .unwrap_or_else(|| panic!("no error in {v}"))
}

#[tokio::test]
async fn a_committed_batch_is_stored_whole_and_acked_with_batch_and_count() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let r = create(
        &nc,
        json!({"name": "B", "subjects": ["b.>"], "allow_atomic": true}),
    )
    .await;
    assert_eq!(r["config"]["allow_atomic"], true, "{r}");
    let ack = publish_batch(
        &nc,
        "batch-1",
        &[part("b.x", "one"), part("b.y", "two"), part("b.x", "three")],
        "1",
    )
    .await;
    assert_eq!(
        ack,
        json!({"stream": "B", "seq": 3, "batch": "batch-1", "count": 3})
    );
    assert_eq!(msgs(&nc, "B").await, 3);
    let last = get(&nc, "B", 3).await;
    assert_eq!(last["message"]["subject"], "b.x");
    // The batch headers are stored with the messages.
    let hdrs = base64_text(last["message"]["hdrs"].as_str().expect("hdrs"));
    assert!(hdrs.contains("Nats-Batch-Id: batch-1"), "{hdrs}");
    assert!(hdrs.contains("Nats-Batch-Commit: 1"), "{hdrs}");

    // `eob`: the commit message itself is not stored, the last stored one gets the commit.
    let ack = publish_batch(
        &nc,
        "batch-2",
        &[part("b.z", "four"), part("b.z", "five"), part("b.z", "")],
        "eob",
    )
    .await;
    assert_eq!(
        ack,
        json!({"stream": "B", "seq": 5, "batch": "batch-2", "count": 2})
    );
    assert_eq!(msgs(&nc, "B").await, 5);
    let hdrs = base64_text(
        get(&nc, "B", 5).await["message"]["hdrs"]
            .as_str()
            .expect("hdrs"),
    );
    assert!(hdrs.contains("Nats-Batch-Commit: 1"), "{hdrs}");
    // A batch of one, committed at once.
    let ack = publish_batch(&nc, "batch-3", &[part("b.w", "solo")], "1").await;
    assert_eq!(
        ack,
        json!({"stream": "B", "seq": 6, "batch": "batch-3", "count": 1})
    );
}

#[tokio::test]
async fn one_failing_check_rejects_the_whole_batch() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    create(
        &nc,
        json!({"name": "C", "subjects": ["c.>"], "allow_atomic": true}),
    )
    .await;
    let mut h = HeaderMap::new();
    h.insert("Nats-Msg-Id", "seen");
    request(&nc, "c.a", h, "before").await;

    let wrong_subject_seq = Part {
        headers: vec![("Nats-Expected-Last-Subject-Sequence", "7")],
        ..part("c.b", "2")
    };
    let ack = publish_batch(
        &nc,
        "x1",
        &[part("c.a", "1"), wrong_subject_seq, part("c.c", "3")],
        "1",
    )
    .await;
    assert_eq!(err_code(&ack), 10071, "{ack}");
    assert_eq!(ack["error"]["description"], "wrong last sequence: 0");

    // The same Nats-Msg-Id twice in a batch, or one already in the dedup window.
    let with_id = |id| Part {
        headers: vec![("Nats-Msg-Id", id)],
        ..part("c.a", "x")
    };
    let ack = publish_batch(&nc, "x2", &[with_id("m"), with_id("m")], "1").await;
    assert_eq!(err_code(&ack), 10201, "{ack}");
    let ack = publish_batch(&nc, "x3", &[part("c.a", "1"), with_id("seen")], "1").await;
    assert_eq!(err_code(&ack), 10201, "{ack}");

    // Expected last sequence only on the first message; Expected-Last-Msg-Id not at all.
    let expect_seq = |seq| Part {
        headers: vec![("Nats-Expected-Last-Sequence", seq)],
        ..part("c.a", "x")
    };
    let ack = publish_batch(&nc, "x4", &[part("c.a", "1"), expect_seq("2")], "1").await;
    assert_eq!(err_code(&ack), 10164, "{ack}");
    let last_msg_id = Part {
        headers: vec![("Nats-Expected-Last-Msg-Id", "seen")],
        ..part("c.a", "x")
    };
    let ack = publish_batch(&nc, "x5", &[last_msg_id], "1").await;
    assert_eq!(err_code(&ack), 10177, "{ack}");
    assert_eq!(
        ack["error"]["description"],
        "atomic publish unsupported header used: Nats-Expected-Last-Msg-Id"
    );
    assert_eq!(msgs(&nc, "C").await, 1, "a refused batch stored nothing");

    // With the right expectation on the first message the batch goes in.
    let ack = publish_batch(&nc, "x6", &[expect_seq("1"), part("c.b", "y")], "1").await;
    assert_eq!(ack["seq"], 3, "{ack}");
    assert_eq!(msgs(&nc, "C").await, 3);
}

#[tokio::test]
async fn discard_new_limits_count_the_whole_batch() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    create(
        &nc,
        json!({"name": "L", "subjects": ["l.>"], "allow_atomic": true,
               "max_msgs": 2, "discard": "new"}),
    )
    .await;
    let ack = publish_batch(
        &nc,
        "big",
        &[part("l.a", "1"), part("l.a", "2"), part("l.a", "3")],
        "1",
    )
    .await;
    assert_eq!(err_code(&ack), 10077, "{ack}");
    assert_eq!(ack["error"]["description"], "maximum messages exceeded");
    assert_eq!(msgs(&nc, "L").await, 0);
    let ack = publish_batch(&nc, "fits", &[part("l.a", "1"), part("l.a", "2")], "1").await;
    assert_eq!(ack["count"], 2, "{ack}");
}

#[tokio::test]
async fn batch_headers_are_refused_with_nats_server_codes() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    create(&nc, json!({"name": "OFF", "subjects": ["off.>"]})).await;
    create(
        &nc,
        json!({"name": "ON", "subjects": ["on.>"], "allow_atomic": true}),
    )
    .await;
    let refused = |payload: Bytes| err_code(&json_of(&payload));

    // Not enabled on the stream.
    let a = request(&nc, "off.a", headers("b", 1, &[]), "x").await;
    assert_eq!(refused(a), 10174);
    // Sequence missing.
    let mut h = HeaderMap::new();
    h.insert("Nats-Batch-Id", "b");
    assert_eq!(refused(request(&nc, "on.a", h, "x").await), 10175);
    // A batch id longer than 64 characters.
    let long = "i".repeat(65);
    let a = request(&nc, "on.a", headers(&long, 1, &[]), "x").await;
    assert_eq!(refused(a), 10179);
    // An unknown batch, and a gap.
    let a = request(
        &nc,
        "on.a",
        headers("never", 2, &[("Nats-Batch-Commit", "1")]),
        "x",
    )
    .await;
    assert_eq!(refused(a), 10176);
    assert!(
        request(&nc, "on.a", headers("gap", 1, &[]), "x")
            .await
            .is_empty()
    );
    let a = request(
        &nc,
        "on.a",
        headers("gap", 3, &[("Nats-Batch-Commit", "1")]),
        "x",
    )
    .await;
    assert_eq!(refused(a), 10176);
    // A commit value other than 1 or eob abandons the batch.
    assert!(
        request(&nc, "on.a", headers("bad", 1, &[]), "x")
            .await
            .is_empty()
    );
    let a = request(
        &nc,
        "on.a",
        headers("bad", 2, &[("Nats-Batch-Commit", "yes")]),
        "x",
    )
    .await;
    assert_eq!(refused(a), 10200);
    let a = request(
        &nc,
        "on.a",
        headers("bad", 3, &[("Nats-Batch-Commit", "1")]),
        "x",
    )
    .await;
    assert_eq!(refused(a), 10176);
    // Past the size limit of 1000 messages.
    let a = request(&nc, "on.a", headers("huge", 1001, &[]), "x").await;
    let e = json_of(&a);
    assert_eq!(err_code(&e), 10199);
    assert_eq!(
        e["error"]["description"],
        "atomic publish batch is too large: 1000"
    );
    assert_eq!(msgs(&nc, "ON").await, 0);

    // A mirror cannot take atomic batches.
    let r = create(
        &nc,
        json!({"name": "M", "mirror": {"name": "ON"}, "allow_atomic": true}),
    )
    .await;
    assert_eq!(err_code(&r), 10198, "{r}");
}

#[tokio::test]
async fn a_batch_may_span_every_subject_filter_of_its_stream() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    create(
        &nc,
        json!({"name": "MULTI", "subjects": ["orders.*", "stock.*", "audit"],
               "allow_atomic": true}),
    )
    .await;
    // Messages alternate between the stream's three subject filters, sent back to back.
    for b in 0..20 {
        let id = format!("multi-{b}");
        let parts: Vec<Part<'_>> = ["orders.new", "stock.taken", "audit", "orders.paid", "audit"]
            .into_iter()
            .map(|s| part(s, "x"))
            .collect();
        let ack = publish_batch(&nc, &id, &parts, "1").await;
        assert_eq!(ack["count"], 5, "{id}: {ack}");
    }
    assert_eq!(msgs(&nc, "MULTI").await, 100);
}

#[tokio::test]
async fn abandoned_batches_are_advised_with_their_reason() {
    use futures_util::StreamExt as _;
    let srv = start_server().await;
    let nc = connect(&srv).await;
    create(
        &nc,
        json!({"name": "AB", "subjects": ["ab.>"], "allow_atomic": true}),
    )
    .await;
    let mut advisories = nc
        .subscribe("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.>")
        .await
        .expect("subscribe");
    jetraft_tests::harness::round_trip(&nc).await;
    let mut next = async || {
        let m = jetraft_tests::harness::within(
            std::time::Duration::from_secs(20),
            "advisory",
            advisories.next(),
        )
        .await
        .expect("advisory");
        assert_eq!(
            m.subject.as_str(),
            "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.AB"
        );
        let v = json_of(&m.payload);
        assert_eq!(
            v["type"],
            "io.nats.jetstream.advisory.v1.stream_batch_abandoned"
        );
        assert_eq!(v["stream"], "AB");
        (
            v["batch"].as_str().unwrap_or_default().to_string(),
            v["reason"].clone(),
        )
    };
    // A gap gives the batch up as incomplete.
    assert!(
        request(&nc, "ab.a", headers("gap", 1, &[]), "x")
            .await
            .is_empty()
    );
    request(&nc, "ab.a", headers("gap", 3, &[]), "x").await;
    assert_eq!(next().await, ("gap".to_string(), json!("incomplete")));
    // A batch left open is given up after nats-server's 10 s timeout.
    assert!(
        request(&nc, "ab.a", headers("idle", 1, &[]), "x")
            .await
            .is_empty()
    );
    assert_eq!(next().await, ("idle".to_string(), json!("timeout")));
    let a = request(
        &nc,
        "ab.a",
        headers("idle", 2, &[("Nats-Batch-Commit", "1")]),
        "x",
    )
    .await;
    assert_eq!(err_code(&json_of(&a)), 10176);
}
