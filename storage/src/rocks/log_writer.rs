//! [`LogWriter`]: the node-wide group-commit writer every Raft log store writes through.
//!
//! Writes happen on the caller's thread: [`LogWriter::submit`] puts the operations into one
//! `WriteBatch` and writes it without sync (the entries are readable when it returns; RocksDB
//! merges concurrent writers from several groups into one WAL write by itself). A dedicated
//! **syncer** thread takes every written-but-unsynced completion, issues one WAL fsync
//! (`flush_wal(true)`) and only then runs the completions (openraft's `IOFlushed`). While the
//! syncer waits on the disk, callers keep writing, so the number of fsyncs per second stays
//! bounded by the disk while appends per second grow with the number of concurrent writers.
//!
//! An earlier version also wrote on a dedicated thread: every append then crossed two thread
//! hand-offs (to the writer and back to openraft) before the fsync even started, each costing a
//! wake-up (0.1-0.25 ms of scheduling delay on two busy cores, measured with `perf sched`).
//!
//! **Inline fsync when idle** ([`LogWriter::complete_after_write`]): a caller whose next step
//! waits for this fsync alone (the raft crate allows it for a single-voter group's leader with
//! one publish in flight, see [`InlineSyncPolicy`](crate::rocks::InlineSyncPolicy)) and finds
//! the syncer with nothing to do fsyncs on its own thread and completes at once. A lone publish
//! then skips two thread wake-ups (to the syncer and back), which cost more than the fsync
//! itself on a quiet machine. Whenever the syncer has work, or the previous write came less than
//! an fsync's time before, callers hand theirs to the syncer as before, so under load fsyncs
//! stay grouped and no worker thread waits on the disk; and while fsyncs are slow (the last one
//! took more than [`INLINE_SYNC_MAX`], a disk busy with flushes or compactions), nobody fsyncs
//! inline, so a worker thread is never held for long.
//!
//! Invariants:
//! - A group's IO is applied in the order openraft issues it: openraft awaits each log call,
//!   and each call has written before it returns.
//! - A durable completion runs only after an fsync that started after its batch was written
//!   (the completion reaches the syncer only once the write returned).
//! - Fail-stop: after a failed write or fsync every pending and later request fails; an fsync is
//!   never retried.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use futures::channel::oneshot;
use rocksdb::WriteBatch;

use crate::StorageError;
use crate::db::{ColumnFamily, Db};

/// Callers fsync inline only while the last fsync took less than this.
pub(crate) const INLINE_SYNC_MAX: Duration = Duration::from_millis(1);

/// One write operation on the node's database.
#[derive(Debug)]
pub(crate) enum Op {
    /// Put `key = value`.
    Put(ColumnFamily, Vec<u8>, Vec<u8>),
    /// Delete `[from, to)`.
    DeleteRange(ColumnFamily, Vec<u8>, Vec<u8>),
}

/// What [`LogWriter::write`] saw of the writes around it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Written {
    /// Microseconds since the node's previous log write started.
    quiet_us: u64,
}

/// Runs once the request's data is durable (or failed).
pub(crate) type Durable = Box<dyn FnOnce(Result<(), io::Error>) + Send>;

/// Counters of the group-commit pipeline, for metrics and benchmarks.
#[derive(Debug, Default)]
pub struct LogWriterStats {
    /// Requests accepted.
    pub requests: AtomicU64,
    /// Write batches written (one per request).
    pub batches: AtomicU64,
    /// WAL fsyncs issued (by the syncer and inline).
    pub syncs: AtomicU64,
    /// WAL fsyncs made inline by a caller that found the syncer idle.
    pub inline_syncs: AtomicU64,
}

struct Shared {
    db: Db,
    /// `None` only while dropping: closing the channel stops the syncer.
    sync_tx: Option<mpsc::Sender<Vec<Durable>>>,
    failed: Arc<AtomicBool>,
    stats: Arc<LogWriterStats>,
    /// Completions handed to the syncer and not yet run: zero means it is idle.
    queued: Arc<AtomicUsize>,
    /// How long the last fsync took, in microseconds.
    last_sync_us: Arc<AtomicU64>,
    /// When the last write started, in microseconds since `epoch`.
    last_write_us: AtomicU64,
    /// Origin of `last_write_us`.
    epoch: Instant,
    /// Joined on drop, so the database is closed once the last handle is gone.
    syncer: Option<thread::JoinHandle<()>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The syncer exits on the closed channel, after completing everything queued.
        self.sync_tx = None;
        if let Some(t) = self.syncer.take() {
            let _ = t.join();
        }
    }
}

/// Handle to the node's group-commit writer; cheap to clone. The syncer stops when the last
/// handle is dropped, after finishing queued work.
#[derive(Clone)]
pub struct LogWriter {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for LogWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogWriter")
            .field("failed", &self.shared.failed.load(Ordering::Relaxed))
            .finish()
    }
}

impl LogWriter {
    /// Starts the syncer thread over `db`.
    pub fn start(db: Db) -> Result<Self, StorageError> {
        let (sync_tx, sync_rx) = mpsc::channel::<Vec<Durable>>();
        let failed = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(LogWriterStats::default());
        let queued = Arc::new(AtomicUsize::new(0));
        let last_sync_us = Arc::new(AtomicU64::new(0));
        let syncer = {
            let (db, failed, stats) = (db.clone(), failed.clone(), stats.clone());
            let (queued, last_sync_us) = (queued.clone(), last_sync_us.clone());
            thread::Builder::new()
                .name("storage-syncer".into())
                .spawn(move || sync_loop(&db, &sync_rx, &failed, &stats, &queued, &last_sync_us))?
        };
        Ok(Self {
            shared: Arc::new(Shared {
                db,
                sync_tx: Some(sync_tx),
                failed,
                stats,
                queued,
                last_sync_us,
                last_write_us: AtomicU64::new(0),
                epoch: Instant::now(),
                syncer: Some(syncer),
            }),
        })
    }

    /// Pipeline counters.
    pub fn stats(&self) -> &LogWriterStats {
        &self.shared.stats
    }

    /// True once a write or fsync failed: the node's logs must stop (fail-stop).
    pub fn has_failed(&self) -> bool {
        self.shared.failed.load(Ordering::Acquire)
    }

    /// Writes `ops` in one batch on the calling thread (readable when this returns) and hands
    /// `durable` to the syncer, which runs it after the next fsync. On error `durable` has
    /// already been run with the error.
    pub(crate) fn submit(
        &self,
        ops: Vec<Op>,
        durable: Option<Durable>,
    ) -> Result<(), StorageError> {
        if let Err(e) = self.write(ops) {
            return fail(durable, e);
        }
        match durable {
            Some(d) => self.to_syncer(d),
            None => Ok(()),
        }
    }

    /// Writes `ops` in one batch on the calling thread, without waiting for an fsync: readable
    /// when this returns, durable after the next one ([`Self::complete_after_write`]).
    pub(crate) fn write(&self, ops: Vec<Op>) -> Result<Written, StorageError> {
        let shared = &self.shared;
        shared.stats.requests.fetch_add(1, Ordering::Relaxed);
        if self.has_failed() {
            return Err(StorageError::WriterStopped);
        }
        let now = micros(shared.epoch.elapsed());
        let before = shared.last_write_us.swap(now, Ordering::Relaxed);
        if let Err(e) = build_batch(&shared.db, ops).and_then(|b| shared.db.write(b, false)) {
            shared.failed.store(true, Ordering::Release);
            return Err(e);
        }
        shared.stats.batches.fetch_add(1, Ordering::Relaxed);
        Ok(Written {
            quiet_us: now.saturating_sub(before),
        })
    }

    /// Runs `durable` once everything this thread wrote so far is fsynced. With `inline` and
    /// the syncer idle (nothing queued), the WAL is fsynced on this thread and `durable` has
    /// run when this returns; otherwise the syncer runs it after its next fsync.
    ///
    /// `inline` blocks the calling thread for an fsync, so only for callers whose next step
    /// waits for it anyway (see the module docs). It is safe either way: `durable` runs after
    /// an fsync that started after the caller's write, whichever thread made it.
    pub(crate) fn complete_after_write(
        &self,
        durable: Durable,
        inline: bool,
        written: Written,
    ) -> Result<(), StorageError> {
        let shared = &self.shared;
        let last_sync = shared.last_sync_us.load(Ordering::Relaxed);
        let slow = last_sync >= micros(INLINE_SYNC_MAX);
        // Another write less than an fsync before this one: writes come in faster than one per
        // fsync, so they are grouped by the syncer and the workers keep running meanwhile.
        let busy = written.quiet_us < last_sync;
        if !inline || slow || busy || shared.queued.load(Ordering::Acquire) > 0 {
            return self.to_syncer(durable);
        }
        if self.has_failed() {
            return fail(Some(durable), StorageError::WriterStopped);
        }
        shared.stats.syncs.fetch_add(1, Ordering::Relaxed);
        shared.stats.inline_syncs.fetch_add(1, Ordering::Relaxed);
        match timed_sync(&shared.db, &shared.last_sync_us) {
            Ok(()) => {
                durable(Ok(()));
                Ok(())
            }
            Err(e) => {
                shared.failed.store(true, Ordering::Release);
                fail(Some(durable), e)
            }
        }
    }

    /// Hands `durable` to the syncer, which runs it after its next fsync.
    fn to_syncer(&self, durable: Durable) -> Result<(), StorageError> {
        let shared = &self.shared;
        let Some(sync) = &shared.sync_tx else {
            return fail(Some(durable), StorageError::WriterStopped);
        };
        shared.queued.fetch_add(1, Ordering::AcqRel);
        if let Err(mpsc::SendError(ds)) = sync.send(vec![durable]) {
            shared.queued.fetch_sub(1, Ordering::AcqRel);
            ds.into_iter()
                .for_each(|d| d(Err(io::Error::other(StorageError::WriterStopped))));
            return Err(StorageError::WriterStopped);
        }
        Ok(())
    }

    /// Writes `ops` and resolves once they are durable.
    pub(crate) async fn submit_durable(&self, ops: Vec<Op>) -> Result<(), StorageError> {
        let (tx, rx) = oneshot::channel();
        let done: Durable = Box::new(move |r| {
            let _ = tx.send(r);
        });
        self.submit(ops, Some(done))?;
        rx.await
            .map_err(|_| StorageError::WriterStopped)?
            .map_err(StorageError::Io)
    }
}

/// Runs `durable` (if any) with `e` and returns `e`.
fn fail(durable: Option<Durable>, e: StorageError) -> Result<(), StorageError> {
    if let Some(d) = durable {
        d(Err(io::Error::other(e.to_string())));
    }
    Err(e)
}

fn build_batch(db: &Db, ops: Vec<Op>) -> Result<WriteBatch, StorageError> {
    let mut batch = WriteBatch::default();
    for op in ops {
        match op {
            Op::Put(cf, k, v) => batch.put_cf(&db.cf(cf)?, k, v),
            Op::DeleteRange(cf, from, to) => batch.delete_range_cf(&db.cf(cf)?, from, to),
        }
    }
    Ok(batch)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Fsyncs the WAL and records how long it took.
fn timed_sync(db: &Db, last_sync_us: &AtomicU64) -> Result<(), StorageError> {
    let started = Instant::now();
    let result = db.sync_wal();
    last_sync_us.store(micros(started.elapsed()), Ordering::Relaxed);
    result
}

fn sync_loop(
    db: &Db,
    rx: &mpsc::Receiver<Vec<Durable>>,
    failed: &AtomicBool,
    stats: &LogWriterStats,
    queued: &AtomicUsize,
    last_sync_us: &AtomicU64,
) {
    while let Ok(mut pending) = rx.recv() {
        while let Ok(more) = rx.try_recv() {
            pending.extend(more);
        }
        let taken = pending.len();
        let result = if failed.load(Ordering::Acquire) {
            Err(StorageError::WriterStopped)
        } else {
            stats.syncs.fetch_add(1, Ordering::Relaxed);
            timed_sync(db, last_sync_us)
        };
        match result {
            Ok(()) => pending.into_iter().for_each(|d| d(Ok(()))),
            Err(e) => {
                failed.store(true, Ordering::Release);
                let msg = e.to_string();
                for d in pending {
                    d(Err(io::Error::other(msg.clone())));
                }
            }
        }
        // Only now: a caller seeing zero must know no completion is still waiting here.
        queued.fetch_sub(taken, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durable_writes_complete_and_are_coalesced() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let w = LogWriter::start(db.clone()).unwrap();
        let futs: Vec<_> = (0..200u64)
            .map(|i| {
                let w = w.clone();
                let key = crate::keys::prefixed_u64(1, i).to_vec();
                async move {
                    w.submit_durable(vec![Op::Put(ColumnFamily::RaftLog, key, vec![1])])
                        .await
                }
            })
            .collect();
        for r in futures::executor::block_on(futures::future::join_all(futs)) {
            r.unwrap();
        }
        let syncs = w.stats().syncs.load(Ordering::Relaxed);
        assert!((1..=200).contains(&syncs), "{syncs} syncs");
        let key = crate::keys::prefixed_u64(1, 199);
        assert_eq!(db.get(ColumnFamily::RaftLog, &key).unwrap(), Some(vec![1]));
    }

    fn put(i: u64) -> Vec<Op> {
        let key = crate::keys::prefixed_u64(1, i).to_vec();
        vec![Op::Put(ColumnFamily::RaftLog, key, vec![1])]
    }

    /// Records the thread a completion ran on.
    fn on_thread(tx: std::sync::mpsc::Sender<thread::ThreadId>) -> Durable {
        Box::new(move |r| {
            r.unwrap();
            tx.send(thread::current().id()).unwrap();
        })
    }

    #[test]
    fn an_idle_syncer_lets_the_caller_fsync_and_complete_inline() {
        let dir = tempfile::tempdir().unwrap();
        let w = LogWriter::start(Db::open(dir.path()).unwrap()).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let written = w.write(put(1)).unwrap();
        w.complete_after_write(on_thread(tx), true, written)
            .unwrap();
        // Completed before the call returned, on this thread, by an fsync of its own.
        assert_eq!(rx.try_recv().unwrap(), thread::current().id());
        assert_eq!(w.stats().inline_syncs.load(Ordering::Relaxed), 1);
        assert_eq!(w.stats().syncs.load(Ordering::Relaxed), 1);
    }

    /// Writes entry `i` asking for an inline fsync, and checks that the syncer made it.
    fn assert_syncer_completes(w: &LogWriter, i: u64) {
        let (tx, rx) = std::sync::mpsc::channel();
        let written = w.write(put(i)).unwrap();
        w.complete_after_write(on_thread(tx), true, written)
            .unwrap();
        let ran_on = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        assert_ne!(ran_on, thread::current().id());
        assert_eq!(w.stats().inline_syncs.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn after_a_slow_fsync_the_syncer_takes_the_completion() {
        let dir = tempfile::tempdir().unwrap();
        let w = LogWriter::start(Db::open(dir.path()).unwrap()).unwrap();
        w.shared
            .last_sync_us
            .store(micros(INLINE_SYNC_MAX), Ordering::Relaxed);
        assert_syncer_completes(&w, 1);
    }

    #[test]
    fn a_write_less_than_an_fsync_after_another_goes_to_the_syncer() {
        let dir = tempfile::tempdir().unwrap();
        let w = LogWriter::start(Db::open(dir.path()).unwrap()).unwrap();
        // Fsyncs take 0.9 ms here; the two writes come microseconds apart.
        w.shared.last_sync_us.store(900, Ordering::Relaxed);
        w.write(put(1)).unwrap();
        assert_syncer_completes(&w, 2);
    }

    #[test]
    fn a_busy_syncer_takes_the_completion_so_fsyncs_stay_grouped() {
        let dir = tempfile::tempdir().unwrap();
        let w = LogWriter::start(Db::open(dir.path()).unwrap()).unwrap();
        // A completion that holds the syncer until released: the syncer counts as busy.
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
        let hold: Durable = Box::new(move |_| {
            held_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        });
        w.submit(put(1), Some(hold)).unwrap();
        held_rx.recv().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let written = w.write(put(2)).unwrap();
        w.complete_after_write(on_thread(tx), true, written)
            .unwrap();
        assert!(
            rx.try_recv().is_err(),
            "completed inline while the syncer was busy"
        );
        release_tx.send(()).unwrap();
        let ran_on = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        assert_ne!(ran_on, thread::current().id());
        assert_eq!(w.stats().inline_syncs.load(Ordering::Relaxed), 0);
        // Idle again once the syncer ran everything: the next caller syncs inline.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while w.shared.queued.load(Ordering::Acquire) > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the syncer never went idle"
            );
            thread::yield_now();
        }
        // However long the syncer's fsync took on this machine.
        w.shared.last_sync_us.store(0, Ordering::Relaxed);
        let (tx, rx) = std::sync::mpsc::channel();
        let written = w.write(put(3)).unwrap();
        w.complete_after_write(on_thread(tx), true, written)
            .unwrap();
        assert_eq!(rx.try_recv().unwrap(), thread::current().id());
    }
}
