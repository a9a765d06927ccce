//! A peer that is down costs the nodes still running a bounded number of log lines: the Raft
//! transport retries with a capped exponential backoff and reports the peer once when it goes
//! down, then at most once per report interval, instead of one line per failed attempt of
//! every group (about 200,000 lines a second were seen before).
//!
//! jetraft only: the lines counted are jetraft's.

use std::time::Duration;

use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::jsapi::{api, publish_acked};
use jetraft_tests::harness::{ServerKind, connect, server_kind};
use serde_json::json;
use tokio::time::Instant;

/// Streams of three replicas, so every surviving node replicates several groups to the
/// stopped one (as leader) or runs elections for the groups it led.
const STREAMS: usize = 4;
/// How long the peer stays down.
const DOWN_FOR: Duration = Duration::from_secs(20);
/// Most log lines a surviving node may write while the peer is down: the link failure, a
/// summary or two, elections and leader changes of the groups the stopped node led.
const MAX_LINES: usize = 30;

/// CPU time (user + system) the process `pid` used so far, from `/proc/<pid>/stat`.
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // Linux reports in USER_HZ, 100 on every architecture jetraft runs on.
    Some(Duration::from_millis(ticks * 10))
}

#[tokio::test]
async fn a_stopped_peer_costs_a_bounded_number_of_log_lines() {
    if server_kind() != ServerKind::Jetraft {
        return;
    }
    let mut cluster = Cluster::start(3, "peerdown").await.expect("cluster");
    let nc = connect(cluster.node(0)).await;
    for i in 0..STREAMS {
        let name = format!("PD{i}");
        let r = api(
            &nc,
            &format!("$JS.API.STREAM.CREATE.{name}"),
            json!({"name": name, "subjects": [format!("pd{i}.>")], "num_replicas": 3}),
        )
        .await;
        assert!(r["error"].is_null(), "{r}");
        publish_acked(&nc, &format!("pd{i}.x"), &format!("first{i}"), "x").await;
    }

    let lines_at = |c: &Cluster, i: usize| c.node(i).log().lines().count();
    let before = [lines_at(&cluster, 0), lines_at(&cluster, 1)];
    let cpu_before = [0, 1].map(|i| cluster.node(i).pid().and_then(cpu_time));
    cluster.kill(2);
    let down_at = Instant::now();
    // Keep writing while the peer is down, so the leaders have entries to replicate to it.
    let mut n = 0u64;
    while down_at.elapsed() < DOWN_FOR {
        for i in 0..STREAMS {
            publish_acked(&nc, &format!("pd{i}.x"), &format!("down{n}-{i}"), "x").await;
        }
        n += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let down = down_at.elapsed();
    let after = [lines_at(&cluster, 0), lines_at(&cluster, 1)];
    let cpu_after = [0, 1].map(|i| cluster.node(i).pid().and_then(cpu_time));
    for i in 0..2 {
        let cpu = match (cpu_before[i], cpu_after[i]) {
            (Some(b), Some(a)) => format!("{:?}", a.saturating_sub(b)),
            _ => "unknown".to_string(),
        };
        eprintln!(
            "n{}: {} log lines and {cpu} CPU in {down:?} with n3 down ({n} publish rounds)",
            i + 1,
            after[i] - before[i],
        );
    }
    for (i, skip) in before.into_iter().enumerate() {
        let log = cluster.node(i).log();
        let new: Vec<&str> = log.lines().skip(skip).collect();
        for line in new.iter().take(10) {
            eprintln!("n{}: {line}", i + 1);
        }
        assert!(
            new.len() <= MAX_LINES,
            "n{} logged {} lines in {down:?} with a peer down (at most {MAX_LINES}); first \
             ones:\n{}",
            i + 1,
            new.len(),
            new.iter().take(30).copied().collect::<Vec<_>>().join("\n")
        );
    }

    // The peer comes back and catches up: every stream answers through it.
    cluster.restart(2).await.expect("restart n3");
    let back = connect(cluster.node(2)).await;
    for i in 0..STREAMS {
        publish_acked(&back, &format!("pd{i}.x"), &format!("back{i}"), "x").await;
    }
    cluster.assert_clean_logs();
}
