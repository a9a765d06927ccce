//! JetStream per account on one node: two accounts with a stream of the same name, each
//! seeing only its own streams, messages, consumers and KV buckets; `$G` without JetStream once
//! accounts are configured; account info (limits, API counters) and the limits' errors. Runs against nats-server too
//! (`JETRAFT_TEST_SERVER=nats-server NATS_SERVER_BIN=...`).

use std::time::Duration;

use futures_util::StreamExt as _;
use jetraft_tests::harness::jsapi::api;
use jetraft_tests::harness::{ServerOptions, ServerProcess, login, within};
use serde_json::{Value, json};

const OP: Duration = Duration::from_secs(5);

/// A and B have JetStream, C has limits, D has none; `g` is a user of `$G`.
const CONFIG: &str = r#"
accounts {
  A: { users: [ { user: a, password: a } ], jetstream: enabled }
  B: { users: [ { user: b, password: b } ], jetstream: enabled }
  C: {
    users: [ { user: c, password: c } ]
    jetstream: { max_mem: 1000, max_file: 2000, max_streams: 2, max_consumers: 1, max_ack_pending: 10 }
  }
  D: { users: [ { user: d, password: d } ], jetstream: disabled }
}
authorization { users: [ { user: g, password: g } ] }
"#;

async fn start() -> ServerProcess {
    ServerProcess::start(ServerOptions::with_config(CONFIG))
        .await
        .expect("start server")
}

/// Publishes `body` on `subject` and returns the PubAck (or error) JSON.
async fn publish(nc: &async_nats::Client, subject: &str, body: &'static [u8]) -> Value {
    let msg = within(OP, "publish", nc.request(subject.to_string(), body.into()))
        .await
        .expect("publish answered");
    serde_json::from_slice(&msg.payload).expect("pub ack json")
}

fn orders() -> Value {
    json!({"name": "ORDERS", "subjects": ["orders.>"], "storage": "file"})
}

#[tokio::test]
async fn two_accounts_keep_their_own_stream_of_the_same_name() {
    let srv = start().await;
    let (a, b) = (login(&srv, "a").await, login(&srv, "b").await);
    for nc in [&a, &b] {
        let created = api(nc, "$JS.API.STREAM.CREATE.ORDERS", orders()).await;
        assert_eq!(created["config"]["name"], "ORDERS", "{created}");
    }
    for i in 0..3 {
        let ack = publish(&a, &format!("orders.a{i}"), b"from a").await;
        assert_eq!(
            (&ack["stream"], &ack["seq"]),
            (&json!("ORDERS"), &json!(i + 1))
        );
    }
    let ack = publish(&b, "orders.b", b"from b").await;
    assert_eq!(ack["seq"], 1, "B's stream counts its own messages: {ack}");

    let info_a = api(&a, "$JS.API.STREAM.INFO.ORDERS", Value::Null).await;
    let info_b = api(&b, "$JS.API.STREAM.INFO.ORDERS", Value::Null).await;
    assert_eq!(info_a["state"]["messages"], 3);
    assert_eq!(info_b["state"]["messages"], 1);
    let names = api(&a, "$JS.API.STREAM.NAMES", Value::Null).await;
    assert_eq!(names["streams"], json!(["ORDERS"]));
    let list = api(&b, "$JS.API.STREAM.LIST", Value::Null).await;
    assert_eq!(list["total"], 1);
    assert_eq!(list["streams"][0]["state"]["messages"], 1);
    // `/jsz?streams=true` lists each account's streams under that account.
    let jsz = srv.monitor_json("/jsz?streams=true").await.expect("/jsz");
    let messages_in = |account: &str| -> Vec<Value> {
        jsz["account_details"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["name"] == account)
            .flat_map(|a| a["stream_detail"].as_array().cloned().unwrap_or_default())
            .map(|s| json!([s["name"], s["state"]["messages"]]))
            .collect()
    };
    assert_eq!(messages_in("A"), [json!(["ORDERS", 3])], "{jsz}");
    assert_eq!(messages_in("B"), [json!(["ORDERS", 1])], "{jsz}");
    // Another account's stream cannot be named from here.
    let other = api(&a, "$JS.API.STREAM.INFO.B/ORDERS", Value::Null).await;
    assert!(other["error"]["err_code"].is_number(), "{other}");

    // A pull consumer in A gets A's messages; its acks travel in A.
    let js_a = async_nats::jetstream::new(a.clone());
    let stream = js_a.get_stream("ORDERS").await.expect("A's stream");
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("work".into()),
            ..Default::default()
        })
        .await
        .expect("A's consumer");
    let mut batch = consumer
        .fetch()
        .max_messages(3)
        .expires(OP)
        .messages()
        .await
        .expect("fetch");
    let mut subjects = Vec::new();
    while let Some(m) = within(OP, "pull", batch.next()).await {
        let m = m.expect("message");
        assert_eq!(m.payload.as_ref(), b"from a");
        m.ack().await.expect("ack");
        subjects.push(m.subject.to_string());
    }
    assert_eq!(subjects, ["orders.a0", "orders.a1", "orders.a2"]);
    // B's stream has no such consumer.
    let missing = api(&b, "$JS.API.CONSUMER.INFO.ORDERS.work", Value::Null).await;
    assert_eq!(missing["error"]["err_code"], 10014, "{missing}");

    // A push consumer in B delivers B's message to B's subscriber only.
    let mut in_a = a.subscribe("deliver.b").await.expect("sub in A");
    let mut in_b = b.subscribe("deliver.b").await.expect("sub in B");
    let cfg = json!({"stream_name": "ORDERS", "config": {"durable_name": "push",
        "deliver_subject": "deliver.b", "ack_policy": "explicit"}});
    let created = api(&b, "$JS.API.CONSUMER.CREATE.ORDERS.push", cfg).await;
    assert_eq!(created["name"], "push", "{created}");
    let m = within(OP, "push delivery", in_b.next())
        .await
        .expect("delivered");
    assert_eq!(
        (m.subject.as_str(), m.payload.as_ref()),
        ("orders.b", &b"from b"[..])
    );
    let reply = m.reply.clone().expect("ack subject");
    assert!(reply.starts_with("$JS.ACK.ORDERS.push."), "{reply}");
    b.publish(reply, "+ACK".into()).await.expect("ack");
    b.flush().await.expect("flush");
    let acked = jetraft_tests::harness::wait_for("ack floor", OP, || {
        let b = b.clone();
        async move {
            let info = api(&b, "$JS.API.CONSUMER.INFO.ORDERS.push", Value::Null).await;
            (info["ack_floor"]["stream_seq"] == 1).then_some(())
        }
    });
    acked.await;
    a.flush().await.expect("flush");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), in_a.next())
            .await
            .is_err(),
        "A's subscriber got B's delivery"
    );
}

#[tokio::test]
async fn kv_buckets_are_per_account() {
    let srv = start().await;
    let (a, b) = (login(&srv, "a").await, login(&srv, "b").await);
    let kv = |nc: async_nats::Client| async move {
        async_nats::jetstream::new(nc)
            .create_key_value(async_nats::jetstream::kv::Config {
                bucket: "cfg".into(),
                history: 3,
                ..Default::default()
            })
            .await
            .expect("bucket")
    };
    let (kv_a, kv_b) = (kv(a.clone()).await, kv(b.clone()).await);
    kv_a.put("color", "red".into()).await.expect("put a");
    kv_a.put("color", "green".into())
        .await
        .expect("put a again");
    kv_b.put("color", "blue".into()).await.expect("put b");
    let got_a = kv_a.entry("color").await.expect("get a").expect("entry");
    let got_b = kv_b.entry("color").await.expect("get b").expect("entry");
    assert_eq!((got_a.value.as_ref(), got_a.revision), (&b"green"[..], 2));
    assert_eq!((got_b.value.as_ref(), got_b.revision), (&b"blue"[..], 1));
    let mut history = kv_b.history("color").await.expect("history");
    let first = within(OP, "history", history.next())
        .await
        .expect("entry")
        .expect("ok");
    assert_eq!(first.value.as_ref(), b"blue");
    // Deleting B's bucket leaves A's.
    async_nats::jetstream::new(b.clone())
        .delete_key_value("cfg")
        .await
        .expect("delete b");
    let still = kv_a.get("color").await.expect("get a").expect("value");
    assert_eq!(still.as_ref(), b"green");
}

#[tokio::test]
async fn object_stores_are_per_account() {
    use tokio::io::AsyncReadExt as _;
    let srv = start().await;
    let store = |nc: async_nats::Client| async move {
        async_nats::jetstream::new(nc)
            .create_object_store(async_nats::jetstream::object_store::Config {
                bucket: "files".into(),
                ..Default::default()
            })
            .await
            .expect("object store")
    };
    let (a, b) = (
        store(login(&srv, "a").await).await,
        store(login(&srv, "b").await).await,
    );
    // Several chunks (the default chunk is 128 KiB) in A, one small object in B.
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    a.put("doc", &mut big.as_slice()).await.expect("put a");
    b.put("doc", &mut &b"small"[..]).await.expect("put b");
    let read = |store: async_nats::jetstream::object_store::ObjectStore| async move {
        let mut obj = store.get("doc").await.expect("get");
        let mut out = Vec::new();
        obj.read_to_end(&mut out).await.expect("read");
        out
    };
    assert_eq!(read(a.clone()).await, big);
    assert_eq!(read(b.clone()).await, b"small");
}

#[tokio::test]
async fn a_mirror_copies_a_stream_of_its_own_account() {
    let srv = start().await;
    let (a, b) = (login(&srv, "a").await, login(&srv, "b").await);
    for nc in [&a, &b] {
        api(nc, "$JS.API.STREAM.CREATE.ORDERS", orders()).await;
    }
    publish(&a, "orders.1", b"a1").await;
    publish(&a, "orders.2", b"a2").await;
    publish(&b, "orders.1", b"b1").await;
    let mirror = json!({"name": "COPY", "mirror": {"name": "ORDERS"}});
    let created = api(&b, "$JS.API.STREAM.CREATE.COPY", mirror).await;
    assert_eq!(created["config"]["mirror"]["name"], "ORDERS", "{created}");
    let copied = jetraft_tests::harness::wait_for("mirror caught up", OP, || {
        let b = b.clone();
        async move {
            let info = api(&b, "$JS.API.STREAM.INFO.COPY", Value::Null).await;
            (info["state"]["messages"] == 1).then_some(info)
        }
    })
    .await;
    assert_eq!(copied["state"]["last_seq"], 1, "B's ORDERS has one message");
    let msg = api(&b, "$JS.API.STREAM.MSG.GET.COPY", json!({"seq": 1})).await;
    assert_eq!(msg["message"]["data"], "YjE=", "b1: {msg}");
}

#[tokio::test]
async fn global_account_and_accounts_without_jetstream_answer_10039() {
    let srv = start().await;
    for user in ["g", "d"] {
        let nc = login(&srv, user).await;
        let info = api(&nc, "$JS.API.INFO", Value::Null).await;
        assert_eq!(info["error"]["err_code"], 10039, "{user}: {info}");
    }
}

#[tokio::test]
async fn account_info_and_limits_errors_match_nats_server() {
    let srv = start().await;
    let c = login(&srv, "c").await;
    let info = api(&c, "$JS.API.INFO", Value::Null).await;
    assert_eq!(
        info["limits"],
        json!({"max_memory": 1000, "max_storage": 2000, "max_streams": 2, "max_consumers": 1,
            "max_ack_pending": 10, "memory_max_stream_bytes": -1, "storage_max_stream_bytes": -1,
            "max_bytes_required": false}),
        "{info}"
    );
    let create = |name: &str, storage: &str, max_bytes: i64| {
        let c = c.clone();
        let body = json!({"name": name, "subjects": [name.to_lowercase()], "storage": storage,
            "max_bytes": max_bytes});
        let subject = format!("$JS.API.STREAM.CREATE.{name}");
        async move { api(&c, &subject, body).await }
    };
    let err = |v: &Value| {
        (
            v["error"]["err_code"].clone(),
            v["error"]["description"].clone(),
        )
    };
    assert_eq!(
        err(&create("BIG", "file", 5000).await),
        (
            json!(10047),
            json!("insufficient storage resources available")
        )
    );
    assert_eq!(
        err(&create("BIGM", "memory", 5000).await),
        (
            json!(10028),
            json!("insufficient memory resources available")
        )
    );
    assert_eq!(create("S1", "file", -1).await["did_create"], true);
    assert_eq!(create("S2", "memory", 900).await["did_create"], true);
    assert_eq!(
        err(&create("S3", "file", -1).await),
        (json!(10027), json!("maximum number of streams reached"))
    );
    let consumer = |stream: &str, name: &str, extra: Value| {
        let c = c.clone();
        let mut config = json!({"durable_name": name, "ack_policy": "explicit"});
        if let (Some(cfg), Some(extra)) = (config.as_object_mut(), extra.as_object()) {
            cfg.extend(extra.clone());
        }
        let subject = format!("$JS.API.CONSUMER.CREATE.{stream}.{name}");
        let body = json!({"stream_name": stream, "config": config});
        async move { api(&c, &subject, body).await }
    };
    let first = consumer("S1", "C1", json!({})).await;
    assert_eq!(first["config"]["max_ack_pending"], 10, "{first}");
    assert_eq!(
        err(&consumer("S1", "C2", json!({})).await),
        (json!(10026), json!("maximum consumers limit reached"))
    );
    assert_eq!(
        err(&consumer("S2", "C3", json!({"max_ack_pending": 20})).await),
        (
            json!(10121),
            json!("consumer max ack pending exceeds system limit of 10")
        )
    );
    // max_consumers counts per stream, as in nats-server.
    assert_eq!(consumer("S2", "C4", json!({})).await["name"], "C4");
    // 100-byte messages on `s1` take 132 bytes each: the 16th would pass 2000.
    for i in 0..15 {
        let ack = publish(&c, "s1", &[b'x'; 100]).await;
        assert_eq!(ack["seq"], i + 1, "{ack}");
    }
    let refused = publish(&c, "s1", &[b'x'; 100]).await;
    assert_eq!(
        refused,
        json!({"error": {"code": 400, "err_code": 10002,
            "description": "resource limits exceeded for account"}, "stream": "S1", "seq": 0})
    );
    let info = api(&c, "$JS.API.INFO", Value::Null).await;
    assert_eq!(
        (
            &info["streams"],
            &info["consumers"],
            &info["storage"],
            &info["reserved_memory"]
        ),
        (&json!(2), &json!(2), &json!(1980), &json!(900)),
        "{info}"
    );
}

/// nats-server's other account limits (E) and an account without limits (F): each with its
/// own API counters.
const MAX_BYTES_CONFIG: &str = r#"
accounts {
  E: {
    users: [ { user: e, password: e } ]
    jetstream: { max_mem: 64MB, max_file: 32MB, max_consumers: 5, memory_max_stream_bytes: 2048,
                 store_max_stream_bytes: 4KB, max_stream_bytes: true }
  }
  F: { users: [ { user: f, password: f } ], jetstream: enabled }
}
"#;

#[tokio::test]
async fn max_bytes_limits_and_api_counters_are_the_accounts() {
    let srv = ServerProcess::start(ServerOptions::with_config(MAX_BYTES_CONFIG))
        .await
        .expect("start server");
    let (e, f) = (login(&srv, "e").await, login(&srv, "f").await);
    let info = api(&e, "$JS.API.INFO", Value::Null).await;
    assert_eq!(
        info["limits"],
        json!({"max_memory": 67_108_864, "max_storage": 33_554_432, "max_streams": -1,
            "max_consumers": 5, "max_ack_pending": -1, "memory_max_stream_bytes": 2048,
            "storage_max_stream_bytes": 4096, "max_bytes_required": true}),
        "{info}"
    );
    assert_eq!(
        (&info["api"]["total"], &info["api"]["errors"]),
        (&json!(0), &json!(0))
    );
    let request = |op: &str, name: &str, mut body: Value| {
        let e = e.clone();
        let subject = format!("$JS.API.STREAM.{op}.{name}");
        body["name"] = name.into();
        body["subjects"] = json!([name.to_lowercase()]);
        async move { api(&e, &subject, body).await }
    };
    let err_code = |v: &Value| v["error"]["err_code"].clone();
    let required = request("CREATE", "S", json!({"storage": "file"})).await;
    assert_eq!(
        required["error"],
        json!({"code": 400, "err_code": 10113,
            "description": "account requires a stream config to have max bytes set"})
    );
    let over = request(
        "CREATE",
        "M",
        json!({"storage": "memory", "max_bytes": 2049}),
    )
    .await;
    assert_eq!(
        over["error"],
        json!({"code": 400, "err_code": 10122,
            "description": "stream max bytes exceeds account limit max stream bytes"})
    );
    let over = request("CREATE", "S", json!({"storage": "file", "max_bytes": 4097})).await;
    assert_eq!(err_code(&over), 10122, "{over}");
    // A stream's own max_consumers may not exceed the account's.
    let consumers = json!({"storage": "file", "max_bytes": 4096, "max_consumers": 6});
    let over = request("CREATE", "S", consumers).await;
    assert_eq!(
        over["error"],
        json!({"code": 400, "err_code": 10026, "description": "maximum consumers limit reached"})
    );
    let file = request("CREATE", "S", json!({"storage": "file", "max_bytes": 4096})).await;
    assert_eq!(file["config"]["max_bytes"], 4096, "{file}");
    let mem = request(
        "CREATE",
        "M",
        json!({"storage": "memory", "max_bytes": 2048}),
    )
    .await;
    assert_eq!(mem["config"]["max_bytes"], 2048, "{mem}");
    let update = request("UPDATE", "S", json!({"storage": "file", "max_bytes": 5000})).await;
    assert_eq!(err_code(&update), 10122, "{update}");
    let update = request("UPDATE", "S", json!({"storage": "file"})).await;
    assert_eq!(err_code(&update), 10113, "{update}");
    // 9 answers so far, 6 of them errors; this one counts after its own answer.
    let info = api(&e, "$JS.API.INFO", Value::Null).await;
    assert_eq!(
        (
            &info["api"]["total"],
            &info["api"]["errors"],
            &info["streams"]
        ),
        (&json!(9), &json!(6), &json!(2)),
        "{info}"
    );
    assert_eq!(info["reserved_storage"], 4096, "{info}");
    // F's limits are nats-server's defaults and its counters its own.
    let missing = api(&f, "$JS.API.STREAM.INFO.S", Value::Null).await;
    assert_eq!(err_code(&missing), 10059, "{missing}");
    let info = api(&f, "$JS.API.INFO", Value::Null).await;
    assert_eq!(
        (&info["api"]["total"], &info["api"]["errors"]),
        (&json!(1), &json!(1)),
        "{info}"
    );
    assert_eq!(info["limits"]["max_bytes_required"], false, "{info}");
    assert_eq!(info["limits"]["storage_max_stream_bytes"], -1, "{info}");
}

#[tokio::test]
async fn global_streams_wait_stored_while_accounts_have_jetstream() {
    const GLOBAL_ONLY: &str = "authorization { users: [ { user: g, password: g } ] }\n";
    let mut srv = ServerProcess::start(ServerOptions::with_config(GLOBAL_ONLY))
        .await
        .expect("start server");
    let g = login(&srv, "g").await;
    api(&g, "$JS.API.STREAM.CREATE.ORDERS", orders()).await;
    assert_eq!(publish(&g, "orders.1", b"kept").await["seq"], 1);
    drop(g);
    let restart_with = |srv: &mut ServerProcess, config: &str| {
        std::fs::write(srv.dir().join("server.conf"), config).expect("write config");
    };
    srv.stop().await.expect("stop");
    restart_with(&mut srv, CONFIG);
    srv.start_again().await.expect("start with accounts");
    // With accounts configured `$G` has no JetStream: its stream neither answers nor captures.
    let g = login(&srv, "g").await;
    let info = api(&g, "$JS.API.STREAM.INFO.ORDERS", Value::Null).await;
    assert_eq!(info["error"]["err_code"], 10039, "{info}");
    let publish = within(OP, "publish", g.request("orders.2", "lost".into())).await;
    assert_eq!(
        publish.expect_err("nothing captures").kind(),
        async_nats::RequestErrorKind::NoResponders
    );
    let a = login(&srv, "a").await;
    let created = api(&a, "$JS.API.STREAM.CREATE.ORDERS", orders()).await;
    assert_eq!(created["state"]["messages"], 0, "A's own ORDERS: {created}");
    drop((g, a));
    srv.stop().await.expect("stop");
    restart_with(&mut srv, GLOBAL_ONLY);
    srv.start_again().await.expect("start without accounts");
    let g = login(&srv, "g").await;
    let info = api(&g, "$JS.API.STREAM.INFO.ORDERS", Value::Null).await;
    assert_eq!(info["state"]["messages"], 1, "{info}");
}

#[tokio::test]
async fn advisories_go_to_the_streams_account_only() {
    let srv = start().await;
    let (a, b) = (login(&srv, "a").await, login(&srv, "b").await);
    let mut in_a = a
        .subscribe("$JS.EVENT.ADVISORY.STREAM.CREATED.>")
        .await
        .expect("sub a");
    let mut in_b = b
        .subscribe("$JS.EVENT.ADVISORY.STREAM.CREATED.>")
        .await
        .expect("sub b");
    a.flush().await.expect("flush");
    b.flush().await.expect("flush");
    api(&a, "$JS.API.STREAM.CREATE.ORDERS", orders()).await;
    let m = within(OP, "advisory in A", in_a.next())
        .await
        .expect("advisory");
    assert_eq!(
        m.subject.as_str(),
        "$JS.EVENT.ADVISORY.STREAM.CREATED.ORDERS"
    );
    let advisory: Value = serde_json::from_slice(&m.payload).expect("json");
    assert_eq!(advisory["stream"], "ORDERS", "{advisory}");
    // B creates its own afterwards: B sees only that one.
    api(
        &b,
        "$JS.API.STREAM.CREATE.OTHER",
        json!({"name": "OTHER", "subjects": ["other"]}),
    )
    .await;
    let m = within(OP, "advisory in B", in_b.next())
        .await
        .expect("advisory");
    assert_eq!(
        m.subject.as_str(),
        "$JS.EVENT.ADVISORY.STREAM.CREATED.OTHER"
    );
}

/// A exports its JetStream API and the `forb.>` delivery subjects; B uses A's JetStream through
/// them (nats.js's cross-account KV tests set up the same).
const CROSS: &str = r#"
accounts {
  A: {
    jetstream: enabled
    users: [ { user: a, password: a } ]
    exports: [ { service: "$JS.API.>" }, { stream: "forb.>" }, { service: "orders.>" } ]
  }
  B: {
    users: [ { user: b, password: b } ]
    imports: [
      { service: { subject: "$JS.API.>", account: A }, to: "froma.>" }
      { stream: { subject: "forb.>", account: A } }
      { service: { subject: "orders.>", account: A }, to: "ordersa.>" }
    ]
  }
}
"#;

#[tokio::test]
async fn push_consumer_delivers_through_a_stream_import() {
    let srv = ServerProcess::start(ServerOptions::with_config(CROSS))
        .await
        .expect("start server");
    let (a, b) = (login(&srv, "a").await, login(&srv, "b").await);
    let created = api(&b, "froma.STREAM.CREATE.ORDERS", orders()).await;
    assert_eq!(created["config"]["name"], "ORDERS", "{created}");
    let ack = publish(&a, "orders.1", b"one").await;
    assert_eq!(ack["seq"], 1, "{ack}");
    // B's subscriber on the deliver subject is there before the consumer, as an ordered
    // consumer's is after it: both orders are tried.
    let mut early = b.subscribe("forb.early").await.expect("sub in B");
    b.flush().await.expect("flush");
    for (name, deliver) in [("early", "forb.early"), ("late", "forb.late")] {
        let mut cfg = json!({"stream_name": "ORDERS", "config": {"name": name,
            "deliver_subject": deliver, "ack_policy": "none"}});
        if name == "early" {
            cfg["config"]["flow_control"] = true.into();
            cfg["config"]["idle_heartbeat"] = 5_000_000_000u64.into();
        } else {
            // Durable: no inactivity check looks at the interest again either.
            cfg["config"]["durable_name"] = name.into();
        }
        let created = api(&b, &format!("froma.CONSUMER.CREATE.ORDERS.{name}"), cfg).await;
        assert_eq!(created["name"], name, "{created}");
    }
    // Without heartbeats nothing but B's subscription itself wakes the "late" consumer
    // (`jetstream - cross account subscribe` of nats.js waited forever): let it find no
    // interest first (not a bound: any pause makes the case, a longer one only more surely).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut late = b.subscribe("forb.late").await.expect("sub in B");
    // The delivery shows the stored subject, as a delivery in the consumer's own account does.
    for (name, sub) in [("early", &mut early), ("late", &mut late)] {
        let m = within(OP, "delivery through the import", sub.next())
            .await
            .unwrap_or_else(|| panic!("{name}: delivered"));
        assert_eq!(
            (m.subject.as_str(), m.payload.as_ref()),
            ("orders.1", &b"one"[..]),
            "{name}"
        );
        let reply = m.reply.expect("ack subject");
        assert!(
            reply.starts_with(&format!("$JS.ACK.ORDERS.{name}.")),
            "{reply}"
        );
    }
}

#[tokio::test]
async fn a_publish_through_a_service_import_is_stored_without_the_request_info() {
    let srv = ServerProcess::start(ServerOptions::with_config(CROSS))
        .await
        .expect("start server");
    let (a, b) = (login(&srv, "a").await, login(&srv, "b").await);
    let created = api(&a, "$JS.API.STREAM.CREATE.ORDERS", orders()).await;
    assert_eq!(created["config"]["name"], "ORDERS", "{created}");
    // B's publish crosses the import stamped with `Nats-Request-Info`; A's stream stores the
    // message with B's own headers only, and B gets the PubAck.
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("X-Mine", "1");
    let ack = within(
        OP,
        "publish through the import",
        b.request_with_headers("ordersa.1", headers, "from b".into()),
    )
    .await
    .expect("PubAck through the import");
    let ack: Value = serde_json::from_slice(&ack.payload).expect("json");
    assert_eq!((&ack["stream"], &ack["seq"]), (&json!("ORDERS"), &json!(1)));
    let stored = api(&a, "$JS.API.STREAM.MSG.GET.ORDERS", json!({"seq": 1})).await;
    assert_eq!(stored["message"]["subject"], "orders.1", "{stored}");
    let hdrs = stored["message"]["hdrs"].as_str().expect("stored headers");
    let hdrs =
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, hdrs).expect("base64");
    assert_eq!(
        String::from_utf8_lossy(&hdrs),
        "NATS/1.0\r\nX-Mine: 1\r\n\r\n",
        "stored headers"
    );
}

/// JS exports its JetStream API (streamed answers) to A under `IPA.>` (nats.js's
/// `jetstreamExportServerConf`).
const EXPORTED_API: &str = r#"
accounts {
  JS: {
    jetstream: enabled
    users: [ { user: js, password: js } ]
    exports: [
      { service: "$JS.API.>", response_type: stream }
      { service: "$JS.ACK.>", response_type: stream }
      { stream: "A.>", accounts: [A] }
    ]
  }
  A: {
    users: [ { user: a, password: a } ]
    imports: [
      { service: { subject: "$JS.API.>", account: JS }, to: "IPA.>" }
      { service: { subject: "$JS.ACK.>", account: JS } }
      { stream: { subject: "A.>", account: JS } }
    ]
  }
}
"#;

#[tokio::test]
async fn pull_request_through_an_imported_api_is_answered() {
    let srv = ServerProcess::start(ServerOptions::with_config(EXPORTED_API))
        .await
        .expect("start server");
    let (js, a) = (login(&srv, "js").await, login(&srv, "a").await);
    api(&js, "$JS.API.STREAM.CREATE.ORDERS", orders()).await;
    for body in [&b"one"[..], b"two"] {
        let ack = publish(&js, "orders.1", body).await;
        assert!(ack["seq"].is_u64(), "{ack}");
    }
    let cfg =
        json!({"stream_name": "ORDERS", "config": {"durable_name": "me", "ack_policy": "none"}});
    let created = api(&js, "$JS.API.CONSUMER.CREATE.ORDERS.me", cfg).await;
    assert_eq!(created["name"], "me", "{created}");
    let info = api(&a, "IPA.CONSUMER.INFO.ORDERS.me", Value::Null).await;
    assert_eq!(info["num_pending"], 2, "{info}");
    // A's inbox is under the imported `A.>`; the answer comes back on it.
    let mut inbox = a.subscribe("A.inbox.1").await.expect("sub");
    a.flush().await.expect("flush");
    for expected in [&b"one"[..], b"two"] {
        a.publish_with_reply(
            "IPA.CONSUMER.MSG.NEXT.ORDERS.me",
            "A.inbox.1",
            r#"{"batch":1,"max_bytes":0,"idle_heartbeat":1000000000,"expires":2000000000}"#.into(),
        )
        .await
        .expect("pull");
        let m = within(OP, "pulled message", inbox.next())
            .await
            .expect("delivered");
        assert_eq!(m.payload.as_ref(), expected);
        // Shown on the stored subject, not the inbox (nats.js takes a message on its inbox
        // for a status: `jetstream - cross account pull` missed its messages).
        assert_eq!(m.subject.as_str(), "orders.1");
    }
    // Nothing left: idle heartbeats, then the request's expiry, reach A too.
    a.publish_with_reply(
        "IPA.CONSUMER.MSG.NEXT.ORDERS.me",
        "A.inbox.1",
        r#"{"batch":1,"expires":2500000000,"idle_heartbeat":500000000}"#.into(),
    )
    .await
    .expect("pull");
    let mut statuses = Vec::new();
    while statuses.last().is_none_or(|s| *s == 100) {
        let m = within(OP, "pull status", inbox.next())
            .await
            .expect("status");
        assert_eq!(
            m.subject.as_str(),
            "A.inbox.1",
            "statuses come on the inbox"
        );
        statuses.push(m.status.map_or(0, u16::from));
    }
    assert!(
        statuses.len() >= 2 && statuses.ends_with(&[408]),
        "{statuses:?}"
    );
}
