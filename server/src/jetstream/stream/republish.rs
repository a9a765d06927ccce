//! Stream `republish`: every stored message whose subject matches `republish.src` is published
//! again, as a core NATS message, on the subject `republish.dest` maps it to, with headers
//! naming where it is stored (`Nats-Stream`, `Nats-Subject`, `Nats-Sequence`,
//! `Nats-Time-Stamp`, `Nats-Last-Sequence`: the previous message on the same subject, so a
//! lightweight subscriber sees gaps) and, with `headers_only`, `Nats-Msg-Size` instead of the
//! payload. The format is nats-server's.
//!
//! Who republishes: the replica that proposed the publish, when it applies the entry with its
//! proposer still waiting (the leader that will send the PubAck). Replicas applying the same
//! entry as followers, or again after a restart, do not, so a message is republished at most
//! once; it is missed only if its proposer stops between the commit and its own apply.

use std::sync::Arc;

use bytes::Bytes;
use jetraft_storage::stream::StoredMsg;

use crate::jetstream::api::types::{RePublish, go_time};
use crate::jetstream::transform::Transform;
use crate::protocol::headers::push_header;

/// Where republished messages go: `(subject, header block, payload)` (the runtime publishes
/// them on the node's bus).
pub type RepublishSink = Arc<dyn Fn(&str, Vec<u8>, Bytes) + Send + Sync>;

/// A stored message to republish and the previous sequence on its subject.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    pub(super) msg: StoredMsg,
    pub(super) last_seq: u64,
}

/// The subject `cfg` republishes `subject` to, if it matches and the result is a valid publish
/// subject.
pub(super) fn target(cfg: &RePublish, subject: &str) -> Option<String> {
    let src = if cfg.src.is_empty() { ">" } else { &cfg.src };
    let dest = if cfg.dest.is_empty() { ">" } else { &cfg.dest };
    let t = Transform::new(src, dest).ok()?;
    t.apply(subject)
        .filter(|s| crate::router::subject::is_valid_literal_subject(s))
}

/// The republished message: `(subject, headers, payload)`.
pub(super) fn message(
    cfg: &RePublish,
    stream: &str,
    p: &Pending,
) -> Option<(String, Vec<u8>, Bytes)> {
    let to = target(cfg, &p.msg.subject)?;
    let m = &p.msg;
    let mut h = if m.headers.is_empty() {
        b"NATS/1.0\r\n".to_vec()
    } else {
        let raw: &[u8] = &m.headers;
        raw.strip_suffix(b"\r\n").unwrap_or(raw).to_vec()
    };
    push_header(&mut h, "Nats-Stream", stream);
    push_header(&mut h, "Nats-Subject", &m.subject);
    push_header(&mut h, "Nats-Sequence", &m.seq.to_string());
    push_header(&mut h, "Nats-Time-Stamp", &go_time::format(m.timestamp_ns));
    push_header(&mut h, "Nats-Last-Sequence", &p.last_seq.to_string());
    let payload = if cfg.headers_only {
        push_header(&mut h, "Nats-Msg-Size", &m.payload.len().to_string());
        Bytes::new()
    } else {
        m.payload.clone()
    };
    h.extend_from_slice(b"\r\n");
    Some((to, h, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(subject: &str, headers: &[u8]) -> Pending {
        Pending {
            msg: StoredMsg {
                seq: 7,
                subject: subject.into(),
                headers: Bytes::copy_from_slice(headers),
                payload: Bytes::from_static(b"hello"),
                timestamp_ns: 1_700_000_000_123_000_000,
            },
            last_seq: 4,
        }
    }

    fn cfg(src: &str, dest: &str, headers_only: bool) -> RePublish {
        RePublish {
            src: src.into(),
            dest: dest.into(),
            headers_only,
        }
    }

    #[test]
    fn maps_the_subject_and_adds_the_stream_headers() {
        let (to, h, payload) = message(
            &cfg("orders.*", "copy.$1", false),
            "S",
            &msg("orders.a", b""),
        )
        .unwrap();
        assert_eq!(to, "copy.a");
        assert_eq!(
            String::from_utf8(h).unwrap(),
            "NATS/1.0\r\nNats-Stream: S\r\nNats-Subject: orders.a\r\nNats-Sequence: 7\r\n\
             Nats-Time-Stamp: 2023-11-14T22:13:20.123Z\r\nNats-Last-Sequence: 4\r\n\r\n"
        );
        assert_eq!(&payload[..], b"hello");
    }

    #[test]
    fn keeps_the_messages_headers_and_headers_only_sends_the_size() {
        let (_, h, payload) = message(
            &cfg("", "all.>", true),
            "S",
            &msg("a.b", b"NATS/1.0\r\nX: 1\r\n\r\n"),
        )
        .unwrap();
        let h = String::from_utf8(h).unwrap();
        assert!(
            h.starts_with("NATS/1.0\r\nX: 1\r\nNats-Stream: S\r\n"),
            "{h}"
        );
        assert!(h.ends_with("Nats-Msg-Size: 5\r\n\r\n"), "{h}");
        assert!(payload.is_empty());
    }

    #[test]
    fn a_subject_outside_src_is_not_republished() {
        assert!(
            message(
                &cfg("orders.*", "copy.$1", false),
                "S",
                &msg("other.a", b"")
            )
            .is_none()
        );
    }
}
