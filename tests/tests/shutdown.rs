//! Process lifecycle: SIGTERM shuts the server down cleanly and promptly.

use std::time::Duration;

use async_nats::ConnectOptions;
use bytes::Bytes;
use futures_util::StreamExt as _;
use jetraft_tests::harness::{RawClient, ServerOptions, ServerProcess, assert_clean_log, within};
use tokio::time::Instant;

#[tokio::test]
async fn sigterm_exits_with_code_zero_and_closes_client_connections() {
    let mut srv = ServerProcess::start(ServerOptions::default())
        .await
        .expect("start server");
    let client = within(
        Duration::from_secs(5),
        "connect",
        Box::pin(
            ConnectOptions::new()
                .max_reconnects(Some(1))
                .connect(srv.client_url()),
        ),
    )
    .await
    .expect("connect");
    let mut sub = client.subscribe("bye").await.unwrap();
    client
        .publish("bye", Bytes::from_static(b"x"))
        .await
        .unwrap();
    within(Duration::from_secs(5), "message", sub.next())
        .await
        .unwrap();
    let mut raw = RawClient::connected(&srv).await;
    raw.send("SUB raw 1\r\n").await;
    raw.ping_pong().await;

    let started = Instant::now();
    // nats-server 2.15.1 exits with status 0 on SIGTERM, well within a second when idle.
    let status = srv
        .stop_within(Duration::from_secs(10))
        .await
        .expect("exit after SIGTERM");
    let took = started.elapsed();
    assert_eq!(
        status.code(),
        Some(0),
        "exit status {status:?} after SIGTERM"
    );
    assert!(took < Duration::from_secs(10), "shutdown took {took:?}");

    // Clients see the connection closed; the port is released.
    raw.assert_closed(Duration::from_secs(5)).await;
    let refused = tokio::net::TcpStream::connect(srv.client_addr()).await;
    assert!(refused.is_err(), "client port still accepting after exit");
    assert_clean_log(&srv);
}

#[tokio::test]
async fn server_restarts_on_same_ports_after_sigterm() {
    let mut srv = ServerProcess::start(ServerOptions::default())
        .await
        .expect("start server");
    let port = srv.port();
    srv.stop().await.expect("stop");
    srv.start_again().await.expect("start again");
    assert_eq!(srv.port(), port);
    let mut raw = RawClient::connected(&srv).await;
    raw.send("SUB a 1\r\nPUB a 1\r\nx\r\n").await;
    assert_eq!(raw.read_msgs_until_pong().await.len(), 1);
    let health = srv.monitor_json("/healthz").await.expect("healthz");
    assert_eq!(health["status"], "ok");
    assert_clean_log(&srv);
}
