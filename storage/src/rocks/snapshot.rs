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
//! Install protocol and its invariant: [`StreamSnapshotInstaller::begin`] writes, in one synced
//! batch, an install marker and range deletions of the stream's old data; chunks are written as
//! they arrive; [`StreamSnapshotInstaller::finish`] fsyncs and removes the marker. While the marker
//! exists [`crate::rocks::RocksStreamStore::open`] refuses the stream (`IncompleteInstall`), so
//! nobody ever reads a mix of old and new data or a partial stream, including after a crash: the
//! group then fetches a snapshot again.

use rocksdb::{Direction, IteratorMode, ReadOptions, SnapshotWithThreadMode, WriteBatch};

use crate::db::{ColumnFamily, Db};
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
                if cf_id == ColumnFamily::SmMeta && k.len() == 9 && k[8] == keys::META_INSTALL {
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
    /// Marks the install as started and drops the stream's old data (one synced batch). Any open
    /// [`crate::rocks::RocksStreamStore`] of `uid` must be dropped first and re-opened after
    /// [`Self::finish`].
    pub fn begin(db: Db, uid: StreamUid) -> Result<Self, StorageError> {
        let u = uid.0;
        let end = keys::id_range_end(u);
        let mut batch = WriteBatch::default();
        for cf in SECTIONS {
            batch.delete_range_cf(&db.cf(cf)?, &u.to_be_bytes()[..], &end[..]);
        }
        let marker = keys::kind_key(u, keys::META_INSTALL);
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
            if !k.starts_with(&u.to_be_bytes())
                || (cf == ColumnFamily::SmMeta && k.len() == 9 && k[8] == keys::META_INSTALL)
            {
                return Err(StorageError::BadSnapshot {
                    detail: "key outside the stream".into(),
                });
            }
            record::open(cf.name(), k, v)?;
            batch.put_cf(&self.db.cf(cf)?, k, v);
        }
        self.db.write(batch, false)?;
        self.chunk_no += 1;
        Ok(())
    }

    /// Makes the installed data durable and removes the marker; the stream can be opened again.
    pub fn finish(self) -> Result<(), StorageError> {
        self.db.sync_wal()?;
        let marker = keys::kind_key(self.uid.0, keys::META_INSTALL);
        let mut batch = WriteBatch::default();
        batch.delete_cf(&self.db.cf(ColumnFamily::SmMeta)?, marker);
        self.db.write(batch, true)
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
        assert!(matches!(
            RocksStreamStore::open(dst.clone(), StreamUid(5)),
            Err(StorageError::IncompleteInstall { .. })
        ));
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
