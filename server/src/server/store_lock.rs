//! One server per store dir: [`StoreLock::acquire`] takes an exclusive `flock` on
//! `<store_dir>/jetraft.lock` before anything listens, and the lock lives as long as the
//! server (the kernel drops it when the process exits, however it exits).
//!
//! nats-server lets a second server start on the same store dir; jetraft cannot: the node's
//! one RocksDB admits a single process, and two Raft nodes sharing one log would corrupt it.
//! So the second server stops at once with a message that names the dir and the process
//! holding it, instead of failing later inside RocksDB's own lock.

use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};

/// File name of the lock inside the store dir.
pub(super) const LOCK_FILE: &str = "jetraft.lock";

/// The held lock; dropping it (or the process ending) releases it.
#[derive(Debug)]
pub(super) struct StoreLock {
    /// The locked file, kept open: closing it would release the lock.
    _file: File,
}

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum StoreLockError {
    /// Another process holds the lock.
    #[error(
        "store dir {} is in use by another server{}: give each server its own store dir (-sd, jetstream {{ store_dir }})",
        dir.display(),
        holder.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    InUse {
        /// The store dir.
        dir: PathBuf,
        /// The pid the holder wrote into the lock file, when readable.
        holder: Option<u32>,
    },
    /// The lock file could not be opened or written.
    #[error("lock file {}", path.display())]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl StoreLock {
    /// Takes the lock of `store_dir` (which must exist) without waiting, and writes this
    /// process's pid into it for the message a second server prints.
    pub(super) fn acquire(store_dir: &Path) -> Result<StoreLock, StoreLockError> {
        let path = store_dir.join(LOCK_FILE);
        let io = |source| StoreLockError::Io {
            path: path.clone(),
            source,
        };
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(StoreLockError::InUse {
                    dir: store_dir.to_path_buf(),
                    holder: text.trim().parse().ok(),
                });
            }
            Err(e) => return Err(io(e.into())),
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(StoreLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_dir_names_the_holder_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = StoreLock::acquire(dir.path()).unwrap();
        let err = StoreLock::acquire(dir.path()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&format!("(pid {})", std::process::id())),
            "{text}"
        );
        assert!(text.contains("is in use by another server"), "{text}");
        drop(first);
        StoreLock::acquire(dir.path()).expect("free again once dropped");
    }
}
