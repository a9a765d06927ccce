//! Raw-byte client protocol tests (spec nats-protocol-and-jetstream.md §1): exact bytes as sent by
//! nats-server 2.15.1.
//!
//! Every expectation here was captured from the reference server; the suite must pass with
//! `JETRAFT_TEST_SERVER=nats-server` and, once the server is complete, against jetraft.

use std::time::Duration;

use jetraft_tests::harness::{RawClient, ServerOptions, ServerProcess, assert_clean_log};
use serde_json::Value;

const CLOSE_BOUND: Duration = Duration::from_secs(5);

async fn start(opts: ServerOptions) -> ServerProcess {
    ServerProcess::start(opts).await.expect("start server")
}

async fn start_default() -> ServerProcess {
    start(ServerOptions::default()).await
}

/// `HPUB`/`HMSG` control-line numbers for a header block and payload.
fn hpub(subject: &str, reply: Option<&str>, headers: &[u8], payload: &[u8]) -> Vec<u8> {
    let reply = reply.map(|r| format!("{r} ")).unwrap_or_default();
    let mut v = format!(
        "HPUB {subject} {reply}{} {}\r\n",
        headers.len(),
        headers.len() + payload.len()
    )
    .into_bytes();
    v.extend_from_slice(headers);
    v.extend_from_slice(payload);
    v.extend_from_slice(b"\r\n");
    v
}

fn parse_semver(v: &str) -> (u64, u64, u64) {
    let core = v.split(['-', '+']).next().unwrap_or_default();
    let nums: Vec<u64> = core
        .split('.')
        .map(|p| p.parse().expect("numeric semver part"))
        .collect();
    assert_eq!(nums.len(), 3, "version {v:?} is not major.minor.patch");
    (nums[0], nums[1], nums[2])
}

// ---------------------------------------------------------------------------------------------
// INFO, PING/PONG, CONNECT
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn info_on_accept_has_exact_framing_and_required_fields() {
    let srv = start(ServerOptions::default().name("raw-info")).await;
    let connected = tokio::time::Instant::now();
    let mut c = RawClient::connect_to(&srv).await;
    let line = c.read_until_contains(b"\r\n", Duration::from_secs(5)).await;
    // nats-server writes INFO right after accept; clients wait for it before anything else.
    let waited = connected.elapsed();
    assert!(waited < Duration::from_secs(1), "INFO took {waited:?}");
    assert!(
        line.starts_with(b"INFO {"),
        "INFO line starts with {:?}",
        &line[..line.len().min(10)]
    );
    assert!(
        line.ends_with(b"} \r\n"),
        "INFO line must end with a space before CRLF"
    );
    let info: Value = serde_json::from_slice(&line[5..line.len() - 3]).expect("INFO JSON");

    assert!(
        info["server_id"].as_str().is_some_and(|s| !s.is_empty()),
        "server_id: {info}"
    );
    assert_eq!(info["server_name"], "raw-info");
    let version = info["version"].as_str().expect("version string");
    let (major, minor, _) = parse_semver(version);
    assert!(
        (major, minor) >= (2, 12),
        "version {version} must be >= 2.12"
    );
    assert_eq!(info["proto"], 1);
    assert_eq!(info["headers"], true);
    assert_eq!(info["max_payload"], 1_048_576);
    assert_eq!(info["jetstream"], true);
    assert!(info["client_id"].as_u64().is_some(), "client_id: {info}");
    assert_eq!(info["host"], "127.0.0.1");
    assert_eq!(info["port"], srv.port());
    assert_eq!(info["client_ip"], "127.0.0.1");
    assert!(
        info.get("auth_required").is_none(),
        "no auth configured: {info}"
    );
    assert_clean_log(&srv);
}

#[tokio::test]
async fn each_connection_gets_a_distinct_client_id() {
    let srv = start_default().await;
    let mut a = RawClient::connect_to(&srv).await;
    let mut b = RawClient::connect_to(&srv).await;
    let (ia, ib) = (a.read_info().await, b.read_info().await);
    assert_ne!(ia["client_id"], ib["client_id"]);
    assert_eq!(ia["server_id"], ib["server_id"]);
    assert_clean_log(&srv);
}

#[tokio::test]
async fn ping_before_connect_is_answered_when_no_auth() {
    let srv = start_default().await;
    let mut c = RawClient::connect_to(&srv).await;
    c.read_info().await;
    c.send("PING\r\n").await;
    c.expect_bytes(b"PONG\r\n").await;
    // Without CONNECT the defaults apply (verbose=true): a SUB is acknowledged.
    c.send("SUB a 1\r\n").await;
    c.expect_bytes(b"+OK\r\n").await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn ping_after_connect_is_answered_with_pong() {
    let srv = start_default().await;
    let mut c = RawClient::connected(&srv).await;
    for _ in 0..3 {
        c.send("PING\r\n").await;
        c.expect_bytes(b"PONG\r\n").await;
    }
    // Several PINGs in one write: one PONG each, in order.
    c.send("PING\r\nPING\r\n").await;
    c.expect_bytes(b"PONG\r\nPONG\r\n").await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn first_ping_of_a_protocol_1_client_gets_pong_then_async_info() {
    let srv = start_default().await;
    let mut c = RawClient::connect_to(&srv).await;
    let info = c.read_info().await;
    c.send("CONNECT {\"verbose\":false,\"protocol\":1,\"headers\":true}\r\nPING\r\n")
        .await;
    c.expect_bytes(b"PONG\r\n").await;
    let line = c.read_until_contains(b"\r\n", Duration::from_secs(5)).await;
    assert!(
        line.starts_with(b"INFO {") && line.ends_with(b"} \r\n"),
        "async INFO framing"
    );
    let async_info: Value = serde_json::from_slice(&line[5..line.len() - 3]).expect("INFO JSON");
    assert_eq!(async_info["connect_info"], true);
    assert_eq!(async_info["remote_account"], "$G");
    assert_eq!(async_info["server_id"], info["server_id"]);
    assert_eq!(async_info["client_id"], info["client_id"]);
    // Only the first PING triggers it.
    c.ping_pong().await;
    c.ping_pong().await;
    assert_clean_log(&srv);
}

/// An async INFO (here: lame duck mode's `ldm`) never reaches a client before the PONG to its
/// first PING: a client that sent CONNECT and waits for that PONG reads the next line as its
/// answer (nats.py then stays "connecting" and never flushes a publish). As nats-server, such a
/// client gets the INFO that follows its first PONG (with the `connect_urls` of that moment).
#[tokio::test]
async fn async_info_waits_for_the_first_pong() {
    let srv = start(ServerOptions::with_config(
        "lame_duck_grace_period: 30s\nlame_duck_duration: 60s\n",
    ))
    .await;
    // A client that completed its handshake, to see when the async INFO went out.
    let mut ready = RawClient::connect_to(&srv).await;
    ready.read_info().await;
    ready
        .send("CONNECT {\"verbose\":false,\"protocol\":1}\r\nPING\r\n")
        .await;
    ready.expect_bytes(b"PONG\r\n").await;
    ready
        .read_until_contains(b"\r\n", Duration::from_secs(5))
        .await; // the INFO after the first PONG
    // A client between its CONNECT and its first PING.
    let mut pending = RawClient::connect_to(&srv).await;
    pending.read_info().await;
    pending
        .send("CONNECT {\"verbose\":false,\"protocol\":1}\r\n")
        .await;
    ready.ping_pong().await; // the server has read the CONNECT too (same node, same order)
    srv.signal(rustix::process::Signal::USR2).expect("SIGUSR2");
    let line = ready
        .read_until_contains(b"\r\n", Duration::from_secs(5))
        .await;
    let ldm: Value = serde_json::from_slice(&line[5..line.len() - 3]).expect("INFO JSON");
    assert_eq!(
        ldm["ldm"], true,
        "the handshaken client got the lame duck INFO"
    );
    pending.expect_silence(Duration::from_millis(300)).await;
    pending.send("PING\r\n").await;
    pending.expect_bytes(b"PONG\r\n").await;
    let line = pending
        .read_until_contains(b"\r\n", Duration::from_secs(5))
        .await;
    let info: Value = serde_json::from_slice(&line[5..line.len() - 3]).expect("INFO JSON");
    assert_eq!(
        info["connect_info"], true,
        "the INFO that follows the first PONG"
    );
}

#[tokio::test]
async fn protocol_0_client_gets_no_async_info() {
    let srv = start_default().await;
    let mut c = RawClient::connect_to(&srv).await;
    c.read_info().await;
    c.send("CONNECT {\"verbose\":false}\r\nPING\r\n").await;
    c.expect_bytes(b"PONG\r\n").await;
    c.ping_pong().await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn verbose_connect_acks_every_op_with_ok() {
    let srv = start_default().await;
    let mut c = RawClient::connect_to(&srv).await;
    c.read_info().await;
    c.send("CONNECT {\"verbose\":true}\r\n").await;
    c.expect_bytes(b"+OK\r\n").await;
    c.send("SUB foo 1\r\n").await;
    c.expect_bytes(b"+OK\r\n").await;
    // The +OK for a PUB comes before the delivery of that PUB to our own subscription.
    c.send("PUB foo 5\r\nhello\r\n").await;
    c.expect_bytes(b"+OK\r\nMSG foo 1 5\r\nhello\r\n").await;
    c.send("PUB foo r 2\r\nhi\r\n").await;
    c.expect_bytes(b"+OK\r\nMSG foo 1 r 2\r\nhi\r\n").await;
    c.send("UNSUB 1\r\n").await;
    c.expect_bytes(b"+OK\r\n").await;
    // UNSUB of an unknown sid is also acknowledged.
    c.send("UNSUB 99\r\n").await;
    c.expect_bytes(b"+OK\r\n").await;
    // PING is answered by PONG only (no +OK).
    c.send("PING\r\n").await;
    c.expect_bytes(b"PONG\r\n").await;
    // Empty CONNECT object means verbose defaults to true.
    let mut d = RawClient::connect_to(&srv).await;
    d.read_info().await;
    d.send("CONNECT {}\r\nPING\r\n").await;
    d.expect_bytes(b"+OK\r\nPONG\r\n").await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn malformed_connect_json_closes_without_error() {
    let srv = start_default().await;
    let mut c = RawClient::connect_to(&srv).await;
    c.read_info().await;
    c.send("CONNECT {bad\r\n").await;
    c.assert_closed(CLOSE_BOUND).await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn unsupported_client_protocol_is_rejected() {
    let srv = start_default().await;
    let mut c = RawClient::connect_to(&srv).await;
    c.read_info().await;
    c.send("CONNECT {\"verbose\":false,\"protocol\":2}\r\n")
        .await;
    c.expect_bytes(b"-ERR 'invalid client protocol'\r\n").await;
    c.assert_closed(CLOSE_BOUND).await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn no_responders_without_headers_is_rejected() {
    let srv = start_default().await;
    let mut c = RawClient::connect_to(&srv).await;
    c.read_info().await;
    c.send("CONNECT {\"verbose\":false,\"no_responders\":true}\r\n")
        .await;
    c.expect_bytes(b"-ERR 'no responders requires headers support'\r\n")
        .await;
    c.assert_closed(CLOSE_BOUND).await;
    assert_clean_log(&srv);
}

// ---------------------------------------------------------------------------------------------
// PUB / SUB / MSG framing
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn pub_without_reply_is_delivered_as_msg() {
    let srv = start_default().await;
    let mut sub = RawClient::connected(&srv).await;
    sub.send("SUB foo.bar 7\r\n").await;
    sub.ping_pong().await;
    let mut publ = RawClient::connected(&srv).await;
    publ.send("PUB foo.bar 11\r\nhello world\r\nPUB foo.bar 0\r\n\r\n")
        .await;
    publ.ping_pong().await;
    sub.expect_bytes(b"MSG foo.bar 7 11\r\nhello world\r\nMSG foo.bar 7 0\r\n\r\n")
        .await;
    sub.ping_pong().await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn pub_with_reply_includes_reply_subject_in_msg() {
    let srv = start_default().await;
    let mut sub = RawClient::connected(&srv).await;
    sub.send("SUB svc.echo 3\r\n").await;
    sub.ping_pong().await;
    let mut publ = RawClient::connected(&srv).await;
    publ.send("PUB svc.echo _INBOX.abc.1 4\r\nping\r\n").await;
    publ.ping_pong().await;
    sub.expect_bytes(b"MSG svc.echo 3 _INBOX.abc.1 4\r\nping\r\n")
        .await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn payload_with_crlf_inside_is_delivered_intact() {
    let srv = start_default().await;
    let mut c = RawClient::connected(&srv).await;
    c.send("SUB p 1\r\nPUB p 10\r\na\r\nPING\r\nb\r\n").await;
    c.expect_bytes(b"MSG p 1 10\r\na\r\nPING\r\nb\r\n").await;
    c.ping_pong().await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn subjects_that_are_not_utf8_are_routed_byte_for_byte() {
    // nats-server treats subjects as bytes: no error, and the subscriber gets the same bytes.
    let srv = start_default().await;
    let mut sub = RawClient::connected(&srv).await;
    sub.send(b"SUB foo.\xff\xfe 1\r\nSUB foo.* 2\r\nSUB q.\xc3 w\xe9 3\r\n")
        .await;
    sub.ping_pong().await;
    let mut publ = RawClient::connected(&srv).await;
    publ.send(b"PUB foo.\xff\xfe bar.\xf0.\xc3\xa9 2\r\nhi\r\nPUB q.\xc3 1\r\nq\r\n")
        .await;
    publ.ping_pong().await;
    let mut got = sub.read_msgs_until_pong().await;
    got.sort_by(|a, b| a.sid.cmp(&b.sid));
    let seen: Vec<(&str, Option<&str>, &[u8])> = got
        .iter()
        .map(|m| (m.sid.as_str(), m.reply.as_deref(), &m.payload[..]))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("1", Some("bar.\u{fffd}.é"), &b"hi"[..]),
            ("2", Some("bar.\u{fffd}.é"), &b"hi"[..]),
            ("3", None, &b"q"[..]),
        ]
    );
    // The parsed view above is lossy; the bytes on the wire must be exactly the published ones.
    sub.send("UNSUB 2\r\n").await;
    sub.ping_pong().await;
    publ.send(b"PUB foo.\xff\xfe 1\r\nx\r\n").await;
    publ.ping_pong().await;
    let raw = sub
        .read_until_contains(b"x\r\n", Duration::from_secs(5))
        .await;
    assert_eq!(&raw[..], b"MSG foo.\xff\xfe 1 1\r\nx\r\n");
    // A pedantic connection may publish to it too: it is a literal subject.
    let (mut pedantic, _) =
        RawClient::connect_with(&srv, r#"{"verbose":false,"pedantic":true}"#).await;
    pedantic.send(b"PUB foo.\xff\xfe 1\r\ny\r\n").await;
    pedantic.ping_pong().await;
    let raw = sub
        .read_until_contains(b"y\r\n", Duration::from_secs(5))
        .await;
    assert_eq!(&raw[..], b"MSG foo.\xff\xfe 1 1\r\ny\r\n");
    assert_clean_log(&srv);
}

#[tokio::test]
async fn wildcard_subscriptions_match_tokens() {
    let srv = start_default().await;
    let mut sub = RawClient::connected(&srv).await;
    sub.send("SUB a.* 1\r\nSUB a.> 2\r\nSUB a.b 3\r\n").await;
    // The subscriptions are in place once the PING after them is answered.
    sub.ping_pong().await;
    let mut publ = RawClient::connected(&srv).await;
    publ.send("PUB a 1\r\n0\r\nPUB a.b 1\r\n1\r\nPUB a.b.c 1\r\n2\r\nPUB A.b 1\r\n3\r\n")
        .await;
    publ.ping_pong().await;
    let got: Vec<(String, String, Vec<u8>)> = sub
        .read_msgs_until_pong()
        .await
        .into_iter()
        .map(|m| (m.subject, m.sid, m.payload))
        .collect();
    let mut by_payload = got.clone();
    by_payload.sort();
    assert_eq!(
        by_payload,
        vec![
            ("a.b".to_string(), "1".to_string(), b"1".to_vec()),
            ("a.b".to_string(), "2".to_string(), b"1".to_vec()),
            ("a.b".to_string(), "3".to_string(), b"1".to_vec()),
            ("a.b.c".to_string(), "2".to_string(), b"2".to_vec()),
        ],
        "a.b matches all three subs, a.b.c only a.>, a and A.b nothing"
    );
    assert_clean_log(&srv);
}

#[tokio::test]
async fn reused_sid_keeps_the_first_subscription() {
    let srv = start_default().await;
    let mut c = RawClient::connected(&srv).await;
    c.send("SUB foo 1\r\nSUB bar 1\r\nPUB bar 1\r\nx\r\nPUB foo 1\r\ny\r\n")
        .await;
    let msgs = c.read_msgs_until_pong().await;
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(
        (msgs[0].subject.as_str(), msgs[0].payload.as_slice()),
        ("foo", &b"y"[..])
    );
    assert_clean_log(&srv);
}

#[tokio::test]
async fn echo_false_suppresses_own_messages() {
    let srv = start_default().await;
    let (mut c, _) =
        RawClient::connect_with(&srv, r#"{"verbose":false,"echo":false,"headers":true}"#).await;
    let mut other = RawClient::connected(&srv).await;
    c.send("SUB e 1\r\n").await;
    other.send("SUB e 1\r\n").await;
    other.ping_pong().await;
    c.send("PUB e 2\r\nhi\r\n").await;
    assert!(
        c.read_msgs_until_pong().await.is_empty(),
        "own message echoed"
    );
    other.expect_bytes(b"MSG e 1 2\r\nhi\r\n").await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn hpub_is_delivered_as_hmsg_with_headers_byte_for_byte() {
    let srv = start_default().await;
    let mut sub = RawClient::connected(&srv).await;
    sub.send("SUB h.x 5\r\n").await;
    sub.ping_pong().await;
    let mut publ = RawClient::connected(&srv).await;
    // Case, duplicate keys and odd spacing must survive untouched.
    let headers = b"NATS/1.0\r\nA-Key: 1\r\nb-Key:  spaced \r\nA-Key: 2\r\n\r\n";
    publ.send(hpub("h.x", Some("rep.ly"), headers, b"payload!"))
        .await;
    publ.send(hpub("h.x", None, headers, b"")).await;
    publ.ping_pong().await;
    let (h, t) = (headers.len(), headers.len() + 8);
    let mut want = format!("HMSG h.x 5 rep.ly {h} {t}\r\n").into_bytes();
    want.extend_from_slice(headers);
    want.extend_from_slice(b"payload!\r\n");
    want.extend_from_slice(format!("HMSG h.x 5 {h} {h}\r\n").as_bytes());
    want.extend_from_slice(headers);
    want.extend_from_slice(b"\r\n");
    sub.expect_bytes(&want).await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn hpub_with_zero_header_length_is_delivered_as_msg() {
    let srv = start_default().await;
    let mut c = RawClient::connected(&srv).await;
    c.send("SUB kv.put 1\r\nHPUB kv.put 0 2\r\nhi\r\nHPUB kv.put rep 0 0\r\n\r\n")
        .await;
    c.expect_bytes(b"MSG kv.put 1 2\r\nhi\r\nMSG kv.put 1 rep 0\r\n\r\n")
        .await;
    c.ping_pong().await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn subscriber_without_headers_gets_msg_with_headers_stripped() {
    let srv = start_default().await;
    let (mut old, _) = RawClient::connect_with(&srv, r#"{"verbose":false}"#).await;
    old.send("SUB h.strip 9\r\n").await;
    old.ping_pong().await;
    let mut publ = RawClient::connected(&srv).await;
    publ.send(hpub(
        "h.strip",
        Some("r"),
        b"NATS/1.0\r\nX: y\r\n\r\n",
        b"body",
    ))
    .await;
    publ.ping_pong().await;
    old.expect_bytes(b"MSG h.strip 9 r 4\r\nbody\r\n").await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn hpub_from_client_without_headers_closes_without_error() {
    let srv = start_default().await;
    let (mut c, _) = RawClient::connect_with(&srv, r#"{"verbose":false}"#).await;
    c.send(hpub("h", None, b"NATS/1.0\r\n\r\n", b"hi")).await;
    c.assert_closed(CLOSE_BOUND).await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn multiple_matching_subscriptions_on_one_connection_each_get_a_copy() {
    let srv = start_default().await;
    let mut c = RawClient::connected(&srv).await;
    c.send("SUB m.x 1\r\nSUB m.* 2\r\nPUB m.x 1\r\nz\r\n").await;
    let mut sids: Vec<String> = c
        .read_msgs_until_pong()
        .await
        .into_iter()
        .map(|m| m.sid)
        .collect();
    sids.sort();
    assert_eq!(sids, ["1", "2"]);
    assert_clean_log(&srv);
}

#[tokio::test]
async fn queue_group_delivers_each_message_to_exactly_one_member() {
    let srv = start_default().await;
    let mut m1 = RawClient::connected(&srv).await;
    let mut m2 = RawClient::connected(&srv).await;
    let mut plain = RawClient::connected(&srv).await;
    m1.send("SUB work.q workers 1\r\n").await;
    m2.send("SUB work.q workers 2\r\n").await;
    plain.send("SUB work.q 3\r\n").await;
    for c in [&mut m1, &mut m2, &mut plain] {
        c.ping_pong().await;
    }
    let mut publ = RawClient::connected(&srv).await;
    let n = 60;
    let mut batch = Vec::new();
    for i in 0..n {
        let p = format!("m{i}");
        batch.extend_from_slice(format!("PUB work.q {}\r\n{p}\r\n", p.len()).as_bytes());
    }
    publ.send(batch).await;
    publ.ping_pong().await;

    let got1 = m1.read_msgs_until_pong().await;
    let got2 = m2.read_msgs_until_pong().await;
    let all = plain.read_msgs_until_pong().await;
    assert_eq!(all.len(), n, "non-queue subscriber gets every message");
    assert!(got1.iter().all(|m| m.sid == "1") && got2.iter().all(|m| m.sid == "2"));
    let mut seen: Vec<Vec<u8>> = got1
        .iter()
        .chain(&got2)
        .map(|m| m.payload.clone())
        .collect();
    seen.sort();
    let mut want: Vec<Vec<u8>> = (0..n).map(|i| format!("m{i}").into_bytes()).collect();
    want.sort();
    assert_eq!(seen, want, "each message delivered to exactly one member");
    assert!(
        !got1.is_empty() && !got2.is_empty(),
        "split {}/{}",
        got1.len(),
        got2.len()
    );
    assert_clean_log(&srv);
}

#[tokio::test]
async fn unsub_with_max_auto_unsubscribes_after_n_total_deliveries() {
    let srv = start_default().await;
    let mut c = RawClient::connected(&srv).await;
    c.send("SUB u 1\r\nPUB u 1\r\n0\r\n").await;
    assert_eq!(c.read_msgs_until_pong().await.len(), 1);
    // Max counts the message already delivered: 2 more, then gone.
    c.send("UNSUB 1 3\r\n").await;
    for i in 1..=5 {
        c.send(format!("PUB u 1\r\n{i}\r\n")).await;
    }
    let got: Vec<Vec<u8>> = c
        .read_msgs_until_pong()
        .await
        .into_iter()
        .map(|m| m.payload)
        .collect();
    assert_eq!(got, vec![b"1".to_vec(), b"2".to_vec()]);
    // The subscription is gone for good.
    c.send("PUB u 1\r\n9\r\n").await;
    assert!(c.read_msgs_until_pong().await.is_empty());
    assert_clean_log(&srv);
}

#[tokio::test]
async fn unsub_with_max_at_or_below_delivered_unsubscribes_immediately() {
    let srv = start_default().await;
    let mut c = RawClient::connected(&srv).await;
    c.send("SUB u 1\r\nPUB u 1\r\na\r\nPUB u 1\r\nb\r\n").await;
    assert_eq!(c.read_msgs_until_pong().await.len(), 2);
    c.send("UNSUB 1 1\r\nPUB u 1\r\nc\r\n").await;
    assert!(c.read_msgs_until_pong().await.is_empty());
    assert_clean_log(&srv);
}

#[tokio::test]
async fn unsub_stops_delivery_and_unknown_sid_is_ignored() {
    let srv = start_default().await;
    let mut c = RawClient::connected(&srv).await;
    c.send("SUB u 1\r\nUNSUB 1\r\nUNSUB 42\r\nPUB u 1\r\nx\r\n")
        .await;
    assert!(c.read_msgs_until_pong().await.is_empty());
    assert_clean_log(&srv);
}

// ---------------------------------------------------------------------------------------------
// Parser leniency
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn pub_and_hpub_split_into_single_byte_writes_are_delivered_exactly() {
    let srv = start_default().await;
    let mut sub = RawClient::connected(&srv).await;
    sub.send("SUB split.* 4\r\n").await;
    sub.ping_pong().await;
    let mut publ = RawClient::connected(&srv).await;
    let headers = b"NATS/1.0\r\nK: v\r\n\r\n";
    let mut ops = b"PUB split.a reply.a 5\r\nab\r\nc\r\n".to_vec();
    ops.extend(hpub("split.b", None, headers, b"xyz"));
    publ.send_split(&ops, 1, Duration::from_millis(2)).await;
    publ.ping_pong().await;
    let mut want = b"MSG split.a 4 reply.a 5\r\nab\r\nc\r\n".to_vec();
    want.extend(format!("HMSG split.b 4 {} {}\r\n", headers.len(), headers.len() + 3).as_bytes());
    want.extend_from_slice(headers);
    want.extend_from_slice(b"xyz\r\n");
    sub.expect_bytes(&want).await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn ops_are_case_insensitive_and_accept_tab_separators() {
    let srv = start_default().await;
    let mut c = RawClient::connected(&srv).await;
    c.send("sub\tfoo.tab\t\t7\r\npub foo.tab 2\r\nhi\r\nPub  foo.tab \t r 1\r\nx\r\nPing\r\n")
        .await;
    c.expect_bytes(b"MSG foo.tab 7 2\r\nhi\r\nMSG foo.tab 7 r 1\r\nx\r\nPONG\r\n")
        .await;
    c.send("unsub 7\r\npInG\r\n").await;
    c.expect_bytes(b"PONG\r\n").await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn control_lines_may_end_with_bare_lf() {
    let srv = start_default().await;
    let mut c = RawClient::connected(&srv).await;
    c.send("SUB a 1\nPUB a 1\nx\r\nPING\n").await;
    c.expect_bytes(b"MSG a 1 1\r\nx\r\nPONG\r\n").await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn literal_tokens_containing_wildcard_chars_are_accepted() {
    let srv = start_default().await;
    let mut c = RawClient::connected(&srv).await;
    c.send("SUB foo.b*r 1\r\nPUB foo.b*r 1\r\nx\r\n").await;
    let msgs = c.read_msgs_until_pong().await;
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].subject, "foo.b*r");
    assert_clean_log(&srv);
}

#[tokio::test]
async fn wrong_argument_count_closes_without_error() {
    let srv = start_default().await;
    for bad in ["PUB a b c 1\r\n", "SUB foo 1 2 3\r\n", "PUB foo -1\r\n"] {
        let mut c = RawClient::connected(&srv).await;
        c.send(bad).await;
        c.assert_closed(CLOSE_BOUND).await;
    }
    assert_clean_log(&srv);
}

// ---------------------------------------------------------------------------------------------
// -ERR catalogue (spec nats-protocol-and-jetstream.md §1.12)
// ---------------------------------------------------------------------------------------------

/// Sends `input` after CONNECT and expects `Unknown Protocol Operation` and a close.
async fn expect_unknown_operation_and_close(input: &str) {
    let srv = start_default().await;
    let mut c = RawClient::connected(&srv).await;
    c.send(input).await;
    c.expect_bytes(b"-ERR 'Unknown Protocol Operation'\r\n")
        .await;
    c.assert_closed(CLOSE_BOUND).await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn unknown_operation_is_an_error_and_closes() {
    expect_unknown_operation_and_close("FOO bar\r\n").await;
}

#[tokio::test]
async fn route_ops_from_a_client_are_unknown_operations() {
    expect_unknown_operation_and_close("RS+ $G foo\r\n").await;
}

#[tokio::test]
async fn payload_not_followed_by_crlf_is_unknown_protocol_operation() {
    expect_unknown_operation_and_close("PUB foo 3\r\nabcd\r\n").await;
}

#[tokio::test]
async fn payload_over_max_payload_is_rejected_and_closes() {
    let srv = start(ServerOptions::with_config("max_payload: 100\n")).await;
    let (mut ok, info) = RawClient::connect_with(&srv, r#"{"verbose":false,"headers":true}"#).await;
    assert_eq!(info["max_payload"], 100);
    // Exactly max_payload is fine.
    ok.send(format!(
        "SUB big 1\r\nPUB big 100\r\n{}\r\n",
        "a".repeat(100)
    ))
    .await;
    assert_eq!(ok.read_msgs_until_pong().await[0].payload.len(), 100);

    // Rejected from the size field alone, before any payload is sent.
    let mut c = RawClient::connected(&srv).await;
    c.send("PUB big 101\r\n").await;
    c.expect_bytes(b"-ERR 'Maximum Payload Violation'\r\n")
        .await;
    c.assert_closed(CLOSE_BOUND).await;

    // For HPUB the total size (headers + payload) counts.
    let mut h = RawClient::connected(&srv).await;
    h.send("HPUB big 12 101\r\n").await;
    h.expect_bytes(b"-ERR 'Maximum Payload Violation'\r\n")
        .await;
    h.assert_closed(CLOSE_BOUND).await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn control_line_over_4096_bytes_is_rejected_and_closes() {
    let srv = start_default().await;
    let mut c = RawClient::connected(&srv).await;
    c.send(format!("PUB {} 3\r\n", "a".repeat(5000))).await;
    c.expect_bytes(b"-ERR 'maximum control line exceeded'\r\n")
        .await;
    c.assert_closed(CLOSE_BOUND).await;

    // Also when the line has no terminator yet.
    let mut d = RawClient::connected(&srv).await;
    d.send(format!("PUB {}", "b".repeat(5000))).await;
    d.expect_bytes(b"-ERR 'maximum control line exceeded'\r\n")
        .await;
    d.assert_closed(CLOSE_BOUND).await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn invalid_subject_in_sub_is_an_error_but_not_fatal() {
    let srv = start_default().await;
    let mut c = RawClient::connected(&srv).await;
    for bad in ["foo..bar", "foo.>.x", ".foo", "foo."] {
        c.send(format!("SUB {bad} 1\r\n")).await;
        c.expect_bytes(b"-ERR 'Invalid Subject'\r\n").await;
    }
    // No subscription was created with sid 1; the connection still works.
    c.send("SUB ok 2\r\nPUB ok 1\r\nx\r\n").await;
    let msgs = c.read_msgs_until_pong().await;
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].sid, "2");
    assert_clean_log(&srv);
}

#[tokio::test]
async fn pedantic_publish_to_wildcard_subject_is_an_error_but_still_delivered() {
    let srv = start_default().await;
    let (mut c, _) = RawClient::connect_with(&srv, r#"{"verbose":false,"pedantic":true}"#).await;
    c.send("SUB foo.* 1\r\nPUB foo.* 1\r\nx\r\nPING\r\n").await;
    c.expect_bytes(b"-ERR 'Invalid Publish Subject'\r\nMSG foo.* 1 1\r\nx\r\nPONG\r\n")
        .await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn reply_with_reserved_prefix_is_a_permissions_violation_and_not_delivered() {
    let srv = start_default().await;
    let mut c = RawClient::connected(&srv).await;
    c.send("SUB foo 1\r\nPUB foo $JS.ACK.x 1\r\nx\r\nPING\r\n")
        .await;
    c.expect_bytes(
        b"-ERR 'Permissions Violation for Publish with Reply of \"$JS.ACK.x\"'\r\nPONG\r\n",
    )
    .await;
    c.send("PUB foo _R_.x 1\r\nx\r\nPING\r\n").await;
    c.expect_bytes(b"-ERR 'Permissions Violation for Publish with Reply of \"_R_.x\"'\r\nPONG\r\n")
        .await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn subscriptions_over_max_subscriptions_are_rejected_but_not_fatal() {
    let srv = start(ServerOptions::with_config("max_subscriptions: 2\n")).await;
    let mut c = RawClient::connected(&srv).await;
    c.send("SUB a 1\r\nSUB b 2\r\nSUB c 3\r\nPING\r\n").await;
    c.expect_bytes(b"-ERR 'maximum subscriptions exceeded'\r\nPONG\r\n")
        .await;
    c.send("PUB c 1\r\nx\r\nPUB b 1\r\ny\r\n").await;
    let msgs = c.read_msgs_until_pong().await;
    assert_eq!(msgs.len(), 1, "only b is subscribed: {msgs:?}");
    assert_eq!(msgs[0].sid, "2");
    assert_clean_log(&srv);
}

const USERS_CONF: &str = r#"
authorization {
  users = [
    { user: limited, password: pw, permissions: { publish: { allow: ["ok.>"] }, subscribe: { allow: ["ok.>"] } } }
    { user: admin, password: pw }
  ]
}
"#;

#[tokio::test]
async fn publish_permission_violation_is_an_error_but_not_fatal() {
    let srv = start(ServerOptions::with_config(USERS_CONF)).await;
    let (mut admin, _) =
        RawClient::connect_with(&srv, r#"{"verbose":false,"user":"admin","pass":"pw"}"#).await;
    admin.send("SUB x 1\r\nSUB ok.a 2\r\n").await;
    admin.ping_pong().await;
    let (mut c, _) =
        RawClient::connect_with(&srv, r#"{"verbose":false,"user":"limited","pass":"pw"}"#).await;
    c.send("PUB x 1\r\na\r\nPING\r\n").await;
    c.expect_bytes(b"-ERR 'Permissions Violation for Publish to \"x\"'\r\nPONG\r\n")
        .await;
    c.send("PUB ok.a 1\r\nb\r\n").await;
    c.ping_pong().await;
    let got: Vec<String> = admin
        .read_msgs_until_pong()
        .await
        .into_iter()
        .map(|m| m.subject)
        .collect();
    assert_eq!(got, ["ok.a"], "the denied publish must not be delivered");
    assert_clean_log(&srv);
}

#[tokio::test]
async fn subscribe_permission_violation_is_an_error_but_not_fatal() {
    let srv = start(ServerOptions::with_config(USERS_CONF)).await;
    let (mut c, _) =
        RawClient::connect_with(&srv, r#"{"verbose":false,"user":"limited","pass":"pw"}"#).await;
    c.send("SUB x 1\r\nPING\r\n").await;
    c.expect_bytes(b"-ERR 'Permissions Violation for Subscription to \"x\"'\r\nPONG\r\n")
        .await;
    c.send("SUB x q 1\r\nPING\r\n").await;
    c.expect_bytes(
        b"-ERR 'Permissions Violation for Subscription to \"x\" using queue \"q\"'\r\nPONG\r\n",
    )
    .await;
    c.send("SUB ok.a 2\r\nPUB ok.a 1\r\nz\r\n").await;
    let msgs = c.read_msgs_until_pong().await;
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].sid, "2");
    assert_clean_log(&srv);
}

const AUTH_CONF: &str = "authorization { user: a, password: b, timeout: 1 }\n";

#[tokio::test]
async fn info_advertises_auth_required_when_auth_is_configured() {
    let srv = start(ServerOptions::with_config(AUTH_CONF)).await;
    let mut c = RawClient::connect_to(&srv).await;
    let info = c.read_info().await;
    assert_eq!(info["auth_required"], true);
    assert_clean_log(&srv);
}

#[tokio::test]
async fn correct_password_is_accepted() {
    let srv = start(ServerOptions::with_config(AUTH_CONF)).await;
    let (mut c, _) =
        RawClient::connect_with(&srv, r#"{"verbose":false,"user":"a","pass":"b"}"#).await;
    c.send("SUB s 1\r\nPUB s 1\r\nx\r\n").await;
    assert_eq!(c.read_msgs_until_pong().await.len(), 1);
    assert_clean_log(&srv);
}

#[tokio::test]
async fn wrong_or_missing_credentials_are_authorization_violation_and_close() {
    let srv = start(ServerOptions::with_config(AUTH_CONF)).await;
    for connect in [
        r#"{"verbose":false,"user":"a","pass":"wrong"}"#,
        r#"{"verbose":false,"user":"nobody","pass":"b"}"#,
        r#"{"verbose":false}"#,
    ] {
        let mut c = RawClient::connect_to(&srv).await;
        c.read_info().await;
        c.send(format!("CONNECT {connect}\r\nPING\r\n")).await;
        c.expect_bytes(b"-ERR 'Authorization Violation'\r\n").await;
        c.assert_closed(CLOSE_BOUND).await;
    }
    assert_clean_log(&srv);
}

#[tokio::test]
async fn op_before_connect_with_auth_required_is_authorization_violation() {
    let srv = start(ServerOptions::with_config(AUTH_CONF)).await;
    for op in ["PING\r\n", "SUB foo 1\r\n", "PUB foo 1\r\nx\r\n"] {
        let mut c = RawClient::connect_to(&srv).await;
        c.read_info().await;
        c.send(op).await;
        c.expect_bytes(b"-ERR 'Authorization Violation'\r\n").await;
        c.assert_closed(CLOSE_BOUND).await;
    }
    assert_clean_log(&srv);
}

#[tokio::test]
async fn no_connect_within_auth_timeout_closes_with_authentication_timeout() {
    let srv = start(ServerOptions::with_config(AUTH_CONF)).await;
    let mut c = RawClient::connect_to(&srv).await;
    c.read_info().await;
    let started = tokio::time::Instant::now();
    c.expect_bytes_within(b"-ERR 'Authentication Timeout'\r\n", Duration::from_secs(5))
        .await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(700),
        "timed out too early: {waited:?}"
    );
    c.assert_closed(CLOSE_BOUND).await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn unanswered_server_pings_close_with_stale_connection() {
    let srv = start(ServerOptions::with_config(
        "ping_interval: \"1s\"\nping_max: 1\n",
    ))
    .await;
    let mut c = RawClient::connect_to(&srv).await;
    c.answer_pings(false);
    c.read_info().await;
    c.send("CONNECT {\"verbose\":false}\r\n").await;
    // The server pings, gets no PONG, and gives up.
    c.expect_bytes_within(b"PING\r\n", Duration::from_secs(5))
        .await;
    let rest = c.read_to_close(Duration::from_secs(10)).await;
    let rest = String::from_utf8_lossy(&rest).replace("PING\r\n", "");
    assert_eq!(rest, "-ERR 'Stale Connection'\r\n");
    assert_clean_log(&srv);
}

#[tokio::test]
async fn server_pings_only_after_connect_and_first_ping_comes_after_about_two_seconds() {
    let srv = start_default().await;
    let mut c = RawClient::connect_to(&srv).await;
    c.answer_pings(false);
    c.read_info().await;
    // Nothing is sent to a client that has not sent CONNECT.
    c.expect_silence(Duration::from_millis(2600)).await;
    c.send("CONNECT {\"verbose\":false}\r\n").await;
    let connected = tokio::time::Instant::now();
    // First PING (RTT measurement) after ~2 s (+ up to 20% jitter), even on a busy connection.
    c.expect_bytes_within(b"PING\r\n", Duration::from_secs(5))
        .await;
    let waited = connected.elapsed();
    assert!(
        waited >= Duration::from_millis(1500) && waited <= Duration::from_secs(4),
        "first server PING after {waited:?}"
    );
    c.send("PONG\r\n").await;
    c.ping_pong().await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn answered_server_pings_keep_the_connection_alive() {
    let srv = start(ServerOptions::with_config(
        "ping_interval: \"1s\"\nping_max: 1\n",
    ))
    .await;
    let mut c = RawClient::connect_to(&srv).await;
    c.answer_pings(false);
    c.read_info().await;
    c.send("CONNECT {\"verbose\":false}\r\n").await;
    for _ in 0..3 {
        c.expect_bytes_within(b"PING\r\n", Duration::from_secs(5))
            .await;
        c.send("PONG\r\n").await;
    }
    c.ping_pong().await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn connection_over_max_connections_gets_info_then_error_and_closes() {
    let srv = start(ServerOptions::with_config("max_connections: 1\n")).await;
    wait_for_no_connections(&srv).await;
    let mut first = RawClient::connected(&srv).await;
    let mut second = RawClient::connect_to(&srv).await;
    second.read_info().await;
    second
        .expect_bytes(b"-ERR 'maximum connections exceeded'\r\n")
        .await;
    second.assert_closed(CLOSE_BOUND).await;
    first.ping_pong().await;
    assert_clean_log(&srv);
}

async fn wait_for_no_connections(srv: &ServerProcess) {
    jetraft_tests::harness::wait_for(
        "no client connections in /varz",
        Duration::from_secs(5),
        || async {
            let v = srv.monitor_json("/varz").await.ok()?;
            (v["connections"] == 0).then_some(())
        },
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// No responders (spec nats-protocol-and-jetstream.md §1.8)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn request_without_responders_gets_503_hmsg_with_exact_bytes() {
    let srv = start_default().await;
    let mut c = RawClient::connected(&srv).await;
    c.send("SUB _INBOX.x 9\r\nPUB nobody.here _INBOX.x 3\r\nreq\r\n")
        .await;
    c.expect_bytes(
        b"HMSG _INBOX.x 9 43 43\r\nNATS/1.0 503\r\nNats-Subject: nobody.here\r\n\r\n\r\n",
    )
    .await;
    // A wildcard inbox subscription matches the reply too; its sid is used.
    c.send("SUB _INBOX.w.* 11\r\nHPUB none.at.all _INBOX.w.7 12 14\r\nNATS/1.0\r\n\r\nhi\r\n")
        .await;
    c.expect_bytes(
        b"HMSG _INBOX.w.7 11 43 43\r\nNATS/1.0 503\r\nNats-Subject: none.at.all\r\n\r\n\r\n",
    )
    .await;
    c.ping_pong().await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn no_503_without_own_reply_subscription_or_without_no_responders() {
    let srv = start_default().await;
    // Publisher has no subscription matching the reply: nothing is sent.
    let mut c = RawClient::connected(&srv).await;
    c.send("PUB nobody.here _INBOX.nosub 1\r\nx\r\n").await;
    assert!(c.read_msgs_until_pong().await.is_empty());
    // Publisher did not ask for no_responders: nothing is sent either.
    let (mut d, _) = RawClient::connect_with(&srv, r#"{"verbose":false,"headers":true}"#).await;
    d.send("SUB _INBOX.y 1\r\nPUB nobody.here _INBOX.y 1\r\nx\r\n")
        .await;
    assert!(d.read_msgs_until_pong().await.is_empty());
    // With a responder present there is no 503, only the reply.
    let mut svc = RawClient::connected(&srv).await;
    svc.send("SUB svc 1\r\n").await;
    svc.ping_pong().await;
    c.send("SUB _INBOX.z 5\r\nPUB svc _INBOX.z 1\r\nq\r\n")
        .await;
    let req = svc.read_msg().await;
    assert_eq!(req.reply.as_deref(), Some("_INBOX.z"));
    svc.send("PUB _INBOX.z 1\r\na\r\n").await;
    svc.ping_pong().await;
    c.expect_bytes(b"MSG _INBOX.z 5 1\r\na\r\n").await;
    assert_clean_log(&srv);
}

/// At `-V` the ops a client sends are traced as nats-server traces them, `<<- [SUB foo 1]`
/// (nats.js's reconnect tests count the `[SUB ...]` lines of the server's log).
#[tokio::test]
async fn trace_shows_client_ops_as_nats_server_does() {
    let srv = start(ServerOptions::default().without_jetstream().args(["-V"])).await;
    let mut c = RawClient::connected(&srv).await;
    c.send("SUB foo 1\r\nSUB bar q 2\r\nUNSUB 1 5\r\nPUB foo r 5\r\nhello\r\nPING\r\n")
        .await;
    // The message (sid 1 may take 5 more) comes before the PONG.
    c.read_until_contains(b"PONG\r\n", CLOSE_BOUND).await;
    let expected = [
        "<<- [SUB foo 1]",
        "<<- [SUB bar q 2]",
        "<<- [UNSUB 1 5]",
        "<<- [PUB foo r 5]",
    ];
    jetraft_tests::harness::wait_for("traced ops", CLOSE_BOUND, || {
        let log = srv.log();
        let done = expected.iter().all(|e| log.contains(e));
        async move { done.then_some(()) }
    })
    .await;
}
