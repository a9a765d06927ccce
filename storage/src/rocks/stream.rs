//! [`RocksStreamStore`]: a file stream in the `msgs`, `subjects` and `sm_meta` column families.
//!
//! Layout (see [`crate::keys`]): `msgs[uid|seq] = record(ts, subject, headers, payload)`,
//! `subjects[uid|subject|0|seq] = record()`, `sm_meta[uid|META_STREAM] = record(counters)`.
//!
//! Invariants:
//! - Every mutation is one `WriteBatch` that also rewrites the counters record, so after a crash
//!   the counters always describe the messages present. One exception: a bulk load into an
//!   empty stream ingests its messages as table files ahead of the batch with their index and
//!   counters ([`super::bulk_ingest`]); messages a crash leaves above the counters' last
//!   sequence are deleted at open.
//! - Staging ([`StreamStore::begin_batch`]): appends are kept in `staged` (already counted in the
//!   in-memory counters and subject counts) and written by [`StreamStore::put_metas`] in one
//!   batch with the counters and the caller's records. Staged sequences are above every written
//!   one, so reads consult the database first and the staged tail after (or before, for
//!   newest-first reads). Every other mutation writes the staged appends first: a removal in its
//!   own batch, ahead of its deletions (one write; a bulk load's ingested appends are written
//!   before it), anything else in a write of their own. At most [`STAGE_LIMIT_BYTES`] are
//!   staged; past that they are written early (without the caller's records).
//! - The per-subject counts live in memory (like nats-server's per-subject index), with each
//!   subject's first and last sequence while they are known ([`SubjectSeqs`]), and are rebuilt
//!   at [`RocksStreamStore::open`] by a key-only scan of the stream's subject index; the open
//!   fails with `Corrupt` if they disagree with the persisted message count.
//! - One handle per stream uid; the handle is the only writer of its key ranges.

use std::collections::{BTreeMap, HashMap, HashSet};

use rocksdb::{Direction, IteratorMode, ReadOptions, WriteBatch};

use crate::db::{ColumnFamily, Db};
use crate::record;
use crate::rocks::stream_records::{Counters, decode_msg, encode_msg};
use crate::rocks::stream_view::RocksStreamView;
use crate::stream::{
    DurabilityBarrier, PurgePlan, PurgeRequest, StoredMsg, StreamState, StreamStore, StreamUid,
    StreamView, check_subject, purge_filter,
};
use crate::{StorageError, keys, subject};

const SUBJECTS: &str = "subjects";
const META: &str = "sm_meta";
/// Removals per write batch in a large purge: bounds memory and batch size.
const PURGE_CHUNK: usize = 4096;
/// Messages `next_matching` checks linearly before using the subject index.
const LINEAR_SCAN: usize = 256;
/// Most bytes of staged appends kept in memory before they are written anyway.
const STAGE_LIMIT_BYTES: usize = 32 << 20;
/// Longest a bulk load waits for the memtables to flush before one write of staged appends.
const BULK_FLUSH_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// What the store knows of one subject's present messages without reading its index.
///
/// `first` and `last` are the subject's first and last present sequence while exact. Removing
/// one end of several messages leaves the next one unknown: the field then bounds it (no
/// present message below `first`, none above `last`), and a lookup seeks the index from there.
/// Seeking from the bound rather than from the subject's start matters: the index keys of
/// removed messages stay behind as RocksDB tombstones until compaction, and a seek from the
/// start steps over every one of them (at 2,000 updates per key a KV put was ~15x
/// slower). A history-1 subject (a KV key) always has both ends exact, so replacing its value
/// reads no index at all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct SubjectSeqs {
    /// Present messages on the subject.
    count: u64,
    /// The first present sequence, or a lower bound of it (`first_exact`).
    first: u64,
    /// The last present sequence, or an upper bound of it (`last_exact`).
    last: u64,
    /// Whether `first` is the first present sequence itself.
    first_exact: bool,
    /// Whether `last` is the last present sequence itself.
    last_exact: bool,
}

impl SubjectSeqs {
    /// A message stored at `seq`, above every present one.
    fn stored(&mut self, seq: u64) {
        if self.count == 0 {
            (self.first, self.first_exact) = (seq, true);
        }
        self.count += 1;
        (self.last, self.last_exact) = (seq, true);
    }

    /// The message at `seq` was removed; returns whether the subject has messages left.
    fn removed(&mut self, seq: u64) -> bool {
        self.count = self.count.saturating_sub(1);
        if seq == self.first {
            (self.first, self.first_exact) = (seq.saturating_add(1), false);
        }
        if seq == self.last {
            (self.last, self.last_exact) = (seq.saturating_sub(1), false);
        }
        if self.count == 1 {
            // One left: an exact end is both ends.
            if self.first_exact {
                (self.last, self.last_exact) = (self.first, true);
            } else if self.last_exact {
                (self.first, self.first_exact) = (self.last, true);
            }
        }
        self.count > 0
    }
}

/// A file stream backed by the node's RocksDB.
#[derive(Debug)]
pub struct RocksStreamStore {
    db: Db,
    uid: StreamUid,
    counters: Counters,
    /// Present messages per subject; rebuilt at open.
    subjects: HashMap<String, SubjectSeqs>,
    /// Whether appends are staged (between `begin_batch` and `put_metas`).
    batching: bool,
    /// Staging for a bulk load (`begin_bulk_batch`): writes wait for room in the memtables.
    bulk: bool,
    /// A bulk load into an empty stream: staged messages are ingested as table files
    /// ([`super::bulk_ingest`]) rather than written through the memtables.
    ingest: bool,
    /// A restore ended ([`StreamStore::end_restore`]): the next write with records deletes its
    /// marker.
    restore_ended: bool,
    /// Cloned into every view ([`StreamStore::view`]): more than one holder means a view is
    /// live, and table files must not be dropped from under its RocksDB snapshot.
    views: std::sync::Arc<()>,
    /// Appends staged and not yet written, ascending by seq.
    staged: Vec<StoredMsg>,
    /// Payload, header and subject bytes in `staged`, to bound it.
    staged_bytes: usize,
    /// Tag written with every mutation (`sm_meta[uid|META_WRITE_TAG]`, beside the counters).
    tag: u64,
    /// The tag of the last mutation (read at open, then the last one put in a batch).
    written_tag: u64,
}

impl RocksStreamStore {
    /// Opens (or creates, when nothing is stored yet) the stream `uid`.
    pub fn open(db: Db, uid: StreamUid) -> Result<Self, StorageError> {
        // A snapshot install interrupted by a crash is finished or abandoned first.
        super::snapshot::recover_install(&db, uid)?;
        let raw = db.raw();
        let meta = db.cf(ColumnFamily::SmMeta)?;
        for marker in [keys::META_INSTALL, keys::META_RESTORE] {
            if raw
                .get_pinned_cf(&meta, keys::kind_key(uid.0, marker))?
                .is_some()
            {
                return Err(StorageError::IncompleteInstall { stream: uid.0 });
            }
        }
        let ckey = keys::kind_key(uid.0, keys::META_STREAM);
        let counters = match raw.get_pinned_cf(&meta, ckey)? {
            Some(v) => Counters::decode(&ckey, &v)?,
            None => Counters::default(),
        };
        let tkey = keys::kind_key(uid.0, keys::META_WRITE_TAG);
        let write_tag = match raw.get_pinned_cf(&meta, tkey)? {
            Some(v) => {
                let body = record::open(META, &tkey, &v)?;
                let bytes: [u8; 8] = body
                    .try_into()
                    .map_err(|_| StorageError::corrupt(META, "write tag is not 8 bytes"))?;
                u64::from_be_bytes(bytes)
            }
            None => 0,
        };
        drop(meta);
        remove_above(&db, uid, counters.last_seq)?;
        let mut subjects: HashMap<String, SubjectSeqs> = HashMap::new();
        let cf = db.cf(ColumnFamily::Subjects)?;
        let prefix = uid.0.to_be_bytes();
        let mut it = raw.raw_iterator_cf(&cf);
        it.seek(prefix);
        while let Some((k, v)) = it.item() {
            if !k.starts_with(&prefix) {
                break;
            }
            record::open(SUBJECTS, k, v)?;
            let Some((_, subj, seq)) = keys::decode_subject_index(k) else {
                return Err(StorageError::corrupt(SUBJECTS, "bad subject index key"));
            };
            // A subject's index keys come in ascending sequence order.
            subjects.entry(subj.to_string()).or_default().stored(seq);
            it.next();
        }
        it.status()?;
        drop(it);
        drop(cf);
        let indexed: u64 = subjects.values().map(|s| s.count).sum();
        if indexed != counters.msgs {
            return Err(StorageError::corrupt(
                SUBJECTS,
                format!(
                    "stream {}: {} indexed messages, counters say {}",
                    uid.0, indexed, counters.msgs
                ),
            ));
        }
        Ok(Self {
            db,
            uid,
            counters,
            subjects,
            batching: false,
            bulk: false,
            ingest: false,
            restore_ended: false,
            views: std::sync::Arc::default(),
            staged: Vec::new(),
            staged_bytes: 0,
            tag: write_tag,
            written_tag: write_tag,
        })
    }

    /// Deletes everything stored for this stream (messages, index, counters, meta records and
    /// its consumers' states) in one batch: the stream was deleted.
    pub fn destroy(self) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        // The stream's range, and its staging range should an install have been left there.
        for u in [self.uid.0, keys::staging_id(self.uid.0)] {
            let (start, end) = (u.to_be_bytes(), keys::id_range_end(u));
            for cf in [
                ColumnFamily::Msgs,
                ColumnFamily::Subjects,
                ColumnFamily::Consumers,
                ColumnFamily::SmMeta,
            ] {
                batch.delete_range_cf(&self.db.cf(cf)?, &start[..], &end[..]);
            }
        }
        self.db.write(batch, false)
    }

    /// Stores a state-machine record (e.g. the applied log id) under `sm_meta[uid|kind]`; it
    /// travels with the stream's snapshots. `kind` must be at least [`keys::META_USER_MIN`].
    /// Staged appends are written in the same batch.
    pub fn put_meta(&mut self, kind: u8, body: &[u8]) -> Result<(), StorageError> {
        self.write_staged(&[(kind, body)])
    }

    /// Writes the staged appends (with the counters) and `records` in one batch.
    fn write_staged(&mut self, records: &[(u8, &[u8])]) -> Result<(), StorageError> {
        if let Some((kind, _)) = records.iter().find(|(k, _)| *k < keys::META_USER_MIN) {
            return Err(StorageError::corrupt(
                META,
                format!("reserved meta kind {kind}"),
            ));
        }
        if self.staged.is_empty() && records.is_empty() {
            return Ok(());
        }
        let ingest = self.bulk && self.ingest;
        if ingest {
            // The messages first: counters never describe messages that are not there.
            super::bulk_ingest::ingest_msgs(&self.db, self.uid.0, &self.staged)?;
        }
        let mut batch = self.staged_batch(ingest)?;
        if !self.staged.is_empty() {
            let counters = self.counters;
            self.put_counters(&mut batch, &counters)?;
        }
        let restore_ended = self.restore_ended && !records.is_empty();
        if !records.is_empty() {
            let meta_cf = self.db.cf(ColumnFamily::SmMeta)?;
            for (kind, body) in records {
                let key = keys::kind_key(self.uid.0, *kind);
                batch.put_cf(&meta_cf, key, record::seal(&key, body));
            }
            if restore_ended {
                batch.delete_cf(&meta_cf, keys::kind_key(self.uid.0, keys::META_RESTORE));
            }
        }
        self.db.write_unlogged(batch)?;
        if restore_ended {
            self.restore_ended = false;
        }
        self.staged.clear();
        self.staged_bytes = 0;
        Ok(())
    }

    /// A new batch holding the staged appends: their index entries, and their messages unless
    /// they were `ingested` as table files. The caller adds the counters.
    fn staged_batch(&self, ingested: bool) -> Result<WriteBatch, StorageError> {
        // Sized up front: a batch of staged appends can be tens of MB (a snapshot install).
        let msg_bytes = if ingested { 0 } else { self.staged_bytes };
        let mut batch = WriteBatch::with_capacity_bytes(msg_bytes + 64 * self.staged.len());
        if self.staged.is_empty() {
            return Ok(batch);
        }
        let msgs_cf = self.db.cf(ColumnFamily::Msgs)?;
        let subj_cf = self.db.cf(ColumnFamily::Subjects)?;
        for m in &self.staged {
            if !ingested {
                let key = self.msg_key(m.seq);
                batch.put_cf(&msgs_cf, key, encode_msg(&key, m));
            }
            let ikey = keys::subject_index(self.uid.0, &m.subject, m.seq);
            let ival = record::seal(&ikey, &[]);
            batch.put_cf(&subj_cf, ikey, ival);
        }
        Ok(batch)
    }

    /// Forgets every message and sequence (see [`StreamStore::reset`]); with `marked`, records
    /// a restore in progress ([`keys::META_RESTORE`]) in the same write, synced through the WAL.
    fn reset_marked(&mut self, marked: bool) -> Result<(), StorageError> {
        self.staged.clear();
        self.staged_bytes = 0;
        let uid = self.uid.0;
        let mut batch = WriteBatch::default();
        // A stream that never held a message has nothing to delete; a range tombstone would
        // only make a bulk load's ingested files overlap it and pile up in level 0.
        let held = self.counters.last_seq > 0 || self.counters.msgs > 0;
        let (start, end) = (uid.to_be_bytes(), keys::id_range_end(uid));
        if held {
            batch.delete_range_cf(&self.db.cf(ColumnFamily::Msgs)?, &start[..], &end[..]);
            batch.delete_range_cf(&self.db.cf(ColumnFamily::Subjects)?, &start[..], &end[..]);
        }
        let c = Counters::default();
        self.put_counters(&mut batch, &c)?;
        if marked {
            let key = keys::kind_key(uid, keys::META_RESTORE);
            batch.put_cf(
                &self.db.cf(ColumnFamily::SmMeta)?,
                key,
                record::seal(&key, &[]),
            );
            self.db.write(batch, true)?;
            if held && std::sync::Arc::strong_count(&self.views) == 1 {
                // The restore's bulk load is ingested as table files: with the tombstone gone
                // they go to the bottom level instead of piling up above it in level 0. Safe:
                // the tombstone is in the WAL, synced, nothing is stored in the range until
                // this returns (as in `purge_everything`), and no view of the old messages is
                // live (a dropped file would vanish from under its snapshot; with one live,
                // the files stay and the compaction keeps what the snapshot sees).
                for cf in [ColumnFamily::Msgs, ColumnFamily::Subjects] {
                    self.db.raw().delete_file_in_range_cf(
                        &self.db.cf(cf)?,
                        &start[..],
                        &end[..],
                    )?;
                }
                let msgs = self.db.cf(ColumnFamily::Msgs)?;
                self.db
                    .raw()
                    .compact_range_cf(&msgs, Some(&start[..]), Some(&end[..]));
            }
        } else {
            self.db.write_unlogged(batch)?;
        }
        self.counters = c;
        self.subjects.clear();
        Ok(())
    }

    /// The staged append at `seq`, if any.
    fn staged_msg(&self, seq: u64) -> Option<&StoredMsg> {
        let i = self.staged.binary_search_by_key(&seq, |m| m.seq).ok()?;
        self.staged.get(i)
    }

    /// Reads a record written by [`Self::put_meta`].
    pub fn get_meta(&self, kind: u8) -> Result<Option<Vec<u8>>, StorageError> {
        let key = keys::kind_key(self.uid.0, kind);
        let cf = self.db.cf(ColumnFamily::SmMeta)?;
        match self.db.raw().get_pinned_cf(&cf, key)? {
            Some(v) => Ok(Some(record::open(META, &key, &v)?.to_vec())),
            None => Ok(None),
        }
    }

    fn msg_key(&self, seq: u64) -> [u8; 16] {
        keys::prefixed_u64(self.uid.0, seq)
    }

    /// Adds the counters record (and the write tag, when one is set) to a mutation's batch.
    fn put_counters(&mut self, batch: &mut WriteBatch, c: &Counters) -> Result<(), StorageError> {
        let cf = self.db.cf(ColumnFamily::SmMeta)?;
        let key = keys::kind_key(self.uid.0, keys::META_STREAM);
        batch.put_cf(&cf, key, c.encode(&key));
        if self.tag != 0 {
            let tkey = keys::kind_key(self.uid.0, keys::META_WRITE_TAG);
            batch.put_cf(&cf, tkey, record::seal(&tkey, &self.tag.to_be_bytes()));
            self.written_tag = self.tag;
        }
        Ok(())
    }

    /// The first present message with `seq >= from` that is not in `skip`, written or staged:
    /// `(seq, ts)`.
    fn first_present(
        &self,
        from: u64,
        skip: &HashSet<u64>,
    ) -> Result<Option<(u64, u64)>, StorageError> {
        let cf = self.db.cf(ColumnFamily::Msgs)?;
        let mut it = self.db.raw().raw_iterator_cf(&cf);
        it.seek(self.msg_key(from));
        while let Some((k, v)) = it.item() {
            match keys::decode_prefixed_u64(k) {
                Some((uid, seq)) if uid == self.uid.0 => {
                    if !skip.contains(&seq) {
                        return Ok(Some((seq, decode_msg(k, v)?.timestamp_ns)));
                    }
                }
                _ => break,
            }
            it.next();
        }
        it.status()?;
        // Staged appends are above every written message.
        Ok(self
            .staged
            .iter()
            .find(|m| m.seq >= from && !skip.contains(&m.seq))
            .map(|m| (m.seq, m.timestamp_ns)))
    }

    /// Removes `victims` (seq, subject, size) in one batch, keeping counters consistent. The
    /// staged appends are written in the same batch, ahead of the deletions (a victim may be
    /// one of them).
    fn remove_batch(&mut self, victims: &[(u64, String, u64)]) -> Result<(), StorageError> {
        if victims.is_empty() {
            return Ok(());
        }
        if self.bulk && self.ingest {
            // Ingested appends go in as table files, ahead of any batch.
            self.write_staged(&[])?;
        }
        let mut batch = self.staged_batch(false)?;
        let msgs_cf = self.db.cf(ColumnFamily::Msgs)?;
        let subj_cf = self.db.cf(ColumnFamily::Subjects)?;
        let mut c = self.counters;
        for (seq, subj, size) in victims {
            batch.delete_cf(&msgs_cf, self.msg_key(*seq));
            batch.delete_cf(&subj_cf, keys::subject_index(self.uid.0, subj, *seq));
            c.msgs -= 1;
            c.bytes = c.bytes.saturating_sub(*size);
        }
        let gone: HashSet<u64> = victims.iter().map(|v| v.0).collect();
        if gone.contains(&c.first_seq) {
            (c.first_seq, c.first_ts) = self
                .first_present(c.first_seq, &gone)?
                .unwrap_or((c.last_seq + 1, 0));
        }
        drop((msgs_cf, subj_cf));
        self.put_counters(&mut batch, &c)?;
        self.db.write_unlogged(batch)?;
        self.staged.clear();
        self.staged_bytes = 0;
        self.counters = c;
        for (seq, subj, _) in victims {
            if let Some(seqs) = self.subjects.get_mut(subj)
                && !seqs.removed(*seq)
            {
                self.subjects.remove(subj);
            }
        }
        Ok(())
    }

    /// Removes every message. On the apply path (`durable == false`) the write skips the WAL
    /// like every other state write and the space comes back with compaction. For a stream that
    /// left the node (`durable`), the write goes through the WAL and the SST files wholly inside
    /// the stream's range are dropped at once.
    fn purge_everything(&mut self, durable: bool) -> Result<u64, StorageError> {
        let removed = self.counters.msgs;
        let uid = self.uid.0;
        let mut batch = WriteBatch::default();
        let end = keys::id_range_end(uid);
        let start = uid.to_be_bytes();
        batch.delete_range_cf(&self.db.cf(ColumnFamily::Msgs)?, &start[..], &end[..]);
        batch.delete_range_cf(&self.db.cf(ColumnFamily::Subjects)?, &start[..], &end[..]);
        let c = Counters {
            msgs: 0,
            bytes: 0,
            first_seq: self.counters.last_seq + 1,
            first_ts: 0,
            ..self.counters
        };
        self.put_counters(&mut batch, &c)?;
        if !durable {
            self.db.write_unlogged(batch)?;
            self.counters = c;
            self.subjects.clear();
            return Ok(removed);
        }
        self.db.write(batch, false)?;
        self.counters = c;
        self.subjects.clear();
        // Give the disk space back now rather than at the next compaction of the range. Safe
        // here: under `&mut self` nothing new is stored in the range until this returns, so
        // every SST file that lies wholly inside it holds only keys the range tombstone just
        // written (still in the memtable, and in the WAL) covers. Not on the apply path: there
        // the tombstone skips the WAL, and a crash before the next flush would lose it while
        // the dropped files stay gone, leaving part of the stream without its counters.
        for cf in [ColumnFamily::Msgs, ColumnFamily::Subjects] {
            self.db
                .raw()
                .delete_file_in_range_cf(&self.db.cf(cf)?, &start[..], &end[..])?;
        }
        Ok(removed)
    }

    /// Counts a stored message in its subject's [`SubjectSeqs`] (no allocation for a known one).
    fn note_stored(&mut self, msg: &StoredMsg) {
        match self.subjects.get_mut(&msg.subject) {
            Some(seqs) => seqs.stored(msg.seq),
            None => {
                let mut seqs = SubjectSeqs::default();
                seqs.stored(msg.seq);
                self.subjects.insert(msg.subject.clone(), seqs);
            }
        }
    }

    /// Seeks the first index key of `subj` with `seq >= from`; returns its seq.
    fn subject_seek(&self, subj: &str, from: u64) -> Result<Option<u64>, StorageError> {
        self.subject_index_near(subj, from, true)
    }

    /// The last written or staged sequence of one literal subject.
    fn subject_last(&self, subj: &str) -> Result<Option<u64>, StorageError> {
        match self.subjects.get(subj) {
            None => Ok(None),
            Some(seqs) if seqs.last_exact => Ok(Some(seqs.last)),
            // A bound is left by a removal, which writes every staged append; an append staged
            // since then would have made the end exact. So the index holds the answer.
            Some(seqs) => self.subject_index_near(subj, seqs.last, false),
        }
    }

    /// The index entry of `subj` nearest to `seq`: at or after it (`forward`), else at or
    /// before it. Every record read is checksum-verified.
    fn subject_index_near(
        &self,
        subj: &str,
        seq: u64,
        forward: bool,
    ) -> Result<Option<u64>, StorageError> {
        let cf = self.db.cf(ColumnFamily::Subjects)?;
        let mut it = self.db.raw().raw_iterator_cf(&cf);
        let prefix = keys::subject_prefix(self.uid.0, subj);
        let key = keys::subject_index(self.uid.0, subj, seq);
        if forward {
            it.seek(key);
        } else {
            it.seek_for_prev(key);
        }
        let found = match it.item() {
            Some((k, v)) if k.starts_with(&prefix) => {
                record::open(SUBJECTS, k, v)?;
                keys::decode_subject_index(k).map(|(_, _, seq)| seq)
            }
            _ => None,
        };
        it.status()?;
        Ok(found)
    }
}

impl StreamStore for RocksStreamStore {
    fn uid(&self) -> StreamUid {
        self.uid
    }

    fn msg_size(&self, subject: &str, headers_len: usize, payload_len: usize) -> u64 {
        // nats-server's file store record size (spec/nats-protocol-and-jetstream.md §4.6).
        if headers_len == 0 {
            (subject.len() + payload_len + 30) as u64
        } else {
            (subject.len() + headers_len + payload_len + 34) as u64
        }
    }

    fn store_msg(&mut self, msg: &StoredMsg) -> Result<(), StorageError> {
        check_subject(&msg.subject)?;
        let mut c = self.counters;
        if msg.seq <= c.last_seq {
            return Err(StorageError::SeqNotIncreasing {
                stream: self.uid.0,
                seq: msg.seq,
                last_seq: c.last_seq,
            });
        }
        if c.msgs == 0 {
            c.first_seq = msg.seq;
            c.first_ts = msg.timestamp_ns;
        }
        c.msgs += 1;
        c.bytes += self.msg_size(&msg.subject, msg.headers.len(), msg.payload.len());
        c.last_seq = msg.seq;
        c.last_ts = msg.timestamp_ns;
        if self.batching {
            self.staged.push(msg.clone());
            self.staged_bytes += msg.subject.len() + msg.headers.len() + msg.payload.len();
            self.counters = c;
            self.note_stored(msg);
            let ingest = self.bulk && self.ingest;
            let limit = if ingest {
                super::bulk_ingest::INGEST_FILE_BYTES
            } else {
                STAGE_LIMIT_BYTES
            };
            if self.staged_bytes > limit {
                if self.bulk && !ingest {
                    self.db.wait_for_flushes(BULK_FLUSH_WAIT_MAX);
                }
                self.write_staged(&[])?;
            }
            return Ok(());
        }
        let mut batch = WriteBatch::default();
        let key = self.msg_key(msg.seq);
        batch.put_cf(&self.db.cf(ColumnFamily::Msgs)?, key, encode_msg(&key, msg));
        let ikey = keys::subject_index(self.uid.0, &msg.subject, msg.seq);
        let ival = record::seal(&ikey, &[]);
        batch.put_cf(&self.db.cf(ColumnFamily::Subjects)?, ikey, ival);
        self.put_counters(&mut batch, &c)?;
        self.db.write_unlogged(batch)?;
        self.counters = c;
        self.note_stored(msg);
        Ok(())
    }

    fn skip_to(&mut self, next_seq: u64) -> Result<(), StorageError> {
        self.write_staged(&[])?;
        if self.counters.msgs != 0 || next_seq <= self.counters.last_seq {
            return Ok(());
        }
        let c = Counters {
            first_seq: next_seq,
            last_seq: next_seq - 1,
            ..self.counters
        };
        let mut batch = WriteBatch::default();
        self.put_counters(&mut batch, &c)?;
        self.db.write_unlogged(batch)?;
        self.counters = c;
        Ok(())
    }

    fn get(&self, seq: u64) -> Result<Option<StoredMsg>, StorageError> {
        if let Some(m) = self.staged_msg(seq) {
            return Ok(Some(m.clone()));
        }
        let key = self.msg_key(seq);
        let cf = self.db.cf(ColumnFamily::Msgs)?;
        match self.db.raw().get_pinned_cf(&cf, key)? {
            Some(v) => Ok(Some(decode_msg(&key, &v)?)),
            None => Ok(None),
        }
    }

    fn last_for_subject(&self, filter: &str) -> Result<Option<StoredMsg>, StorageError> {
        let all = subject::is_match_all(filter);
        if let Some(m) =
            (self.staged.iter().rev()).find(|m| all || subject::matches(filter, &m.subject))
        {
            return Ok(Some(m.clone()));
        }
        let last = if subject::is_match_all(filter) {
            let cf = self.db.cf(ColumnFamily::Msgs)?;
            let mut it = self.db.raw().raw_iterator_cf(&cf);
            it.seek_for_prev(self.msg_key(u64::MAX));
            let found = it
                .key()
                .and_then(keys::decode_prefixed_u64)
                .filter(|(uid, _)| *uid == self.uid.0)
                .map(|(_, seq)| seq);
            it.status()?;
            found
        } else if subject::is_literal(filter) {
            self.subject_last(filter)?
        } else {
            let mut best = None;
            for s in self.subjects.keys().filter(|s| subject::matches(filter, s)) {
                best = best.max(self.subject_last(s)?);
            }
            best
        };
        match last {
            Some(seq) => self.get(seq),
            None => Ok(None),
        }
    }

    fn next_matching(
        &self,
        start: u64,
        filters: &[&str],
    ) -> Result<Option<StoredMsg>, StorageError> {
        if let Some(m) = self.written_next_matching(start, filters)? {
            return Ok(Some(m));
        }
        let all = filters.is_empty() || filters.iter().any(|f| subject::is_match_all(f));
        let hit = |s: &str| all || filters.iter().any(|f| subject::matches(f, s));
        Ok(self
            .staged
            .iter()
            .find(|m| m.seq >= start && hit(&m.subject))
            .cloned())
    }

    fn next_matching_batch(
        &self,
        start: u64,
        filters: &[&str],
        max: usize,
        max_bytes: usize,
    ) -> Result<Vec<StoredMsg>, StorageError> {
        let mut out = Vec::new();
        if max == 0 {
            return Ok(out);
        }
        match self.written_scan(start, filters, (max, max_bytes), &mut out)? {
            ScanEnd::Full => return Ok(out),
            ScanEnd::Limit if out.is_empty() => {
                return Ok(self.next_matching(start, filters)?.into_iter().collect());
            }
            ScanEnd::Limit => return Ok(out),
            ScanEnd::End => {}
        }
        // Every written message was seen: the staged tail (higher sequences) follows.
        let all = filters.is_empty() || filters.iter().any(|f| subject::is_match_all(f));
        let mut bytes: usize = out.iter().map(batch_bytes).sum();
        for m in self.staged.iter().filter(|m| m.seq >= start) {
            if out.len() >= max || bytes >= max_bytes {
                break;
            }
            if all || filters.iter().any(|f| subject::matches(f, &m.subject)) {
                bytes += batch_bytes(m);
                out.push(m.clone());
            }
        }
        Ok(out)
    }

    fn view(&self) -> Result<Box<dyn StreamView>, StorageError> {
        let view = RocksStreamView::new(
            self.db.clone(),
            self.uid,
            self.staged.clone(),
            self.views.clone(),
        )?;
        Ok(Box::new(view))
    }

    fn remove(&mut self, seq: u64) -> Result<bool, StorageError> {
        let Some(m) = self.get(seq)? else {
            return Ok(false);
        };
        let size = self.msg_size(&m.subject, m.headers.len(), m.payload.len());
        self.remove_batch(&[(seq, m.subject, size)])?;
        Ok(true)
    }

    fn purge(&mut self, req: &PurgeRequest) -> Result<u64, StorageError> {
        self.write_staged(&[])?;
        let matching = match purge_filter(req) {
            None => self.counters.msgs,
            Some(f) => self.subject_counts(f)?.values().sum(),
        };
        let plan = PurgePlan::new(req, matching)?;
        let removed = if plan.is_everything(self.counters.last_seq) {
            self.purge_everything(false)?
        } else {
            self.purge_planned(&plan)?
        };
        if let Some(next) = plan.skip_target(&self.state()) {
            self.skip_to(next)?;
        }
        Ok(removed)
    }

    fn state(&self) -> StreamState {
        let c = &self.counters;
        StreamState {
            msgs: c.msgs,
            bytes: c.bytes,
            first_seq: c.first_seq,
            first_ts: c.first_ts,
            last_seq: c.last_seq,
            last_ts: c.last_ts,
            num_subjects: self.subjects.len() as u64,
        }
    }

    fn deleted(&self) -> Result<Vec<u64>, StorageError> {
        let mut out = Vec::new();
        if self.counters.msgs == 0 {
            return Ok(out);
        }
        let cf = self.db.cf(ColumnFamily::Msgs)?;
        let mut it = self.db.raw().raw_iterator_cf(&cf);
        let mut expect = self.counters.first_seq;
        it.seek(self.msg_key(expect));
        while let Some(k) = it.key() {
            match keys::decode_prefixed_u64(k) {
                Some((uid, seq)) if uid == self.uid.0 => {
                    out.extend(expect..seq);
                    expect = seq + 1;
                }
                _ => break,
            }
            it.next();
        }
        it.status()?;
        for m in &self.staged {
            out.extend(expect..m.seq);
            expect = m.seq + 1;
        }
        Ok(out)
    }

    fn subject_counts(&self, filter: &str) -> Result<BTreeMap<String, u64>, StorageError> {
        Ok(self
            .subjects
            .iter()
            .filter(|(s, _)| subject::is_match_all(filter) || subject::matches(filter, s))
            .map(|(s, seqs)| (s.clone(), seqs.count))
            .collect())
    }

    fn subject_count(&self, subject: &str) -> u64 {
        self.subjects.get(subject).map_or(0, |seqs| seqs.count)
    }

    fn first_seq_for_subject(&self, subject: &str) -> Result<Option<u64>, StorageError> {
        let floor = match self.subjects.get(subject) {
            None => return Ok(None),
            Some(seqs) if seqs.first_exact => return Ok(Some(seqs.first)),
            Some(seqs) => seqs.first,
        };
        if let Some(seq) = self.subject_seek(subject, floor)? {
            return Ok(Some(seq));
        }
        Ok(self
            .staged
            .iter()
            .find(|m| m.subject == subject)
            .map(|m| m.seq))
    }

    fn remove_first_for_subject(&mut self, subject: &str) -> Result<Option<u64>, StorageError> {
        let Some(seq) = self.first_seq_for_subject(subject)? else {
            return Ok(None);
        };
        if !self.remove(seq)? {
            return Ok(None);
        }
        // It was the subject's first, so nothing of it is left at or below it: the bound moves
        // past it rather than staying below every later removal's tombstone.
        if let Some(seqs) = self.subjects.get_mut(subject)
            && !seqs.first_exact
            && seqs.first <= seq
        {
            seqs.first = seq.saturating_add(1);
        }
        Ok(Some(seq))
    }

    fn drop_all(&mut self) -> Result<u64, StorageError> {
        self.write_staged(&[])?;
        self.purge_everything(true)
    }

    fn durability_barrier(&self) -> Option<DurabilityBarrier> {
        let db = self.db.clone();
        Some(Box::new(move || db.flush_state()))
    }

    fn reset(&mut self) -> Result<(), StorageError> {
        self.reset_marked(false)
    }

    fn begin_restore(&mut self) -> Result<(), StorageError> {
        self.reset_marked(true)
    }

    fn end_restore(&mut self) {
        self.restore_ended = true;
    }

    fn put_meta(&mut self, kind: u8, body: &[u8]) -> Result<(), StorageError> {
        RocksStreamStore::put_meta(self, kind, body)
    }

    fn get_meta(&self, kind: u8) -> Result<Option<Vec<u8>>, StorageError> {
        RocksStreamStore::get_meta(self, kind)
    }

    fn begin_batch(&mut self) {
        self.batching = true;
    }

    fn begin_bulk_batch(&mut self) {
        self.batching = true;
        self.bulk = true;
        self.ingest = self.counters.msgs == 0;
    }

    fn put_metas(&mut self, records: &[(u8, &[u8])]) -> Result<(), StorageError> {
        self.write_staged(records)?;
        self.batching = false;
        self.bulk = false;
        self.ingest = false;
        Ok(())
    }

    fn set_write_tag(&mut self, tag: u64) {
        self.tag = tag;
    }

    fn write_tag(&self) -> u64 {
        self.written_tag
    }
}

/// Deletes the messages of stream `uid` above `last_seq`, if any: left by a crash between a bulk
/// load's ingested file and the counters after it ([`super::bulk_ingest`]).
fn remove_above(db: &Db, uid: StreamUid, last_seq: u64) -> Result<(), StorageError> {
    let Some(next) = last_seq.checked_add(1) else {
        return Ok(());
    };
    let start = keys::prefixed_u64(uid.0, next);
    let end = keys::id_range_end(uid.0);
    let cf = db.cf(ColumnFamily::Msgs)?;
    let mut ro = ReadOptions::default();
    ro.set_iterate_upper_bound(end.clone());
    let mut it = db.raw().raw_iterator_cf_opt(&cf, ro);
    it.seek(start);
    let found = it.valid();
    it.status()?;
    drop(it);
    if found {
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(&cf, &start[..], &end[..]);
        drop(cf);
        db.write(batch, true)?;
    }
    Ok(())
}

/// How a forward scan of written messages ended.
enum ScanEnd {
    /// `max` messages or `max_bytes` were collected.
    Full,
    /// No written message is left.
    End,
    /// [`LINEAR_SCAN`] messages were looked at (filtered scans only).
    Limit,
}

/// The bytes of `m` that count against a batch's byte budget.
fn batch_bytes(m: &StoredMsg) -> usize {
    m.subject.len() + m.headers.len() + m.payload.len()
}

impl RocksStreamStore {
    /// Appends to `out` the written messages from `start` on that match `filters`, in one
    /// iterator pass, until `out` holds `max` messages or `max_bytes`.
    fn written_scan(
        &self,
        start: u64,
        filters: &[&str],
        limits: (usize, usize),
        out: &mut Vec<StoredMsg>,
    ) -> Result<ScanEnd, StorageError> {
        let (max, max_bytes) = limits;
        let all = filters.is_empty() || filters.iter().any(|f| subject::is_match_all(f));
        let hit = |s: &str| all || filters.iter().any(|f| subject::matches(f, s));
        let cf = self.db.cf(ColumnFamily::Msgs)?;
        let mut ro = ReadOptions::default();
        ro.set_iterate_upper_bound(keys::id_range_end(self.uid.0));
        // The raw iterator lends key and value slices: no copy per message before decoding.
        let mut it = self.db.raw().raw_iterator_cf_opt(&cf, ro);
        it.seek(self.msg_key(start));
        let mut bytes: usize = out.iter().map(batch_bytes).sum();
        let mut n = 0;
        while let Some((k, v)) = it.item() {
            if !all && n >= LINEAR_SCAN {
                return Ok(ScanEnd::Limit);
            }
            n += 1;
            let m = decode_msg(k, v)?;
            if hit(&m.subject) {
                bytes += batch_bytes(&m);
                out.push(m);
                if out.len() >= max || bytes >= max_bytes {
                    return Ok(ScanEnd::Full);
                }
            }
            it.next();
        }
        it.status()?;
        Ok(ScanEnd::End)
    }

    /// `next_matching` over the written messages only.
    fn written_next_matching(
        &self,
        start: u64,
        filters: &[&str],
    ) -> Result<Option<StoredMsg>, StorageError> {
        let mut out = Vec::with_capacity(1);
        match self.written_scan(start, filters, (1, usize::MAX), &mut out)? {
            _ if !out.is_empty() => return Ok(out.pop()),
            ScanEnd::End | ScanEnd::Full => return Ok(None),
            ScanEnd::Limit => {}
        }
        // Many non-matching messages: seek each matching subject in the subject index.
        let hit = |s: &str| filters.iter().any(|f| subject::matches(f, s));
        let mut best: Option<u64> = None;
        for (s, seqs) in self.subjects.iter().filter(|(s, _)| hit(s)) {
            // Nothing of `s` is present below `seqs.first`, exact or not.
            if let Some(seq) = self.subject_seek(s, start.max(seqs.first))? {
                best = Some(best.map_or(seq, |b| b.min(seq)));
            }
        }
        match best {
            Some(seq) => self.get(seq),
            None => Ok(None),
        }
    }
}

impl RocksStreamStore {
    fn purge_planned(&mut self, plan: &PurgePlan<'_>) -> Result<u64, StorageError> {
        let mut removed = 0u64;
        let mut from = self.counters.first_seq;
        loop {
            let budget = plan.max_remove - removed;
            if budget == 0 {
                break;
            }
            let mut victims = Vec::new();
            let mut next_from = None;
            {
                let cf = self.db.cf(ColumnFamily::Msgs)?;
                let mut ro = ReadOptions::default();
                ro.set_iterate_upper_bound(self.msg_key(plan.below.min(u64::MAX - 1)).to_vec());
                let start = self.msg_key(from);
                let it = self.db.raw().iterator_cf_opt(
                    &cf,
                    ro,
                    IteratorMode::From(&start, Direction::Forward),
                );
                for item in it {
                    let (k, v) = item?;
                    let m = decode_msg(&k, &v)?;
                    if m.seq >= plan.below {
                        break;
                    }
                    if plan.matches(&m.subject) {
                        let size = self.msg_size(&m.subject, m.headers.len(), m.payload.len());
                        victims.push((m.seq, m.subject, size));
                        if victims.len() as u64 >= budget || victims.len() >= PURGE_CHUNK {
                            next_from = Some(m.seq + 1);
                            break;
                        }
                    }
                }
            }
            removed += victims.len() as u64;
            self.remove_batch(&victims)?;
            match next_from {
                Some(f) => from = f,
                None => break,
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
