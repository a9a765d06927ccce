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
HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\nHPUB foo r 0 2\r\nhi\r\nINFO {}\r\n+OK\r\n-ERR 'x'\r\n";
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
        b"UNSUB\r\n",
        b"UNSUB 1 x\r\n",
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
