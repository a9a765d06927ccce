//! Incremental parser for client operations.
//!
//! [`Parser::parse`] consumes at most one operation from the front of a `BytesMut` and returns
//! `Ok(None)` when more bytes are needed, so input may arrive split at any byte. Payloads are
//! split off the buffer without copying. Limits (`max_payload`, `max_control_line`) are enforced
//! from the control line, before the payload is buffered.
//!
//! Error behaviour mirrors nats-server: unknown operations and bad payload terminators produce
//! `-ERR 'Unknown Protocol Operation'`; argument errors close the connection without `-ERR`.

use bytes::{Buf, Bytes, BytesMut};

use super::ClientOp;

/// Why a client's input was rejected. Every variant closes the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// Unknown operation or a payload not followed by `\r\n`.
    #[error("unknown protocol operation")]
    UnknownOp,
    /// The control line is longer than `max_control_line`.
    #[error("maximum control line exceeded")]
    MaxControlLine,
    /// The announced size exceeds `max_payload`.
    #[error("maximum payload violation")]
    MaxPayload,
    /// Wrong argument count or a malformed size; nats-server closes without `-ERR`.
    #[error("parse error in {op}: {detail}")]
    BadArgs {
        /// Operation name.
        op: &'static str,
        /// What was wrong.
        detail: &'static str,
    },
}

impl ProtocolError {
    /// The `-ERR` text nats-server sends for this error, if it sends one.
    pub fn err_text(&self) -> Option<&'static str> {
        match self {
            Self::UnknownOp => Some("Unknown Protocol Operation"),
            Self::MaxControlLine => Some("maximum control line exceeded"),
            Self::MaxPayload => Some("Maximum Payload Violation"),
            Self::BadArgs { .. } => None,
        }
    }
}

/// Operation names a client may send, upper case.
const OPS: [&[u8]; 10] = [
    b"CONNECT", b"PUB", b"HPUB", b"SUB", b"UNSUB", b"PING", b"PONG", b"INFO", b"+OK", b"-ERR",
];

/// A parsed control line waiting for its payload.
#[derive(Debug)]
struct PendingPub {
    subject: Bytes,
    reply: Option<Bytes>,
    is_hpub: bool,
    header_len: usize,
    total_len: usize,
}

/// Incremental parser; one per connection.
#[derive(Debug)]
pub struct Parser {
    max_payload: usize,
    max_control_line: usize,
    pending: Option<PendingPub>,
}

impl Parser {
    /// Creates a parser with the server's limits.
    pub fn new(max_payload: u32, max_control_line: u32) -> Self {
        Self {
            max_payload: max_payload as usize,
            max_control_line: max_control_line as usize,
            pending: None,
        }
    }

    /// Parses one operation from the front of `buf`, or returns `Ok(None)` if it is incomplete.
    pub fn parse(&mut self, buf: &mut BytesMut) -> Result<Option<ClientOp>, ProtocolError> {
        if self.pending.is_some() {
            return self.parse_payload(buf);
        }
        let Some(nl) = memchr(b'\n', buf) else {
            self.check_partial_line(buf)?;
            return Ok(None);
        };
        let mut line_end = nl;
        if line_end > 0 && buf[line_end - 1] == b'\r' {
            line_end -= 1;
        }
        let line = buf.split_to(nl + 1).freeze().slice(..line_end);
        let op = self.parse_line(line)?;
        match op {
            Some(op) => Ok(Some(op)),
            None => self.parse_payload(buf),
        }
    }

    /// With no newline yet: fail early on an unknown op or an over-long line, as nats-server's
    /// byte-at-a-time state machine does.
    fn check_partial_line(&self, buf: &BytesMut) -> Result<(), ProtocolError> {
        let name_end = buf
            .iter()
            .position(|b| *b == b' ' || *b == b'\t')
            .unwrap_or(buf.len());
        let name = &buf[..name_end];
        let complete = name_end < buf.len();
        let known = name.is_empty()
            || OPS.iter().any(|op| {
                let prefix_of_op = !complete
                    && name.len() <= op.len()
                    && name.eq_ignore_ascii_case(&op[..name.len()]);
                prefix_of_op || name.eq_ignore_ascii_case(op) || tolerates_suffix(name, op)
            });
        if !known {
            return Err(ProtocolError::UnknownOp);
        }
        if buf.len() > self.max_control_line + name_end + 2 {
            return Err(ProtocolError::MaxControlLine);
        }
        Ok(())
    }

    fn parse_line(&mut self, line: Bytes) -> Result<Option<ClientOp>, ProtocolError> {
        let name_end = line
            .iter()
            .position(|b| *b == b' ' || *b == b'\t')
            .unwrap_or(line.len());
        let name = &line[..name_end];
        let rest = line.slice(name_end..);
        let upper = |op: &[u8]| name.eq_ignore_ascii_case(op);
        // nats-server ignores anything after PING/PONG/+OK/-ERR up to the newline.
        if tolerates_suffix(name, b"PING") {
            return Ok(Some(ClientOp::Ping));
        }
        if tolerates_suffix(name, b"PONG") {
            return Ok(Some(ClientOp::Pong));
        }
        if tolerates_suffix(name, b"+OK") || tolerates_suffix(name, b"-ERR") {
            return Ok(Some(ClientOp::Ignored));
        }
        if rest.len() > self.max_control_line {
            return Err(ProtocolError::MaxControlLine);
        }
        if upper(b"PUB") {
            self.parse_pub_args(&rest, false)?;
            Ok(None)
        } else if upper(b"HPUB") {
            self.parse_pub_args(&rest, true)?;
            Ok(None)
        } else if upper(b"SUB") {
            parse_sub_args(&rest).map(Some)
        } else if upper(b"UNSUB") {
            parse_unsub_args(&rest).map(Some)
        } else if upper(b"CONNECT") {
            Ok(Some(ClientOp::Connect(trim_ws(rest))))
        } else if upper(b"INFO") {
            Ok(Some(ClientOp::Ignored))
        } else {
            Err(ProtocolError::UnknownOp)
        }
    }

    fn parse_pub_args(&mut self, rest: &Bytes, headers: bool) -> Result<(), ProtocolError> {
        let args = split_args(rest);
        let bad = |detail| ProtocolError::BadArgs {
            op: if headers { "HPUB" } else { "PUB" },
            detail,
        };
        let (subject, reply, sizes) = match (headers, args.len()) {
            (false, 2) => (&args[0], None, &args[1..]),
            (false, 3) => (&args[0], Some(&args[1]), &args[2..]),
            (true, 3) => (&args[0], None, &args[1..]),
            (true, 4) => (&args[0], Some(&args[1]), &args[2..]),
            _ => return Err(bad("wrong number of arguments")),
        };
        let (header_len, total_len) = if headers {
            let h = parse_size(&sizes[0]).ok_or(bad("bad header size"))?;
            let t = parse_size(&sizes[1]).ok_or(bad("bad size"))?;
            if h > t {
                return Err(bad("header size larger than total size"));
            }
            (h, t)
        } else {
            (0, parse_size(&sizes[0]).ok_or(bad("bad size"))?)
        };
        if total_len > self.max_payload {
            return Err(ProtocolError::MaxPayload);
        }
        self.pending = Some(PendingPub {
            subject: subject.clone(),
            reply: reply.cloned(),
            is_hpub: headers,
            header_len,
            total_len,
        });
        Ok(())
    }

    fn parse_payload(&mut self, buf: &mut BytesMut) -> Result<Option<ClientOp>, ProtocolError> {
        let Some(p) = &self.pending else {
            return Ok(None);
        };
        let need = p.total_len + 2;
        if buf.len() < need {
            // Fail as soon as a wrong terminator byte is visible.
            if buf.len() > p.total_len && buf[p.total_len] != b'\r' {
                return Err(ProtocolError::UnknownOp);
            }
            return Ok(None);
        }
        if &buf[p.total_len..need] != b"\r\n" {
            return Err(ProtocolError::UnknownOp);
        }
        let Some(p) = self.pending.take() else {
            return Ok(None);
        };
        let mut body = buf.split_to(p.total_len).freeze();
        buf.advance(2);
        let headers = p.is_hpub.then(|| body.split_to(p.header_len));
        Ok(Some(ClientOp::Pub {
            subject: p.subject,
            reply: p.reply,
            headers,
            payload: body,
        }))
    }
}

fn parse_sub_args(rest: &Bytes) -> Result<ClientOp, ProtocolError> {
    let args = split_args(rest);
    let mut it = args.into_iter();
    match (it.next(), it.next(), it.next(), it.next()) {
        (Some(subject), Some(sid), None, None) => Ok(ClientOp::Sub {
            subject,
            queue: None,
            sid,
        }),
        (Some(subject), Some(queue), Some(sid), None) => Ok(ClientOp::Sub {
            subject,
            queue: Some(queue),
            sid,
        }),
        _ => Err(ProtocolError::BadArgs {
            op: "SUB",
            detail: "wrong number of arguments",
        }),
    }
}

fn parse_unsub_args(rest: &Bytes) -> Result<ClientOp, ProtocolError> {
    let args = split_args(rest);
    let bad = |detail| ProtocolError::BadArgs {
        op: "UNSUB",
        detail,
    };
    match args.as_slice() {
        [sid] => Ok(ClientOp::Unsub {
            sid: sid.clone(),
            max: None,
        }),
        [sid, max] => {
            let max = parse_size(max).ok_or(bad("bad max"))? as u64;
            Ok(ClientOp::Unsub {
                sid: sid.clone(),
                max: Some(max),
            })
        }
        _ => Err(bad("wrong number of arguments")),
    }
}

/// PING, PONG, +OK and -ERR ignore any characters up to the newline in nats-server.
fn tolerates_suffix(name: &[u8], op: &[u8]) -> bool {
    matches!(op, b"PING" | b"PONG" | b"+OK" | b"-ERR")
        && name.len() >= op.len()
        && name[..op.len()].eq_ignore_ascii_case(op)
}

/// Splits on runs of spaces and tabs.
fn split_args(rest: &Bytes) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(4);
    let mut start = None;
    for (i, b) in rest.iter().enumerate() {
        let ws = *b == b' ' || *b == b'\t' || *b == b'\r';
        match (ws, start) {
            (true, Some(s)) => {
                out.push(rest.slice(s..i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push(rest.slice(s..));
    }
    out
}

fn trim_ws(b: Bytes) -> Bytes {
    let is_ws = |c: &u8| *c == b' ' || *c == b'\t' || *c == b'\r';
    let start = b.iter().position(|c| !is_ws(c)).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !is_ws(c)).map_or(start, |e| e + 1);
    b.slice(start..end.max(start))
}

/// Parses a non-negative decimal size; `None` for empty, non-digit or overflowing input.
fn parse_size(b: &[u8]) -> Option<usize> {
    if b.is_empty() || b.len() > 18 {
        return None;
    }
    let mut n: usize = 0;
    for c in b {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n * 10 + usize::from(c - b'0');
    }
    Some(n)
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|b| *b == needle)
}

#[cfg(test)]
#[path = "parser_tests.rs"]
mod tests;
