//! Crash and corruption tests of the RocksDB stores.
//!
//! Crash: the test binary re-runs itself as a child (`child_appends_until_killed`, active only
//! when `JETRAFT_CRASH_DIR` is set). The child appends Raft log entries through the group-commit
//! writer and prints `ACK <index>` after each flush callback; the parent SIGKILLs it at a random
//! point, reopens the database and checks that every acknowledged entry is present and that
//! nothing is corrupt. The child also saves the committed id (written without the WAL) after
//! acknowledgements and flushes now and then: after the kill it may be older or missing, but
//! never ahead of the entries the log holds. Every loop is bounded in count and time.
//!
//! Corruption: bytes are flipped in stored values and in the SST/WAL files of a closed database;
//! every read must then either fail or return exactly the original data.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::type_config::TypeConfigExt;
use openraft::{LogId, RaftLogReader, RaftTypeConfig};
use rand::Rng;

use crate::db::{ColumnFamily, Db};
use crate::rocks::raft_log::GroupId;
use crate::rocks::raft_log::tests::{TestConfig, TestLog};
use crate::rocks::{LogWriter, RocksStreamStore};
use crate::stream::conformance::msg;
use crate::stream::{StoredMsg, StreamStore, StreamUid};
use crate::{StorageError, keys};

const CHILD_ENV: &str = "JETRAFT_CRASH_DIR";

fn entry_id(index: u64) -> openraft::type_config::alias::LogIdOf<TestConfig> {
    LogId::new(
        openraft::impls::leader_id_adv::LeaderId {
            term: 1,
            node_id: 1,
        },
        index,
    )
}

fn entry(index: u64) -> <TestConfig as RaftTypeConfig>::Entry {
    <TestConfig as RaftTypeConfig>::Entry::new_normal(
        entry_id(index),
        format!("entry-{index}-{}", "x".repeat(100)),
    )
}

/// The child side: appends until killed (or 30 s pass). A no-op in a normal test run.
#[test]
fn child_appends_until_killed() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let db = Db::open(std::path::Path::new(&dir)).expect("open");
        let writer = LogWriter::start(db.clone()).expect("writer");
        let mut log = TestLog::new(db.clone(), writer, GroupId(1));
        let state = log.get_log_state().await.expect("state");
        let mut next = state.last_log_id.map_or(1, |l| l.index + 1);
        let acked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut appends = 0u64;
        while Instant::now() < deadline {
            // As openraft does: the committed id follows durable appends.
            let committed = acked.load(std::sync::atomic::Ordering::Acquire);
            if committed > 0 {
                log.save_committed(Some(entry_id(committed)))
                    .await
                    .expect("save committed");
            }
            appends += 1;
            if appends.is_multiple_of(64) {
                // Persists the unlogged committed id (and everything before it).
                db.flush_state().expect("flush");
            }
            // A few entries per append, several appends in flight, like openraft does.
            let batch: Vec<_> = (next..next + 4).map(entry).collect();
            let last = next + 3;
            next += 4;
            let (tx, rx) = TestConfig::oneshot();
            log.append(batch, IOFlushed::signal(tx))
                .await
                .expect("append");
            let acked = acked.clone();
            tokio::spawn(async move {
                if let Ok(Ok(())) = rx.await {
                    acked.fetch_max(last, std::sync::atomic::Ordering::AcqRel);
                    println!("ACK {last}");
                }
            });
        }
    });
}

/// Runs the test `child` of this binary with `env` set and collects the numbers it prints after
/// `prefix`; SIGKILLs it `kill_after` its first such line (waited for up to 20 s). Returns every
/// number printed before the kill.
pub(super) fn run_child_until_killed(
    child: &str,
    env: (&str, &std::path::Path),
    prefix: &'static str,
    kill_after: Duration,
) -> Vec<u64> {
    let exe = std::env::current_exe().expect("test binary");
    let mut proc = Command::new(&exe)
        .args(["--exact", child, "--nocapture"])
        .args(["--test-threads", "1"])
        .env(env.0, env.1)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let stdout = proc.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line
                .strip_prefix(prefix)
                .and_then(|n| n.parse::<u64>().ok())
            {
                let _ = tx.send(n);
            }
        }
    });
    let mut seen: Vec<u64> = rx
        .recv_timeout(Duration::from_secs(20))
        .into_iter()
        .collect();
    let kill_at = Instant::now() + kill_after;
    while let Some(left) = kill_at.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(n) => seen.push(n),
            Err(_) => break,
        }
    }
    proc.kill().expect("SIGKILL child");
    proc.wait().expect("reap child");
    reader.join().expect("reader thread");
    seen.extend(rx.try_iter());
    seen
}

#[test]
fn acknowledged_appends_survive_sigkill_20_rounds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = rand::rng();
    let started = Instant::now();
    let mut max_acked = 0u64;
    let mut rounds_with_acks = 0;
    let mut committed_seen = 0;
    for round in 0..20 {
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "crash test over time budget"
        );
        let acks = run_child_until_killed(
            "rocks::crash_tests::child_appends_until_killed",
            (CHILD_ENV, dir.path()),
            "ACK ",
            Duration::from_millis(rng.random_range(50..400)),
        );
        if let Some(a) = acks.into_iter().max() {
            max_acked = max_acked.max(a);
            rounds_with_acks += 1;
        }

        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        rt.block_on(async {
            let db = Db::open(dir.path()).expect("reopen after kill");
            let writer = LogWriter::start(db.clone()).expect("writer");
            let mut log = TestLog::new(db, writer, GroupId(1));
            let state = log.get_log_state().await.expect("state");
            let last = state.last_log_id.map_or(0, |l| l.index);
            assert!(
                last >= max_acked,
                "round {round}: last {last} < acknowledged {max_acked}"
            );
            let entries = log
                .try_get_log_entries(1..=last)
                .await
                .expect("no corruption");
            assert_eq!(entries.len() as u64, last, "round {round}: hole in log");
            if let Some(c) = log.read_committed().await.expect("committed") {
                committed_seen += 1;
                assert!(
                    c.index <= last,
                    "round {round}: committed {} ahead of the log's last entry {last}",
                    c.index
                );
            }
            for (i, e) in entries.iter().enumerate() {
                assert_eq!(
                    e,
                    &entry(i as u64 + 1),
                    "round {round}: entry {} differs",
                    i + 1
                );
            }
        });
    }
    eprintln!(
        "crash test: 20 kills, {rounds_with_acks} rounds with acks, {max_acked} entries acked"
    );
    assert!(
        rounds_with_acks >= 15,
        "only {rounds_with_acks} rounds acknowledged anything"
    );
    assert!(
        committed_seen > 0,
        "no round found a committed id: the check above never ran"
    );
}

fn stored(n: u64) -> Vec<StoredMsg> {
    (1..=n)
        .map(|seq| msg(seq, &format!("subj.{}", seq % 13)))
        .collect()
}

/// A closed database whose SST files hold 2,000 stream messages.
fn build_closed_sst_db(dir: &std::path::Path) -> Vec<StoredMsg> {
    let db = Db::open(dir).expect("open");
    let mut s = RocksStreamStore::open(db.clone(), StreamUid(1)).expect("stream");
    let msgs = stored(2_000);
    for m in &msgs {
        s.store_msg(m).expect("store");
    }
    db.flush_state().expect("flush");
    msgs
}

/// Raft log entries in the WAL-only database.
const WAL_ENTRIES: u64 = 2_000;

/// A closed database whose WAL holds [`WAL_ENTRIES`] Raft log entries (not flushed: RocksDB
/// keeps WAL-protected memtables unflushed on close). Stream state skips the WAL, so the log is
/// what a damaged WAL can touch.
fn build_closed_wal_db(dir: &std::path::Path) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let db = Db::open(dir).expect("open");
        let writer = LogWriter::start(db.clone()).expect("writer");
        let mut log = TestLog::new(db, writer, GroupId(1));
        for first in (1..=WAL_ENTRIES).step_by(50) {
            let (tx, rx) = TestConfig::oneshot();
            let batch: Vec<_> = (first..first + 50).map(entry).collect();
            log.append(batch, IOFlushed::signal(tx))
                .await
                .expect("append");
            rx.await.expect("flushed").expect("durable");
        }
    });
}

/// Opens a damaged copy of [`build_closed_wal_db`] and reads every entry; each read must fail
/// or match the original.
fn check_log_never_served(dir: &std::path::Path) -> (usize, usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let Ok(db) = Db::open(dir) else {
            return (0, 1);
        };
        let Ok(writer) = LogWriter::start(db.clone()) else {
            return (0, 1);
        };
        let mut log = TestLog::new(db, writer, GroupId(1));
        let (mut ok, mut failed) = (0, 0);
        for i in 1..=WAL_ENTRIES {
            match log.try_get_log_entries(i..=i).await {
                Ok(got) if got.is_empty() => failed += 1,
                Ok(got) => {
                    assert_eq!(got, vec![entry(i)], "corrupt log entry {i} served");
                    ok += 1;
                }
                Err(_) => failed += 1,
            }
        }
        (ok, failed)
    })
}

/// Opens a damaged copy and reads everything; every read must fail or match the original.
fn check_never_served(dir: &std::path::Path, want: &[StoredMsg]) -> (usize, usize) {
    let (mut ok, mut failed) = (0, 0);
    let Ok(db) = Db::open(dir) else {
        return (0, 1);
    };
    let Ok(s) = RocksStreamStore::open(db, StreamUid(1)) else {
        return (0, 1);
    };
    for m in want {
        match s.get(m.seq) {
            Ok(Some(got)) => {
                assert_eq!(&got, m, "corrupt data served for seq {}", m.seq);
                ok += 1;
            }
            Ok(None) | Err(_) => failed += 1,
        }
    }
    let mut at = 0;
    for _ in 0..want.len() + 1 {
        match s.next_matching(at, &["subj.3"]) {
            Ok(Some(got)) => {
                assert_eq!(&got, &want[got.seq as usize - 1], "corrupt scan result");
                at = got.seq + 1;
            }
            Ok(None) | Err(_) => break,
        }
    }
    (ok, failed)
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
}

fn flip_random_bytes(dir: &std::path::Path, suffix: &str, rng: &mut impl Rng) -> bool {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == suffix))
        .collect();
    files.sort();
    let Some(path) = files.get(rng.random_range(0..files.len().max(1))) else {
        return false;
    };
    let mut bytes = std::fs::read(path).expect("read file");
    if bytes.len() < 64 {
        return false;
    }
    for _ in 0..4 {
        let i = rng.random_range(0..bytes.len());
        bytes[i] ^= 1 << rng.random_range(0..8);
    }
    std::fs::write(path, bytes).expect("write file");
    true
}

#[test]
fn flipped_bytes_in_sst_and_wal_files_are_never_served() {
    let mut rng = rand::rng();
    let started = Instant::now();
    for suffix in ["sst", "log"] {
        let pristine = tempfile::tempdir().expect("tempdir");
        let want = if suffix == "sst" {
            build_closed_sst_db(pristine.path())
        } else {
            build_closed_wal_db(pristine.path());
            Vec::new()
        };
        let want = std::sync::Arc::new(want);
        let (mut damaged_rounds, mut reads_ok, mut reads_failed, mut hung) = (0, 0, 0, 0);
        for _ in 0..20 {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "over time budget"
            );
            let work = tempfile::tempdir().expect("tempdir");
            copy_dir(pristine.path(), work.path());
            if flip_random_bytes(work.path(), suffix, &mut rng) {
                damaged_rounds += 1;
                // RocksDB 11.8.1's recovery spins forever in `log::Reader::ReadRecord` on some
                // WAL byte flips (about once in 50 runs of this test before `Db::open` checked
                // the WAL records itself, see `wal_check`). The check runs on a thread so that a
                // hang fails the test (the copy is then leaked to the stuck thread).
                let (tx, rx) = std::sync::mpsc::channel();
                let (path, want) = (work.path().to_path_buf(), want.clone());
                std::thread::spawn(move || {
                    let result = if want.is_empty() {
                        check_log_never_served(&path)
                    } else {
                        check_never_served(&path, &want)
                    };
                    let _ = tx.send(result);
                });
                match rx.recv_timeout(Duration::from_secs(15)) {
                    Ok((ok, failed)) => {
                        reads_ok += ok;
                        reads_failed += failed;
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        hung += 1;
                        std::mem::forget(work);
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        panic!("{suffix}: the check panicked (wrong data served?), see above");
                    }
                }
            }
        }
        eprintln!(
            "{suffix}: {damaged_rounds} damaged copies, {reads_ok} reads correct, \
             {reads_failed} reads or opens refused, {hung} opens hung in RocksDB, 0 wrong"
        );
        assert!(
            damaged_rounds >= 10,
            "{suffix}: only {damaged_rounds} damaged rounds"
        );
        assert_eq!(
            hung, 0,
            "{suffix}: opening a damaged copy hung (not fail-stop)"
        );
    }
}

#[test]
fn flipped_value_bytes_are_detected_on_every_read_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path()).expect("open");
    let mut s = RocksStreamStore::open(db.clone(), StreamUid(1)).expect("stream");
    for m in stored(20) {
        s.store_msg(&m).expect("store");
    }
    // Seq 19 is the newest message of "subj.6" (6, 19).
    let key = keys::prefixed_u64(1, 19);
    let mut v = db
        .get(ColumnFamily::Msgs, &key)
        .expect("get")
        .expect("present");
    let i = v.len() - 3;
    v[i] ^= 0x10;
    db.put_synced(&[(ColumnFamily::Msgs, &key, &v)])
        .expect("put");
    let corrupt = |r: Result<Option<StoredMsg>, StorageError>| {
        assert!(matches!(r, Err(StorageError::Corrupt { .. })), "{r:?}");
    };
    corrupt(s.get(19));
    corrupt(s.next_matching(19, &[]));
    corrupt(s.next_matching(7, &["subj.6"]));
    corrupt(s.last_for_subject("subj.6"));
    assert!(matches!(s.remove(19), Err(StorageError::Corrupt { .. })));
    assert_eq!(
        s.get(18).expect("neighbour intact").map(|m| m.seq),
        Some(18)
    );
    // A value moved under another key is caught by the key in the checksum.
    let k8 = keys::prefixed_u64(1, 8);
    let v9 = db
        .get(ColumnFamily::Msgs, &keys::prefixed_u64(1, 9))
        .expect("get")
        .expect("9");
    db.put_synced(&[(ColumnFamily::Msgs, &k8, &v9)])
        .expect("put");
    corrupt(s.get(8));
}
