//! The storage layer's error type.

use std::path::PathBuf;

/// Everything that can go wrong in the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// RocksDB refused to open the database directory.
    #[error("open database at {path}")]
    Open {
        /// The directory that could not be opened.
        path: PathBuf,
        /// RocksDB's own error.
        #[source]
        source: rocksdb::Error,
    },
    /// A read or write failed inside RocksDB.
    #[error("rocksdb operation failed")]
    Rocks(#[from] rocksdb::Error),
    /// A stored key or record did not decode; the data is never returned as valid.
    #[error("corrupt record in column family {cf}: {detail}")]
    Corrupt {
        /// Column family holding the bad record.
        cf: &'static str,
        /// What was wrong with it.
        detail: String,
    },
}
