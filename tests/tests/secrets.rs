//! Secrets stay secret: passwords, tokens and private keys configured on the server, and the
//! credentials clients send, never show in `/varz`, `/connz` or the log (traced at `-DV`, so
//! every CONNECT is in it). Runs against nats-server too (`JETRAFT_TEST_SERVER=nats-server`).

use std::time::Duration;

use async_nats::ConnectOptions;
use jetraft_tests::harness::certs::{CertSpec, TestCa, tls_block};
use jetraft_tests::harness::{RawClient, ServerOptions, ServerProcess, round_trip};

const OP: Duration = Duration::from_secs(5);
const PASSWORD: &str = "pw-7f3a9c1e-never-shown";
const WRONG_PASSWORD: &str = "guess-b2d4e6f8-never-shown";

#[tokio::test]
async fn configured_and_sent_secrets_stay_out_of_monitoring_and_logs() {
    let mut ca = TestCa::new("secrets").expect("ca");
    let server = ca.issue(&CertSpec::localhost()).expect("cert");
    let key_pem = std::fs::read_to_string(&server.key).expect("key");
    // The base64 body of the private key, without the PEM armour lines.
    let key_body: String = key_pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    let config = format!(
        "{}authorization {{ users: [ {{ user: app, password: \"{PASSWORD}\" }} ] }}\n",
        tls_block(&server, "")
    );
    let srv = ServerProcess::start(
        ServerOptions::with_config(config)
            .without_jetstream()
            .args(["-DV"]),
    )
    .await
    .expect("start server");
    let nc = ConnectOptions::new()
        .user_and_password("app".into(), PASSWORD.into())
        .require_tls(true)
        .add_root_certificates(ca.ca_file.clone())
        .connection_timeout(OP)
        .connect(srv.client_url())
        .await
        .expect("connect");
    round_trip(&nc).await;
    // A failed login over plaintext: the wrong password must not be echoed anywhere either.
    let mut raw = RawClient::connect_to(&srv).await;
    raw.read_line().await;
    raw.send(format!(
        "CONNECT {{\"user\":\"app\",\"pass\":\"{WRONG_PASSWORD}\"}}\r\n"
    ))
    .await;
    let varz = srv.http_get("/varz").await.expect("varz").body;
    let connz = srv
        .http_get("/connz?auth=true&subs=1")
        .await
        .expect("connz")
        .body;
    let log = srv.log();
    for (what, text) in [("/varz", &varz), ("/connz", &connz), ("log", &log)] {
        assert!(!text.contains(PASSWORD), "{what} shows the password");
        assert!(
            !text.contains(WRONG_PASSWORD),
            "{what} shows a client's password"
        );
        assert!(
            !text.contains(&key_body[..40]),
            "{what} shows the private key"
        );
    }
    assert!(
        connz.contains("\"app\"") || !connz.contains("authorized_user"),
        "{connz}"
    );
}
