//! The console's NATS side: core publishes and requests made through the node's bus on the
//! browser's behalf, as a server-internal client (replies come back on an internal inbox).
//!
//! A request publishes on this node, so the JetStream API of this node answers it (forwarding to
//! the meta or stream leader itself, as it does for a client connected here).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::bus::{Bus, InternalMsg, Msg};

/// Longest a console request waits for its reply.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a request got no usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RequestError {
    /// Nobody listens on the subject (what a client sees as a 503 status).
    NoResponders,
    /// No answer within the timeout.
    Timeout,
    /// The subject or inbox could not be used.
    Invalid(String),
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoResponders => f.write_str("no responders available for request"),
            Self::Timeout => f.write_str("request timed out"),
            Self::Invalid(why) => write!(f, "invalid request: {why}"),
        }
    }
}

pub(crate) use crate::bus::cluster_sub::ClusterSub;

/// Requests waiting for their reply, by the last token of their inbox.
type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<InternalMsg>>>>;

/// Publishes and requests through the node's bus.
#[derive(Debug, Clone)]
pub(crate) struct BusClient {
    bus: Bus,
    prefix: String,
    next: Arc<AtomicU64>,
    waiting: Waiting,
}

impl BusClient {
    /// A client of `bus` whose inboxes (`_INBOX.console<id>.<n>`) are unique to this node's
    /// console. One subscription takes every reply, on this node or from a peer (an API
    /// request may be answered by the meta or stream leader's node); it ends at `shutdown`.
    pub(crate) fn new(bus: Bus, server_id: &str, shutdown: CancellationToken) -> Self {
        let tail: String = server_id.chars().rev().take(10).collect();
        let prefix = format!("_INBOX.console{tail}");
        let waiting: Waiting = Arc::default();
        match ClusterSub::new(&bus, &format!("{prefix}.>")) {
            Ok(sub) => {
                tokio::spawn(dispatch(sub, waiting.clone(), shutdown));
            }
            Err(e) => tracing::warn!(error = %e, "console inbox not subscribed"),
        }
        Self {
            bus,
            prefix,
            next: Arc::default(),
            waiting,
        }
    }

    /// Publishes a message; returns how many subscribers (local, internal or peers) took it.
    pub(crate) fn publish(&self, subject: &str, hdrs: Option<&[u8]>, payload: &[u8]) -> usize {
        self.bus.publish(&Msg::new(subject, payload).headers(hdrs))
    }

    /// Sends a request and waits for the first reply.
    pub(crate) async fn request(
        &self,
        subject: &str,
        hdrs: Option<&[u8]>,
        payload: &[u8],
        timeout: Duration,
    ) -> Result<InternalMsg, RequestError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let inbox = format!("{}.{id}", self.prefix);
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().insert(id, tx);
        let msg = Msg::new(subject, payload)
            .reply_str(Some(&inbox))
            .headers(hdrs);
        if self.bus.publish(&msg) == 0 {
            self.waiting.lock().remove(&id);
            return Err(RequestError::NoResponders);
        }
        let reply = tokio::time::timeout(timeout, rx).await;
        self.waiting.lock().remove(&id);
        let reply = reply
            .map_err(|_| RequestError::Timeout)?
            .map_err(|_| RequestError::Timeout)?;
        if is_no_responders(reply.hdrs.as_ref()) {
            return Err(RequestError::NoResponders);
        }
        Ok(reply)
    }

    /// A JetStream API request (`$JS.API.<api>`) with a JSON body; the answer's JSON.
    pub(crate) async fn js_api(
        &self,
        api: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, RequestError> {
        let payload = if body.is_null() {
            Vec::new()
        } else {
            serde_json::to_vec(body).unwrap_or_default()
        };
        let reply = self
            .request(&format!("$JS.API.{api}"), None, &payload, REQUEST_TIMEOUT)
            .await?;
        serde_json::from_slice(&reply.payload)
            .map_err(|e| RequestError::Invalid(format!("answer is not JSON: {e}")))
    }
}

/// Hands every reply to the request waiting for it.
async fn dispatch(mut sub: ClusterSub, waiting: Waiting, shutdown: CancellationToken) {
    loop {
        let msg = tokio::select! {
            m = sub.recv() => m,
            () = shutdown.cancelled() => None,
        };
        let Some(msg) = msg else { return };
        let token = msg
            .subject
            .rsplit('.')
            .next()
            .and_then(|t| t.parse::<u64>().ok());
        if let Some(tx) = token.and_then(|t| waiting.lock().remove(&t)) {
            let _ = tx.send(msg);
        }
    }
}

/// Whether a header block is the `503` no-responders status.
fn is_no_responders(hdrs: Option<&Bytes>) -> bool {
    hdrs.is_some_and(|h| h.starts_with(b"NATS/1.0 503"))
}

/// A header block (`NATS/1.0\r\nK: V\r\n\r\n`) from name/value pairs; `None` when empty.
/// Names and values with line breaks are refused.
pub(crate) fn header_block(pairs: &[(String, String)]) -> Result<Option<Vec<u8>>, String> {
    if pairs.is_empty() {
        return Ok(None);
    }
    let mut out = b"NATS/1.0\r\n".to_vec();
    for (k, v) in pairs {
        if k.is_empty() || k.contains([':', '\r', '\n', ' ']) || v.contains(['\r', '\n']) {
            return Err(format!("invalid header {k:?}"));
        }
        out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    Ok(Some(out))
}

/// Name/value pairs of a header block (the status line is left out).
pub(crate) fn parse_headers(block: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(block)
        .split("\r\n")
        .skip(1)
        .filter_map(|line| {
            let (k, v) = line.split_once(':')?;
            Some((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_blocks_round_trip_and_refuse_line_breaks() {
        let pairs = vec![
            ("A".to_string(), "1".to_string()),
            ("B-c".into(), "x y".into()),
        ];
        let block = header_block(&pairs).unwrap().unwrap();
        assert_eq!(block, b"NATS/1.0\r\nA: 1\r\nB-c: x y\r\n\r\n");
        assert_eq!(parse_headers(&block), pairs);
        assert!(header_block(&[]).unwrap().is_none());
        assert!(header_block(&[("A".into(), "1\r\nB: 2".into())]).is_err());
        assert!(header_block(&[("A:".into(), "1".into())]).is_err());
    }
}

/// Standard base64 (with padding), for payloads handed to the page.
pub(crate) fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod base64_tests {
    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        assert_eq!(super::base64(b""), "");
        assert_eq!(super::base64(b"f"), "Zg==");
        assert_eq!(super::base64(b"fo"), "Zm8=");
        assert_eq!(super::base64(b"foo"), "Zm9v");
        assert_eq!(super::base64(b"foob\xff"), "Zm9vYv8=");
    }
}
