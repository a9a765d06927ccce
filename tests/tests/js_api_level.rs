//! `Nats-Required-Api-Level` on `$JS.API` requests (nats-server 2.12): a level above the
//! server's (or one that is not a number) refuses the request with 412/10185 in the request's
//! response type; a level the server has is answered as usual.
//!
//! Runs against the real nats-server too (`JETRAFT_TEST_SERVER=nats-server`).

use std::time::Duration;

use async_nats::HeaderMap;
use bytes::Bytes;
use jetraft_tests::harness::{connect, start_server, within};
use serde_json::{Value, json};

async fn request(nc: &async_nats::Client, subject: &str, level: &str, body: Value) -> Value {
    let mut h = HeaderMap::new();
    h.insert("Nats-Required-Api-Level", level);
    let req = nc.request_with_headers(subject.to_string(), h, Bytes::from(body.to_string()));
    let msg = within(Duration::from_secs(10), "api request", req)
        .await
        .expect("request");
    serde_json::from_slice(&msg.payload).expect("json")
}

#[tokio::test]
async fn a_required_api_level_above_the_servers_refuses_the_request() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let create = json!({"name": "LV", "subjects": ["lv"]});
    for level in ["99", "x"] {
        let r = request(&nc, "$JS.API.STREAM.CREATE.LV", level, create.clone()).await;
        assert_eq!(r["type"], "io.nats.jetstream.api.v1.stream_create_response");
        assert_eq!(
            r["error"],
            json!({"code": 412, "err_code": 10185,
                   "description": "JetStream minimum api level required"}),
            "{level}: {r}"
        );
        let r = request(&nc, "$JS.API.INFO", level, Value::Null).await;
        assert_eq!(r["error"]["err_code"], 10185, "{r}");
    }
    let r = request(&nc, "$JS.API.STREAM.CREATE.LV", "2", create).await;
    assert!(r["error"].is_null(), "{r}");
    let r = request(&nc, "$JS.API.STREAM.INFO.LV", "0", Value::Null).await;
    assert_eq!(r["config"]["name"], "LV", "{r}");
}
