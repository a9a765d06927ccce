//! Opening the node's RocksDB with the column families of DESIGN.md section 4.
//!
//! Invariants: one [`Db`] per node and data dir; every column family of [`ColumnFamily::ALL`]
//! exists after [`Db::open`]. Writes through `Db::write` are atomic per batch; only a batch
//! written with `sync` (or followed by a WAL sync, see [`crate::rocks::LogWriter`]) is durable.
//!
//! State-machine writes (stream messages, subject index, consumer states and the stream's meta
//! records, all derived from committed Raft entries) skip the WAL ([`Db::write_unlogged`]): the
//! Raft log already holds them durably, and after a crash the entries are applied again from the
//! state's last durable applied id. Such writes become durable only when their memtables are
//! flushed, so the database flushes all column families atomically (`atomic_flush`): the state on
//! disk is always the result of a prefix of the writes, like a WAL replay would give, and the
//! write tags and applied ids written beside the data still describe it. [`Db::flush_state`] is
//! the barrier a Raft group passes before it lets its log be purged behind that state.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocksdb::{
    BoundColumnFamily, ColumnFamilyDescriptor, DB, FlushOptions, Options, WriteBatch, WriteOptions,
};

use crate::StorageError;

/// The column families every node's database has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnFamily {
    /// `group_id | index -> entry`.
    RaftLog,
    /// `group_id | kind -> vote / committed / purged`.
    RaftState,
    /// `stream_uid | seq -> record`.
    Msgs,
    /// `stream_uid | subject | seq` index.
    Subjects,
    /// `stream_uid | consumer -> state`.
    Consumers,
    /// `group_id -> last applied log id, membership`.
    SmMeta,
}

impl ColumnFamily {
    /// Every column family, in creation order.
    pub const ALL: [ColumnFamily; 6] = [
        Self::RaftLog,
        Self::RaftState,
        Self::Msgs,
        Self::Subjects,
        Self::Consumers,
        Self::SmMeta,
    ];

    /// The name RocksDB knows it by.
    pub fn name(self) -> &'static str {
        match self {
            Self::RaftLog => "raft_log",
            Self::RaftState => "raft_state",
            Self::Msgs => "msgs",
            Self::Subjects => "subjects",
            Self::Consumers => "consumers",
            Self::SmMeta => "sm_meta",
        }
    }
}

/// The node's database handle; cheap to clone.
#[derive(Clone)]
pub struct Db {
    inner: Arc<DB>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("path", &self.inner.path())
            .finish()
    }
}

/// A key and its value, as [`Db::scan_prefix`] returns them.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// One change of [`Db::write_changes`].
#[derive(Debug, Clone, Copy)]
pub enum Change<'a> {
    /// Put `key = value`.
    Put(ColumnFamily, &'a [u8], &'a [u8]),
    /// Delete `key`.
    Delete(ColumnFamily, &'a [u8]),
}

/// WAL size at which RocksDB flushes the column families that keep the oldest WAL file alive.
const MAX_TOTAL_WAL_BYTES: u64 = 256 << 20;
/// Memtable memory of all column families together at which RocksDB flushes the largest.
const MEMTABLE_BUDGET_BYTES: usize = 64 << 20;
/// The one block cache every column family reads through.
const BLOCK_CACHE_BYTES: usize = 32 << 20;

impl Db {
    /// Opens (creating if needed) the database in `path` with all column families.
    pub fn open(path: &Path) -> Result<Self, StorageError> {
        Self::open_tuned(path, |_| {})
    }

    /// [`Db::open`] with `tune` applied to the database options (tests).
    fn open_tuned(path: &Path, tune: impl FnOnce(&mut Options)) -> Result<Self, StorageError> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.set_paranoid_checks(true);
        // A torn record at the very end of the WAL (crash mid-write, never acknowledged) is
        // dropped; corruption anywhere else fails the open instead of silently truncating
        // acknowledged Raft entries (the default point-in-time mode would).
        opts.set_wal_recovery_mode(rocksdb::DBRecoveryMode::TolerateCorruptedTailRecords);
        opts.set_max_background_jobs(2);
        // A WAL file is deleted only once every column family's memtable holding its writes
        // is flushed; RocksDB's default bound (4x all write buffers, gigabytes here) let the
        // WAL of deleted streams grow past 1 GB and made a restart replay all of it.
        opts.set_max_total_wal_size(MAX_TOTAL_WAL_BYTES);
        // Writes without the WAL are recovered only from flushed memtables: every flush must
        // cover all column families at the same point, or a crash could keep a stream's messages
        // without its counters (or the reverse).
        // (RocksDB refuses atomic flush with pipelined writes; the state writes that shared WAL
        // write groups with the log appends no longer write the WAL at all.)
        opts.set_atomic_flush(true);
        // Memory bounds for the node as a whole. By default every column family keeps up to
        // two 64 MB memtables and its own 32 MB block cache, and a burst of writes left ~200 MB
        // of memtables resident until the next flush (nats-server keeps its data in the page
        // cache). Over the budget, RocksDB flushes the largest memtable; writes never stall.
        let budget =
            rocksdb::WriteBufferManager::new_write_buffer_manager(MEMTABLE_BUDGET_BYTES, false);
        opts.set_write_buffer_manager(&budget);
        let cache = rocksdb::Cache::new_lru_cache(BLOCK_CACHE_BYTES);
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_block_cache(&cache);
        tune(&mut opts);
        let cfs = ColumnFamily::ALL.iter().map(|cf| {
            let mut cf_opts = Options::default();
            cf_opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
            cf_opts.set_block_based_table_factory(&table);
            ColumnFamilyDescriptor::new(cf.name(), cf_opts)
        });
        // RocksDB's WAL replay can loop forever on some damaged records: check them first.
        crate::wal_check::check_wal_files(path)?;
        // Table files of a bulk load that a crash left before their ingestion.
        crate::rocks::clear_ingest_leftovers(path)?;
        let inner =
            DB::open_cf_descriptors(&opts, path, cfs).map_err(|source| StorageError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// Writes `(cf, key, value)` triples atomically and fsyncs the WAL before returning.
    pub fn put_synced(&self, puts: &[(ColumnFamily, &[u8], &[u8])]) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        for (cf, key, value) in puts {
            batch.put_cf(&self.cf(*cf)?, key, value);
        }
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        self.write_opt(batch, wo)
    }

    /// Applies `changes` atomically, in order, through the WAL without waiting for an fsync:
    /// durable at the next WAL fsync of any writer (the group-commit syncer makes one for every
    /// log append) or [`Db::sync_wal`].
    pub fn write_changes(&self, changes: &[Change<'_>]) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        for change in changes {
            match change {
                Change::Put(cf, key, value) => batch.put_cf(&self.cf(*cf)?, key, value),
                Change::Delete(cf, key) => batch.delete_cf(&self.cf(*cf)?, key),
            }
        }
        self.write(batch, false)
    }

    /// Every `(key, value)` of `cf` whose key starts with `prefix`, in key order.
    pub fn scan_prefix(
        &self,
        cf: ColumnFamily,
        prefix: &[u8],
    ) -> Result<Vec<KeyValue>, StorageError> {
        let handle = self.cf(cf)?;
        let mode = rocksdb::IteratorMode::From(prefix, rocksdb::Direction::Forward);
        let mut out = Vec::new();
        for item in self.inner.iterator_cf(&handle, mode) {
            let (key, value) = item?;
            if !key.starts_with(prefix) {
                break;
            }
            out.push((key.to_vec(), value.to_vec()));
        }
        Ok(out)
    }

    /// Reads one value.
    pub fn get(&self, cf: ColumnFamily, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.inner.get_cf(&self.cf(cf)?, key)?)
    }

    /// Writes a batch atomically; with `sync` the WAL is fsynced before returning.
    pub(crate) fn write(&self, batch: WriteBatch, sync: bool) -> Result<(), StorageError> {
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        self.write_opt(batch, wo)
    }

    /// Blocks this thread (never call it on an async worker) while a column family holds an
    /// immutable memtable still waiting for its flush, up to `max`. A bulk load (a snapshot
    /// install writing gigabytes) calls it before each of its large writes: written at full
    /// speed, it filled the memtables faster than they flushed, and RocksDB then stopped every
    /// writer of the node (`Stopping writes because we have 2 immutable memtables`), the Raft
    /// log and the node's other groups included, for seconds at a time.
    pub(crate) fn wait_for_flushes(&self, max: Duration) {
        let deadline = Instant::now() + max;
        while Instant::now() < deadline && self.flush_pending() {
            // A bulk load runs on a blocking thread (see above), never on a runtime worker.
            #[allow(clippy::disallowed_methods)]
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Whether any column family has an immutable memtable not flushed yet.
    fn flush_pending(&self) -> bool {
        ColumnFamily::ALL.iter().any(|cf| {
            self.inner.cf_handle(cf.name()).is_some_and(|h| {
                self.inner
                    .property_int_value_cf(&h, "rocksdb.num-immutable-mem-table")
                    .ok()
                    .flatten()
                    .is_some_and(|n| n > 0)
            })
        })
    }

    /// Writes a batch atomically without the WAL: it is readable at once and durable only after
    /// the next flush of the memtables (see [`Db::flush_state`]). Only for state that can be
    /// computed again from the Raft log after a crash.
    pub(crate) fn write_unlogged(&self, batch: WriteBatch) -> Result<(), StorageError> {
        let mut wo = WriteOptions::default();
        wo.disable_wal(true);
        self.write_opt(batch, wo)
    }

    /// Writes `batch` with `wo`, never stalling an async worker thread: RocksDB makes writers
    /// wait (a write stall) while flushes or compactions fall behind, which on a tokio worker
    /// would freeze every task on it, Raft heartbeats included. The write is first tried with
    /// `no_slowdown`, which refuses it instead of waiting; a refused write is made again, waiting,
    /// with [`tokio::task::block_in_place`] so the worker's other tasks move to another thread.
    fn write_opt(&self, batch: WriteBatch, mut wo: WriteOptions) -> Result<(), StorageError> {
        // Kept for the rare retry: `write_opt` consumes the batch.
        let again = WriteBatch::from_data(batch.data());
        wo.set_no_slowdown(true);
        match self.inner.write_opt(batch, &wo) {
            Err(e) if e.kind() == rocksdb::ErrorKind::Incomplete => {
                // Refused whole (nothing of it was written): wait for the stall off the worker.
                wo.set_no_slowdown(false);
                let write = || self.inner.write_opt(again, &wo);
                let on_worker = tokio::runtime::Handle::try_current().is_ok_and(|h| {
                    h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
                });
                Ok(if on_worker {
                    // The callers are synchronous (openraft's log and state machine calls), so
                    // `spawn_blocking` cannot be awaited here; this runs only during a stall.
                    #[allow(clippy::disallowed_methods)]
                    tokio::task::block_in_place(write)
                } else {
                    write()
                }?)
            }
            other => Ok(other?),
        }
    }

    /// Flushes every column family's memtable in one atomic flush and waits for it: every write
    /// made before the call, with or without the WAL, is durable when this returns. Blocking
    /// (disk I/O); call it off the async runtime.
    pub fn flush_state(&self) -> Result<(), StorageError> {
        let handles = ColumnFamily::ALL
            .iter()
            .map(|cf| self.cf(*cf))
            .collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<&Arc<BoundColumnFamily<'_>>> = handles.iter().collect();
        let mut fo = FlushOptions::default();
        fo.set_wait(true);
        self.inner.flush_cfs_opt(&refs, &fo)?;
        Ok(())
    }

    /// Fsyncs everything written to the WAL so far.
    pub fn sync_wal(&self) -> Result<(), StorageError> {
        self.inner.flush_wal(true)?;
        Ok(())
    }

    /// The RocksDB handle, for the `rocks` module.
    pub(crate) fn raw(&self) -> &DB {
        &self.inner
    }

    /// The handle of one column family.
    pub(crate) fn cf(&self, cf: ColumnFamily) -> Result<Arc<BoundColumnFamily<'_>>, StorageError> {
        self.inner
            .cf_handle(cf.name())
            .ok_or(StorageError::Corrupt {
                cf: cf.name(),
                detail: "column family missing".to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::prefixed_u64;

    /// A bulk writer that waits for flushes before each large write finds no memtable still
    /// waiting for its flush, so its writes never pile up into RocksDB's write stop (two
    /// immutable memtables). Each 40 MB write fills the 64 MB memtable past its size, so an
    /// immutable one is pending right after most writes: without the wait the check fails.
    #[test]
    fn a_bulk_writer_waits_until_no_memtable_awaits_its_flush() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let value = vec![7u8; 1 << 20];
        let mut waited_for_pending = false;
        for round in 0..6u64 {
            waited_for_pending |= db.flush_pending();
            db.wait_for_flushes(Duration::from_secs(30));
            assert!(
                !db.flush_pending(),
                "round {round}: a memtable still awaits its flush"
            );
            let mut batch = WriteBatch::default();
            let cf = db.cf(ColumnFamily::Msgs).unwrap();
            for i in 0..40 {
                batch.put_cf(&cf, prefixed_u64(1, round * 100 + i), &value);
            }
            drop(cf);
            db.write_unlogged(batch).unwrap();
        }
        assert!(
            waited_for_pending,
            "the writes never made a memtable wait for a flush"
        );
    }

    /// A write RocksDB stalls (here: its write buffer manager over budget, as when memtables
    /// wait for flushes that fall behind) waits off the runtime's only worker, whose other tasks
    /// keep running, and completes once the stall ends. Without `Db::write_opt`'s fallback the
    /// ticker below never runs: checked.
    #[test]
    fn stalled_write_waits_without_blocking_the_async_worker() {
        let dir = tempfile::tempdir().unwrap();
        let budget = rocksdb::WriteBufferManager::new_write_buffer_manager(64 << 20, true);
        let db = Db::open_tuned(dir.path(), |o| o.set_write_buffer_manager(&budget)).unwrap();
        let put = |i: u64| {
            let mut b = WriteBatch::default();
            b.put_cf(
                &db.cf(ColumnFamily::Msgs).unwrap(),
                prefixed_u64(1, i),
                b"v",
            );
            b
        };
        db.write(put(0), false).unwrap();
        // Every byte of memtable is now over budget: writes stall until the budget grows.
        budget.set_buffer_size(1);

        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_time()
            .build()
            .unwrap();
        // Ends the stall however the test ends, so a failure does not hang dropping `rt`.
        struct Release<'a>(&'a rocksdb::WriteBufferManager);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.set_buffer_size(64 << 20);
            }
        }
        let release = Release(&budget);
        let (written_tx, written) = std::sync::mpsc::channel();
        let (db2, batch) = (db.clone(), put(1));
        rt.spawn(async move { written_tx.send(db2.write(batch, false)).unwrap() });
        let (tick_tx, tick) = std::sync::mpsc::channel();
        rt.spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            tick_tx.send(()).unwrap();
        });
        tick.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the runtime's tasks ran while a write was stalled");
        assert!(
            written.try_recv().is_err(),
            "the write waited for the stall"
        );

        drop(release);
        written
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the write completes once the stall ends")
            .unwrap();
        assert_eq!(
            db.get(ColumnFamily::Msgs, &prefixed_u64(1, 1)).unwrap(),
            Some(b"v".to_vec())
        );
        drop(rt);
    }

    /// Memtables of all column families together stay within the node's budget: writing 1.5
    /// times the budget into two column families (as publishes fill `raft_log` and `msgs`
    /// together) flushes on the way. Without the budget neither would reach its own 64 MB
    /// write buffer and all of it would stay in memory: checked.
    #[test]
    fn memtables_stay_within_the_node_budget() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let value = vec![7u8; 64 << 10];
        let rounds = 3 * MEMTABLE_BUDGET_BYTES / 4 / value.len();
        for i in 0..rounds as u64 {
            let mut b = WriteBatch::default();
            b.put_cf(
                &db.cf(ColumnFamily::RaftLog).unwrap(),
                prefixed_u64(1, i),
                &value,
            );
            b.put_cf(
                &db.cf(ColumnFamily::Msgs).unwrap(),
                prefixed_u64(1, i),
                &value,
            );
            db.write(b, false).unwrap();
        }
        // Flushes under way end first.
        db.wait_for_flushes(Duration::from_secs(20));
        let memtables: u64 = ColumnFamily::ALL
            .iter()
            .map(|&cf| {
                db.raw()
                    .property_int_value_cf(&db.cf(cf).unwrap(), "rocksdb.size-all-mem-tables")
                    .unwrap()
                    .unwrap_or(0)
            })
            .sum();
        let budget = MEMTABLE_BUDGET_BYTES as u64;
        assert!(
            memtables <= budget,
            "{memtables} bytes of memtables, budget {budget}"
        );
    }

    #[test]
    fn synced_write_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let key = prefixed_u64(7, 42);
        {
            let db = Db::open(dir.path()).unwrap();
            db.put_synced(&[
                (ColumnFamily::Msgs, &key, b"hello"),
                (ColumnFamily::SmMeta, b"g", b"1"),
            ])
            .unwrap();
        }
        let db = Db::open(dir.path()).unwrap();
        assert_eq!(
            db.get(ColumnFamily::Msgs, &key).unwrap().as_deref(),
            Some(&b"hello"[..])
        );
        assert_eq!(db.get(ColumnFamily::RaftLog, &key).unwrap(), None);
        assert_eq!(
            db.get(ColumnFamily::SmMeta, b"g").unwrap().as_deref(),
            Some(&b"1"[..])
        );
    }
}
