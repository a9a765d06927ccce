//! The work-queue failover test of issue 6: four workers share one durable pull consumer on an
//! R3 work-queue stream of 4 x 20,000 messages while the stream leader is killed (SIGKILL) and
//! restarted twice. Every message must end up acknowledged (AckSync confirmed), no message
//! may be delivered again after its ack was confirmed, and the stream ends empty.
//!
//! "After" is judged by the clock, not by the order the test sees things in: a worker's ack
//! whose first AckSync went to the killed leader is retried after 5 s, the ack wait of the
//! message too, so the new leader may redeliver the message a moment before the retried ack
//! is confirmed, and the worker that got the redelivery may look at it only later (its pull
//! collects for up to a second). Each delivery carries the server's delivery time (in the ack
//! reply subject) and each confirmation is stamped when it arrives, on the same machine's
//! clock; a delivery stamped after a confirmation of the same message is a violation.
//!
//! `JETRAFT_WQ_MESSAGES` overrides the per-worker message count (default 20,000).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;
use futures_util::future::join_all;
use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::jsapi::{api, info_with_leader, leader_index, try_api};
use jetraft_tests::harness::pull::{Delivered, ack_sync, pull};
use jetraft_tests::harness::wait_for;
use serde_json::json;

const WORKERS: usize = 4;
/// Bound on the whole consume phase.
const CONSUME_BOUND: Duration = Duration::from_secs(600);

fn per_worker() -> usize {
    std::env::var("JETRAFT_WQ_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

/// A client that knows every node, so it survives the kill of the one it is on.
async fn connect_any(cluster: &Cluster, first: usize) -> async_nats::Client {
    let mut urls = Vec::new();
    for k in 0..cluster.len() {
        let i = (first + k) % cluster.len();
        urls.push(
            cluster
                .node(i)
                .client_url()
                .parse::<async_nats::ServerAddr>()
                .expect("url"),
        );
    }
    async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect(urls)
        .await
        .expect("connect")
}

#[derive(Default)]
struct Progress {
    /// Stream sequences delivered at least once.
    seen: HashSet<u64>,
    /// Stream sequences whose AckSync was confirmed, with the time of the first confirmation
    /// (Unix ns).
    confirmed: HashMap<u64, u64>,
    /// Every delivery: stream sequence, delivery count, server delivery time (Unix ns).
    deliveries: Vec<(u64, u64, u64)>,
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// AckSync with retries: an ack whose confirmation was lost in a failover is sent again (the
/// server confirms an ack of an already acknowledged message at once).
async fn ack_confirmed(nc: &async_nats::Client, d: &Delivered) -> bool {
    for _ in 0..3 {
        if ack_sync(nc, d, Duration::from_secs(5)).await {
            return true;
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn work_queue_survives_two_leader_kills_without_redelivering_acked_messages() {
    let total = WORKERS * per_worker();
    let mut cluster = Cluster::start(3, "wq").await.expect("cluster");
    let nc = connect_any(&cluster, 0).await;
    let created = api(
        &nc,
        "$JS.API.STREAM.CREATE.WQ",
        json!({"name": "WQ", "subjects": ["wq.>"], "num_replicas": 3, "retention": "workqueue"}),
    )
    .await;
    assert!(created["error"].is_null(), "{created}");

    // Publish everything (bounded window, each message retried with its Nats-Msg-Id).
    let js = jetstream::new(nc.clone());
    let started = std::time::Instant::now();
    let mut next = 0usize;
    let publish_deadline = tokio::time::Instant::now() + CONSUME_BOUND;
    while next < total {
        assert!(
            tokio::time::Instant::now() < publish_deadline,
            "publishing took too long"
        );
        let end = (next + 256).min(total);
        let mut acks = Vec::new();
        for i in next..end {
            let mut h = async_nats::HeaderMap::new();
            h.insert("Nats-Msg-Id", format!("job-{i}").as_str());
            let fut = js.publish_with_headers(
                format!("wq.job.{}", i % 16),
                h,
                Bytes::from(format!("job-{i}")),
            );
            acks.push(async move {
                match tokio::time::timeout(Duration::from_secs(10), fut).await {
                    Ok(Ok(ack)) => tokio::time::timeout(Duration::from_secs(10), ack.into_future())
                        .await
                        .is_ok_and(|r| r.is_ok()),
                    _ => false,
                }
            });
        }
        if join_all(acks).await.into_iter().all(|ok| ok) {
            next = end;
        }
    }
    let info = info_with_leader(&nc, "WQ").await;
    assert_eq!(info["state"]["messages"], total as u64, "{info}");
    eprintln!("published {total} messages in {:?}", started.elapsed());
    api(
        &nc,
        "$JS.API.CONSUMER.CREATE.WQ.workers",
        json!({"stream_name": "WQ", "config": {
            "durable_name": "workers", "ack_policy": "explicit", "ack_wait": 5_000_000_000u64,
            "max_ack_pending": 10_000
        }}),
    )
    .await;

    let progress = Arc::new(Mutex::new(Progress::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let deadline = tokio::time::Instant::now() + CONSUME_BOUND;
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let wc = connect_any(&cluster, w % 3).await;
        let progress = progress.clone();
        let stop = stop.clone();
        workers.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && tokio::time::Instant::now() < deadline
            {
                let batch = pull(&wc, "WQ", "workers", 100, Duration::from_secs(1)).await;
                {
                    let mut p = progress.lock().expect("progress lock");
                    for d in &batch {
                        p.deliveries
                            .push((d.stream_seq, d.delivered, d.timestamp_ns));
                        p.seen.insert(d.stream_seq);
                    }
                }
                let acks = batch.iter().map(|d| {
                    let wc = wc.clone();
                    async move {
                        ack_confirmed(&wc, d)
                            .await
                            .then(|| (d.stream_seq, unix_ns()))
                    }
                });
                let done: Vec<(u64, u64)> = join_all(acks).await.into_iter().flatten().collect();
                let mut p = progress.lock().expect("progress lock");
                for (seq, at) in done {
                    p.confirmed.entry(seq).or_insert(at);
                }
            }
        }));
    }

    // Kill the stream leader at a third and at two thirds of the way, restart it each time.
    for k in 1..=2 {
        wait_for("consume progress", CONSUME_BOUND, || {
            let progress = progress.clone();
            async move {
                (progress.lock().expect("progress lock").confirmed.len() * 3 >= total * k)
                    .then_some(())
            }
        })
        .await;
        let victim = leader_index(&cluster, &nc, "WQ").await;
        cluster.kill(victim);
        tokio::time::sleep(Duration::from_secs(2)).await;
        cluster.restart(victim).await.expect("restart");
    }
    // Done when the queue is drained and nothing is pending acknowledgement.
    wait_for("work queue drained", CONSUME_BOUND, || {
        let nc = nc.clone();
        async move {
            let info = info_with_leader(&nc, "WQ").await;
            let c = try_api(
                &nc,
                "$JS.API.CONSUMER.INFO.WQ.workers",
                &serde_json::Value::Null,
            )
            .await?;
            (info["state"]["messages"] == 0 && c["num_ack_pending"] == 0 && c["num_pending"] == 0)
                .then_some(())
        }
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in workers {
        w.await.expect("worker");
    }
    eprintln!("consumed {total} messages after {:?}", started.elapsed());
    let p = progress.lock().expect("progress lock");
    assert!(
        p.deliveries.iter().all(|(_, _, ts)| *ts > 0),
        "a delivery without a time stamp"
    );
    let redelivered = p.deliveries.iter().filter(|(_, n, _)| *n > 1).count();
    let violations: Vec<(u64, u64, i128)> = p
        .deliveries
        .iter()
        .filter_map(|&(seq, n, ts)| {
            let at = *p.confirmed.get(&seq)?;
            (ts > at).then(|| (seq, n, i128::from(ts) - i128::from(at)))
        })
        .collect();
    eprintln!(
        "{redelivered} redeliveries, {} after their ack was confirmed",
        violations.len()
    );
    assert!(
        violations.is_empty(),
        "delivered after the ack was confirmed (seq, delivery count, ns after): {:?}",
        &violations[..violations.len().min(20)]
    );
    let missing: BTreeSet<u64> = (1..=total as u64).filter(|s| !p.seen.contains(s)).collect();
    assert!(
        missing.is_empty(),
        "{} messages never delivered, e.g. {:?}",
        missing.len(),
        missing.iter().take(20).collect::<Vec<_>>()
    );
    eprintln!(
        "{} of {total} acks confirmed to the workers (the rest were acknowledged while a leader died)",
        p.confirmed.len()
    );
}
