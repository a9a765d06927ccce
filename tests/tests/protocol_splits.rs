//! Protocol edge cases over raw TCP, sent whole and split at many points (issue 23, item 6).
//!
//! A server's answer to some bytes must not depend on how TCP cuts them into reads. Each case
//! is sent in one write, at every split point or byte by byte (long inputs: at a few points and
//! in chunks), each on a fresh connection, and the answer must be exactly the expected bytes
//! followed by either a close or a connection that stays open. The expectations were measured
//! against nats-server 2.15.1 with raw sockets; the suite passes with
//! `JETRAFT_TEST_SERVER=nats-server` too.

use std::time::Duration;

use jetraft_tests::harness::{ServerProcess, escape_bytes, start_server};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};

/// Bound on waiting for an answer or a close.
const ANSWER_BOUND: Duration = Duration::from_secs(5);

/// How long to wait for more bytes after each piece of a split send.
const PIECE_PAUSE: Duration = Duration::from_millis(3);

/// How long an open connection must stay open after its answer.
const STAYS_OPEN: Duration = Duration::from_millis(50);

const UNKNOWN_OP: &[u8] = b"-ERR 'Unknown Protocol Operation'\r\n";

/// What the server must do with a case's bytes.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// Send exactly these bytes and keep the connection open.
    Open(&'static [u8]),
    /// Send exactly these bytes (maybe none) and close the connection.
    Close(&'static [u8]),
}

/// One input and its answer.
struct Case {
    name: &'static str,
    input: Vec<u8>,
    answer: Answer,
}

fn case(name: &'static str, input: impl Into<Vec<u8>>, answer: Answer) -> Case {
    Case {
        name,
        input: input.into(),
        answer,
    }
}

fn repeated(head: &[u8], fill: u8, n: usize, tail: &[u8]) -> Vec<u8> {
    let mut v = head.to_vec();
    v.extend(std::iter::repeat_n(fill, n));
    v.extend_from_slice(tail);
    v
}

/// What came back on one connection.
#[derive(Debug, PartialEq, Eq)]
struct Got {
    bytes: Vec<u8>,
    closed: bool,
}

/// Connects, reads INFO, writes `pieces` one by one (pausing after each to let the server read
/// them separately, and stopping early if the server closed), then collects the answer: until
/// close for [`Answer::Close`], or until the expected bytes arrived plus [`STAYS_OPEN`] for
/// [`Answer::Open`]. Server PINGs are answered and dropped from the answer.
async fn exchange(srv: &ServerProcess, pieces: &[&[u8]], answer: Answer) -> Got {
    let mut s = timeout(ANSWER_BOUND, TcpStream::connect(srv.client_addr()))
        .await
        .expect("connect timed out")
        .expect("connect");
    s.set_nodelay(true).expect("nodelay");
    let mut got = Vec::new();
    let mut closed = false;
    let mut tmp = vec![0u8; 64 * 1024];
    // INFO.
    let deadline = Instant::now() + ANSWER_BOUND;
    while !got.windows(2).any(|w| w == b"\r\n") {
        match tokio::time::timeout_at(deadline, s.read(&mut tmp)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&tmp[..n]),
            other => panic!("no INFO: {other:?}"),
        }
    }
    assert!(got.starts_with(b"INFO "), "INFO expected");
    got.clear();
    let many = pieces.len() > 1;
    for piece in pieces {
        if closed || s.write_all(piece).await.is_err() {
            break;
        }
        if many {
            let end = Instant::now() + PIECE_PAUSE;
            while let Ok(r) = tokio::time::timeout_at(end, s.read(&mut tmp)).await {
                match r {
                    Ok(n) if n > 0 => got.extend_from_slice(&tmp[..n]),
                    _ => {
                        closed = true;
                        break;
                    }
                }
            }
        }
    }
    let want_len = match answer {
        Answer::Open(b) => b.len(),
        Answer::Close(_) => usize::MAX,
    };
    let deadline = Instant::now() + ANSWER_BOUND;
    let mut quiet_until: Option<Instant> = None;
    while !closed {
        let stripped = strip_pings(&got);
        if stripped.len() >= want_len && quiet_until.is_none() {
            quiet_until = Some(Instant::now() + STAYS_OPEN);
        }
        let until = quiet_until.unwrap_or(deadline).min(deadline);
        match tokio::time::timeout_at(until, s.read(&mut tmp)).await {
            Ok(Ok(n)) if n > 0 => {
                got.extend_from_slice(&tmp[..n]);
                if got.ends_with(b"PING\r\n") {
                    let _ = s.write_all(b"PONG\r\n").await;
                }
            }
            Ok(_) => closed = true,
            Err(_) => break,
        }
    }
    Got {
        bytes: strip_pings(&got),
        closed,
    }
}

/// Drops server PINGs (`PING\r\n` at an op boundary; none of the answers contains one).
fn strip_pings(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while !rest.is_empty() {
        if rest.starts_with(b"PING\r\n") {
            rest = &rest[6..];
            continue;
        }
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .map_or(rest.len(), |p| p + 2);
        out.extend_from_slice(&rest[..line_end]);
        rest = &rest[line_end..];
    }
    out
}

/// The ways a case is cut: whole, then every split point (every 5th above 64 bytes) and byte by
/// byte for inputs up to 400 bytes, or a few split points and 512-byte chunks for long ones.
fn cuts(input: &[u8]) -> Vec<(String, Vec<&[u8]>)> {
    let mut out: Vec<(String, Vec<&[u8]>)> = vec![("whole".into(), vec![input])];
    if input.len() <= 400 {
        let step = if input.len() <= 64 { 1 } else { 5 };
        for i in (1..input.len()).step_by(step) {
            out.push((format!("split at {i}"), vec![&input[..i], &input[i..]]));
        }
        out.push(("byte by byte".into(), input.chunks(1).collect()));
    } else {
        for i in [
            1,
            4,
            5,
            100,
            4095,
            4096,
            4097,
            input.len() - 2,
            input.len() - 1,
        ] {
            if i < input.len() {
                out.push((format!("split at {i}"), vec![&input[..i], &input[i..]]));
            }
        }
        out.push(("512-byte chunks".into(), input.chunks(512).collect()));
    }
    out
}

async fn check(srv: &ServerProcess, cases: Vec<Case>) {
    for c in cases {
        for (cut, pieces) in cuts(&c.input) {
            let got = exchange(srv, &pieces, c.answer).await;
            let (want, want_closed) = match c.answer {
                Answer::Open(b) => (b, false),
                Answer::Close(b) => (b, true),
            };
            assert!(
                got.bytes == want && got.closed == want_closed,
                "{} ({cut}): expected \"{}\" and {}, got \"{}\" and {}",
                c.name,
                escape_bytes(want),
                if want_closed { "a close" } else { "open" },
                escape_bytes(&got.bytes),
                if got.closed { "a close" } else { "open" },
            );
        }
    }
}

#[tokio::test]
async fn op_names_and_control_lines_answer_the_same_for_every_split() {
    let srv = start_server().await;
    check(
        &srv,
        vec![
            case("SUB without a blank", "SUB\r\n", Answer::Close(UNKNOWN_OP)),
            case(
                "UNSUB without a blank",
                "UNSUB\r\n",
                Answer::Close(UNKNOWN_OP),
            ),
            case("empty line", "\r\n", Answer::Close(UNKNOWN_OP)),
            case("SUB without arguments", "SUB \r\n", Answer::Close(b"")),
            case(
                "PING then spaces",
                repeated(b"PING", b' ', 5000, b"\r\n"),
                Answer::Open(b"PONG\r\n"),
            ),
            case(
                "PING with trailing text",
                "PINGX\r\nPONG junk\r\n+OK junk\r\nPING\r\n",
                Answer::Open(b"PONG\r\nPONG\r\n"),
            ),
            case(
                "argument of 4096 bytes",
                repeated(b"SUB ", b'a', 4094, b" 1\r\nPING\r\n"),
                Answer::Open(b"+OK\r\nPONG\r\n"),
            ),
            case(
                "argument of 4097 bytes",
                repeated(b"SUB ", b'a', 4095, b" 1\r\nPING\r\n"),
                Answer::Close(b"-ERR 'maximum control line exceeded'\r\n"),
            ),
            case(
                "blanks before the argument are not counted",
                repeated(b"SUB", b' ', 5000, b"foo 1\r\nPING\r\n"),
                Answer::Open(b"+OK\r\nPONG\r\n"),
            ),
            case("client -ERR", "-ERR 'x'\r\n", Answer::Close(b"")),
            case(
                "INFO that is not an object",
                "INFO []\r\n",
                Answer::Close(b""),
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn arguments_answer_as_nats_server_for_every_split() {
    let srv = start_server().await;
    let unsub_then_pub: &[u8] = b"+OK\r\n+OK\r\n+OK\r\nPONG\r\n";
    check(
        &srv,
        vec![
            case(
                "UNSUB with a max that is not a number",
                "SUB foo 1\r\nUNSUB 1 abc\r\nPUB foo 2\r\nhi\r\nPING\r\n",
                Answer::Open(unsub_then_pub),
            ),
            case(
                "UNSUB with a negative max",
                "SUB foo 1\r\nUNSUB 1 -5\r\nPUB foo 2\r\nhi\r\nPING\r\n",
                Answer::Open(unsub_then_pub),
            ),
            case(
                "UNSUB with an overflowing max",
                "SUB foo 1\r\nUNSUB 1 99999999999999999999\r\nPUB foo 2\r\nhi\r\nPING\r\n",
                Answer::Open(unsub_then_pub),
            ),
            case(
                "PUB size of 16 digits",
                "PUB foo 2222222222222222\r\n",
                Answer::Close(b""),
            ),
            case(
                "PUB size of 9 digits over max_payload",
                "PUB foo 999999999\r\n",
                Answer::Close(b"-ERR 'Maximum Payload Violation'\r\n"),
            ),
            case("PUB negative size", "PUB foo -1\r\n", Answer::Close(b"")),
            case(
                "payload without its CRLF",
                "PUB foo 2\r\nhiX\r\n",
                Answer::Close(UNKNOWN_OP),
            ),
            case(
                "HPUB before CONNECT announced headers",
                "HPUB foo 0 2\r\nhi\r\n",
                Answer::Close(b""),
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn connect_json_and_traffic_answer_the_same_for_every_split() {
    let srv = start_server().await;
    check(
        &srv,
        vec![
            case(
                "CONNECT with duplicate keys, last false",
                "CONNECT {\"verbose\":true,\"verbose\":false}\r\nPING\r\n",
                Answer::Open(b"PONG\r\n"),
            ),
            case(
                "CONNECT with duplicate keys, last true",
                "CONNECT {\"verbose\":false,\"verbose\":true}\r\nPING\r\n",
                Answer::Open(b"+OK\r\nPONG\r\n"),
            ),
            case(
                "CONNECT null",
                "CONNECT null\r\nPING\r\n",
                Answer::Open(b"+OK\r\nPONG\r\n"),
            ),
            case(
                "CONNECT with an upper-case key",
                "CONNECT {\"VERBOSE\":false}\r\nPING\r\n",
                Answer::Open(b"PONG\r\n"),
            ),
            case("CONNECT []", "CONNECT []\r\nPING\r\n", Answer::Close(b"")),
            case(
                "CONNECT with a wrong type",
                "CONNECT {\"verbose\":\"x\"}\r\nPING\r\n",
                Answer::Close(b""),
            ),
            case(
                "ordinary traffic",
                "CONNECT {\"verbose\":false,\"headers\":true}\r\nSUB foo 1\r\nPUB foo 5\r\nhello\r\n\
HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\nsub bar q 2\r\npub bar r 0\r\n\r\nUNSUB 1\r\nPUB foo 1\r\nx\r\nPING\r\n",
                Answer::Open(
                    b"MSG foo 1 5\r\nhello\r\nHMSG foo 1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n\
MSG bar 2 r 0\r\n\r\nPONG\r\n",
                ),
            ),
        ],
    )
    .await;
}
