//! Stream backup and restore (`$JS.API.STREAM.SNAPSHOT` / `RESTORE`) through raw requests as the
//! `nats` CLI makes them: a snapshot taken while publishing is one point of the stream, a
//! restore into a fresh server (and a fresh three-node cluster as R3) gives back every message
//! at its sequence with its subject, headers, payload and time, gaps included, and every
//! consumer's position; the errors and the flow control are nats-server's.
//!
//! Every test also runs against the real nats-server (`JETRAFT_TEST_SERVER=nats-server`).

use std::future::IntoFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream;
use bytes::Bytes;
use futures_util::StreamExt;
use jetraft_tests::harness::backup::{Acks, Backup, StoredMessage, messages, restore, snapshot};
use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::jsapi::{api, info_with_leader};
use jetraft_tests::harness::{
    ServerKind, ServerOptions, ServerProcess, connect, server_kind, start_server, within,
};
use serde_json::{Value, json};

const OP: Duration = Duration::from_secs(10);

fn err_code(v: &Value) -> Option<u64> {
    v["error"]["err_code"].as_u64()
}

/// A consumer's position: delivered, ack floor and the counts, without times.
async fn position(nc: &async_nats::Client, stream: &str, consumer: &str) -> Value {
    let info = api(
        nc,
        &format!("$JS.API.CONSUMER.INFO.{stream}.{consumer}"),
        Value::Null,
    )
    .await;
    assert!(info["error"].is_null(), "{info}");
    let pair =
        |v: &Value| json!({"consumer_seq": v["consumer_seq"], "stream_seq": v["stream_seq"]});
    json!({
        "delivered": pair(&info["delivered"]),
        "ack_floor": pair(&info["ack_floor"]),
        "num_pending": info["num_pending"],
        "num_ack_pending": info["num_ack_pending"],
        "num_redelivered": info["num_redelivered"],
    })
}

/// The stream sequence of the next message `consumer` of S delivers.
async fn next_stream_seq(nc: &async_nats::Client, consumer: &str) -> u64 {
    let js = jetstream::new(nc.clone());
    let stream = js.get_stream("S").await.expect("stream");
    let c: jetstream::consumer::PullConsumer =
        stream.get_consumer(consumer).await.expect("consumer");
    let mut batch = c.fetch().max_messages(1).messages().await.expect("fetch");
    let m = within(OP, "next message", batch.next())
        .await
        .expect("a message")
        .expect("message");
    m.info().expect("ack subject").stream_sequence
}

/// Stream S on `s.>` with 40 messages (every third with a header), seqs 2, 17 and 40 deleted,
/// and two durable pull consumers: C1 fetched 10 and acked 6 of them, C2 (`ack_policy: all`)
/// fetched 20 and acked the 15th.
async fn populated(nc: &async_nats::Client, replicas: u64) {
    let created = api(
        nc,
        "$JS.API.STREAM.CREATE.S",
        json!({"name": "S", "subjects": ["s.>"], "num_replicas": replicas}),
    )
    .await;
    assert!(created["error"].is_null(), "{created}");
    let js = jetstream::new(nc.clone());
    for i in 0..40u64 {
        let mut headers = HeaderMap::new();
        if i % 3 == 0 {
            headers.insert("X-Order", format!("o-{i}").as_str());
        }
        let payload = Bytes::from(format!("payload {i} ").repeat(1 + (i as usize % 5)));
        within(
            OP,
            "publish",
            js.publish_with_headers(format!("s.{}", i % 4), headers, payload)
                .await
                .expect("published")
                .into_future(),
        )
        .await
        .expect("acked");
    }
    for seq in [2, 17, 40] {
        let d = api(nc, "$JS.API.STREAM.MSG.DELETE.S", json!({"seq": seq})).await;
        assert_eq!(d["success"], true, "{d}");
    }
    for (name, policy, fetch, acks) in [("C1", "explicit", 10, 6), ("C2", "all", 20, 0)] {
        let c = api(
            nc,
            &format!("$JS.API.CONSUMER.CREATE.S.{name}"),
            json!({"stream_name": "S", "config": {"durable_name": name, "ack_policy": policy}}),
        )
        .await;
        assert!(c["error"].is_null(), "{c}");
        let stream = js.get_stream("S").await.expect("stream");
        let consumer: jetstream::consumer::PullConsumer =
            stream.get_consumer(name).await.expect("consumer");
        let mut batch = consumer
            .fetch()
            .max_messages(fetch)
            .messages()
            .await
            .expect("fetch");
        let mut got = Vec::new();
        while let Some(m) = within(OP, "fetched message", batch.next()).await {
            got.push(m.expect("message"));
        }
        assert_eq!(got.len(), fetch, "{name}");
        for m in got.iter().take(acks) {
            m.double_ack().await.expect("acked");
        }
        if policy == "all" {
            got[14].double_ack().await.expect("acked");
        }
    }
}

/// Everything a restore must reproduce: the stream state, each message and each position.
/// Stream state, messages and consumer positions.
type Picture = (Value, Vec<StoredMessage>, Value);

async fn picture(nc: &async_nats::Client) -> Picture {
    let info = info_with_leader_or_single(nc).await;
    let st = &info["state"];
    let state = json!({
        "messages": st["messages"], "bytes": st["bytes"], "first_seq": st["first_seq"],
        "last_seq": st["last_seq"], "num_deleted": st["num_deleted"],
        "first_ts": st["first_ts"], "consumer_count": st["consumer_count"],
    });
    let first = st["first_seq"].as_u64().expect("first_seq");
    let last = st["last_seq"].as_u64().expect("last_seq");
    let msgs = messages(nc, "S", first, last).await;
    let positions = json!({
        "C1": position(nc, "S", "C1").await,
        "C2": position(nc, "S", "C2").await,
    });
    (state, msgs, positions)
}

/// The picture once it equals `want`, or the last one after a few seconds.
async fn settled(nc: &async_nats::Client, want: &Picture) -> Picture {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = picture(nc).await;
        if &got == want || tokio::time::Instant::now() >= deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn info_with_leader_or_single(nc: &async_nats::Client) -> Value {
    let info = api(nc, "$JS.API.STREAM.INFO.S", Value::Null).await;
    if info["cluster"]["leader"].is_string() || info["cluster"].is_null() {
        return info;
    }
    info_with_leader(nc, "S").await
}

#[tokio::test]
async fn restore_gives_back_messages_gaps_headers_times_and_consumer_positions() {
    let a = start_server().await;
    let nca = connect(&a).await;
    populated(&nca, 1).await;
    let want = picture(&nca).await;
    assert_eq!(want.0["messages"], 37, "{}", want.0);
    let backup = snapshot(&nca, "S", json!({"chunk_size": 1024}), Acks::Prompt).await;
    assert!(backup.response["error"].is_null(), "{}", backup.response);
    assert_eq!(
        backup.response["type"],
        "io.nats.jetstream.api.v1.stream_snapshot_response"
    );
    assert_eq!(backup.response["config"]["name"], "S");
    assert_eq!(backup.response["state"]["last_seq"], 40);
    assert_eq!(backup.response["state"]["consumer_count"], 2);
    assert_eq!(backup.status.as_deref(), Some("204"), "{backup:?}");
    assert!(backup.chunks > 1);

    let b = start_server().await;
    let ncb = connect(&b).await;
    let (answer, done) = restore(&ncb, "S", &backup, 64 * 1024).await;
    assert_eq!(
        answer["type"],
        "io.nats.jetstream.api.v1.stream_restore_response"
    );
    assert!(answer["deliver_subject"].as_str().is_some(), "{answer}");
    let done = done.expect("final answer");
    assert_eq!(
        done["type"], "io.nats.jetstream.api.v1.stream_create_response",
        "{done}"
    );
    assert!(done["error"].is_null(), "{done}");
    assert_eq!(done["state"]["messages"], 37, "{done}");
    let got = picture(&ncb).await;
    assert_eq!(got.0, want.0);
    assert_eq!(got.1, want.1);
    assert_eq!(got.2, want.2);
    // The restored consumer goes on from its position on both servers alike.
    let next_a = next_stream_seq(&nca, "C1").await;
    let next_b = next_stream_seq(&ncb, "C1").await;
    assert_eq!(next_b, next_a);
    assert_eq!(next_b, 12);
    // The restored stream takes publishes after its last sequence.
    let js = jetstream::new(ncb.clone());
    let ack = within(
        OP,
        "publish",
        js.publish("s.9", "after".into())
            .await
            .expect("sent")
            .into_future(),
    )
    .await
    .expect("acked");
    assert_eq!(ack.sequence, 41);
}

#[tokio::test]
async fn a_snapshot_without_consumers_restores_none() {
    let a = start_server().await;
    let nca = connect(&a).await;
    populated(&nca, 1).await;
    let backup = snapshot(&nca, "S", json!({"no_consumers": true}), Acks::Prompt).await;
    assert!(backup.response["error"].is_null(), "{}", backup.response);
    let b = start_server().await;
    let ncb = connect(&b).await;
    let (_, done) = restore(&ncb, "S", &backup, 64 * 1024).await;
    let done = done.expect("final answer");
    assert!(done["error"].is_null(), "{done}");
    assert_eq!(done["state"]["consumer_count"], 0, "{done}");
    assert_eq!(done["state"]["messages"], 37, "{done}");
}

#[tokio::test]
async fn a_snapshot_while_publishing_is_the_stream_up_to_one_point() {
    let a = start_server().await;
    let nca = connect(&a).await;
    let created = api(
        &nca,
        "$JS.API.STREAM.CREATE.S",
        json!({"name": "S", "subjects": ["s.>"]}),
    )
    .await;
    assert!(created["error"].is_null(), "{created}");
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = {
        let js = jetstream::new(nca.clone());
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut acked = 0u64;
            while !stop.load(Ordering::Relaxed) && acked < 20_000 {
                let ack = js
                    .publish(format!("s.{}", acked % 10), format!("m{acked}").into())
                    .await
                    .expect("sent");
                within(OP, "puback", ack.into_future())
                    .await
                    .expect("acked");
                acked += 1;
            }
            acked
        })
    };
    // Let the stream grow past a few restore entries (1,024 messages each), then take the
    // backup while the publisher goes on.
    jetraft_tests::harness::wait_for("2,500 messages", Duration::from_secs(60), || {
        let nca = nca.clone();
        async move {
            let info = api(&nca, "$JS.API.STREAM.INFO.S", Value::Null).await;
            (info["state"]["messages"].as_u64()? >= 2_500).then_some(())
        }
    })
    .await;
    let backup = snapshot(&nca, "S", json!({"chunk_size": 2048}), Acks::Prompt).await;
    stop.store(true, Ordering::Relaxed);
    let published = within(OP, "publisher", publisher).await.expect("publisher");
    let n = backup.response["state"]["last_seq"]
        .as_u64()
        .expect("last_seq");
    assert!(n >= 2_500 && n < published, "{n} of {published}");

    let b = start_server().await;
    let ncb = connect(&b).await;
    let (_, done) = restore(&ncb, "S", &backup, 64 * 1024).await;
    let done = done.expect("final answer");
    assert!(done["error"].is_null(), "{done}");
    // Exactly messages 1..=N, each as stored on the origin.
    assert_eq!(done["state"]["messages"], n, "{done}");
    assert_eq!(done["state"]["first_seq"], 1, "{done}");
    assert_eq!(done["state"]["last_seq"], n, "{done}");
    let want = messages(&nca, "S", 1, n).await;
    let got = messages(&ncb, "S", 1, n).await;
    assert_eq!(got.len() as u64, n);
    assert_eq!(got, want);
}

#[tokio::test]
async fn restoring_an_existing_stream_is_refused_with_10130() {
    let a = start_server().await;
    let nc = connect(&a).await;
    populated(&nc, 1).await;
    let backup = snapshot(&nc, "S", json!({}), Acks::Prompt).await;
    let (answer, done) = restore(&nc, "S", &backup, 64 * 1024).await;
    assert!(done.is_none());
    assert_eq!(err_code(&answer), Some(10130), "{answer}");
    assert_eq!(answer["error"]["code"], 400);
    assert_eq!(
        answer["error"]["description"],
        "stream name already in use, cannot restore"
    );
    assert_eq!(
        answer["type"],
        "io.nats.jetstream.api.v1.stream_restore_response"
    );
}

#[tokio::test]
async fn snapshot_request_errors_match_nats_server() {
    let a = start_server().await;
    let nc = connect(&a).await;
    let missing = api(
        &nc,
        "$JS.API.STREAM.SNAPSHOT.NOPE",
        json!({"deliver_subject": "x.y"}),
    )
    .await;
    assert_eq!(err_code(&missing), Some(10059), "{missing}");
    assert_eq!(missing["error"]["code"], 404);
    let created = api(
        &nc,
        "$JS.API.STREAM.CREATE.S",
        json!({"name": "S", "subjects": ["s.>"]}),
    )
    .await;
    assert!(created["error"].is_null(), "{created}");
    let empty = api(&nc, "$JS.API.STREAM.SNAPSHOT.S", Value::Null).await;
    assert_eq!(err_code(&empty), Some(10003), "{empty}");
    for bad in ["", "a.*", "a.>", "a..b"] {
        let r = api(
            &nc,
            "$JS.API.STREAM.SNAPSHOT.S",
            json!({"deliver_subject": bad}),
        )
        .await;
        assert_eq!(err_code(&r), Some(10015), "{bad:?}: {r}");
        assert_eq!(r["error"]["description"], "deliver subject not valid");
        assert_eq!(
            r["type"],
            "io.nats.jetstream.api.v1.stream_snapshot_response"
        );
    }
    let mismatch = api(
        &nc,
        "$JS.API.STREAM.RESTORE.T",
        json!({"config": {"name": "U", "subjects": ["u"]}, "state": {}}),
    )
    .await;
    assert_eq!(err_code(&mismatch), Some(10056), "{mismatch}");
    let no_body = api(&nc, "$JS.API.STREAM.RESTORE.T", Value::Null).await;
    assert_eq!(err_code(&no_body), Some(10003), "{no_body}");
}

#[tokio::test]
async fn a_slow_acker_gets_the_whole_backup_and_a_silent_one_gets_408() {
    let a = start_server().await;
    let nc = connect(&a).await;
    let created = api(
        &nc,
        "$JS.API.STREAM.CREATE.S",
        json!({"name": "S", "subjects": ["s.>"]}),
    )
    .await;
    assert!(created["error"].is_null(), "{created}");
    let js = jetstream::new(nc.clone());
    // Incompressible payloads, so the backup spans many 1 KiB chunks.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in 0..60 {
        let payload: Vec<u8> = (0..600)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        within(
            OP,
            "publish",
            js.publish(format!("s.{i}"), payload.into())
                .await
                .expect("sent")
                .into_future(),
        )
        .await
        .expect("acked");
    }
    // Two chunks in flight at most, each acknowledged 30 ms late.
    let slow = json!({"chunk_size": 1024, "window_size": 2048});
    let backup = snapshot(
        &nc,
        "S",
        slow.clone(),
        Acks::Slow(Duration::from_millis(30)),
    )
    .await;
    assert_eq!(backup.status.as_deref(), Some("204"), "{backup:?}");
    assert!(backup.chunks >= 30, "{} chunks", backup.chunks);
    let b = start_server().await;
    let ncb = connect(&b).await;
    let (_, done) = restore(&ncb, "S", &backup, 64 * 1024).await;
    let done = done.expect("final answer");
    assert_eq!(done["state"]["messages"], 60, "{done}");
    assert_eq!(
        messages(&ncb, "S", 1, 60).await,
        messages(&nc, "S", 1, 60).await
    );
    // A receiver that never acknowledges gets the window, then the end with 408.
    let silent: Backup = snapshot(&nc, "S", slow, Acks::Never).await;
    assert_eq!(silent.chunks, 2, "{silent:?}");
    assert_eq!(silent.status.as_deref(), Some("408"), "{silent:?}");
    assert_eq!(silent.description.as_deref(), Some("No Flow Response"));
}

#[tokio::test]
async fn a_corrupt_backup_is_refused_with_10062_and_leaves_no_stream() {
    let a = start_server().await;
    let nc = connect(&a).await;
    populated(&nc, 1).await;
    let mut backup = snapshot(&nc, "S", json!({}), Acks::Prompt).await;
    let b = start_server().await;
    let ncb = connect(&b).await;
    let at = backup.data.len() / 2;
    backup.data[at] ^= 0x55;
    let (_, done) = restore(&ncb, "S", &backup, 64 * 1024).await;
    let done = done.expect("an error answer");
    assert_eq!(err_code(&done), Some(10062), "{done}");
    assert_eq!(done["error"]["code"], 500);
    let info = api(&ncb, "$JS.API.STREAM.INFO.S", Value::Null).await;
    assert_eq!(err_code(&info), Some(10059), "{info}");
}

#[tokio::test]
async fn an_r3_backup_restores_into_a_fresh_cluster_as_r3() {
    let origin = Cluster::start(3, "bk1").await.expect("cluster");
    let nc0 = connect(origin.node(0)).await;
    let nc1 = connect(origin.node(1)).await;
    populated(&nc0, 3).await;
    let mut want = picture(&nc1).await;
    // Asked through another node than the one that created it.
    let backup = snapshot(&nc1, "S", json!({"chunk_size": 1024}), Acks::Prompt).await;
    assert!(backup.response["error"].is_null(), "{}", backup.response);
    assert_eq!(backup.status.as_deref(), Some("204"), "{backup:?}");
    assert_eq!(backup.response["config"]["num_replicas"], 3);

    // nats-server's clustered backup has no per-message pending state: it rolls each consumer
    // back to its ack floor (its unacknowledged messages are delivered again). jetraft keeps
    // the exact position.
    if server_kind() == ServerKind::NatsServer {
        for c in ["C1", "C2"] {
            let p = &mut want.2[c];
            p["delivered"] = p["ack_floor"].clone();
            let pending = p["num_pending"].as_u64().unwrap_or(0);
            let ack_pending = p["num_ack_pending"].as_u64().unwrap_or(0);
            p["num_pending"] = json!(pending + ack_pending);
            p["num_ack_pending"] = json!(0);
        }
    }
    let target = Cluster::start(3, "bk2").await.expect("cluster");
    let conns = [
        connect(target.node(0)).await,
        connect(target.node(1)).await,
        connect(target.node(2)).await,
    ];
    // The meta group answers (a restore request is not retried by clients).
    let names = api(&conns[2], "$JS.API.STREAM.NAMES", Value::Null).await;
    assert!(names["error"].is_null(), "{names}");
    let (_, done) = restore(&conns[2], "S", &backup, 16 * 1024).await;
    let done = done.expect("final answer");
    assert!(done["error"].is_null(), "{done}");
    assert_eq!(done["config"]["num_replicas"], 3, "{done}");
    for nc in &conns {
        let info = info_with_leader(nc, "S").await;
        assert_eq!(
            info["cluster"]["replicas"].as_array().map(Vec::len),
            Some(2),
            "{info}"
        );
        // nats-server restores a clustered stream's consumers a moment after its answer.
        let got = settled(nc, &want).await;
        assert_eq!(got.0, want.0);
        assert_eq!(got.1, want.1);
        assert_eq!(got.2, want.2);
    }
    // Every replica holds the data: after two leader changes the stream still reads the same.
    for _ in 0..2 {
        let before = info_with_leader(&conns[0], "S").await["cluster"]["leader"].clone();
        let down = api(&conns[0], "$JS.API.STREAM.LEADER.STEPDOWN.S", Value::Null).await;
        assert_eq!(down["success"], true, "{down}");
        jetraft_tests::harness::wait_for("new leader", Duration::from_secs(30), || {
            let nc = conns[0].clone();
            let before = before.clone();
            async move {
                let info = info_with_leader(&nc, "S").await;
                (info["cluster"]["leader"] != before).then_some(())
            }
        })
        .await;
        let got = picture(&conns[1]).await;
        assert_eq!(got.1, want.1);
    }
}

/// Starts a server of `kind`.
async fn start_kind(kind: ServerKind) -> ServerProcess {
    ServerProcess::start(ServerOptions {
        kind: Some(kind),
        ..ServerOptions::default()
    })
    .await
    .expect("start server")
}

#[tokio::test]
async fn backups_move_between_jetraft_and_nats_server_both_ways() {
    for (from, to) in [
        (ServerKind::NatsServer, ServerKind::Jetraft),
        (ServerKind::Jetraft, ServerKind::NatsServer),
    ] {
        let a = start_kind(from).await;
        let nca = connect(&a).await;
        populated(&nca, 1).await;
        let want = picture(&nca).await;
        let backup = snapshot(&nca, "S", json!({}), Acks::Prompt).await;
        assert_eq!(
            backup.status, None,
            "{from:?}: one short chunk, then a bare end"
        );
        let b = start_kind(to).await;
        let ncb = connect(&b).await;
        let (_, done) = restore(&ncb, "S", &backup, 64 * 1024).await;
        let done = done.expect("final answer");
        assert!(done["error"].is_null(), "{from:?} -> {to:?}: {done}");
        let got = picture(&ncb).await;
        for key in [
            "messages",
            "bytes",
            "first_seq",
            "last_seq",
            "first_ts",
            "consumer_count",
        ] {
            assert_eq!(got.0[key], want.0[key], "{from:?} -> {to:?}: {key}");
        }
        assert_eq!(got.1, want.1, "{from:?} -> {to:?}");
        assert_eq!(got.2, want.2, "{from:?} -> {to:?}");
    }
}

#[tokio::test]
async fn empty_and_purged_streams_keep_their_next_sequence() {
    let a = start_server().await;
    let nca = connect(&a).await;
    for (name, publishes) in [("EMPTY", 0u64), ("PURGED", 10)] {
        let created = api(
            &nca,
            &format!("$JS.API.STREAM.CREATE.{name}"),
            json!({"name": name, "subjects": [format!("{}.>", name.to_lowercase())]}),
        )
        .await;
        assert!(created["error"].is_null(), "{created}");
        let js = jetstream::new(nca.clone());
        for i in 0..publishes {
            let subject = format!("{}.{i}", name.to_lowercase());
            within(
                OP,
                "publish",
                js.publish(subject, "x".into())
                    .await
                    .expect("sent")
                    .into_future(),
            )
            .await
            .expect("acked");
        }
        let purged = api(&nca, &format!("$JS.API.STREAM.PURGE.{name}"), Value::Null).await;
        assert_eq!(purged["success"], true, "{purged}");
    }
    let b = start_server().await;
    let ncb = connect(&b).await;
    for (name, next) in [("EMPTY", 1u64), ("PURGED", 11)] {
        let backup = snapshot(&nca, name, json!({}), Acks::Prompt).await;
        assert!(backup.response["error"].is_null(), "{}", backup.response);
        let (_, done) = restore(&ncb, name, &backup, 64 * 1024).await;
        let done = done.expect("final answer");
        assert!(done["error"].is_null(), "{done}");
        assert_eq!(done["state"]["messages"], 0, "{done}");
        assert_eq!(done["state"]["last_seq"], next - 1, "{done}");
        let js = jetstream::new(ncb.clone());
        let subject = format!("{}.after", name.to_lowercase());
        let ack = within(
            OP,
            "publish",
            js.publish(subject, "y".into())
                .await
                .expect("sent")
                .into_future(),
        )
        .await
        .expect("acked");
        assert_eq!(ack.sequence, next, "{name}");
    }
}

/// The `type`s of the backup advisories on `sub` (snapshot/restore create and complete), with
/// their `stream`, until `want` of them arrived.
async fn backup_advisories(sub: &mut async_nats::Subscriber, want: usize) -> Vec<Value> {
    let mut out = Vec::new();
    while out.len() < want {
        let m = within(OP, "advisory", sub.next()).await.expect("advisory");
        let v: Value = serde_json::from_slice(&m.payload).expect("JSON advisory");
        let kind = v["type"].as_str().unwrap_or_default();
        if kind.contains(".snapshot_") || kind.contains(".restore_") {
            assert_eq!(v["stream"], "S", "{v}");
            assert!(m.subject.ends_with(".S"), "{}", m.subject);
            out.push(v);
        }
    }
    out
}

#[tokio::test]
async fn backups_send_nats_server_advisories() {
    let a = start_server().await;
    let nca = connect(&a).await;
    populated(&nca, 1).await;
    let mut adv_a = nca
        .subscribe("$JS.EVENT.ADVISORY.STREAM.>")
        .await
        .expect("subscribe");
    let backup = snapshot(&nca, "S", json!({}), Acks::Prompt).await;
    let seen = backup_advisories(&mut adv_a, 2).await;
    assert_eq!(
        seen[0]["type"],
        "io.nats.jetstream.advisory.v1.snapshot_create"
    );
    assert_eq!(seen[0]["state"]["messages"], 37, "{}", seen[0]);
    assert_eq!(
        seen[1]["type"],
        "io.nats.jetstream.advisory.v1.snapshot_complete"
    );
    assert!(
        seen[1]["start"].is_string() && seen[1]["end"].is_string(),
        "{}",
        seen[1]
    );
    assert!(seen[1]["error"].is_null(), "{}", seen[1]);

    let b = start_server().await;
    let ncb = connect(&b).await;
    let mut adv_b = ncb
        .subscribe("$JS.EVENT.ADVISORY.STREAM.>")
        .await
        .expect("subscribe");
    let (_, done) = restore(&ncb, "S", &backup, 64 * 1024).await;
    assert!(done.expect("final answer")["error"].is_null());
    let seen = backup_advisories(&mut adv_b, 2).await;
    assert_eq!(
        seen[0]["type"],
        "io.nats.jetstream.advisory.v1.restore_create"
    );
    assert_eq!(
        seen[1]["type"],
        "io.nats.jetstream.advisory.v1.restore_complete"
    );
    assert_eq!(seen[1]["bytes"], backup.data.len(), "{}", seen[1]);
}
