//! The kill -9 test of issue 5: 10,000 acknowledged publishes to an R3 file stream on a
//! three-node cluster while the stream leader is SIGKILLed and restarted, twice. Afterwards every
//! replica holds every acknowledged message exactly once, at the sequence its PubAck named, and
//! all replicas hold exactly the same messages.
//!
//! - A second publisher sends messages without `Nats-Msg-Id` and never retries them: dedup cannot
//!   hide a message stored twice, so a replica that applies an entry again after its restart
//!   (a crash between the store write and the applied-index write) shows up as a duplicate or as
//!   a replica that differs from the others.
//! - The publisher keeps a bounded window of requests in flight. A publish that gets no PubAck
//!   (its node died, the leader moved, no responders while a node restarts) is retried with the
//!   same `Nats-Msg-Id`, so dedup keeps it once; a retry may be answered `duplicate` with the
//!   original sequence.
//! - Each replica is read through its own node with DIRECT.GET (the stream has `allow_direct`):
//!   a node that holds a replica answers a direct get from its local store, without forwarding
//!   (nats-server does the same: its replicas answer in a queue group and a node prefers its own
//!   queue subscriber).
//! - Every wait is bounded; the harness kills only the processes it started, by pid.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::HeaderMap;
use bytes::Bytes;
use futures_util::StreamExt as _;
use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::{ServerKind, ServerProcess, server_kind, wait_for, within};
use serde_json::{Value, json};
use tokio::time::{Instant, sleep, timeout};

/// Messages published (and acknowledged).
const TOTAL: u64 = 10_000;
/// Publishes in flight at once.
const WINDOW: usize = 64;
/// Bound on one publish attempt; a publish lost with its node is retried after this.
const ATTEMPT: Duration = Duration::from_secs(2);
/// Bound on the whole publish phase.
const PUBLISH_PHASE: Duration = Duration::from_secs(150);
/// Bound on any single wait of the test (an election, progress after a kill, a catch-up).
const WAIT: Duration = Duration::from_secs(60);
/// Acknowledged counts at which the stream leader is killed.
const KILL_AT: [u64; 2] = [2_000, 6_000];
/// Bound on the messages of the second (no `Nats-Msg-Id`) publisher.
const PLAIN_MAX: u64 = 10_000;
/// Acknowledgements required while the killed leader is down, before it is restarted.
const PROGRESS_WHILE_DOWN: u64 = 1_000;

/// A client connected to `srv` only (no failover to discovered servers), so that what it reads
/// comes from that node.
async fn connect_only(srv: &ServerProcess) -> async_nats::Client {
    let opts = async_nats::ConnectOptions::new().ignore_discovered_servers();
    within(
        Duration::from_secs(10),
        "connect",
        Box::pin(opts.connect(srv.client_url())),
    )
    .await
    .expect("connect")
}

/// One API request; `None` on timeout, no responders or unparsable JSON.
async fn try_api(nc: &async_nats::Client, subject: &str, body: Value) -> Option<Value> {
    let payload = if body.is_null() {
        Bytes::new()
    } else {
        Bytes::from(body.to_string())
    };
    let msg = timeout(
        Duration::from_secs(3),
        nc.request(subject.to_string(), payload),
    )
    .await
    .ok()?
    .ok()?;
    serde_json::from_slice(&msg.payload).ok()
}

/// The name of the stream's current leader, asked through any running node.
async fn stream_leader(cluster: &mut Cluster, stream: &str) -> String {
    let subject = format!("$JS.API.STREAM.INFO.{stream}");
    let deadline = Instant::now() + WAIT;
    loop {
        for i in 0..cluster.len() {
            if !cluster.node_running(i) {
                continue;
            }
            let nc = connect_only(cluster.node(i)).await;
            if let Some(info) = try_api(&nc, &subject, Value::Null).await
                && let Some(leader) = info["cluster"]["leader"].as_str()
                && !leader.is_empty()
            {
                return leader.to_string();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no leader for {stream} within {WAIT:?}"
        );
        sleep(Duration::from_millis(200)).await;
    }
}

/// What the publisher learned about one message.
#[derive(Debug, Clone, Copy)]
struct Acked {
    /// Sequence named by the (first successful) PubAck.
    seq: u64,
    /// Publish attempts it took.
    attempts: u32,
}

/// Publishes message `id` until a PubAck with a sequence arrives (or `deadline` passes),
/// rotating over the clients that are connected.
async fn publish_until_acked(
    clients: Arc<Vec<async_nats::Client>>,
    id: u64,
    deadline: Instant,
) -> Result<Acked, String> {
    let mut attempts = 0u32;
    let mut last = String::from("never sent");
    while Instant::now() < deadline {
        attempts += 1;
        let n = clients.len();
        let pick = (0..n)
            .map(|k| &clients[(id as usize + attempts as usize + k) % n])
            .find(|c| c.connection_state() == async_nats::connection::State::Connected);
        let Some(nc) = pick else {
            sleep(Duration::from_millis(50)).await;
            continue;
        };
        let mut h = HeaderMap::new();
        h.insert("Nats-Msg-Id", format!("m{id}").as_str());
        let req = nc.request_with_headers("k9.msg".to_string(), h, Bytes::from(id.to_string()));
        match timeout(ATTEMPT, req).await {
            Ok(Ok(msg)) => match serde_json::from_slice::<Value>(&msg.payload) {
                Ok(ack) => match ack["seq"].as_u64() {
                    Some(seq) if ack["stream"] == "K9" => return Ok(Acked { seq, attempts }),
                    _ => last = ack.to_string(),
                },
                Err(_) => last = format!("non-JSON answer {:?}", msg.status),
            },
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "timed out".to_string(),
        }
        sleep(Duration::from_millis(50)).await;
    }
    Err(format!(
        "m{id}: no PubAck after {attempts} attempts, last: {last}"
    ))
}

/// Waits until `acked` reaches `target`, failing after [`WAIT`].
async fn wait_acked(acked: &AtomicU64, target: u64, what: &str) {
    let deadline = Instant::now() + WAIT;
    while acked.load(Ordering::Relaxed) < target {
        assert!(
            Instant::now() < deadline,
            "{what}: only {} of {target} acknowledged within {WAIT:?}",
            acked.load(Ordering::Relaxed)
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// One message as a replica's DIRECT.GET returns it, or `None` for 404.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stored {
    subject: String,
    /// `Nats-Msg-Id`, "" when absent.
    id: String,
    payload: String,
}

async fn direct_get(nc: &async_nats::Client, seq: u64) -> Result<Option<Stored>, String> {
    let mut last = String::new();
    for _ in 0..5 {
        let req = nc.request(
            "$JS.API.DIRECT.GET.K9".to_string(),
            Bytes::from(format!(r#"{{"seq":{seq}}}"#)),
        );
        match timeout(Duration::from_secs(5), req).await {
            Ok(Ok(msg)) => {
                let headers = msg.headers.as_ref();
                let status = msg.status.map(|s| s.as_u16());
                if status == Some(404) {
                    return Ok(None);
                }
                let got_seq = headers
                    .and_then(|h| h.get("Nats-Sequence"))
                    .map(|v| v.as_str().to_string());
                if got_seq.as_deref() != Some(seq.to_string().as_str()) {
                    last = format!(
                        "seq {seq}: answer with Nats-Sequence {got_seq:?}, status {status:?}"
                    );
                    continue;
                }
                let header = |name: &str| {
                    headers
                        .and_then(|h| h.get(name))
                        .map(|v| v.as_str().to_string())
                        .unwrap_or_default()
                };
                return Ok(Some(Stored {
                    subject: header("Nats-Subject"),
                    id: header("Nats-Msg-Id"),
                    payload: String::from_utf8_lossy(&msg.payload).into_owned(),
                }));
            }
            Ok(Err(e)) => last = format!("seq {seq}: {e}"),
            Err(_) => last = format!("seq {seq}: timed out"),
        }
        sleep(Duration::from_millis(100)).await;
    }
    Err(last)
}

/// Publishes `k9.plain` messages without `Nats-Msg-Id`, each once (no retry), with a window
/// like the main publisher's, until `stop`; returns the sequences of those acknowledged, by
/// payload number.
async fn plain_publisher(
    clients: Arc<Vec<async_nats::Client>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> HashMap<u64, u64> {
    let deadline = Instant::now() + PUBLISH_PHASE;
    futures_util::stream::iter(0..PLAIN_MAX)
        .take_while(|_| {
            let go = !stop.load(Ordering::Relaxed) && Instant::now() < deadline;
            async move { go }
        })
        .map(|n| {
            let nc = clients[n as usize % clients.len()].clone();
            async move {
                let req = nc.request("k9.plain".to_string(), Bytes::from(format!("p{n}")));
                let ack: Value = match timeout(ATTEMPT, req).await {
                    Ok(Ok(msg)) => serde_json::from_slice(&msg.payload).ok()?,
                    _ => return None,
                };
                ack["seq"].as_u64().map(|seq| (n, seq))
            }
        })
        .buffer_unordered(WINDOW / 2)
        .filter_map(|r| async move { r })
        .collect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r3_acked_messages_survive_two_leader_kills_exactly_once_on_every_replica() {
    let started = Instant::now();
    let mut cluster = Cluster::start(3, "k9").await.expect("cluster");
    let admin = connect_only(cluster.node(0)).await;
    let created = wait_for("stream create", WAIT, || {
        let admin = admin.clone();
        async move {
            try_api(
                &admin,
                "$JS.API.STREAM.CREATE.K9",
                json!({"name": "K9", "subjects": ["k9.>"], "num_replicas": 3,
                       "storage": "file", "allow_direct": true}),
            )
            .await
        }
    })
    .await;
    assert!(created["error"].is_null(), "{created}");
    stream_leader(&mut cluster, "K9").await;

    let mut clients = Vec::new();
    for i in 0..cluster.len() {
        clients.push(connect_only(cluster.node(i)).await);
    }
    let clients = Arc::new(clients);
    let acked_count = Arc::new(AtomicU64::new(0));
    let publisher = {
        let clients = clients.clone();
        let acked_count = acked_count.clone();
        tokio::spawn(async move {
            let deadline = Instant::now() + PUBLISH_PHASE;
            let results: Vec<(u64, Result<Acked, String>)> = futures_util::stream::iter(0..TOTAL)
                .map(|id| {
                    let clients = clients.clone();
                    let acked_count = acked_count.clone();
                    async move {
                        let r = publish_until_acked(clients, id, deadline).await;
                        if r.is_ok() {
                            acked_count.fetch_add(1, Ordering::Relaxed);
                        }
                        (id, r)
                    }
                })
                .buffer_unordered(WINDOW)
                .collect()
                .await;
            results
        })
    };
    let stop_plain = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let plain = tokio::spawn(plain_publisher(clients.clone(), stop_plain.clone()));

    // Kill the stream leader twice, each time while publishing, and restart it after the
    // survivors made progress without it.
    let mut killed = Vec::new();
    for (round, at) in KILL_AT.iter().enumerate() {
        wait_acked(&acked_count, *at, "before the kill").await;
        let leader = stream_leader(&mut cluster, "K9").await;
        let victim = (0..cluster.len())
            .find(|&i| cluster.node(i).name() == leader)
            .unwrap_or_else(|| panic!("no node named {leader}"));
        let before = acked_count.load(Ordering::Relaxed);
        cluster.kill(victim);
        killed.push(leader.clone());
        eprintln!(
            "round {round}: killed leader {leader} at {before} acked ({:?})",
            started.elapsed()
        );
        wait_acked(
            &acked_count,
            before + PROGRESS_WHILE_DOWN,
            "while the leader was down",
        )
        .await;
        within(WAIT, "restart", cluster.restart(victim))
            .await
            .expect("restart");
        eprintln!(
            "round {round}: restarted {leader} at {} acked ({:?})",
            acked_count.load(Ordering::Relaxed),
            started.elapsed()
        );
    }

    let results = within(PUBLISH_PHASE + WAIT, "publisher", publisher)
        .await
        .expect("publisher task");
    stop_plain.store(true, Ordering::Relaxed);
    let plain_acked = within(PUBLISH_PHASE + WAIT, "plain publisher", plain)
        .await
        .expect("plain publisher task");
    eprintln!(
        "all published, {} plain messages acknowledged ({:?})",
        plain_acked.len(),
        started.elapsed()
    );
    // Every message was acknowledged, each with its own sequence.
    let mut expected: HashMap<u64, Stored> = HashMap::new();
    let mut retried = 0u64;
    for (id, r) in &results {
        let acked = r.as_ref().unwrap_or_else(|e| panic!("{e}"));
        if acked.attempts > 1 {
            retried += 1;
        }
        let msg = Stored {
            subject: "k9.msg".into(),
            id: format!("m{id}"),
            payload: id.to_string(),
        };
        if let Some(other) = expected.insert(acked.seq, msg) {
            panic!(
                "m{id} and {other:?} were both acknowledged with seq {}",
                acked.seq
            );
        }
    }
    for (n, seq) in &plain_acked {
        let msg = Stored {
            subject: "k9.plain".into(),
            id: String::new(),
            payload: format!("p{n}"),
        };
        if let Some(other) = expected.insert(*seq, msg) {
            panic!("p{n} and {other:?} were both acknowledged with seq {seq}");
        }
    }
    eprintln!("{retried} publishes needed a retry; killed {killed:?}");

    // The stream as its leader reports it, once a publish that timed out can no longer land
    // (two reads a second apart agree).
    let mut previous = Value::Null;
    let settled = Instant::now() + WAIT;
    let info = loop {
        let info = wait_for("stream info", WAIT, || {
            let admin = admin.clone();
            async move { try_api(&admin, "$JS.API.STREAM.INFO.K9", Value::Null).await }
        })
        .await;
        if info["state"]["last_seq"] == previous["state"]["last_seq"] {
            break info;
        }
        assert!(Instant::now() < settled, "the stream never settled: {info}");
        previous = info;
        sleep(Duration::from_secs(1)).await;
    };
    let last = info["state"]["last_seq"].as_u64().expect("last_seq");
    assert_eq!(info["state"]["messages"], last, "no gaps: {info}");
    assert_eq!(info["state"]["first_seq"], 1, "{info}");

    // Every replica, read through its own node, holds the same `last` messages: each
    // acknowledged one at the sequence of its PubAck, every Nats-Msg-Id and every plain payload
    // at most once.
    let mut reference: Option<(String, Vec<Stored>)> = None;
    for i in 0..cluster.len() {
        let node = cluster.node(i).name().to_string();
        let nc = connect_only(cluster.node(i)).await;
        let caught_up = Instant::now() + WAIT;
        loop {
            if let Ok(Some(_)) = direct_get(&nc, last).await {
                break;
            }
            assert!(
                Instant::now() < caught_up,
                "{node} never caught up to seq {last}"
            );
            sleep(Duration::from_millis(200)).await;
        }
        let nc = &nc;
        let mut reads = futures_util::stream::iter(1..=last + 1)
            .map(|seq| async move { (seq, direct_get(nc, seq).await) })
            .buffered(32);
        let mut replica = Vec::new();
        let read_deadline = Instant::now() + WAIT;
        while let Some((seq, got)) = within(WAIT, "replica read", reads.next()).await {
            assert!(
                Instant::now() < read_deadline,
                "{node}: reading the replica took over {WAIT:?}"
            );
            let got = got.unwrap_or_else(|e| panic!("{node}: {e}"));
            if seq > last {
                // Only a publish that timed out without a PubAck may still land after the
                // stream looked settled (seen with nats-server too).
                if let Some(m) = got {
                    assert!(
                        m.id.is_empty() && !plain_acked.values().any(|s| *s == seq),
                        "{node}: {m:?} after seq {last}"
                    );
                }
                continue;
            }
            let got = got.unwrap_or_else(|| panic!("{node}: seq {seq} is missing"));
            if let Some(want) = expected.get(&seq) {
                assert_eq!(&got, want, "{node}: seq {seq} is not what its PubAck named");
            }
            replica.push(got);
        }
        let mut seen = std::collections::HashSet::new();
        for (k, m) in replica.iter().enumerate() {
            let key = if m.id.is_empty() {
                m.payload.clone()
            } else {
                m.id.clone()
            };
            assert!(
                seen.insert(key),
                "{node}: {m:?} stored twice (again at seq {})",
                k + 1
            );
        }
        let ids = replica.iter().filter(|m| !m.id.is_empty()).count() as u64;
        assert_eq!(ids, TOTAL, "{node}: messages with Nats-Msg-Id");
        match &reference {
            None => reference = Some((node.clone(), replica)),
            Some((first, want)) => {
                let diff = want.iter().zip(&replica).position(|(a, b)| a != b);
                assert!(
                    diff.is_none(),
                    "{node} differs from {first} at seq {:?}",
                    diff.map(|d| d + 1)
                );
            }
        }
        eprintln!("{node}: {last} messages verified ({:?})", started.elapsed());
    }
    if server_kind() == ServerKind::Jetraft {
        cluster.assert_clean_logs();
    }
}
