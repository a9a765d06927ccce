//! Helpers for message schedule tests: `@at` times, publishing with headers, waiting for the
//! fired message.

use std::time::Duration;

use async_nats::HeaderMap;
use bytes::Bytes;
use serde_json::{Value, json};

use super::jsapi::{ELECTION, try_api};
use super::{wait_for, within};

/// An RFC 3339 time `after` from now, rounded up to a whole second (as clients write `@at`
/// times), and the same time in Unix ns.
pub fn at_in(after: Duration) -> (String, u64) {
    let now = time::OffsetDateTime::now_utc() + after;
    let at = now.replace_nanosecond(0).expect("zero ns") + time::Duration::SECOND;
    let text = at
        .format(&time::format_description::well_known::Rfc3339)
        .expect("format");
    (
        text,
        u64::try_from(at.unix_timestamp_nanos()).expect("after 1970"),
    )
}

/// An RFC 3339 time (with fractional seconds) in Unix ns.
pub fn parse_ns(text: &str) -> u64 {
    let t = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .expect("rfc3339");
    u64::try_from(t.unix_timestamp_nanos()).expect("after 1970")
}

/// A publish with headers, as a request; the PubAck (or error) JSON.
pub async fn publish(nc: &async_nats::Client, subject: &str, h: HeaderMap, body: &str) -> Value {
    let req = nc.request_with_headers(subject.to_string(), h, Bytes::from(body.to_string()));
    let msg = within(Duration::from_secs(10), "publish", req)
        .await
        .expect("request");
    serde_json::from_slice(&msg.payload).expect("json ack")
}

/// Waits (up to [`ELECTION`]) for a message on `subject` in `stream`; the MSG.GET answer.
pub async fn fired(nc: &async_nats::Client, stream: &str, subject: &str) -> Value {
    let api = format!("$JS.API.STREAM.MSG.GET.{stream}");
    wait_for("scheduled message", ELECTION, || {
        let nc = nc.clone();
        let api = api.clone();
        async move {
            let r = try_api(&nc, &api, &json!({ "last_by_subj": subject })).await?;
            r["message"].is_object().then_some(r)
        }
    })
    .await
}

/// The decoded header block of a MSG.GET answer ("" without headers).
pub fn msg_headers(get: &Value) -> String {
    use base64::Engine as _;
    let Some(b64) = get["message"]["hdrs"].as_str() else {
        return String::new();
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64");
    String::from_utf8_lossy(&bytes).into_owned()
}
