//! The storage layer's error type.
//!
//! Invariant: a checksum or decode failure is always [`StorageError::Corrupt`]; it is never turned
//! into "not found" or default data. Callers treat it as fail-stop for the affected group.

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
    Rocks(#[source] rocksdb::Error),
    /// A stored key or record did not decode; the data is never returned as valid.
    #[error("corrupt record in column family {cf}: {detail}")]
    Corrupt {
        /// Column family holding the bad record.
        cf: &'static str,
        /// What was wrong with it.
        detail: String,
    },
    /// A message was stored at a sequence not above the stream's last sequence.
    #[error("stream {stream}: sequence {seq} is not above last sequence {last_seq}")]
    SeqNotIncreasing {
        /// The stream uid.
        stream: u64,
        /// The rejected sequence.
        seq: u64,
        /// The stream's last sequence.
        last_seq: u64,
    },
    /// A subject that the store cannot index (empty, or containing a NUL byte).
    #[error("invalid subject {subject:?}")]
    InvalidSubject {
        /// The rejected subject.
        subject: String,
    },
    /// A purge request combining options nats-server rejects (`seq` together with `keep`).
    #[error("invalid purge request: {detail}")]
    InvalidPurge {
        /// Why the request was rejected.
        detail: &'static str,
    },
    /// A stream's snapshot install was interrupted; its data must be fetched again.
    #[error("stream {stream}: interrupted snapshot install, data incomplete")]
    IncompleteInstall {
        /// The stream uid.
        stream: u64,
    },
    /// A snapshot chunk did not decode or arrived out of order.
    #[error("bad snapshot chunk: {detail}")]
    BadSnapshot {
        /// What was wrong.
        detail: String,
    },
    /// A group-commit write or WAL fsync failed; the writer is stopped for good (fail-stop).
    #[error("storage write failed: {detail}")]
    WriteFailed {
        /// The underlying error, rendered.
        detail: String,
    },
    /// The storage thread is gone (database shut down or a previous write failed).
    #[error("storage writer stopped")]
    WriterStopped,
    /// Filesystem I/O outside RocksDB (snapshot staging files).
    #[error("storage file i/o")]
    Io(#[from] std::io::Error),
}

impl StorageError {
    /// Shorthand for a [`StorageError::Corrupt`].
    pub(crate) fn corrupt(cf: &'static str, detail: impl Into<String>) -> Self {
        Self::Corrupt {
            cf,
            detail: detail.into(),
        }
    }
}

impl From<rocksdb::Error> for StorageError {
    fn from(e: rocksdb::Error) -> Self {
        if e.kind() == rocksdb::ErrorKind::Corruption {
            crate::damage::note(e.as_ref());
        }
        Self::Rocks(e)
    }
}

impl From<StorageError> for std::io::Error {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::Io(io) => io,
            other => std::io::Error::other(other),
        }
    }
}
