//! Raw JetStream pull and ack helpers for cluster tests, where client-library retries would
//! hide what the server did: one `MSG.NEXT` request, the deliveries it produced, AckSync.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;

/// A delivered message with its ack subject decoded (v1 form).
#[derive(Debug, Clone)]
pub struct Delivered {
    /// The message subject (the stored one).
    pub subject: String,
    /// Payload.
    pub payload: Bytes,
    /// The ack reply subject.
    pub reply: String,
    /// Delivery count.
    pub delivered: u64,
    /// Stream sequence.
    pub stream_seq: u64,
    /// Consumer sequence.
    pub consumer_seq: u64,
    /// Pending count after this delivery.
    pub pending: u64,
    /// When the server delivered it (Unix ns, from the ack reply subject).
    pub timestamp_ns: u64,
}

/// Decodes `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>` into
/// (delivered, sseq, dseq, pending).
pub fn parse_ack_reply(reply: &str) -> Option<(u64, u64, u64, u64)> {
    let t = ack_reply_tokens(reply)?;
    Some((
        t[4].parse().ok()?,
        t[5].parse().ok()?,
        t[6].parse().ok()?,
        t[8].parse().ok()?,
    ))
}

/// The delivery time (Unix ns) in an ack reply subject.
pub fn ack_reply_timestamp(reply: &str) -> Option<u64> {
    ack_reply_tokens(reply)?[7].parse().ok()
}

fn ack_reply_tokens(reply: &str) -> Option<Vec<&str>> {
    let t: Vec<&str> = reply.split('.').collect();
    (t.len() == 9 && t[0] == "$JS" && t[1] == "ACK").then_some(t)
}

/// Sends one pull request for up to `batch` messages lasting `expires` and collects what
/// arrives until the batch is full, a status ends it, or `expires` (+1 s) passes.
pub async fn pull(
    nc: &async_nats::Client,
    stream: &str,
    consumer: &str,
    batch: usize,
    expires: Duration,
) -> Vec<Delivered> {
    let inbox = nc.new_inbox();
    let Ok(mut sub) = nc.subscribe(inbox.clone()).await else {
        return Vec::new();
    };
    let body = format!(
        "{{\"batch\":{batch},\"expires\":{}}}",
        expires.as_nanos().min(u128::from(u64::MAX))
    );
    let subject = format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}");
    if nc
        .publish_with_reply(subject, inbox, Bytes::from(body))
        .await
        .is_err()
    {
        return Vec::new();
    }
    let deadline = tokio::time::Instant::now() + expires + Duration::from_secs(1);
    let mut out = Vec::new();
    while out.len() < batch {
        let Ok(Some(msg)) = tokio::time::timeout_at(deadline, sub.next()).await else {
            break;
        };
        if msg.status.is_some() {
            break;
        }
        let Some(reply) = msg.reply.as_ref().map(|r| r.to_string()) else {
            continue;
        };
        let Some((delivered, stream_seq, consumer_seq, pending)) = parse_ack_reply(&reply) else {
            continue;
        };
        let timestamp_ns = ack_reply_timestamp(&reply).unwrap_or(0);
        out.push(Delivered {
            timestamp_ns,
            subject: msg.subject.to_string(),
            payload: msg.payload.clone(),
            reply,
            delivered,
            stream_seq,
            consumer_seq,
            pending,
        });
    }
    out
}

/// AckSync: acks `d` and waits (up to `bound`) for the server's confirmation.
pub async fn ack_sync(nc: &async_nats::Client, d: &Delivered, bound: Duration) -> bool {
    matches!(
        tokio::time::timeout(bound, nc.request(d.reply.clone(), Bytes::new())).await,
        Ok(Ok(m)) if m.status.is_none()
    )
}
