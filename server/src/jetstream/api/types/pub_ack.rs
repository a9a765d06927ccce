//! The PubAck a stream sends to a publisher's reply subject (spec/nats-protocol-and-jetstream.md
//! §4.2).
//!
//! Exact bytes from 2.15.1 (fixture): `{"stream":"S","seq":1}`, a duplicate is
//! `{"stream":"S","seq":2,"duplicate": true}` (Go writes that one by hand, with a space), a domain
//! goes between stream and seq, and an error is `{"error":{...},"stream":"S","seq":0}` with no
//! `type` field.

use serde::Serialize;

use super::to_go_json;
use crate::jetstream::api::ApiError;

/// A publish acknowledgement or publish error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PubAck {
    /// Stream that captured the message.
    pub stream: String,
    /// JetStream domain, when configured.
    pub domain: Option<String>,
    /// Assigned sequence (the original one for a duplicate, 0 for an error).
    pub seq: u64,
    /// The message was a duplicate within the window and was not stored again.
    pub duplicate: bool,
    /// Why the message was refused.
    pub error: Option<ApiError>,
    /// The commit of an atomic batch: its `Nats-Batch-Id` and how many messages it stored.
    pub batch: Option<(String, u64)>,
    /// A counter stream's new total (`val`).
    pub val: Option<String>,
}

impl PubAck {
    /// A successful store at `seq`.
    pub fn stored(stream: &str, seq: u64) -> Self {
        Self {
            stream: stream.to_string(),
            domain: None,
            seq,
            duplicate: false,
            error: None,
            batch: None,
            val: None,
        }
    }

    /// A duplicate of the message stored at `seq`.
    pub fn duplicate(stream: &str, seq: u64) -> Self {
        Self {
            duplicate: true,
            ..Self::stored(stream, seq)
        }
    }

    /// A refused publish.
    pub fn error(stream: &str, error: ApiError) -> Self {
        Self {
            error: Some(error),
            ..Self::stored(stream, 0)
        }
    }

    /// The exact JSON nats-server sends.
    pub fn to_json(&self) -> String {
        if self.error.is_none()
            && self.domain.is_none()
            && self.batch.is_none()
            && self.val.is_none()
        {
            let mut json = Vec::with_capacity(40 + self.stream.len());
            if push_plain_json(&mut json, &self.stream, self.seq, self.duplicate) {
                // Only ASCII was written.
                return String::from_utf8(json).unwrap_or_default();
            }
        }
        #[derive(Serialize)]
        struct Body<'a> {
            #[serde(skip_serializing_if = "Option::is_none")]
            error: Option<&'a ApiError>,
            stream: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            domain: Option<&'a str>,
            seq: u64,
            #[serde(skip_serializing_if = "Option::is_none")]
            val: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            batch: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            count: Option<u64>,
        }
        let mut json = to_go_json(&Body {
            error: self.error.as_ref(),
            stream: &self.stream,
            domain: self.domain.as_deref(),
            seq: self.seq,
            val: self.val.as_deref(),
            batch: self.batch.as_ref().map(|(id, _)| id.as_str()),
            count: self.batch.as_ref().map(|(_, n)| *n),
        });
        if self.duplicate {
            json.truncate(json.len() - 1);
            json.push_str(",\"duplicate\": true}");
        }
        json
    }
}

/// Appends the PubAck of a stored (or duplicate) message, without domain, to `out` without
/// building a [`PubAck`]: the common case, written by hand. Writes nothing and returns false when
/// the stream name is not one JSON takes as it is (letters, digits, `-`, `_`).
pub fn push_plain_json(out: &mut Vec<u8>, stream: &str, seq: u64, duplicate: bool) -> bool {
    if !stream
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return false;
    }
    out.extend_from_slice(b"{\"stream\":\"");
    out.extend_from_slice(stream.as_bytes());
    out.extend_from_slice(b"\",\"seq\":");
    let mut tmp = [0u8; 20];
    out.extend_from_slice(crate::protocol::encode::decimal(seq, &mut tmp));
    out.extend_from_slice(if duplicate {
        b",\"duplicate\": true}"
    } else {
        b"}"
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pub_ack_bytes_match_nats_server() {
        assert_eq!(
            PubAck::stored("ORDERS", 1).to_json(),
            r#"{"stream":"ORDERS","seq":1}"#
        );
        assert_eq!(
            PubAck::duplicate("ORDERS", 2).to_json(),
            r#"{"stream":"ORDERS","seq":2,"duplicate": true}"#
        );
        let with_domain = PubAck {
            domain: Some("D".into()),
            ..PubAck::stored("S", 5)
        };
        assert_eq!(
            with_domain.to_json(),
            r#"{"stream":"S","domain":"D","seq":5}"#
        );
        assert_eq!(
            PubAck::error("ORDERS", ApiError::wrong_last_sequence(2)).to_json(),
            r#"{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 2"},"stream":"ORDERS","seq":0}"#
        );
    }

    #[test]
    fn an_atomic_batch_commit_names_the_batch_and_its_count_after_seq() {
        let mut ack = PubAck::stored("S", 3);
        ack.batch = Some(("b1".to_string(), 3));
        assert_eq!(
            ack.to_json(),
            r#"{"stream":"S","seq":3,"batch":"b1","count":3}"#
        );
    }

    #[test]
    fn names_that_need_escaping_take_the_serde_path_with_the_same_shape() {
        // The hand-written path only takes names made of [A-Za-z0-9_-]; the others go through
        // Go's escaping (`<` and `&` become \u003c and \u0026).
        assert_eq!(
            PubAck::stored("A<B&C", 7).to_json(),
            r#"{"stream":"A\u003cB\u0026C","seq":7}"#
        );
        assert_eq!(
            PubAck::stored("KV_config-1", u64::MAX).to_json(),
            format!(r#"{{"stream":"KV_config-1","seq":{}}}"#, u64::MAX)
        );
    }
}
