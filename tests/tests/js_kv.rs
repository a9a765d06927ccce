//! Key-Value buckets through the official Rust client (async-nats 0.51): bucket create/update/
//! delete and status, put, get (latest and by revision), create (fails when present, succeeds
//! over a delete/purge marker), update with revision (CAS), delete, purge, history, keys, watch
//! (updates only, with history, from a revision), per-key TTL with limit markers, and the
//! stream features buckets rest on through raw `$JS.API` requests (rollup, markers kept as
//! published, last-per-subject, direct get and message get, purge with filter and keep,
//! discard new per subject). One node, plus an R3 bucket on three nodes.
//!
//! Every test first ran against the real nats-server (`JETRAFT_TEST_SERVER=nats-server`).

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::kv::{self, Operation};
use async_nats::jetstream::{self, Context};
use bytes::Bytes;
use futures_util::{StreamExt as _, TryStreamExt as _};
use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::jsapi::{api, base64_text, info_with_leader};
use jetraft_tests::harness::{assert_clean_log, wait_for, within};
use jetraft_tests::harness::{connect, start_server};
use serde_json::{Value, json};

const OP: Duration = Duration::from_secs(10);
/// Bound on waits that span a leader election (R3 bucket creation, first publish).
const ELECTION: Duration = Duration::from_secs(30);

async fn bucket(js: &Context, config: kv::Config) -> kv::Store {
    within(OP, "create bucket", js.create_key_value(config))
        .await
        .expect("create bucket")
}

fn config(name: &str, history: i64) -> kv::Config {
    kv::Config {
        bucket: name.to_string(),
        history,
        ..Default::default()
    }
}

async fn put(kv: &kv::Store, key: &str, value: &str) -> u64 {
    within(OP, "put", kv.put(key, Bytes::from(value.to_string())))
        .await
        .expect("put")
}

async fn entry(kv: &kv::Store, key: &str) -> Option<kv::Entry> {
    within(OP, "entry", kv.entry(key)).await.expect("entry")
}

async fn history(kv: &kv::Store, key: &str) -> Vec<(u64, Operation, String)> {
    let h = within(OP, "history", kv.history(key))
        .await
        .expect("history");
    let entries: Vec<kv::Entry> = within(OP, "history entries", h.try_collect())
        .await
        .expect("history entries");
    entries
        .into_iter()
        .map(|e| {
            let value = String::from_utf8_lossy(&e.value).to_string();
            (e.revision, e.operation, value)
        })
        .collect()
}

async fn keys(kv: &kv::Store) -> Vec<String> {
    let k = within(OP, "keys", kv.keys()).await.expect("keys");
    let mut keys: Vec<String> = within(OP, "keys list", k.try_collect())
        .await
        .expect("keys list");
    keys.sort();
    keys
}

/// The next watch entry as `(key, revision, operation, value)`.
async fn next(w: &mut kv::Watch) -> (String, u64, Operation, String) {
    let e = within(OP, "watch entry", w.next())
        .await
        .expect("watch ended")
        .expect("watch entry");
    let value = String::from_utf8_lossy(&e.value).to_string();
    (e.key, e.revision, e.operation, value)
}

/// A raw publish with headers; returns the PubAck JSON.
async fn publish(
    nc: &async_nats::Client,
    subject: &str,
    hdrs: &[(&str, &str)],
    body: &str,
) -> Value {
    let mut h = HeaderMap::new();
    for (k, v) in hdrs {
        h.insert(*k, *v);
    }
    let msg = within(
        OP,
        "publish",
        nc.request_with_headers(subject.to_string(), h, Bytes::from(body.to_string())),
    )
    .await
    .expect("puback");
    serde_json::from_slice(&msg.payload).expect("PubAck JSON")
}

fn op(s: &str) -> Operation {
    match s {
        "put" => Operation::Put,
        "del" => Operation::Delete,
        _ => Operation::Purge,
    }
}

#[tokio::test]
async fn kv_bucket_lifecycle_and_status() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let kv = bucket(
        &js,
        kv::Config {
            description: "life".into(),
            max_value_size: 1024,
            ..config("LIFE", 5)
        },
    )
    .await;
    assert_eq!(kv.name, "LIFE");
    assert_eq!(kv.stream_name, "KV_LIFE");

    // The stream behind it is what the client asked for.
    let info = api(&nc, "$JS.API.STREAM.INFO.KV_LIFE", Value::Null).await;
    let c = &info["config"];
    assert_eq!(c["subjects"], json!(["$KV.LIFE.>"]), "{info}");
    assert_eq!(c["max_msgs_per_subject"], 5);
    assert_eq!(c["max_msg_size"], 1024);
    assert_eq!(c["discard"], "new");
    assert_eq!(c["allow_rollup_hdrs"], true);
    assert_eq!(c["deny_delete"], true);
    assert_eq!(c["deny_purge"], false);
    assert_eq!(c["allow_direct"], true);
    assert_eq!(c["description"], "life");

    put(&kv, "a", "1").await;
    put(&kv, "b", "2").await;
    // `status` reports the info cached at bind time: bind again to see the new values.
    let kv = within(OP, "bind", js.get_key_value("LIFE"))
        .await
        .expect("bind");
    let st = within(OP, "status", kv.status()).await.expect("status");
    assert_eq!(st.bucket(), "LIFE");
    assert_eq!(st.history(), 5);
    assert_eq!(st.values(), 2);

    // A value over max_value_size is refused.
    let big = "x".repeat(2000);
    assert!(
        within(OP, "big put", kv.put("big", Bytes::from(big)))
            .await
            .is_err()
    );

    // Binding to the existing bucket, then updating its config.
    let again = within(OP, "get bucket", js.get_key_value("LIFE"))
        .await
        .expect("get bucket");
    assert_eq!(
        within(OP, "get", again.get("a")).await.expect("get"),
        Some(Bytes::from("1"))
    );
    within(OP, "update bucket", js.update_key_value(config("LIFE", 7)))
        .await
        .expect("update bucket");
    let info = api(&nc, "$JS.API.STREAM.INFO.KV_LIFE", Value::Null).await;
    assert_eq!(info["config"]["max_msgs_per_subject"], 7, "{info}");

    within(OP, "delete bucket", js.delete_key_value("LIFE"))
        .await
        .expect("delete bucket");
    assert!(
        within(OP, "get deleted", js.get_key_value("LIFE"))
            .await
            .is_err()
    );
    let r = api(&nc, "$JS.API.STREAM.INFO.KV_LIFE", Value::Null).await;
    assert_eq!(r["error"]["err_code"], 10059, "{r}");
    assert_clean_log(&srv);
}

#[tokio::test]
async fn kv_put_and_get_latest_and_by_revision() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc);
    let kv = bucket(&js, config("PG", 3)).await;
    assert_eq!(put(&kv, "a", "1").await, 1);
    assert_eq!(put(&kv, "b.c", "2").await, 2);
    assert_eq!(put(&kv, "a", "3").await, 3);

    let a = entry(&kv, "a").await.expect("a present");
    assert_eq!(a.key, "a");
    assert_eq!(a.value, Bytes::from("3"));
    assert_eq!(a.revision, 3);
    assert_eq!(a.operation, Operation::Put);
    assert_eq!(a.bucket, "PG");
    let bc = entry(&kv, "b.c").await.expect("multi-token key");
    assert_eq!((bc.revision, bc.value), (2, Bytes::from("2")));
    assert_eq!(
        within(OP, "get", kv.get("a")).await.expect("get"),
        Some(Bytes::from("3"))
    );
    assert_eq!(within(OP, "get", kv.get("nope")).await.expect("get"), None);
    assert!(entry(&kv, "nope").await.is_none());

    let old = within(OP, "rev 1", kv.entry_for_revision("a", 1))
        .await
        .expect("entry for revision")
        .expect("revision 1 present");
    assert_eq!((old.revision, old.value), (1, Bytes::from("1")));
    // Revision 2 belongs to another key: not an entry of "a".
    assert!(
        within(OP, "rev 2", kv.entry_for_revision("a", 2))
            .await
            .expect("entry for revision")
            .is_none()
    );
    assert!(
        within(OP, "rev 9", kv.entry_for_revision("a", 9))
            .await
            .expect("entry for revision")
            .is_none()
    );
    assert_clean_log(&srv);
}

#[tokio::test]
async fn kv_create_and_update_are_compare_and_set() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc);
    let kv = bucket(&js, config("CAS", 5)).await;

    let r1 = within(OP, "create", kv.create("k", "v1".into()))
        .await
        .expect("create");
    assert_eq!(r1, 1);
    let err = within(OP, "create again", kv.create("k", "v2".into()))
        .await
        .expect_err("create over a value fails");
    assert_eq!(err.kind(), kv::CreateErrorKind::AlreadyExists);

    let r2 = within(OP, "update", kv.update("k", "v2".into(), r1))
        .await
        .expect("update with the current revision");
    assert_eq!(r2, 2);
    let err = within(OP, "stale update", kv.update("k", "v3".into(), r1))
        .await
        .expect_err("stale revision");
    assert_eq!(err.kind(), kv::UpdateErrorKind::WrongLastRevision);
    // Updating a key that does not exist with revision 0 is a create.
    assert_eq!(
        within(OP, "update new", kv.update("n", "x".into(), 0))
            .await
            .expect("update new key with 0"),
        3
    );

    // Create over a delete marker and over a purge marker succeeds (the client retries with
    // the marker's revision after 10071).
    within(OP, "delete", kv.delete("k")).await.expect("delete");
    let r = within(OP, "create after delete", kv.create("k", "v4".into()))
        .await
        .expect("create over delete marker");
    assert_eq!(r, 5);
    within(OP, "purge", kv.purge("k")).await.expect("purge");
    let r = within(OP, "create after purge", kv.create("k", "v5".into()))
        .await
        .expect("create over purge marker");
    assert_eq!(r, 7);
    assert_eq!(entry(&kv, "k").await.expect("k").value, Bytes::from("v5"));

    // delete/purge with an expected revision.
    let err = within(OP, "stale delete", kv.delete_expect_revision("k", Some(1)))
        .await
        .expect_err("stale delete");
    assert_eq!(err.kind(), kv::DeleteErrorKind::WrongLastRevision);
    within(OP, "delete at rev", kv.delete_expect_revision("k", Some(7)))
        .await
        .expect("delete with the current revision");
    assert_clean_log(&srv);
}

#[tokio::test]
async fn kv_delete_and_purge_leave_markers() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let kv = bucket(&js, config("DP", 10)).await;
    put(&kv, "k", "1").await;
    put(&kv, "k", "2").await;
    put(&kv, "other", "o").await;
    within(OP, "delete", kv.delete("k")).await.expect("delete");

    // Deleted: get says nothing, entry shows the marker.
    assert_eq!(within(OP, "get", kv.get("k")).await.expect("get"), None);
    let e = entry(&kv, "k").await.expect("marker entry");
    assert_eq!((e.revision, e.operation), (4, Operation::Delete));
    assert_eq!(
        history(&kv, "k").await,
        vec![
            (1, op("put"), "1".into()),
            (2, op("put"), "2".into()),
            (4, op("del"), String::new()),
        ]
    );
    // The marker is stored as published (header kept, empty body).
    let m = api(
        &nc,
        "$JS.API.STREAM.MSG.GET.KV_DP",
        json!({"last_by_subj": "$KV.DP.k"}),
    )
    .await;
    assert_eq!(m["message"]["seq"], 4, "{m}");
    assert!(m["message"]["data"].is_null(), "{m}");
    let hdrs = base64_text(m["message"]["hdrs"].as_str().expect("hdrs"));
    assert!(hdrs.contains("KV-Operation: DEL"), "{hdrs}");

    // Purge rolls the subject up into one PURGE marker.
    within(OP, "purge", kv.purge("k")).await.expect("purge");
    assert_eq!(
        history(&kv, "k").await,
        vec![(5, op("purge"), String::new())]
    );
    let e = entry(&kv, "k").await.expect("marker entry");
    assert_eq!((e.revision, e.operation), (5, Operation::Purge));
    assert_eq!(within(OP, "get", kv.get("k")).await.expect("get"), None);
    let info = api(&nc, "$JS.API.STREAM.INFO.KV_DP", Value::Null).await;
    assert_eq!(info["state"]["messages"], 2, "{info}");
    assert_eq!(info["state"]["last_seq"], 5, "{info}");
    // deny_delete: message delete API is refused.
    let r = api(&nc, "$JS.API.STREAM.MSG.DELETE.KV_DP", json!({"seq": 3})).await;
    assert_eq!(r["error"]["err_code"], 10057, "{r}");
    assert_clean_log(&srv);
}

#[tokio::test]
async fn kv_history_is_bounded_and_keys_skip_deleted() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc);
    let kv = bucket(&js, config("HK", 3)).await;
    assert!(keys(&kv).await.is_empty());
    for i in 1..=5 {
        put(&kv, "k", &format!("v{i}")).await;
    }
    put(&kv, "x.y", "1").await;
    put(&kv, "z", "1").await;
    assert_eq!(
        history(&kv, "k").await,
        vec![
            (3, op("put"), "v3".into()),
            (4, op("put"), "v4".into()),
            (5, op("put"), "v5".into()),
        ]
    );
    assert_eq!(keys(&kv).await, vec!["k", "x.y", "z"]);
    within(OP, "delete", kv.delete("z")).await.expect("delete");
    within(OP, "purge", kv.purge("x.y")).await.expect("purge");
    assert_eq!(keys(&kv).await, vec!["k"]);
    assert!(history(&kv, "none").await.is_empty());
    assert_clean_log(&srv);
}

#[tokio::test]
async fn kv_watch_updates_history_and_from_revision() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc);
    let kv = bucket(&js, config("W", 5)).await;
    put(&kv, "a", "1").await;
    put(&kv, "b", "1").await;
    put(&kv, "a", "2").await;

    // Updates only.
    let mut all = within(OP, "watch_all", kv.watch_all())
        .await
        .expect("watch_all");
    let mut only_b = within(OP, "watch b", kv.watch("b")).await.expect("watch b");
    // Latest values first (last per subject), then updates.
    let mut hist = within(OP, "watch history", kv.watch_with_history("a"))
        .await
        .expect("watch with history");
    assert_eq!(
        next(&mut hist).await,
        ("a".into(), 3, op("put"), "2".into())
    );
    // From a revision: everything from rev 2 on, all keys.
    let mut from = within(OP, "watch from", kv.watch_all_from_revision(2))
        .await
        .expect("watch from revision");
    assert_eq!(
        next(&mut from).await,
        ("b".into(), 2, op("put"), "1".into())
    );
    assert_eq!(
        next(&mut from).await,
        ("a".into(), 3, op("put"), "2".into())
    );

    put(&kv, "b", "2").await;
    within(OP, "delete", kv.delete("a")).await.expect("delete");
    put(&kv, "c", "1").await;
    assert_eq!(next(&mut all).await, ("b".into(), 4, op("put"), "2".into()));
    assert_eq!(
        next(&mut all).await,
        ("a".into(), 5, op("del"), String::new())
    );
    assert_eq!(next(&mut all).await, ("c".into(), 6, op("put"), "1".into()));
    assert_eq!(
        next(&mut only_b).await,
        ("b".into(), 4, op("put"), "2".into())
    );
    assert_eq!(
        next(&mut hist).await,
        ("a".into(), 5, op("del"), String::new())
    );
    assert_eq!(
        next(&mut from).await,
        ("b".into(), 4, op("put"), "2".into())
    );

    // seen_current / delta on a last-per-subject watch over existing keys.
    let mut w = within(
        OP,
        "watch all history",
        kv.watch_many_with_history(["a", "b", "c"]),
    )
    .await
    .expect("watch many with history");
    let mut got = Vec::new();
    for _ in 0..3 {
        let e = within(OP, "entry", w.next())
            .await
            .expect("ended")
            .expect("entry");
        got.push((e.key, e.revision, e.delta, e.seen_current));
    }
    assert_eq!(
        got,
        vec![
            ("b".into(), 4, 2, false),
            ("a".into(), 5, 1, false),
            ("c".into(), 6, 0, true),
        ]
    );
    assert_clean_log(&srv);
}

#[tokio::test]
async fn kv_per_key_ttl_and_limit_markers() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let kv = bucket(
        &js,
        kv::Config {
            limit_markers: Some(Duration::from_secs(1)),
            ..config("TTL", 3)
        },
    )
    .await;
    let info = api(&nc, "$JS.API.STREAM.INFO.KV_TTL", Value::Null).await;
    assert_eq!(info["config"]["allow_msg_ttl"], true, "{info}");
    assert_eq!(
        info["config"]["subject_delete_marker_ttl"], 1_000_000_000u64,
        "{info}"
    );

    let mut watch = within(OP, "watch", kv.watch_all()).await.expect("watch");
    let r = within(
        OP,
        "create with ttl",
        kv.create_with_ttl("k", "v".into(), Duration::from_secs(1)),
    )
    .await
    .expect("create with ttl");
    assert_eq!(r, 1);
    put(&kv, "keep", "v").await;
    let m = api(&nc, "$JS.API.STREAM.MSG.GET.KV_TTL", json!({"seq": 1})).await;
    let hdrs = base64_text(m["message"]["hdrs"].as_str().expect("hdrs"));
    assert!(hdrs.contains("Nats-TTL: 1"), "{hdrs}");
    assert_eq!(
        next(&mut watch).await,
        ("k".into(), 1, op("put"), "v".into())
    );
    assert_eq!(
        next(&mut watch).await,
        ("keep".into(), 2, op("put"), "v".into())
    );

    // The key expires; the server leaves a MaxAge marker (a purge to the client) ...
    let (key, rev, operation, _) = next(&mut watch).await;
    assert_eq!((key.as_str(), rev, operation), ("k", 3, Operation::Purge));
    let m = api(&nc, "$JS.API.STREAM.MSG.GET.KV_TTL", json!({"seq": 3})).await;
    let hdrs = base64_text(m["message"]["hdrs"].as_str().expect("hdrs"));
    assert!(hdrs.contains("Nats-Marker-Reason: MaxAge"), "{hdrs}");
    assert!(hdrs.contains("Nats-TTL: 1s"), "{hdrs}");
    let e = entry(&kv, "k").await.expect("marker entry");
    assert_eq!((e.revision, e.operation), (3, Operation::Purge));
    assert_eq!(within(OP, "get", kv.get("k")).await.expect("get"), None);
    // The marker itself expires after the marker TTL, leaving the subject empty.
    wait_for("marker expired", Duration::from_secs(10), || {
        let nc = nc.clone();
        async move {
            let info = api(&nc, "$JS.API.STREAM.INFO.KV_TTL", Value::Null).await;
            (info["state"]["messages"] == 1).then_some(())
        }
    })
    .await;
    assert_eq!(keys(&kv).await, vec!["keep"]);

    // A purge marker with a TTL expires too, without leaving another marker.
    put(&kv, "p", "v").await;
    within(
        OP,
        "purge with ttl",
        kv.purge_with_ttl("p", Duration::from_secs(1)),
    )
    .await
    .expect("purge with ttl");
    wait_for("purge marker expired", Duration::from_secs(10), || {
        let nc = nc.clone();
        async move {
            let info = api(&nc, "$JS.API.STREAM.INFO.KV_TTL", Value::Null).await;
            (info["state"]["messages"] == 1).then_some(())
        }
    })
    .await;
    let info = api(&nc, "$JS.API.STREAM.INFO.KV_TTL", Value::Null).await;
    assert_eq!(info["state"]["last_seq"], 5, "{info}");

    // TTL needs allow_msg_ttl.
    let plain = bucket(&js, config("NOTTL", 1)).await;
    let err = within(
        OP,
        "ttl on plain bucket",
        plain.create_with_ttl("k", "v".into(), Duration::from_secs(5)),
    )
    .await;
    assert!(err.is_err());
    let ack = publish(&nc, "$KV.NOTTL.k", &[("Nats-TTL", "5s")], "v").await;
    assert_eq!(ack["error"]["err_code"], 10166, "{ack}");
    assert_clean_log(&srv);
}

#[tokio::test]
async fn kv_max_age_expires_values() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let kv = bucket(
        &js,
        kv::Config {
            max_age: Duration::from_secs(1),
            ..config("AGE", 1)
        },
    )
    .await;
    let info = api(&nc, "$JS.API.STREAM.INFO.KV_AGE", Value::Null).await;
    assert_eq!(
        info["config"]["duplicate_window"], 1_000_000_000u64,
        "{info}"
    );
    put(&kv, "k", "v").await;
    assert_eq!(
        within(OP, "get", kv.get("k")).await.expect("get"),
        Some(Bytes::from("v"))
    );
    wait_for("value expired", Duration::from_secs(10), || {
        let kv = kv.clone();
        async move {
            let v = kv.get("k").await.ok()?;
            v.is_none().then_some(())
        }
    })
    .await;
    let info = api(&nc, "$JS.API.STREAM.INFO.KV_AGE", Value::Null).await;
    assert_eq!(info["state"]["messages"], 0, "{info}");
    assert_eq!(info["state"]["last_seq"], 1, "{info}");
    assert_clean_log(&srv);
}

/// The stream features buckets and object stores use, through raw requests: rollup,
/// last-per-subject deliveries with headers only, direct get (subject-appended and by
/// sequence) versus message get, purge with filter and keep, discard new per subject.
#[tokio::test]
async fn kv_stream_features_through_raw_requests() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let r = api(
        &nc,
        "$JS.API.STREAM.CREATE.KV_RAW",
        json!({"name": "KV_RAW", "subjects": ["$KV.RAW.>"], "max_msgs_per_subject": 5,
               "discard": "new", "allow_rollup_hdrs": true, "deny_delete": true,
               "allow_direct": true}),
    )
    .await;
    assert!(r["error"].is_null(), "{r}");
    for (i, k) in ["a", "b", "a", "c.d", "a"].iter().enumerate() {
        let ack = publish(&nc, &format!("$KV.RAW.{k}"), &[], &format!("v{}", i + 1)).await;
        assert_eq!(ack["seq"], i as u64 + 1, "{ack}");
    }
    // Direct get, subject appended: the stored message with stream headers.
    let msg = within(
        OP,
        "direct get",
        nc.request("$JS.API.DIRECT.GET.KV_RAW.$KV.RAW.a", Bytes::new()),
    )
    .await
    .expect("direct get");
    assert_eq!(msg.payload, Bytes::from("v5"));
    let h = msg.headers.expect("headers");
    assert_eq!(h.get("Nats-Sequence").map(|v| v.as_str()), Some("5"));
    assert_eq!(h.get("Nats-Subject").map(|v| v.as_str()), Some("$KV.RAW.a"));
    assert_eq!(h.get("Nats-Stream").map(|v| v.as_str()), Some("KV_RAW"));
    // Direct get by sequence, and not found.
    let msg = within(
        OP,
        "direct get seq",
        nc.request("$JS.API.DIRECT.GET.KV_RAW", Bytes::from(r#"{"seq":2}"#)),
    )
    .await
    .expect("direct get seq");
    assert_eq!(msg.payload, Bytes::from("v2"));
    let msg = within(
        OP,
        "direct get missing",
        nc.request("$JS.API.DIRECT.GET.KV_RAW.$KV.RAW.zz", Bytes::new()),
    )
    .await
    .expect("direct get missing");
    assert_eq!(msg.status.map(|s| s.as_u16()), Some(404));
    // Message get by last subject, with a wildcard.
    let m = api(
        &nc,
        "$JS.API.STREAM.MSG.GET.KV_RAW",
        json!({"last_by_subj": "$KV.RAW.c.>"}),
    )
    .await;
    assert_eq!(m["message"]["seq"], 4, "{m}");
    let m = api(
        &nc,
        "$JS.API.STREAM.MSG.GET.KV_RAW",
        json!({"last_by_subj": "$KV.RAW.zz"}),
    )
    .await;
    assert_eq!(m["error"]["err_code"], 10037, "{m}");

    // Last per subject with headers only: one delivery per subject, newest, no body.
    let inbox = nc.new_inbox();
    let mut sub = within(OP, "sub", nc.subscribe(inbox.clone()))
        .await
        .expect("sub");
    let c = api(
        &nc,
        "$JS.API.CONSUMER.CREATE.KV_RAW",
        json!({"stream_name": "KV_RAW", "config": {"deliver_policy": "last_per_subject",
               "ack_policy": "none", "headers_only": true, "deliver_subject": inbox,
               "filter_subject": "$KV.RAW.>", "max_deliver": 1, "mem_storage": true,
               "flow_control": true, "idle_heartbeat": 5_000_000_000u64}}),
    )
    .await;
    assert!(c["error"].is_null(), "{c}");
    assert_eq!(c["num_pending"], 3, "{c}");
    let mut seen = Vec::new();
    for _ in 0..3 {
        let m = within(OP, "delivery", sub.next()).await.expect("delivery");
        let h = m.headers.expect("headers");
        assert!(m.payload.is_empty());
        seen.push((
            m.subject.to_string(),
            h.get("Nats-Msg-Size").map(|v| v.to_string()),
        ));
    }
    // One per subject, newest, in stream order of those (b=2, c.d=4, a=5), with the size
    // of the body left out.
    let two = Some("2".to_string());
    assert_eq!(
        seen,
        vec![
            ("$KV.RAW.b".to_string(), two.clone()),
            ("$KV.RAW.c.d".to_string(), two.clone()),
            ("$KV.RAW.a".to_string(), two),
        ]
    );

    // Rollup on a subject keeps only the new message; a bogus value is refused.
    let ack = publish(&nc, "$KV.RAW.a", &[("Nats-Rollup", "sub")], "r").await;
    assert_eq!(ack["seq"], 6, "{ack}");
    let ack = publish(&nc, "$KV.RAW.a", &[("Nats-Rollup", "x")], "r").await;
    assert_eq!(ack["error"]["err_code"], 10111, "{ack}");
    let info = api(&nc, "$JS.API.STREAM.INFO.KV_RAW", Value::Null).await;
    assert_eq!(info["state"]["messages"], 3, "{info}");

    // Purge with filter and keep.
    for i in 0..4 {
        publish(&nc, "$KV.RAW.b", &[], &format!("b{i}")).await;
    }
    let p = api(
        &nc,
        "$JS.API.STREAM.PURGE.KV_RAW",
        json!({"filter": "$KV.RAW.b", "keep": 2}),
    )
    .await;
    assert_eq!(p["purged"], 3, "{p}");
    let p = api(
        &nc,
        "$JS.API.STREAM.PURGE.KV_RAW",
        json!({"filter": "$KV.RAW.c.>"}),
    )
    .await;
    assert_eq!(p["purged"], 1, "{p}");
    let info = api(&nc, "$JS.API.STREAM.INFO.KV_RAW", Value::Null).await;
    assert_eq!(info["state"]["messages"], 3, "{info}");
    assert_eq!(info["state"]["num_subjects"], 2, "{info}");

    // Discard new per subject: the sixth value of a subject is refused.
    let r = api(
        &nc,
        "$JS.API.STREAM.CREATE.PER",
        json!({"name": "PER", "subjects": ["per.*"], "max_msgs_per_subject": 2,
               "discard": "new", "discard_new_per_subject": true}),
    )
    .await;
    assert!(r["error"].is_null(), "{r}");
    publish(&nc, "per.a", &[], "1").await;
    publish(&nc, "per.a", &[], "2").await;
    let ack = publish(&nc, "per.a", &[], "3").await;
    assert_eq!(ack["error"]["err_code"], 10077, "{ack}");
    assert_eq!(
        ack["error"]["description"],
        "maximum messages per subject exceeded"
    );
    let ack = publish(&nc, "per.b", &[], "1").await;
    assert_eq!(ack["seq"], 3, "{ack}");
    assert_clean_log(&srv);
}

/// An R3 bucket on three nodes: writes through one node, reads, watches and history through
/// the others, and a compare-and-set conflict between two nodes' clients.
#[tokio::test]
async fn kv_r3_bucket_across_nodes() {
    let cluster = Cluster::start(3, "kv").await.expect("cluster");
    let c0 = connect(cluster.node(0)).await;
    let c1 = connect(cluster.node(1)).await;
    let c2 = connect(cluster.node(2)).await;
    let js0 = jetstream::new(c0.clone());
    let kv0 = wait_for("R3 bucket created", ELECTION, || {
        let js0 = js0.clone();
        async move {
            js0.create_key_value(kv::Config {
                num_replicas: 3,
                ..config("R3", 5)
            })
            .await
            .ok()
        }
    })
    .await;
    let info = info_with_leader(&c1, "KV_R3").await;
    assert_eq!(info["config"]["num_replicas"], 3, "{info}");
    let kv1 = within(OP, "bind", jetstream::new(c1.clone()).get_key_value("R3"))
        .await
        .expect("bind on n2");
    let kv2 = within(OP, "bind", jetstream::new(c2.clone()).get_key_value("R3"))
        .await
        .expect("bind on n3");

    let mut watch = within(OP, "watch on n3", kv2.watch_all())
        .await
        .expect("watch");
    assert_eq!(put(&kv0, "a", "1").await, 1);
    assert_eq!(put(&kv0, "a", "2").await, 2);
    assert_eq!(put(&kv0, "b", "1").await, 3);
    assert_eq!(
        next(&mut watch).await,
        ("a".into(), 1, op("put"), "1".into())
    );
    assert_eq!(
        next(&mut watch).await,
        ("a".into(), 2, op("put"), "2".into())
    );
    assert_eq!(
        next(&mut watch).await,
        ("b".into(), 3, op("put"), "1".into())
    );

    // Reads through another node (direct gets may be answered by any replica, so wait until
    // the replica that answers has applied the write).
    let got = wait_for("value visible on n2", OP, || {
        let kv1 = kv1.clone();
        async move {
            let e = kv1.entry("a").await.ok()??;
            (e.revision == 2).then_some(e)
        }
    })
    .await;
    assert_eq!(got.value, Bytes::from("2"));
    assert_eq!(
        history(&kv1, "a").await,
        vec![(1, op("put"), "1".into()), (2, op("put"), "2".into())]
    );
    assert_eq!(keys(&kv2).await, vec!["a", "b"]);

    // CAS: both nodes' clients update from revision 2; exactly one wins.
    let r = within(OP, "update n2", kv1.update("a", "from-n2".into(), 2))
        .await
        .expect("first update wins");
    assert_eq!(r, 4);
    let err = within(OP, "update n3", kv2.update("a", "from-n3".into(), 2))
        .await
        .expect_err("second update loses");
    assert_eq!(err.kind(), kv::UpdateErrorKind::WrongLastRevision);
    let err = within(OP, "create n3", kv2.create("a", "x".into()))
        .await
        .expect_err("create over a value");
    assert_eq!(err.kind(), kv::CreateErrorKind::AlreadyExists);
    within(OP, "delete n3", kv2.delete("a"))
        .await
        .expect("delete");
    assert_eq!(
        next(&mut watch).await,
        ("a".into(), 4, op("put"), "from-n2".into())
    );
    assert_eq!(
        next(&mut watch).await,
        ("a".into(), 5, op("del"), String::new())
    );
    let st = within(OP, "status n2", kv1.status()).await.expect("status");
    assert_eq!(st.history(), 5);
    cluster.assert_clean_logs();
}

/// Per-key TTL on an R3 bucket: the leader's expiry is replicated, so after a leader change the
/// new leader holds the same marker (sequence, headers) and then expires it too.
#[tokio::test]
async fn kv_r3_ttl_expiry_survives_leader_change() {
    let cluster = Cluster::start(3, "kv").await.expect("cluster");
    let nc = connect(cluster.node(0)).await;
    let js = jetstream::new(nc.clone());
    let kv = wait_for("R3 bucket created", ELECTION, || {
        let js = js.clone();
        async move {
            js.create_key_value(kv::Config {
                num_replicas: 3,
                limit_markers: Some(Duration::from_secs(2)),
                ..config("RT", 3)
            })
            .await
            .ok()
        }
    })
    .await;
    info_with_leader(&nc, "KV_RT").await;
    put(&kv, "keep", "v").await;
    within(
        OP,
        "create with ttl",
        kv.create_with_ttl("k", "v".into(), Duration::from_secs(2)),
    )
    .await
    .expect("create with ttl");
    // Expired into a marker at seq 3.
    let marker = wait_for("marker written", ELECTION, || {
        let nc = nc.clone();
        async move {
            let m = api(&nc, "$JS.API.STREAM.MSG.GET.KV_RT", json!({"seq": 3})).await;
            m["message"]["hdrs"].as_str().map(base64_text)
        }
    })
    .await;
    assert!(marker.contains("Nats-Marker-Reason: MaxAge"), "{marker}");
    let before = info_with_leader(&nc, "KV_RT").await["cluster"]["leader"].clone();
    let r = api(&nc, "$JS.API.STREAM.LEADER.STEPDOWN.KV_RT", Value::Null).await;
    assert_eq!(r["success"], true, "{r}");
    let info = wait_for("new leader", ELECTION, || {
        let nc = nc.clone();
        let before = before.clone();
        async move {
            let info = info_with_leader(&nc, "KV_RT").await;
            (info["cluster"]["leader"] != before).then_some(info)
        }
    })
    .await;
    // The marker may already have expired on the new leader (2 s): then only "keep" is left.
    let msgs = info["state"]["messages"].as_u64();
    assert!(matches!(msgs, Some(1 | 2)), "{info}");
    assert_eq!(info["state"]["last_seq"], 3, "{info}");
    wait_for("marker expired", ELECTION, || {
        let nc = nc.clone();
        async move {
            let info = info_with_leader(&nc, "KV_RT").await;
            (info["state"]["messages"] == 1 && info["state"]["last_seq"] == 3).then_some(())
        }
    })
    .await;
    let e = entry(&kv, "keep").await.expect("keep");
    assert_eq!(e.revision, 1);
    cluster.assert_clean_logs();
}
