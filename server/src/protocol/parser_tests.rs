use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;

use super::*;

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// Parses everything in `input` fed in one piece.
fn parse_all(input: &[u8]) -> Result<Vec<ClientOp>, ProtocolError> {
    parse_chunks(&[input])
}

/// Parses `chunks` fed one after another, as separate socket reads.
fn parse_chunks(chunks: &[&[u8]]) -> Result<Vec<ClientOp>, ProtocolError> {
    let mut p = Parser::new(1024 * 1024, 4096);
    p.set_headers(true);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for c in chunks {
        buf.put_slice(c);
        while let Some(op) = p.parse(&mut buf)? {
            out.push(op);
        }
    }
    assert!(buf.is_empty(), "unconsumed input: {buf:?}");
    Ok(out)
}

fn publ(subject: &str, reply: Option<&str>, headers: Option<&str>, payload: &str) -> ClientOp {
    ClientOp::Pub {
        subject: b(subject),
        reply: reply.map(b),
        headers: headers.map(b),
        payload: b(payload),
    }
}

#[test]
fn every_op_parses() {
    let input = b"CONNECT {\"verbose\":false}\r\nPING\r\nPONG\r\nSUB foo 1\r\nSUB foo q 2\r\n\
UNSUB 1\r\nUNSUB 2 5\r\nPUB foo 5\r\nhello\r\nPUB foo bar 0\r\n\r\n\
HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\nHPUB foo r 0 2\r\nhi\r\nINFO {}\r\n+OK\r\n";
    let ops = parse_all(input).unwrap();
    assert_eq!(
        ops,
        vec![
            ClientOp::Connect(b("{\"verbose\":false}")),
            ClientOp::Ping,
            ClientOp::Pong,
            ClientOp::Sub {
                subject: b("foo"),
                queue: None,
                sid: b("1")
            },
            ClientOp::Sub {
                subject: b("foo"),
                queue: Some(b("q")),
                sid: b("2")
            },
            ClientOp::Unsub {
                sid: b("1"),
                max: None
            },
            ClientOp::Unsub {
                sid: b("2"),
                max: Some(5)
            },
            publ("foo", None, None, "hello"),
            publ("foo", Some("bar"), None, ""),
            publ("foo", None, Some("NATS/1.0\r\n\r\n"), "hi"),
            publ("foo", Some("r"), Some(""), "hi"),
            ClientOp::Ignored,
            ClientOp::Ignored,
        ]
    );
}

#[test]
fn ops_are_case_insensitive_and_tabs_separate() {
    let ops = parse_all(b"pub foo.tab 2\r\nhi\r\nSuB\tfoo.tab\t\t7\r\nping\n").unwrap();
    assert_eq!(
        ops,
        vec![
            publ("foo.tab", None, None, "hi"),
            ClientOp::Sub {
                subject: b("foo.tab"),
                queue: None,
                sid: b("7")
            },
            ClientOp::Ping
        ]
    );
}

#[test]
fn bare_newline_ends_a_control_line() {
    assert_eq!(
        parse_all(b"PUB foo 3\nabc\r\n").unwrap(),
        vec![publ("foo", None, None, "abc")]
    );
}

#[test]
fn ping_tolerates_trailing_characters() {
    assert_eq!(
        parse_all(b"PING foo\r\nPINGX\r\n").unwrap(),
        vec![ClientOp::Ping, ClientOp::Ping]
    );
}

#[test]
fn every_split_point_gives_the_same_ops() {
    let input: &[u8] = b"CONNECT {\"a\":1}\r\nSUB a.* q 1\r\nPUB a.b r 5\r\nhello\r\n\
HPUB a.c 18 23\r\nNATS/1.0\r\nK: v\r\n\r\nworld\r\nPING\r\nUNSUB 1 3\r\n";
    let whole = parse_all(input).unwrap();
    assert_eq!(whole.len(), 6);
    for i in 0..=input.len() {
        for j in i..=input.len() {
            let got = parse_chunks(&[&input[..i], &input[i..j], &input[j..]]).unwrap();
            assert_eq!(got, whole, "split at {i},{j}");
        }
    }
}

#[test]
fn one_byte_at_a_time() {
    let input: &[u8] = b"HPUB x 12 17\r\nNATS/1.0\r\n\r\nhello\r\nPUB y 0\r\n\r\n";
    let chunks: Vec<&[u8]> = input.chunks(1).collect();
    assert_eq!(
        parse_chunks(&chunks).unwrap(),
        vec![
            publ("x", None, Some("NATS/1.0\r\n\r\n"), "hello"),
            publ("y", None, None, "")
        ]
    );
}

#[test]
fn unknown_op_is_rejected_before_the_newline() {
    let mut p = Parser::new(1024, 4096);
    let mut buf = BytesMut::from(&b"FOO"[..]);
    assert_eq!(p.parse(&mut buf), Err(ProtocolError::UnknownOp));
    assert_eq!(
        ProtocolError::UnknownOp.err_text(),
        Some("Unknown Protocol Operation")
    );
}

#[test]
fn partial_known_op_waits() {
    let mut p = Parser::new(1024, 4096);
    let mut buf = BytesMut::from(&b"CONN"[..]);
    assert_eq!(p.parse(&mut buf), Ok(None));
    let mut p = Parser::new(1024, 4096);
    let mut buf = BytesMut::from(&b"PUB foo"[..]);
    assert_eq!(p.parse(&mut buf), Ok(None));
}

#[test]
fn complete_unknown_op_is_rejected() {
    assert_eq!(parse_all(b"PUBX foo 1\r\n"), Err(ProtocolError::UnknownOp));
    assert_eq!(parse_all(b"RS+ foo\r\n"), Err(ProtocolError::UnknownOp));
}

#[test]
fn wrong_payload_terminator_is_unknown_op() {
    assert_eq!(
        parse_all(b"PUB foo 3\r\nabcd\r\n"),
        Err(ProtocolError::UnknownOp)
    );
}

#[test]
fn oversize_payload_is_rejected_before_reading_it() {
    let mut p = Parser::new(10, 4096);
    let mut buf = BytesMut::from(&b"PUB foo 11\r\n"[..]);
    assert_eq!(p.parse(&mut buf), Err(ProtocolError::MaxPayload));
    let mut p = Parser::new(10, 4096);
    p.set_headers(true);
    let mut buf = BytesMut::from(&b"HPUB foo 5 11\r\n"[..]);
    assert_eq!(p.parse(&mut buf), Err(ProtocolError::MaxPayload));
}

#[test]
fn long_control_line_is_rejected() {
    let mut p = Parser::new(1024, 16);
    let mut buf = BytesMut::from(&b"SUB aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 1\r\n"[..]);
    assert_eq!(p.parse(&mut buf), Err(ProtocolError::MaxControlLine));
    let mut p = Parser::new(1024, 16);
    let mut buf = BytesMut::from(&b"SUB aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"[..]);
    assert_eq!(p.parse(&mut buf), Err(ProtocolError::MaxControlLine));
}

#[test]
fn argument_errors_close_without_err_text() {
    for input in [
        &b"PUB a b c 1\r\n"[..],
        b"PUB a\r\n",
        b"PUB a -1\r\n",
        b"PUB a x\r\n",
        b"SUB foo 1 2 3\r\n",
        b"SUB foo\r\n",
        b"UNSUB \r\n",
        b"UNSUB 1 2 3\r\n",
        b"PUB a 1234567890\r\n",
        b"HPUB a 5 3\r\n",
        b"HPUB a 3\r\n",
    ] {
        let err = parse_all(input).unwrap_err();
        assert!(
            matches!(err, ProtocolError::BadArgs { .. }),
            "{input:?} gave {err:?}"
        );
        assert_eq!(err.err_text(), None);
    }
}

fn token() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_-]{1,8}"
}

fn subject() -> impl Strategy<Value = String> {
    prop::collection::vec(token(), 1..4).prop_map(|t| t.join("."))
}

proptest! {
    #[test]
    fn encoded_pub_round_trips(
        subj in subject(),
        reply in prop::option::of(subject()),
        hdr in prop::option::of("[a-z]{1,8}"),
        payload in prop::collection::vec(any::<u8>(), 0..64),
        split in 0usize..200,
    ) {
        let mut wire = Vec::new();
        let headers = hdr.map(|v| format!("NATS/1.0\r\nK: {v}\r\n\r\n"));
        let r = reply.as_deref().map(|r| format!("{r} ")).unwrap_or_default();
        match &headers {
            Some(h) => wire.extend_from_slice(
                format!("HPUB {subj} {r}{} {}\r\n", h.len(), h.len() + payload.len()).as_bytes()),
            None => wire.extend_from_slice(format!("PUB {subj} {r}{}\r\n", payload.len()).as_bytes()),
        }
        if let Some(h) = &headers { wire.extend_from_slice(h.as_bytes()); }
        wire.extend_from_slice(&payload);
        wire.extend_from_slice(b"\r\n");
        let at = split.min(wire.len());
        let ops = parse_chunks(&[&wire[..at], &wire[at..]]).unwrap();
        let want = ClientOp::Pub {
            subject: Bytes::from(subj),
            reply: reply.map(Bytes::from),
            headers: headers.map(Bytes::from),
            payload: Bytes::from(payload),
        };
        prop_assert_eq!(ops, vec![want]);
    }

    #[test]
    fn arbitrary_input_never_panics(input in prop::collection::vec(any::<u8>(), 0..256)) {
        let mut p = Parser::new(64, 32);
        let mut buf = BytesMut::from(&input[..]);
        for _ in 0..300 {
            match p.parse(&mut buf) {
                Ok(Some(_)) => continue,
                _ => break,
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Split independence: the same bytes give the same ops and the same error however they are cut.
// ---------------------------------------------------------------------------------------------

/// What a parser made of some input: the ops, then the error that stopped it (`Ok` if it was
/// still waiting for more bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    ops: Vec<ClientOp>,
    end: Result<(), ProtocolError>,
}

/// Feeds `chunks` one after another into a fresh parser (limits 1 MiB / 4096, headers on if
/// `headers`) and records what it produced, stopping at the first error as the reader does.
fn outcome(chunks: &[&[u8]], headers: bool) -> Outcome {
    let mut p = Parser::new(1024 * 1024, 4096);
    p.set_headers(headers);
    let mut buf = BytesMut::new();
    let mut ops = Vec::new();
    for c in chunks {
        buf.put_slice(c);
        loop {
            match p.parse(&mut buf) {
                Ok(Some(op)) => ops.push(op),
                Ok(None) => break,
                Err(e) => return Outcome { ops, end: Err(e) },
            }
        }
    }
    Outcome { ops, end: Ok(()) }
}

fn sub(subject: &[u8], queue: Option<&str>, sid: &str) -> ClientOp {
    ClientOp::Sub {
        subject: Bytes::copy_from_slice(subject),
        queue: queue.map(b),
        sid: b(sid),
    }
}

fn unsub(sid: &str, max: Option<u64>) -> ClientOp {
    ClientOp::Unsub { sid: b(sid), max }
}

fn ok(ops: Vec<ClientOp>) -> Outcome {
    Outcome { ops, end: Ok(()) }
}

fn err(ops: Vec<ClientOp>, e: ProtocolError) -> Outcome {
    Outcome { ops, end: Err(e) }
}

fn bad(op: &'static str, detail: &'static str) -> ProtocolError {
    ProtocolError::BadArgs { op, detail }
}

fn with_suffix(head: &[u8], fill: u8, n: usize, tail: &[u8]) -> Vec<u8> {
    let mut v = head.to_vec();
    v.extend(std::iter::repeat_n(fill, n));
    v.extend_from_slice(tail);
    v
}

/// The table: input, whether HPUB is allowed, and the outcome nats-server's grammar gives for
/// it (the answers were measured against nats-server 2.15.1 with raw sockets).
fn split_table() -> Vec<(Vec<u8>, bool, Outcome)> {
    let connect = |s: &str| ClientOp::Connect(b(s));
    vec![
        // Ordinary traffic.
        (
            b"CONNECT {\"verbose\":false,\"headers\":true}\r\nPING\r\nPONG\r\nSUB foo 1\r\n\
SUB foo q 2\r\nPUB foo 5\r\nhello\r\nPUB foo bar 0\r\n\r\nHPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n\
HPUB foo r 0 2\r\nhi\r\nUNSUB 1\r\nUNSUB 2 5\r\n+OK\r\nINFO {}\r\n"
                .to_vec(),
            true,
            ok(vec![
                connect("{\"verbose\":false,\"headers\":true}"),
                ClientOp::Ping,
                ClientOp::Pong,
                sub(b"foo", None, "1"),
                sub(b"foo", Some("q"), "2"),
                publ("foo", None, None, "hello"),
                publ("foo", Some("bar"), None, ""),
                publ("foo", None, Some("NATS/1.0\r\n\r\n"), "hi"),
                publ("foo", Some("r"), Some(""), "hi"),
                unsub("1", None),
                unsub("2", Some(5)),
                ClientOp::Ignored,
                ClientOp::Ignored,
            ]),
        ),
        // A payload that contains newlines and op names.
        (
            b"PUB a 13\r\nPING\r\nSUB x\r\n\r\nPING\n".to_vec(),
            false,
            ok(vec![
                publ("a", None, None, "PING\r\nSUB x\r\n"),
                ClientOp::Ping,
            ]),
        ),
        // `SUB` needs a blank after the name: whole or split, Unknown Protocol Operation.
        (b"SUB\r\n".to_vec(), false, err(vec![], ProtocolError::UnknownOp)),
        (b"UNSUB\r\n".to_vec(), false, err(vec![], ProtocolError::UnknownOp)),
        (b"PUB\r\n".to_vec(), false, err(vec![], ProtocolError::UnknownOp)),
        (b"PING\r\nPUBX foo 1\r\n".to_vec(), false, err(vec![ClientOp::Ping], ProtocolError::UnknownOp)),
        (b"\r\n".to_vec(), false, err(vec![], ProtocolError::UnknownOp)),
        (b" PING\r\n".to_vec(), false, err(vec![], ProtocolError::UnknownOp)),
        // With a blank but no arguments: a silent close.
        (b"SUB \r\n".to_vec(), false, err(vec![], bad("SUB", "wrong number of arguments"))),
        (b"SUB foo\r\n".to_vec(), false, err(vec![], bad("SUB", "wrong number of arguments"))),
        // PING/PONG/+OK ignore anything up to the newline, however long.
        (
            with_suffix(b"PING", b' ', 5000, b"\r\nPONGX\r\n+OK junk\r\n"),
            false,
            ok(vec![ClientOp::Ping, ClientOp::Pong, ClientOp::Ignored]),
        ),
        // Blanks before the first argument are not counted against max_control_line.
        (
            with_suffix(b"SUB", b' ', 5000, b"foo 1\r\n"),
            false,
            ok(vec![sub(b"foo", None, "1")]),
        ),
        // An argument of exactly 4096 bytes passes, one byte more does not (trailing blanks count).
        (
            with_suffix(b"SUB ", b'a', 4094, b" 1\r\n"),
            false,
            ok(vec![sub(&[b'a'; 4094], None, "1")]),
        ),
        (
            with_suffix(b"SUB ", b'a', 4095, b" 1\r\nPING\r\n"),
            false,
            err(vec![], ProtocolError::MaxControlLine),
        ),
        (
            with_suffix(b"SUB ", b'a', 4094, b" 1 \r\n"),
            false,
            err(vec![], ProtocolError::MaxControlLine),
        ),
        // UNSUB with a max that is not a size: unsubscribe at once, no error.
        (
            b"UNSUB 1 abc\r\nUNSUB 2 -5\r\nUNSUB 3 99999999999999999999\r\nUNSUB 4 0\r\n".to_vec(),
            false,
            ok(vec![
                unsub("1", None),
                unsub("2", None),
                unsub("3", None),
                unsub("4", Some(0)),
            ]),
        ),
        (b"UNSUB 1 2 3\r\n".to_vec(), false, err(vec![], bad("UNSUB", "wrong number of arguments"))),
        // Subjects are bytes: no UTF-8 requirement in the parser.
        (
            b"SUB foo.\xff\xfe 1\r\nPUB foo.\xff\xfe 2\r\nhi\r\n".to_vec(),
            false,
            ok(vec![
                sub(b"foo.\xff\xfe", None, "1"),
                ClientOp::Pub {
                    subject: Bytes::from_static(b"foo.\xff\xfe"),
                    reply: None,
                    headers: None,
                    payload: b("hi"),
                },
            ]),
        ),
        // CONNECT arguments are passed on as they are (the JSON is judged by ConnectOptions).
        (
            b"CONNECT {\"verbose\":false,\"verbose\":true}\r\nCONNECT null\r\nCONNECT []\r\nCONNECT\r\n"
                .to_vec(),
            false,
            ok(vec![
                connect("{\"verbose\":false,\"verbose\":true}"),
                connect("null"),
                connect("[]"),
                connect("\r"),
            ]),
        ),
        // Sizes have at most 9 digits: longer ones close silently, even before max_payload.
        (
            b"PUB foo 2222222222222222\r\n".to_vec(),
            false,
            err(vec![], bad("PUB", "bad size")),
        ),
        (b"PUB foo 1234567890\r\n".to_vec(), false, err(vec![], bad("PUB", "bad size"))),
        (b"PUB foo -1\r\n".to_vec(), false, err(vec![], bad("PUB", "bad size"))),
        (b"PUB foo 999999999\r\n".to_vec(), false, err(vec![], ProtocolError::MaxPayload)),
        (
            b"HPUB foo 12 2222222222222222\r\n".to_vec(),
            true,
            err(vec![], bad("HPUB", "bad size")),
        ),
        (
            b"HPUB foo 2 1\r\n".to_vec(),
            true,
            err(vec![], bad("HPUB", "header size larger than total size")),
        ),
        // HPUB before CONNECT announced headers.
        (
            b"HPUB foo 0 2\r\nhi\r\n".to_vec(),
            false,
            err(vec![], ProtocolError::HeadersNotSupported),
        ),
        // Bad payload terminators.
        (b"PUB foo 2\r\nhiX\r\n".to_vec(), false, err(vec![], ProtocolError::UnknownOp)),
        (b"PUB foo 2\r\nhi\rX".to_vec(), false, err(vec![], ProtocolError::UnknownOp)),
        // The first argument byte is taken as is, even a newline (nats-server does the same).
        (
            b"SUB \nfoo 1\r\n".to_vec(),
            false,
            ok(vec![sub(b"foo", None, "1")]),
        ),
        // A client's -ERR closes; INFO must be a JSON object or null.
        (b"-ERR 'x'\r\n".to_vec(), false, err(vec![], ProtocolError::ClientErr)),
        (b"-ERR\r\n".to_vec(), false, err(vec![], ProtocolError::UnknownOp)),
        (
            b"INFO null\r\nINFO {\"a\":1,\"a\":2}\r\nINFO []\r\n".to_vec(),
            false,
            err(
                vec![ClientOp::Ignored, ClientOp::Ignored],
                bad("INFO", "not a JSON object"),
            ),
        ),
        // Incomplete input is not an error.
        (b"PUB foo 5\r\nhel".to_vec(), false, ok(vec![])),
    ]
}

#[test]
fn every_split_gives_the_same_ops_and_errors() {
    for (input, headers, want) in split_table() {
        let shown = String::from_utf8_lossy(&input[..input.len().min(60)]).into_owned();
        let whole = outcome(&[&input], headers);
        assert_eq!(whole, want, "whole input {shown:?}");
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(outcome(&bytes, headers), whole, "byte by byte: {shown:?}");
        for i in 0..=input.len() {
            let two = outcome(&[&input[..i], &input[i..]], headers);
            assert_eq!(two, whole, "split at {i}: {shown:?}");
            if input.len() <= 300 {
                for j in i..=input.len() {
                    let three = outcome(&[&input[..i], &input[i..j], &input[j..]], headers);
                    assert_eq!(three, whole, "split at {i},{j}: {shown:?}");
                }
            }
        }
    }
}

#[test]
fn ignored_text_and_blanks_are_not_buffered() {
    let mut p = Parser::new(1024, 16);
    let mut buf = BytesMut::from(&b"PING"[..]);
    assert_eq!(p.parse(&mut buf), Ok(None));
    for _ in 0..100 {
        buf.put_slice(&[b' '; 1000]);
        assert_eq!(p.parse(&mut buf), Ok(None));
        assert!(buf.is_empty(), "ignored bytes are dropped");
    }
    buf.put_slice(b"\r\nSUB");
    assert_eq!(p.parse(&mut buf), Ok(Some(ClientOp::Ping)));
    buf.put_slice(&[b'\t'; 1000]);
    assert_eq!(p.parse(&mut buf), Ok(None));
    assert!(buf.is_empty(), "leading blanks are dropped");
}

#[test]
fn awaiting_auth_refuses_any_op_but_connect_at_its_first_byte() {
    let mut p = Parser::new(1024, 4096);
    p.set_awaiting_auth(true);
    let mut buf = BytesMut::from(&b"P"[..]);
    assert_eq!(p.parse(&mut buf), Err(ProtocolError::AuthViolation));
    assert_eq!(
        ProtocolError::AuthViolation.err_text(),
        Some("Authorization Violation")
    );
    let mut p = Parser::new(1024, 4096);
    p.set_awaiting_auth(true);
    let mut buf = BytesMut::from(&b"connect {}\r\n"[..]);
    assert_eq!(p.parse(&mut buf), Ok(Some(ClientOp::Connect(b("{}")))));
}
