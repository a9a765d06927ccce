//! What a consumer sends: deliveries (ack subject, headers-only bodies), pull status messages,
//! heartbeats, flow-control requests and dead-letter copies (advisories: `runtime/advisory.rs`). Formats follow spec
//! section 5 byte for byte.

use bytes::Bytes;
use jetraft_storage::stream::StoredMsg;

use crate::bus::{FlushSet, Msg};
use crate::jetstream::runtime::JetStream;
use crate::protocol::encode::push_decimal;
use crate::protocol::headers::{push_header, status_block};

/// A message a consumer sends, queued so it leaves after the deliveries before it were
/// committed (see the engine's outbox).
#[derive(Debug, Clone)]
pub(crate) struct OutMsg {
    /// Routing subject (pull inbox, deliver subject, AckSync reply).
    pub subject: String,
    /// Subject receivers see, when not the routing subject (deliveries show the stored one).
    pub shown: Option<String>,
    /// Reply subject (ack subject, flow-control subject).
    pub reply: Option<String>,
    /// Header block.
    pub hdrs: Option<Vec<u8>>,
    /// Payload.
    pub payload: Bytes,
}

impl OutMsg {
    /// A message with only headers (statuses, heartbeats).
    fn status(subject: &str, reply: Option<String>, hdrs: Vec<u8>) -> Self {
        Self {
            subject: subject.to_string(),
            shown: None,
            reply,
            hdrs: Some(hdrs),
            payload: Bytes::new(),
        }
    }

    /// An empty message (AckSync reply).
    pub(crate) fn empty(subject: String) -> Self {
        Self {
            subject,
            shown: None,
            reply: None,
            hdrs: None,
            payload: Bytes::new(),
        }
    }

    /// Publishes it in `account` (the consumer's stream's).
    pub(crate) fn publish(&self, js: &JetStream, account: &str) {
        let mut flush = FlushSet::default();
        self.publish_into(js, account, &mut flush);
        flush.wake_all();
    }

    /// Publishes it in `account`, leaving the receivers' writers to wake in `flush` (one
    /// batch, one wake-up per writer).
    pub(crate) fn publish_into(&self, js: &JetStream, account: &str, flush: &mut FlushSet) {
        let msg = Msg::new(&self.subject, &self.payload)
            .shown_as(self.shown.as_deref().unwrap_or(&self.subject))
            .reply_str(self.reply.as_deref())
            .headers(self.hdrs.as_deref())
            .in_account(account);
        js.bus.publish_into(&msg, flush);
    }
}

/// Consumer `metadata` key naming the dead-letter subject (jetraft extension).
pub(crate) const DEAD_LETTER_KEY: &str = "jetraft.dead_letter_subject";

/// A status reply to a pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PullStatus {
    /// `404 No Messages`.
    NoMessages,
    /// `408 Request Timeout` with what was left of the request.
    Timeout {
        /// Messages not delivered.
        pending_msgs: u64,
        /// Bytes not used.
        pending_bytes: u64,
    },
    /// `409 Message Size Exceeds MaxBytes`.
    MaxBytesExceeded {
        /// Messages not delivered.
        pending_msgs: u64,
        /// Bytes not used.
        pending_bytes: u64,
    },
    /// `409 <text>` (limits exceeded).
    Conflict(String),
    /// `400 <text>` (bad request).
    BadRequest(String),
    /// `409 Consumer is push based`.
    PushBased,
    /// `409 Consumer Deleted`.
    ConsumerDeleted,
    /// `409 Leadership Change`.
    LeadershipChange,
    /// `423 Nats-Pin-Id mismatch`: a pull request with another pin id than the group's.
    PinMismatch,
    /// `423 Nats-Wrong-Pin-Id` with what was left of a waiting request whose pin id is no
    /// longer the group's (the pin moved on while it waited).
    WrongPinId {
        /// Messages not delivered.
        pending_msgs: u64,
        /// Bytes not used.
        pending_bytes: u64,
    },
}

/// The v1 ack reply subject. Built by hand: it is made once per delivered message, and
/// `format!` cost several times as much.
pub(crate) fn ack_subject(
    stream: &str,
    consumer: &str,
    deliveries: u64,
    stream_seq: u64,
    consumer_seq: u64,
    timestamp_ns: u64,
    pending: u64,
) -> String {
    let mut s = String::with_capacity(10 + stream.len() + consumer.len() + 5 * 20);
    s.push_str("$JS.ACK.");
    s.push_str(stream);
    s.push('.');
    s.push_str(consumer);
    for n in [deliveries, stream_seq, consumer_seq, timestamp_ns, pending] {
        s.push('.');
        push_decimal(&mut s, n);
    }
    s
}

/// Header block and payload as delivered (`headers_only` strips the body and adds
/// `Nats-Msg-Size`).
pub(crate) fn body(msg: &StoredMsg, headers_only: bool) -> (Option<Vec<u8>>, Bytes) {
    if !headers_only {
        let hdrs = (!msg.headers.is_empty()).then(|| msg.headers.to_vec());
        return (hdrs, msg.payload.clone());
    }
    let h = add_header(
        &msg.headers,
        "Nats-Msg-Size",
        &msg.payload.len().to_string(),
    );
    (Some(h), Bytes::new())
}

/// The header block `hdrs` (empty: none) with `name: value` added at its end.
pub(crate) fn add_header(hdrs: &[u8], name: &str, value: &str) -> Vec<u8> {
    let mut h = if hdrs.is_empty() {
        b"NATS/1.0\r\n".to_vec()
    } else {
        // Drop the terminating blank line, then append.
        let end = if hdrs.ends_with(b"\r\n\r\n") {
            hdrs.len() - 2
        } else {
            hdrs.len()
        };
        hdrs[..end].to_vec()
    };
    push_header(&mut h, name, value);
    h.extend_from_slice(b"\r\n");
    h
}

/// The length of the [`ack_subject`] with these tokens, without building it.
pub(crate) fn ack_subject_len(stream: &str, consumer: &str, numbers: [u64; 5]) -> usize {
    let digits = |n: u64| n.checked_ilog10().map_or(1, |d| d as usize + 1);
    "$JS.ACK.".len()
        + stream.len()
        + 1
        + consumer.len()
        + numbers.iter().map(|n| 1 + digits(*n)).sum::<usize>()
}

/// The size a message counts for against a pull request's `max_bytes`, as nats-server counts
/// it: subject, ack reply subject (`ack_len` bytes), headers and payload.
pub(crate) fn pull_size(msg: &StoredMsg, ack_len: usize) -> u64 {
    (msg.subject.len() + ack_len + msg.headers.len() + msg.payload.len()) as u64
}

/// The `503` status a requester gets when no one answers (as the router sends it).
pub(crate) fn no_responders_msg(to: String) -> OutMsg {
    OutMsg {
        hdrs: Some(status_block(503, None, &[])),
        ..OutMsg::empty(to)
    }
}

/// A pull status to `reply`.
pub(crate) fn status_msg(reply: &str, status: &PullStatus) -> OutMsg {
    let pending = |m: u64, b: u64| {
        vec![
            ("Nats-Pending-Messages".to_string(), m.to_string()),
            ("Nats-Pending-Bytes".to_string(), b.to_string()),
        ]
    };
    let (code, text, extra): (u16, String, Vec<(String, String)>) = match status {
        PullStatus::NoMessages => (404, "No Messages".into(), Vec::new()),
        PullStatus::Timeout {
            pending_msgs,
            pending_bytes,
        } => (
            408,
            "Request Timeout".into(),
            pending(*pending_msgs, *pending_bytes),
        ),
        PullStatus::MaxBytesExceeded {
            pending_msgs,
            pending_bytes,
        } => (
            409,
            "Message Size Exceeds MaxBytes".into(),
            pending(*pending_msgs, *pending_bytes),
        ),
        PullStatus::Conflict(t) => (409, t.clone(), Vec::new()),
        PullStatus::BadRequest(t) => (400, t.clone(), Vec::new()),
        PullStatus::PushBased => (409, "Consumer is push based".into(), Vec::new()),
        PullStatus::ConsumerDeleted => (409, "Consumer Deleted".into(), Vec::new()),
        PullStatus::LeadershipChange => (409, "Leadership Change".into(), Vec::new()),
        PullStatus::PinMismatch => (423, "Nats-Pin-Id mismatch".into(), Vec::new()),
        PullStatus::WrongPinId {
            pending_msgs,
            pending_bytes,
        } => (
            423,
            "Nats-Wrong-Pin-Id".into(),
            pending(*pending_msgs, *pending_bytes),
        ),
    };
    let extra: Vec<(&str, &str)> = extra
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    OutMsg::status(reply, None, status_block(code, Some(&text), &extra))
}

/// `100 Idle Heartbeat` to `subject`.
pub(crate) fn heartbeat_msg(
    subject: &str,
    last_consumer: u64,
    last_stream: u64,
    stalled: Option<&str>,
) -> OutMsg {
    let c = last_consumer.to_string();
    let s = last_stream.to_string();
    let mut extra = vec![
        ("Nats-Last-Consumer", c.as_str()),
        ("Nats-Last-Stream", s.as_str()),
    ];
    if let Some(fc) = stalled {
        extra.push(("Nats-Consumer-Stalled", fc));
    }
    OutMsg::status(
        subject,
        None,
        status_block(100, Some("Idle Heartbeat"), &extra),
    )
}

/// `100 FlowControl Request` to the deliver subject with `reply` as its reply.
pub(crate) fn flow_control_msg(deliver_subject: &str, reply: &str) -> OutMsg {
    OutMsg::status(
        deliver_subject,
        Some(reply.to_string()),
        status_block(100, Some("FlowControl Request"), &[]),
    )
}

/// Whether a push consumer's deliver subject has a subscriber of the right kind: a plain one
/// without `group`, a member of `group` with one (also in an account importing the subject).
pub(crate) fn has_interest(
    js: &JetStream,
    account: &str,
    subject: &str,
    group: Option<&str>,
) -> bool {
    !subject.is_empty() && js.bus.delivery_interest(account, subject, group)
}

/// Republishes a dropped message to `subject` with headers naming where it came from, in the
/// account of the stream with key `stream`.
pub(crate) fn dead_letter(
    js: &JetStream,
    subject: &str,
    stream: &str,
    consumer: &str,
    msg: &StoredMsg,
    deliveries: u64,
    reason: &str,
) {
    let mut h = if msg.headers.len() >= 4 && msg.headers.ends_with(b"\r\n\r\n") {
        msg.headers[..msg.headers.len() - 2].to_vec()
    } else {
        b"NATS/1.0\r\n".to_vec()
    };
    let account = crate::jetstream::account::stream_account(stream);
    push_header(
        &mut h,
        "Nats-Dead-Letter-Stream",
        crate::jetstream::account::stream_name(stream),
    );
    push_header(&mut h, "Nats-Dead-Letter-Consumer", consumer);
    push_header(&mut h, "Nats-Dead-Letter-Subject", &msg.subject);
    push_header(&mut h, "Nats-Dead-Letter-Sequence", &msg.seq.to_string());
    push_header(
        &mut h,
        "Nats-Dead-Letter-Deliveries",
        &deliveries.to_string(),
    );
    push_header(&mut h, "Nats-Dead-Letter-Reason", reason);
    h.extend_from_slice(b"\r\n");
    js.bus.publish(
        &Msg::new(subject, &msg.payload)
            .headers(Some(&h))
            .in_account(account),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_subject_len_is_the_built_subjects_length() {
        for numbers in [
            [1, 1, 1, 0, 0],
            [3, 120, 99, 1_764_000_000_123_456_789, u64::MAX],
        ] {
            let [d, s, c, t, p] = numbers;
            assert_eq!(
                ack_subject_len("ORDERS", "work", numbers),
                ack_subject("ORDERS", "work", d, s, c, t, p).len()
            );
        }
    }

    fn msg(headers: &[u8], payload: &[u8]) -> StoredMsg {
        StoredMsg {
            seq: 3,
            subject: "a.b".into(),
            headers: Bytes::copy_from_slice(headers),
            payload: Bytes::copy_from_slice(payload),
            timestamp_ns: 7,
        }
    }

    #[test]
    fn ack_subject_is_v1() {
        assert_eq!(
            ack_subject("P", "pc", 1, 1, 1, 1796199547958174861, 4),
            "$JS.ACK.P.pc.1.1.1.1796199547958174861.4"
        );
        assert_eq!(
            ack_subject("S", "c", 0, u64::MAX, 10, 0, 0),
            "$JS.ACK.S.c.0.18446744073709551615.10.0.0"
        );
    }

    #[test]
    fn headers_only_adds_msg_size() {
        let (h, p) = body(&msg(b"", b"v1"), true);
        assert_eq!(h.unwrap(), b"NATS/1.0\r\nNats-Msg-Size: 2\r\n\r\n");
        assert!(p.is_empty());
        let (h, _) = body(&msg(b"NATS/1.0\r\nKV-Operation: DEL\r\n\r\n", b""), true);
        assert_eq!(
            h.unwrap(),
            b"NATS/1.0\r\nKV-Operation: DEL\r\nNats-Msg-Size: 0\r\n\r\n"
        );
    }

    #[test]
    fn plain_body_keeps_headers_and_payload() {
        let (h, p) = body(&msg(b"NATS/1.0\r\nX: 1\r\n\r\n", b"v"), false);
        assert_eq!(h.unwrap(), b"NATS/1.0\r\nX: 1\r\n\r\n");
        assert_eq!(&p[..], b"v");
        let (h, _) = body(&msg(b"", b"v"), false);
        assert!(h.is_none());
    }
}
