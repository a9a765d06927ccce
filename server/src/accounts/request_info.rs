//! The `Nats-Request-Info` header: who sent a request that crossed a service import.
//!
//! nats-server stamps every request (not the answers) routed through a service import with a
//! JSON description of the requesting client, so the exporting service can tell which account
//! asked. Without `share` on the import it holds the requester's account (`acc`) and its
//! round-trip time (`rtt`, Go nanoseconds, left out while unmeasured); a header of that name
//! the client sent itself is replaced, so it cannot be forged. A request that crosses a second
//! import (the exporter's subject is itself imported from a third account) keeps the first
//! stamp and names the account it crossed from as `svc`. Field names and order are those of
//! nats-server's `ClientInfo` (`acc`, `svc`, `rtt`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::protocol::headers::set_header;

/// The header's name (nats-server's `ClientInfoHdr`).
pub const REQUEST_INFO: &str = "Nats-Request-Info";

/// The part of nats-server's `ClientInfo` jetraft fills in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestInfo {
    /// The requesting client's account.
    #[serde(rename = "acc", default, skip_serializing_if = "String::is_empty")]
    pub account: String,
    /// The account a chained request crossed from (a second import).
    #[serde(rename = "svc", default, skip_serializing_if = "String::is_empty")]
    pub service: String,
    /// The requester's round-trip time in nanoseconds (0: not measured, left out).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rtt: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl RequestInfo {
    /// The stamp of a request from a client of `account` with round-trip time `rtt`.
    pub fn new(account: &str, rtt: Option<Duration>) -> Self {
        Self {
            account: account.to_string(),
            service: String::new(),
            rtt: rtt.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        }
    }

    /// The stamp in header block `hdrs`, if it has one that parses.
    pub fn parse(hdrs: &[u8]) -> Option<Self> {
        let value = crate::jetstream::stream::headers::get(hdrs, REQUEST_INFO)?;
        serde_json::from_str(value).ok()
    }

    /// `hdrs` (none: an empty block) with this stamp as its `Nats-Request-Info` header,
    /// replacing any earlier one.
    pub fn stamp(&self, hdrs: Option<&[u8]>) -> Vec<u8> {
        let json = serde_json::to_string(self).unwrap_or_default();
        set_header(hdrs.unwrap_or_default(), REQUEST_INFO, &json)
    }
}

/// The header block a request from `requester` (its account and, for a client of this node,
/// its round-trip time) carries after crossing a service import out of account `from`:
/// stamped afresh on the first crossing (`chained` false), or, on a further crossing, the first
/// stamp kept with `svc` set to `from`.
pub fn stamped(
    hdrs: Option<&[u8]>,
    requester: &str,
    rtt: Option<Duration>,
    chained: Option<&str>,
) -> Vec<u8> {
    let earlier = chained.and_then(|_| hdrs.and_then(RequestInfo::parse));
    let info = match (earlier, chained) {
        (Some(mut info), Some(from)) => {
            info.service = from.to_string();
            info
        }
        _ => RequestInfo::new(requester, rtt),
    };
    info.stamp(hdrs)
}

/// `hdrs` without a `Nats-Request-Info` header (streams do not store it, as nats-server's
/// do not); `None` when the block had nothing else.
pub fn strip(hdrs: &bytes::Bytes) -> Option<bytes::Bytes> {
    if crate::jetstream::stream::headers::get(hdrs, REQUEST_INFO).is_none() {
        return Some(hdrs.clone());
    }
    let kept = crate::jetstream::stream::headers::filtered(hdrs, |n| n != REQUEST_INFO, &[]);
    (kept.as_ref() != b"NATS/1.0\r\n\r\n").then_some(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_crossing_stamps_account_and_rtt_in_nats_server_order() {
        let block = stamped(None, "A", Some(Duration::from_micros(1500)), None);
        assert_eq!(
            block,
            b"NATS/1.0\r\nNats-Request-Info: {\"acc\":\"A\",\"rtt\":1500000}\r\n\r\n"
        );
        let unmeasured = stamped(None, "A", None, None);
        assert_eq!(
            unmeasured,
            b"NATS/1.0\r\nNats-Request-Info: {\"acc\":\"A\"}\r\n\r\n"
        );
    }

    #[test]
    fn a_forged_stamp_is_replaced_and_other_headers_kept() {
        let sent = b"NATS/1.0\r\nX: 1\r\nNats-Request-Info: {\"acc\":\"SYS\"}\r\n\r\n";
        let block = stamped(Some(sent), "A", None, None);
        assert_eq!(
            block,
            b"NATS/1.0\r\nX: 1\r\nNats-Request-Info: {\"acc\":\"A\"}\r\n\r\n"
        );
    }

    #[test]
    fn a_chained_crossing_keeps_the_first_stamp_and_names_the_service() {
        let first = stamped(None, "A", Some(Duration::from_nanos(7)), None);
        let second = stamped(Some(&first), "B", None, Some("B"));
        let info = RequestInfo::parse(&second).expect("stamp");
        assert_eq!(
            (info.account.as_str(), info.service.as_str(), info.rtt),
            ("A", "B", 7)
        );
    }

    #[test]
    fn strip_removes_only_the_stamp() {
        let only = stamped(None, "A", None, None);
        assert_eq!(strip(&only.into()), None);
        let mixed = stamped(Some(b"NATS/1.0\r\nX: 1\r\n\r\n"), "A", None, None);
        assert_eq!(
            strip(&mixed.into()).as_deref(),
            Some(&b"NATS/1.0\r\nX: 1\r\n\r\n"[..])
        );
    }
}
