//! Reading `Nats-*` publish headers out of a raw NATS header block (ADR-4), and the header
//! names the stream state machine acts on (spec/nats-protocol-and-jetstream.md §4.3).
//!
//! Lookups are case-sensitive on the canonical names clients send, as nats-server's
//! `getHeader` is; the value is trimmed of surrounding spaces. The first occurrence wins.

/// De-duplication id.
pub const MSG_ID: &str = "Nats-Msg-Id";
/// The stream that must capture the message.
pub const EXPECTED_STREAM: &str = "Nats-Expected-Stream";
/// The stream's last sequence must equal this.
pub const EXPECTED_LAST_SEQ: &str = "Nats-Expected-Last-Sequence";
/// The last sequence on the subject must equal this.
pub const EXPECTED_LAST_SUBJECT_SEQ: &str = "Nats-Expected-Last-Subject-Sequence";
/// Evaluate [`EXPECTED_LAST_SUBJECT_SEQ`] against this (possibly wildcard) subject.
pub const EXPECTED_LAST_SUBJECT_SEQ_SUBJECT: &str = "Nats-Expected-Last-Subject-Sequence-Subject";
/// The `Nats-Msg-Id` of the stream's last message must equal this.
pub const EXPECTED_LAST_MSG_ID: &str = "Nats-Expected-Last-Msg-Id";
/// `sub` or `all`: remove older messages on the subject or in the stream.
pub const ROLLUP: &str = "Nats-Rollup";
/// Per-message TTL.
pub const TTL: &str = "Nats-TTL";
/// Added to a source's copies: `<stream> <seq> <filter> <dest> <subject> <id>`.
pub const STREAM_SOURCE: &str = "Nats-Stream-Source";

/// The value of header `name` in `block`, if present.
pub fn get<'a>(block: &'a [u8], name: &str) -> Option<&'a str> {
    if block.is_empty() {
        return None;
    }
    let text = std::str::from_utf8(block).ok()?;
    // Skip the `NATS/1.0[ status]` line.
    text.split("\r\n").skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim_matches(|c| c == ' ' || c == '\t'))
    })
}

/// Builds a header block from `(name, value)` pairs (the protocol layer's builder).
pub use crate::protocol::headers::block;

/// `block` with only the header lines whose names pass `keep`, then `extra` appended.
pub fn filtered(block: &[u8], keep: impl Fn(&str) -> bool, extra: &[(&str, &str)]) -> bytes::Bytes {
    let mut out = b"NATS/1.0\r\n".to_vec();
    let text = std::str::from_utf8(block).unwrap_or_default();
    for line in text.split("\r\n").skip(1) {
        if let Some((name, _)) = line.split_once(':')
            && keep(name)
        {
            out.extend_from_slice(line.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    for (name, value) in extra {
        crate::protocol::headers::push_header(&mut out, name, value);
    }
    out.extend_from_slice(b"\r\n");
    bytes::Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_values_case_sensitively_and_trims() {
        let b = block(&[
            ("Nats-Msg-Id", " abc "),
            ("X", "1"),
            ("Nats-Msg-Id", "second"),
        ]);
        assert_eq!(get(&b, MSG_ID), Some("abc"));
        assert_eq!(get(&b, "nats-msg-id"), None);
        assert_eq!(get(&b, "X"), Some("1"));
        assert_eq!(get(&b, ROLLUP), None);
        assert_eq!(get(b"", MSG_ID), None);
        assert_eq!(get(b"NATS/1.0 503\r\n\r\n", MSG_ID), None);
    }

    #[test]
    fn headers_are_filtered_and_extended_in_order() {
        let block = block(&[
            ("A", "1"),
            ("Nats-Schedule", "@at 1970-01-01T00:00:01Z"),
            ("Nats-Expected-Stream", "S"),
            ("B", "2"),
        ]);
        let out = filtered(
            &block,
            |n| !n.starts_with("Nats-"),
            &[("Nats-Scheduler", "s")],
        );
        assert_eq!(
            &out[..],
            b"NATS/1.0\r\nA: 1\r\nB: 2\r\nNats-Scheduler: s\r\n\r\n"
        );
    }
}
