//! Self-repair of a node whose store was damaged while it was stopped (issue 23 item 3), on
//! three jetraft processes with an R3 file stream and async-nats:
//!
//! - damaged table files (bytes flipped in a data block of every `*.sst` file): the node comes
//!   back on its own, its store moved aside under `damaged-*`, under a new node id; its replica
//!   is rebuilt from the stream's leader, its `/healthz` goes healthy, and every acknowledged
//!   message is read through it once it leads the stream;
//! - a damaged WAL: the node refuses to start without `--repair_store` (naming the flag), and
//!   with it rejoins and gets its replica again, as above;
//! - a second fault while the first repair runs (the stream's leader killed with SIGKILL right
//!   after the damaged node came back, under a publisher): no acknowledged message is lost, and
//!   every replica holds every one of them afterwards;
//! - every node damaged at once: each moves its store aside, and none forms a new, empty
//!   cluster (the data stays in the moved-aside stores for an operator);
//! - overlapping repairs (issue 23): one node loses its volume and, while it cannot have caught
//!   up yet (frozen right after it rejoined under a new id), the other follower's table files
//!   are damaged: the new id replaced the dead one as a voter at once, so the stream stays
//!   writable once the first node caught up, and no acknowledged message is lost;
//! - a rebuild under publishes (issues 23, 27): a follower loses its volume while the stream's
//!   log is purged past its start, so the leader sends it a snapshot; a publisher keeps going
//!   from before the node returns until it is a current replica again, each publish acknowledged
//!   (the snapshot is read outside the state machine's lock), and afterwards every replica holds
//!   every acknowledged message.
//!
//! jetraft only: the store layout and the repair are jetraft's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::jsapi::{api, index_of, info_with_leader, publish_acked, try_api};
use jetraft_tests::harness::{ServerKind, ServerProcess, connect, server_kind, wait_for};
use serde_json::{Value, json};

/// Bound on a repair (new id admitted, replica rebuilt and current, node healthy).
const REPAIR: Duration = Duration::from_secs(60);
/// The stream every test uses.
const STREAM: &str = "HEAL";

fn jetraft_only() -> bool {
    server_kind() == ServerKind::Jetraft
}

/// The node's database directory.
fn db_dir(node: &ServerProcess) -> PathBuf {
    node.dir().join("store").join("jetraft")
}

/// The node's id as stored in its store dir.
fn node_id(node: &ServerProcess) -> String {
    std::fs::read_to_string(node.dir().join("store").join("node_id"))
        .expect("node_id file")
        .trim()
        .to_string()
}

/// The directories damaged stores were moved into.
fn damaged_dirs(node: &ServerProcess) -> Vec<PathBuf> {
    std::fs::read_dir(node.dir().join("store"))
        .expect("store dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            (p.file_name().and_then(|n| n.to_str())).is_some_and(|n| n.starts_with("damaged-"))
        })
        .collect()
}

/// Files of `dir` whose name `pick` accepts, largest first.
fn files(dir: &Path, pick: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut out: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .expect("db dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_str().is_some_and(&pick))
        .filter_map(|e| Some((e.metadata().ok()?.len(), e.path())))
        .filter(|(len, _)| *len > 0)
        .collect();
    out.sort_by_key(|e| std::cmp::Reverse(e.0));
    out.into_iter().map(|(_, p)| p).collect()
}

/// Inverts `len` bytes of `path` at `at`.
fn flip(path: &Path, at: u64, len: usize) {
    let mut bytes = std::fs::read(path).expect("read file");
    let start = usize::try_from(at).expect("offset").min(bytes.len());
    let end = (start + len).min(bytes.len());
    for b in &mut bytes[start..end] {
        *b = !*b;
    }
    std::fs::write(path, bytes).expect("write file");
}

/// Flips 16 bytes in the first data block (table files start with their data blocks) and 16
/// bytes a quarter into every table file of the node; returns how many files were damaged.
fn damage_tables(node: &ServerProcess) -> usize {
    let tables = files(&db_dir(node), |n| n.ends_with(".sst"));
    for t in &tables {
        let len = std::fs::metadata(t).expect("table file").len();
        flip(t, 64, 16);
        flip(t, len / 4, 16);
    }
    tables.len()
}

/// About 1 KiB of text that does not compress (so the messages fill many table blocks).
fn noise(seed: u64) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..1000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(ALPHABET[usize::try_from(x % 62).unwrap_or(0)])
        })
        .collect()
}

/// Flips 64 bytes in the middle of the largest WAL file (intact records follow the damage, so
/// it is not a torn tail); true if there was one.
fn damage_wal(node: &ServerProcess) -> bool {
    let wal = files(&db_dir(node), |n| {
        n.ends_with(".log") && n.starts_with(|c: char| c.is_ascii_digit())
    });
    let Some(largest) = wal.first() else {
        return false;
    };
    let len = std::fs::metadata(largest).expect("wal").len();
    flip(largest, len / 2, 64);
    true
}

/// Creates the R3 file stream and publishes `count` messages of about 1 KiB through `nc`, each
/// acknowledged; returns `(sequence, body)` of each.
async fn fill(nc: &async_nats::Client, count: usize) -> Vec<(u64, String)> {
    fill_kib(nc, count, 1).await
}

/// [`fill`] with messages of about `kib` KiB, published one at a time (so each is a Raft entry
/// of its own).
async fn fill_kib(nc: &async_nats::Client, count: usize, kib: usize) -> Vec<(u64, String)> {
    let cfg = json!({"name": STREAM, "subjects": ["heal.>"], "num_replicas": 3, "storage": "file"});
    let created = api(nc, &format!("$JS.API.STREAM.CREATE.{STREAM}"), cfg).await;
    assert!(created["error"].is_null(), "{created}");
    let mut acked = Vec::with_capacity(count);
    for i in 0..count {
        let body = format!("m{i:05}-{}", noise(i as u64).repeat(kib));
        let ack = publish_acked(nc, "heal.m", &format!("m{i}"), &body).await;
        acked.push((ack["seq"].as_u64().expect("seq"), body));
    }
    acked
}

/// Waits until `node`'s full `/healthz` answers 200.
async fn wait_healthy(node: &ServerProcess) {
    wait_for(&format!("{} healthy", node.name()), REPAIR, || async {
        let r = node.http_get("/healthz").await.ok()?;
        (r.status == 200).then_some(())
    })
    .await;
}

/// Waits until the stream has a leader and two current followers, `name` among the three.
async fn wait_replica_on(nc: &async_nats::Client, name: &str) -> Value {
    wait_for(
        &format!("{name} a current replica of {STREAM}"),
        REPAIR,
        || async {
            let info = try_api(nc, &format!("$JS.API.STREAM.INFO.{STREAM}"), &Value::Null).await?;
            let followers = info["cluster"]["replicas"].as_array()?.clone();
            let leader = info["cluster"]["leader"].as_str()?.to_string();
            let current = followers.len() == 2 && followers.iter().all(|r| r["current"] == true);
            let named = leader == name || followers.iter().any(|r| r["name"] == name);
            (current && named).then_some(info)
        },
    )
    .await
}

/// Makes `name` lead the stream (STREAM.LEADER.STEPDOWN with it preferred) unless it does.
async fn move_leader_to(nc: &async_nats::Client, name: &str) {
    let info = info_with_leader(nc, STREAM).await;
    if info["cluster"]["leader"] == name {
        return;
    }
    wait_for(&format!("{name} leads {STREAM}"), REPAIR, || async {
        let body = json!({"placement": {"preferred": name}});
        let subject = format!("$JS.API.STREAM.LEADER.STEPDOWN.{STREAM}");
        let _ = try_api(nc, &subject, &body).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let info = try_api(nc, &format!("$JS.API.STREAM.INFO.{STREAM}"), &Value::Null).await?;
        (info["cluster"]["leader"] == name).then_some(())
    })
    .await;
}

/// Every message of `acked` is stored at its sequence, read with MSG.GET (answered by the
/// leader from its own copy).
async fn assert_stored(nc: &async_nats::Client, acked: &[(u64, String)]) {
    let subject = format!("$JS.API.STREAM.MSG.GET.{STREAM}");
    for (seq, body) in acked {
        let got = api(nc, &subject, json!({ "seq": seq })).await;
        let data = got["message"]["data"].as_str().unwrap_or_default();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap_or_default();
        assert_eq!(
            String::from_utf8_lossy(&bytes),
            body.as_str(),
            "message {seq}: {got}"
        );
    }
}

/// The checks after a repair of node `i`: a new id, the damaged store kept aside, healthy, a
/// current replica, and every acknowledged message read from its copy while it leads.
async fn assert_repaired(cluster: &Cluster, i: usize, old_id: &str, acked: &[(u64, String)]) {
    let node = cluster.node(i);
    assert_ne!(node_id(node), old_id, "the repaired node has a new id");
    let aside = damaged_dirs(node);
    assert_eq!(aside.len(), 1, "damaged store kept aside: {aside:?}");
    assert!(aside[0].join("jetraft").is_dir() && aside[0].join("node_id").is_file());
    assert!(
        node.dir().join("store").join("join_only").is_file(),
        "a repaired node never forms a cluster of its own"
    );
    wait_healthy(node).await;
    let nc = connect(node).await;
    wait_replica_on(&nc, node.name()).await;
    move_leader_to(&nc, node.name()).await;
    assert_stored(&nc, acked).await;
}

#[tokio::test]
async fn a_node_with_damaged_table_files_repairs_itself_from_its_peers() {
    if !jetraft_only() {
        return;
    }
    let mut cluster = Cluster::start(3, "heal-sst").await.expect("cluster");
    let nc = connect(cluster.node(0)).await;
    let acked = fill(&nc, 300).await;
    let victim = 2;
    let old_id = node_id(cluster.node(victim));
    cluster.node_mut(victim).stop().await.expect("stop");
    assert!(damage_tables(cluster.node(victim)) > 0, "no table file");
    cluster.restart(victim).await.expect("restart");
    assert!(
        cluster
            .node(victim)
            .log()
            .contains("damaged store moved aside"),
        "the damage was found at start"
    );
    assert_repaired(&cluster, victim, &old_id, &acked).await;
    // The other nodes kept everything too, and the stream takes publishes.
    let more = publish_acked(&nc, "heal.m", "after", "after").await;
    assert_eq!(more["seq"].as_u64(), Some(acked.len() as u64 + 1), "{more}");
}

#[tokio::test]
async fn a_node_with_a_damaged_wal_rejoins_with_repair_store() {
    if !jetraft_only() {
        return;
    }
    let mut cluster = Cluster::start(3, "heal-wal").await.expect("cluster");
    let nc = connect(cluster.node(0)).await;
    let acked = fill(&nc, 300).await;
    let victim = 1;
    let old_id = node_id(cluster.node(victim));
    // A clean stop flushes the WAL into table files: a crash leaves it full.
    cluster.kill(victim);
    assert!(damage_wal(cluster.node(victim)), "no WAL file");
    let refused = cluster.node_mut(victim).start_again().await;
    assert!(refused.is_err(), "started on a damaged WAL");
    let log = cluster.node(victim).log();
    assert!(log.contains("--repair_store"), "the refusal names the flag");
    assert_eq!(node_id(cluster.node(victim)), old_id, "nothing moved");
    (cluster.node_mut(victim))
        .start_again_with(&["--repair_store"])
        .await
        .expect("start with --repair_store");
    cluster.wait_formed().await.expect("formed");
    assert_repaired(&cluster, victim, &old_id, &acked).await;
}

#[tokio::test]
async fn a_second_fault_during_a_repair_loses_no_acknowledged_message() {
    if !jetraft_only() {
        return;
    }
    let mut cluster = Cluster::start(3, "heal-two").await.expect("cluster");
    let nc = connect(cluster.node(0)).await;
    let mut acked = fill(&nc, 600).await;
    let victim = 2;
    let old_id = node_id(cluster.node(victim));
    cluster.node_mut(victim).stop().await.expect("stop");
    assert!(damage_tables(cluster.node(victim)) > 0, "no table file");
    // A publisher on the node that stays up the whole time.
    let keeper = {
        let leader = stream_leader(&cluster, &nc).await;
        (0..3)
            .find(|i| *i != victim && *i != leader)
            .expect("a third node")
    };
    let pub_nc = connect(cluster.node(keeper)).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let publisher = publish_until(pub_nc, stop.clone());
    cluster
        .node_mut(victim)
        .start_again()
        .await
        .expect("damaged node starts");
    // The second fault, while the damaged node is being rebuilt: the third node (the stream's
    // leader when the victim stopped) dies.
    let second = 3 - victim - keeper;
    cluster.kill(second);
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.restart(second).await.expect("killed node back");
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    acked.extend(publisher.await.expect("publisher"));
    assert!(
        cluster
            .node(victim)
            .log()
            .contains("damaged store moved aside"),
        "the damage was found at start"
    );
    assert_repaired(&cluster, victim, &old_id, &acked).await;
    let nc = connect(cluster.node(keeper)).await;
    for i in [second, keeper] {
        wait_healthy(cluster.node(i)).await;
        let name = cluster.node(i).name().to_string();
        move_leader_to(&nc, &name).await;
        assert_stored(&nc, &acked).await;
    }
}

#[tokio::test]
async fn nodes_that_all_moved_their_stores_aside_form_no_new_cluster() {
    if !jetraft_only() {
        return;
    }
    let mut cluster = Cluster::start(3, "heal-all").await.expect("cluster");
    let nc = connect(cluster.node(0)).await;
    fill(&nc, 50).await;
    let formed = |c: &Cluster| -> usize {
        (0..3)
            .map(|i| c.node(i).log().matches("meta group initialised").count())
            .sum()
    };
    let formed_before = formed(&cluster);
    for i in 0..3 {
        cluster.node_mut(i).stop().await.expect("stop");
        assert!(damage_tables(cluster.node(i)) > 0, "no table file");
    }
    for i in 0..3 {
        cluster.node_mut(i).start_again().await.expect("start");
        assert!(
            cluster.node(i).log().contains("damaged store moved aside"),
            "the damage was found at start"
        );
    }
    cluster.wait_formed().await.expect("linked");
    // A fresh cluster forms within a second or two of its nodes linking: give it longer.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        formed(&cluster),
        formed_before,
        "a new meta group was formed"
    );
    let nc = connect(cluster.node(0)).await;
    let names = try_api(&nc, "$JS.API.STREAM.NAMES", &json!({})).await;
    assert!(
        names.as_ref().is_none_or(|n| n["total"].is_null()),
        "an empty cluster answers: {names:?}"
    );
    for i in 0..3 {
        assert_eq!(
            damaged_dirs(cluster.node(i)).len(),
            1,
            "the old store is kept"
        );
    }
}

/// How often `needle` occurs in the logs of all nodes.
fn in_logs(cluster: &Cluster, needle: &str) -> usize {
    (0..cluster.len())
        .map(|i| cluster.node(i).log().matches(needle).count())
        .sum()
}

#[tokio::test]
async fn a_node_damaged_while_another_is_rebuilt_leaves_the_stream_writable() {
    if !jetraft_only() {
        return;
    }
    let mut cluster = Cluster::start(3, "heal-overlap").await.expect("cluster");
    let nc = connect(cluster.node(0)).await;
    // More Raft entries than openraft's replication lag threshold (5,000), so a new replica
    // does not count as caught up before the stream's snapshot (~22 MB) is installed on it.
    let acked = fill_kib(&nc, 5_500, 4).await;
    let leader = stream_leader(&cluster, &nc).await;
    let lost = (leader + 1) % 3;
    let damaged = (leader + 2) % 3;
    // First fault: `lost` loses its volume and rejoins empty under a new id.
    stop_and_wipe(&mut cluster, lost).await;
    let retired = in_logs(&cluster, "replaced node id retired");
    let moved = in_logs(&cluster, &format!("stream replicas moved stream={STREAM}"));
    cluster
        .node_mut(lost)
        .start_again()
        .await
        .expect("start empty");
    // As soon as the meta leader retired its old id, the new id is frozen: it cannot catch up
    // until the end of the test.
    wait_for("the lost node's old id retired", REPAIR, || async {
        (in_logs(&cluster, "replaced node id retired") > retired).then_some(())
    })
    .await;
    cluster.node(lost).freeze().await.expect("SIGSTOP");
    // Its old id, which never answers again, leaves the stream's voters at once (in the same
    // change that makes the new id a voter), without waiting for a catch-up.
    wait_for("the dead id swapped out of the stream", REPAIR, || async {
        let now = in_logs(&cluster, &format!("stream replicas moved stream={STREAM}"));
        (now > moved).then_some(())
    })
    .await;
    // Second fault, while the first node's replica is still empty: the other follower's table
    // files are damaged; it moves its store aside and rejoins under a new id too.
    cluster.node_mut(damaged).stop().await.expect("stop");
    assert!(damage_tables(cluster.node(damaged)) > 0, "no table file");
    cluster
        .node_mut(damaged)
        .start_again()
        .await
        .expect("damaged node starts");
    (cluster.node(lost))
        .signal(rustix::process::Signal::CONT)
        .expect("SIGCONT");
    // The stream's only intact replica (its leader) rebuilds both; the stream takes publishes
    // again and every replica holds every acknowledged message.
    for i in 0..3 {
        wait_healthy(cluster.node(i)).await;
    }
    let more = publish_acked(&nc, "heal.m", "after", "after").await;
    assert_eq!(more["seq"].as_u64(), Some(acked.len() as u64 + 1), "{more}");
    for i in [lost, damaged, leader] {
        let name = cluster.node(i).name().to_string();
        move_leader_to(&nc, &name).await;
        assert_stored(&nc, &acked).await;
    }
    assert_eq!(
        damaged_dirs(cluster.node(damaged)).len(),
        1,
        "store moved aside"
    );
}

/// The index of the node leading [`STREAM`] (waiting until one does).
async fn stream_leader(cluster: &Cluster, nc: &async_nats::Client) -> usize {
    let info = info_with_leader(nc, STREAM).await;
    index_of(
        cluster,
        info["cluster"]["leader"].as_str().unwrap_or_default(),
    )
}

/// Stops node `i` and empties its store directory: a lost volume.
async fn stop_and_wipe(cluster: &mut Cluster, i: usize) {
    cluster.node_mut(i).stop().await.expect("stop");
    let store = cluster.node(i).dir().join("store");
    std::fs::remove_dir_all(&store).expect("wipe the store");
    std::fs::create_dir(&store).expect("empty store dir");
}

/// Publishes `during-<i>` messages one at a time through `nc` until `stop` is set (at most
/// 20,000); returns `(sequence, body)` of each, all acknowledged.
fn publish_until(
    nc: async_nats::Client,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(u64, String)>> {
    tokio::spawn(async move {
        let mut out = Vec::new();
        for i in 0..20_000 {
            if stop.load(std::sync::atomic::Ordering::SeqCst) {
                break;
            }
            let body = format!("during-{i}");
            let ack = publish_acked(&nc, "heal.d", &body, &body).await;
            out.push((ack["seq"].as_u64().expect("seq"), body));
        }
        out
    })
}

#[tokio::test]
async fn a_stream_acknowledges_publishes_while_a_replica_is_rebuilt_from_a_snapshot() {
    if !jetraft_only() {
        return;
    }
    let mut cluster = Cluster::start(3, "heal-busy").await.expect("cluster");
    let nc = connect(cluster.node(0)).await;
    // More Raft entries than openraft's snapshot interval (5,000): the log is purged past the
    // start, so an empty replica can only be rebuilt from a snapshot (~22 MB: spooled to disk
    // by the receiver, restored in two passes, its messages ingested as table files).
    let mut acked = fill_kib(&nc, 5_500, 4).await;
    let leader = stream_leader(&cluster, &nc).await;
    let lost = (leader + 1) % 3;
    let installs = cluster
        .node(lost)
        .log()
        .matches("installing snapshot")
        .count();
    stop_and_wipe(&mut cluster, lost).await;

    // The publisher runs on the leader's node from before the wiped node returns until its
    // replica is rebuilt and current.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let publisher = publish_until(connect(cluster.node(leader)).await, stop.clone());
    cluster
        .node_mut(lost)
        .start_again()
        .await
        .expect("start empty");
    let name = cluster.node(lost).name().to_string();
    wait_healthy(cluster.node(lost)).await;
    wait_replica_on(&nc, &name).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let during = publisher.await.expect("publisher");
    assert!(!during.is_empty(), "no publish was acknowledged");
    acked.extend(during);
    let log = cluster.node(lost).log();
    assert!(
        log.matches("installing snapshot").count() > installs,
        "the wiped replica was rebuilt from a snapshot"
    );
    // Larger than a spool batch (8 MiB): it was received onto disk, not into memory, and
    // restored from there (into an empty store: as ingested table files).
    let bytes: u64 = log
        .lines()
        .filter(|l| l.contains("installing snapshot"))
        .filter_map(|l| {
            l.split("bytes=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .max()
        .unwrap_or(0);
    assert!(bytes > 8 << 20, "snapshot of {bytes} bytes");

    // Every acknowledged message, each at its own sequence with nothing in between, on every
    // replica (each read while it leads).
    let info = info_with_leader(&nc, STREAM).await;
    assert_eq!(info["state"]["last_seq"].as_u64(), Some(acked.len() as u64));
    for i in [lost, leader, (leader + 2) % 3] {
        let name = cluster.node(i).name().to_string();
        move_leader_to(&nc, &name).await;
        assert_stored(&nc, &acked).await;
    }
}

#[tokio::test]
async fn a_stream_that_lost_a_majority_of_its_replicas_says_so_in_healthz() {
    if !jetraft_only() {
        return;
    }
    // Five nodes: the meta group keeps its majority when two nodes lose their volumes at once,
    // the R3 stream on three of them does not.
    let mut cluster = Cluster::start(5, "heal-majority").await.expect("cluster");
    let nc = connect(cluster.node(0)).await;
    fill(&nc, 20).await;
    let info = info_with_leader(&nc, STREAM).await;
    let leader = index_of(
        &cluster,
        info["cluster"]["leader"].as_str().unwrap_or_default(),
    );
    let followers: Vec<usize> = (info["cluster"]["replicas"].as_array())
        .expect("replicas")
        .iter()
        .map(|r| index_of(&cluster, r["name"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(followers.len(), 2, "{info}");
    for &i in &followers {
        stop_and_wipe(&mut cluster, i).await;
    }
    for &i in &followers {
        cluster
            .node_mut(i)
            .start_again()
            .await
            .expect("start empty");
    }
    // Both old ids are retired by the meta group (which still has three of its five voters);
    // the stream's group cannot commit the change that would replace them, and its surviving
    // replica says why instead of a bare "not current".
    let node = cluster.node(leader);
    wait_for(
        "the survivor's /healthz names the lost majority",
        REPAIR,
        || async {
            let r = node.http_get("/healthz").await.ok()?;
            (r.status == 503 && r.body.contains("lost a majority of its replicas")).then_some(())
        },
    )
    .await;
    assert!(
        node.log()
            .contains("stream lost a majority of its replicas"),
        "logged"
    );
}
