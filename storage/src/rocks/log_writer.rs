//! [`LogWriter`]: the node-wide group-commit writer every Raft log store writes through.
//!
//! Two dedicated threads form a pipeline:
//! 1. the **writer** takes every queued request (from all groups), puts their operations into
//!    one `WriteBatch`, writes it without sync (the entries are now readable) and answers each
//!    request's `visible` channel;
//! 2. the **syncer** takes every written-but-unsynced completion, issues one WAL fsync
//!    (`flush_wal(true)`) and only then runs the completions (openraft's `IOFlushed`).
//!
//! While the syncer waits on the disk, the writer already batches the next requests, so the
//! number of fsyncs per second stays bounded by the disk while appends per second grow with the
//! number of concurrent writers.
//!
//! Invariants:
//! - Requests are applied in submission order (one queue, one writer thread), so the IO of a
//!   group is serialized as openraft requires (vote, append, truncate, purge).
//! - A durable completion runs only after an fsync that started after its batch was written.
//! - Fail-stop: after a failed write or fsync every pending and later request fails; an fsync is
//!   never retried.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;

use futures::channel::oneshot;
use rocksdb::WriteBatch;

use crate::StorageError;
use crate::db::{ColumnFamily, Db};

/// Most requests merged into one batch.
const MAX_BATCH_REQUESTS: usize = 4096;

/// One write operation on the node's database.
#[derive(Debug)]
pub(crate) enum Op {
    /// Put `key = value`.
    Put(ColumnFamily, Vec<u8>, Vec<u8>),
    /// Delete `[from, to)`.
    DeleteRange(ColumnFamily, Vec<u8>, Vec<u8>),
}

/// Runs once the request's data is durable (or failed).
pub(crate) type Durable = Box<dyn FnOnce(Result<(), io::Error>) + Send>;

struct Request {
    ops: Vec<Op>,
    visible: Option<oneshot::Sender<Result<(), StorageError>>>,
    durable: Option<Durable>,
}

/// Counters of the group-commit pipeline, for metrics and benchmarks.
#[derive(Debug, Default)]
pub struct LogWriterStats {
    /// Requests accepted.
    pub requests: AtomicU64,
    /// Write batches written (one per writer cycle).
    pub batches: AtomicU64,
    /// WAL fsyncs issued.
    pub syncs: AtomicU64,
}

struct Shared {
    /// `None` only while dropping: closing the queue stops the threads.
    tx: Option<mpsc::Sender<Request>>,
    failed: Arc<AtomicBool>,
    stats: Arc<LogWriterStats>,
    /// Joined on drop, so the database is closed once the last handle is gone.
    threads: Vec<thread::JoinHandle<()>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Writer exits on the closed queue, then the syncer on the writer's closed channel,
        // after completing everything queued.
        self.tx = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Handle to the node's group-commit writer; cheap to clone. The threads stop when the last
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
    /// Starts the writer and syncer threads over `db`.
    pub fn start(db: Db) -> Result<Self, StorageError> {
        let (tx, rx) = mpsc::channel::<Request>();
        let (sync_tx, sync_rx) = mpsc::channel::<Vec<Durable>>();
        let failed = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(LogWriterStats::default());
        let writer = {
            let (db, failed, stats) = (db.clone(), failed.clone(), stats.clone());
            thread::Builder::new()
                .name("storage-writer".into())
                .spawn(move || write_loop(&db, &rx, &sync_tx, &failed, &stats))?
        };
        let syncer = {
            let (failed, stats) = (failed.clone(), stats.clone());
            thread::Builder::new()
                .name("storage-syncer".into())
                .spawn(move || sync_loop(&db, &sync_rx, &failed, &stats))?
        };
        Ok(Self {
            shared: Arc::new(Shared {
                tx: Some(tx),
                failed,
                stats,
                threads: vec![writer, syncer],
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

    /// Queues `ops`; resolves once they are readable. `durable` runs after they are fsynced.
    pub(crate) async fn submit(
        &self,
        ops: Vec<Op>,
        durable: Option<Durable>,
    ) -> Result<(), StorageError> {
        let (tx, rx) = oneshot::channel();
        self.shared.stats.requests.fetch_add(1, Ordering::Relaxed);
        let req = Request {
            ops,
            visible: Some(tx),
            durable,
        };
        let Some(queue) = &self.shared.tx else {
            return Err(StorageError::WriterStopped);
        };
        if let Err(mpsc::SendError(req)) = queue.send(req) {
            if let Some(d) = req.durable {
                d(Err(io::Error::other(StorageError::WriterStopped)));
            }
            return Err(StorageError::WriterStopped);
        }
        rx.await.map_err(|_| StorageError::WriterStopped)?
    }

    /// Queues `ops` and resolves once they are durable.
    pub(crate) async fn submit_durable(&self, ops: Vec<Op>) -> Result<(), StorageError> {
        let (tx, rx) = oneshot::channel();
        let done: Durable = Box::new(move |r| {
            let _ = tx.send(r);
        });
        self.submit(ops, Some(done)).await?;
        rx.await
            .map_err(|_| StorageError::WriterStopped)?
            .map_err(StorageError::Io)
    }
}

fn fail_all(reqs: Vec<Request>) {
    for r in reqs {
        if let Some(v) = r.visible {
            let _ = v.send(Err(StorageError::WriterStopped));
        }
        if let Some(d) = r.durable {
            d(Err(io::Error::other(StorageError::WriterStopped)));
        }
    }
}

fn build_batch(db: &Db, reqs: &mut [Request]) -> Result<WriteBatch, StorageError> {
    // Resolve each column family handle once per batch, not once per operation.
    let handles = ColumnFamily::ALL
        .iter()
        .map(|cf| db.cf(*cf))
        .collect::<Result<Vec<_>, _>>()?;
    let handle = |cf: ColumnFamily| {
        let i = ColumnFamily::ALL.iter().position(|c| *c == cf).unwrap_or(0);
        &handles[i]
    };
    let mut batch = WriteBatch::default();
    for r in reqs.iter_mut() {
        for op in r.ops.drain(..) {
            match op {
                Op::Put(cf, k, v) => batch.put_cf(handle(cf), k, v),
                Op::DeleteRange(cf, from, to) => batch.delete_range_cf(handle(cf), from, to),
            }
        }
    }
    Ok(batch)
}

fn write_loop(
    db: &Db,
    rx: &mpsc::Receiver<Request>,
    sync_tx: &mpsc::Sender<Vec<Durable>>,
    failed: &AtomicBool,
    stats: &LogWriterStats,
) {
    while let Ok(first) = rx.recv() {
        let mut reqs = vec![first];
        while reqs.len() < MAX_BATCH_REQUESTS {
            match rx.try_recv() {
                Ok(r) => reqs.push(r),
                Err(_) => break,
            }
        }
        if failed.load(Ordering::Acquire) {
            fail_all(reqs);
            continue;
        }
        let written = build_batch(db, &mut reqs).and_then(|b| db.write(b, false));
        stats.batches.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = written {
            failed.store(true, Ordering::Release);
            let msg = e.to_string();
            for r in reqs {
                if let Some(v) = r.visible {
                    let _ = v.send(Err(StorageError::WriteFailed {
                        detail: msg.clone(),
                    }));
                }
                if let Some(d) = r.durable {
                    d(Err(io::Error::other(msg.clone())));
                }
            }
            continue;
        }
        let mut durables = Vec::new();
        for r in reqs {
            if let Some(v) = r.visible {
                let _ = v.send(Ok(()));
            }
            durables.extend(r.durable);
        }
        if !durables.is_empty()
            && let Err(mpsc::SendError(ds)) = sync_tx.send(durables)
        {
            for d in ds {
                d(Err(io::Error::other(StorageError::WriterStopped)));
            }
        }
    }
}

fn sync_loop(
    db: &Db,
    rx: &mpsc::Receiver<Vec<Durable>>,
    failed: &AtomicBool,
    stats: &LogWriterStats,
) {
    while let Ok(mut pending) = rx.recv() {
        while let Ok(more) = rx.try_recv() {
            pending.extend(more);
        }
        let result = if failed.load(Ordering::Acquire) {
            Err(StorageError::WriterStopped)
        } else {
            stats.syncs.fetch_add(1, Ordering::Relaxed);
            db.sync_wal()
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
}
