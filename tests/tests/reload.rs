//! Config reload (single node): the server is started with a config file, the file is changed
//! and the server signalled (SIGHUP, or `--signal reload=<pid>` through the binary itself).
//! Users, permissions, limits, TLS certificates and log levels change for the running server;
//! connections that lost their rights are closed or lose what they may no longer hold; a file
//! with an error, or one that changes a setting fixed at startup, is refused whole.
//!
//! Run against nats-server too (`JETRAFT_TEST_SERVER=nats-server`): the expectations hold for
//! both.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_nats::ConnectOptions;
use futures_util::StreamExt as _;
use jetraft_tests::harness::certs::{CertSpec, TestCa, tls_block};
use jetraft_tests::harness::{
    RawClient, ServerOptions, ServerProcess, round_trip, wait_for, within,
};
use rustix::process::Signal;

const OP: Duration = Duration::from_secs(5);
/// Bound on a reload being applied (or refused) after the signal.
const RELOAD: Duration = Duration::from_secs(10);

const APPLIED: &str = "Reloaded server configuration";
const REFUSED: &str = "Failed to reload server configuration";

/// `authorization { users: [...] }` with `users` given as nats-server config entries.
fn users(entries: &[&str]) -> String {
    format!(
        "authorization {{\n  users: [\n    {}\n  ]\n}}\n",
        entries.join("\n    ")
    )
}

async fn start(config: String) -> ServerProcess {
    ServerProcess::start(ServerOptions::with_config(config).without_jetstream())
        .await
        .expect("start server")
}

fn count(srv: &ServerProcess, needle: &str) -> usize {
    srv.log().matches(needle).count()
}

/// How a reload is asked for.
#[derive(Clone, Copy)]
enum Ask {
    /// SIGHUP to the process.
    Hangup,
    /// `<binary> --signal reload=<pid>`.
    SignalFlag,
}

/// Writes `body` as the server's config file, asks for a reload, and waits until the log says
/// it was applied (or refused: then returns the refusal line).
async fn reload_with(srv: &ServerProcess, body: &str, ask: Ask) -> Result<(), String> {
    let (applied, refused) = (count(srv, APPLIED), count(srv, REFUSED));
    // nats-server does not apply `-n` over a reloaded file (it would see a name change).
    let body = format!("server_name: \"{}\"\n{body}", srv.name());
    std::fs::write(srv.dir().join("server.conf"), body).expect("write config file");
    match ask {
        Ask::Hangup => srv.signal(Signal::HUP).expect("SIGHUP"),
        Ask::SignalFlag => {
            let pid = srv.pid().expect("server pid");
            let out = std::process::Command::new(srv.binary())
                .arg("--signal")
                .arg(format!("reload={pid}"))
                .output()
                .expect("run --signal reload");
            assert!(
                out.status.success(),
                "--signal reload failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    wait_for("the reload to be applied or refused", RELOAD, || async {
        if count(srv, APPLIED) > applied {
            return Some(Ok(()));
        }
        if count(srv, REFUSED) > refused {
            let log = srv.log();
            let line = log
                .lines()
                .rev()
                .find(|l| l.contains(REFUSED))
                .unwrap_or("");
            return Some(Err(line.to_string()));
        }
        None
    })
    .await
}

/// Connects an async-nats client with `opts`, within a bounded time.
async fn connect_with(
    opts: ConnectOptions,
    url: String,
) -> Result<async_nats::Client, async_nats::ConnectError> {
    within(OP * 2, "connect", Box::pin(opts.connect(url))).await
}

async fn must_reload(srv: &ServerProcess, body: &str) {
    reload_with(srv, body, Ask::Hangup)
        .await
        .expect("reload applied");
}

/// A raw client authenticated as `user`/`pass` (verbose off, no pedantic).
async fn raw_as(srv: &ServerProcess, user: &str, pass: &str) -> RawClient {
    RawClient::connect_with(
        srv,
        &format!(r#"{{"verbose":false,"pedantic":false,"user":"{user}","pass":"{pass}"}}"#),
    )
    .await
    .0
}

/// Whether `user`/`pass` may connect now (the server answers PING with PONG, not -ERR).
async fn can_connect(srv: &ServerProcess, user: &str, pass: &str) -> bool {
    let mut c = RawClient::connect_to(srv).await;
    c.read_info().await;
    c.send(format!(
        "CONNECT {{\"verbose\":false,\"user\":\"{user}\",\"pass\":\"{pass}\"}}\r\nPING\r\n"
    ))
    .await;
    let line = c.read_line().await;
    match line.as_str() {
        "PONG" => true,
        "-ERR 'Authorization Violation'" => false,
        other => panic!("unexpected answer to CONNECT: {other}"),
    }
}

#[tokio::test]
async fn a_removed_user_is_closed_silently_a_new_user_may_connect_others_stay() {
    let srv = start(users(&[
        "{user: alice, password: a1}",
        "{user: bob, password: b1}",
    ]))
    .await;
    let load_time = |v: &serde_json::Value| v["config_load_time"].as_str().map(str::to_string);
    let before = load_time(&srv.monitor_json("/varz").await.expect("varz"));
    let mut alice = raw_as(&srv, "alice", "a1").await;
    let mut bob = raw_as(&srv, "bob", "b1").await;
    assert!(!can_connect(&srv, "carol", "c1").await);

    must_reload(
        &srv,
        &users(&["{user: alice, password: a1}", "{user: carol, password: c1}"]),
    )
    .await;

    // A removed user's connection is closed without a word (nats-server treats it as moved
    // away); a changed password gets an -ERR (next test).
    bob.assert_closed(OP).await;
    alice.ping_pong().await;
    assert!(can_connect(&srv, "carol", "c1").await);
    assert!(!can_connect(&srv, "bob", "b1").await);
    let after = load_time(&srv.monitor_json("/varz").await.expect("varz"));
    assert!(
        after.is_some() && after != before,
        "{before:?} -> {after:?}"
    );
}

#[tokio::test]
async fn a_changed_password_closes_the_connection_through_signal_reload() {
    let srv = start(users(&[
        "{user: alice, password: old}",
        "{user: bob, password: b1}",
    ]))
    .await;
    let mut alice = raw_as(&srv, "alice", "old").await;
    let mut bob = raw_as(&srv, "bob", "b1").await;
    reload_with(
        &srv,
        &users(&["{user: alice, password: new}", "{user: bob, password: b1}"]),
        Ask::SignalFlag,
    )
    .await
    .expect("reload applied");
    let closing = alice.read_to_close(OP).await;
    assert_eq!(
        String::from_utf8_lossy(&closing),
        "-ERR 'Authorization Violation'\r\n"
    );
    bob.ping_pong().await;
    assert!(can_connect(&srv, "alice", "new").await);
    assert!(!can_connect(&srv, "alice", "old").await);
}

#[tokio::test]
async fn changed_permissions_apply_to_an_open_connection() {
    let open = "{user: alice, password: a1}";
    let narrow = r#"{user: alice, password: a1, permissions: {publish: "ok.>", subscribe: {deny: "watch.>"}}}"#;
    let srv = start(users(&[open])).await;
    let mut alice = raw_as(&srv, "alice", "a1").await;
    alice
        .send("SUB watch.> 1\r\nSUB ok.> 2\r\nPUB no.1 2\r\nhi\r\nPING\r\n")
        .await;
    alice.expect_bytes(b"PONG\r\n").await;

    must_reload(&srv, &users(&[narrow])).await;
    // The subscription the user may no longer hold is removed, with nats-server's -ERR.
    assert_eq!(
        alice.read_line().await,
        r#"-ERR 'Permissions Violation for Subscription to "watch.>" (sid "1")'"#
    );
    alice.send("PUB no.1 2\r\nhi\r\nPING\r\n").await;
    assert_eq!(
        alice.read_line().await,
        r#"-ERR 'Permissions Violation for Publish to "no.1"'"#
    );
    alice.expect_bytes(b"PONG\r\n").await;
    alice.send("PUB ok.1 2\r\nhi\r\nPING\r\n").await;
    let msg = alice.read_msg().await;
    assert_eq!((msg.subject.as_str(), msg.sid.as_str()), ("ok.1", "2"));
    alice.expect_bytes(b"PONG\r\n").await;
    // A new publisher on watch.x reaches nobody on alice's connection any more.
    alice.send("PUB watch.x 2\r\nhi\r\nPING\r\n").await;
    assert_eq!(
        alice.read_line().await,
        r#"-ERR 'Permissions Violation for Publish to "watch.x"'"#
    );
    alice.expect_bytes(b"PONG\r\n").await;

    must_reload(&srv, &users(&[open])).await;
    alice.send("PUB no.1 2\r\nhi\r\nPING\r\n").await;
    alice.expect_bytes(b"PONG\r\n").await;
}

/// Publishes numbered messages on `subject` until `stop` is set (and at least `min` were sent,
/// at most `max`); returns how many.
async fn publish_until(
    nc: async_nats::Client,
    subject: String,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    max: u64,
) -> u64 {
    let mut n = 0u64;
    while n < max && !(stop.load(Ordering::Relaxed) && n > 0) {
        for _ in 0..100 {
            n += 1;
            nc.publish(subject.clone(), n.to_string().into())
                .await
                .expect("publish");
        }
        nc.flush().await.expect("flush");
        sent.store(n, Ordering::Relaxed);
        tokio::task::yield_now().await;
    }
    round_trip(&nc).await;
    n
}

/// Messages each publisher of the permission-change test sends at most.
const PUBLISH_MAX: u64 = 200_000;

#[tokio::test]
async fn a_permission_change_under_load_loses_nothing_for_other_users() {
    let base = [
        "{user: p1, password: p}",
        "{user: p2, password: p}",
        "{user: watcher, password: w}",
    ];
    let victim_open = r#"{user: victim, password: v, permissions: {publish: "victim.>"}}"#;
    let victim_narrow = r#"{user: victim, password: v, permissions: {publish: "other.>"}}"#;
    let with = |victim: &str| {
        let mut all = base.to_vec();
        all.push(victim);
        users(&all)
    };
    let srv = start(with(victim_open)).await;
    let connect = |user: &'static str, pass: &'static str| {
        let url = srv.client_url();
        async move {
            connect_with(
                ConnectOptions::with_user_and_password(user.into(), pass.into())
                    .subscription_capacity(1 << 20),
                url,
            )
            .await
            .expect("connect")
        }
    };
    let watcher = connect("watcher", "w").await;
    let mut sub = watcher.subscribe("load.>").await.expect("subscribe");
    round_trip(&watcher).await;
    let mut victim = raw_as(&srv, "victim", "v").await;
    victim.send("PUB victim.1 2\r\nhi\r\nPING\r\n").await;
    victim.expect_bytes(b"PONG\r\n").await;

    let stop = Arc::new(AtomicBool::new(false));
    let mut publishers = Vec::new();
    let mut progress = Vec::new();
    for (i, user) in ["p1", "p2"].into_iter().enumerate() {
        let nc = connect(user, "p").await;
        let sent = Arc::new(AtomicU64::new(0));
        progress.push(sent.clone());
        publishers.push(tokio::spawn(publish_until(
            nc,
            format!("load.{i}"),
            stop.clone(),
            sent,
            PUBLISH_MAX,
        )));
    }
    let received: [Arc<AtomicU64>; 2] = Default::default();
    let counted = received.clone();
    let counter = tokio::spawn(async move {
        let mut next = [1u64, 1u64];
        while let Some(msg) = sub.next().await {
            let i = usize::from(msg.subject.as_str() == "load.1");
            let n: u64 = std::str::from_utf8(&msg.payload)
                .ok()
                .and_then(|s| s.parse().ok())
                .expect("numbered payload");
            assert_eq!(n, next[i], "publisher {i}: message lost or out of order");
            next[i] += 1;
            counted[i].store(n, Ordering::Relaxed);
        }
    });
    // Reload while both publishers are well under way, then let them go on a little.
    wait_for("publishers under way", Duration::from_secs(20), || async {
        progress
            .iter()
            .all(|p| p.load(Ordering::Relaxed) >= 5_000)
            .then_some(())
    })
    .await;
    must_reload(&srv, &with(victim_narrow)).await;
    let at_reload: Vec<u64> = progress.iter().map(|p| p.load(Ordering::Relaxed)).collect();
    wait_for(
        "publishers go on after the reload",
        Duration::from_secs(20),
        || async {
            // A publisher that reached its end (a slow reload on a busy machine) is done.
            progress
                .iter()
                .zip(&at_reload)
                .all(|(p, r)| p.load(Ordering::Relaxed) >= (r + 5_000).min(PUBLISH_MAX))
                .then_some(())
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let mut sent = Vec::new();
    for p in publishers {
        sent.push(
            within(Duration::from_secs(30), "publisher", p)
                .await
                .expect("publisher task"),
        );
    }
    wait_for(
        "every message delivered",
        Duration::from_secs(30),
        || async {
            (0..2)
                .all(|i| received[i].load(Ordering::Relaxed) == sent[i])
                .then_some(())
        },
    )
    .await;
    assert!(!counter.is_finished(), "the watcher's subscription ended");
    counter.abort();
    // The victim's rights changed meanwhile.
    victim.send("PUB victim.1 2\r\nhi\r\nPING\r\n").await;
    assert_eq!(
        victim.read_line().await,
        r#"-ERR 'Permissions Violation for Publish to "victim.1"'"#
    );
    victim.expect_bytes(b"PONG\r\n").await;
}

#[tokio::test]
async fn max_payload_change_shows_in_new_info_and_applies_to_open_connections() {
    let srv = start("max_payload: 4096\n".to_string()).await;
    let mut open = RawClient::connected(&srv).await;
    must_reload(&srv, "max_payload: 2000\n").await;
    let mut fresh = RawClient::connect_to(&srv).await;
    let info = fresh.read_info().await;
    assert_eq!(info["max_payload"], 2000, "{info}");
    let varz = srv.monitor_json("/varz").await.expect("varz");
    assert_eq!(varz["max_payload"], 2000, "{varz}");
    let big = "x".repeat(3000);
    open.send(format!("PUB big 3000\r\n{big}\r\n")).await;
    let closing = open.read_to_close(OP).await;
    assert!(
        String::from_utf8_lossy(&closing).contains("-ERR 'Maximum Payload Violation'"),
        "{}",
        String::from_utf8_lossy(&closing)
    );
}

#[tokio::test]
async fn a_new_certificate_is_used_for_new_tls_clients_and_old_ones_stay() {
    let mut first_ca = TestCa::new("first").expect("ca");
    let first = first_ca.issue(&CertSpec::localhost()).expect("cert");
    let mut second_ca = TestCa::new("second").expect("ca");
    let second = second_ca.issue(&CertSpec::localhost()).expect("cert");
    let srv = start(tls_block(&first, "")).await;
    let trusting = |ca: &TestCa| {
        ConnectOptions::new()
            .require_tls(true)
            .add_root_certificates(ca.ca_file.clone())
            .connection_timeout(OP)
            .max_reconnects(Some(1))
    };
    let old = connect_with(trusting(&first_ca), srv.client_url())
        .await
        .expect("TLS connect with the first certificate");

    // A certificate that cannot be read refuses the reload; new clients still get the first.
    let missing = jetraft_tests::harness::certs::CertFiles {
        cert: srv.dir().join("missing.pem"),
        key: srv.dir().join("missing.key"),
    };
    reload_with(&srv, &tls_block(&missing, ""), Ask::Hangup)
        .await
        .expect_err("a missing certificate is refused");
    let again = connect_with(trusting(&first_ca), srv.client_url())
        .await
        .expect("TLS connect with the first certificate after the refused reload");
    round_trip(&again).await;

    must_reload(&srv, &tls_block(&second, "")).await;

    let new = connect_with(trusting(&second_ca), srv.client_url())
        .await
        .expect("TLS connect with the second certificate");
    round_trip(&new).await;
    let refused = connect_with(trusting(&first_ca), srv.client_url()).await;
    assert!(
        refused.is_err(),
        "a client trusting only the old CA still connected"
    );
    // The connection made before the swap keeps working.
    let mut sub = old.subscribe("still.here").await.expect("subscribe");
    round_trip(&old).await;
    new.publish("still.here", "yes".into())
        .await
        .expect("publish");
    let msg = within(OP, "message on the old connection", sub.next())
        .await
        .expect("message");
    assert_eq!(msg.payload.as_ref(), b"yes");
}

#[tokio::test]
async fn a_file_with_an_error_is_refused_and_the_running_config_kept() {
    let good = users(&["{user: alice, password: a1}"]);
    let srv = start(good.clone()).await;
    let mut alice = raw_as(&srv, "alice", "a1").await;
    let refusal = reload_with(
        &srv,
        "authorization {\n  users: [ {user: carol, password: c1} \n",
        Ask::Hangup,
    )
    .await
    .expect_err("a broken file is refused");
    assert!(refusal.contains(REFUSED), "{refusal}");
    alice.ping_pong().await;
    assert!(can_connect(&srv, "alice", "a1").await);
    assert!(!can_connect(&srv, "carol", "c1").await);
    // A good file afterwards is applied.
    must_reload(&srv, &users(&["{user: carol, password: c1}"])).await;
    assert!(can_connect(&srv, "carol", "c1").await);
}

#[tokio::test]
async fn a_setting_fixed_at_startup_refuses_the_whole_reload() {
    let srv = start(users(&["{user: alice, password: a1}"])).await;
    let refusal = reload_with(
        &srv,
        &format!(
            "max_pending: 20MB\n{}",
            users(&["{user: alice, password: a1}", "{user: late, password: l1}"])
        ),
        Ask::Hangup,
    )
    .await
    .expect_err("max_pending cannot change at runtime");
    assert!(
        refusal.contains("config reload not supported for MaxPending"),
        "{refusal}"
    );
    assert!(
        !can_connect(&srv, "late", "l1").await,
        "nothing of the refused file applies"
    );
    assert!(can_connect(&srv, "alice", "a1").await);
}

#[tokio::test]
async fn debug_logging_can_be_switched_on() {
    let srv = start("max_payload: 4096\n".to_string()).await;
    let _c = RawClient::connected(&srv).await;
    assert_eq!(count(&srv, "[DBG]"), 0, "debug lines before the reload");
    must_reload(&srv, "max_payload: 4096\ndebug: true\n").await;
    assert!(
        srv.log().contains("Reloaded: debug = true"),
        "{}",
        srv.log()
    );
    let _d = RawClient::connected(&srv).await;
    wait_for("a debug line", OP, || async {
        (count(&srv, "[DBG]") > 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn lowering_max_connections_closes_connections_above_it() {
    let srv = start("max_connections: 10\n".to_string()).await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(RawClient::connected(&srv).await);
    }
    must_reload(&srv, "max_connections: 1\n").await;
    let mut closed = 0;
    for c in &mut clients {
        c.send("PING\r\n").await;
        let line = c.read_line().await;
        if line == "-ERR 'maximum connections exceeded'" {
            c.read_to_close(OP).await;
            closed += 1;
        } else {
            assert_eq!(line, "PONG");
        }
    }
    assert_eq!(closed, 2, "the connections above the new limit are closed");
    let mut late = RawClient::connect_to(&srv).await;
    let closing = late.read_to_close(OP).await;
    assert!(
        String::from_utf8_lossy(&closing).contains("-ERR 'maximum connections exceeded'"),
        "{}",
        String::from_utf8_lossy(&closing)
    );
}

/// A raw client authenticated as the NKEY user `key` (the INFO nonce signed with its seed).
async fn raw_nkey(srv: &ServerProcess, key: &nkeys::KeyPair) -> RawClient {
    use base64::Engine as _;
    let mut c = RawClient::connect_to(srv).await;
    let info = c.read_info().await;
    let nonce = info["nonce"].as_str().expect("INFO nonce").to_string();
    let sig = key.sign(nonce.as_bytes()).expect("sign nonce");
    let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sig);
    c.send(format!(
        "CONNECT {{\"verbose\":false,\"pedantic\":false,\"nkey\":\"{}\",\"sig\":\"{sig}\"}}\r\nPING\r\n",
        key.public_key()
    ))
    .await;
    c.expect_bytes(b"PONG\r\n").await;
    c
}

#[tokio::test]
async fn nkey_users_are_checked_again_with_their_signed_nonce() {
    let kept = nkeys::KeyPair::new_user();
    let removed = nkeys::KeyPair::new_user();
    let nkey_users =
        |entries: &[String]| users(&entries.iter().map(String::as_str).collect::<Vec<_>>());
    let srv = start(nkey_users(&[
        format!("{{nkey: {}}}", kept.public_key()),
        format!("{{nkey: {}}}", removed.public_key()),
    ]))
    .await;
    let mut a = raw_nkey(&srv, &kept).await;
    let mut b = raw_nkey(&srv, &removed).await;
    must_reload(
        &srv,
        &nkey_users(&[format!(
            "{{nkey: {}, permissions: {{publish: \"ok.>\"}}}}",
            kept.public_key()
        )]),
    )
    .await;
    b.assert_closed(OP).await;
    a.send("PUB no.1 2\r\nhi\r\nPING\r\n").await;
    assert_eq!(
        a.read_line().await,
        r#"-ERR 'Permissions Violation for Publish to "no.1"'"#
    );
    a.expect_bytes(b"PONG\r\n").await;
    a.send("PUB ok.1 2\r\nhi\r\nPING\r\n").await;
    a.expect_bytes(b"PONG\r\n").await;
}
