//! Checks a node's whole database for damage before the node serves from it.
//!
//! [`check_store`] opens the database read-only (after the WAL check of [`crate::db::Db::open`])
//! and reads every key of every column family (those under range deletions too) with RocksDB's
//! block checksums verified, so a
//! flipped byte in any table file (data, index, filter or properties block), in the WAL or in
//! the MANIFEST is found before a Raft group votes or answers from it. The read costs one
//! sequential pass over the store (figures in RELIABILITY.md).
//!
//! The verdict separates damage in table files (`*.sst`: the replicated data itself, which the
//! node's peers hold too) from damage to the WAL or the MANIFEST (the database's own bookkeeping,
//! where an operator may want to look first); what the node does about either is the caller's
//! choice (`jetraft-server`'s store repair).

use std::path::Path;

use rocksdb::{DB, Options, ReadOptions};

use crate::StorageError;
use crate::db::ColumnFamily;
use crate::keys;

/// Read-ahead for the verification scan (sequential reads of whole table files).
const SCAN_READAHEAD: usize = 4 << 20;

/// Where the damage a check found lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DamageKind {
    /// A table file (`*.sst`) failed a block checksum.
    Tables,
    /// The WAL or the MANIFEST (or another file RocksDB needs to open) is damaged.
    LogOrManifest,
    /// A stream's state was being replaced by a snapshot restore when the node stopped
    /// ([`keys::META_RESTORE`](crate::keys::META_RESTORE)): its store holds part of the new
    /// state and no consistent applied position.
    InterruptedRestore,
}

/// What [`check_store`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreCheck {
    /// No database there yet.
    Missing,
    /// Every file opened and every block read back with a matching checksum.
    Sound,
    /// Damage was found.
    Damaged {
        /// Where.
        kind: DamageKind,
        /// RocksDB's (or the WAL check's) description.
        detail: String,
    },
}

/// Opens the database in `path` read-only and reads all of it back with checksums verified.
/// Errors other than damage (permissions, I/O) are returned as errors.
pub fn check_store(path: &Path) -> Result<StoreCheck, StorageError> {
    let empty = match std::fs::read_dir(path) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(StorageError::Io(e)),
    };
    if empty {
        return Ok(StoreCheck::Missing);
    }
    match crate::wal_check::check_wal_files(path) {
        Ok(()) => {}
        Err(StorageError::Corrupt { detail, .. }) => {
            return Ok(StoreCheck::Damaged {
                kind: DamageKind::LogOrManifest,
                detail,
            });
        }
        Err(e) => return Err(e),
    }
    let mut opts = Options::default();
    opts.set_paranoid_checks(true);
    opts.set_wal_recovery_mode(rocksdb::DBRecoveryMode::TolerateCorruptedTailRecords);
    // The column families the store has (one made by an older version may lack a newer one,
    // which `Db::open` creates).
    let names = match DB::list_cf(&opts, path) {
        Ok(names) => names,
        Err(e) => return damage_or_error(path, e),
    };
    let db = match DB::open_cf_for_read_only(&opts, path, &names, false) {
        Ok(db) => db,
        Err(e) => return damage_or_error(path, e),
    };
    for name in &names {
        let Some(handle) = db.cf_handle(name) else {
            return Ok(StoreCheck::Damaged {
                kind: DamageKind::LogOrManifest,
                detail: format!("column family {name} is missing"),
            });
        };
        let mut ro = ReadOptions::default();
        ro.set_verify_checksums(true);
        ro.fill_cache(false);
        ro.set_readahead_size(SCAN_READAHEAD);
        // Also the keys a range deletion covers (a purged Raft log, a purged or deleted
        // stream): without this the scan skips their blocks, but a compaction still reads
        // them, and a damaged one there stops every write of the running node. (Deprecated in
        // RocksDB as a performance knob for databases without DeleteRange; jetraft uses
        // DeleteRange, and here it is about what the scan reads.)
        #[allow(deprecated)]
        ro.set_ignore_range_deletions(true);
        let mut it = db.raw_iterator_cf_opt(&handle, ro);
        it.seek_to_first();
        let sm_meta = name == ColumnFamily::SmMeta.name();
        let mut restoring = None;
        while it.valid() {
            if sm_meta
                && restoring.is_none()
                && let Some(key) = it.key()
                && key.len() == 9
                && key[8] == keys::META_RESTORE
            {
                restoring = key[..8].try_into().ok().map(u64::from_be_bytes);
            }
            it.next();
        }
        if let Err(e) = it.status() {
            return damage_or_error(path, e);
        }
        if let Some(stream) = restoring {
            return Ok(StoreCheck::Damaged {
                kind: DamageKind::InterruptedRestore,
                detail: format!("stream {stream}: a snapshot restore was interrupted"),
            });
        }
    }
    Ok(StoreCheck::Sound)
}

/// A RocksDB error of kind `Corruption` as damage (in a table file when it names one), any
/// other as an error.
fn damage_or_error(path: &Path, e: rocksdb::Error) -> Result<StoreCheck, StorageError> {
    if e.kind() != rocksdb::ErrorKind::Corruption {
        return Err(StorageError::Open {
            path: path.to_path_buf(),
            source: e,
        });
    }
    let detail = e.into_string();
    let kind = if detail.contains(".sst") {
        DamageKind::Tables
    } else {
        DamageKind::LogOrManifest
    };
    Ok(StoreCheck::Damaged { kind, detail })
}

#[cfg(test)]
mod tests {
    use std::io::{Seek, SeekFrom, Write};

    use super::*;
    use crate::db::{ColumnFamily, Db};

    /// A store with `n` flushed values of 1 KiB in the message column family.
    fn filled(dir: &Path, n: u32) {
        let db = Db::open(dir).expect("open");
        let value = vec![7u8; 1024];
        for i in 0..n {
            let key = i.to_be_bytes();
            db.put_synced(&[(ColumnFamily::Msgs, &key, &value)])
                .expect("put");
        }
        db.flush_state().expect("flush");
    }

    fn files(dir: &Path, suffix: &str) -> Vec<std::path::PathBuf> {
        let mut out: Vec<_> = std::fs::read_dir(dir)
            .expect("dir")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.to_string_lossy().ends_with(suffix))
            .collect();
        out.sort();
        out
    }

    fn overwrite(path: &Path, at: u64, bytes: &[u8]) {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("open file");
        f.seek(SeekFrom::Start(at)).expect("seek");
        f.write_all(bytes).expect("write");
    }

    #[test]
    fn a_missing_or_empty_store_is_missing() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            check_store(&dir.path().join("none")).expect("check"),
            StoreCheck::Missing
        );
        assert_eq!(check_store(dir.path()).expect("check"), StoreCheck::Missing);
    }

    #[test]
    fn a_sound_store_passes() {
        let dir = tempfile::tempdir().expect("tempdir");
        filled(dir.path(), 200);
        assert_eq!(check_store(dir.path()).expect("check"), StoreCheck::Sound);
    }

    #[test]
    fn a_store_without_some_column_families_is_sound() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let db = DB::open_default(dir.path()).expect("open");
            db.put(b"k", b"v").expect("put");
            db.flush().expect("flush");
        }
        assert_eq!(check_store(dir.path()).expect("check"), StoreCheck::Sound);
    }

    #[test]
    fn a_flipped_data_block_is_table_damage() {
        let dir = tempfile::tempdir().expect("tempdir");
        filled(dir.path(), 200);
        let sst = files(dir.path(), ".sst");
        let biggest = (sst.iter())
            .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
            .expect("an sst file");
        // The data blocks come first in a table file: byte 100 is inside the first one.
        overwrite(biggest, 100, &[0xA5; 16]);
        match check_store(dir.path()).expect("check") {
            StoreCheck::Damaged {
                kind: DamageKind::Tables,
                detail,
            } => assert!(detail.contains("checksum"), "{detail}"),
            other => panic!("expected table damage, got {other:?}"),
        }
    }

    #[test]
    fn a_flipped_block_of_range_deleted_keys_is_table_damage() {
        let dir = tempfile::tempdir().expect("tempdir");
        filled(dir.path(), 200);
        let damaged = files(dir.path(), ".sst");
        {
            // The keys purged by a range deletion in a later table file (as a purged Raft
            // log): no live key is left in the first file, which compaction still reads.
            let db = Db::open(dir.path()).expect("open");
            let mut batch = rocksdb::WriteBatch::default();
            let cf = db.cf(ColumnFamily::Msgs).expect("cf");
            batch.delete_range_cf(&cf, 0u32.to_be_bytes(), 200u32.to_be_bytes());
            db.write(batch, true).expect("delete range");
            db.put_synced(&[(ColumnFamily::Msgs, &500u32.to_be_bytes(), b"live")])
                .expect("put");
            db.flush_state().expect("flush");
        }
        assert_eq!(damaged.len(), 1, "{damaged:?}");
        overwrite(&damaged[0], 100, &[0xA5; 16]);
        match check_store(dir.path()).expect("check") {
            StoreCheck::Damaged {
                kind: DamageKind::Tables,
                detail,
            } => assert!(detail.contains("checksum"), "{detail}"),
            other => panic!("expected table damage, got {other:?}"),
        }
    }

    #[test]
    fn a_damaged_block_read_by_a_running_node_is_noted() {
        let dir = tempfile::tempdir().expect("tempdir");
        filled(dir.path(), 200);
        let sst = files(dir.path(), ".sst");
        for t in &sst {
            overwrite(t, 100, &[0xA5; 16]);
        }
        crate::damage::forget();
        // The open reads the table files' metadata only; the damaged data block is read here.
        let db = Db::open(dir.path()).expect("open");
        let failed = (0..200u32).any(|i| db.get(ColumnFamily::Msgs, &i.to_be_bytes()).is_err());
        assert!(failed, "every value read back");
        let found = crate::damage::found().expect("damage noted");
        assert!(found.contains("checksum"), "{found}");
    }

    #[test]
    fn a_damaged_manifest_is_log_or_manifest_damage() {
        let dir = tempfile::tempdir().expect("tempdir");
        filled(dir.path(), 20);
        let manifest = files(dir.path(), "")
            .into_iter()
            .find(|p| {
                (p.file_name().and_then(|n| n.to_str())).is_some_and(|n| n.starts_with("MANIFEST-"))
            })
            .expect("a manifest");
        let len = std::fs::metadata(&manifest).expect("meta").len();
        overwrite(&manifest, len / 2, &[0x5A; 32]);
        match check_store(dir.path()).expect("check") {
            StoreCheck::Damaged {
                kind: DamageKind::LogOrManifest,
                ..
            } => {}
            other => panic!("expected manifest damage, got {other:?}"),
        }
    }
}
