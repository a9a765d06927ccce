//! KV compare-and-set under leader failure (issue 7, item 5b): five async-nats clients run
//! 2,000 CAS updates each over ten keys of an R3 bucket on three nodes, while the stream leader
//! is killed (SIGKILL) and restarted twice, each time once another node has taken over. Then
//! the bucket's full history is checked.
//!
//! # The clients
//! Each client loops: pick a random key (seeded; `JETRAFT_CAS_SEED` replays a run), read its
//! current entry, `update(key, value, revision)`. Every attempt writes a value that is unique
//! and names the revision it expected, `c<client>-n<attempt>-e<expected>`. The outcome of each
//! attempt is recorded:
//! - acknowledged: the revision from the PubAck (and when the attempt started and ended);
//! - rejected: the server answered "wrong last revision" (the client re-reads and retries);
//! - ambiguous: a timeout or any other error (node killed, no responders during an election).
//!   The client re-reads and retries with a new value; whether the ambiguous one was applied
//!   is decided at the end from the history, where an ambiguous value that appears counts as
//!   applied.
//!
//! # Keeping the whole history
//! A bucket's history is the stream's `max_msgs_per_subject` (the clients cap it at 64), and
//! with about 1,000 updates per key a capped history would trim away most of the evidence. The
//! bucket is therefore created through the client (history 64, R3) and its stream is then
//! updated to `max_msgs_per_subject: 1000000`, far above the updates a key gets (unlimited,
//! -1, would be simpler, but async-nats refuses to bind to a bucket whose history is below 1).
//! Compare-and-set is `Nats-Expected-Last-Subject-Sequence`, checked against the last message
//! on the subject, which does not depend on the per-subject limit, so this is the same CAS path
//! with nothing trimmed: every update that was ever applied is still in the stream, in stream
//! order (the check below also confirms that the stream holds exactly as many messages as the
//! histories).
//!
//! # What is checked (the history of each key, read through `history(key)`)
//! 1. Revisions strictly increase along each key's history.
//! 2. No CAS succeeded on a stale revision: every stored value's expected revision equals the
//!    revision of the previous message of that key (0 for the first). This also rules out an
//!    update applied twice.
//! 3. Every acknowledged update is stored at the revision its ack named, with its value.
//! 4. No update the server rejected was stored, and nothing unknown was stored.
//! 5. Real-time order: if update A was acknowledged before update B started, then A precedes
//!    B in its key's history.
//!
//! Reads are not checked for linearizability: async-nats reads with DIRECT.GET, which any
//! replica may answer (nats-server too), so a read may be stale; a stale read only makes the
//! following CAS fail.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream::kv::{self, CreateErrorKind, UpdateErrorKind};
use async_nats::jetstream::{self, Context};
use bytes::Bytes;
use futures_util::TryStreamExt as _;
use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::jsapi::{ELECTION, api, index_of, info_with_leader, try_api};
use jetraft_tests::harness::{ServerProcess, wait_for, within};
use rand::{Rng as _, SeedableRng as _};
use serde_json::Value;
use tokio::time::{Instant, sleep, timeout};

const CLIENTS: usize = 5;
const KEYS: usize = 10;
const BUCKET: &str = "CAS";
const STREAM: &str = "KV_CAS";
/// The bucket stream's `max_msgs_per_subject`: nothing is ever trimmed.
const HISTORY: i64 = 1_000_000;
/// Bound on one read or update attempt; a longer one counts as ambiguous.
const ATTEMPT: Duration = Duration::from_secs(4);
/// Acknowledged updates (percent of the total) at which the stream leader is killed; early
/// enough that the second kill still comes during the run even when a failover is slow.
const KILL_AT_PERCENT: [u64; 2] = [25, 55];
/// Bound on the update phase.
const RUN_BOUND: Duration = Duration::from_secs(180);

fn per_client() -> u64 {
    std::env::var("JETRAFT_CAS_UPDATES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

fn seed() -> u64 {
    std::env::var("JETRAFT_CAS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(7, |d| d.as_nanos() as u64)
        })
}

fn key(i: usize) -> String {
    format!("k{i}")
}

/// A client that knows every node, so it survives the kill of the one it is on.
async fn connect_any(cluster: &Cluster, first: usize) -> async_nats::Client {
    let urls: Vec<async_nats::ServerAddr> = (0..cluster.len())
        .map(|k| {
            cluster
                .node((first + k) % cluster.len())
                .client_url()
                .parse()
                .expect("url")
        })
        .collect();
    within(
        Duration::from_secs(10),
        "connect",
        Box::pin(
            async_nats::ConnectOptions::new()
                .retry_on_initial_connect()
                .connect(urls),
        ),
    )
    .await
    .expect("connect")
}

/// A client of `srv` only (no failover to discovered servers); it reconnects to `srv` after a
/// restart.
async fn connect_only(srv: &ServerProcess) -> async_nats::Client {
    within(
        Duration::from_secs(10),
        "connect",
        Box::pin(
            async_nats::ConnectOptions::new()
                .ignore_discovered_servers()
                .retry_on_initial_connect()
                .connect(srv.client_url()),
        ),
    )
    .await
    .expect("connect")
}

/// The stream leader as some node (other than `skip`) reports it.
async fn stream_leader(monitors: &[async_nats::Client], skip: Option<usize>) -> Option<String> {
    let subject = format!("$JS.API.STREAM.INFO.{STREAM}");
    for (i, nc) in monitors.iter().enumerate() {
        if Some(i) == skip || nc.connection_state() != async_nats::connection::State::Connected {
            continue;
        }
        if let Some(info) = try_api(nc, &subject, &Value::Null).await
            && let Some(l) = info["cluster"]["leader"].as_str()
            && !l.is_empty()
        {
            return Some(l.to_string());
        }
    }
    None
}

fn context(nc: async_nats::Client) -> Context {
    jetstream::ContextBuilder::new().timeout(ATTEMPT).build(nc)
}

/// One update attempt as its client saw it.
#[derive(Debug, Clone)]
struct Attempt {
    key: String,
    value: String,
    expected: u64,
    started: Instant,
    outcome: Outcome,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    /// Acknowledged with this revision, at this instant.
    Acked(u64, Instant),
    /// The server answered "wrong last revision".
    Rejected,
    /// Timed out or failed otherwise: may or may not have been applied.
    Ambiguous,
}

/// The expected revision a value names (`...-e<N>`).
fn expected_of(value: &str) -> Option<u64> {
    value.rsplit_once("-e").and_then(|(_, n)| n.parse().ok())
}

/// Reads the current revision of `key`, retrying (bounded) through elections.
async fn current_revision(kv: &kv::Store, key: &str, deadline: Instant) -> Option<u64> {
    while Instant::now() < deadline {
        if let Ok(Ok(e)) = timeout(ATTEMPT, kv.entry(key)).await {
            return Some(e.map_or(0, |e| e.revision));
        }
        sleep(Duration::from_millis(50)).await;
    }
    None
}

/// What one client did.
struct ClientRun {
    attempts: Vec<Attempt>,
    /// Reads that returned a revision older than one this client had itself had acknowledged
    /// on that key (stale DIRECT.GET answers; reported, not a failure).
    stale_reads: u64,
}

/// One client: `target` acknowledged updates (or until `deadline`).
async fn run_client(
    id: usize,
    kv: kv::Store,
    seed: u64,
    target: u64,
    acked: Arc<AtomicU64>,
    deadline: Instant,
) -> ClientRun {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (id as u64).wrapping_mul(0x9e37));
    let mut attempts = Vec::new();
    let mut n = 0u64;
    let mut done = 0u64;
    let mut own: HashMap<String, u64> = HashMap::new();
    let mut stale_reads = 0u64;
    'keys: while done < target && Instant::now() < deadline {
        let key = key(rng.random_range(0..KEYS));
        loop {
            let Some(expected) = current_revision(&kv, &key, deadline).await else {
                break 'keys;
            };
            if own.get(&key).is_some_and(|&mine| expected < mine) {
                stale_reads += 1;
            }
            n += 1;
            let value = format!("c{id}-n{n}-e{expected}");
            let started = Instant::now();
            let res = timeout(
                ATTEMPT,
                kv.update(&key, Bytes::from(value.clone()), expected),
            )
            .await;
            let outcome = match res {
                Ok(Ok(rev)) => Outcome::Acked(rev, Instant::now()),
                Ok(Err(e)) if e.kind() == UpdateErrorKind::WrongLastRevision => Outcome::Rejected,
                Ok(Err(_)) | Err(_) => Outcome::Ambiguous,
            };
            attempts.push(Attempt {
                key: key.clone(),
                value,
                expected,
                started,
                outcome,
            });
            if let Outcome::Acked(rev, _) = outcome {
                own.insert(key.clone(), rev);
                done += 1;
                acked.fetch_add(1, Ordering::Relaxed);
                continue 'keys;
            }
            if outcome == Outcome::Ambiguous {
                sleep(Duration::from_millis(50)).await;
            }
            if Instant::now() >= deadline {
                break 'keys;
            }
        }
    }
    ClientRun {
        attempts,
        stale_reads,
    }
}

/// The full history of `key` as `(revision, value)`, read through the client.
async fn history(kv: &kv::Store, key: &str) -> Vec<(u64, String)> {
    let h = within(Duration::from_secs(30), "history", kv.history(key))
        .await
        .expect("history");
    let entries: Vec<kv::Entry> =
        within(Duration::from_secs(60), "history entries", h.try_collect())
            .await
            .expect("history entries");
    entries
        .into_iter()
        .map(|e| (e.revision, String::from_utf8_lossy(&e.value).to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kv_cas_is_linearizable_through_two_leader_kills() {
    let seed = seed();
    let target = per_client();
    let total = target * CLIENTS as u64;
    eprintln!("seed {seed} (JETRAFT_CAS_SEED), {CLIENTS} clients x {target} updates");
    let mut cluster = Cluster::start(3, "cas").await.expect("cluster");
    let nc = connect_any(&cluster, 0).await;
    let js = context(nc.clone());
    // Retried: the first request can time out while the meta group elects its leader.
    wait_for("R3 bucket created", ELECTION, || {
        let js = js.clone();
        async move {
            js.create_key_value(kv::Config {
                bucket: BUCKET.to_string(),
                history: 64,
                num_replicas: 3,
                ..Default::default()
            })
            .await
            .ok()
        }
    })
    .await;
    // Keep every revision (see the module docs).
    let info = info_with_leader(&nc, STREAM).await;
    let mut config = info["config"].clone();
    config["max_msgs_per_subject"] = Value::from(HISTORY);
    let updated = api(&nc, &format!("$JS.API.STREAM.UPDATE.{STREAM}"), config).await;
    assert!(updated["error"].is_null(), "{updated}");
    assert_eq!(
        updated["config"]["max_msgs_per_subject"], HISTORY,
        "{updated}"
    );

    let mut stores = Vec::new();
    for c in 0..CLIENTS {
        let js = context(connect_any(&cluster, c % cluster.len()).await);
        let kv = within(ELECTION, "bind", js.get_key_value(BUCKET))
            .await
            .expect("bind");
        stores.push(kv);
    }
    // One client per node, never failing over elsewhere: leader queries go to nodes that run.
    let mut monitors = Vec::new();
    for i in 0..cluster.len() {
        monitors.push(connect_only(cluster.node(i)).await);
    }
    // Every key starts with a create (expected revision 0 in its value); a retried create
    // that finds the key already there is done.
    for k in 0..KEYS {
        wait_for("initial create", ELECTION, || {
            let kv = stores[0].clone();
            async move {
                let value = Bytes::from(format!("init{k}-e0"));
                match timeout(ATTEMPT, kv.create(key(k), value)).await.ok()? {
                    Ok(_) => Some(()),
                    Err(e) if e.kind() == CreateErrorKind::AlreadyExists => Some(()),
                    Err(_) => None,
                }
            }
        })
        .await;
    }

    let acked = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + RUN_BOUND;
    let clients: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(id, kv)| {
            tokio::spawn(run_client(
                id,
                kv.clone(),
                seed,
                target,
                acked.clone(),
                deadline,
            ))
        })
        .collect();

    // Report every stream leader change (diagnostic only).
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = tokio::spawn({
        let monitors = monitors.clone();
        let watching = watching.clone();
        async move {
            let mut last = String::new();
            while watching.load(Ordering::Relaxed) && Instant::now() < deadline {
                if let Some(l) = stream_leader(&monitors, None).await
                    && l != last
                {
                    eprintln!("stream leader {l} at {:?}", started.elapsed());
                    last = l;
                }
                sleep(Duration::from_millis(250)).await;
            }
        }
    });

    // Kill the stream leader twice while the clients run (see KILL_AT_PERCENT).
    for (k, percent) in KILL_AT_PERCENT.into_iter().enumerate() {
        let k = k + 1;
        while acked.load(Ordering::Relaxed) * 100 < total * percent {
            assert!(
                Instant::now() < deadline,
                "only {} of {total} updates acknowledged within {RUN_BOUND:?}",
                acked.load(Ordering::Relaxed)
            );
            sleep(Duration::from_millis(20)).await;
        }
        let victim_name =
            wait_for("stream leader", ELECTION, || stream_leader(&monitors, None)).await;
        let victim = index_of(&cluster, &victim_name);
        let at = acked.load(Ordering::Relaxed);
        assert!(
            at < total,
            "kill {k} would come after the run ({at} of {total} acknowledged)"
        );
        eprintln!(
            "kill {k}: {victim_name} (stream leader) at {at} acknowledged, {:?}",
            started.elapsed()
        );
        cluster.kill(victim);
        // Restart only once another node leads: otherwise the restarted node, whose log is
        // complete, can win the election again and no failover to another leader happens.
        let successor = wait_for("a new stream leader", ELECTION, || {
            let monitors = &monitors;
            let victim_name = victim_name.clone();
            async move {
                let l = stream_leader(monitors, Some(victim)).await?;
                (l != victim_name).then_some(l)
            }
        })
        .await;
        eprintln!(
            "kill {k}: {successor} leads at {} acknowledged, {:?}",
            acked.load(Ordering::Relaxed),
            started.elapsed()
        );
        sleep(Duration::from_secs(1)).await;
        cluster.restart(victim).await.expect("restart");
    }
    watching.store(false, Ordering::Relaxed);
    watcher.await.expect("leader watcher");
    let mut attempts = Vec::new();
    let mut stale_reads = 0;
    for c in clients {
        let run = c.await.expect("client task");
        attempts.extend(run.attempts);
        stale_reads += run.stale_reads;
    }
    let elapsed = started.elapsed();
    let acked_n = acked.load(Ordering::Relaxed);
    assert_eq!(
        acked_n, total,
        "only {acked_n} of {total} updates acknowledged within {RUN_BOUND:?}"
    );

    // Read back every key's history through a fresh binding.
    let kv = within(ELECTION, "bind", context(nc.clone()).get_key_value(BUCKET))
        .await
        .expect("bind");
    let mut histories: HashMap<String, Vec<(u64, String)>> = HashMap::new();
    for k in 0..KEYS {
        histories.insert(key(k), history(&kv, &key(k)).await);
    }
    let stored: usize = histories.values().map(Vec::len).sum();
    let info = info_with_leader(&nc, STREAM).await;
    assert_eq!(
        info["state"]["messages"], stored as u64,
        "the stream and the key histories disagree: {info}"
    );

    // 1, 2: revisions increase; each stored value expected the previous revision of its key.
    let mut where_stored: HashMap<String, (String, u64, usize)> = HashMap::new();
    for (key, h) in &histories {
        let mut prev = 0u64;
        for (pos, (rev, value)) in h.iter().enumerate() {
            assert!(
                *rev > prev,
                "{key}: revision {rev} after {prev} (history not increasing)"
            );
            assert_eq!(
                expected_of(value),
                Some(prev),
                "{key}: value {value:?} stored at revision {rev} after revision {prev}: \
                 a CAS succeeded on a stale revision"
            );
            let dup = where_stored.insert(value.clone(), (key.clone(), *rev, pos));
            assert!(dup.is_none(), "value {value:?} stored twice");
            prev = *rev;
        }
    }

    // 3, 4: acknowledged updates are stored where their ack said; rejected ones are not.
    let mut known: HashSet<&str> = HashSet::new();
    let (mut rejected, mut ambiguous, mut ambiguous_applied) = (0, 0, 0);
    for a in &attempts {
        known.insert(&a.value);
        let at = where_stored.get(&a.value);
        match a.outcome {
            Outcome::Acked(rev, _) => assert_eq!(
                at.map(|(k, r, _)| (k.as_str(), *r)),
                Some((a.key.as_str(), rev)),
                "acknowledged update {a:?} lost or misplaced"
            ),
            Outcome::Rejected => {
                rejected += 1;
                assert!(at.is_none(), "rejected update {a:?} was stored at {at:?}");
            }
            Outcome::Ambiguous => {
                ambiguous += 1;
                if at.is_some() {
                    ambiguous_applied += 1;
                }
            }
        }
        if let Some((_, rev, _)) = at {
            assert!(*rev > a.expected, "{a:?} stored at {rev}");
        }
    }
    for value in where_stored.keys() {
        assert!(
            value.starts_with("init") || known.contains(value.as_str()),
            "stored value {value:?} was never written by a client"
        );
    }

    // 5: real time. Along a key's history, no update was acknowledged before an earlier one
    // (in history order) started.
    let by_value: HashMap<&str, &Attempt> =
        attempts.iter().map(|a| (a.value.as_str(), a)).collect();
    for (key, h) in &histories {
        let mut latest_start: Option<(Instant, &str)> = None;
        for (_, value) in h {
            let Some(a) = by_value.get(value.as_str()) else {
                continue;
            };
            if let (Outcome::Acked(_, at), Some((s, earlier))) = (a.outcome, latest_start) {
                assert!(
                    at >= s,
                    "{key}: {value:?} was acknowledged before {earlier:?} started, \
                     yet follows it in the history"
                );
            }
            if latest_start.is_none_or(|(s, _)| a.started > s) {
                latest_start = Some((a.started, value.as_str()));
            }
        }
    }

    eprintln!(
        "{total} acknowledged updates in {elapsed:?}; {} attempts: {rejected} rejected \
         (wrong last revision), {ambiguous} ambiguous of which {ambiguous_applied} applied; \
         {stored} messages in the stream; {stale_reads} reads older than the reader's own \
         acknowledged write",
        attempts.len()
    );
    cluster.assert_clean_logs();
}
