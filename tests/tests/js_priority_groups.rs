//! Priority groups of pull consumers through raw async-nats requests (as nats.go's and
//! nats.js's pinned and overflow consumers use them): a pinned client gets `Nats-Pin-Id` with
//! every message, others wait, a wrong id gets `423`, CONSUMER.UNPIN hands the pin on (with
//! the `UNPINNED` advisory), CONSUMER.INFO shows the pin; `overflow` serves a request only past
//! its `min_pending`.
//!
//! Runs against the real nats-server too (`JETRAFT_TEST_SERVER=nats-server`).

use std::time::Duration;

use async_nats::jetstream;
use async_nats::{HeaderMap, Subscriber};
use bytes::Bytes;
use futures_util::StreamExt;
use jetraft_tests::harness::jsapi::api;
use jetraft_tests::harness::{connect, start_server, within};
use serde_json::{Value, json};

const OP: Duration = Duration::from_secs(10);

/// One reply to a pull request: status (0 for a message), description, headers, payload.
struct Reply {
    status: u16,
    description: String,
    headers: HeaderMap,
    payload: Bytes,
}

impl Reply {
    fn pin(&self) -> Option<String> {
        self.headers
            .get("Nats-Pin-Id")
            .map(|v| v.as_str().to_string())
    }
}

/// Sends a pull request with `body` for consumer `C` of stream `S`; returns the inbox to read.
async fn pull(nc: &async_nats::Client, body: Value) -> Subscriber {
    let inbox = nc.new_inbox();
    let sub = nc.subscribe(inbox.clone()).await.expect("subscribe");
    nc.publish_with_reply(
        "$JS.API.CONSUMER.MSG.NEXT.S.C",
        inbox,
        Bytes::from(body.to_string()),
    )
    .await
    .expect("publish");
    nc.flush().await.expect("flush");
    sub
}

async fn next(sub: &mut Subscriber, what: &str) -> Reply {
    let m = within(OP, what, sub.next()).await.expect(what);
    Reply {
        status: m.status.map_or(0, |s| s.as_u16()),
        description: m.description.clone().unwrap_or_default(),
        headers: m.headers.clone().unwrap_or_default(),
        payload: m.payload.clone(),
    }
}

/// Stream `S` on `s.>` with `msgs` messages `m1..`, and pull consumer `C` with `policy`.
async fn setup(
    policy: &str,
    msgs: u64,
) -> (jetraft_tests::harness::ServerProcess, async_nats::Client) {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let created = api(
        &nc,
        "$JS.API.STREAM.CREATE.S",
        json!({"name": "S", "subjects": ["s.>"]}),
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");
    for i in 1..=msgs {
        js.publish("s.x", format!("m{i}").into())
            .await
            .expect("publish")
            .await
            .expect("ack");
    }
    let mut cfg = json!({
        "durable_name": "C",
        "ack_policy": "explicit",
        "priority_policy": policy,
        "priority_groups": ["A"],
    });
    if policy == "pinned_client" {
        cfg["priority_timeout"] = json!(5_000_000_000u64);
    }
    let created = api(
        &nc,
        "$JS.API.CONSUMER.CREATE.S.C",
        json!({"stream_name": "S", "config": cfg}),
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");
    (srv, nc)
}

#[tokio::test]
async fn a_pinned_client_takes_the_group_until_unpinned() {
    let (_srv, nc) = setup("pinned_client", 3).await;
    let mut advisories = nc
        .subscribe("$JS.EVENT.ADVISORY.CONSUMER.*.S.C")
        .await
        .expect("advisories");
    nc.flush().await.expect("flush");

    // The first client is pinned: its message carries the pin id.
    let mut first = pull(&nc, json!({"batch": 1, "group": "A"})).await;
    let m1 = next(&mut first, "first delivery").await;
    assert_eq!(m1.status, 0);
    assert_eq!(m1.payload, "m1");
    let pin = m1.pin().expect("Nats-Pin-Id on a pinned delivery");
    assert!(!pin.is_empty());
    let pinned = next(&mut advisories, "pinned advisory").await;
    let a: Value = serde_json::from_slice(&pinned.payload).expect("advisory JSON");
    assert_eq!(
        a["type"],
        "io.nats.jetstream.advisory.v1.consumer_group_pinned"
    );
    assert_eq!(a["group"], "A");
    assert_eq!(a["pinned_id"], pin.as_str());

    // Another client without the id gets nothing (its request ends at expiry), one with a
    // wrong id is refused at once.
    let mut other = pull(
        &nc,
        json!({"batch": 1, "group": "A", "expires": 500_000_000}),
    )
    .await;
    let r = next(&mut other, "other client's request").await;
    assert_eq!((r.status, r.description.as_str()), (408, "Request Timeout"));
    let mut wrong = pull(&nc, json!({"batch": 1, "group": "A", "id": "NOTTHEPIN"})).await;
    let r = next(&mut wrong, "wrong pin").await;
    assert_eq!(
        (r.status, r.description.as_str()),
        (423, "Nats-Pin-Id mismatch")
    );

    // The pinned client goes on with its id.
    let mut again = pull(&nc, json!({"batch": 1, "group": "A", "id": pin})).await;
    let m2 = next(&mut again, "pinned client's next").await;
    assert_eq!(m2.payload, "m2");
    assert_eq!(m2.pin().as_deref(), Some(pin.as_str()));

    let info = api(&nc, "$JS.API.CONSUMER.INFO.S.C", json!({})).await;
    assert_eq!(info["priority_groups"][0]["group"], "A", "{info}");
    assert_eq!(
        info["priority_groups"][0]["pinned_client_id"],
        pin.as_str(),
        "{info}"
    );

    // UNPIN: advised, and the next client without an id is pinned anew.
    let unpinned = api(&nc, "$JS.API.CONSUMER.UNPIN.S.C", json!({"group": "A"})).await;
    assert_eq!(
        unpinned["type"],
        "io.nats.jetstream.api.v1.consumer_unpin_response"
    );
    assert!(unpinned.get("error").is_none(), "{unpinned}");
    let ad = next(&mut advisories, "unpinned advisory").await;
    let a: Value = serde_json::from_slice(&ad.payload).expect("advisory JSON");
    assert_eq!(
        a["type"],
        "io.nats.jetstream.advisory.v1.consumer_group_unpinned"
    );
    assert_eq!(a["reason"], "admin");
    let mut newcomer = pull(&nc, json!({"batch": 1, "group": "A"})).await;
    let m3 = next(&mut newcomer, "newcomer").await;
    assert_eq!(m3.payload, "m3");
    let new_pin = m3.pin().expect("a new pin");
    assert_ne!(new_pin, pin);
}

#[tokio::test]
async fn unpin_and_pull_requests_are_checked_as_nats_server_does() {
    let (_srv, nc) = setup("pinned_client", 1).await;
    let bad_group = api(&nc, "$JS.API.CONSUMER.UNPIN.S.C", json!({"group": "B"})).await;
    assert_eq!(bad_group["error"]["err_code"], 10160, "{bad_group}");
    let no_group = api(&nc, "$JS.API.CONSUMER.UNPIN.S.C", json!({})).await;
    assert_eq!(no_group["error"]["err_code"], 10025, "{no_group}");
    let no_consumer = api(&nc, "$JS.API.CONSUMER.UNPIN.S.X", json!({"group": "A"})).await;
    assert_eq!(no_consumer["error"]["err_code"], 10014, "{no_consumer}");
    for (body, want) in [
        (json!({"batch": 1}), "Bad Request - Priority Group missing"),
        (
            json!({"batch": 1, "group": "B"}),
            "Bad Request - Invalid Priority Group",
        ),
        (
            json!({"batch": 1, "group": "A", "min_pending": 1}),
            "Bad Request - Not a Overflow Priority consumer",
        ),
    ] {
        let mut sub = pull(&nc, body.clone()).await;
        let r = next(&mut sub, "refused pull").await;
        assert_eq!((r.status, r.description.as_str()), (400, want), "{body}");
    }
}

#[tokio::test]
async fn overflow_serves_a_request_only_past_its_min_pending() {
    let (_srv, nc) = setup("overflow", 3).await;
    // 3 pending: a request wanting at least 10 gets nothing before it expires.
    let mut big = pull(
        &nc,
        json!({"batch": 1, "group": "A", "min_pending": 10, "expires": 500_000_000}),
    )
    .await;
    let r = next(&mut big, "overflow request").await;
    assert_eq!(r.status, 408, "{}", r.description);
    // At least 2 pending: served.
    let mut small = pull(&nc, json!({"batch": 1, "group": "A", "min_pending": 2})).await;
    let m = next(&mut small, "served overflow request").await;
    assert_eq!((m.status, m.payload.as_ref()), (0, b"m1".as_ref()));
}
