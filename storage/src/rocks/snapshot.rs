//! Stream snapshots: a stream's data streamed out of a consistent read view in bounded chunks,
//! and installed on another node in place of its old data.
//!
//! What travels: every key of the stream uid in `msgs`, `subjects`, `consumers`, and `sm_meta`
//! keys `uid|kind` (the stream counters and anything else the state machine keeps there, such as
//! its applied log id) except the install marker. Values travel as stored, in their checksummed
//! envelope; the installer re-checks every record against its key before writing it, so a
//! corrupt record is never propagated.
//!
//! Chunk format: a record (see [`crate::record`], sealed under the key `b"snap" | uid | chunk_no`)
//! whose body is a sequence of `cf (u8) | key (u32 len + bytes) | value (u32 len + bytes)`. A
//! chunk holds whole entries, at most about `max_chunk_bytes` (one entry larger than that gets a
//! chunk of its own).
//!
//! Install protocol: the stream's data is replaced atomically (a reader sees the old data or the
//! new, never a mix or a part), with memory bounded by one chunk, by staging and then rolling
//! forward:
//! 1. [`StreamSnapshotInstaller::begin`] finishes or abandons any earlier install of the stream,
//!    clears its staging range (the same keys under [`keys::staging_id`]) and writes an install
//!    marker there (synced). The stream's data is untouched and stays readable.
//! 2. Each chunk is checked record by record against the stream's keys and written to the
//!    staging range, values verbatim (their checksums cover the stream's keys).
//! 3. [`StreamSnapshotInstaller::finish`] fsyncs the staged data, then commits the install with a
//!    second marker (synced): from here on the install happens even after a crash. It then
//!    deletes the stream's old data, copies the staged records into the stream's keys in bounded
//!    batches (checking each again) and deletes the staging range with both markers in one synced
//!    write, whose WAL sync also makes the copies durable.
//!
//! [`crate::rocks::RocksStreamStore::open`] runs [`recover_install`] first: a committed install is
//! rolled forward again from step 3 (it is idempotent: the stream's keys are cleared before the
//! copy), an uncommitted one is abandoned (its staging range deleted) and the old data is
//! served. A store of the stream must not be open while an install runs (open it after
//! [`StreamSnapshotInstaller::finish`]).

use rocksdb::{Direction, IteratorMode, ReadOptions, SnapshotWithThreadMode, WriteBatch};

use crate::db::{ColumnFamily, Db};
use crate::keys::{META_INSTALL, META_INSTALL_COMMIT};
use crate::record::{self, BodyReader, BodyWriter};
use crate::stream::StreamUid;
use crate::{StorageError, keys};

/// Sections in transfer order.
const SECTIONS: [ColumnFamily; 4] = [
    ColumnFamily::SmMeta,
    ColumnFamily::Msgs,
    ColumnFamily::Subjects,
    ColumnFamily::Consumers,
];

fn cf_code(cf: ColumnFamily) -> u8 {
    match cf {
        ColumnFamily::SmMeta => 0,
        ColumnFamily::Msgs => 1,
        ColumnFamily::Subjects => 2,
        ColumnFamily::Consumers => 3,
        ColumnFamily::RaftLog => 4,
        ColumnFamily::RaftState => 5,
    }
}

/// Bytes of staged records copied per write batch when an install rolls forward.
const COPY_BATCH_BYTES: usize = 4 << 20;

/// Whether `key` in `cf` is one of the install markers (never part of a stream's data).
fn is_marker(cf: ColumnFamily, key: &[u8]) -> bool {
    cf == ColumnFamily::SmMeta
        && key.len() == 9
        && (key[8] == META_INSTALL || key[8] == META_INSTALL_COMMIT)
}

/// `key` with its leading 8-byte id replaced by `id`.
fn rekey(key: &[u8], id: u64) -> Vec<u8> {
    let mut k = key.to_vec();
    k[..8].copy_from_slice(&id.to_be_bytes());
    k
}

/// Adds range deletions of everything stored under `id` in every section to `batch`.
fn delete_sections(db: &Db, batch: &mut WriteBatch, id: u64) -> Result<(), StorageError> {
    let end = keys::id_range_end(id);
    for cf in SECTIONS {
        batch.delete_range_cf(&db.cf(cf)?, &id.to_be_bytes()[..], &end[..]);
    }
    Ok(())
}

/// Finishes a committed install of stream `uid` or abandons an uncommitted one (see the module
/// docs); does nothing when none was started.
pub(crate) fn recover_install(db: &Db, uid: StreamUid) -> Result<(), StorageError> {
    let staging = keys::staging_id(uid.0);
    if db
        .get(
            ColumnFamily::SmMeta,
            &keys::kind_key(staging, META_INSTALL_COMMIT),
        )?
        .is_some()
    {
        return roll_forward(db, uid);
    }
    if db
        .get(ColumnFamily::SmMeta, &keys::kind_key(staging, META_INSTALL))?
        .is_some()
    {
        let mut batch = WriteBatch::default();
        delete_sections(db, &mut batch, staging)?;
        db.write(batch, true)?;
    }
    Ok(())
}

/// Step 3 of the install: replaces the stream's data with the staged data.
fn roll_forward(db: &Db, uid: StreamUid) -> Result<(), StorageError> {
    let staging = keys::staging_id(uid.0);
    let mut batch = WriteBatch::default();
    delete_sections(db, &mut batch, uid.0)?;
    db.write(batch, false)?;
    let prefix = staging.to_be_bytes();
    for cf_id in SECTIONS {
        let cf = db.cf(cf_id)?;
        let mut ro = ReadOptions::default();
        ro.set_iterate_upper_bound(keys::id_range_end(staging));
        let it = db
            .raw()
            .iterator_cf_opt(&cf, ro, IteratorMode::From(&prefix, Direction::Forward));
        let mut batch = WriteBatch::default();
        let mut bytes = 0usize;
        for item in it {
            let (k, v) = item?;
            if !k.starts_with(&prefix) || is_marker(cf_id, &k) {
                continue;
            }
            let live = rekey(&k, uid.0);
            record::open(cf_id.name(), &live, &v)?;
            bytes += live.len() + v.len();
            batch.put_cf(&cf, live, v);
            if bytes >= COPY_BATCH_BYTES {
                db.write(std::mem::take(&mut batch), false)?;
                bytes = 0;
            }
        }
        db.write(batch, false)?;
    }
    let mut batch = WriteBatch::default();
    delete_sections(db, &mut batch, staging)?;
    db.write(batch, true)
}

fn chunk_key(uid: u64, n: u64) -> Vec<u8> {
    let mut k = b"snap".to_vec();
    k.extend_from_slice(&keys::prefixed_u64(uid, n));
    k
}

/// Reads one stream out of a RocksDB snapshot (a consistent point-in-time view), chunk by chunk.
pub struct StreamSnapshotReader<'a> {
    db: &'a Db,
    view: SnapshotWithThreadMode<'a, rocksdb::DB>,
    uid: StreamUid,
    section: usize,
    /// Resume after this key in the current section.
    after: Option<Vec<u8>>,
    chunk_no: u64,
}

impl std::fmt::Debug for StreamSnapshotReader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSnapshotReader")
            .field("uid", &self.uid)
            .field("section", &self.section)
            .field("chunk_no", &self.chunk_no)
            .finish()
    }
}

impl<'a> StreamSnapshotReader<'a> {
    /// Pins the current state of `uid`; later writes are not seen by this reader.
    pub fn new(db: &'a Db, uid: StreamUid) -> Self {
        Self {
            db,
            view: db.raw().snapshot(),
            uid,
            section: 0,
            after: None,
            chunk_no: 0,
        }
    }

    /// The next chunk of at most about `max_chunk_bytes`, or `None` when done.
    pub fn next_chunk(&mut self, max_chunk_bytes: usize) -> Result<Option<Vec<u8>>, StorageError> {
        let mut body = BodyWriter::with_capacity(max_chunk_bytes.min(1 << 20));
        let mut used = 0usize;
        let mut entries = 0usize;
        let uid = self.uid.0;
        let prefix = uid.to_be_bytes();
        while self.section < SECTIONS.len() {
            let cf_id = SECTIONS[self.section];
            let cf = self.db.cf(cf_id)?;
            let mut ro = ReadOptions::default();
            ro.set_snapshot(&self.view);
            ro.set_iterate_upper_bound(keys::id_range_end(uid));
            let start = self.after.clone().unwrap_or_else(|| prefix.to_vec());
            let it = self.db.raw().iterator_cf_opt(
                &cf,
                ro,
                IteratorMode::From(&start, Direction::Forward),
            );
            let mut full = false;
            for item in it {
                let (k, v) = item?;
                if self.after.as_deref() == Some(&k[..]) || !k.starts_with(&prefix) {
                    continue;
                }
                if is_marker(cf_id, &k) {
                    continue;
                }
                let size = k.len() + v.len() + 9;
                if entries > 0 && used + size > max_chunk_bytes {
                    full = true;
                    break;
                }
                body.u8(cf_code(cf_id)).bytes(&k).bytes(&v);
                used += size;
                entries += 1;
                self.after = Some(k.to_vec());
            }
            if full {
                break;
            }
            self.section += 1;
            self.after = None;
        }
        if entries == 0 {
            return Ok(None);
        }
        let key = chunk_key(uid, self.chunk_no);
        self.chunk_no += 1;
        Ok(Some(record::seal(&key, &body.finish())))
    }
}

/// Installs chunks from a [`StreamSnapshotReader`] as stream `uid` (see the module docs).
#[derive(Debug)]
pub struct StreamSnapshotInstaller {
    db: Db,
    uid: StreamUid,
    chunk_no: u64,
}

impl StreamSnapshotInstaller {
    /// Finishes or abandons an earlier install of `uid`, then starts staging a new one (one
    /// synced batch); the stream's data stays as it is until [`Self::finish`]. Any open
    /// [`crate::rocks::RocksStreamStore`] of `uid` must be dropped first and re-opened after
    /// [`Self::finish`].
    pub fn begin(db: Db, uid: StreamUid) -> Result<Self, StorageError> {
        recover_install(&db, uid)?;
        let staging = keys::staging_id(uid.0);
        let mut batch = WriteBatch::default();
        delete_sections(&db, &mut batch, staging)?;
        let marker = keys::kind_key(staging, META_INSTALL);
        batch.put_cf(
            &db.cf(ColumnFamily::SmMeta)?,
            marker,
            record::seal(&marker, &[]),
        );
        db.write(batch, true)?;
        Ok(Self {
            db,
            uid,
            chunk_no: 0,
        })
    }

    /// Checks and writes one chunk; chunks must arrive in the order they were produced.
    pub fn add_chunk(&mut self, chunk: &[u8]) -> Result<(), StorageError> {
        let u = self.uid.0;
        let ckey = chunk_key(u, self.chunk_no);
        let body =
            record::open("snapshot", &ckey, chunk).map_err(|e| StorageError::BadSnapshot {
                detail: format!("chunk {}: {e}", self.chunk_no),
            })?;
        let mut r = BodyReader::new("snapshot", body);
        let mut batch = WriteBatch::default();
        while !r.is_empty() {
            let code = r.u8()?;
            let Some(cf) = SECTIONS.iter().copied().find(|c| cf_code(*c) == code) else {
                return Err(StorageError::BadSnapshot {
                    detail: format!("unknown column family code {code}"),
                });
            };
            let k = r.bytes()?;
            let v = r.bytes()?;
            if !k.starts_with(&u.to_be_bytes()) || is_marker(cf, k) {
                return Err(StorageError::BadSnapshot {
                    detail: "key outside the stream".into(),
                });
            }
            record::open(cf.name(), k, v)?;
            batch.put_cf(&self.db.cf(cf)?, rekey(k, keys::staging_id(u)), v);
        }
        self.db.write(batch, false)?;
        self.chunk_no += 1;
        Ok(())
    }

    /// Makes the staged data durable, commits the install and replaces the stream's data with
    /// it (see the module docs); the stream can be opened again.
    pub fn finish(self) -> Result<(), StorageError> {
        let uid = self.uid;
        let db = self.commit()?;
        roll_forward(&db, uid)
    }

    /// Step 3's first half: after this the install completes even if the process dies.
    fn commit(self) -> Result<Db, StorageError> {
        self.db.sync_wal()?;
        let marker = keys::kind_key(keys::staging_id(self.uid.0), META_INSTALL_COMMIT);
        self.db
            .put_synced(&[(ColumnFamily::SmMeta, &marker, &record::seal(&marker, &[]))])?;
        Ok(self.db)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::{ConsumerState, ConsumerStore};
    use crate::rocks::{RocksConsumerStore, RocksStreamStore};
    use crate::stream::conformance::msg;
    use crate::stream::{PurgeRequest, StreamStore};

    fn fill(db: &Db, uid: u64, n: u64) -> RocksStreamStore {
        let mut s = RocksStreamStore::open(db.clone(), StreamUid(uid)).unwrap();
        for seq in 1..=n {
            s.store_msg(&msg(seq, &format!("s.{}", seq % 7))).unwrap();
        }
        s
    }

    #[test]
    fn snapshot_streams_in_bounded_chunks_and_installs_in_place() {
        let src_dir = tempfile::tempdir().unwrap();
        let src = Db::open(src_dir.path()).unwrap();
        let mut s = fill(&src, 5, 500);
        s.remove(10).unwrap();
        s.put_meta(keys::META_USER_MIN, b"applied").unwrap();
        let mut cons = RocksConsumerStore::new(src.clone());
        let mut cs = ConsumerState::default();
        cs.record_delivery(3, 1, 77);
        cons.save(StreamUid(5), "c", &cs).unwrap();
        fill(&src, 6, 20);

        let dst_dir = tempfile::tempdir().unwrap();
        let dst = Db::open(dst_dir.path()).unwrap();
        let mut old = fill(&dst, 5, 900);
        old.purge(&PurgeRequest {
            keep: Some(3),
            ..Default::default()
        })
        .unwrap();
        drop(old);
        let neighbour = fill(&dst, 4, 10);
        drop(neighbour);

        let mut reader = StreamSnapshotReader::new(&src, StreamUid(5));
        // Writes after the reader was created are not part of the snapshot.
        s.store_msg(&msg(501, "late")).unwrap();
        let mut inst = StreamSnapshotInstaller::begin(dst.clone(), StreamUid(5)).unwrap();
        let mut chunks = 0;
        while let Some(chunk) = reader.next_chunk(4096).unwrap() {
            assert!(chunk.len() <= 4096 + 512, "chunk of {}", chunk.len());
            inst.add_chunk(&chunk).unwrap();
            chunks += 1;
        }
        assert!(chunks > 5, "{chunks} chunks");
        inst.finish().unwrap();
        s.remove(501).unwrap();

        let got = RocksStreamStore::open(dst.clone(), StreamUid(5)).unwrap();
        let mut want = s.state();
        (want.last_seq, want.last_ts) = (500, 500_000);
        assert_eq!(got.state(), want);
        assert_eq!(got.deleted().unwrap(), vec![10]);
        assert_eq!(
            got.get_meta(keys::META_USER_MIN).unwrap().as_deref(),
            Some(&b"applied"[..])
        );
        assert_eq!(got.get(499).unwrap(), s.get(499).unwrap());
        assert_eq!(
            got.subject_counts(">").unwrap(),
            s.subject_counts(">").unwrap()
        );
        let cons_dst = RocksConsumerStore::new(dst.clone());
        assert_eq!(cons_dst.load(StreamUid(5), "c").unwrap(), Some(cs));
        assert_eq!(
            RocksStreamStore::open(dst.clone(), StreamUid(4))
                .unwrap()
                .state()
                .msgs,
            10
        );
        assert!(
            RocksStreamStore::open(dst, StreamUid(6))
                .unwrap()
                .state()
                .msgs
                == 0
        );
    }

    /// Keys stored under `id` in every section.
    fn keys_under(db: &Db, id: u64) -> usize {
        SECTIONS
            .iter()
            .map(|cf| {
                let cf = db.cf(*cf).unwrap();
                let mut it = db.raw().raw_iterator_cf(&cf);
                it.seek(id.to_be_bytes());
                let mut n = 0;
                while it.key().is_some_and(|k| k.starts_with(&id.to_be_bytes())) {
                    n += 1;
                    it.next();
                }
                n
            })
            .sum()
    }

    /// A source stream (uid 5, 300 messages) and a destination database where uid 5 holds 40
    /// other messages; returns both databases (with their dirs) and the source's state.
    fn source_and_destination() -> (
        tempfile::TempDir,
        Db,
        tempfile::TempDir,
        Db,
        crate::stream::StreamState,
    ) {
        let src_dir = tempfile::tempdir().unwrap();
        let src = Db::open(src_dir.path()).unwrap();
        let want = fill(&src, 5, 300).state();
        let dst_dir = tempfile::tempdir().unwrap();
        let dst = Db::open(dst_dir.path()).unwrap();
        let mut old = fill(&dst, 5, 0);
        for seq in 1..=40 {
            old.store_msg(&msg(seq, "old")).unwrap();
        }
        drop(old);
        (src_dir, src, dst_dir, dst, want)
    }

    /// Opens stream 5 of `db` (which finishes or abandons an interrupted install) and checks
    /// that it has `state`, that message 40 has `subject_40`, and that no staging is left.
    fn opened_with(db: &Db, state: &crate::stream::StreamState, subject_40: &str) {
        let s = RocksStreamStore::open(db.clone(), StreamUid(5)).unwrap();
        assert_eq!(&s.state(), state);
        assert_eq!(
            s.get(40).unwrap().map(|m| m.subject).as_deref(),
            Some(subject_40)
        );
        assert_eq!(
            keys_under(db, keys::staging_id(5)),
            0,
            "staging left behind"
        );
    }

    #[test]
    fn the_old_data_stays_readable_until_finish_and_an_abandoned_install_leaves_it_whole() {
        let (_s, src, _d, dst, _) = source_and_destination();
        let old = RocksStreamStore::open(dst.clone(), StreamUid(5))
            .unwrap()
            .state();
        let mut reader = StreamSnapshotReader::new(&src, StreamUid(5));
        let mut inst = StreamSnapshotInstaller::begin(dst.clone(), StreamUid(5)).unwrap();
        for _ in 0..3 {
            let chunk = reader.next_chunk(2048).unwrap().unwrap();
            inst.add_chunk(&chunk).unwrap();
        }
        assert!(keys_under(&dst, keys::staging_id(5)) > 0);
        // The process dies mid-install: nothing more happens to the installer.
        drop(inst);
        opened_with(&dst, &old, "old");
    }

    #[test]
    fn a_committed_install_completes_when_the_stream_is_opened_after_a_crash() {
        let (_s, src, _d, dst, want) = source_and_destination();
        let mut reader = StreamSnapshotReader::new(&src, StreamUid(5));
        let mut inst = StreamSnapshotInstaller::begin(dst.clone(), StreamUid(5)).unwrap();
        while let Some(chunk) = reader.next_chunk(2048).unwrap() {
            inst.add_chunk(&chunk).unwrap();
        }
        // The process dies right after the commit marker, before the old data is replaced.
        let dst = inst.commit().unwrap();
        opened_with(&dst, &want, "s.5");
        // A second open finds nothing more to do.
        assert_eq!(
            RocksStreamStore::open(dst, StreamUid(5)).unwrap().state(),
            want
        );
    }

    #[test]
    fn tampered_chunk_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        fill(&db, 1, 10);
        let mut reader = StreamSnapshotReader::new(&db, StreamUid(1));
        let mut chunk = reader.next_chunk(1 << 20).unwrap().unwrap();
        let mid = chunk.len() / 2;
        chunk[mid] ^= 0xff;
        let mut inst = StreamSnapshotInstaller::begin(db.clone(), StreamUid(1)).unwrap();
        assert!(matches!(
            inst.add_chunk(&chunk),
            Err(StorageError::BadSnapshot { .. })
        ));
    }
}
