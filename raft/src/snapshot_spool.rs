//! Receiving a large snapshot onto disk instead of into memory.
//!
//! A replica that receives a snapshot used to hold all of it in memory until it was installed:
//! a 2 GB stream cost 2 GB of RSS on the receiver (more while the install decoded it), and a
//! stream larger than the receive limit could never catch up. A [`Spool`] writes the received
//! bytes to an anonymous file in a directory on the node's data volume, in batches of
//! [`SnapshotSpool::batch`] bytes off the async runtime; the finished spool is a lazy
//! [`SnapshotData`] read back in chunks of [`READ_CHUNK`] bytes, so receiving and installing
//! hold a few chunks in memory whatever the snapshot's size.
//!
//! The file has no name (`O_TMPFILE` or created and unlinked at once): it goes when the last
//! handle does, and a crash leaves nothing behind. It is never fsynced: a receiver that
//! crashes is sent the snapshot again.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};

use crate::sm::StateMachineError;
use crate::snapshot_data::{SnapshotChunks, SnapshotData, SnapshotSource};

/// Default bytes a receiver buffers before writing them to its spool file; a snapshot no larger
/// stays in memory.
pub const SPOOL_BATCH: usize = 8 << 20;

/// Bytes read back from a spool file per chunk.
pub const READ_CHUNK: usize = 1 << 20;

/// Where and how a node spools the snapshots it receives.
#[derive(Debug, Clone)]
pub struct SnapshotSpool {
    /// Directory of the spool files (on the data volume: `/tmp` may be small in a container).
    pub dir: PathBuf,
    /// Bytes buffered in memory before a write to the file.
    pub batch: usize,
    /// Bytes written to spool files so far (shared by clones).
    spooled: Arc<AtomicU64>,
}

impl SnapshotSpool {
    /// Spools into `dir` in batches of [`SPOOL_BATCH`] bytes.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            batch: SPOOL_BATCH,
            spooled: Arc::default(),
        }
    }

    /// Bytes written to spool files so far.
    pub fn spooled_bytes(&self) -> u64 {
        self.spooled.load(Ordering::Relaxed)
    }

    /// A new empty spool file.
    pub async fn create(&self) -> io::Result<Spool> {
        let dir = self.dir.clone();
        let file = tokio::task::spawn_blocking(move || tempfile::tempfile_in(dir))
            .await
            .map_err(io::Error::other)??;
        Ok(Spool {
            file: Arc::new(file),
            len: 0,
            spooled: self.spooled.clone(),
        })
    }

    /// The same spool with batches of `batch` bytes (at least one).
    pub fn with_batch(mut self, batch: usize) -> Self {
        self.batch = batch.max(1);
        self
    }
}

/// One snapshot being written to an anonymous file.
#[derive(Debug)]
pub struct Spool {
    file: Arc<File>,
    len: u64,
    spooled: Arc<AtomicU64>,
}

impl Spool {
    /// Appends `bytes` (written on a blocking thread).
    pub async fn append(&mut self, bytes: Bytes) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let file = self.file.clone();
        let at = self.len;
        let n = bytes.len() as u64;
        tokio::task::spawn_blocking(move || file.write_all_at(&bytes, at))
            .await
            .map_err(io::Error::other)??;
        self.len += n;
        self.spooled.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The spooled bytes as a snapshot payload, read back chunk by chunk.
    pub fn into_data(self) -> SnapshotData {
        SnapshotData::Lazy(Arc::new(SpooledSnapshot {
            file: self.file,
            len: self.len,
        }))
    }
}

/// A finished spool file: every pass reads it from the start.
struct SpooledSnapshot {
    file: Arc<File>,
    len: u64,
}

impl SnapshotSource for SpooledSnapshot {
    fn chunks(self: Arc<Self>) -> SnapshotChunks {
        let mut at = 0u64;
        Box::new(std::iter::from_fn(move || {
            if at >= self.len {
                return None;
            }
            let n = usize::try_from((self.len - at).min(READ_CHUNK as u64)).unwrap_or(READ_CHUNK);
            let mut buf = BytesMut::zeroed(n);
            match self.file.read_exact_at(&mut buf, at) {
                Ok(()) => {
                    at += n as u64;
                    Some(Ok(buf.freeze()))
                }
                Err(e) => {
                    at = self.len;
                    Some(Err(StateMachineError::Storage(e)))
                }
            }
        }))
    }

    fn size_hint(&self) -> u64 {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn spooled_bytes_read_back_the_same_in_bounded_chunks_on_every_pass() {
        let dir = tempfile::tempdir().unwrap();
        let spooler = SnapshotSpool::new(dir.path());
        let mut spool = spooler.create().await.unwrap();
        let data: Vec<u8> = (0..READ_CHUNK * 2 + 17).map(|i| (i % 251) as u8).collect();
        spool
            .append(Bytes::copy_from_slice(&data[..5]))
            .await
            .unwrap();
        spool.append(Bytes::new()).await.unwrap();
        spool
            .append(Bytes::copy_from_slice(&data[5..]))
            .await
            .unwrap();
        assert_eq!(spool.len(), data.len() as u64);
        assert_eq!(spooler.spooled_bytes(), data.len() as u64);
        let snap = spool.into_data();
        assert_eq!(snap.size_hint(), data.len() as u64);
        for _ in 0..2 {
            let chunks: Vec<Bytes> = snap.chunks().map(Result::unwrap).collect();
            assert!(chunks.iter().all(|c| c.len() <= READ_CHUNK));
            assert_eq!(chunks.len(), 3);
            assert_eq!(chunks.concat(), data);
        }
        // The file has no name: the spool directory stays empty.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn an_empty_spool_is_an_empty_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let spool = SnapshotSpool::new(dir.path()).create().await.unwrap();
        assert!(spool.is_empty());
        assert_eq!(spool.into_data().chunks().count(), 0);
    }
}
