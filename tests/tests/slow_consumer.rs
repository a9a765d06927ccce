//! Slow consumers (spec nats-protocol-and-jetstream.md §1.11): a subscriber that stops reading is
//! disconnected once its outbound buffer exceeds `max_pending`, without an `-ERR`, while the
//! publisher and other subscribers carry on and `/varz` counts it.

use std::time::Duration;

use jetraft_tests::harness::{RawClient, ServerOptions, ServerProcess, assert_clean_log};
use tokio::time::Instant;

/// Small buffers so the flood needed is a few MB at most. nats-server requires
/// `max_payload <= max_pending`; the write deadline bounds the final flush attempt.
const CONF: &str = "max_pending: 65536\nmax_payload: 1024\nwrite_deadline: \"2s\"\n";

#[tokio::test]
async fn subscriber_that_stops_reading_is_disconnected_as_slow_consumer() {
    let srv = ServerProcess::start(ServerOptions::with_config(CONF))
        .await
        .expect("start server");

    let mut slow = RawClient::connect_with_recv_buffer(&srv, 4096).await;
    slow.read_info().await;
    slow.send("CONNECT {\"verbose\":false,\"name\":\"slow\"}\r\nSUB flood 1\r\nPING\r\n")
        .await;
    slow.expect_bytes(b"PONG\r\n").await;
    let slow_port = slow.local_port();

    let mut normal = RawClient::connected(&srv).await;
    normal.send("SUB flood 7\r\n").await;
    normal.ping_pong().await;
    let mut publ = RawClient::connected(&srv).await;

    // Flood in batches; the normal subscriber reads each batch before the next one is sent, so
    // only the slow one accumulates pending data. Bounded in messages and time.
    const BATCH: usize = 32;
    let payload = vec![b'x'; 1000];
    let mut batch = Vec::new();
    for _ in 0..BATCH {
        batch.extend_from_slice(b"PUB flood 1000\r\n");
        batch.extend_from_slice(&payload);
        batch.extend_from_slice(b"\r\n");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut sent = 0usize;
    let mut detected = false;
    while sent < 20_000 && Instant::now() < deadline {
        publ.send(&batch).await;
        publ.ping_pong().await;
        sent += BATCH;
        for _ in 0..BATCH {
            let m = normal.read_msg().await;
            assert_eq!((m.sid.as_str(), m.payload.len()), ("7", 1000));
        }
        if sent.is_multiple_of(BATCH * 8) {
            let v = srv.monitor_json("/varz").await.expect("varz");
            if v["slow_consumers"].as_u64().unwrap_or(0) >= 1 {
                detected = true;
                break;
            }
        }
    }
    assert!(detected, "no slow consumer detected after {sent} messages");

    // The slow client is disconnected (after whatever was already in flight), without -ERR.
    let received = slow.read_to_close(Duration::from_secs(20)).await;
    assert!(
        !received.windows(4).any(|w| w == b"-ERR"),
        "slow consumer must be closed without -ERR"
    );
    let connz = srv.monitor_json("/connz").await.expect("connz");
    let still_listed = connz["connections"]
        .as_array()
        .expect("connections")
        .iter()
        .any(|c| c["port"] == slow_port);
    assert!(!still_listed, "slow consumer still connected: {connz}");

    // Publisher and the normal subscriber keep working.
    publ.send("PUB flood 5\r\nafter\r\n").await;
    publ.ping_pong().await;
    let m = normal.read_msg().await;
    assert_eq!(m.payload, b"after");
    normal.ping_pong().await;
    let v = srv.monitor_json("/varz").await.expect("varz");
    assert!(v["slow_consumers"].as_u64().unwrap_or(0) >= 1, "{v}");
    assert_clean_log(&srv);
}
