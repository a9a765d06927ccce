//! JetStream consumers through the official Rust client (async-nats 0.51) and raw `$JS.API`
//! requests on one node: pull and push consumers, acks (incl. AckSync, NAK, TERM), ack_wait
//! redelivery, max_deliver with its advisory and the dead-letter extension, ordered consumers,
//! KV watchers, work-queue and interest retention, consumer state across restarts.
//!
//! Run against the real nats-server too (`JETRAFT_TEST_SERVER=nats-server`), except the
//! dead-letter test (a jetraft extension) and the `num_pending` read-after-publish and
//! read-after-flush tests (nats-server can answer before it counted the last messages).

use std::future::IntoFuture;
use std::time::Duration;

use async_nats::jetstream::consumer::{self, AckPolicy, DeliverPolicy, pull, push};
use async_nats::jetstream::{self, AckKind, stream};
use bytes::Bytes;
use futures_util::StreamExt;
use jetraft_tests::harness::{ServerKind, ServerProcess, server_kind, within};
use jetraft_tests::harness::{connect, start_server};
use serde_json::{Value, json};

const OP: Duration = Duration::from_secs(10);

/// A raw API request; returns the JSON answer.
async fn api(nc: &async_nats::Client, subject: &str, body: Value) -> Value {
    let payload = if body.is_null() {
        Bytes::new()
    } else {
        Bytes::from(body.to_string())
    };
    let msg = within(OP, subject, nc.request(subject.to_string(), payload))
        .await
        .unwrap_or_else(|e| panic!("request {subject}: {e}"));
    serde_json::from_slice(&msg.payload).expect("API answers JSON")
}

fn err_code(v: &Value) -> Option<u64> {
    v["error"]["err_code"].as_u64()
}

async fn stream_with(js: &jetstream::Context, cfg: stream::Config) -> stream::Stream {
    within(OP, "create stream", js.create_stream(cfg))
        .await
        .expect("create stream")
}

async fn publish_n(js: &jetstream::Context, subject: &str, n: usize) {
    for i in 0..n {
        let ack = within(
            OP,
            "publish",
            js.publish(subject.to_string(), format!("m{i}").into()),
        )
        .await
        .expect("publish");
        within(OP, "puback", ack.into_future())
            .await
            .expect("puback");
    }
}

/// A durable pull consumer `name` on `s` with explicit acks, the rest defaults.
async fn durable_explicit(s: &stream::Stream, name: &str) -> consumer::Consumer<pull::Config> {
    within(
        OP,
        "create consumer",
        s.create_consumer(pull::Config {
            durable_name: Some(name.into()),
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        }),
    )
    .await
    .expect("consumer")
}

async fn fetch(consumer: &consumer::Consumer<pull::Config>, n: usize) -> Vec<jetstream::Message> {
    let mut batch = within(
        OP,
        "fetch",
        consumer
            .fetch()
            .max_messages(n)
            .expires(Duration::from_millis(500))
            .messages(),
    )
    .await
    .expect("fetch");
    let mut out = Vec::new();
    while let Some(m) = within(OP, "fetch next", batch.next()).await {
        out.push(m.expect("message"));
    }
    out
}

async fn info(consumer: &mut consumer::Consumer<pull::Config>) -> consumer::Info {
    within(OP, "consumer info", consumer.info())
        .await
        .expect("info")
        .clone()
}

#[tokio::test]
async fn pull_consumer_fetch_ack_and_info() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let s = stream_with(
        &js,
        stream::Config {
            name: "PULL".into(),
            subjects: vec!["pull.>".into()],
            ..Default::default()
        },
    )
    .await;
    publish_n(&js, "pull.a", 10).await;
    let mut c: consumer::Consumer<pull::Config> = within(
        OP,
        "create consumer",
        s.create_consumer(pull::Config {
            durable_name: Some("worker".into()),
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        }),
    )
    .await
    .expect("create consumer");
    let i = info(&mut c).await;
    assert_eq!(i.num_pending, 10);
    assert_eq!(i.delivered.stream_sequence, 0);
    assert_eq!(i.config.max_ack_pending, 1000);
    assert_eq!(i.config.ack_wait, Duration::from_secs(30));

    let msgs = fetch(&c, 4).await;
    assert_eq!(msgs.len(), 4);
    for (k, m) in msgs.iter().enumerate() {
        assert_eq!(m.subject.as_str(), "pull.a");
        assert_eq!(m.payload, format!("m{k}"));
        let mi = m.info().expect("ack info");
        assert_eq!(mi.stream_sequence, k as u64 + 1);
        assert_eq!(mi.consumer_sequence, k as u64 + 1);
        assert_eq!(mi.delivered, 1);
        assert_eq!(mi.pending, 10 - k as u64 - 1);
    }
    let i = info(&mut c).await;
    assert_eq!(i.num_ack_pending, 4);
    assert_eq!(i.num_pending, 6);
    assert_eq!(i.delivered.stream_sequence, 4);
    // Ack 1, 2 and 4: the floor stops below 3.
    for k in [0, 1, 3] {
        within(OP, "ack", msgs[k].double_ack())
            .await
            .expect("double ack");
    }
    let i = info(&mut c).await;
    assert_eq!(i.num_ack_pending, 1);
    assert_eq!(i.ack_floor.stream_sequence, 2);
    assert_eq!(i.ack_floor.consumer_sequence, 2);
    within(OP, "ack", msgs[2].double_ack()).await.expect("ack");
    let i = info(&mut c).await;
    assert_eq!(i.num_ack_pending, 0);
    assert_eq!(i.ack_floor.stream_sequence, 4);

    // The rest in one fetch; then an empty fetch ends quickly.
    let rest = fetch(&c, 20).await;
    assert_eq!(rest.len(), 6);
    let none = fetch(&c, 5).await;
    assert!(none.is_empty());
}

/// A CONSUMER.INFO right after a PubAck counts that message in `num_pending` (nats.py's
/// `test_pull_subscribe_limits` reads it at once; jetraft's consumer could answer the info
/// before it had seen the append). Each round publishes one message and reads the info.
/// jetraft only: nats-server 2.15.1 lags the same way (this test failed in 3 of 4 runs against
/// it, so the nats.py test is racy there too); jetraft answers as of every acknowledged publish.
#[tokio::test]
async fn num_pending_counts_a_message_acknowledged_just_before_the_info() {
    if server_kind() == ServerKind::NatsServer {
        return; // nats-server's num_pending can miss the last acknowledged message
    }
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let s = stream_with(
        &js,
        stream::Config {
            name: "NUMP".into(),
            subjects: vec!["nump.>".into()],
            ..Default::default()
        },
    )
    .await;
    let mut c = durable_explicit(&s, "reader").await;
    for n in 1..=200u64 {
        publish_n(&js, "nump.a", 1).await;
        let i = info(&mut c).await;
        assert_eq!(i.num_pending, n, "num_pending after publish {n}");
    }
}

/// Publishes without a reply, then the publisher's flush (PING/PONG), then STREAM.INFO and
/// CONSUMER.INFO from another connection count them all (nats.js's `jsm - cross account
/// streams` and `... consumers` read the counts so). Each round publishes a few more.
/// jetraft only: nats-server 2.15.1 queues a stream's publishes too and lags the same way (it
/// failed this test in 5 of 5 runs, between rounds 1 and 43); jetraft's INFO waits for what was
/// handed over before it (`jetstream::runtime::settle`).
#[tokio::test]
async fn info_after_a_flush_counts_every_plain_publish_before_it() {
    if server_kind() == ServerKind::NatsServer {
        return; // nats-server's counts can miss the publishes before the flush
    }
    let srv = start_server().await;
    // A raw publisher: its flush is a PING answered by the server's PONG.
    let mut publisher = jetraft_tests::harness::RawClient::connected(&srv).await;
    let asker = connect(&srv).await;
    let js = jetstream::new(asker.clone());
    let s = stream_with(
        &js,
        stream::Config {
            name: "FLUSHED".into(),
            subjects: vec!["flushed.>".into()],
            ..Default::default()
        },
    )
    .await;
    durable_explicit(&s, "reader").await;
    let mut total = 0u64;
    for round in 1..=50u64 {
        let n = round % 4 + 1;
        publisher
            .send("PUB flushed.a 1\r\nx\r\n".repeat(n as usize))
            .await;
        total += n;
        publisher.ping_pong().await;
        let si = api(&asker, "$JS.API.STREAM.INFO.FLUSHED", Value::Null).await;
        assert_eq!(si["state"]["messages"], total, "round {round}: {si}");
        let ci = api(&asker, "$JS.API.CONSUMER.INFO.FLUSHED.reader", Value::Null).await;
        assert_eq!(ci["num_pending"], total, "round {round}: {ci}");
        // The lists count the same (once per round each, after another round of publishes).
        let n = round % 3 + 1;
        publisher
            .send("PUB flushed.a 1\r\nx\r\n".repeat(n as usize))
            .await;
        total += n;
        publisher.ping_pong().await;
        let list = if round % 2 == 0 {
            let l = api(&asker, "$JS.API.STREAM.LIST", Value::Null).await;
            l["streams"][0]["state"]["messages"].clone()
        } else {
            let l = api(&asker, "$JS.API.CONSUMER.LIST.FLUSHED", Value::Null).await;
            l["consumers"][0]["num_pending"].clone()
        };
        assert_eq!(list, total, "round {round}: list");
    }
}

/// Acks without a reply, then the acker's flush (PING/PONG), then STREAM.INFO of a work queue
/// and CONSUMER.INFO from another connection: every acknowledged message is gone and counted
/// (nats.js's `jetstream - source` reads a work queue's count so). jetraft only: nats-server
/// 2.15.1 applies acks off the read loop too (it failed this test in 3 of 3 runs, rounds 1-20).
#[tokio::test]
async fn info_after_a_flush_counts_every_ack_before_it() {
    if server_kind() == ServerKind::NatsServer {
        return; // nats-server's counts can miss the acks before the flush
    }
    let srv = start_server().await;
    let mut acker = jetraft_tests::harness::RawClient::connected(&srv).await;
    let asker = connect(&srv).await;
    let js = jetstream::new(asker.clone());
    let s = stream_with(
        &js,
        stream::Config {
            name: "ACKED".into(),
            subjects: vec!["acked.>".into()],
            retention: stream::RetentionPolicy::WorkQueue,
            ..Default::default()
        },
    )
    .await;
    let mut c = durable_explicit(&s, "worker").await;
    let mut left = 0u64;
    for round in 1..=20u64 {
        let n = round % 4 + 1;
        publish_n(&js, "acked.a", n as usize).await;
        left += n;
        let msgs = fetch(&c, n as usize).await;
        assert_eq!(msgs.len() as u64, n, "round {round}: fetched");
        let mut acks = String::new();
        for m in &msgs {
            let reply = m.reply.as_ref().expect("ack subject");
            acks.push_str(&format!("PUB {reply} 0\r\n\r\n"));
        }
        acker.send(acks).await;
        acker.ping_pong().await;
        left -= n;
        let si = api(&asker, "$JS.API.STREAM.INFO.ACKED", Value::Null).await;
        assert_eq!(si["state"]["messages"], left, "round {round}: {si}");
        let ci = info(&mut c).await;
        assert_eq!(
            (ci.num_ack_pending, ci.ack_floor.stream_sequence),
            (0, ci.delivered.stream_sequence),
            "round {round}"
        );
    }
}

/// One message in a fresh stream `name` (subject its lowercase name), a durable pull consumer
/// `c` with explicit acks and `max_deliver`, and a subscription to its max-deliveries advisory.
struct MaxDeliver {
    _srv: jetraft_tests::harness::ServerProcess,
    consumer: consumer::Consumer<pull::Config>,
    advisories: async_nats::Subscriber,
}

async fn max_deliver_setup(name: &str, max_deliver: i64, ack_wait: Duration) -> MaxDeliver {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let subject = name.to_lowercase();
    let s = stream_with(
        &js,
        stream::Config {
            name: name.into(),
            subjects: vec![subject.clone()],
            ..Default::default()
        },
    )
    .await;
    let advisories = nc
        .subscribe(format!(
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{name}.c"
        ))
        .await
        .expect("sub");
    publish_n(&js, &subject, 1).await;
    let consumer = s
        .create_consumer(pull::Config {
            durable_name: Some("c".into()),
            ack_policy: AckPolicy::Explicit,
            ack_wait,
            max_deliver,
            ..Default::default()
        })
        .await
        .expect("consumer");
    MaxDeliver {
        _srv: srv,
        consumer,
        advisories,
    }
}

/// Waits for the max-deliveries advisory of stream `name`'s consumer `c` for message 1.
async fn expect_max_deliver_advisory(
    adv: &mut async_nats::Subscriber,
    name: &str,
    deliveries: i64,
) {
    let advisory = within(Duration::from_secs(5), "advisory", adv.next())
        .await
        .expect("advisory");
    let a: Value = serde_json::from_slice(&advisory.payload).expect("json");
    assert_eq!(a["type"], "io.nats.jetstream.advisory.v1.max_deliver");
    assert_eq!(a["stream"], name);
    assert_eq!(a["consumer"], "c");
    assert_eq!(a["stream_seq"], 1);
    assert_eq!(a["deliveries"], deliveries);
}

#[tokio::test]
async fn unacked_messages_come_back_after_ack_wait_and_max_deliver_stops_them() {
    let MaxDeliver {
        _srv,
        consumer: c,
        advisories: mut adv,
    } = max_deliver_setup("RD", 2, Duration::from_millis(400)).await;
    let first = fetch(&c, 1).await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].info().expect("info").delivered, 1);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let again = fetch(&c, 1).await;
    assert_eq!(again.len(), 1, "redelivered after ack_wait");
    let ai = again[0].info().expect("info");
    assert_eq!(ai.delivered, 2);
    assert_eq!(ai.stream_sequence, 1);
    assert_eq!(ai.consumer_sequence, 2);
    // No third delivery; the advisory comes once the last ack wait expired (nats-server
    // sends it when the next delivery is attempted, hence the fetch first).
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(fetch(&c, 1).await.is_empty());
    expect_max_deliver_advisory(&mut adv, "RD", 2).await;
}

/// A pull sent right after a NAK, on the same connection, gets the NAKed message again (a
/// redelivery goes before new messages): jetraft hands acks and pull requests to the consumer in
/// the order the client sent them. nats-server does not promise that (its acks wait in a queue of
/// their own: this test fails there in its second round), so it runs against jetraft only.
/// jetraft used to take them on separate internal paths too.
#[tokio::test]
async fn a_pull_right_after_a_nak_gets_the_nakked_message_again() {
    if server_kind() != ServerKind::Jetraft {
        return;
    }
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let s = stream_with(
        &js,
        stream::Config {
            name: "NP".into(),
            subjects: vec!["np".into()],
            ..Default::default()
        },
    )
    .await;
    publish_n(&js, "np", 2).await;
    let c = durable_explicit(&s, "c").await;
    let mut m = fetch(&c, 1).await;
    for round in 1..=40u64 {
        let info = m[0].info().expect("info");
        assert_eq!(
            (info.stream_sequence, info.delivered),
            (1, i64::try_from(round).unwrap_or(i64::MAX)),
            "round {round}"
        );
        m[0].ack_with(AckKind::Nak(None)).await.expect("nak");
        m = fetch(&c, 1).await;
        assert_eq!(m.len(), 1, "round {round}");
    }
}

#[tokio::test]
async fn nak_redelivers_and_term_stops_with_advisory() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let s = stream_with(
        &js,
        stream::Config {
            name: "NT".into(),
            subjects: vec!["nt".into()],
            ..Default::default()
        },
    )
    .await;
    let mut adv = nc
        .subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.NT.c")
        .await
        .expect("sub");
    publish_n(&js, "nt", 2).await;
    let mut c = durable_explicit(&s, "c").await;
    let m = fetch(&c, 1).await;
    m[0].ack_with(AckKind::Nak(None)).await.expect("nak");
    if server_kind() != ServerKind::Jetraft {
        // nats-server may serve the next pull before it sees the NAK (jetraft keeps the order).
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let again = fetch(&c, 1).await;
    assert_eq!(again[0].info().expect("info").stream_sequence, 1);
    assert_eq!(again[0].info().expect("info").delivered, 2);
    again[0].ack_with(AckKind::Term).await.expect("term");
    let a = within(Duration::from_secs(5), "advisory", adv.next())
        .await
        .expect("advisory");
    let a: Value = serde_json::from_slice(&a.payload).expect("json");
    assert_eq!(a["type"], "io.nats.jetstream.advisory.v1.terminated");
    assert_eq!(a["stream_seq"], 1);
    assert_eq!(a["deliveries"], 2);
    let next = fetch(&c, 1).await;
    assert_eq!(next[0].info().expect("info").stream_sequence, 2);
    next[0].double_ack().await.expect("ack");
    let i = info(&mut c).await;
    assert_eq!(i.num_ack_pending, 0);
    assert_eq!(i.num_redelivered, 0);
    assert_eq!(i.ack_floor.stream_sequence, 2);
}

/// NAKs count as deliveries towards `max_deliver` (nats-server): a client that NAKs every
/// delivery of a consumer with `max_deliver: 3` gets the message exactly 3 times, then the
/// max-deliveries advisory goes out and the message is not delivered again.
#[tokio::test]
async fn naks_count_towards_max_deliver() {
    let MaxDeliver {
        _srv,
        consumer: mut c,
        advisories: mut adv,
    } = max_deliver_setup("NM", 3, Duration::from_secs(30)).await;
    for round in 1..=3i64 {
        let m = fetch(&c, 1).await;
        assert_eq!(m.len(), 1, "delivery {round}");
        let i = m[0].info().expect("info");
        assert_eq!((i.stream_sequence, i.delivered), (1, round));
        m[0].ack_with(AckKind::Nak(None)).await.expect("nak");
        if server_kind() != ServerKind::Jetraft {
            // nats-server may serve the next pull before it sees the NAK.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert!(fetch(&c, 1).await.is_empty(), "no fourth delivery");
    expect_max_deliver_advisory(&mut adv, "NM", 3).await;
    assert!(fetch(&c, 1).await.is_empty(), "still no fourth delivery");
    assert_eq!(info(&mut c).await.num_ack_pending, 0);
}

#[tokio::test]
async fn push_consumer_delivers_to_its_subject_and_heartbeats() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let s = stream_with(
        &js,
        stream::Config {
            name: "PUSH".into(),
            subjects: vec!["push.*".into()],
            ..Default::default()
        },
    )
    .await;
    publish_n(&js, "push.a", 3).await;
    let c: consumer::Consumer<push::Config> = s
        .create_consumer(push::Config {
            durable_name: Some("p".into()),
            deliver_subject: "deliver.p".into(),
            ack_policy: AckPolicy::Explicit,
            idle_heartbeat: Duration::from_millis(200),
            flow_control: true,
            ..Default::default()
        })
        .await
        .expect("push consumer");
    let mut msgs = within(OP, "messages", c.messages())
        .await
        .expect("messages");
    for k in 0..3 {
        let m = within(OP, "push message", msgs.next())
            .await
            .expect("message")
            .expect("ok");
        assert_eq!(m.subject.as_str(), "push.a");
        assert_eq!(m.payload, format!("m{k}"));
        m.ack().await.expect("ack");
    }
    publish_n(&js, "push.b", 1).await;
    let m = within(OP, "push message", msgs.next())
        .await
        .expect("message")
        .expect("ok");
    assert_eq!(m.subject.as_str(), "push.b");
    m.double_ack().await.expect("ack");
    // Raw heartbeat on the deliver subject while idle.
    let mut raw = nc.subscribe("deliver.p").await.expect("sub");
    let hb = within(Duration::from_secs(5), "heartbeat", raw.next())
        .await
        .expect("heartbeat");
    assert_eq!(
        hb.status,
        Some(async_nats::StatusCode::from_u16(100).expect("code"))
    );
}

#[tokio::test]
async fn ordered_consumer_replays_everything_in_order() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let s = stream_with(
        &js,
        stream::Config {
            name: "ORD".into(),
            subjects: vec!["ord.>".into()],
            ..Default::default()
        },
    )
    .await;
    publish_n(&js, "ord.x", 50).await;
    let c = s
        .create_consumer(pull::OrderedConfig {
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .expect("ordered");
    let mut msgs = c.messages().await.expect("messages");
    for k in 0..50u64 {
        let m = within(OP, "ordered message", msgs.next())
            .await
            .expect("message")
            .expect("ok");
        let i = m.info().expect("info");
        assert_eq!(i.stream_sequence, k + 1);
        assert_eq!(i.consumer_sequence, k + 1);
    }
}

#[tokio::test]
async fn kv_put_get_watch_and_history() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let kv = within(
        OP,
        "create kv",
        js.create_key_value(jetstream::kv::Config {
            bucket: "cfg".into(),
            history: 5,
            ..Default::default()
        }),
    )
    .await
    .expect("kv");
    kv.put("a", "1".into()).await.expect("put");
    kv.put("b", "2".into()).await.expect("put");
    kv.put("a", "3".into()).await.expect("put");
    assert_eq!(
        kv.get("a").await.expect("get"),
        Some(Bytes::from_static(b"3"))
    );
    let mut keys: Vec<String> = within(OP, "keys", kv.keys())
        .await
        .expect("keys")
        .map(|k| k.expect("key"))
        .collect()
        .await;
    keys.sort();
    assert_eq!(keys, vec!["a", "b"]);
    let history: Vec<_> = within(OP, "history", kv.history("a"))
        .await
        .expect("history")
        .map(|e| e.expect("entry").value)
        .collect()
        .await;
    assert_eq!(history, vec![Bytes::from("1"), Bytes::from("3")]);
    let mut watch = kv.watch_all().await.expect("watch");
    kv.put("c", "4".into()).await.expect("put");
    let e = within(OP, "watch entry", watch.next())
        .await
        .expect("entry")
        .expect("ok");
    assert_eq!(e.key, "c");
    assert_eq!(e.value, Bytes::from("4"));
}

#[tokio::test]
async fn consumer_api_errors_match_nats_server() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    api(
        &nc,
        "$JS.API.STREAM.CREATE.E",
        json!({"name": "E", "subjects": ["e.>"]}),
    )
    .await;
    let r = api(&nc, "$JS.API.CONSUMER.INFO.E.nope", Value::Null).await;
    assert_eq!(err_code(&r), Some(10014));
    assert_eq!(r["error"]["code"], 404);
    let r = api(&nc, "$JS.API.CONSUMER.INFO.NOSTREAM.x", Value::Null).await;
    assert_eq!(err_code(&r), Some(10059));
    let r = api(&nc, "$JS.API.CONSUMER.DELETE.E.nope", Value::Null).await;
    assert_eq!(err_code(&r), Some(10014));
    let create =
        |cfg: Value, action: &str| json!({"stream_name": "E", "config": cfg, "action": action});
    let r = api(
        &nc,
        "$JS.API.CONSUMER.CREATE.E.d1",
        create(json!({"durable_name": "d1", "ack_policy": "explicit"}), ""),
    )
    .await;
    assert_eq!(
        r["type"],
        "io.nats.jetstream.api.v1.consumer_create_response"
    );
    assert_eq!(r["name"], "d1");
    assert_eq!(r["config"]["max_waiting"], 512);
    let r = api(
        &nc,
        "$JS.API.CONSUMER.CREATE.E.d1",
        create(json!({"durable_name": "d1", "ack_policy": "all"}), "create"),
    )
    .await;
    assert_eq!(err_code(&r), Some(10148));
    let r = api(
        &nc,
        "$JS.API.CONSUMER.CREATE.E.d1",
        create(json!({"durable_name": "d1", "ack_policy": "all"}), ""),
    )
    .await;
    assert_eq!(err_code(&r), Some(10012));
    let r = api(
        &nc,
        "$JS.API.CONSUMER.CREATE.E.d2",
        create(json!({"durable_name": "d2"}), "update"),
    )
    .await;
    assert_eq!(err_code(&r), Some(10149));
    let r = api(&nc, "$JS.API.CONSUMER.NAMES.E", Value::Null).await;
    assert_eq!(r["consumers"], json!(["d1"]));
    assert_eq!(r["total"], 1);
    let r = api(&nc, "$JS.API.CONSUMER.LIST.E", Value::Null).await;
    assert_eq!(r["consumers"][0]["name"], "d1");
    let r = api(&nc, "$JS.API.CONSUMER.DELETE.E.d1", Value::Null).await;
    assert_eq!(r["success"], true);
    let r = api(&nc, "$JS.API.CONSUMER.INFO.E.d1", Value::Null).await;
    assert_eq!(err_code(&r), Some(10014));
}

#[tokio::test]
async fn work_queue_acks_remove_messages_and_refuse_a_second_unfiltered_consumer() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let mut s = stream_with(
        &js,
        stream::Config {
            name: "WQ".into(),
            subjects: vec!["wq.>".into()],
            retention: stream::RetentionPolicy::WorkQueue,
            ..Default::default()
        },
    )
    .await;
    publish_n(&js, "wq.job", 5).await;
    let c = durable_explicit(&s, "w").await;
    let r = api(
        &nc,
        "$JS.API.CONSUMER.CREATE.WQ.w2",
        json!({"stream_name": "WQ", "config": {"durable_name": "w2", "ack_policy": "explicit"}}),
    )
    .await;
    assert_eq!(err_code(&r), Some(10099));
    for m in fetch(&c, 3).await {
        m.double_ack().await.expect("ack");
    }
    let st = within(OP, "stream info", s.info()).await.expect("info");
    assert_eq!(st.state.messages, 2);
    assert_eq!(st.state.first_sequence, 4);
}

#[tokio::test]
async fn interest_stream_drops_a_message_once_every_consumer_acked_it() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let mut s = stream_with(
        &js,
        stream::Config {
            name: "INT".into(),
            subjects: vec!["int".into()],
            retention: stream::RetentionPolicy::Interest,
            ..Default::default()
        },
    )
    .await;
    let mk = |name: &str| pull::Config {
        durable_name: Some(name.into()),
        ack_policy: AckPolicy::Explicit,
        ..Default::default()
    };
    let a: consumer::Consumer<pull::Config> = s.create_consumer(mk("a")).await.expect("a");
    let b: consumer::Consumer<pull::Config> = s.create_consumer(mk("b")).await.expect("b");
    publish_n(&js, "int", 2).await;
    for m in fetch(&a, 2).await {
        m.double_ack().await.expect("ack");
    }
    assert_eq!(s.info().await.expect("info").state.messages, 2);
    let bm = fetch(&b, 2).await;
    bm[0].double_ack().await.expect("ack");
    assert_eq!(s.info().await.expect("info").state.messages, 1);
    bm[1].double_ack().await.expect("ack");
    assert_eq!(s.info().await.expect("info").state.messages, 0);
}

#[tokio::test]
async fn durable_consumer_state_survives_a_restart() {
    let mut srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let s = stream_with(
        &js,
        stream::Config {
            name: "DUR".into(),
            subjects: vec!["dur".into()],
            ..Default::default()
        },
    )
    .await;
    publish_n(&js, "dur", 6).await;
    let c: consumer::Consumer<pull::Config> = s
        .create_consumer(pull::Config {
            durable_name: Some("d".into()),
            ack_policy: AckPolicy::Explicit,
            ack_wait: Duration::from_secs(1),
            ..Default::default()
        })
        .await
        .expect("consumer");
    let msgs = fetch(&c, 4).await;
    for m in &msgs[..3] {
        m.double_ack().await.expect("ack");
    }
    drop(nc);
    srv.restart().await.expect("restart");
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let s = within(OP, "get stream", js.get_stream("DUR"))
        .await
        .expect("stream");
    let mut c: consumer::Consumer<pull::Config> =
        s.get_consumer("d").await.expect("consumer after restart");
    let i = info(&mut c).await;
    assert_eq!(i.ack_floor.stream_sequence, 3);
    assert_eq!(i.num_ack_pending, 1);
    assert_eq!(i.num_pending, 2);
    // Message 4 comes back (after its ack wait), then 5 and 6; nothing acked comes back.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let rest = fetch(&c, 10).await;
    let seqs: Vec<u64> = rest
        .iter()
        .map(|m| m.info().expect("info").stream_sequence)
        .collect();
    assert_eq!(seqs, vec![4, 5, 6]);
}

#[tokio::test]
async fn dead_letter_subject_keeps_terminated_messages() {
    if server_kind() == ServerKind::NatsServer {
        return; // jetraft extension
    }
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let s = stream_with(
        &js,
        stream::Config {
            name: "JOBS".into(),
            subjects: vec!["jobs".into()],
            ..Default::default()
        },
    )
    .await;
    let dlq = stream_with(
        &js,
        stream::Config {
            name: "DLQ".into(),
            subjects: vec!["dlq.jobs".into()],
            ..Default::default()
        },
    )
    .await;
    publish_n(&js, "jobs", 1).await;
    let c: consumer::Consumer<pull::Config> = s
        .create_consumer(pull::Config {
            durable_name: Some("w".into()),
            ack_policy: AckPolicy::Explicit,
            metadata: [(
                "jetraft.dead_letter_subject".to_string(),
                "dlq.jobs".to_string(),
            )]
            .into(),
            ..Default::default()
        })
        .await
        .expect("consumer");
    let m = fetch(&c, 1).await;
    m[0].ack_with(AckKind::Term).await.expect("term");
    let got = jetraft_tests::harness::wait_for("dead letter stored", OP, || {
        let dlq = dlq.clone();
        async move { dlq.get_raw_message(1).await.ok() }
    })
    .await;
    assert_eq!(got.payload, Bytes::from("m0"));
    let h = got.headers;
    assert_eq!(
        h.get("Nats-Dead-Letter-Stream").map(|v| v.as_str()),
        Some("JOBS")
    );
    assert_eq!(
        h.get("Nats-Dead-Letter-Sequence").map(|v| v.as_str()),
        Some("1")
    );
    assert_eq!(
        h.get("Nats-Dead-Letter-Reason").map(|v| v.as_str()),
        Some("terminated")
    );
}

/// One raw pull request; returns every message up to and including the first status.
async fn raw_pull(
    nc: &async_nats::Client,
    stream: &str,
    consumer: &str,
    body: Value,
    bound: Duration,
) -> Vec<async_nats::Message> {
    let inbox = nc.new_inbox();
    let mut sub = nc.subscribe(inbox.clone()).await.expect("sub");
    nc.publish_with_reply(
        format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"),
        inbox,
        Bytes::from(body.to_string()),
    )
    .await
    .expect("pull");
    let mut out = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(bound, sub.next()).await {
        let done = m.status.is_some_and(|s| s.as_u16() != 100);
        out.push(m);
        if done {
            break;
        }
    }
    out
}

/// A server with stream `name` on `subject` holding `n` messages, and its durable consumer `c`
/// created with `config` through the raw API.
async fn with_consumer(
    (name, subject): (&str, &str),
    n: usize,
    config: Value,
) -> (ServerProcess, async_nats::Client) {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    stream_with(
        &js,
        stream::Config {
            name: name.into(),
            subjects: vec![subject.into()],
            ..Default::default()
        },
    )
    .await;
    publish_n(&js, subject, n).await;
    let r = api(
        &nc,
        &format!("$JS.API.CONSUMER.CREATE.{name}.c"),
        json!({"stream_name": name, "config": config}),
    )
    .await;
    assert!(r["error"].is_null(), "{r}");
    (srv, nc)
}

fn status_of(m: &async_nats::Message) -> Option<(u16, String)> {
    m.status
        .map(|s| (s.as_u16(), m.description.clone().unwrap_or_default()))
}

#[tokio::test]
async fn pull_statuses_no_wait_expiry_and_limits() {
    let (_srv, nc) = with_consumer(
        ("ST", "st"),
        2,
        json!({"durable_name": "c", "ack_policy": "explicit", "max_batch": 5}),
    )
    .await;
    // no_wait: what is there, then 404.
    let got = raw_pull(&nc, "ST", "c", json!({"batch": 5, "no_wait": true}), OP).await;
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[0].subject.as_str(), "st");
    assert_eq!(status_of(&got[2]), Some((404, "No Messages".into())));
    // Expiry: 408 with the unfilled batch in the pending headers.
    let got = raw_pull(
        &nc,
        "ST",
        "c",
        json!({"batch": 4, "expires": 300_000_000}),
        OP,
    )
    .await;
    assert_eq!(got.len(), 1);
    assert_eq!(status_of(&got[0]), Some((408, "Request Timeout".into())));
    let h = got[0].headers.as_ref().expect("headers");
    assert_eq!(
        h.get("Nats-Pending-Messages").map(|v| v.as_str()),
        Some("4")
    );
    // A batch above max_batch is refused.
    let got = raw_pull(&nc, "ST", "c", json!({"batch": 9}), OP).await;
    assert_eq!(
        status_of(&got[0]),
        Some((409, "Exceeded MaxRequestBatch of 5".into()))
    );
}

/// A message counts against `max_bytes` with its subject, ack reply subject, headers and
/// payload, as nats-server counts it: what a request got plus the 409's `Nats-Pending-Bytes`
/// is its `max_bytes`, and the next message would not have fitted.
#[tokio::test]
async fn max_bytes_counts_subject_ack_reply_and_payload() {
    let (_srv, nc) = with_consumer(
        ("MB", "mb.subject"),
        60,
        json!({"durable_name": "c", "ack_policy": "none"}),
    )
    .await;
    // The messages have no headers.
    let size = |m: &async_nats::Message| {
        m.subject.len() + m.reply.as_ref().map_or(0, |r| r.len()) + m.payload.len()
    };
    for _ in 0..2 {
        let got = raw_pull(&nc, "MB", "c", json!({"batch": 100, "max_bytes": 1100}), OP).await;
        let (status, msgs) = got.split_last().expect("some answer");
        assert_eq!(
            status_of(status),
            Some((409, "Message Size Exceeds MaxBytes".into()))
        );
        let pending: usize = status
            .headers
            .as_ref()
            .expect("headers")
            .get("Nats-Pending-Bytes")
            .and_then(|v| v.as_str().parse().ok())
            .expect("Nats-Pending-Bytes");
        let got_bytes: usize = msgs.iter().map(size).sum();
        assert_eq!(got_bytes + pending, 1100, "{} messages", msgs.len());
        let last = msgs.last().expect("messages");
        assert!(size(last) > pending, "another message would have fitted");
    }
}

#[tokio::test]
async fn ephemeral_consumer_is_removed_after_its_inactive_threshold() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    api(
        &nc,
        "$JS.API.STREAM.CREATE.IN",
        json!({"name": "IN", "subjects": ["in"]}),
    )
    .await;
    let r = api(
        &nc,
        "$JS.API.CONSUMER.CREATE.IN",
        json!({"stream_name": "IN", "config": {"ack_policy": "explicit", "inactive_threshold": 500_000_000}}),
    )
    .await;
    let name = r["name"].as_str().expect("generated name").to_string();
    assert_eq!(name.len(), 8);
    jetraft_tests::harness::wait_for("ephemeral removed", OP, || {
        let nc = nc.clone();
        let subject = format!("$JS.API.CONSUMER.INFO.IN.{name}");
        async move { (err_code(&api(&nc, &subject, Value::Null).await) == Some(10014)).then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn headers_only_queue_group_delivery_and_pause() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    stream_with(
        &js,
        stream::Config {
            name: "HO".into(),
            subjects: vec!["ho".into()],
            ..Default::default()
        },
    )
    .await;
    publish_n(&js, "ho", 1).await;
    // A deliver_group consumer needs a member of that queue group: a plain subscriber alone
    // gets nothing; once a member subscribes, delivery starts.
    let mut plain = nc.subscribe("ho.deliver").await.expect("sub");
    let r = api(
        &nc,
        "$JS.API.CONSUMER.CREATE.HO.p",
        json!({"stream_name": "HO", "config": {
            "durable_name": "p", "deliver_subject": "ho.deliver", "deliver_group": "g",
            "ack_policy": "none", "headers_only": true
        }}),
    )
    .await;
    assert!(r["error"].is_null(), "{r}");
    assert!(
        tokio::time::timeout(Duration::from_millis(500), plain.next())
            .await
            .is_err(),
        "no delivery without a member of the deliver group"
    );
    drop(plain);
    let mut member = nc
        .queue_subscribe("ho.deliver", "g".into())
        .await
        .expect("qsub");
    let m = within(OP, "queue member delivery", member.next())
        .await
        .expect("message");
    assert_eq!(m.subject.as_str(), "ho");
    assert!(m.payload.is_empty());
    let h = m.headers.as_ref().expect("headers");
    assert_eq!(h.get("Nats-Msg-Size").map(|v| v.as_str()), Some("2"));
    // Pause and resume.
    let r = api(
        &nc,
        "$JS.API.CONSUMER.PAUSE.HO.p",
        json!({"pause_until": "2099-01-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(r["paused"], true, "{r}");
    let i = api(&nc, "$JS.API.CONSUMER.INFO.HO.p", Value::Null).await;
    assert_eq!(i["paused"], true, "{i}");
    publish_n(&js, "ho", 1).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(500), member.next())
            .await
            .is_err(),
        "a paused consumer delivers nothing"
    );
    let r = api(&nc, "$JS.API.CONSUMER.PAUSE.HO.p", Value::Null).await;
    assert_eq!(r["paused"], false, "{r}");
    // nats-server resumes delivery on the next stored message.
    publish_n(&js, "ho", 1).await;
    let m = within(OP, "delivery after resume", member.next())
        .await
        .expect("message");
    assert_eq!(m.subject.as_str(), "ho");
}

/// Receives `n` push messages, returning when each arrived.
async fn arrivals(
    msgs: &mut (
             impl futures_util::Stream<Item = Result<jetstream::Message, impl std::fmt::Debug>> + Unpin
         ),
    n: usize,
) -> Vec<std::time::Instant> {
    let mut at = Vec::new();
    for _ in 0..n {
        let m = within(Duration::from_secs(20), "paced push message", msgs.next())
            .await
            .expect("message")
            .expect("ok");
        at.push(std::time::Instant::now());
        m.ack().await.expect("ack");
    }
    at
}

#[tokio::test]
async fn replay_original_keeps_the_stored_spacing() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let s = stream_with(
        &js,
        stream::Config {
            name: "REPLAY".into(),
            subjects: vec!["replay.*".into()],
            ..Default::default()
        },
    )
    .await;
    // Stored 1 s apart.
    publish_n(&js, "replay.a", 1).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    publish_n(&js, "replay.a", 1).await;
    let c: consumer::Consumer<push::Config> = s
        .create_consumer(push::Config {
            durable_name: Some("r".into()),
            deliver_subject: "deliver.replay".into(),
            ack_policy: AckPolicy::Explicit,
            replay_policy: consumer::ReplayPolicy::Original,
            ..Default::default()
        })
        .await
        .expect("replay consumer");
    let info = within(OP, "info", c.get_info()).await.expect("info");
    assert_eq!(info.config.replay_policy, consumer::ReplayPolicy::Original);
    let mut msgs = within(OP, "messages", c.messages())
        .await
        .expect("messages");
    let at = arrivals(&mut msgs, 2).await;
    // A lower bound only (a slow machine makes it longer, never shorter).
    let gap = at[1] - at[0];
    assert!(
        gap >= Duration::from_millis(700),
        "second message replayed {gap:?} after the first"
    );
}

#[tokio::test]
async fn rate_limited_push_consumer_is_paced_by_bytes() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let s = stream_with(
        &js,
        stream::Config {
            name: "RATE".into(),
            subjects: vec!["rate.*".into()],
            // The rate limit's burst is the stream's max message size (nats-server's rule).
            max_message_size: 1024,
            ..Default::default()
        },
    )
    .await;
    // Messages below the burst (a message above it is never delivered by nats-server).
    let body = Bytes::from(vec![b'x'; 400]);
    for _ in 0..8 {
        within(OP, "publish", js.publish("rate.a", body.clone()))
            .await
            .expect("publish")
            .await
            .expect("ack");
    }
    // 16,000 bits per second: 2,000 bytes a second; 8 x 400 B minus a 1,024 B burst takes
    // more than a second.
    let c: consumer::Consumer<push::Config> = s
        .create_consumer(push::Config {
            durable_name: Some("rl".into()),
            deliver_subject: "deliver.rate".into(),
            ack_policy: AckPolicy::Explicit,
            rate_limit: 16_000,
            ..Default::default()
        })
        .await
        .expect("rate limited consumer");
    let info = within(OP, "info", c.get_info()).await.expect("info");
    assert_eq!(info.config.rate_limit, 16_000);
    let mut msgs = within(OP, "messages", c.messages())
        .await
        .expect("messages");
    let at = arrivals(&mut msgs, 8).await;
    let spread = at[7] - at[0];
    assert!(
        spread >= Duration::from_millis(800),
        "3.2 KB delivered within {spread:?} at 2 KB/s with a 1 KB burst"
    );
}

#[tokio::test]
async fn acks_of_an_ack_none_consumer_find_no_responders() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let s = stream_with(
        &js,
        stream::Config {
            name: "AN".into(),
            subjects: vec!["an".into()],
            ..Default::default()
        },
    )
    .await;
    js.publish("an", Bytes::from_static(b"x"))
        .await
        .expect("publish")
        .await
        .expect("ack");
    let c = s
        .create_consumer(pull::Config {
            durable_name: Some("none".into()),
            ack_policy: AckPolicy::None,
            ..Default::default()
        })
        .await
        .expect("consumer");
    let m = fetch(&c, 1).await;
    let reply = m[0].reply.clone().expect("an ack subject");
    // No one takes acks of this consumer (nats-server subscribes none), so an AckSync learns it.
    let err = within(
        OP,
        "ack sync",
        nc.request(reply, Bytes::from_static(b"+ACK")),
    )
    .await
    .expect_err("no answer");
    assert_eq!(
        err.kind(),
        async_nats::RequestErrorKind::NoResponders,
        "{err}"
    );
}

#[tokio::test]
async fn a_pause_time_with_odd_characters_is_refused_not_fatal() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let s = stream_with(
        &js,
        stream::Config {
            name: "PT".into(),
            subjects: vec!["pt".into()],
            ..Default::default()
        },
    )
    .await;
    durable_explicit(&s, "c").await;
    // Found by the fuzz target (server/tests/fuzz.rs): multi-byte characters where a time's
    // offset goes made the time parser panic.
    let r = api(
        &nc,
        "$JS.API.CONSUMER.PAUSE.PT.c",
        json!({"pause_until": "2099-01-01T00:00:00\u{a49d};{Z"}),
    )
    .await;
    assert_eq!(err_code(&r), Some(10025), "{r}");
    // The server still answers.
    let info = api(&nc, "$JS.API.CONSUMER.INFO.PT.c", Value::Null).await;
    assert_eq!(info["name"], "c", "{info}");
}

#[tokio::test]
async fn pedantic_consumer_creates_refuse_what_defaults_would_change() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    stream_with(
        &js,
        stream::Config {
            name: "PED".into(),
            subjects: vec!["ped".into()],
            ..Default::default()
        },
    )
    .await;
    let create = |config: Value, pedantic: bool| {
        let nc = nc.clone();
        async move {
            api(
                &nc,
                "$JS.API.CONSUMER.CREATE.PED.c",
                json!({"stream_name": "PED", "config": config, "pedantic": pedantic}),
            )
            .await
        }
    };
    for (config, text) in [
        (
            json!({"name": "c", "max_deliver": -5}),
            "pedantic mode: max_deliver must be set to -1",
        ),
        (
            json!({"name": "c", "ack_policy": "explicit", "ack_wait": 5_000_000_000i64,
                   "backoff": [1_000_000_000i64, 2_000_000_000i64]}),
            "pedantic mode: first backoff value has to equal batch AckWait",
        ),
        (
            json!({"name": "c", "idle_heartbeat": -1}),
            "pedantic mode: idle_heartbeat must not be negative",
        ),
    ] {
        let r = create(config.clone(), true).await;
        assert_eq!(err_code(&r), Some(10157), "{config} -> {r}");
        assert_eq!(r["error"]["description"], text, "{config} -> {r}");
        // Without pedantic the same config is corrected and accepted.
        let r = create(config.clone(), false).await;
        assert!(r["error"].is_null(), "{config} -> {r}");
        api(&nc, "$JS.API.CONSUMER.DELETE.PED.c", Value::Null).await;
    }
}

/// Deleting one of several push consumers stops its deliveries only, and a consumer created
/// again under the same name delivers from the start (the engines of the stream leader are
/// synced against the set of consumer names on every create and delete).
#[tokio::test]
async fn deleting_one_push_consumer_stops_only_its_deliveries() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    stream_with(
        &js,
        stream::Config {
            name: "DEL".into(),
            subjects: vec!["del".into()],
            ..Default::default()
        },
    )
    .await;
    let names = ["a", "b", "c"];
    let mut subs = Vec::new();
    for n in names {
        subs.push(nc.subscribe(format!("dd.{n}")).await.expect("sub"));
    }
    let create = |n: &str| json!({"stream_name": "DEL", "config": {"durable_name": n, "deliver_subject": format!("dd.{n}"), "ack_policy": "none"}});
    for n in names {
        let r = api(&nc, &format!("$JS.API.CONSUMER.CREATE.DEL.{n}"), create(n)).await;
        assert!(r["error"].is_null(), "{r}");
    }
    let publish = |body: &'static str| {
        let js = js.clone();
        async move {
            let ack = within(OP, "publish", js.publish("del", body.into()))
                .await
                .expect("publish");
            within(OP, "puback", ack.into_future())
                .await
                .expect("puback");
        }
    };
    publish("one").await;
    for sub in &mut subs {
        let m = within(OP, "first delivery", sub.next()).await.expect("msg");
        assert_eq!(m.payload, "one");
    }
    let r = api(&nc, "$JS.API.CONSUMER.DELETE.DEL.b", Value::Null).await;
    assert_eq!(r["success"], true, "{r}");
    publish("two").await;
    for i in [0, 2] {
        let m = within(OP, "second delivery", subs[i].next())
            .await
            .expect("msg");
        assert_eq!(m.payload, "two");
    }
    let late = tokio::time::timeout(Duration::from_millis(500), subs[1].next()).await;
    assert!(late.is_err(), "the deleted consumer delivered: {late:?}");
    let r = api(&nc, "$JS.API.CONSUMER.CREATE.DEL.b", create("b")).await;
    assert!(r["error"].is_null(), "{r}");
    for want in ["one", "two"] {
        let m = within(OP, "delivery from the start", subs[1].next())
            .await
            .expect("msg");
        assert_eq!(m.payload, want);
    }
}
