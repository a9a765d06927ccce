//! The NATS client protocol, sans-IO: [`parser::Parser`] turns bytes into [`ClientOp`]s and
//! [`encode`] turns server messages into bytes. Nothing here touches sockets, tasks or clocks
//! (the tidy test enforces that this module never imports tokio).

pub mod connect;
pub mod encode;
pub mod headers;
pub mod parser;
pub mod subject_text;

use bytes::Bytes;

pub use connect::ConnectOptions;
pub use parser::{Parser, ProtocolError};

/// One operation sent by a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientOp {
    /// `CONNECT {json}`; the JSON is parsed by [`ConnectOptions::from_json`].
    Connect(Bytes),
    /// `PUB` or `HPUB`. `headers` is `None` for `PUB` and `Some` (possibly empty, for a header
    /// length of 0) for `HPUB`.
    Pub {
        /// Subject published to.
        subject: Bytes,
        /// Optional reply subject.
        reply: Option<Bytes>,
        /// Raw header block (`NATS/1.0\r\n...\r\n\r\n`), passed through byte for byte.
        headers: Option<Bytes>,
        /// Message payload.
        payload: Bytes,
    },
    /// `SUB <subject> [queue] <sid>`.
    Sub {
        /// Subject or wildcard pattern.
        subject: Bytes,
        /// Queue group, if any.
        queue: Option<Bytes>,
        /// Client-chosen subscription id.
        sid: Bytes,
    },
    /// `UNSUB <sid> [max]`.
    Unsub {
        /// Subscription id.
        sid: Bytes,
        /// Auto-unsubscribe after this many messages in total.
        max: Option<u64>,
    },
    /// `PING`.
    Ping,
    /// `PONG`.
    Pong,
    /// `INFO`, `+OK` or `-ERR` from a client: accepted and ignored.
    Ignored,
}

/// The op as nats-server's trace shows it between brackets (`<<- [SUB foo 1]`): the verb and
/// its arguments without the payload or CONNECT's JSON (traced on its own, redacted).
impl std::fmt::Display for ClientOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
        match self {
            ClientOp::Connect(_) => f.write_str("CONNECT"),
            ClientOp::Pub {
                subject,
                reply,
                headers,
                payload,
            } => {
                let verb = if headers.is_some() { "HPUB" } else { "PUB" };
                write!(f, "{verb} {}", text(subject))?;
                if let Some(r) = reply {
                    write!(f, " {}", text(r))?;
                }
                match headers {
                    Some(h) => write!(f, " {} {}", h.len(), h.len() + payload.len()),
                    None => write!(f, " {}", payload.len()),
                }
            }
            ClientOp::Sub {
                subject,
                queue,
                sid,
            } => {
                write!(f, "SUB {}", text(subject))?;
                if let Some(q) = queue {
                    write!(f, " {}", text(q))?;
                }
                write!(f, " {}", text(sid))
            }
            ClientOp::Unsub { sid, max } => {
                write!(f, "UNSUB {}", text(sid))?;
                match max {
                    Some(m) => write!(f, " {m}"),
                    None => Ok(()),
                }
            }
            ClientOp::Ping => f.write_str("PING"),
            ClientOp::Pong => f.write_str("PONG"),
            ClientOp::Ignored => f.write_str("INFO"),
        }
    }
}
