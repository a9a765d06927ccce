//! Bulk loads of a stream's messages written as sorted table files and ingested whole.
//!
//! A snapshot install writes gigabytes of messages. Through the memtables each byte was
//! inserted into a skiplist, flushed to level 0 and compacted down again, and the install ran
//! at about 150 MB/s on two cores. Staged appends of a bulk load into an empty stream
//! ([`StreamStore::begin_bulk_batch`](crate::stream::StreamStore) after a reset or
//! `begin_restore`) are instead written in ascending key order to a table file of about
//! [`INGEST_FILE_BYTES`] with RocksDB's `SstFileWriter` and ingested into the `msgs` column
//! family; as nothing there overlaps them, RocksDB places each file at the bottom level and
//! compacts nothing. (`begin_restore` of a stream that held messages drops their table files
//! and compacts the range, so its range tombstone does not make the files land in level 0.) The subject index and counters still go through a write batch (small).
//!
//! Crash safety: an ingested file is durable at once, the counters written after it only at
//! the next flush, so a crash in between leaves messages above the counters' last sequence.
//! [`RocksStreamStore::open`](super::RocksStreamStore::open) deletes those (they can exist no
//! other way: every other write puts messages and counters in one batch). Files not ingested
//! yet live in [`INGEST_DIR`] under the database directory and are removed when the database
//! is opened.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rocksdb::{IngestExternalFileOptions, Options, SstFileWriter};

use crate::StorageError;
use crate::db::{ColumnFamily, Db};
use crate::keys;
use crate::rocks::stream_records::encode_msg;
use crate::stream::StoredMsg;

/// Staged message bytes per ingested file.
pub(crate) const INGEST_FILE_BYTES: usize = 64 << 20;

/// Directory under the database directory holding table files being written for ingestion.
pub(crate) const INGEST_DIR: &str = "bulk-ingest";

/// Level-0 files of `msgs` above which a load waits for compactions before the next file.
const LEVEL0_FILES_MAX: u64 = 8;

/// Longest a load waits for level 0 to shrink before ingesting anyway.
const LEVEL0_WAIT_MAX: Duration = Duration::from_secs(10);

/// Distinguishes the files of concurrent loads.
static NEXT_FILE: AtomicU64 = AtomicU64::new(0);

/// Writes `msgs` (ascending by sequence, all of stream `uid`) as one table file and ingests it
/// into `msgs`. Blocking: call it off the async runtime.
pub(crate) fn ingest_msgs(db: &Db, uid: u64, msgs: &[StoredMsg]) -> Result<(), StorageError> {
    if msgs.is_empty() {
        return Ok(());
    }
    let dir = db.raw().path().join(INGEST_DIR);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!(
        "{uid:016x}-{}.sst",
        NEXT_FILE.fetch_add(1, Ordering::Relaxed)
    ));
    let written = write_file(&path, uid, msgs).and_then(|()| {
        wait_for_level0(db);
        let mut opts = IngestExternalFileOptions::default();
        // Linked into the database, not copied (same filesystem).
        opts.set_move_files(true);
        let cf = db.cf(ColumnFamily::Msgs)?;
        Ok(db
            .raw()
            .ingest_external_file_cf_opts(&cf, &opts, vec![&path])?)
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&path);
    }
    written
}

/// The table file of `msgs` at `path`, compressed as the `msgs` column family is.
fn write_file(path: &Path, uid: u64, msgs: &[StoredMsg]) -> Result<(), StorageError> {
    let mut opts = Options::default();
    opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
    let mut writer = SstFileWriter::create(&opts);
    writer.open(path)?;
    for m in msgs {
        let key = keys::prefixed_u64(uid, m.seq);
        writer.put(key, encode_msg(&key, m))?;
    }
    writer.finish()?;
    Ok(())
}

/// Waits (bounded) while `msgs` has many level-0 files: ingested files that did overlap
/// something land there, and RocksDB stops every writer of the node at 36.
fn wait_for_level0(db: &Db) {
    let deadline = Instant::now() + LEVEL0_WAIT_MAX;
    while Instant::now() < deadline && level0_files(db) > LEVEL0_FILES_MAX {
        // A bulk load runs on a blocking thread, never on a runtime worker.
        #[allow(clippy::disallowed_methods)]
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Table files of `msgs` in level 0.
pub(crate) fn level0_files(db: &Db) -> u64 {
    db.raw()
        .cf_handle(ColumnFamily::Msgs.name())
        .and_then(|cf| {
            db.raw()
                .property_int_value_cf(&cf, "rocksdb.num-files-at-level0")
                .ok()
                .flatten()
        })
        .unwrap_or(0)
}

/// Removes table files a crash left in the ingest directory of the database at `db_path`.
pub(crate) fn clear_leftovers(db_path: &Path) -> Result<(), StorageError> {
    let dir: PathBuf = db_path.join(INGEST_DIR);
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}
