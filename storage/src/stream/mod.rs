//! The stream message store: what a JetStream stream needs from storage.
//!
//! A stream is identified by its [`StreamUid`] (assigned by the meta group), never its name, so a
//! deleted and re-created stream never sees old data. Two implementations share one trait and one
//! conformance suite: [`crate::mem::MemStreamStore`] (memory streams) and
//! [`crate::rocks::RocksStreamStore`] (file streams).
//!
//! Invariants every implementation keeps:
//! - Sequences only grow: `store_msg` requires `seq > last_seq`; `last_seq` and `last_ts` survive
//!   every removal and purge.
//! - `first_seq` is the lowest present sequence, or `last_seq + 1` when the stream is empty (after
//!   a purge); a brand-new stream reports `first_seq == last_seq == 0`.
//! - Interior gaps between `first_seq` and `last_seq` are "deleted" sequences.
//! - Limit decisions ([`limits`]) only read store state and the message, never the clock, so every
//!   replica applying the same commands makes the same decisions.
//!
//! Durability and replay: the RocksDB store writes each operation as one atomic, unsynced batch
//! (or, between [`StreamStore::begin_batch`] and [`StreamStore::put_metas`], stages appends and
//! writes them in one batch with the state machine's records); the fsynced Raft log is what it
//! is rebuilt from. A state machine that records its applied log
//! id separately (e.g. with [`crate::rocks::RocksStreamStore::put_meta`]) re-applies a few entries
//! after a crash, which is safe: `store_msg` of a sequence at or below `last_seq` fails with
//! [`StorageError::SeqNotIncreasing`] (treat as already applied), and removals, purges and the
//! limit helpers are idempotent because they only depend on the state they find.

#[cfg(test)]
pub(crate) mod conformance;
pub mod limits;
#[cfg(test)]
mod model_tests;

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::StorageError;

/// A stream's storage identity, assigned by the meta group and never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamUid(pub u64);

/// A blocking call that makes a store's writes so far durable (see
/// [`StreamStore::durability_barrier`]).
pub type DurabilityBarrier = Box<dyn FnOnce() -> Result<(), StorageError> + Send>;

/// One stored message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMsg {
    /// The stream sequence.
    pub seq: u64,
    /// The literal subject it was published to.
    pub subject: String,
    /// The raw header block (`NATS/1.0\r\n...`), empty when there are none.
    pub headers: Bytes,
    /// The payload.
    pub payload: Bytes,
    /// Server receive time, nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
}

/// Summary state of a stream, cheap to compute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamState {
    /// Messages present.
    pub msgs: u64,
    /// Sum of the stored sizes of present messages ([`StreamStore::msg_size`]).
    pub bytes: u64,
    /// Lowest present sequence, `last_seq + 1` when empty, 0 for a brand-new stream.
    pub first_seq: u64,
    /// Timestamp of the first present message, 0 when empty.
    pub first_ts: u64,
    /// Highest sequence ever stored (survives purges).
    pub last_seq: u64,
    /// Timestamp of the last stored message (survives purges).
    pub last_ts: u64,
    /// Distinct subjects present.
    pub num_subjects: u64,
}

impl StreamState {
    /// Interior gaps: sequences between first and last that are not present.
    pub fn num_deleted(&self) -> u64 {
        if self.msgs == 0 {
            0
        } else {
            (self.last_seq - self.first_seq + 1) - self.msgs
        }
    }
}

/// A purge request, mirroring nats-server's `PurgeEx(filter, seq, keep)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgeRequest {
    /// Only purge messages whose subject matches (wildcards allowed); `None` or `>` = all.
    pub filter: Option<String>,
    /// Purge only sequences strictly below this one.
    pub up_to_seq: Option<u64>,
    /// Keep the newest `keep` (matching) messages.
    pub keep: Option<u64>,
}

/// A point-in-time view of a stream's messages ([`StreamStore::view`]): later writes to the
/// store are not seen by it. Readable from any thread while the store goes on.
pub trait StreamView: Send + Sync {
    /// The messages present at the view with `seq >= start`, ascending, until they hold
    /// `max_bytes` of subject, headers and payload (the message that crosses it is included, so
    /// one is returned if there is one). Empty once no message is left.
    fn msgs_from(&self, start: u64, max_bytes: usize) -> Result<Vec<StoredMsg>, StorageError>;
}

/// A [`StreamView`] over a copy of the messages (ascending by seq).
#[derive(Debug)]
pub(crate) struct CopiedView(pub(crate) Vec<StoredMsg>);

impl StreamView for CopiedView {
    fn msgs_from(&self, start: u64, max_bytes: usize) -> Result<Vec<StoredMsg>, StorageError> {
        let from = self.0.partition_point(|m| m.seq < start);
        let mut bytes = 0usize;
        let mut out = Vec::new();
        for m in &self.0[from..] {
            if bytes >= max_bytes {
                break;
            }
            bytes += m.subject.len() + m.headers.len() + m.payload.len();
            out.push(m.clone());
        }
        Ok(out)
    }
}

/// The message store of one stream.
///
/// Not thread-safe by itself (`&mut self` for writes): one owner per stream, the stream's state
/// machine. Exactly one handle may exist per stream uid.
pub trait StreamStore: Send {
    /// The stream this store holds.
    fn uid(&self) -> StreamUid;

    /// The stored size of a message, the unit of `bytes` and `max_bytes`
    /// (spec/nats-protocol-and-jetstream.md §4.6).
    fn msg_size(&self, subject: &str, headers_len: usize, payload_len: usize) -> u64;

    /// Stores `msg`; `msg.seq` must be above `last_seq`. Skipped sequences become deleted gaps
    /// when the stream is not empty.
    fn store_msg(&mut self, msg: &StoredMsg) -> Result<(), StorageError>;

    /// Moves an empty stream's next sequence to `next_seq` (the `first_seq` config option or a
    /// compaction past the end): afterwards `first_seq == next_seq`, `last_seq == next_seq - 1`.
    fn skip_to(&mut self, next_seq: u64) -> Result<(), StorageError>;

    /// The message at `seq`, if present.
    fn get(&self, seq: u64) -> Result<Option<StoredMsg>, StorageError>;

    /// The newest message whose subject matches `filter` (literal or wildcard).
    fn last_for_subject(&self, filter: &str) -> Result<Option<StoredMsg>, StorageError>;

    /// The first message with `seq >= start` whose subject matches any of `filters`
    /// (empty = any subject).
    fn next_matching(
        &self,
        start: u64,
        filters: &[&str],
    ) -> Result<Option<StoredMsg>, StorageError>;

    /// The messages `next_matching` would return one after another from `start`, read in one
    /// pass: at most `max` of them, and no more once they hold `max_bytes` (the message that
    /// crosses it is included, so one message is always returned if there is one). Fewer than
    /// `max` does not mean the end of the stream was reached.
    fn next_matching_batch(
        &self,
        start: u64,
        filters: &[&str],
        max: usize,
        max_bytes: usize,
    ) -> Result<Vec<StoredMsg>, StorageError> {
        next_matching_each(self, start, filters, max, max_bytes)
    }

    /// Removes the message at `seq`; false if it was not present.
    fn remove(&mut self, seq: u64) -> Result<bool, StorageError>;

    /// A point-in-time view of the messages present now, for exporting them while the store
    /// goes on. The default copies them (the headers and payloads are shared, not copied): fine
    /// for memory streams; a durable store takes a snapshot of its storage instead.
    fn view(&self) -> Result<Box<dyn StreamView>, StorageError> {
        let mut msgs: Vec<StoredMsg> = Vec::new();
        loop {
            let start = msgs.last().map_or(0, |m| m.seq + 1);
            let batch = self.next_matching_batch(start, &[], usize::MAX, 1 << 20)?;
            if batch.is_empty() {
                return Ok(Box::new(CopiedView(msgs)));
            }
            msgs.extend(batch);
        }
    }

    /// Purges as nats-server's `PurgeEx` does; returns the number of messages removed.
    fn purge(&mut self, req: &PurgeRequest) -> Result<u64, StorageError>;

    /// Summary state.
    fn state(&self) -> StreamState;

    /// The deleted (interior gap) sequences, ascending.
    fn deleted(&self) -> Result<Vec<u64>, StorageError>;

    /// Message count per subject for subjects matching `filter` (`>` or empty = all).
    fn subject_counts(&self, filter: &str) -> Result<BTreeMap<String, u64>, StorageError>;

    /// Messages present on one literal subject.
    fn subject_count(&self, subject: &str) -> u64;

    /// The oldest present sequence on one literal subject.
    fn first_seq_for_subject(&self, subject: &str) -> Result<Option<u64>, StorageError>;

    /// Removes the oldest message on one literal subject; its sequence, if there was one.
    fn remove_first_for_subject(&mut self, subject: &str) -> Result<Option<u64>, StorageError> {
        match self.first_seq_for_subject(subject)? {
            Some(seq) => Ok(self.remove(seq)?.then_some(seq)),
            None => Ok(None),
        }
    }

    /// Removes every message for good because the stream left this node (not an applied
    /// command): unlike [`StreamStore::purge`], durable when it returns as far as the store can
    /// make it, and a file store gives the space back at once. Returns the number removed.
    fn drop_all(&mut self) -> Result<u64, StorageError> {
        self.purge(&PurgeRequest::default())
    }

    /// A blocking call that makes every write of this store so far durable, for stores whose
    /// writes skip the WAL (the Raft log is what makes applied state durable; see
    /// `jetraft_storage::db`). `None` when writes are durable by themselves or nothing is kept.
    fn durability_barrier(&self) -> Option<DurabilityBarrier> {
        None
    }

    /// Removes every message and forgets the sequences: afterwards the stream is brand-new
    /// (`first_seq == last_seq == 0`). Used to install a state machine snapshot whose
    /// sequences may lie below the current `last_seq`. Meta records are kept.
    fn reset(&mut self) -> Result<(), StorageError>;

    /// [`reset`](Self::reset) at the start of a restore that replaces the whole state (a
    /// snapshot install): a durable store first records, durably, that a restore is in
    /// progress ([`keys::META_RESTORE`](crate::keys::META_RESTORE)), so that a crash before
    /// the restore completed leaves a store that is refused rather than served half-restored.
    /// Defaults to `reset` (a store that keeps nothing across restarts).
    fn begin_restore(&mut self) -> Result<(), StorageError> {
        self.reset()
    }

    /// Completes a restore begun with [`begin_restore`](Self::begin_restore): the next
    /// [`put_metas`](Self::put_metas) with records (the caller's applied position) clears the
    /// marker in the same atomic write.
    fn end_restore(&mut self) {}

    /// Stores a small state-machine record (e.g. the applied log id) for this stream;
    /// `kind` must be at least [`crate::keys::META_USER_MIN`]. The RocksDB store keeps it in
    /// `sm_meta[uid|kind]`; the memory store keeps it in memory.
    fn put_meta(&mut self, kind: u8, body: &[u8]) -> Result<(), StorageError>;

    /// Reads a record written by [`StreamStore::put_meta`].
    fn get_meta(&self, kind: u8) -> Result<Option<Vec<u8>>, StorageError>;

    /// Starts (or continues) staging appends: until the next [`StreamStore::put_metas`], stored
    /// messages are visible to every read of this handle but written only by that call, in one
    /// batch with its records. Mutations other than `store_msg` first write what is staged.
    /// Stores that write nothing (memory) keep the default, which does nothing.
    fn begin_batch(&mut self) {}

    /// [`StreamStore::begin_batch`] for a bulk load off the async runtime (a snapshot install):
    /// before each write of what is staged, the store may block this thread until the
    /// database has flushed enough to take it without stopping every other writer.
    fn begin_bulk_batch(&mut self) {
        self.begin_batch();
    }

    /// Writes the staged appends and `records` (`(kind, body)` as for
    /// [`StreamStore::put_meta`]) atomically, and ends staging.
    fn put_metas(&mut self, records: &[(u8, &[u8])]) -> Result<(), StorageError> {
        for (kind, body) in records {
            self.put_meta(*kind, body)?;
        }
        Ok(())
    }
    /// Sets the tag that every following mutation records atomically with its effects (the
    /// stream state machine passes the Raft log index it is applying, so that after a crash it
    /// knows which entries already reached the store). The RocksDB store persists it in the
    /// mutation's write batch; the memory store (gone after a restart anyway) only keeps it.
    fn set_write_tag(&mut self, tag: u64);

    /// The tag that was current when the last mutation was written (0 if none was tagged).
    fn write_tag(&self) -> u64;
}

/// Rejects subjects the stores cannot index.
pub(crate) fn check_subject(subject: &str) -> Result<(), StorageError> {
    if subject.is_empty() || subject.as_bytes().contains(&0) {
        return Err(StorageError::InvalidSubject {
            subject: subject.to_string(),
        });
    }
    Ok(())
}

/// Validates a purge request the way nats-server does (`seq` and `keep` are exclusive).
pub(crate) fn check_purge(req: &PurgeRequest) -> Result<(), StorageError> {
    if req.up_to_seq.is_some() && req.keep.is_some() {
        return Err(StorageError::InvalidPurge {
            detail: "seq and keep are mutually exclusive",
        });
    }
    Ok(())
}

/// The filter of a purge request, `None` when it matches everything.
pub(crate) fn purge_filter(req: &PurgeRequest) -> Option<&str> {
    req.filter
        .as_deref()
        .filter(|f| !crate::subject::is_match_all(f))
}

/// What a [`PurgeRequest`] removes, resolved against the current state: present messages with
/// `seq < below` whose subject matches `filter`, oldest first, at most `max_remove` of them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PurgePlan<'a> {
    /// Subject filter, `None` = every subject.
    pub(crate) filter: Option<&'a str>,
    /// Exclusive upper bound on purged sequences.
    pub(crate) below: u64,
    /// Stop after this many removals (the `keep` option).
    pub(crate) max_remove: u64,
}

impl<'a> PurgePlan<'a> {
    /// Resolves `req`; `matching` is the number of present messages matching the filter.
    pub(crate) fn new(req: &'a PurgeRequest, matching: u64) -> Result<Self, StorageError> {
        check_purge(req)?;
        Ok(Self {
            filter: purge_filter(req),
            below: req.up_to_seq.unwrap_or(u64::MAX),
            max_remove: req.keep.map_or(u64::MAX, |k| matching.saturating_sub(k)),
        })
    }

    /// True if the plan removes every present message (the fast path).
    pub(crate) fn is_everything(&self, last_seq: u64) -> bool {
        self.filter.is_none() && self.max_remove == u64::MAX && self.below > last_seq
    }

    /// True if a message on `subject` is covered by the filter.
    pub(crate) fn matches(&self, subject: &str) -> bool {
        self.filter
            .is_none_or(|f| crate::subject::matches(f, subject))
    }

    /// After purging, an unfiltered `seq` purge past the end moves the next sequence to `seq`
    /// (nats-server's `Compact`). Returns that sequence when it applies.
    pub(crate) fn skip_target(&self, state: &StreamState) -> Option<u64> {
        (self.filter.is_none()
            && self.below != u64::MAX
            && state.msgs == 0
            && self.below > state.last_seq + 1)
            .then_some(self.below)
    }
}

/// [`StreamStore::next_matching_batch`] done with one `next_matching` call per message: the
/// trait's default, and what stores use where they have no faster scan (sparse filters).
pub fn next_matching_each<S: StreamStore + ?Sized>(
    store: &S,
    start: u64,
    filters: &[&str],
    max: usize,
    max_bytes: usize,
) -> Result<Vec<StoredMsg>, StorageError> {
    let mut out = Vec::new();
    let mut bytes = 0;
    let mut at = start;
    while out.len() < max && bytes < max_bytes {
        let Some(m) = store.next_matching(at, filters)? else {
            break;
        };
        at = m.seq.saturating_add(1);
        bytes += m.subject.len() + m.headers.len() + m.payload.len();
        out.push(m);
    }
    Ok(out)
}
