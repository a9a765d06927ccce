//! [`RocksStreamView`]: a point-in-time view of a file stream's messages, over a RocksDB
//! snapshot.
//!
//! A RocksDB snapshot borrows the database handle, so the view owns a thread that holds both
//! (a clone of the [`Db`] and the snapshot taken from it) and answers range reads sent over a
//! channel; the thread ends, releasing the snapshot (which pins old data from compaction), when
//! the view is dropped, and the drop waits for it: the thread's [`Db`] clone may be the last, and
//! a database closed on a detached thread could still be closing while the process exits (seen
//! as a crash in RocksDB's destructors at the end of a test run). Taking the view waits only
//! until the snapshot is taken. Messages staged
//! in the store and not yet written (sequences above every written one) are copied into the
//! view and follow the written ones.

use std::sync::mpsc;

use rocksdb::ReadOptions;

use crate::db::{ColumnFamily, Db};
use crate::rocks::stream_records::decode_msg;
use crate::stream::{StoredMsg, StreamUid, StreamView};
use crate::{StorageError, keys};

/// One range read: the messages from `start` on, up to `max_bytes`.
struct Read {
    start: u64,
    max_bytes: usize,
    reply: mpsc::SyncSender<Result<Vec<StoredMsg>, StorageError>>,
}

/// The view; see the module docs.
#[derive(Debug)]
pub(crate) struct RocksStreamView {
    /// `None` only while dropping: closing the channel ends the thread.
    reads: Option<mpsc::Sender<Read>>,
    /// The view's thread, joined on drop.
    thread: Option<std::thread::JoinHandle<()>>,
    /// Staged appends at the time of the view, ascending.
    staged: crate::stream::CopiedView,
    /// Held while the view lives: the store counts its live views by this token.
    _live: std::sync::Arc<()>,
}

impl Drop for RocksStreamView {
    fn drop(&mut self) {
        self.reads = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The view's thread is gone (it panicked).
fn ended() -> StorageError {
    StorageError::Io(std::io::Error::other("stream view thread ended"))
}

/// Bytes of a message counted against a read's budget.
fn budget_bytes(m: &StoredMsg) -> usize {
    m.subject.len() + m.headers.len() + m.payload.len()
}

impl RocksStreamView {
    /// Pins the written messages of `uid` now and keeps `staged` (appends not yet written).
    pub(crate) fn new(
        db: Db,
        uid: StreamUid,
        staged: Vec<StoredMsg>,
        live: std::sync::Arc<()>,
    ) -> Result<Self, StorageError> {
        let (reads, requests) = mpsc::channel::<Read>();
        let (ready_tx, ready) = mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("jetraft-stream-view".into())
            .spawn(move || {
                let pinned = db.raw().snapshot();
                let _ = ready_tx.send(());
                for read in requests {
                    let out = read_pinned(&db, &pinned, uid, read.start, read.max_bytes);
                    let _ = read.reply.send(out);
                }
            })?;
        ready.recv().map_err(|_| ended())?;
        Ok(Self {
            reads: Some(reads),
            thread: Some(thread),
            staged: crate::stream::CopiedView(staged),
            _live: live,
        })
    }
}

/// Reads written messages of `uid` from `start` on out of `pinned`, up to `max_bytes`.
fn read_pinned(
    db: &Db,
    pinned: &rocksdb::SnapshotWithThreadMode<'_, rocksdb::DB>,
    uid: StreamUid,
    start: u64,
    max_bytes: usize,
) -> Result<Vec<StoredMsg>, StorageError> {
    let cf = db.cf(ColumnFamily::Msgs)?;
    let mut ro = ReadOptions::default();
    ro.set_snapshot(pinned);
    ro.set_iterate_upper_bound(keys::id_range_end(uid.0));
    // A one-pass export: keep what it reads out of the block cache.
    ro.fill_cache(false);
    let mut it = db.raw().raw_iterator_cf_opt(&cf, ro);
    it.seek(keys::prefixed_u64(uid.0, start));
    let mut out = Vec::new();
    let mut bytes = 0usize;
    while bytes < max_bytes
        && let Some((k, v)) = it.item()
    {
        let m = decode_msg(k, v)?;
        bytes += budget_bytes(&m);
        out.push(m);
        it.next();
    }
    it.status()?;
    Ok(out)
}

impl StreamView for RocksStreamView {
    fn msgs_from(&self, start: u64, max_bytes: usize) -> Result<Vec<StoredMsg>, StorageError> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.reads
            .as_ref()
            .ok_or_else(ended)?
            .send(Read {
                start,
                max_bytes,
                reply,
            })
            .map_err(|_| ended())?;
        let written = answer.recv().map_err(|_| ended())??;
        if !written.is_empty() {
            return Ok(written);
        }
        self.staged.msgs_from(start, max_bytes)
    }
}
