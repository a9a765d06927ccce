//! Storage engine benchmark: durable Raft-log appends through group commit, stream store reads
//! and scans, and the memory store's append rate. Prints one markdown table row per figure.
//!
//! Usage: `cargo run -p jetraft-storage --example storage_bench -- [--dir DIR] [--secs N]
//! [--writers N,M,..]` (`--writers` measures only the durable appends, for those writer counts).
//! Runs in the dev profile (this crate at opt-level 3, RocksDB's C++ at -O1, see Cargo.toml).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use jetraft_storage::Db;
use jetraft_storage::keys::META_USER_MIN;
use jetraft_storage::mem::MemStreamStore;
use jetraft_storage::rocks::{GroupId, LogCodec, LogWriter, RaftLogStore, RocksStreamStore};
use jetraft_storage::stream::limits::{
    DiscardPolicy, StoreOutcome, StreamLimits, store_with_limits,
};
use jetraft_storage::stream::{StoredMsg, StreamStore, StreamUid};
use openraft::entry::RaftEntry;
use openraft::impls::leader_id_adv::LeaderId;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::type_config::TypeConfigExt;
use openraft::type_config::alias::{LogIdOf, VoteOf};
use openraft::{EntryPayload, LogId, RaftTypeConfig};

openraft::declare_raft_types!(Bench);

/// Blank and normal entries only; enough for the benchmark.
struct BenchCodec;

fn put_log_id(id: &LogIdOf<Bench>, out: &mut Vec<u8>) {
    out.extend_from_slice(&id.leader_id.term.to_be_bytes());
    out.extend_from_slice(&id.leader_id.node_id.to_be_bytes());
    out.extend_from_slice(&id.index.to_be_bytes());
}

fn get_u64(b: &[u8], at: usize) -> Result<u64, String> {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| "short".to_string())
}

fn get_log_id(b: &[u8]) -> Result<LogIdOf<Bench>, String> {
    Ok(LogId::new(
        LeaderId {
            term: get_u64(b, 0)?,
            node_id: get_u64(b, 8)?,
        },
        get_u64(b, 16)?,
    ))
}

impl LogCodec<Bench> for BenchCodec {
    fn encode_entry(entry: &<Bench as RaftTypeConfig>::Entry, out: &mut Vec<u8>) {
        put_log_id(&entry.log_id, out);
        match &entry.payload {
            EntryPayload::Normal(d) => {
                out.push(1);
                out.extend_from_slice(d.as_bytes());
            }
            _ => out.push(0),
        }
    }
    fn decode_entry(b: &[u8]) -> Result<<Bench as RaftTypeConfig>::Entry, String> {
        let id = get_log_id(b)?;
        Ok(match b.get(24) {
            Some(1) => {
                let d = String::from_utf8(b[25..].to_vec()).map_err(|e| e.to_string())?;
                <Bench as RaftTypeConfig>::Entry::new_normal(id, d)
            }
            _ => <Bench as RaftTypeConfig>::Entry::new_blank(id),
        })
    }
    fn encode_vote(vote: &VoteOf<Bench>, out: &mut Vec<u8>) {
        out.extend_from_slice(&vote.leader_id.term.to_be_bytes());
        out.extend_from_slice(&vote.leader_id.node_id.to_be_bytes());
        out.push(u8::from(vote.committed));
    }
    fn decode_vote(b: &[u8]) -> Result<VoteOf<Bench>, String> {
        Ok(openraft::impls::Vote {
            leader_id: LeaderId {
                term: get_u64(b, 0)?,
                node_id: get_u64(b, 8)?,
            },
            committed: b.get(16) == Some(&1),
        })
    }
    fn encode_log_id(id: &LogIdOf<Bench>, out: &mut Vec<u8>) {
        put_log_id(id, out)
    }
    fn decode_log_id(b: &[u8]) -> Result<LogIdOf<Bench>, String> {
        get_log_id(b)
    }
}

type Log = RaftLogStore<Bench, BenchCodec>;

fn row(what: &str, value: f64, unit: &str) {
    println!("| {what} | {value:.0} | {unit} |");
}

/// `writers` tasks, each its own Raft group, each appending one 128-byte entry at a time and
/// waiting for its flush callback before the next: every counted append is fsynced.
async fn durable_appends(db: &Db, writer: &LogWriter, writers: u64, secs: f64) -> (f64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let syncs0 = writer.stats().syncs.load(Ordering::Relaxed);
    let base_group = 1_000_000 * writers;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let mut log = Log::new(db.clone(), writer.clone(), GroupId(base_group + w));
        let (stop, done) = (stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut index = 1;
            while !stop.load(Ordering::Relaxed) {
                let id = LogId::new(
                    LeaderId {
                        term: 1,
                        node_id: 1,
                    },
                    index,
                );
                let e = <Bench as RaftTypeConfig>::Entry::new_normal(id, "p".repeat(128));
                let (tx, rx) = Bench::oneshot();
                log.append([e], IOFlushed::signal(tx))
                    .await
                    .expect("append");
                rx.await.expect("callback").expect("durable");
                done.fetch_add(1, Ordering::Relaxed);
                index += 1;
            }
        }));
    }
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let n = done.load(Ordering::Relaxed);
    let el = t0.elapsed().as_secs_f64();
    let syncs = writer.stats().syncs.load(Ordering::Relaxed) - syncs0;
    for t in tasks {
        t.await.expect("task");
    }
    (n as f64 / el, syncs as f64 / el)
}

fn message(seq: u64, subject: String) -> StoredMsg {
    StoredMsg {
        seq,
        subject,
        headers: Bytes::new(),
        payload: Bytes::from(vec![b'p'; 128]),
        timestamp_ns: seq,
    }
}

/// KV puts as a stream's apply makes them, on a fresh stream: each staged (`begin_batch`),
/// stored with `max_msgs_per_subject = history` (from the key's `history + 1`-th put on, its
/// oldest value goes), then written with an applied-index record (`put_metas`). 100 keys in
/// turn, so each is replaced `count / 100` times and the index entries of its removed values
/// pile up as tombstones in the memtable. Returns puts/s.
fn kv_puts(db: &Db, uid: StreamUid, history: u64, count: u64) -> f64 {
    let mut s = RocksStreamStore::open(db.clone(), uid).expect("stream");
    let limits = StreamLimits {
        max_msgs_per_subject: Some(history),
        discard: DiscardPolicy::New,
        ..Default::default()
    };
    let keys: Vec<String> = (0..100).map(|k| format!("$KV.B.key.{k}")).collect();
    let t0 = Instant::now();
    for seq in 1..=count {
        s.begin_batch();
        let key = keys[(seq % 100) as usize].clone();
        let outcome = store_with_limits(&mut s, &limits, &message(seq, key)).expect("store");
        assert!(matches!(outcome, StoreOutcome::Stored { .. }));
        s.put_metas(&[(META_USER_MIN, &seq.to_be_bytes())])
            .expect("put_metas");
    }
    count as f64 / t0.elapsed().as_secs_f64()
}

fn timed(secs: f64, mut f: impl FnMut(u64)) -> f64 {
    let t0 = Instant::now();
    let mut n = 0;
    while t0.elapsed().as_secs_f64() < secs {
        for _ in 0..256 {
            f(n);
            n += 1;
        }
    }
    n as f64 / t0.elapsed().as_secs_f64()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let mut dir = std::env::temp_dir();
    let mut secs = 3.0;
    let mut writer_counts = vec![1, 16, 256];
    let mut appends_only = false;
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--dir", Some(d)) => dir = d.into(),
            ("--secs", Some(s)) => secs = s.parse().expect("--secs N"),
            ("--writers", Some(w)) => {
                writer_counts = w
                    .split(',')
                    .map(|n| n.parse().expect("--writers N,M"))
                    .collect();
                appends_only = true;
            }
            _ => panic!("usage: storage_bench [--dir DIR] [--secs N] [--writers N,M,..]"),
        }
    }
    println!("| figure | value | unit |");
    println!("|---|---|---|");
    for writers in writer_counts {
        // A fresh database per phase, so one phase's background flushes don't bill the next.
        let tmp = tempfile::tempdir_in(&dir).expect("bench dir");
        let db = Db::open(tmp.path()).expect("open db");
        let writer = LogWriter::start(db.clone()).expect("writer");
        let (rate, syncs) = durable_appends(&db, &writer, writers, secs).await;
        row(
            &format!("durable 128 B appends, {writers} writers (fsync on)"),
            rate,
            "appends/s",
        );
        row(&format!("WAL fsyncs, {writers} writers"), syncs, "fsyncs/s");
    }
    if appends_only {
        return;
    }
    let tmp = tempfile::tempdir_in(&dir).expect("bench dir");
    let db = Db::open(tmp.path()).expect("open db");

    let n = 100_000u64;
    let mut stream = RocksStreamStore::open(db.clone(), StreamUid(1)).expect("stream");
    let t0 = Instant::now();
    for seq in 1..=n {
        stream
            .store_msg(&message(seq, format!("kv.{seq}")))
            .expect("store");
    }
    row(
        "rocks stream store_msg (unsynced, 100k distinct subjects)",
        n as f64 / t0.elapsed().as_secs_f64(),
        "msgs/s",
    );
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let gets = timed(secs, |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let m = stream.get(1 + x % n).expect("get").expect("present");
        assert_eq!(m.payload.len(), 128);
    });
    row("rocks get by seq (random, 100k msgs)", gets, "gets/s");
    let t0 = Instant::now();
    let mut lookups = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        let s = 1 + (lookups * 7919) % n;
        let m = stream
            .last_for_subject(&format!("kv.{s}"))
            .expect("last")
            .expect("present");
        assert_eq!(m.seq, s);
        lookups += 1;
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / lookups as f64;
    row(
        "rocks last-by-subject latency (100k distinct subjects)",
        us,
        "µs (mean)",
    );

    let mut scan = RocksStreamStore::open(db.clone(), StreamUid(2)).expect("stream");
    for seq in 1..=n {
        scan.store_msg(&message(seq, format!("orders.{}", seq % 10)))
            .expect("store");
    }
    let t0 = Instant::now();
    let (mut at, mut hits) = (0, 0u64);
    while let Some(m) = scan.next_matching(at, &["orders.3"]).expect("scan") {
        at = m.seq + 1;
        hits += 1;
    }
    let el = t0.elapsed().as_secs_f64();
    assert_eq!(hits, n / 10);
    row(
        "rocks filtered scan, 1 in 10 match (msgs examined/s)",
        n as f64 / el,
        "msgs/s",
    );
    row(
        "rocks filtered scan, 1 in 10 match (matches/s)",
        hits as f64 / el,
        "msgs/s",
    );

    for (history, uid) in [(1, 4), (5, 5)] {
        row(
            &format!("rocks KV puts, history {history}, 100k over 100 keys (staged, as applied)"),
            kv_puts(&db, StreamUid(uid), history, n),
            "puts/s",
        );
    }

    let mut mem = MemStreamStore::new(StreamUid(3));
    let mut seq = 0;
    let mem_rate = timed(secs, |_| {
        seq += 1;
        mem.store_msg(&message(seq, "orders.new".to_string()))
            .expect("store");
    });
    row("memory store_msg 128 B (1 writer)", mem_rate, "msgs/s");
    let mem_gets = timed(secs, |i| {
        mem.get(1 + i % seq).expect("get");
    });
    row("memory get by seq", mem_gets, "gets/s");
}
