//! Checks of the process harness itself (and of start-up behaviour every server must share):
//! readiness, log capture, failure reporting, kill and drop.

use std::time::Duration;

use jetraft_tests::harness::{RawClient, ServerOptions, ServerProcess, free_port};
use tokio::time::Instant;

#[tokio::test]
async fn started_server_is_ready_and_reports_its_ports() {
    let srv = ServerProcess::start(ServerOptions::default())
        .await
        .expect("start server");
    assert_ne!(srv.port(), srv.http_port());
    assert_eq!(srv.client_url(), format!("nats://127.0.0.1:{}", srv.port()));
    assert_eq!(
        srv.http_url(),
        format!("http://127.0.0.1:{}", srv.http_port())
    );
    assert!(srv.pid().is_some());
    let mut c = RawClient::connect_to(&srv).await;
    let info = c.read_info().await;
    assert_eq!(info["port"], srv.port());
    assert!(!srv.log().is_empty(), "server log is captured");
}

#[tokio::test]
async fn invalid_config_fails_fast_with_the_log_in_the_error() {
    let started = Instant::now();
    let err = match ServerProcess::start(ServerOptions::with_config("max_payload: {{{ not valid\n"))
        .await
    {
        Ok(_) => panic!("server started with an invalid config"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    assert!(err.contains("exited during startup"), "{err}");
    assert!(err.contains("log:"), "{err}");
}

#[tokio::test]
async fn kill_stops_the_server_and_frees_the_port() {
    let mut srv = ServerProcess::start(ServerOptions::default())
        .await
        .expect("start server");
    srv.kill();
    assert!(!srv.is_running());
    assert!(srv.pid().is_none());
    assert!(
        tokio::net::TcpStream::connect(srv.client_addr())
            .await
            .is_err()
    );
    // It can be started again on the same ports.
    srv.start_again().await.expect("start again after kill");
    RawClient::connected(&srv).await.ping_pong().await;
}

#[tokio::test]
async fn dropping_the_handle_kills_the_process() {
    let srv = ServerProcess::start(ServerOptions::default())
        .await
        .expect("start server");
    let pid = srv.pid().expect("pid");
    let addr = srv.client_addr();
    drop(srv);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "pid {pid} still exists"
    );
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn fixed_ports_are_used_as_given() {
    let (port, http_port) = (free_port(), free_port());
    let srv = ServerProcess::start(ServerOptions {
        port: Some(port),
        http_port: Some(http_port),
        ..Default::default()
    })
    .await
    .expect("start server");
    assert_eq!((srv.port(), srv.http_port()), (port, http_port));
    let resp = srv.http_get("/healthz").await.expect("healthz");
    assert_eq!(resp.status, 200);
}
