//! Message counters (ADR-49, nats-server 2.12's `allow_msg_counter`): on a counter stream every
//! publish carries `Nats-Incr: <signed integer>` and an empty payload; the replica applying it
//! adds the increment to the value in the subject's last message and stores
//! `{"val":"<total>"}` as the payload, keeping the `Nats-Incr` header. The PubAck carries the
//! total as `val`. Values are integers of any size (nats-server uses Go's `big.Int`).
//!
//! The total is computed when the entry is applied, from the replica's own store, so every
//! replica computes the same one in log order (nats-server's leader computes it before
//! proposing, keeping running totals of its proposals in flight; the result is the same).
//!
//! A stream sourcing counter streams aggregates them: a copied message's `Nats-Incr` is replaced
//! by the difference between the origin's total and the last total seen from that origin
//! subject, and the totals seen per origin stream and subject are kept in the
//! `Nats-Counter-Sources` header (JSON), so a source copied again after a restart adds nothing
//! twice.

use std::collections::BTreeMap;

use bytes::Bytes;
use num_bigint::BigInt;
use serde::Deserialize;

use super::headers;
use crate::jetstream::api::{ApiError, ErrorKind};
use crate::protocol::headers::set_header;

/// The increment of a counter publish.
pub(super) const INCR: &str = "Nats-Incr";
/// A counter's totals per source stream and subject, JSON.
pub(super) const COUNTER_SOURCES: &str = "Nats-Counter-Sources";

/// Totals seen per source stream, per origin subject (nats-server's `CounterSources`).
type Sources = BTreeMap<String, BTreeMap<String, String>>;

/// A counter message's payload (`{"val":"123"}`).
#[derive(Deserialize)]
struct CounterValue {
    #[serde(default)]
    val: String,
}

/// `value` as Go's `big.Int.SetString(value, 10)` reads it: an optional sign, then decimal
/// digits only.
pub(super) fn parse_int(value: &str) -> Option<BigInt> {
    let digits = value.strip_prefix(['+', '-']).unwrap_or(value);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

/// The publish-time checks of a message for a stream (nats-server's, in its order): a
/// `Nats-Incr` that is not an integer is refused anywhere; on a stream without counters any
/// increment is refused; a counter publish must have an empty payload and none of the headers a
/// counter cannot honour (rollups, expected stream, last sequence, last subject sequence, last
/// msg id). Returns the increment, if the message has one.
pub(super) fn check_publish(
    hdrs: &[u8],
    payload: &[u8],
    counters: bool,
) -> Result<Option<BigInt>, ApiError> {
    let Some(raw) = headers::get(hdrs, INCR).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let incr = parse_int(raw).ok_or_else(|| ApiError::new(ErrorKind::MessageIncrInvalid))?;
    if !counters {
        return Err(ApiError::new(ErrorKind::MessageIncrDisabled));
    }
    if !payload.is_empty() {
        return Err(ApiError::new(ErrorKind::MessageIncrPayload));
    }
    let incompatible = [
        headers::ROLLUP,
        headers::EXPECTED_STREAM,
        headers::EXPECTED_LAST_MSG_ID,
        headers::EXPECTED_LAST_SUBJECT_SEQ_SUBJECT,
        headers::EXPECTED_LAST_SEQ,
        headers::EXPECTED_LAST_SUBJECT_SEQ,
    ];
    if incompatible
        .iter()
        .any(|h| headers::get(hdrs, h).is_some_and(|v| !v.is_empty()))
    {
        return Err(ApiError::new(ErrorKind::MessageIncrInvalid));
    }
    Ok(Some(incr))
}

/// The current total and source totals of a counter, from the subject's last message (none:
/// zero). A payload that is not a counter value, or a sources header that is not JSON, is
/// 10172 `message counter is broken`.
pub(super) fn current(last: Option<(&[u8], &[u8])>) -> Result<(BigInt, Sources), ApiError> {
    let broken = || ApiError::new(ErrorKind::MessageCounterBroken);
    let Some((hdrs, payload)) = last else {
        return Ok((BigInt::default(), Sources::new()));
    };
    let value: CounterValue = serde_json::from_slice(payload).map_err(|_| broken())?;
    let sources = match headers::get(hdrs, COUNTER_SOURCES) {
        Some(json) if !json.is_empty() => serde_json::from_str(json).map_err(|_| broken())?,
        _ => Sources::new(),
    };
    Ok((parse_int(&value.val).unwrap_or_default(), sources))
}

/// A counter message ready to store: its headers, payload and total.
pub(super) struct Counted {
    /// The headers to store (`Nats-Incr` rewritten for copies, `Nats-Counter-Sources` set).
    pub(super) headers: Bytes,
    /// `{"val":"<total>"}`.
    pub(super) payload: Bytes,
    /// The new total, for the PubAck's `val`.
    pub(super) total: String,
}

/// Adds `incr` to the counter whose last message is `last` (see [`current`]). A copy from a
/// source (its `Nats-Stream-Source` header names the origin stream and subject) adds the
/// difference between the origin's total (its payload) and the total last seen from it.
pub(super) fn count(
    hdrs: &[u8],
    payload: &[u8],
    incr: BigInt,
    last: Option<(&[u8], &[u8])>,
) -> Result<Counted, ApiError> {
    let (mut total, mut sources) = current(last)?;
    let mut incr = incr;
    let mut hdrs = Bytes::copy_from_slice(hdrs);
    if let Some(origin) = headers::get(&hdrs, headers::STREAM_SOURCE) {
        let fields: Vec<&str> = origin.split(' ').collect();
        let stream = fields.first().copied().unwrap_or_default().to_string();
        let subject = fields.get(4).copied().unwrap_or_default().to_string();
        let value: CounterValue = serde_json::from_slice(payload)
            .map_err(|_| ApiError::new(ErrorKind::MessageCounterBroken))?;
        let sourced = parse_int(&value.val).unwrap_or_default();
        let seen = sources.entry(stream).or_default();
        let previous = seen
            .insert(subject, sourced.to_string())
            .and_then(|v| parse_int(&v))
            .unwrap_or_default();
        incr = sourced - previous;
        hdrs = set_header(&hdrs, INCR, &incr.to_string()).into();
    }
    total += incr;
    if !sources.is_empty() {
        let json = serde_json::to_string(&sources)
            .map_err(|_| ApiError::new(ErrorKind::MessageCounterBroken))?;
        hdrs = set_header(&hdrs, COUNTER_SOURCES, &json).into();
    }
    let total = total.to_string();
    let payload = Bytes::from(format!("{{\"val\":\"{total}\"}}"));
    Ok(Counted {
        headers: hdrs,
        payload,
        total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdrs(pairs: &[(&str, &str)]) -> Bytes {
        headers::block(pairs).into()
    }

    #[test]
    fn increments_parse_as_go_big_int_base_10() {
        for (text, want) in [("1", "1"), ("+7", "7"), ("-12", "-12"), ("007", "7")] {
            assert_eq!(parse_int(text).map(|v| v.to_string()), Some(want.into()));
        }
        let huge = "123456789012345678901234567890123456789012345678901234567890";
        assert_eq!(parse_int(huge).map(|v| v.to_string()), Some(huge.into()));
        for bad in ["", "+", "-", "1.5", "0x10", "1_000", " 1", "abc", "1e3"] {
            assert!(parse_int(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn publish_checks_in_nats_server_order() {
        let code = |r: Result<Option<BigInt>, ApiError>| r.err().map(|e| e.err_code);
        let incr = hdrs(&[(INCR, "1")]);
        assert_eq!(code(check_publish(&incr, b"", true)), None);
        assert_eq!(code(check_publish(b"", b"x", true)), None, "no increment");
        assert_eq!(
            code(check_publish(&hdrs(&[(INCR, "x")]), b"", false)),
            Some(10171),
            "invalid before disabled"
        );
        assert_eq!(code(check_publish(&incr, b"", false)), Some(10168));
        assert_eq!(code(check_publish(&incr, b"x", true)), Some(10170));
        for h in [headers::ROLLUP, headers::EXPECTED_LAST_SEQ, headers::MSG_ID] {
            let block = hdrs(&[(INCR, "1"), (h, "1")]);
            let want = (h != headers::MSG_ID).then_some(10171);
            assert_eq!(code(check_publish(&block, b"", true)), want, "{h}");
        }
    }

    #[test]
    fn totals_add_up_with_big_values() {
        let first = count(&hdrs(&[(INCR, "5")]), b"", BigInt::from(5), None).unwrap();
        assert_eq!(first.total, "5");
        assert_eq!(&first.payload[..], br#"{"val":"5"}"#);
        let big = BigInt::from(u64::MAX) * 10;
        let second = count(b"", b"", big, Some((&first.headers, &first.payload))).unwrap();
        assert_eq!(second.total, "184467440737095516155");
        let broken = count(b"", b"", BigInt::from(1), Some((b"", b"nope")));
        assert_eq!(broken.err().map(|e| e.err_code), Some(10172));
    }

    #[test]
    fn a_source_adds_the_difference_since_its_last_total() {
        let origin = |val: &str| {
            (
                hdrs(&[(INCR, "1"), (headers::STREAM_SOURCE, "EU 3 > > hits.a 7x")]),
                Bytes::from(format!("{{\"val\":\"{val}\"}}")),
            )
        };
        let (h, p) = origin("10");
        let a = count(&h, &p, BigInt::from(1), None).unwrap();
        assert_eq!(a.total, "10");
        assert_eq!(
            headers::get(&a.headers, COUNTER_SOURCES),
            Some(r#"{"EU":{"hits.a":"10"}}"#)
        );
        assert_eq!(headers::get(&a.headers, INCR), Some("10"));
        let (h, p) = origin("13");
        let b = count(&h, &p, BigInt::from(1), Some((&a.headers, &a.payload))).unwrap();
        assert_eq!(b.total, "13");
        assert_eq!(headers::get(&b.headers, INCR), Some("3"));
    }
}
