//! Serde types for the stream and account APIs, with nats-server's JSON names, field order and
//! omitempty rules, plus the encodings Go uses on the wire: RFC 3339 timestamps with trimmed
//! nanoseconds ([`go_time`]), standard base64 ([`base64`]) and `<`/`>`/`&` escaped inside strings
//! ([`to_go_json`]).

pub mod account;
pub mod config;
pub mod consumer;
pub mod consumer_requests;
pub mod info;
pub mod pub_ack;
pub mod requests;
pub mod responses;

pub use account::{AccountInfo, AccountLimits, ApiStats};
pub use config::{
    ConsumerLimits, DiscardPolicy, External, Placement, RePublish, RetentionPolicy,
    StorageCompression, StorageType, StreamConfig, StreamSource, SubjectTransform,
};
pub use info::{
    ClusterInfo, LostStreamData, PeerInfo, StreamAlternate, StreamInfo, StreamSourceInfo,
    StreamStateInfo,
};
pub use pub_ack::PubAck;
pub use requests::{
    ApiRequest, BodyRule, MsgDeleteRequest, MsgGetRequest, MsgSelector, PurgeRequest,
    StreamInfoRequest, StreamNamesRequest, decode, parse_body,
};
pub use responses::{
    ApiResponse, MsgDeleteResponse, MsgGetResponse, PurgeResponse, StoredMessage,
    StreamListResponse, StreamNamesResponse,
};

use serde::{Deserialize, Deserializer, Serialize};

/// The `type` prefix of every API response.
pub const TYPE_PREFIX: &str = "io.nats.jetstream.api.v1.";

/// Response `type` strings (spec/nats-protocol-and-jetstream.md §3.2).
pub mod response_type {
    /// `$JS.API.INFO`.
    pub const ACCOUNT_INFO: &str = "io.nats.jetstream.api.v1.account_info_response";
    /// `$JS.API.STREAM.CREATE.<S>`.
    pub const STREAM_CREATE: &str = "io.nats.jetstream.api.v1.stream_create_response";
    /// `$JS.API.STREAM.UPDATE.<S>`.
    pub const STREAM_UPDATE: &str = "io.nats.jetstream.api.v1.stream_update_response";
    /// `$JS.API.STREAM.INFO.<S>`.
    pub const STREAM_INFO: &str = "io.nats.jetstream.api.v1.stream_info_response";
    /// `$JS.API.STREAM.NAMES`.
    pub const STREAM_NAMES: &str = "io.nats.jetstream.api.v1.stream_names_response";
    /// `$JS.API.STREAM.LIST`.
    pub const STREAM_LIST: &str = "io.nats.jetstream.api.v1.stream_list_response";
    /// `$JS.API.STREAM.DELETE.<S>`.
    pub const STREAM_DELETE: &str = "io.nats.jetstream.api.v1.stream_delete_response";
    /// `$JS.API.STREAM.PURGE.<S>`.
    pub const STREAM_PURGE: &str = "io.nats.jetstream.api.v1.stream_purge_response";
    /// `$JS.API.STREAM.MSG.GET.<S>`.
    pub const STREAM_MSG_GET: &str = "io.nats.jetstream.api.v1.stream_msg_get_response";
    /// `$JS.API.STREAM.MSG.DELETE.<S>`.
    pub const STREAM_MSG_DELETE: &str = "io.nats.jetstream.api.v1.stream_msg_delete_response";
    /// `$JS.API.STREAM.LEADER.STEPDOWN.<S>`.
    pub const STREAM_LEADER_STEPDOWN: &str =
        "io.nats.jetstream.api.v1.stream_leader_stepdown_response";
    /// `$JS.API.CONSUMER.CREATE...` / `CONSUMER.DURABLE.CREATE...`.
    pub const CONSUMER_CREATE: &str = "io.nats.jetstream.api.v1.consumer_create_response";
    /// `$JS.API.CONSUMER.INFO.<S>.<C>`.
    pub const CONSUMER_INFO: &str = "io.nats.jetstream.api.v1.consumer_info_response";
    /// `$JS.API.CONSUMER.DELETE.<S>.<C>`.
    pub const CONSUMER_DELETE: &str = "io.nats.jetstream.api.v1.consumer_delete_response";
    /// `$JS.API.CONSUMER.NAMES.<S>`.
    pub const CONSUMER_NAMES: &str = "io.nats.jetstream.api.v1.consumer_names_response";
    /// `$JS.API.CONSUMER.LIST.<S>`.
    pub const CONSUMER_LIST: &str = "io.nats.jetstream.api.v1.consumer_list_response";
    /// `$JS.API.CONSUMER.PAUSE.<S>.<C>`.
    pub const CONSUMER_PAUSE: &str = "io.nats.jetstream.api.v1.consumer_pause_response";
    /// `CONSUMER.UNPIN`.
    pub const CONSUMER_UNPIN: &str = "io.nats.jetstream.api.v1.consumer_unpin_response";
    /// `$JS.API.CONSUMER.LEADER.STEPDOWN.<S>.<C>`.
    pub const CONSUMER_LEADER_STEPDOWN: &str =
        "io.nats.jetstream.api.v1.consumer_leader_stepdown_response";
    /// Dispatch-level errors (e.g. JetStream not enabled for the account).
    pub const SYSTEM: &str = "io.nats.jetstream.api.v1.system_response";
}

/// Serialises `value` as Go's `encoding/json` does: compact, with `<`, `>` and `&` escaped as
/// `\u003c`, `\u003e`, `\u0026`. Those characters only occur inside JSON strings, so replacing
/// them in the output is exact.
pub fn to_go_json<T: Serialize + ?Sized>(value: &T) -> String {
    let raw = serde_json::to_string(value).unwrap_or_else(|_| String::from("{}"));
    go_escape(raw)
}

/// Applies Go's HTML-safe escaping to already serialised JSON.
pub fn go_escape(json: String) -> String {
    if !json.contains(['<', '>', '&']) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            c => out.push(c),
        }
    }
    out
}

/// Deserialises a field where JSON `null` means "absent" (its default), as Go does.
pub(crate) fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// True for a zero integer (omitempty).
pub(crate) fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

/// True for a zero integer (omitempty).
pub(crate) fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

/// True for `false` (omitempty).
pub(crate) fn is_false(v: &bool) -> bool {
    !*v
}

/// Go time formatting and parsing (`time.Time` in JSON is RFC 3339 with nanoseconds).
pub mod go_time {
    use time::OffsetDateTime;

    /// Go's zero `time.Time` as JSON prints it.
    pub const ZERO: &str = "0001-01-01T00:00:00Z";

    /// Formats Unix nanoseconds as Go's `time.RFC3339Nano` in UTC: fractional seconds with
    /// trailing zeros trimmed (none at all on a whole second). `0` is Go's zero time, which is
    /// what nats-server prints for an unset timestamp (`first_ts` of an empty stream).
    pub fn format(unix_ns: u64) -> String {
        if unix_ns == 0 {
            return ZERO.to_string();
        }
        let Ok(t) = OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ns)) else {
            return ZERO.to_string();
        };
        let mut s = format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        );
        let nanos = t.nanosecond();
        if nanos != 0 {
            let frac = format!("{nanos:09}");
            s.push('.');
            s.push_str(frac.trim_end_matches('0'));
        }
        s.push('Z');
        s
    }

    /// Parses an RFC 3339 timestamp (`2026-12-02T08:17:47.5Z`, or with a `+hh:mm` offset) into
    /// Unix nanoseconds. Times before 1970 (and Go's zero time) give 0.
    pub fn parse(s: &str) -> Option<u64> {
        let b = s.as_bytes();
        if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<i64> {
            let part = s.get(r)?;
            if part.bytes().all(|c| c.is_ascii_digit()) {
                part.parse().ok()
            } else {
                None
            }
        };
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        if b[13] != b':' || b[16] != b':' {
            return None;
        }
        let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
        let mut i = 19;
        let mut nanos: i64 = 0;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            let digits = s.get(start..i)?;
            if digits.is_empty() || digits.len() > 9 {
                return None;
            }
            nanos = format!("{digits:0<9}").parse().ok()?;
        }
        let offset_secs = match s.get(i..)? {
            "Z" | "z" => 0,
            // Bytes, not `str` slices: a client may send any character there.
            rest if rest.len() == 6
                && matches!(rest.as_bytes()[0], b'+' | b'-')
                && rest.as_bytes()[3] == b':' =>
            {
                let h: i64 = rest.get(1..3)?.parse().ok()?;
                let m: i64 = rest.get(4..6)?.parse().ok()?;
                let v = h * 3600 + m * 60;
                if rest.starts_with('-') { -v } else { v }
            }
            _ => return None,
        };
        let month = time::Month::try_from(u8::try_from(month).ok()?).ok()?;
        let date = time::Date::from_calendar_date(
            i32::try_from(year).ok()?,
            month,
            u8::try_from(day).ok()?,
        )
        .ok()?;
        let tod = time::Time::from_hms(
            u8::try_from(hour).ok()?,
            u8::try_from(min).ok()?,
            u8::try_from(sec).ok()?,
        )
        .ok()?;
        let secs = date.with_time(tod).assume_utc().unix_timestamp() - offset_secs;
        let total = i128::from(secs) * 1_000_000_000 + i128::from(nanos);
        Some(u64::try_from(total.max(0)).unwrap_or(0))
    }
}

/// Standard base64 with padding (Go's `[]byte` JSON encoding).
pub mod base64 {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    /// Encodes `data`.
    pub fn encode(data: &[u8]) -> String {
        let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
        for chunk in data.chunks(3) {
            let b = [
                chunk[0],
                chunk.get(1).copied().unwrap_or(0),
                chunk.get(2).copied().unwrap_or(0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    /// Decodes standard base64 (padding optional); `None` on any other character.
    pub fn decode(text: &str) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(text.len() / 4 * 3);
        let (mut acc, mut bits) = (0u32, 0u32);
        for c in text.bytes().filter(|c| *c != b'=') {
            let v = ALPHABET.iter().position(|a| *a == c)?;
            acc = (acc << 6) | u32::try_from(v).ok()?;
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push(u8::try_from((acc >> bits) & 0xff).ok()?);
            }
        }
        Some(out)
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn decode_inverts_encode() {
            for data in [&b""[..], b"a", b"ab", b"abc", b"NATS/1.0\r\nX: 1\r\n\r\n"] {
                assert_eq!(super::decode(&super::encode(data)).unwrap(), data);
            }
            assert_eq!(super::decode("bTA=").unwrap(), b"m0");
            assert!(super::decode("b*").is_none());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_time_trims_trailing_zeros_like_rfc3339nano() {
        assert_eq!(go_time::format(0), "0001-01-01T00:00:00Z");
        assert_eq!(
            go_time::format(1_796_214_027_555_474_235),
            "2026-12-02T12:20:27.555474235Z"
        );
        assert_eq!(
            go_time::format(1_796_214_027_500_000_000),
            "2026-12-02T12:20:27.5Z"
        );
        assert_eq!(
            go_time::format(1_796_214_027_000_000_000),
            "2026-12-02T12:20:27Z"
        );
    }

    #[test]
    fn go_time_parse_round_trips_and_handles_offsets() {
        for ns in [1_796_214_027_555_474_235u64, 1_796_214_027_000_000_000, 1] {
            assert_eq!(go_time::parse(&go_time::format(ns)), Some(ns));
        }
        assert_eq!(
            go_time::parse("2026-12-02T13:20:27.5+01:00"),
            Some(1_796_214_027_500_000_000)
        );
        assert_eq!(go_time::parse(go_time::ZERO), Some(0));
        assert_eq!(go_time::parse("yesterday"), None);
        assert_eq!(go_time::parse("2026-12-02T12:20:27.Z"), None);
        // Found by the fuzz target: multi-byte characters where the offset goes (a client's
        // `pause_until` or `opt_start_time`) must not panic.
        assert_eq!(go_time::parse("2099-01-01T00:00:00\u{a49d};{Z"), None);
        assert_eq!(go_time::parse("2099-01-01T00:00:00+é:00"), None);
    }

    #[test]
    fn base64_matches_the_captured_header_encoding() {
        assert_eq!(
            base64::encode(b"NATS/1.0\r\nX-I: 3\r\n\r\n"),
            "TkFUUy8xLjANClgtSTogMw0KDQo="
        );
        assert_eq!(base64::encode(b"v3"), "djM=");
        assert_eq!(base64::encode(b""), "");
        assert_eq!(base64::encode(b"abc"), "YWJj");
    }

    #[test]
    fn go_json_escapes_html_characters() {
        assert_eq!(
            to_go_json(&["a.>", "<&>"]),
            r#"["a.\u003e","\u003c\u0026\u003e"]"#
        );
    }
}
