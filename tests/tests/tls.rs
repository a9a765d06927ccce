//! Client TLS (single node): the NATS upgrade (INFO in plaintext, then TLS), TLS first,
//! `allow_non_tls`, client certificates (`verify`) and their mapping to users
//! (`verify_and_map`), the refusals (wrong CA, expired, wrong host, plaintext client), and the
//! monitoring port over HTTPS. Certificates are generated at test time.
//!
//! Run against nats-server too (`JETRAFT_TEST_SERVER=nats-server`): the expectations hold for
//! both.

use std::time::Duration;

use async_nats::ConnectOptions;
use futures_util::StreamExt as _;
use jetraft_tests::harness::certs::{CertFiles, CertSpec, TestCa, tls_block};
use jetraft_tests::harness::cluster::read_info;
use jetraft_tests::harness::http::https_get;
use jetraft_tests::harness::{ServerOptions, ServerProcess, round_trip, wait_for, within};
use rcgen::DnType;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const OP: Duration = Duration::from_secs(5);

/// A CA and a server certificate for 127.0.0.1 issued by it.
fn ca_and_server() -> (TestCa, CertFiles) {
    let mut ca = TestCa::new("tls").expect("ca");
    let server = ca.issue(&CertSpec::localhost()).expect("server cert");
    (ca, server)
}

async fn start(config: String) -> ServerProcess {
    ServerProcess::start(ServerOptions::with_config(config).without_jetstream())
        .await
        .expect("start server")
}

/// Connects with `opts`; `Err` carries the client's error text.
async fn try_connect(
    srv: &ServerProcess,
    opts: ConnectOptions,
) -> Result<async_nats::Client, String> {
    let opts = opts.connection_timeout(OP);
    match tokio::time::timeout(OP * 2, opts.connect(srv.client_url())).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("connect timed out".into()),
    }
}

/// Options trusting `ca` and requiring TLS.
fn tls_opts(ca: &TestCa) -> ConnectOptions {
    ConnectOptions::new()
        .require_tls(true)
        .add_root_certificates(ca.ca_file.clone())
}

/// A message published by `nc` comes back on its own subscription.
async fn assert_round_trip(nc: &async_nats::Client, subject: &str) {
    let mut sub = nc.subscribe(subject.to_string()).await.expect("subscribe");
    nc.flush().await.expect("flush");
    nc.publish(subject.to_string(), "over tls".into())
        .await
        .expect("publish");
    let msg = within(OP, "message over TLS", sub.next())
        .await
        .expect("message");
    assert_eq!(msg.payload.as_ref(), b"over tls");
}

#[tokio::test]
async fn tls_client_round_trip_and_info_flags() {
    let (ca, server) = ca_and_server();
    let srv = start(tls_block(&server, "")).await;
    let info = read_info(&srv.client_addr()).await.expect("info");
    assert_eq!(info["tls_required"], true, "{info}");
    assert!(info.get("tls_verify").is_none(), "{info}");
    assert!(info.get("tls_available").is_none(), "{info}");
    let nc = try_connect(&srv, tls_opts(&ca)).await.expect("TLS connect");
    assert_round_trip(&nc, "tls.basic").await;
    let connz = srv.monitor_json("/connz").await.expect("connz");
    let conn = &connz["connections"][0];
    assert_eq!(conn["tls_version"], "1.3", "{connz}");
    assert!(
        conn["tls_cipher_suite"]
            .as_str()
            .is_some_and(|s| s.starts_with("TLS_")),
        "{connz}"
    );
}

#[tokio::test]
async fn plaintext_client_to_tls_server_is_closed_without_err() {
    let (_ca, server) = ca_and_server();
    let srv = start(tls_block(&server, "")).await;
    let mut sock = tokio::net::TcpStream::connect(srv.client_addr())
        .await
        .expect("tcp connect");
    let mut info = Vec::new();
    within(OP, "INFO", async {
        while !info.ends_with(b"\r\n") {
            let mut chunk = [0u8; 1024];
            let n = sock.read(&mut chunk).await.expect("read INFO");
            assert!(n > 0, "closed before INFO");
            info.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    assert!(
        info.starts_with(b"INFO "),
        "{}",
        String::from_utf8_lossy(&info)
    );
    sock.write_all(b"CONNECT {\"verbose\":false}\r\nPING\r\n")
        .await
        .expect("send CONNECT");
    // The server takes it as a broken handshake: it closes without a word (no -ERR, no PONG).
    let mut rest = Vec::new();
    let read = within(OP, "close", sock.read_to_end(&mut rest)).await;
    assert!(
        read.is_err() || rest.is_empty(),
        "expected a silent close, got {:?}",
        String::from_utf8_lossy(&rest)
    );
    wait_for("handshake error in the log", OP, || async {
        srv.log().contains("TLS handshake error").then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_client_trusting_another_ca_is_refused() {
    let (_ca, server) = ca_and_server();
    let other = TestCa::new("other").expect("other ca");
    let srv = start(tls_block(&server, "")).await;
    let err = try_connect(&srv, tls_opts(&other))
        .await
        .expect_err("a server certificate from an unknown CA must be refused");
    assert!(!err.is_empty());
}

#[tokio::test]
async fn an_expired_server_certificate_is_refused() {
    let mut ca = TestCa::new("expired").expect("ca");
    let server = ca
        .issue(&CertSpec {
            expired: true,
            ..CertSpec::localhost()
        })
        .expect("cert");
    let srv = start(tls_block(&server, "")).await;
    try_connect(&srv, tls_opts(&ca))
        .await
        .expect_err("an expired server certificate must be refused");
}

#[tokio::test]
async fn a_certificate_for_another_host_is_refused() {
    let mut ca = TestCa::new("host").expect("ca");
    let server = ca
        .issue(&CertSpec {
            hosts: vec!["nats.example.com".into()],
            ..CertSpec::localhost()
        })
        .expect("cert");
    let srv = start(tls_block(&server, "")).await;
    try_connect(&srv, tls_opts(&ca))
        .await
        .expect_err("a certificate not naming 127.0.0.1 must be refused");
}

#[tokio::test]
async fn verify_requires_a_client_certificate_from_the_ca() {
    let (mut ca, server) = ca_and_server();
    let client = ca
        .issue(&CertSpec::client(&[(DnType::CommonName, "app")]))
        .expect("client cert");
    let mut other = TestCa::new("rogue").expect("rogue ca");
    let rogue = other
        .issue(&CertSpec::client(&[(DnType::CommonName, "app")]))
        .expect("rogue cert");
    let ca_line = format!("ca_file: \"{}\"\n  verify: true", ca.ca_file.display());
    let srv = start(tls_block(&server, &ca_line)).await;
    let info = read_info(&srv.client_addr()).await.expect("info");
    assert_eq!(info["tls_verify"], true, "{info}");
    try_connect(&srv, tls_opts(&ca))
        .await
        .expect_err("no client certificate must be refused");
    try_connect(
        &srv,
        tls_opts(&ca).add_client_certificate(rogue.cert.clone(), rogue.key.clone()),
    )
    .await
    .expect_err("a client certificate from another CA must be refused");
    let nc = try_connect(
        &srv,
        tls_opts(&ca).add_client_certificate(client.cert.clone(), client.key.clone()),
    )
    .await
    .expect("a client certificate from the CA is accepted");
    assert_round_trip(&nc, "tls.verified").await;
}

#[tokio::test]
async fn verify_and_map_names_the_user_by_subject_or_email() {
    let (mut ca, server) = ca_and_server();
    let alice = ca
        .issue(&CertSpec::client(&[
            (DnType::OrganizationName, "Acme"),
            (DnType::CommonName, "alice"),
        ]))
        .expect("alice");
    let bob = ca
        .issue(&CertSpec {
            emails: vec!["bob@example.com".into()],
            ..CertSpec::client(&[(DnType::CommonName, "bob")])
        })
        .expect("bob");
    let mallory = ca
        .issue(&CertSpec::client(&[(DnType::CommonName, "mallory")]))
        .expect("mallory");
    let config = format!(
        "{}authorization {{ users: [\n  {{ user: \"CN=alice,O=Acme\" }}\n  \
         {{ user: \"bob@example.com\", permissions: {{ publish: \"bob.>\", subscribe: \"bob.>\" }} }}\n] }}\n",
        tls_block(
            &server,
            &format!(
                "ca_file: \"{}\"\n  verify_and_map: true",
                ca.ca_file.display()
            )
        )
    );
    let srv = start(config).await;
    let with = |c: &CertFiles| tls_opts(&ca).add_client_certificate(c.cert.clone(), c.key.clone());
    let nc = try_connect(&srv, with(&alice))
        .await
        .expect("alice maps by DN");
    assert_round_trip(&nc, "anything.alice").await;
    let nc = try_connect(&srv, with(&bob))
        .await
        .expect("bob maps by e-mail");
    assert_round_trip(&nc, "bob.x").await;
    let err = try_connect(&srv, with(&mallory))
        .await
        .expect_err("an unmapped subject is refused");
    assert!(err.to_lowercase().contains("authorization"), "{err}");
}

#[tokio::test]
async fn handshake_first_serves_tls_first_clients() {
    let (ca, server) = ca_and_server();
    let srv = ServerProcess::start(
        ServerOptions::with_config(tls_block(&server, "handshake_first: true"))
            .without_jetstream()
            .tls_first(),
    )
    .await
    .expect("start server");
    let nc = try_connect(&srv, tls_opts(&ca).tls_first())
        .await
        .expect("TLS-first connect");
    assert_round_trip(&nc, "tls.first").await;
    // No plaintext INFO: a client waiting for one hears nothing.
    let mut sock = tokio::net::TcpStream::connect(srv.client_addr())
        .await
        .expect("tcp connect");
    let mut buf = [0u8; 64];
    let got = tokio::time::timeout(Duration::from_millis(500), sock.read(&mut buf)).await;
    assert!(
        !matches!(got, Ok(Ok(n)) if n > 0 && buf.starts_with(b"INFO")),
        "a TLS-first server sent a plaintext INFO"
    );
}

#[tokio::test]
async fn allow_non_tls_takes_both_kinds_of_client() {
    let (ca, server) = ca_and_server();
    let srv = start(format!("{}allow_non_tls: true\n", tls_block(&server, ""))).await;
    let info = read_info(&srv.client_addr()).await.expect("info");
    assert_eq!(info["tls_available"], true, "{info}");
    assert!(info.get("tls_required").is_none(), "{info}");
    let plain = try_connect(&srv, ConnectOptions::new())
        .await
        .expect("plaintext client");
    let secure = try_connect(&srv, tls_opts(&ca)).await.expect("TLS client");
    let mut sub = secure.subscribe("mixed").await.expect("subscribe");
    // A round trip, not `flush` (which only writes): the server has the subscription before
    // the plaintext client publishes (the flake: the message came before the SUB).
    round_trip(&secure).await;
    plain.publish("mixed", "hi".into()).await.expect("publish");
    plain.flush().await.expect("flush");
    let msg = within(OP, "message across", sub.next()).await.expect("msg");
    assert_eq!(msg.payload.as_ref(), b"hi");
}

#[tokio::test]
async fn monitoring_over_https() {
    let (ca, server) = ca_and_server();
    let srv = ServerProcess::start(
        ServerOptions::with_config(tls_block(&server, ""))
            .without_jetstream()
            .https_monitoring(ca.ca_file.clone()),
    )
    .await
    .expect("start server");
    let port = srv.http_port();
    let varz = https_get(port, "/varz", &ca.ca_file)
        .await
        .expect("https /varz");
    assert_eq!(varz.status, 200);
    let json = varz.json().expect("varz json");
    assert_eq!(json["server_name"], srv.name(), "{json}");
    let other = TestCa::new("https-other").expect("ca");
    assert!(
        https_get(port, "/varz", &other.ca_file).await.is_err(),
        "a client trusting another CA must be refused"
    );
}

#[tokio::test]
async fn http_and_https_monitoring_ports_together_are_refused() {
    let (_ca, server) = ca_and_server();
    let port = jetraft_tests::harness::free_port();
    let started = ServerProcess::start(
        ServerOptions::with_config(format!("{}https_port: {port}\n", tls_block(&server, "")))
            .without_jetstream(),
    )
    .await;
    let err = format!("{:#}", started.err().expect("must not start"));
    assert!(err.contains("can't specify both HTTP"), "{err}");
}

#[tokio::test]
async fn a_server_with_an_unreadable_key_does_not_start() {
    let (_ca, server) = ca_and_server();
    let missing = CertFiles {
        cert: server.cert.clone(),
        key: server.key.with_extension("missing"),
    };
    let started = ServerProcess::start(
        ServerOptions::with_config(tls_block(&missing, "")).without_jetstream(),
    )
    .await;
    let err = format!("{:#}", started.err().expect("must not start"));
    assert!(err.contains("exited"), "{err}");
}
