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
