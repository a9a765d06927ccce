//! Atomic batch publish (ADR-50) the way clients do it: headers `Nats-Batch-Id`,
//! `Nats-Batch-Sequence`, `Nats-Batch-Commit`; the first message as a request (answered with an
//! empty message once the server holds it), the middle ones without reply, the commit as a
//! request answered with the batch's PubAck.

use std::time::Duration;

use async_nats::HeaderMap;
use bytes::Bytes;
use serde_json::Value;

use super::within;

/// Bound on one request of a batch.
const OP: Duration = Duration::from_secs(10);

/// One batch message: its subject, body and extra headers.
pub struct Part<'a> {
    /// Subject published to.
    pub subject: &'a str,
    /// Payload.
    pub body: &'a str,
    /// Extra headers besides the batch ones.
    pub headers: Vec<(&'a str, &'a str)>,
}

/// A part without extra headers.
pub fn part<'a>(subject: &'a str, body: &'a str) -> Part<'a> {
    Part {
        subject,
        body,
        headers: Vec::new(),
    }
}

/// The batch headers of message `seq` of batch `id`, plus `extra`.
pub fn headers(id: &str, seq: usize, extra: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("Nats-Batch-Id", id);
    h.insert("Nats-Batch-Sequence", seq.to_string().as_str());
    for (k, v) in extra {
        h.insert(*k, *v);
    }
    h
}

/// A request with headers; the answer's payload (empty for a staged message).
pub async fn request(nc: &async_nats::Client, subject: &str, h: HeaderMap, body: &str) -> Bytes {
    let req = nc.request_with_headers(subject.to_string(), h, Bytes::from(body.to_string()));
    within(OP, "batch request", req)
        .await
        .expect("request")
        .payload
}

/// A JSON answer, or a panic showing the payload.
pub fn json_of(payload: &Bytes) -> Value {
    serde_json::from_slice(payload)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(payload)))
}

/// Publishes `parts` as batch `id` the way clients do (the first as a request, which the
/// server answers with an empty message once it holds it; the middle ones without a reply);
/// the last carries `Nats-Batch-Commit: commit`. Returns the commit's answer.
pub async fn publish_batch(
    nc: &async_nats::Client,
    id: &str,
    parts: &[Part<'_>],
    commit: &str,
) -> Value {
    let n = parts.len();
    for (i, p) in parts.iter().enumerate() {
        let seq = i + 1;
        let mut extra = p.headers.clone();
        if seq == n {
            extra.push(("Nats-Batch-Commit", commit));
            return json_of(&request(nc, p.subject, headers(id, seq, &extra), p.body).await);
        }
        if seq == 1 {
            let first = request(nc, p.subject, headers(id, seq, &extra), p.body).await;
            assert!(first.is_empty(), "first message answered {first:?}");
        } else {
            nc.publish_with_headers(
                p.subject.to_string(),
                headers(id, seq, &extra),
                Bytes::from(p.body.to_string()),
            )
            .await
            .expect("publish");
        }
    }
    unreachable!("a batch has at least one message")
}
