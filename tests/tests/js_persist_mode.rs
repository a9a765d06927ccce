//! Stream `persist_mode` (nats-server 2.12): `async` is accepted on an R1 file stream, stored
//! and shown in STREAM.INFO; `default` (or `""`) is the default and is not shown; other values,
//! memory storage, replicas, atomic publish and changing it in an update are refused with
//! nats-server's errors.
//!
//! Runs against the real nats-server too (`JETRAFT_TEST_SERVER=nats-server`).

use jetraft_tests::harness::jsapi::api;
use jetraft_tests::harness::{connect, start_server};
use serde_json::{Value, json};

#[tokio::test]
async fn persist_mode_is_validated_stored_and_reported_as_nats_server_does() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let create = |name: &str, extra: Value| {
        let nc = nc.clone();
        let mut cfg = json!({"name": name, "subjects": [name.to_lowercase()]});
        for (k, v) in extra.as_object().expect("object") {
            cfg[k] = v.clone();
        }
        let subject = format!("$JS.API.STREAM.CREATE.{name}");
        async move { api(&nc, &subject, cfg).await }
    };
    let r = create("A1", json!({"persist_mode": "async"})).await;
    assert_eq!(r["config"]["persist_mode"], "async", "{r}");
    for (name, mode) in [("A2", "default"), ("A3", "")] {
        let r = create(name, json!({"persist_mode": mode})).await;
        assert!(r["error"].is_null(), "{r}");
        assert!(r["config"].get("persist_mode").is_none(), "{r}");
    }
    let refused = [
        (
            json!({"persist_mode": "bogus"}),
            10025,
            r#"invalid JSON: can not unmarshal "\"bogus\"""#,
        ),
        (
            json!({"persist_mode": null}),
            10025,
            r#"invalid JSON: can not unmarshal "null""#,
        ),
        (
            json!({"persist_mode": "async", "storage": "memory"}),
            10052,
            "async persist mode is only supported on file storage",
        ),
        (
            json!({"persist_mode": "async", "num_replicas": 3}),
            10052,
            "async persist mode is not supported on replicated streams",
        ),
        (
            json!({"persist_mode": "async", "allow_atomic": true}),
            10052,
            "async persist mode is not supported with atomic batch publish",
        ),
    ];
    for (extra, code, description) in refused {
        let r = create("BAD", extra.clone()).await;
        assert_eq!(r["error"]["err_code"], code, "{extra}: {r}");
        assert_eq!(r["error"]["description"], description, "{extra}");
    }
    let info = api(&nc, "$JS.API.STREAM.INFO.A1", Value::Null).await;
    assert_eq!(info["config"]["persist_mode"], "async", "{info}");
    for (name, mode) in [("A1", "default"), ("A2", "async")] {
        let r = api(
            &nc,
            &format!("$JS.API.STREAM.UPDATE.{name}"),
            json!({"name": name, "subjects": [name.to_lowercase()], "persist_mode": mode}),
        )
        .await;
        assert_eq!(r["error"]["err_code"], 10052, "{r}");
        assert_eq!(
            r["error"]["description"],
            "stream configuration update can not change persist mode"
        );
    }
}
