//! Stream backups (STREAM.SNAPSHOT / STREAM.RESTORE, as the `nats` CLI sends them) in accounts
//! other than `$G`, on one node: a backup taken through an account's own `$JS.API` restores
//! into the account that asks, two accounts restoring the same stream name keep two streams,
//! and the restoring account's limits apply. Runs against nats-server too
//! (`JETRAFT_TEST_SERVER=nats-server NATS_SERVER_BIN=...`).

use std::time::Duration;

use jetraft_tests::harness::backup::{Acks, messages, restore, snapshot};
use jetraft_tests::harness::jsapi::api;
use jetraft_tests::harness::{ServerOptions, ServerProcess, login, within};
use serde_json::{Value, json};

const OP: Duration = Duration::from_secs(5);

/// A and B have JetStream; C may have one stream.
const CONFIG: &str = r#"
accounts {
  A: { users: [ { user: a, password: a } ], jetstream: enabled }
  B: { users: [ { user: b, password: b } ], jetstream: enabled }
  C: { users: [ { user: c, password: c } ], jetstream: { max_streams: 1 } }
}
"#;

/// Publishes `body` on `subject` and returns the PubAck's sequence.
async fn publish(nc: &async_nats::Client, subject: &str, body: &'static [u8]) -> Value {
    let msg = within(OP, "publish", nc.request(subject.to_string(), body.into()))
        .await
        .expect("publish answered");
    let ack: Value = serde_json::from_slice(&msg.payload).expect("pub ack json");
    ack["seq"].clone()
}

#[tokio::test]
async fn a_backup_restores_into_the_account_that_asks() {
    let srv = ServerProcess::start(ServerOptions::with_config(CONFIG))
        .await
        .expect("start server");
    let (a, b, c) = (
        login(&srv, "a").await,
        login(&srv, "b").await,
        login(&srv, "c").await,
    );
    let orders = json!({"name": "ORDERS", "subjects": ["orders.>"], "storage": "file"});
    let created = api(&a, "$JS.API.STREAM.CREATE.ORDERS", orders).await;
    assert_eq!(created["config"]["name"], "ORDERS", "{created}");
    for (i, subject) in ["orders.1", "orders.2", "orders.3"].into_iter().enumerate() {
        assert_eq!(publish(&a, subject, b"in A").await, i + 1);
    }
    let durable = json!({"stream_name": "ORDERS", "config": {"durable_name": "work",
        "ack_policy": "explicit"}});
    let consumer = api(&a, "$JS.API.CONSUMER.CREATE.ORDERS.work", durable).await;
    assert_eq!(consumer["name"], "work", "{consumer}");

    let backup = snapshot(&a, "ORDERS", json!({}), Acks::Prompt).await;
    assert_eq!(
        backup.response["type"], "io.nats.jetstream.api.v1.stream_snapshot_response",
        "{}",
        backup.response
    );
    assert_eq!(
        backup.response["state"]["messages"], 3,
        "{}",
        backup.response
    );
    assert!(!backup.data.is_empty(), "no backup data");

    // The name is taken in A, not in B.
    let (answer, done) = restore(&a, "ORDERS", &backup, 64 * 1024).await;
    assert_eq!(answer["error"]["err_code"], 10130, "{answer}");
    assert!(done.is_none());
    let (answer, done) = restore(&b, "ORDERS", &backup, 64 * 1024).await;
    let deliver = answer["deliver_subject"].as_str().unwrap_or_default();
    assert!(
        deliver.starts_with("$JS.SNAPSHOT.RESTORE.ORDERS."),
        "{answer}"
    );
    let done = done.expect("final answer");
    assert_eq!(
        (&done["type"], &done["state"]["messages"]),
        (
            &json!("io.nats.jetstream.api.v1.stream_create_response"),
            &json!(3)
        ),
        "{done}"
    );
    assert_eq!(
        messages(&b, "ORDERS", 1, 3).await,
        messages(&a, "ORDERS", 1, 3).await
    );
    let restored = api(&b, "$JS.API.CONSUMER.INFO.ORDERS.work", Value::Null).await;
    assert_eq!(
        restored["name"], "work",
        "B has the backup's consumer: {restored}"
    );

    // A and B now both have an ORDERS, apart: A's is deleted and restored, B's grows.
    let deleted = api(&a, "$JS.API.STREAM.DELETE.ORDERS", Value::Null).await;
    assert_eq!(deleted["success"], true, "{deleted}");
    let (_, done) = restore(&a, "ORDERS", &backup, 1024).await;
    let done = done.expect("final answer");
    assert_eq!(done["state"]["messages"], 3, "{done}");
    assert_eq!(publish(&b, "orders.4", b"in B").await, 4);
    let info_a = api(&a, "$JS.API.STREAM.INFO.ORDERS", Value::Null).await;
    let info_b = api(&b, "$JS.API.STREAM.INFO.ORDERS", Value::Null).await;
    assert_eq!(
        (&info_a["state"]["messages"], &info_b["state"]["messages"]),
        (&json!(3), &json!(4))
    );
    // A backup of B's stream is B's.
    let of_b = snapshot(&b, "ORDERS", json!({"no_consumers": true}), Acks::Prompt).await;
    assert_eq!(of_b.response["state"]["messages"], 4, "{}", of_b.response);

    // C's limits apply to a restore: one stream at most.
    let one = json!({"name": "ONE", "subjects": ["one"], "storage": "file"});
    let created = api(&c, "$JS.API.STREAM.CREATE.ONE", one).await;
    assert_eq!(created["config"]["name"], "ONE", "{created}");
    let (answer, done) = restore(&c, "ORDERS", &backup, 64 * 1024).await;
    assert!(done.is_none());
    assert_eq!(
        answer["error"],
        json!({"code": 400, "err_code": 10027, "description": "maximum number of streams reached"}),
        "{answer}"
    );
}
