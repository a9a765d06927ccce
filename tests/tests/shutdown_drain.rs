//! SIGTERM with JetStream busy: the node drains and exits well within its shutdown bound, its
//! clients get answers or a clean close (never silence), and the log has no `raft stopped`
//! errors (openraft logs every call into a stopped group as one) nor any other ERROR line.
//!
//! Single node and three nodes, each with R1/R3 streams and clients publishing while the
//! signal arrives. The bound (5 s) is a correctness bound, far above a normal shutdown's time.

use std::time::Duration;

use async_nats::jetstream;
use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::jsapi::{api, publish_acked};
use jetraft_tests::harness::{ServerKind, ServerProcess, connect, server_kind, start_server};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Longest a SIGTERM may take to end the process.
const EXIT_BOUND: Duration = Duration::from_secs(5);
/// Longest a client's in-flight publish may stay unanswered after the signal: it gets a PubAck,
/// an error, or sees its connection close, well before its own 30 s request timeout.
const ANSWER_BOUND: Duration = Duration::from_secs(8);

/// A client publishing to `subject` in a loop until it gets an error answer or its
/// connection closes; returns how many publishes were acknowledged, and panics if one stays
/// unanswered, on an open connection, for longer than [`ANSWER_BOUND`] (silence).
fn publisher(nc: async_nats::Client, subject: String) -> JoinHandle<u64> {
    tokio::spawn(async move {
        let js = jetstream::new(nc.clone());
        let mut acked = 0u64;
        loop {
            let started = Instant::now();
            let outcome = async {
                let ack = js.publish(subject.clone(), "x".into()).await?;
                ack.await.map_err(async_nats::Error::from)?;
                Ok::<(), async_nats::Error>(())
            };
            let closed = async {
                while nc.connection_state() != async_nats::connection::State::Disconnected {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            };
            tokio::select! {
                answer = tokio::time::timeout(ANSWER_BOUND, outcome) => match answer {
                    Ok(Ok(())) => acked += 1,
                    // An error answer: the client was told.
                    Ok(Err(_)) => return acked,
                    Err(_) => panic!(
                        "a publish to {subject} stayed unanswered for {:?}",
                        started.elapsed()
                    ),
                },
                // The server closed the connection: the client was told too.
                () = closed => return acked,
            }
        }
    })
}

/// A client whose requests time out only after 30 s, so silence is told from an answer.
async fn patient_client(srv: &ServerProcess) -> async_nats::Client {
    tokio::time::timeout(
        Duration::from_secs(10),
        async_nats::ConnectOptions::new()
            .request_timeout(Some(Duration::from_secs(30)))
            // Stay on this node: a client that moved to another one would keep publishing.
            .ignore_discovered_servers()
            .max_reconnects(Some(1))
            .connect(srv.client_url()),
    )
    .await
    .expect("connect in time")
    .expect("connect")
}

/// Panics if `srv`'s log has a `raft stopped` line or any ERROR / panic line.
fn assert_no_raft_stopped(srv: &ServerProcess) {
    let log = srv.log();
    let bad: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("raft stopped") || l.contains("[ERR]") || l.contains("panicked"))
        .collect();
    assert!(
        bad.is_empty(),
        "{} logged {} error line(s) while shutting down:\n{}",
        srv.name(),
        bad.len(),
        bad.join("\n")
    );
}

/// SIGTERMs `srv`, asserting it exits with status 0 within [`EXIT_BOUND`]; returns how long.
async fn sigterm(srv: &mut ServerProcess) -> Duration {
    let started = Instant::now();
    let status = srv
        .stop_within(Duration::from_secs(15))
        .await
        .expect("exit after SIGTERM");
    let took = started.elapsed();
    eprintln!("{} exited {took:?} after SIGTERM ({status:?})", srv.name());
    assert_eq!(status.code(), Some(0), "exit status {status:?}");
    assert!(took < EXIT_BOUND, "{} took {took:?} to exit", srv.name());
    took
}

#[tokio::test]
async fn sigterm_with_busy_streams_exits_promptly_without_raft_errors() {
    if server_kind() != ServerKind::Jetraft {
        return;
    }
    let mut srv = start_server().await;
    let nc = connect(&srv).await;
    for i in 0..3 {
        let name = format!("SD{i}");
        let r = api(
            &nc,
            &format!("$JS.API.STREAM.CREATE.{name}"),
            json!({"name": name, "subjects": [format!("sd{i}.>")]}),
        )
        .await;
        assert!(r["error"].is_null(), "{r}");
        publish_acked(&nc, &format!("sd{i}.x"), "first", "x").await;
    }
    let mut pubs = Vec::new();
    for i in 0..3 {
        pubs.push(publisher(patient_client(&srv).await, format!("sd{i}.x")));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    sigterm(&mut srv).await;
    for p in pubs {
        let acked = tokio::time::timeout(ANSWER_BOUND, p)
            .await
            .expect("publisher ends once the server is gone")
            .expect("publisher task");
        assert!(acked > 0, "a publisher got no PubAck before the signal");
    }
    assert_no_raft_stopped(&srv);
}

#[tokio::test]
async fn sigterm_of_each_node_of_a_busy_cluster_exits_promptly_without_raft_errors() {
    if server_kind() != ServerKind::Jetraft {
        return;
    }
    let mut cluster = Cluster::start(3, "drain").await.expect("cluster");
    let nc = connect(cluster.node(0)).await;
    for i in 0..3 {
        let name = format!("CD{i}");
        let r = api(
            &nc,
            &format!("$JS.API.STREAM.CREATE.{name}"),
            json!({"name": name, "subjects": [format!("cd{i}.>")], "num_replicas": 3}),
        )
        .await;
        assert!(r["error"].is_null(), "{r}");
        publish_acked(&nc, &format!("cd{i}.x"), "first", "x").await;
    }
    // One publisher per node and stream, so every node has clients mid-request.
    let mut pubs = Vec::new();
    for n in 0..3 {
        for i in 0..3 {
            let client = patient_client(cluster.node(n)).await;
            pubs.push((n, publisher(client, format!("cd{i}.x"))));
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The first node stops while the others keep the quorum, the second with one peer left,
    // the last one alone.
    for n in 0..3 {
        let mut node = std::mem::take(&mut pubs);
        let (mine, rest): (Vec<_>, Vec<_>) = node.drain(..).partition(|(on, _)| *on == n);
        pubs = rest;
        stop_node(&mut cluster, n).await;
        for (_, p) in mine {
            tokio::time::timeout(ANSWER_BOUND, p)
                .await
                .expect("publisher ends once its node is gone")
                .expect("publisher task");
        }
    }
    for n in 0..3 {
        assert_no_raft_stopped(cluster.node(n));
    }
}

async fn stop_node(cluster: &mut Cluster, n: usize) {
    let started = Instant::now();
    let status = cluster
        .stop_within(n, Duration::from_secs(15))
        .await
        .expect("exit after SIGTERM");
    let took = started.elapsed();
    eprintln!("n{} exited {took:?} after SIGTERM ({status:?})", n + 1);
    assert_eq!(status.code(), Some(0), "n{} exit status {status:?}", n + 1);
    assert!(took < EXIT_BOUND, "n{} took {took:?} to exit", n + 1);
}
