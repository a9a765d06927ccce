//! The JetStream ack protocol as data (spec/nats-protocol-and-jetstream.md §5.1-5.2): the ack
//! reply subject a delivery
//! carries ([`AckSubject`]) and the payloads clients publish to it ([`parse_ack`]).
//!
//! Pure: no clocks, no consumer state. Follows nats-server 2.15.1 `processAck`/`processNak`/
//! `ackReplyInfo` (server/consumer.go): payloads are matched on their exact bytes (`+ACK ` with
//! a trailing space is not an ack), an unparsable `-NAK` delay is a plain NAK, and a payload
//! nats-server does not know is ignored (but still answered when the ack had a reply subject).

use serde::Deserialize;

use crate::jetstream::api::go_duration;

/// What a message published to an ack subject asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckKind {
    /// Empty payload, `+ACK` or the legacy `+OK`: acknowledge (for `ack_policy:all`, everything
    /// up to this consumer sequence).
    Ack,
    /// `-NAK`: redeliver. `delay_ns` is the delay from `-NAK {"delay":<ns>}` or `-NAK <go
    /// duration>`; `None` means "as soon as possible" (also for an unparsable delay, as
    /// nats-server treats it). A zero or negative delay becomes `Some(0)`: nats-server then
    /// lets the ack timer redeliver it at once, which is the same as `None` in effect.
    Nak {
        /// Delay before the redelivery, replacing `ack_wait` for this message.
        delay_ns: Option<u64>,
    },
    /// `+WPI`: work in progress, restart the ack-wait timer.
    Progress,
    /// `+NXT` / `+NXT <pull request>`: ack, then treat the ack's reply subject as a pull
    /// request with this body (see `parse_next_request`; empty means batch 1).
    Next {
        /// The bytes after `+NXT`, untrimmed.
        request: Vec<u8>,
    },
    /// `+TERM` / `+TERM <reason>`: stop redelivering; counts as acked. `reason` is trimmed and
    /// goes into the `MSG_TERMINATED` advisory.
    Term {
        /// Free-text reason (may be empty).
        reason: String,
    },
    /// Anything else: nats-server does nothing with it but still sends the empty ack reply.
    Unknown,
}

/// The `-NAK {"delay":..}` body (Go `ConsumerNakOptions`; unknown fields are ignored).
#[derive(Deserialize)]
struct NakOptions {
    #[serde(default)]
    delay: i64,
}

/// Classifies an ack payload (spec/nats-protocol-and-jetstream.md §5.2).
pub fn parse_ack(payload: &[u8]) -> AckKind {
    match payload {
        b"" | b"+ACK" | b"+OK" => AckKind::Ack,
        b"+WPI" => AckKind::Progress,
        _ => {
            if let Some(rest) = payload.strip_prefix(b"+NXT") {
                AckKind::Next {
                    request: rest.to_vec(),
                }
            } else if let Some(rest) = payload.strip_prefix(b"-NAK") {
                AckKind::Nak {
                    delay_ns: nak_delay(rest),
                }
            } else if let Some(rest) = payload.strip_prefix(b"+TERM") {
                AckKind::Term {
                    reason: String::from_utf8_lossy(rest.trim_ascii()).into_owned(),
                }
            } else {
                AckKind::Unknown
            }
        }
    }
}

/// The delay argument of a `-NAK`: JSON `{"delay":ns}` or a Go duration.
fn nak_delay(arg: &[u8]) -> Option<u64> {
    let arg = arg.trim_ascii();
    if arg.is_empty() {
        return None;
    }
    let ns = if arg.starts_with(b"{") {
        serde_json::from_slice::<NakOptions>(arg).ok()?.delay
    } else {
        go_duration::parse(std::str::from_utf8(arg).ok()?)?
    };
    Some(u64::try_from(ns).unwrap_or(0))
}

/// The tokens of an ack reply subject: which delivery an ack refers to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckSubject {
    /// Stream name.
    pub stream: String,
    /// Consumer name.
    pub consumer: String,
    /// Delivery count of this message (1 on the first delivery).
    pub delivered: u64,
    /// Stream sequence of the message.
    pub stream_seq: u64,
    /// Consumer sequence of this delivery (new on every redelivery).
    pub consumer_seq: u64,
    /// The message's stored timestamp, ns since the epoch.
    pub timestamp_ns: u64,
    /// `num_pending` after this delivery (clients use it to detect "caught up").
    pub pending: u64,
}

/// Prefix of every ack subject.
pub const ACK_PREFIX: &str = "$JS.ACK";

impl AckSubject {
    /// The v1 subject nats-server 2.15.1 emits:
    /// `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>`.
    pub fn format(&self) -> String {
        format!(
            "{ACK_PREFIX}.{}.{}.{}.{}.{}.{}.{}",
            self.stream,
            self.consumer,
            self.delivered,
            self.stream_seq,
            self.consumer_seq,
            self.timestamp_ns,
            self.pending
        )
    }

    /// Parses a v1 subject (9 tokens) or a v2 one (11 or more tokens:
    /// `$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.
    /// <pending>[.<random>]`; the domain and account hash are dropped). `None` for any other
    /// shape or a non-decimal number token; nats-server ignores such acks.
    pub fn parse(subject: &str) -> Option<Self> {
        let tokens: Vec<&str> = subject.split('.').collect();
        let n = tokens.len();
        if (n != 9 && n < 11) || tokens[0] != "$JS" || tokens[1] != "ACK" {
            return None;
        }
        let t = if n == 9 { &tokens[2..] } else { &tokens[4..] };
        let num = |s: &str| -> Option<u64> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        Some(Self {
            stream: t[0].to_string(),
            consumer: t[1].to_string(),
            delivered: num(t[2])?,
            stream_seq: num(t[3])?,
            consumer_seq: num(t[4])?,
            timestamp_ns: num(t[5])?,
            pending: num(t[6])?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nak(delay_ns: Option<u64>) -> AckKind {
        AckKind::Nak { delay_ns }
    }

    #[test]
    fn ack_payloads_are_classified_like_nats_server() {
        let cases: Vec<(&[u8], AckKind)> = vec![
            (b"", AckKind::Ack),
            (b"+ACK", AckKind::Ack),
            (b"+OK", AckKind::Ack),
            (b"+ACK ", AckKind::Unknown),
            (b"hello", AckKind::Unknown),
            (b"+WPI", AckKind::Progress),
            (b"+WPI ", AckKind::Unknown),
            (b"-NAK", nak(None)),
            (b"-NAK ", nak(None)),
            (br#"-NAK {"delay":100000000}"#, nak(Some(100_000_000))),
            (
                br#"-NAK {"delay":5000000000,"x":1}"#,
                nak(Some(5_000_000_000)),
            ),
            (br#"-NAK {"delay":"5s"}"#, nak(None)),
            (br#"-NAK {"delay":-5}"#, nak(Some(0))),
            (br#"-NAK {}"#, nak(Some(0))),
            (b"-NAK 5s", nak(Some(5_000_000_000))),
            (b"-NAK  1m30s \r\n", nak(Some(90_000_000_000))),
            (b"-NAK soon", nak(None)),
            (b"-NAKfoo", nak(None)),
            (b"+NXT", AckKind::Next { request: vec![] }),
            (
                br#"+NXT {"batch":2}"#,
                AckKind::Next {
                    request: br#" {"batch":2}"#.to_vec(),
                },
            ),
            (
                b"+NXT 5",
                AckKind::Next {
                    request: b" 5".to_vec(),
                },
            ),
            (
                b"+TERM",
                AckKind::Term {
                    reason: String::new(),
                },
            ),
            (
                b"+TERM bad data \n",
                AckKind::Term {
                    reason: "bad data".into(),
                },
            ),
        ];
        for (payload, want) in cases {
            assert_eq!(
                parse_ack(payload),
                want,
                "{:?}",
                String::from_utf8_lossy(payload)
            );
        }
    }

    #[test]
    fn ack_subject_v1_round_trips() {
        // Captured from nats-server 2.15.1 (spec/nats-protocol-and-jetstream.md §5.1).
        let s = "$JS.ACK.P.pc.1.1.1.1796199547958174861.4";
        let a = AckSubject::parse(s).unwrap();
        assert_eq!(
            a,
            AckSubject {
                stream: "P".into(),
                consumer: "pc".into(),
                delivered: 1,
                stream_seq: 1,
                consumer_seq: 1,
                timestamp_ns: 1_796_199_547_958_174_861,
                pending: 4,
            }
        );
        assert_eq!(a.format(), s);
    }

    #[test]
    fn ack_subject_v2_drops_domain_and_account_hash() {
        for s in [
            "$JS.ACK._.HASH.S.c.2.10.12.1796199547958174861.0.rAnd",
            "$JS.ACK.hub.HASH.S.c.2.10.12.1796199547958174861.0",
        ] {
            let a = AckSubject::parse(s).unwrap();
            assert_eq!(
                (a.stream.as_str(), a.consumer.as_str(), a.delivered),
                ("S", "c", 2)
            );
            assert_eq!((a.stream_seq, a.consumer_seq, a.pending), (10, 12, 0));
            assert_eq!(a.format(), "$JS.ACK.S.c.2.10.12.1796199547958174861.0");
        }
    }

    #[test]
    fn malformed_ack_subjects_are_refused() {
        for s in [
            "",
            "$JS.ACK",
            "$JS.ACK.S.c.1.1.1.1",
            "$JS.ACK.S.c.1.1.1.1.0.x",
            "$JS.ACQ.S.c.1.1.1.1.0",
            "$JS.ACK.S.c.1.-1.1.1.0",
            "$JS.ACK.S.c.1..1.1.0",
            "$JS.ACK.S.c.1.1.1.1.99999999999999999999",
        ] {
            assert_eq!(AckSubject::parse(s), None, "{s}");
        }
    }
}
