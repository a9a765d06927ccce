//! Accounts on one node: isolated subject namespaces, service and stream imports, no_auth_user,
//! default_permissions, deny-wins, queue permissions, allow_responses, and JetStream answers in
//! an account without JetStream. Runs against nats-server too
//! (`JETRAFT_TEST_SERVER=nats-server NATS_SERVER_BIN=...`).

use std::time::Duration;

use futures_util::StreamExt as _;
use jetraft_tests::harness::{RawClient, ServerOptions, ServerProcess, login, round_trip, within};

const OP: Duration = Duration::from_secs(5);

/// Accounts A (exports services and a stream), B (imports them), C (nothing) and $G users.
pub const CONFIG: &str = r#"
accounts {
  A: {
    users: [ { user: a, password: a } ]
    exports: [
      { service: "svc.>" }
      { stream: "ev.>" }
      { stream: "private.>", accounts: [C] }
    ]
  }
  B: {
    users: [ { user: b, password: b } ]
    imports: [
      { service: { account: A, subject: "svc.time" }, to: "time.now" }
      { service: { account: A, subject: "svc.echo.*" } }
      { stream: { account: A, subject: "ev.>" }, prefix: "from_a" }
    ]
  }
  C: {
    users: [ { user: c, password: c } ]
    default_permissions: { publish: { deny: "forbidden.>" } }
  }
  D: {
    users: [
      { user: deny, password: deny, permissions: { subscribe: { allow: "a.>", deny: "a.secret" } } }
      { user: queue, password: queue, permissions: { subscribe: { allow: ["work workers", "jobs.*"] } } }
      { user: resp, password: resp, permissions: { subscribe: "req", allow_responses: true } }
      { user: d, password: d }
    ]
  }
}
authorization { users: [ { user: g, password: g } ] }
"#;

async fn start(config: &str, jetstream: bool) -> ServerProcess {
    let opts = ServerOptions::with_config(config);
    let opts = if jetstream {
        opts
    } else {
        opts.without_jetstream()
    };
    ServerProcess::start(opts).await.expect("start server")
}

/// A raw protocol client logged in as `user` (password = user name), CONNECT answered.
async fn raw_login(srv: &ServerProcess, user: &str) -> RawClient {
    let mut raw = RawClient::connect_to(srv).await;
    raw.read_info().await;
    raw.send(format!(
        "CONNECT {{\"verbose\":false,\"pedantic\":false,\"user\":\"{user}\",\"pass\":\"{user}\",\"headers\":true}}\r\nPING\r\n"
    ))
    .await;
    assert_eq!(raw.read_line().await, "PONG", "login of {user}");
    raw
}

/// The next message of `sub`, within [`OP`].
async fn next(sub: &mut async_nats::Subscriber, what: &str) -> async_nats::Message {
    within(OP, what, sub.next())
        .await
        .unwrap_or_else(|| panic!("{what}: subscription ended"))
}

#[tokio::test]
async fn a_subscriber_never_sees_another_accounts_messages() {
    let srv = start(CONFIG, false).await;
    let a = login(&srv, "a").await;
    let c = login(&srv, "c").await;
    let g = login(&srv, "g").await;
    let mut in_a = a.subscribe("x.>").await.expect("sub a");
    let mut in_c = c.subscribe("x.>").await.expect("sub c");
    let mut in_g = g.subscribe("x.>").await.expect("sub g");
    for nc in [&a, &c, &g] {
        round_trip(nc).await;
    }
    // Each account publishes on the same subject; every subscriber sees only its own account's.
    for (nc, who) in [(&c, "c"), (&g, "g"), (&a, "a")] {
        nc.publish("x.same", who.into()).await.expect("publish");
        round_trip(nc).await;
    }
    for (sub, who) in [(&mut in_a, "a"), (&mut in_c, "c"), (&mut in_g, "g")] {
        // Published after the others were acknowledged: had anything crossed, it would come
        // before this one.
        let sentinel = format!("{who}-last");
        let nc = match who {
            "a" => &a,
            "c" => &c,
            _ => &g,
        };
        nc.publish("x.sentinel", sentinel.clone().into())
            .await
            .expect("sentinel");
        let first = next(sub, "own message").await;
        assert_eq!(
            first.payload.as_ref(),
            who.as_bytes(),
            "{who} saw another account"
        );
        let second = next(sub, "sentinel").await;
        assert_eq!(second.payload.as_ref(), sentinel.as_bytes(), "{who}");
    }
}

#[tokio::test]
async fn a_service_import_maps_the_request_and_returns_the_reply() {
    let srv = start(CONFIG, false).await;
    let a = login(&srv, "a").await;
    let b = login(&srv, "b").await;
    let mut svc = a.subscribe("svc.>").await.expect("responder");
    round_trip(&a).await;
    let responder = tokio::spawn({
        let a = a.clone();
        async move {
            for _ in 0..2 {
                let Some(req) = svc.next().await else { return };
                let reply = req.reply.clone().expect("request has a reply subject");
                // The responder sees the exporter's subject and a reply subject of its own
                // account, not the requester's inbox.
                let body = format!("{}|{}", req.subject, reply.starts_with("_INBOX."));
                a.publish(reply, body.into()).await.expect("respond");
                a.flush().await.expect("flush");
            }
        }
    });
    let answer = within(OP, "request", b.request("time.now", "hi".into()))
        .await
        .expect("answered through the import");
    assert_eq!(
        std::str::from_utf8(&answer.payload).unwrap(),
        "svc.time|false"
    );
    let answer = within(OP, "request", b.request("svc.echo.7", "hi".into()))
        .await
        .expect("wildcard import without mapping");
    assert_eq!(
        std::str::from_utf8(&answer.payload).unwrap(),
        "svc.echo.7|false"
    );
    within(OP, "responder", responder).await.expect("responder");
    // Only what is imported crosses: B's request on the exporter's own subject has no responder.
    let err = within(OP, "request", b.request("svc.time", "hi".into()))
        .await
        .expect_err("svc.time is not a subject of B");
    assert_eq!(err.kind(), async_nats::RequestErrorKind::NoResponders);
}

/// Accounts for `Nats-Request-Info`: S serves `q.>` and `deep.>`, re-exporting `deep.>` which it
/// imports from E; R imports both from S.
const REQUEST_INFO_CONFIG: &str = r#"
accounts {
  E: {
    users: [ { user: e, password: e } ]
    exports: [ { service: "deep.>" } ]
  }
  S: {
    users: [ { user: s, password: s } ]
    exports: [ { service: "q.>" }, { service: "deep.>" } ]
    imports: [ { service: { account: E, subject: "deep.>" } } ]
  }
  R: {
    users: [ { user: r, password: r } ]
    imports: [
      { service: { account: S, subject: "q.>" } }
      { service: { account: S, subject: "deep.>" } }
    ]
  }
}
"#;

/// Whether `json` is a request stamp of account `acc` exactly as nats-server writes it without
/// `share`: `{"acc":"<acc>"`, then `"svc"` for a chained request, then `"rtt"` (nanoseconds:
/// estimated at CONNECT, before any PING measured it), and nothing else.
fn is_stamp(json: &str, acc: &str, svc: Option<&str>) -> bool {
    let mut head = format!("{{\"acc\":\"{acc}\"");
    if let Some(svc) = svc {
        head.push_str(&format!(",\"svc\":\"{svc}\""));
    }
    json.strip_prefix(&head)
        .and_then(|rest| rest.strip_prefix(",\"rtt\":"))
        .and_then(|r| r.strip_suffix('}'))
        .is_some_and(|n| n.parse::<u64>().is_ok_and(|n| n > 0))
}

/// The `Nats-Request-Info` value of a raw header block, if it has one (other lines must come
/// first, in the order sent).
fn request_info(block: &[u8], others: &[&str]) -> Option<String> {
    let text = std::str::from_utf8(block).expect("utf-8 headers");
    let body = text
        .strip_prefix("NATS/1.0\r\n")
        .and_then(|t| t.strip_suffix("\r\n\r\n"))?;
    let lines: Vec<&str> = body.split("\r\n").collect();
    let (last, first) = lines.split_last()?;
    assert_eq!(first, others, "other header lines kept, in order: {text:?}");
    last.strip_prefix("Nats-Request-Info: ").map(str::to_string)
}

#[tokio::test]
async fn a_request_through_a_service_import_carries_the_requesters_info() {
    let srv = start(REQUEST_INFO_CONFIG, false).await;
    let mut s = raw_login(&srv, "s").await;
    let mut e = raw_login(&srv, "e").await;
    s.send("SUB q.> 1\r\nPING\r\n").await;
    assert_eq!(s.read_line().await, "PONG");
    e.send("SUB deep.> 1\r\nPING\r\n").await;
    assert_eq!(e.read_line().await, "PONG");
    let mut r = raw_login(&srv, "r").await;
    r.send("SUB _INBOX.r.3 9\r\n").await;
    // Plain, with headers of its own, and with a forged stamp (replaced, not trusted).
    r.send("PUB q.plain _INBOX.r.1 2\r\nhi\r\n").await;
    let forged = "NATS/1.0\r\nNats-Request-Info: {\"acc\":\"S\"}\r\n\r\n";
    for (subject, block) in [
        ("q.hdrs _INBOX.r.2", "NATS/1.0\r\nX: 1\r\n\r\n"),
        ("q.forged", forged),
    ] {
        let (h, t) = (block.len(), block.len() + 2);
        r.send(format!("HPUB {subject} {h} {t}\r\n{block}hi\r\n"))
            .await;
    }
    // No reply subject: still stamped (it is a request all the same).
    r.send("PUB q.noreply 2\r\nhi\r\n").await;
    r.send("PUB deep.x _INBOX.r.3 2\r\nhi\r\nPING\r\n").await;
    assert_eq!(r.read_line().await, "PONG");
    let mut seen = Vec::new();
    for _ in 0..4 {
        let m = s.read_msg_within(OP).await;
        assert_eq!(m.payload, b"hi", "{m:?}");
        let others: &[&str] = if m.subject == "q.hdrs" {
            &["X: 1"]
        } else {
            &[]
        };
        let block = m
            .headers
            .as_deref()
            .unwrap_or_else(|| panic!("no headers: {m:?}"));
        let info = request_info(block, others).unwrap_or_else(|| panic!("no stamp: {m:?}"));
        assert!(is_stamp(&info, "R", None), "{}: {info}", m.subject);
        seen.push(m.subject);
    }
    assert_eq!(seen, ["q.plain", "q.hdrs", "q.forged", "q.noreply"]);
    // Through two imports (R -> S -> E): the requester's stamp, naming S as the service.
    let m = e.read_msg_within(OP).await;
    assert_eq!(m.subject, "deep.x");
    let block = m.headers.as_deref().expect("headers");
    let info = request_info(block, &[]).expect("stamp");
    assert!(is_stamp(&info, "R", Some("S")), "chained: {info}");
    // The answer goes back without a stamp.
    let reply = m.reply.expect("reply subject");
    e.send(format!("PUB {reply} 2\r\nok\r\n")).await;
    let answer = r.read_msg_within(OP).await;
    assert_eq!(
        (
            answer.subject.as_str(),
            answer.headers,
            answer.payload.as_slice()
        ),
        ("_INBOX.r.3", None, &b"ok"[..])
    );
}

#[tokio::test]
async fn a_stream_import_delivers_with_the_prefix() {
    let srv = start(CONFIG, false).await;
    let a = login(&srv, "a").await;
    let b = login(&srv, "b").await;
    let c = login(&srv, "c").await;
    let mut in_b = b.subscribe("from_a.>").await.expect("sub b");
    let mut in_c = c.subscribe("ev.>").await.expect("sub c");
    round_trip(&b).await;
    round_trip(&c).await;
    a.publish("ev.orders.1", "o1".into()).await.expect("pub");
    a.publish("other.x", "not exported".into())
        .await
        .expect("pub");
    a.publish("ev.orders.2", "o2".into()).await.expect("pub");
    round_trip(&a).await;
    let m = next(&mut in_b, "imported").await;
    assert_eq!(
        (m.subject.as_str(), m.payload.as_ref()),
        ("from_a.ev.orders.1", &b"o1"[..])
    );
    let m = next(&mut in_b, "imported").await;
    assert_eq!(m.subject.as_str(), "from_a.ev.orders.2");
    // C imports nothing: its first message on A's subjects is its own.
    c.publish("ev.mine", "c".into()).await.expect("pub");
    let m = next(&mut in_c, "own").await;
    assert_eq!(m.subject.as_str(), "ev.mine");
}

#[tokio::test]
async fn a_client_without_credentials_is_the_no_auth_user() {
    let config = format!("{CONFIG}\nno_auth_user: b\n");
    let srv = start(&config, false).await;
    let mut raw = RawClient::connect_to(&srv).await;
    let info = raw.read_info().await;
    assert_ne!(
        info["auth_required"],
        serde_json::Value::Bool(true),
        "a client without credentials may connect"
    );
    drop(raw);
    let a = login(&srv, "a").await;
    let mut svc = a.subscribe("svc.time").await.expect("responder");
    round_trip(&a).await;
    let anon = within(
        OP,
        "connect",
        Box::pin(async_nats::connect(srv.client_url())),
    )
    .await
    .expect("connect without credentials");
    let req = tokio::spawn(async move { anon.request("time.now", "?".into()).await });
    let m = next(&mut svc, "request of the no_auth_user").await;
    a.publish(m.reply.expect("reply"), "now".into())
        .await
        .expect("respond");
    let answer = within(OP, "answer", req)
        .await
        .expect("join")
        .expect("answered: the anonymous client is in B");
    assert_eq!(answer.payload.as_ref(), b"now");
}

#[tokio::test]
async fn default_permissions_apply_to_users_without_their_own() {
    let srv = start(CONFIG, false).await;
    let mut c = raw_login(&srv, "c").await;
    c.send("PUB forbidden.x 2\r\nhi\r\nPING\r\n").await;
    assert_eq!(
        c.read_line().await,
        "-ERR 'Permissions Violation for Publish to \"forbidden.x\"'"
    );
    assert_eq!(c.read_line().await, "PONG");
    c.send("SUB ok 1\r\nPUB ok 2\r\nhi\r\nPING\r\n").await;
    assert!(c.read_line().await.starts_with("MSG ok 1 2"));
}

#[tokio::test]
async fn deny_wins_over_allow_for_subscriptions_and_deliveries() {
    let srv = start(CONFIG, false).await;
    let mut raw = raw_login(&srv, "deny").await;
    raw.send("SUB a.secret 1\r\nPING\r\n").await;
    assert_eq!(
        raw.read_line().await,
        "-ERR 'Permissions Violation for Subscription to \"a.secret\"'"
    );
    assert_eq!(raw.read_line().await, "PONG");
    // The wildcard is allowed, but the denied subject is never delivered through it.
    raw.send("SUB a.> 2\r\nPING\r\n").await;
    assert_eq!(raw.read_line().await, "PONG");
    let d = login(&srv, "d").await;
    d.publish("a.secret", "no".into()).await.expect("pub");
    d.publish("a.public", "yes".into()).await.expect("pub");
    round_trip(&d).await;
    let line = raw.read_line().await;
    assert!(line.starts_with("MSG a.public 2 "), "{line}");
}

#[tokio::test]
async fn queue_permissions_name_the_queue_group() {
    let srv = start(CONFIG, false).await;
    let mut raw = raw_login(&srv, "queue").await;
    raw.send("SUB work workers 1\r\nPING\r\n").await;
    assert_eq!(raw.read_line().await, "PONG");
    raw.send("SUB work others 2\r\nPING\r\n").await;
    assert_eq!(
        raw.read_line().await,
        "-ERR 'Permissions Violation for Subscription to \"work\" using queue \"others\"'"
    );
    assert_eq!(raw.read_line().await, "PONG");
    raw.send("SUB work 3\r\nPING\r\n").await;
    assert_eq!(
        raw.read_line().await,
        "-ERR 'Permissions Violation for Subscription to \"work\"'"
    );
    assert_eq!(raw.read_line().await, "PONG");
    raw.send("SUB jobs.1 any 4\r\nSUB jobs.2 5\r\nPING\r\n")
        .await;
    assert_eq!(raw.read_line().await, "PONG");
}

#[tokio::test]
async fn allow_responses_lets_a_responder_answer_once() {
    let srv = start(CONFIG, false).await;
    let mut resp = raw_login(&srv, "resp").await;
    resp.send("SUB req 1\r\nPUB elsewhere 1\r\nx\r\nPING\r\n")
        .await;
    assert_eq!(
        resp.read_line().await,
        "-ERR 'Permissions Violation for Publish to \"elsewhere\"'"
    );
    assert_eq!(resp.read_line().await, "PONG");
    let d = login(&srv, "d").await;
    let mut inbox = d.subscribe("reply.inbox").await.expect("inbox");
    round_trip(&d).await;
    d.publish_with_reply("req", "reply.inbox", "q".into())
        .await
        .expect("request");
    round_trip(&d).await;
    let line = resp.read_line().await;
    assert_eq!(line, "MSG req 1 reply.inbox 1");
    assert_eq!(resp.read_line().await, "q");
    resp.send("PUB reply.inbox 3\r\nans\r\nPUB reply.inbox 4\r\nans2\r\nPING\r\n")
        .await;
    assert_eq!(
        resp.read_line().await,
        "-ERR 'Permissions Violation for Publish to \"reply.inbox\"'",
        "max 1 response per request"
    );
    assert_eq!(resp.read_line().await, "PONG");
    let m = next(&mut inbox, "answer").await;
    assert_eq!(m.payload.as_ref(), b"ans");
}

#[tokio::test]
async fn jetstream_in_an_account_without_it_answers_10039() {
    let srv = start(CONFIG, true).await;
    let a = login(&srv, "a").await;
    let answer = within(OP, "INFO", a.request("$JS.API.INFO", "".into()))
        .await
        .expect("answered");
    let json: serde_json::Value = serde_json::from_slice(&answer.payload).expect("json");
    assert_eq!(
        json["type"],
        "io.nats.jetstream.api.v1.account_info_response"
    );
    assert_eq!(json["error"]["code"], 503);
    assert_eq!(json["error"]["err_code"], 10039);
    assert_eq!(
        json["error"]["description"],
        "JetStream not enabled for account"
    );
    let answer = within(
        OP,
        "create",
        a.request("$JS.API.STREAM.CREATE.S", "{}".into()),
    )
    .await
    .expect("answered");
    let json: serde_json::Value = serde_json::from_slice(&answer.payload).expect("json");
    assert_eq!(
        json["type"],
        "io.nats.jetstream.api.v1.stream_create_response"
    );
    assert_eq!(json["error"]["err_code"], 10039);
    let answer = within(OP, "names", a.request("$JS.API.STREAM.NAMES", "".into()))
        .await
        .expect("answered");
    let json: serde_json::Value = serde_json::from_slice(&answer.payload).expect("json");
    assert_eq!(
        json["type"],
        "io.nats.jetstream.api.v1.stream_names_response"
    );
    assert_eq!(json["error"]["err_code"], 10039);
    assert_eq!(
        (&json["total"], &json["streams"]),
        (&0.into(), &serde_json::Value::Null)
    );
    let err = within(
        OP,
        "direct get",
        a.request("$JS.API.DIRECT.GET.S", "{}".into()),
    )
    .await
    .expect_err("no responders for direct gets");
    assert_eq!(err.kind(), async_nats::RequestErrorKind::NoResponders);
}

#[tokio::test]
async fn an_import_of_what_is_not_exported_refuses_to_start() {
    let config = "accounts {\n  A: { exports: [ {service: \"svc.>\"} ] }\n  B: { users: [{user: b, password: b}], imports: [ {service: {account: A, subject: \"other.>\"}} ] }\n}\n";
    let err = ServerProcess::start(ServerOptions::with_config(config).without_jetstream())
        .await
        .err()
        .expect("the server must refuse to start");
    let text = format!("{err:#}");
    assert!(
        text.contains("Error adding service import \"other.>\": service import not authorized"),
        "{text}"
    );
}

#[tokio::test]
async fn connz_names_the_account_of_each_connection() {
    let srv = start(CONFIG, false).await;
    let a = login(&srv, "a").await;
    let g = login(&srv, "g").await;
    round_trip(&a).await;
    round_trip(&g).await;
    let v = srv.monitor_json("/connz?auth=1").await.expect("connz");
    let conns = v["connections"].as_array().expect("connections");
    let account_of = |user: &str| {
        conns
            .iter()
            .find(|c| c["authorized_user"] == user)
            .unwrap_or_else(|| panic!("{user} listed: {v}"))["account"]
            .clone()
    };
    assert_eq!(account_of("a"), "A");
    assert_eq!(account_of("g"), serde_json::Value::Null, "$G is not named");
}
