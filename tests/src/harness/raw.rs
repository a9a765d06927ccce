//! [`RawClient`]: a byte-level NATS client for exact-bytes protocol tests.
//!
//! Every read is bounded ([`READ_TIMEOUT`](super::READ_TIMEOUT) unless told otherwise), so a
//! broken server fails the test with the bytes received so far instead of hanging. Methods
//! panic on failure (test code, STYLE B9).
//!
//! Server PINGs: a server sends its first PING about 2 s after CONNECT (to measure RTT). So that
//! slow test runs don't trip over it, by default a `PING\r\n` found at an op boundary where
//! something else was expected is consumed and answered with `PONG\r\n`. Tests about server
//! PINGs turn this off with [`RawClient::answer_pings`].

use std::time::Duration;

use bytes::{Buf as _, BytesMut};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::{Instant, sleep, timeout_at};

use super::{READ_TIMEOUT, ServerProcess, escape_bytes};

const PING: &[u8] = b"PING\r\n";

/// The CONNECT sent by [`RawClient::connected`]: what official clients send, minus the noise.
pub const DEFAULT_CONNECT: &str =
    r#"{"verbose":false,"pedantic":false,"headers":true,"no_responders":true}"#;

/// One `MSG` or `HMSG` received from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawMsg {
    /// Subject from the control line.
    pub subject: String,
    /// Subscription id from the control line.
    pub sid: String,
    /// Reply subject, if the line had one.
    pub reply: Option<String>,
    /// Header block (`HMSG` only), byte for byte.
    pub headers: Option<Vec<u8>>,
    /// Payload, byte for byte.
    pub payload: Vec<u8>,
}

/// A raw TCP connection to the server's client port.
pub struct RawClient {
    /// The socket.
    stream: TcpStream,
    /// Bytes received but not yet consumed by a read method.
    buf: BytesMut,
    /// Whether unexpected server PINGs at op boundaries are consumed and answered.
    answer_pings: bool,
    /// Server PINGs consumed since the last write, to be answered.
    pongs_owed: usize,
    /// Set once the server closed the connection (EOF or reset).
    closed: bool,
}

impl RawClient {
    /// Connects to `addr` (bounded); does not read INFO.
    pub async fn connect(addr: &str) -> RawClient {
        let stream = tokio::time::timeout(READ_TIMEOUT, TcpStream::connect(addr))
            .await
            .unwrap_or_else(|_| panic!("connect to {addr} timed out"))
            .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        Self::from_stream(stream)
    }

    /// Connects to the server's client port; does not read INFO.
    pub async fn connect_to(srv: &ServerProcess) -> RawClient {
        Self::connect(&srv.client_addr()).await
    }

    /// Connects with a small kernel receive buffer (`SO_RCVBUF`), so that a client that does not
    /// read builds up server-side pending data quickly (slow consumer tests).
    pub async fn connect_with_recv_buffer(srv: &ServerProcess, bytes: u32) -> RawClient {
        let socket = TcpSocket::new_v4().unwrap_or_else(|e| panic!("socket: {e}"));
        socket
            .set_recv_buffer_size(bytes)
            .unwrap_or_else(|e| panic!("SO_RCVBUF: {e}"));
        let addr = srv
            .client_addr()
            .parse()
            .unwrap_or_else(|e| panic!("bad addr: {e}"));
        let stream = tokio::time::timeout(READ_TIMEOUT, socket.connect(addr))
            .await
            .unwrap_or_else(|_| panic!("connect to {addr} timed out"))
            .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        Self::from_stream(stream)
    }

    /// Connects, reads INFO, sends `CONNECT <connect_json>` + `PING` and expects `PONG`.
    /// Returns the client and the INFO it got.
    ///
    /// `connect_json` must not set `verbose` (or the `+OK` breaks the exchange) and should
    /// not set `"protocol":1` (or the first PONG is followed by an async INFO).
    pub async fn connect_with(
        srv: &ServerProcess,
        connect_json: &str,
    ) -> (RawClient, serde_json::Value) {
        let mut c = Self::connect_to(srv).await;
        let info = c.read_info().await;
        c.send(format!("CONNECT {connect_json}\r\nPING\r\n")).await;
        c.expect_bytes(b"PONG\r\n").await;
        (c, info)
    }

    /// [`connect_with`](Self::connect_with) using [`DEFAULT_CONNECT`] (headers and no-responders
    /// on, verbose and pedantic off, protocol 0).
    pub async fn connected(srv: &ServerProcess) -> RawClient {
        Self::connect_with(srv, DEFAULT_CONNECT).await.0
    }

    fn from_stream(stream: TcpStream) -> RawClient {
        let _ = stream.set_nodelay(true);
        RawClient {
            stream,
            buf: BytesMut::with_capacity(64 * 1024),
            answer_pings: true,
            pongs_owed: 0,
            closed: false,
        }
    }

    /// Turns automatic handling of unexpected server PINGs on (default) or off.
    pub fn answer_pings(&mut self, on: bool) -> &mut Self {
        self.answer_pings = on;
        self
    }

    /// Writes all of `bytes` (bounded).
    pub async fn send(&mut self, bytes: impl AsRef<[u8]>) {
        self.pay_pongs().await;
        let bytes = bytes.as_ref();
        match tokio::time::timeout(READ_TIMEOUT, self.stream.write_all(bytes)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!(
                "send {:?}: {e}",
                escape_bytes(&bytes[..bytes.len().min(200)])
            ),
            Err(_) => panic!("send of {} bytes timed out", bytes.len()),
        }
    }

    /// Writes `bytes` in chunks of `chunk` bytes with `pause` between them, so the server sees
    /// them in separate reads.
    pub async fn send_split(&mut self, bytes: impl AsRef<[u8]>, chunk: usize, pause: Duration) {
        for piece in bytes.as_ref().chunks(chunk.max(1)) {
            self.send(piece).await;
            sleep(pause).await;
        }
    }

    /// Writes without panicking; returns whether it worked (for writes to a socket that the
    /// server may already have closed).
    pub async fn try_send(&mut self, bytes: impl AsRef<[u8]>) -> bool {
        matches!(
            tokio::time::timeout(READ_TIMEOUT, self.stream.write_all(bytes.as_ref())).await,
            Ok(Ok(()))
        )
    }

    async fn pay_pongs(&mut self) {
        while self.pongs_owed > 0 {
            self.pongs_owed -= 1;
            let _ = tokio::time::timeout(READ_TIMEOUT, self.stream.write_all(b"PONG\r\n")).await;
        }
    }

    /// Reads more bytes into the buffer; returns false on EOF/reset. Panics at `deadline`.
    async fn fill(&mut self, deadline: Instant, waiting_for: &dyn Fn() -> String) -> bool {
        if self.closed {
            return false;
        }
        self.pay_pongs().await;
        self.buf.reserve(64 * 1024);
        match timeout_at(deadline, self.stream.read_buf(&mut self.buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                self.closed = true;
                false
            }
            Ok(Ok(_)) => true,
            Err(_) => panic!(
                "timed out waiting for {}; buffered: \"{}\"",
                waiting_for(),
                escape_bytes(&self.buf[..self.buf.len().min(2000)])
            ),
        }
    }

    /// Consumes server PINGs at the front of the buffer (if enabled). Returns false if the
    /// buffer holds an incomplete prefix of `PING\r\n` and more bytes are needed to decide.
    fn skip_pings_at(&mut self, at: usize) -> bool {
        if !self.answer_pings {
            return true;
        }
        loop {
            let rest = &self.buf[at..];
            if rest.starts_with(PING) {
                let tail = self.buf.split_off(at + PING.len());
                self.buf.truncate(at);
                self.buf.unsplit(tail);
                self.pongs_owed += 1;
                continue;
            }
            return rest.is_empty() || !PING.starts_with(rest);
        }
    }

    /// Reads exactly `exact.len()` bytes and asserts they equal `exact` (server PINGs at op
    /// boundaries excepted, see the module docs).
    pub async fn expect_bytes(&mut self, exact: &[u8]) {
        self.expect_bytes_within(exact, READ_TIMEOUT).await;
    }

    /// [`expect_bytes`](Self::expect_bytes) with an explicit bound.
    pub async fn expect_bytes_within(&mut self, exact: &[u8], bound: Duration) {
        let deadline = Instant::now() + bound;
        let want = || format!("\"{}\"", escape_bytes(exact));
        let mut matched = 0;
        loop {
            if matched == exact.len() {
                self.buf.advance(matched);
                self.pay_pongs().await;
                return;
            }
            let at_boundary = matched == 0 || exact[..matched].ends_with(b"\r\n");
            if at_boundary && !exact[matched..].starts_with(PING) && !self.skip_pings_at(matched) {
                if !self.fill(deadline, &want).await {
                    self.panic_closed(&want());
                }
                continue;
            }
            while matched < exact.len() && matched < self.buf.len() {
                if self.buf[matched] != exact[matched] {
                    let got = &self.buf[..self.buf.len().min(matched + 200)];
                    panic!(
                        "byte mismatch at offset {matched}\n  expected: \"{}\"\n  got:      \"{}\"",
                        escape_bytes(exact),
                        escape_bytes(got)
                    );
                }
                matched += 1;
                if exact[..matched].ends_with(b"\r\n") {
                    break;
                }
            }
            if matched < exact.len()
                && matched == self.buf.len()
                && !self.fill(deadline, &want).await
            {
                self.panic_closed(&want());
            }
        }
    }

    fn panic_closed(&self, want: &str) -> ! {
        panic!(
            "connection closed while waiting for {want}; buffered: \"{}\"",
            escape_bytes(&self.buf[..self.buf.len().min(2000)])
        )
    }

    /// Reads one line (terminated by `\r\n`) and returns it without the terminator.
    pub async fn read_line(&mut self) -> String {
        self.read_line_within(READ_TIMEOUT).await
    }

    /// [`read_line`](Self::read_line) with an explicit bound.
    pub async fn read_line_within(&mut self, bound: Duration) -> String {
        let deadline = Instant::now() + bound;
        let want = || "a line ending in \\r\\n".to_string();
        loop {
            if self.skip_pings_at(0)
                && let Some(pos) = self.buf.windows(2).position(|w| w == b"\r\n")
            {
                let line = self.buf.split_to(pos + 2);
                self.pay_pongs().await;
                return String::from_utf8_lossy(&line[..pos]).into_owned();
            }
            if !self.fill(deadline, &want).await {
                self.panic_closed(&want());
            }
        }
    }

    /// Reads until the received bytes contain `needle`; returns everything up to and including
    /// it (raw, PINGs not filtered). Later bytes stay buffered.
    pub async fn read_until_contains(&mut self, needle: &[u8], bound: Duration) -> Vec<u8> {
        let deadline = Instant::now() + bound;
        let want = || format!("\"{}\"", escape_bytes(needle));
        loop {
            if let Some(pos) = self.buf.windows(needle.len()).position(|w| w == needle) {
                return self.buf.split_to(pos + needle.len()).to_vec();
            }
            if !self.fill(deadline, &want).await {
                self.panic_closed(&want());
            }
        }
    }

    /// Reads the INFO line and returns its JSON. Panics if the next line is not `INFO {...}`.
    pub async fn read_info(&mut self) -> serde_json::Value {
        let line = self.read_line().await;
        let Some(json) = line.strip_prefix("INFO ") else {
            panic!("expected INFO, got {line:?}");
        };
        serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("INFO JSON {json:?}: {e}"))
    }

    /// Reads one `MSG` or `HMSG` (server PINGs are answered). Panics on anything else.
    pub async fn read_msg(&mut self) -> RawMsg {
        self.read_msg_within(READ_TIMEOUT).await
    }

    /// [`read_msg`](Self::read_msg) with an explicit bound.
    pub async fn read_msg_within(&mut self, bound: Duration) -> RawMsg {
        let deadline = Instant::now() + bound;
        let line = self.read_line_within(bound).await;
        self.finish_msg(&line, deadline)
            .await
            .unwrap_or_else(|| panic!("expected MSG/HMSG, got {line:?}"))
    }

    /// Parses the rest of a MSG/HMSG whose control line is `line`; `None` if it is not one.
    async fn finish_msg(&mut self, line: &str, deadline: Instant) -> Option<RawMsg> {
        let mut parts = line.split([' ', '\t']).filter(|s| !s.is_empty());
        let op = parts.next()?;
        let args: Vec<&str> = parts.collect();
        let parse = |s: &str| -> usize {
            s.parse()
                .unwrap_or_else(|_| panic!("bad size {s:?} in {line:?}"))
        };
        let (subject, sid, reply, hdr_len, total) = match (op, args.as_slice()) {
            ("MSG", [s, sid, n]) => (*s, *sid, None, None, parse(n)),
            ("MSG", [s, sid, r, n]) => (*s, *sid, Some(*r), None, parse(n)),
            ("HMSG", [s, sid, h, n]) => (*s, *sid, None, Some(parse(h)), parse(n)),
            ("HMSG", [s, sid, r, h, n]) => (*s, *sid, Some(*r), Some(parse(h)), parse(n)),
            _ => return None,
        };
        let want = || format!("{total} payload bytes + \\r\\n of {line:?}");
        while self.buf.len() < total + 2 {
            if !self.fill(deadline, &want).await {
                self.panic_closed(&want());
            }
        }
        let body = self.buf.split_to(total + 2);
        assert_eq!(
            &body[total..],
            b"\r\n",
            "payload of {line:?} not followed by \\r\\n: \"{}\"",
            escape_bytes(&body)
        );
        let (headers, payload) = match hdr_len {
            Some(h) => {
                assert!(h <= total, "header size > total in {line:?}");
                (Some(body[..h].to_vec()), body[h..total].to_vec())
            }
            None => (None, body[..total].to_vec()),
        };
        Some(RawMsg {
            subject: subject.to_string(),
            sid: sid.to_string(),
            reply: reply.map(str::to_string),
            headers,
            payload,
        })
    }

    /// Sends `PING` and collects every MSG/HMSG received before the `PONG`. Because the server
    /// answers a PING only after everything queued before it, this returns all messages
    /// delivered to this connection so far. Panics on any other op (e.g. `-ERR`).
    pub async fn read_msgs_until_pong(&mut self) -> Vec<RawMsg> {
        self.read_msgs_until_pong_within(READ_TIMEOUT).await
    }

    /// [`read_msgs_until_pong`](Self::read_msgs_until_pong) with an explicit bound.
    pub async fn read_msgs_until_pong_within(&mut self, bound: Duration) -> Vec<RawMsg> {
        let deadline = Instant::now() + bound;
        self.send(PING).await;
        let mut msgs = Vec::new();
        loop {
            let line = self
                .read_line_within(deadline.saturating_duration_since(Instant::now()))
                .await;
            if line == "PONG" {
                return msgs;
            }
            match self.finish_msg(&line, deadline).await {
                Some(m) => msgs.push(m),
                None => panic!(
                    "expected MSG/HMSG/PONG, got {line:?} after {} msgs",
                    msgs.len()
                ),
            }
        }
    }

    /// Sends `PING` and expects exactly `PONG` next (nothing queued before it).
    pub async fn ping_pong(&mut self) {
        self.send(PING).await;
        self.expect_bytes(b"PONG\r\n").await;
    }

    /// Asserts that nothing (other than server PINGs) arrives within `quiet`.
    pub async fn expect_silence(&mut self, quiet: Duration) {
        let deadline = Instant::now() + quiet;
        loop {
            // An incomplete "PING\r\n" prefix needs more bytes before it can be judged.
            if self.skip_pings_at(0) && !self.buf.is_empty() {
                panic!(
                    "expected silence, got \"{}\"",
                    escape_bytes(&self.buf[..self.buf.len().min(2000)])
                );
            }
            self.buf.reserve(4096);
            match timeout_at(deadline, self.stream.read_buf(&mut self.buf)).await {
                Err(_) => {
                    assert!(
                        self.buf.is_empty(),
                        "expected silence, got \"{}\"",
                        escape_bytes(&self.buf)
                    );
                    self.pay_pongs().await;
                    return;
                }
                Ok(Ok(0)) | Ok(Err(_)) => panic!("expected silence, but the connection was closed"),
                Ok(Ok(_)) => {}
            }
        }
    }

    /// Reads until the server closes the connection; returns the bytes received before the
    /// close (including anything already buffered). Panics if not closed within `bound`.
    pub async fn read_to_close(&mut self, bound: Duration) -> Vec<u8> {
        let deadline = Instant::now() + bound;
        let want = || format!("the server to close the connection (within {bound:?})");
        while self.fill(deadline, &want).await {}
        self.buf.split().to_vec()
    }

    /// Asserts that the server closes the connection within `bound` without sending anything
    /// else (server PINGs excepted).
    pub async fn assert_closed(&mut self, bound: Duration) {
        let rest = self.read_to_close(bound).await;
        let mut rest: &[u8] = &rest;
        while self.answer_pings && rest.starts_with(PING) {
            rest = &rest[PING.len()..];
        }
        assert!(
            rest.is_empty(),
            "expected close without data, got \"{}\"",
            escape_bytes(rest)
        );
    }

    /// Bytes received but not consumed yet.
    pub fn buffered(&self) -> &[u8] {
        &self.buf
    }

    /// Local port of this connection (to find it in `/connz`).
    pub fn local_port(&self) -> u16 {
        self.stream.local_addr().map(|a| a.port()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    use super::*;

    /// A fake server that writes `script` in pieces and returns what the client sent.
    async fn fake_server(script: Vec<&'static [u8]>) -> (String, tokio::task::JoinHandle<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            for piece in script {
                s.write_all(piece).await.unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            s.shutdown().await.unwrap();
            let mut got = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut got)).await;
            got
        });
        (addr, task)
    }

    #[tokio::test]
    async fn server_pings_between_expected_ops_are_answered_and_skipped() {
        let (addr, server) = fake_server(vec![
            b"PI",
            b"NG\r\nMSG a 1 2\r\nhi\r\nPING\r\n",
            b"PONG\r\nMSG b 1 0\r\n\r\n",
        ])
        .await;
        let mut c = RawClient::connect(&addr).await;
        c.expect_bytes(b"MSG a 1 2\r\nhi\r\nPONG\r\n").await;
        let m = c.read_msg().await;
        assert_eq!((m.subject.as_str(), m.payload.len()), ("b", 0));
        c.assert_closed(Duration::from_secs(2)).await;
        drop(c);
        assert_eq!(server.await.unwrap(), b"PONG\r\nPONG\r\n");
    }

    #[tokio::test]
    async fn read_msg_parses_msg_and_hmsg_with_reply() {
        let (addr, _server) = fake_server(vec![
            b"MSG s 7 r 3\r\nabc\r\nHMSG t 8 12 14\r\nNATS/1.0\r\n\r\nxy\r\n",
        ])
        .await;
        let mut c = RawClient::connect(&addr).await;
        let m = c.read_msg().await;
        assert_eq!(m.reply.as_deref(), Some("r"));
        assert_eq!(m.payload, b"abc");
        let h = c.read_msg().await;
        assert_eq!((h.sid.as_str(), h.reply.as_deref()), ("8", None));
        assert_eq!(h.headers.as_deref(), Some(&b"NATS/1.0\r\n\r\n"[..]));
        assert_eq!(h.payload, b"xy");
    }
}
