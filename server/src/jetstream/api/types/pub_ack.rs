//! The PubAck a stream sends to a publisher's reply subject (spec §4.2).
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
        // The common case, by hand: a stored message, a stream name JSON takes as it is.
        if self.error.is_none()
            && self.domain.is_none()
            && self
                .stream
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            let mut json = String::with_capacity(40 + self.stream.len());
            json.push_str("{\"stream\":\"");
            json.push_str(&self.stream);
            json.push_str("\",\"seq\":");
            crate::protocol::encode::push_decimal(&mut json, self.seq);
            json.push_str(if self.duplicate {
                ",\"duplicate\": true}"
            } else {
                "}"
            });
            return json;
        }
        #[derive(Serialize)]
        struct Body<'a> {
            #[serde(skip_serializing_if = "Option::is_none")]
            error: Option<&'a ApiError>,
            stream: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            domain: Option<&'a str>,
            seq: u64,
        }
        let mut json = to_go_json(&Body {
            error: self.error.as_ref(),
            stream: &self.stream,
            domain: self.domain.as_deref(),
            seq: self.seq,
        });
        if self.duplicate {
            json.truncate(json.len() - 1);
            json.push_str(",\"duplicate\": true}");
        }
        json
    }
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
