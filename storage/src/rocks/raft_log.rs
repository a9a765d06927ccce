//! [`RaftLogStore`]: openraft's `RaftLogStorage` + `RaftLogReader` for one Raft group, in the
//! node's shared `raft_log` / `raft_state` column families.
//!
//! Layout: `raft_log[group|index] = record(codec entry)`, `raft_state[group|kind] =
//! record(codec vote / log id)` for the vote, the committed log id and the last purged log id.
//!
//! Type config and codec: the store is generic over the openraft type config `C` and a
//! [`LogCodec`] `K` that turns entries, votes and log ids into bytes. The codec is the only
//! place that knows the encoding (STYLE B4: `proto` owns every encoded form, so the server's
//! codec is expected to live next to its protobuf types); the storage adds the version + CRC
//! envelope around whatever the codec produces. The tests use a serde_json codec with
//! openraft's `serde` feature, which this crate only enables for its own tests.
//!
//! Invariants:
//! - Every write goes through the node's [`LogWriter`] and has been written when the call
//!   returns, so a group's vote, appends, truncations and purges are applied in the order
//!   openraft issued them (it awaits each call).
//! - `append` returns once the entries are readable and completes its `IOFlushed` callback only
//!   after a WAL fsync that covers them; `save_vote` returns only once the vote is durable. An
//!   [`unsynced`](RaftLogStore::unsynced) log (a memory stream's) completes the callback as
//!   soon as the entries are written: they survive a crash of the process (the OS holds them),
//!   not one of the machine.
//! - Truncation and purge are single `delete_range` operations, so they never leave a hole.
//! - Reads check every record and the contiguity of indexes; a gap is reported as corruption.
//! - The newest entries are also kept in memory ([`TailCache`], shared by the store's clones),
//!   updated under its lock right after each write is made; reads that start inside it are
//!   answered from it, all others from RocksDB.

use std::fmt::Debug;
use std::io;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::type_config::alias::{LogIdOf, VoteOf};
use openraft::{LogId, OptionalSend, RaftLogReader, RaftTypeConfig};
use rocksdb::ReadOptions;

use crate::db::{ColumnFamily, Db};
use crate::rocks::log_cache::TailCache;
use crate::rocks::log_writer::{Durable, LogWriter, Op};
use crate::{StorageError, keys, record};

const LOG: &str = "raft_log";
const STATE: &str = "raft_state";

/// A Raft group's identity on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId(pub u64);

/// Turns the type config's entries, votes and log ids into bytes and back.
///
/// Decode errors are reported as corruption (the bytes passed the CRC, so a decode failure means
/// a codec bug or an incompatible format).
pub trait LogCodec<C: RaftTypeConfig>: Send + Sync + 'static {
    /// Appends the encoding of `entry` to `out`.
    fn encode_entry(entry: &C::Entry, out: &mut Vec<u8>);
    /// Decodes an entry.
    fn decode_entry(bytes: &[u8]) -> Result<C::Entry, String>;
    /// Appends the encoding of `vote` to `out`.
    fn encode_vote(vote: &VoteOf<C>, out: &mut Vec<u8>);
    /// Decodes a vote.
    fn decode_vote(bytes: &[u8]) -> Result<VoteOf<C>, String>;
    /// Appends the encoding of `log_id` to `out`.
    fn encode_log_id(log_id: &LogIdOf<C>, out: &mut Vec<u8>);
    /// Decodes a log id.
    fn decode_log_id(bytes: &[u8]) -> Result<LogIdOf<C>, String>;
}

/// Says, at each append, whether the group's next step waits for that append's fsync alone
/// (the raft crate says so for a single-voter leader with one publish in flight), so the append
/// may fsync on the caller's thread when the syncer is idle
/// ([`LogWriter::complete_after_write`]). Never for a leader with followers: its replication
/// starts only once its append returned, so an fsync there would come first instead of
/// alongside the followers'.
pub type InlineSyncPolicy = Box<dyn Fn() -> bool + Send + Sync>;

/// The log of one Raft group. Clones share the database, the writer and the cache of the newest
/// entries (the clone is the reader).
pub struct RaftLogStore<C: RaftTypeConfig, K> {
    db: Db,
    writer: LogWriter,
    group: GroupId,
    /// Whether appends wait for a WAL fsync before they count as flushed.
    synced: bool,
    /// Set once the group runs (it reads the group's Raft state); none: never inline.
    inline_sync: Arc<OnceLock<InlineSyncPolicy>>,
    tail: Arc<Mutex<TailCache<C::Entry>>>,
    _types: PhantomData<fn() -> K>,
}

impl<C: RaftTypeConfig, K> Clone for RaftLogStore<C, K> {
    fn clone(&self) -> Self {
        Self {
            db: self.db.clone(),
            writer: self.writer.clone(),
            group: self.group,
            synced: self.synced,
            inline_sync: Arc::clone(&self.inline_sync),
            tail: Arc::clone(&self.tail),
            _types: PhantomData,
        }
    }
}

impl<C: RaftTypeConfig, K> Debug for RaftLogStore<C, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftLogStore")
            .field("group", &self.group)
            .finish()
    }
}

fn corrupt(cf: &'static str, detail: String) -> io::Error {
    StorageError::corrupt(cf, detail).into()
}

impl<C: RaftTypeConfig, K: LogCodec<C>> RaftLogStore<C, K>
where
    C::Entry: Clone,
{
    /// The log of `group`, written through the node's `writer`.
    pub fn new(db: Db, writer: LogWriter, group: GroupId) -> Self {
        Self {
            db,
            writer,
            group,
            synced: true,
            inline_sync: Arc::default(),
            tail: Arc::default(),
            _types: PhantomData,
        }
    }

    /// The same log, with appends counted as flushed once written, without waiting for a WAL
    /// fsync (votes stay synced). For groups whose data need not outlive the machine: a memory
    /// stream's, whose replicas are its durability.
    pub fn unsynced(mut self) -> Self {
        self.synced = false;
        self
    }

    /// Lets appends fsync on the caller's thread while `policy` says so and the syncer is idle
    /// (see [`InlineSyncPolicy`]). Shared by the store's clones; set once, later calls are
    /// ignored.
    pub fn set_inline_sync(&self, policy: InlineSyncPolicy) {
        let _ = self.inline_sync.set(policy);
    }

    /// The cache of the newest entries, locked. A panic while it was held cannot leave it
    /// inconsistent with the log (each update is one call on it), so a poisoned lock is taken.
    fn tail(&self) -> MutexGuard<'_, TailCache<C::Entry>> {
        self.tail.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The group this log belongs to.
    pub fn group(&self) -> GroupId {
        self.group
    }

    /// Deletes every entry and state record of the group (the group left this node).
    pub async fn destroy(&self) -> Result<(), StorageError> {
        let g = self.group.0;
        let end = keys::id_range_end(g);
        let ops = vec![
            Op::DeleteRange(ColumnFamily::RaftLog, g.to_be_bytes().to_vec(), end.clone()),
            Op::DeleteRange(ColumnFamily::RaftState, g.to_be_bytes().to_vec(), end),
        ];
        self.tail().clear();
        self.writer.submit_durable(ops).await
    }

    fn state_get(&self, kind: u8) -> Result<Option<Vec<u8>>, io::Error> {
        let key = keys::kind_key(self.group.0, kind);
        let cf = self.db.cf(ColumnFamily::RaftState)?;
        match self
            .db
            .raw()
            .get_pinned_cf(&cf, key)
            .map_err(StorageError::from)?
        {
            Some(v) => Ok(Some(record::open(STATE, &key, &v)?.to_vec())),
            None => Ok(None),
        }
    }

    fn read_log_id(&self, kind: u8) -> Result<Option<LogIdOf<C>>, io::Error> {
        match self.state_get(kind)? {
            Some(b) => Ok(Some(K::decode_log_id(&b).map_err(|e| corrupt(STATE, e))?)),
            None => Ok(None),
        }
    }

    fn state_op(&self, kind: u8, body: &[u8]) -> Op {
        let (key, value) = self.state_record(kind, body);
        Op::Put(ColumnFamily::RaftState, key, value)
    }

    /// Key and sealed value of one of the group's Raft state records.
    fn state_record(&self, kind: u8, body: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let key = keys::kind_key(self.group.0, kind);
        let value = record::seal(&key, body);
        (key.to_vec(), value)
    }

    fn decode_entry(key: &[u8], value: &[u8]) -> Result<C::Entry, io::Error> {
        let body = record::open(LOG, key, value)?;
        K::decode_entry(body).map_err(|e| corrupt(LOG, e))
    }

    /// Entries from `start` up to `end` (exclusive, `None` = the last). With `max_bytes`, stops
    /// after the entry that brings the stored bytes read to that many (at least one entry).
    fn entries(
        &self,
        start: u64,
        end: Option<u64>,
        max_bytes: Option<usize>,
    ) -> Result<Vec<C::Entry>, io::Error> {
        if let Some(cached) = self.tail().read(start, end, max_bytes) {
            return Ok(cached);
        }
        let cf = self.db.cf(ColumnFamily::RaftLog)?;
        let mut ro = ReadOptions::default();
        ro.set_iterate_upper_bound(match end {
            Some(e) => keys::prefixed_u64(self.group.0, e).to_vec(),
            None => keys::id_range_end(self.group.0),
        });
        let mut it = self.db.raw().raw_iterator_cf_opt(&cf, ro);
        it.seek(keys::prefixed_u64(self.group.0, start));
        let mut out = Vec::new();
        let mut expect: Option<u64> = None;
        let mut bytes = 0usize;
        while let Some((k, v)) = it.item() {
            if max_bytes.is_some_and(|max| bytes >= max) {
                break;
            }
            bytes += v.len();
            let Some((g, index)) = keys::decode_prefixed_u64(k) else {
                return Err(corrupt(LOG, "bad log key".into()));
            };
            if g != self.group.0 || end.is_some_and(|e| index >= e) {
                break;
            }
            if expect.is_some_and(|e| e != index) {
                return Err(corrupt(LOG, format!("hole in log before index {index}")));
            }
            let entry = Self::decode_entry(k, v)?;
            if entry.log_id_parts().1 != index {
                return Err(corrupt(
                    LOG,
                    format!("entry under key {index} has another index"),
                ));
            }
            out.push(entry);
            expect = Some(index + 1);
            it.next();
        }
        it.status().map_err(StorageError::from)?;
        Ok(out)
    }

    fn last_entry_log_id(&self) -> Result<Option<LogIdOf<C>>, io::Error> {
        let cf = self.db.cf(ColumnFamily::RaftLog)?;
        // Bounded to the group: without the bounds, the seek of a group with no entries walks
        // back over every deleted entry of the groups before it (measured: 0.4 s of CPU to
        // start a stream group after a few deleted streams' logs).
        let mut ro = ReadOptions::default();
        ro.set_iterate_lower_bound(self.group.0.to_be_bytes().to_vec());
        ro.set_iterate_upper_bound(keys::id_range_end(self.group.0));
        let mut it = self.db.raw().raw_iterator_cf_opt(&cf, ro);
        it.seek_for_prev(keys::prefixed_u64(self.group.0, u64::MAX));
        let found = match it.item() {
            Some((k, v)) if k.starts_with(&self.group.0.to_be_bytes()) => {
                let e = Self::decode_entry(k, v)?;
                let (leader, index) = e.log_id_parts();
                Some(LogId::new(leader.clone(), index))
            }
            _ => None,
        };
        it.status().map_err(StorageError::from)?;
        Ok(found)
    }
}

/// Most stored entry bytes read for one AppendEntries request (one entry is always sent, and
/// entries hold at most about 2 MiB: a publish batch stops growing at 1 MiB, plus one message).
/// Well under the Raft transport's 64 MiB message limit.
const REPLICATION_MAX_BYTES: usize = 8 << 20;

impl<C: RaftTypeConfig, K: LogCodec<C>> RaftLogReader<C> for RaftLogStore<C, K>
where
    C::Entry: Clone,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, io::Error> {
        let start = match range.start_bound() {
            Bound::Included(s) => *s,
            Bound::Excluded(s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(e) => Some(e.saturating_add(1)),
            Bound::Excluded(e) => Some(*e),
            Bound::Unbounded => None,
        };
        self.entries(start, end, None)
    }

    /// Replication reads: at most [`REPLICATION_MAX_BYTES`] of entries per AppendEntries, so
    /// a follower catching up on large entries never gets a request over the transport's limit.
    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<C::Entry>, io::Error> {
        self.entries(start, Some(end), Some(REPLICATION_MAX_BYTES))
    }

    async fn read_vote(&mut self) -> Result<Option<VoteOf<C>>, io::Error> {
        match self.state_get(keys::RAFT_VOTE)? {
            Some(b) => Ok(Some(K::decode_vote(&b).map_err(|e| corrupt(STATE, e))?)),
            None => Ok(None),
        }
    }
}

impl<C: RaftTypeConfig, K: LogCodec<C>> RaftLogStorage<C> for RaftLogStore<C, K>
where
    C::Entry: Clone,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, io::Error> {
        let last_purged_log_id = self.read_log_id(keys::RAFT_PURGED)?;
        let last_log_id = match self.last_entry_log_id()? {
            Some(id) => Some(id),
            None => last_purged_log_id.clone(),
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &VoteOf<C>) -> Result<(), io::Error> {
        let mut body = Vec::new();
        K::encode_vote(vote, &mut body);
        let op = self.state_op(keys::RAFT_VOTE, &body);
        Ok(self.writer.submit_durable(vec![op]).await?)
    }

    async fn save_committed(&mut self, committed: Option<LogIdOf<C>>) -> Result<(), io::Error> {
        let Some(committed) = committed else {
            return Ok(());
        };
        let mut body = Vec::new();
        K::encode_log_id(&committed, &mut body);
        // Without the WAL: the committed id is a hint (openraft applies up to it on start), and
        // any earlier committed id a crash leaves behind is still committed. It never survives
        // without the entries it covers: they were written before it, and a flush (atomic over
        // all column families) that persists it persists them too. Written through the WAL it
        // cost a WAL write between each fsync and the apply it precedes.
        let (key, value) = self.state_record(keys::RAFT_COMMITTED, &body);
        let mut batch = rocksdb::WriteBatch::default();
        batch.put_cf(&self.db.cf(ColumnFamily::RaftState)?, key, value);
        Ok(self.db.write_unlogged(batch)?)
    }

    async fn read_committed(&mut self) -> Result<Option<LogIdOf<C>>, io::Error> {
        self.read_log_id(keys::RAFT_COMMITTED)
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<C>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut ops = Vec::new();
        let mut kept = Vec::new();
        // Room for the last entry's size: entries of one append are usually alike.
        let mut size_hint = 64;
        for e in entries {
            let index = e.log_id_parts().1;
            let key = keys::prefixed_u64(self.group.0, index);
            let value = record::seal_with(&key, size_hint, |out| K::encode_entry(&e, out));
            size_hint = value.len();
            kept.push((index, value.len(), e));
            ops.push(Op::Put(ColumnFamily::RaftLog, key.to_vec(), value));
        }
        // Under the cache's lock, so no read sees the entries in RocksDB but not in the cache
        // while the cache still ends before them.
        let mut tail = self.tail();
        if !self.synced {
            if let Err(e) = self.writer.submit(ops, None) {
                tail.clear();
                return Err(e.into());
            }
            for (index, bytes, e) in kept {
                tail.appended(index, bytes, e);
            }
            drop(tail);
            callback.io_completed(Ok(()));
            return Ok(());
        }
        let done: Durable = Box::new(move |r: Result<(), io::Error>| callback.io_completed(r));
        let written = match self.writer.write(ops) {
            Ok(w) => w,
            Err(e) => {
                tail.clear();
                done(Err(io::Error::other(e.to_string())));
                return Err(e.into());
            }
        };
        for (index, bytes, e) in kept {
            tail.appended(index, bytes, e);
        }
        // The fsync (when made here) runs without the cache's lock: readers go on meanwhile.
        drop(tail);
        let inline = self.inline_sync.get().is_some_and(|policy| policy());
        Ok(self.writer.complete_after_write(done, inline, written)?)
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogIdOf<C>>) -> Result<(), io::Error> {
        let from = last_log_id.map_or(0, |id| id.index() + 1);
        let g = self.group.0;
        let op = Op::DeleteRange(
            ColumnFamily::RaftLog,
            keys::prefixed_u64(g, from).to_vec(),
            keys::id_range_end(g),
        );
        let mut tail = self.tail();
        tail.truncate_from(from);
        Ok(self.writer.submit(vec![op], None)?)
    }

    async fn purge(&mut self, log_id: LogIdOf<C>) -> Result<(), io::Error> {
        let g = self.group.0;
        let mut body = Vec::new();
        K::encode_log_id(&log_id, &mut body);
        let ops = vec![
            self.state_op(keys::RAFT_PURGED, &body),
            Op::DeleteRange(
                ColumnFamily::RaftLog,
                keys::prefixed_u64(g, 0).to_vec(),
                keys::prefixed_u64(g, log_id.index().saturating_add(1)).to_vec(),
            ),
        ];
        let mut tail = self.tail();
        tail.purge_through(log_id.index());
        Ok(self.writer.submit(ops, None)?)
    }
}

#[cfg(test)]
#[path = "raft_log_tests.rs"]
pub(crate) mod tests;
