//! Incremental parser for client operations.
//!
//! [`Parser::parse`] consumes at most one operation from the front of a `BytesMut` and returns
//! `Ok(None)` when more bytes are needed. The parser is a byte-at-a-time state machine whose
//! state survives between calls: every byte is examined exactly once, in the same state, however
//! the input was split into reads, so the sequence of operations and errors it produces depends
//! only on the bytes, never on where TCP cut them. Payloads are split off the buffer without
//! copying. Limits (`max_payload`, `max_control_line`) are enforced from the control line,
//! before the payload is buffered.
//!
//! The grammar and the answers follow nats-server 2.15 (measured with raw sockets):
//! - op names are matched letter by letter, case-insensitively; a byte that cannot continue a
//!   name (including a bare `\r\n` or leading blank) is `-ERR 'Unknown Protocol Operation'`;
//! - `PUB`, `HPUB`, `SUB`, `UNSUB` and `-ERR` need a space or tab after the name; `CONNECT` and
//!   `INFO` do not; `PING`, `PONG` and `+OK` ignore everything up to the newline, however long;
//! - blanks before the first argument are skipped and not counted; the first argument byte is
//!   taken as is, the argument ends at `\n` and loses one `\r` just before it; an argument
//!   longer than `max_control_line` is `-ERR 'maximum control line exceeded'`;
//! - sizes are 1 to 9 decimal digits; any other size, a wrong argument count, a header size
//!   above the total, a client `-ERR`, or an `INFO` that is not a JSON object closes the
//!   connection without `-ERR`; an `UNSUB` max that is not a size unsubscribes at once;
//! - a payload not followed by `\r\n` is `-ERR 'Unknown Protocol Operation'`.

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
    /// An op other than `CONNECT` while the server waits for credentials.
    #[error("authorization violation")]
    AuthViolation,
    /// `HPUB` from a client that did not announce `headers` in CONNECT.
    #[error("message headers not supported")]
    HeadersNotSupported,
    /// The client sent `-ERR`; nats-server closes such a connection without an answer.
    #[error("client sent -ERR")]
    ClientErr,
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
            Self::AuthViolation => Some("Authorization Violation"),
            Self::HeadersNotSupported | Self::ClientErr | Self::BadArgs { .. } => None,
        }
    }
}

/// The operations a client may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Connect,
    Pub,
    Hpub,
    Sub,
    Unsub,
    Ping,
    Pong,
    Info,
    Ok,
    Err,
}

/// Operation names, upper case, with their op. No name is a prefix of another.
const OPS: [(&[u8], Op); 10] = [
    (b"CONNECT", Op::Connect),
    (b"PUB", Op::Pub),
    (b"HPUB", Op::Hpub),
    (b"SUB", Op::Sub),
    (b"UNSUB", Op::Unsub),
    (b"PING", Op::Ping),
    (b"PONG", Op::Pong),
    (b"INFO", Op::Info),
    (b"+OK", Op::Ok),
    (b"-ERR", Op::Err),
];

/// Longest op name (`CONNECT`).
const MAX_NAME: usize = 7;

/// Sizes have at most this many digits, as in nats-server (so at most 999,999,999).
const MAX_SIZE_DIGITS: usize = 9;

/// A parsed control line waiting for its payload.
#[derive(Debug)]
struct PendingPub {
    subject: Bytes,
    reply: Option<Bytes>,
    is_hpub: bool,
    header_len: usize,
    total_len: usize,
}

/// Where the parser is within the current operation.
#[derive(Debug)]
enum State {
    /// At the start of an op or inside its name: the first `scanned` bytes of the buffer are a
    /// prefix of an op name.
    Name,
    /// The name of an op that needs a space or tab after it is complete.
    Separator(Op),
    /// Skipping blanks before the first argument byte (skipped bytes are dropped at once).
    Blanks(Op),
    /// Inside the argument: the first `scanned` bytes of the buffer are argument bytes, none of
    /// them a newline except possibly the first.
    Args(Op),
    /// `PING`, `PONG` or `+OK`: everything up to the newline is dropped as it arrives.
    Ignore(Op),
    /// Waiting for the payload of a `PUB`/`HPUB`.
    Payload(PendingPub),
}

/// Incremental parser; one per connection.
#[derive(Debug)]
pub struct Parser {
    max_payload: usize,
    max_control_line: usize,
    /// Whether `HPUB` is allowed (the client sent `"headers":true`).
    headers: bool,
    /// Whether only `CONNECT` may start an op (auth required and not yet authenticated).
    awaiting_auth: bool,
    state: State,
    /// Bytes at the front of the buffer already examined in the current state.
    scanned: usize,
}

impl Parser {
    /// Creates a parser with the server's limits. `HPUB` is refused until
    /// [`set_headers`](Self::set_headers) allows it.
    pub fn new(max_payload: u32, max_control_line: u32) -> Self {
        Self {
            max_payload: max_payload as usize,
            max_control_line: max_control_line as usize,
            headers: false,
            awaiting_auth: false,
            state: State::Name,
            scanned: 0,
        }
    }

    /// Changes the limits (a config reload changed `max_payload` or `max_control_line`);
    /// an operation already being read keeps the limit it was checked against.
    pub fn set_limits(&mut self, max_payload: u32, max_control_line: u32) {
        self.max_payload = max_payload as usize;
        self.max_control_line = max_control_line as usize;
    }

    /// Allows or refuses `HPUB` (from the client's CONNECT `headers` option).
    pub fn set_headers(&mut self, on: bool) {
        self.headers = on;
    }

    /// While set, an op that does not start with `C` is an [`ProtocolError::AuthViolation`]
    /// (nats-server decides on the first byte of each op while it waits for credentials).
    pub fn set_awaiting_auth(&mut self, on: bool) {
        self.awaiting_auth = on;
    }

    /// Parses one operation from the front of `buf`, or returns `Ok(None)` if it is incomplete.
    /// Bytes that belong to an incomplete operation may be consumed (blanks, ignored text).
    /// After an error the parser must not be used again.
    pub fn parse(&mut self, buf: &mut BytesMut) -> Result<Option<ClientOp>, ProtocolError> {
        loop {
            match &self.state {
                State::Name => {
                    let Some(op) = self.scan_name(buf)? else {
                        return Ok(None);
                    };
                    buf.advance(self.scanned);
                    self.scanned = 0;
                    self.state = match op {
                        Op::Pub | Op::Hpub | Op::Sub | Op::Unsub | Op::Err => State::Separator(op),
                        Op::Connect | Op::Info => State::Blanks(op),
                        Op::Ping | Op::Pong | Op::Ok => State::Ignore(op),
                    };
                }
                State::Separator(op) => {
                    let op = *op;
                    let Some(&b) = buf.first() else {
                        return Ok(None);
                    };
                    if !is_blank(b) {
                        return Err(ProtocolError::UnknownOp);
                    }
                    buf.advance(1);
                    self.state = State::Blanks(op);
                }
                State::Blanks(op) => {
                    let op = *op;
                    let blanks = buf.iter().take_while(|b| is_blank(**b)).count();
                    buf.advance(blanks);
                    if buf.is_empty() {
                        return Ok(None);
                    }
                    // The first argument byte is taken as is, even a newline (as nats-server).
                    self.scanned = 1;
                    self.state = State::Args(op);
                    self.check_arg_len(1)?;
                }
                State::Args(op) => {
                    let op = *op;
                    let Some(nl) = memchr(b'\n', &buf[self.scanned..]).map(|i| i + self.scanned)
                    else {
                        self.scanned = buf.len();
                        let len = if self.scanned > 1 && buf.ends_with(b"\r") {
                            self.scanned - 1
                        } else {
                            self.scanned
                        };
                        self.check_arg_len(len)?;
                        return Ok(None);
                    };
                    let line = buf.split_to(nl + 1).freeze();
                    let end = if nl > 1 && line[nl - 1] == b'\r' {
                        nl - 1
                    } else {
                        nl
                    };
                    self.check_arg_len(end)?;
                    self.scanned = 0;
                    self.state = State::Name;
                    let arg = line.slice(..end);
                    match op {
                        Op::Pub | Op::Hpub => {
                            let pending = self.parse_pub_args(&arg, op == Op::Hpub)?;
                            self.state = State::Payload(pending);
                        }
                        Op::Sub => return parse_sub_args(&arg).map(Some),
                        Op::Unsub => return parse_unsub_args(&arg).map(Some),
                        Op::Connect => return Ok(Some(ClientOp::Connect(arg))),
                        Op::Info => {
                            check_info_json(&arg)?;
                            return Ok(Some(ClientOp::Ignored));
                        }
                        Op::Err => return Err(ProtocolError::ClientErr),
                        Op::Ping | Op::Pong | Op::Ok => return Ok(Some(ignored_op(op))),
                    }
                }
                State::Ignore(op) => {
                    let op = *op;
                    let Some(nl) = memchr(b'\n', buf) else {
                        buf.clear();
                        return Ok(None);
                    };
                    buf.advance(nl + 1);
                    self.state = State::Name;
                    return Ok(Some(ignored_op(op)));
                }
                State::Payload(p) => {
                    let need = p.total_len + 2;
                    let have = buf.len().min(need);
                    if buf[p.total_len.min(have)..have]
                        .iter()
                        .zip(b"\r\n")
                        .any(|(got, want)| got != want)
                    {
                        return Err(ProtocolError::UnknownOp);
                    }
                    if have < need {
                        return Ok(None);
                    }
                    let State::Payload(p) = std::mem::replace(&mut self.state, State::Name) else {
                        return Ok(None);
                    };
                    let mut body = buf.split_to(p.total_len).freeze();
                    buf.advance(2);
                    let headers = p.is_hpub.then(|| body.split_to(p.header_len));
                    return Ok(Some(ClientOp::Pub {
                        subject: p.subject,
                        reply: p.reply,
                        headers,
                        payload: body,
                    }));
                }
            }
        }
    }

    /// Examines the op name bytes not yet scanned; returns the op once its name is complete.
    fn scan_name(&mut self, buf: &BytesMut) -> Result<Option<Op>, ProtocolError> {
        while self.scanned < buf.len() && self.scanned < MAX_NAME {
            let b = buf[self.scanned];
            if self.scanned == 0 && self.awaiting_auth && !b.eq_ignore_ascii_case(&b'C') {
                return Err(ProtocolError::AuthViolation);
            }
            self.scanned += 1;
            let name = &buf[..self.scanned];
            let mut prefix_of_some = false;
            for (op_name, op) in OPS {
                if name.len() <= op_name.len() && name.eq_ignore_ascii_case(&op_name[..name.len()])
                {
                    if name.len() == op_name.len() {
                        return Ok(Some(op));
                    }
                    prefix_of_some = true;
                }
            }
            if !prefix_of_some {
                return Err(ProtocolError::UnknownOp);
            }
        }
        Ok(None)
    }

    /// Fails if an argument of `len` bytes is over the control line limit.
    fn check_arg_len(&self, len: usize) -> Result<(), ProtocolError> {
        if len > self.max_control_line {
            return Err(ProtocolError::MaxControlLine);
        }
        Ok(())
    }

    fn parse_pub_args(&self, arg: &Bytes, headers: bool) -> Result<PendingPub, ProtocolError> {
        if headers && !self.headers {
            return Err(ProtocolError::HeadersNotSupported);
        }
        // nats-server splits PUB/HPUB arguments on spaces and tabs only.
        let args = split_args(arg, |b| b == b' ' || b == b'\t');
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
        let (header_len, total_len) = match sizes {
            [h, t] => {
                let h = parse_size(h).ok_or(bad("bad header size"))?;
                let t = parse_size(t).ok_or(bad("bad size"))?;
                if h > t {
                    return Err(bad("header size larger than total size"));
                }
                (h, t)
            }
            [t] => (0, parse_size(t).ok_or(bad("bad size"))?),
            _ => return Err(bad("wrong number of arguments")),
        };
        if total_len > self.max_payload {
            return Err(ProtocolError::MaxPayload);
        }
        Ok(PendingPub {
            subject: subject.clone(),
            reply: reply.cloned(),
            is_hpub: headers,
            header_len,
            total_len,
        })
    }
}

/// The op produced by a line that carries nothing (`PING`, `PONG`, `+OK`).
fn ignored_op(op: Op) -> ClientOp {
    match op {
        Op::Ping => ClientOp::Ping,
        Op::Pong => ClientOp::Pong,
        _ => ClientOp::Ignored,
    }
}

/// Separators of SUB and UNSUB arguments in nats-server.
fn is_sub_separator(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn parse_sub_args(arg: &Bytes) -> Result<ClientOp, ProtocolError> {
    let args = split_args(arg, is_sub_separator);
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

fn parse_unsub_args(arg: &Bytes) -> Result<ClientOp, ProtocolError> {
    let args = split_args(arg, is_sub_separator);
    match args.as_slice() {
        [sid] => Ok(ClientOp::Unsub {
            sid: sid.clone(),
            max: None,
        }),
        // A max that is not a size (negative, not a number, too long) means no max: the
        // subscription goes at once, as in nats-server.
        [sid, max] => Ok(ClientOp::Unsub {
            sid: sid.clone(),
            max: parse_size(max).map(|m| m as u64),
        }),
        _ => Err(ProtocolError::BadArgs {
            op: "UNSUB",
            detail: "wrong number of arguments",
        }),
    }
}

/// A client's `INFO` must be a JSON object (duplicate keys allowed) or `null`.
fn check_info_json(arg: &[u8]) -> Result<(), ProtocolError> {
    match serde_json::from_slice::<serde_json::Value>(arg) {
        Ok(serde_json::Value::Object(_) | serde_json::Value::Null) => Ok(()),
        _ => Err(ProtocolError::BadArgs {
            op: "INFO",
            detail: "not a JSON object",
        }),
    }
}

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// Splits `arg` on runs of separator bytes.
fn split_args(arg: &Bytes, is_sep: impl Fn(u8) -> bool) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(4);
    let mut start = None;
    for (i, b) in arg.iter().enumerate() {
        match (is_sep(*b), start) {
            (true, Some(s)) => {
                out.push(arg.slice(s..i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push(arg.slice(s..));
    }
    out
}

/// Parses a size of 1 to [`MAX_SIZE_DIGITS`] decimal digits; `None` for anything else.
fn parse_size(b: &[u8]) -> Option<usize> {
    if b.is_empty() || b.len() > MAX_SIZE_DIGITS {
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
