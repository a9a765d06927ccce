//! Batched DIRECT.GET through raw async-nats requests (as nats.go's and nats.js's direct
//! batch and KV "get keys as of" use it): `batch` with the `204 EOB` status, `multi_last` as of a
//! sequence, and the `408`/`404` statuses. Several replies come back to one request, so each
//! test reads an inbox until the end-of-batch status.
//!
//! Runs against the real nats-server too (`JETRAFT_TEST_SERVER=nats-server`).

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use futures_util::StreamExt;
use jetraft_tests::harness::{connect, start_server, within};

const OP: Duration = Duration::from_secs(10);

/// One reply: status code (0 for a message), description, payload and headers.
struct Reply {
    status: u16,
    description: String,
    payload: Bytes,
    headers: HeaderMap,
}

impl Reply {
    fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).map(|v| v.as_str().to_string())
    }
}

/// Sends `body` to `subject` and collects the replies up to and including the first status
/// (EOB or an error); a request answered by one plain message (no batch) ends there too when
/// `single` is set.
async fn direct(nc: &async_nats::Client, subject: &str, body: &str, single: bool) -> Vec<Reply> {
    let inbox = nc.new_inbox();
    let mut sub = nc.subscribe(inbox.clone()).await.expect("subscribe");
    nc.publish_with_reply(subject.to_string(), inbox, Bytes::from(body.to_string()))
        .await
        .expect("publish");
    let mut out = Vec::new();
    loop {
        let m = within(OP, subject, sub.next()).await.expect("reply");
        let status = m.status.map_or(0, |s| s.as_u16());
        let done = status != 0 || single;
        out.push(Reply {
            status,
            description: m.description.clone().unwrap_or_default(),
            payload: m.payload.clone(),
            headers: m.headers.clone().unwrap_or_default(),
        });
        if done {
            return out;
        }
    }
}

/// Stream `DB` with `allow_direct`, 10 messages on `k.<seq % 3>` with payload `m<seq>`.
async fn setup() -> (jetraft_tests::harness::ServerProcess, async_nats::Client) {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    within(
        OP,
        "create",
        js.create_stream(stream::Config {
            name: "DB".into(),
            subjects: vec!["k.*".into()],
            allow_direct: true,
            ..Default::default()
        }),
    )
    .await
    .expect("create");
    for seq in 1..=10u64 {
        js.publish(format!("k.{}", seq % 3), format!("m{seq}").into())
            .await
            .expect("publish")
            .await
            .expect("ack");
    }
    (srv, nc)
}

fn payloads(r: &[Reply]) -> Vec<String> {
    r.iter()
        .map(|x| String::from_utf8_lossy(&x.payload).into_owned())
        .collect()
}

#[tokio::test]
async fn a_batch_ends_with_eob_and_counts_pending() {
    let (_srv, nc) = setup().await;
    let r = direct(
        &nc,
        "$JS.API.DIRECT.GET.DB",
        r#"{"seq":3,"batch":3}"#,
        false,
    )
    .await;
    assert_eq!(payloads(&r), ["m3", "m4", "m5", ""]);
    assert_eq!(r[0].header("Nats-Sequence").as_deref(), Some("3"));
    assert_eq!(r[0].header("Nats-Num-Pending").as_deref(), Some("7"));
    assert_eq!(r[0].header("Nats-Last-Sequence").as_deref(), Some("0"));
    assert_eq!(r[2].header("Nats-Last-Sequence").as_deref(), Some("4"));
    assert_eq!((r[3].status, r[3].description.as_str()), (204, "EOB"));
    assert_eq!(r[3].header("Nats-Num-Pending").as_deref(), Some("5"));
    assert_eq!(r[3].header("Nats-Last-Sequence").as_deref(), Some("5"));

    // A subject filter, running off the end of the stream.
    let r = direct(
        &nc,
        "$JS.API.DIRECT.GET.DB",
        r#"{"next_by_subj":"k.2","batch":9}"#,
        false,
    )
    .await;
    assert_eq!(payloads(&r), ["m2", "m5", "m8", ""]);
    assert_eq!(r[3].status, 204);
    assert_eq!(r[3].header("Nats-Num-Pending").as_deref(), Some("0"));
}

#[tokio::test]
async fn multi_last_as_of_a_sequence() {
    let (_srv, nc) = setup().await;
    let r = direct(
        &nc,
        "$JS.API.DIRECT.GET.DB",
        r#"{"multi_last":["k.*"]}"#,
        false,
    )
    .await;
    assert_eq!(payloads(&r), ["m8", "m9", "m10", ""]);
    assert_eq!(r[3].status, 204);
    assert_eq!(r[3].header("Nats-UpTo-Sequence").as_deref(), Some("10"));
    let r = direct(
        &nc,
        "$JS.API.DIRECT.GET.DB",
        r#"{"multi_last":["k.0","k.1"],"up_to_seq":5}"#,
        false,
    )
    .await;
    assert_eq!(payloads(&r), ["m3", "m4", ""]);
    assert_eq!(r[0].header("Nats-Num-Pending").as_deref(), Some("1"));
    assert_eq!(r[2].header("Nats-UpTo-Sequence").as_deref(), Some("5"));
    let r = direct(
        &nc,
        "$JS.API.DIRECT.GET.DB",
        r#"{"multi_last":["x.*"]}"#,
        false,
    )
    .await;
    assert_eq!(
        (r[0].status, r[0].description.as_str()),
        (404, "No Results")
    );
}

#[tokio::test]
async fn empty_and_conflicting_requests_get_408() {
    let (_srv, nc) = setup().await;
    for (body, description) in [
        ("", "Empty Request"),
        (r#"{"seq":0}"#, "Empty Request"),
        (r#"{"seq":1,"last_by_subj":"k.1"}"#, "Bad Request"),
        (r#"{"last_by_subj":"k.1","batch":2}"#, "Bad Request"),
    ] {
        let r = direct(&nc, "$JS.API.DIRECT.GET.DB", body, true).await;
        assert_eq!(
            (r[0].status, r[0].description.as_str()),
            (408, description),
            "{body}"
        );
    }
    // The subject form accepts an empty JSON body, not selectors.
    let r = direct(&nc, "$JS.API.DIRECT.GET.DB.k.1", "{}", true).await;
    assert_eq!(payloads(&r), ["m10"]);
    let r = direct(&nc, "$JS.API.DIRECT.GET.DB.k.1", r#"{"seq":1}"#, true).await;
    assert_eq!(r[0].status, 408);
}
