//! NKEY users: the server puts a nonce in INFO, the client signs it with its seed and sends
//! the public key and signature in CONNECT (`nkey`, `sig`), as the official clients do.
//! Runs against nats-server too (`JETRAFT_TEST_SERVER=nats-server`).

use std::time::Duration;

use async_nats::ConnectOptions;
use base64::Engine as _;
use futures_util::StreamExt as _;
use jetraft_tests::harness::{RawClient, ServerOptions, ServerProcess, within};

const OP: Duration = Duration::from_secs(5);

/// A server with two NKEY users: `full` may do anything, `limited` only publish to `ok.>`.
async fn start(full: &nkeys::KeyPair, limited: &nkeys::KeyPair) -> ServerProcess {
    let config = format!(
        "authorization {{ users: [\n  {{ nkey: {} }}\n  {{ nkey: {}, permissions: {{ publish: \"ok.>\" }} }}\n] }}\n",
        full.public_key(),
        limited.public_key()
    );
    ServerProcess::start(ServerOptions::with_config(config).without_jetstream())
        .await
        .expect("start server")
}

async fn connect_with_seed(
    srv: &ServerProcess,
    seed: String,
) -> Result<async_nats::Client, String> {
    let opts = ConnectOptions::new().nkey(seed).connection_timeout(OP);
    match tokio::time::timeout(OP * 2, opts.connect(srv.client_url())).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("connect timed out".into()),
    }
}

#[tokio::test]
async fn a_user_signing_the_nonce_with_its_seed_gets_in() {
    let full = nkeys::KeyPair::new_user();
    let limited = nkeys::KeyPair::new_user();
    let srv = start(&full, &limited).await;
    let nc = connect_with_seed(&srv, full.seed().expect("seed"))
        .await
        .expect("NKEY connect");
    let mut sub = nc.subscribe("any.subject").await.expect("subscribe");
    nc.flush().await.expect("flush");
    nc.publish("any.subject", "signed".into())
        .await
        .expect("publish");
    let msg = within(OP, "message", sub.next()).await.expect("msg");
    assert_eq!(msg.payload.as_ref(), b"signed");
}

#[tokio::test]
async fn an_unknown_key_is_refused() {
    let full = nkeys::KeyPair::new_user();
    let limited = nkeys::KeyPair::new_user();
    let srv = start(&full, &limited).await;
    let stranger = nkeys::KeyPair::new_user();
    let err = connect_with_seed(&srv, stranger.seed().expect("seed"))
        .await
        .expect_err("an unknown NKEY must be refused");
    assert!(err.to_lowercase().contains("authorization"), "{err}");
}

#[tokio::test]
async fn nkey_permissions_apply() {
    let full = nkeys::KeyPair::new_user();
    let limited = nkeys::KeyPair::new_user();
    let srv = start(&full, &limited).await;
    let watcher = connect_with_seed(&srv, full.seed().expect("seed"))
        .await
        .expect("full");
    let mut sub = watcher.subscribe(">").await.expect("subscribe");
    watcher.flush().await.expect("flush");
    let nc = connect_with_seed(&srv, limited.seed().expect("seed"))
        .await
        .expect("limited");
    nc.publish("denied.x", "no".into()).await.expect("publish");
    nc.publish("ok.x", "yes".into()).await.expect("publish");
    nc.flush().await.expect("flush");
    let msg = within(OP, "allowed message", sub.next())
        .await
        .expect("msg");
    assert_eq!(
        msg.subject.as_str(),
        "ok.x",
        "the denied publish was delivered"
    );
}

/// INFO's nonce, read by a raw client.
async fn nonce_of(raw: &mut RawClient) -> String {
    let info = raw.read_line().await;
    let json: serde_json::Value =
        serde_json::from_str(info.trim_start_matches("INFO ").trim()).expect("INFO json");
    json["nonce"]
        .as_str()
        .expect("INFO has a nonce")
        .to_string()
}

#[tokio::test]
async fn a_bad_signature_is_an_authorization_violation() {
    let full = nkeys::KeyPair::new_user();
    let limited = nkeys::KeyPair::new_user();
    let srv = start(&full, &limited).await;
    let sign = |kp: &nkeys::KeyPair, nonce: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(kp.sign(nonce.as_bytes()).expect("sign"))
    };
    // Signed by another key: refused.
    let mut raw = RawClient::connect_to(&srv).await;
    let nonce = nonce_of(&mut raw).await;
    let forged = sign(&nkeys::KeyPair::new_user(), &nonce);
    raw.send(format!(
        "CONNECT {{\"verbose\":false,\"nkey\":\"{}\",\"sig\":\"{forged}\"}}\r\nPING\r\n",
        full.public_key()
    ))
    .await;
    assert_eq!(raw.read_line().await, "-ERR 'Authorization Violation'");
    // The right signature of the nonce: accepted.
    let mut raw = RawClient::connect_to(&srv).await;
    let nonce = nonce_of(&mut raw).await;
    raw.send(format!(
        "CONNECT {{\"verbose\":false,\"nkey\":\"{}\",\"sig\":\"{}\"}}\r\nPING\r\n",
        full.public_key(),
        sign(&full, &nonce)
    ))
    .await;
    assert_eq!(raw.read_line().await, "PONG");
}
