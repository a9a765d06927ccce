//! The state machine's whole state as one `StreamSnapshot` protobuf: config, messages, dedup
//! entries and the bookkeeping that cannot be recomputed (`last_seq`/`last_ts` past the last
//! present message, the last msg id, the clock).
//!
//! Export is lazy ([`StreamStateMachine::lazy_snapshot`]): under the state machine's lock only
//! a point-in-time view of the store is taken and everything but the messages (small: config,
//! dedup window, consumers) is encoded. The messages are read from the view and encoded as the
//! snapshot is sent, after the head, as more occurrences of the repeated `msgs` field: protobuf
//! concatenation appends repeated fields, so the bytes decode to exactly the message a whole
//! export would give.
//!
//! Restore reads the payload twice, chunk by chunk ([`snapshot_fields`](super::snapshot_fields)):
//! the first pass decodes and checks everything before the store is touched, the second resets
//! the store and writes the messages back. A sequence above the last present message (messages
//! removed at the tail, or a purged or brand-new `first_seq` stream) is recreated by storing a
//! placeholder at `last_seq` with `last_ts` and removing it, which leaves exactly the original
//! state. The reset durably marks the store as being restored
//! ([`StreamStore::begin_restore`](jetraft_storage::stream::StreamStore::begin_restore)); the
//! marker is cleared in the write of the restored applied position. A failure part-way is an
//! error (the group stops), and a store still marked is refused at the next open and repaired
//! from the peers (a node-wide rebuild under a new id, `server::store_repair`).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use jetraft_proto::stream::{DedupEntry, SnapshotMsg, SourcePosition, StreamSnapshot};
use jetraft_raft::{SnapshotChunks, SnapshotData, SnapshotSource, StateMachineError};
use jetraft_storage::mem::MemStreamStore;
use jetraft_storage::stream::{StoredMsg, StreamView};
use prost::Message;

use super::dedup::DedupIndex;
use super::snapshot_fields::Fields;
use super::{StreamStateMachine, io_err, limits_for};
use crate::jetstream::api::types::{StreamConfig, requests, to_go_json};

/// Subject of the transient placeholder used to restore `last_seq`.
const PLACEHOLDER_SUBJECT: &str = "_jetraft.snapshot.placeholder";

/// Field number of `StreamSnapshot.msgs`.
const MSGS_FIELD: u32 = 5;

/// Restores of at least this many bytes are logged (with how long each pass took).
const LOGGED_RESTORE_BYTES: u64 = 64 << 20;

/// Message bytes read from the view per snapshot chunk.
const CHUNK_MSG_BYTES: usize = 1 << 20;

/// A stream snapshot being read: the encoded head and the view of the messages.
struct LazyStreamSnapshot {
    /// `StreamSnapshot` without its messages, encoded.
    head: Bytes,
    /// The messages as of the snapshot.
    view: Box<dyn StreamView>,
    /// The stream's message bytes at the view (a size hint).
    msg_bytes: u64,
}

impl SnapshotSource for LazyStreamSnapshot {
    fn chunks(self: Arc<Self>) -> SnapshotChunks {
        let head = std::iter::once(Ok(self.head.clone()));
        let mut next_seq = 0;
        let msgs = std::iter::from_fn(move || {
            let batch = match self.view.msgs_from(next_seq, CHUNK_MSG_BYTES) {
                Ok(b) => b,
                Err(e) => return Some(Err(io_err(e))),
            };
            next_seq = batch.last()?.seq + 1;
            Some(Ok(encode_msgs(batch)))
        });
        Box::new(head.chain(msgs))
    }

    fn size_hint(&self) -> u64 {
        self.head.len() as u64 + self.msg_bytes
    }
}

/// `msgs` as occurrences of `StreamSnapshot.msgs`.
fn encode_msgs(msgs: Vec<StoredMsg>) -> Bytes {
    let msgs: Vec<SnapshotMsg> = msgs
        .into_iter()
        .map(|m| SnapshotMsg {
            seq: m.seq,
            subject: m.subject,
            headers: m.headers,
            payload: m.payload,
            timestamp_ns: m.timestamp_ns,
        })
        .collect();
    let len: usize = msgs
        .iter()
        .map(|m| prost::encoding::message::encoded_len(MSGS_FIELD, m))
        .sum();
    let mut out = BytesMut::with_capacity(len);
    for m in &msgs {
        prost::encoding::message::encode(MSGS_FIELD, m, &mut out);
    }
    out.freeze()
}

/// What a stand-in ([`StreamStateMachine::stand_in`]) notes while it stands in.
#[derive(Debug, Default)]
pub(super) struct StandIn {
    /// Its messages were dropped (the replica was removed): the restored state must go too.
    pub(super) dropped: bool,
}

impl StreamStateMachine {
    /// An empty stand-in for this state machine, to serve readers while a snapshot is restored
    /// into this one without its lock held (a large restore writes for seconds, and a reader
    /// blocked on the lock blocks a runtime worker): the same config, consumers, ends, dedup
    /// window and positions, on memory stores, without messages. Nothing is applied to it; it
    /// never answers direct gets ([`Self::is_stand_in`]).
    pub fn stand_in(&self) -> Result<StreamStateMachine, StateMachineError> {
        let store = Box::new(MemStreamStore::new(self.store.uid()));
        let mut sm = Self::open(
            store,
            self.config.clone(),
            self.created_ns,
            self.server.clone(),
        )?;
        sm.import(Bytes::from(self.export_head().encode_to_vec()))?;
        sm.stand_in = Some(StandIn::default());
        // Readers that compare these counters see a change going in and coming back.
        sm.meta_version = self.meta_version + 1;
        sm.removals = self.removals + 1;
        Ok(sm)
    }

    /// Whether this is a stand-in ([`Self::stand_in`]).
    pub fn is_stand_in(&self) -> bool {
        self.stand_in.is_some()
    }

    /// Takes `stand_in`'s place again after a restore: the counters move past its counters, and
    /// if the replica was removed meanwhile (the stand-in's messages were dropped), the restored
    /// messages are dropped too.
    pub fn replace_stand_in(
        &mut self,
        stand_in: &StreamStateMachine,
    ) -> Result<(), StateMachineError> {
        self.meta_version = self.meta_version.max(stand_in.meta_version) + 1;
        self.removals = self.removals.max(stand_in.removals) + 1;
        if stand_in.stand_in.as_ref().is_some_and(|s| s.dropped) {
            self.purge_all().map_err(io_err)?;
        }
        Ok(())
    }

    /// A lazy snapshot of the whole state as of now (see the module docs): cheap to take, read
    /// as it is sent.
    pub(super) fn lazy_snapshot(&self) -> Result<SnapshotData, StateMachineError> {
        let view = self.store.view().map_err(io_err)?;
        let head = Bytes::from(self.export_head().encode_to_vec());
        Ok(SnapshotData::Lazy(Arc::new(LazyStreamSnapshot {
            head,
            view,
            msg_bytes: self.store.state().bytes,
        })))
    }

    /// Everything [`Self::import`] takes except the messages.
    fn export_head(&self) -> StreamSnapshot {
        let st = self.store.state();
        StreamSnapshot {
            config_json: Bytes::from(to_go_json(&self.config)),
            created_ns: self.created_ns,
            last_seq: st.last_seq,
            last_ts: st.last_ts,
            first_seq: st.first_seq,
            msgs: Vec::new(),
            dedup: self
                .dedup
                .entries()
                .into_iter()
                .map(|(msg_id, seq, timestamp_ns)| DedupEntry {
                    msg_id,
                    seq,
                    timestamp_ns,
                })
                .collect(),
            clock_ns: self.clock_ns,
            last_msg_id: self.last_msg_id.clone(),
            consumers: self.export_consumers(),
            source_positions: self
                .source_positions
                .iter()
                .map(|(key, seq)| SourcePosition {
                    key: key.clone(),
                    origin_seq: *seq,
                })
                .collect(),
        }
    }

    /// Replaces the whole state with `bytes` from [`Self::lazy_snapshot`].
    pub(super) fn import(&mut self, bytes: Bytes) -> Result<(), StateMachineError> {
        self.import_data(&SnapshotData::from(bytes))
    }

    /// Replaces the whole state with `data` from [`Self::lazy_snapshot`], in two passes over
    /// its chunks: the first decodes and checks everything and keeps all but the messages (the
    /// head); only then is the store reset, and the second writes the messages as it reads
    /// them. Memory stays at about a chunk and a staged batch whatever the snapshot's size;
    /// messages read from in-memory bytes stay slices of them until written.
    pub(super) fn import_data(&mut self, data: &SnapshotData) -> Result<(), StateMachineError> {
        let started = std::time::Instant::now();
        let (snap, config, top) = check_snapshot(data)?;
        let checked = started.elapsed();
        // Marked durably first: a crash from here until the restored position is saved leaves
        // a store that is refused at open (and repaired from the peers), not a mix of states.
        self.store.begin_restore().map_err(io_err)?;
        self.restored = true;
        self.recover_until = None;
        // Staged, the messages are written in large batches rather than one write each, each
        // batch after the memtables have room (the restore runs off the async runtime).
        self.store.begin_bulk_batch();
        let mut written = 0;
        for field in Fields::new(data.chunks()) {
            let field = field?;
            if field.number != MSGS_FIELD {
                continue;
            }
            let m = decode_msg(field.value)?;
            // A second pass that reads differently from the first (the payload changed under
            // the restore) must not be half trusted.
            if m.seq <= written || m.seq > top {
                return Err(corrupt("messages differ between passes".to_string()));
            }
            written = m.seq;
            self.store
                .store_msg(&StoredMsg {
                    seq: m.seq,
                    subject: m.subject,
                    headers: m.headers,
                    payload: m.payload,
                    timestamp_ns: m.timestamp_ns,
                })
                .map_err(io_err)?;
        }
        if written != top {
            return Err(corrupt("messages differ between passes".to_string()));
        }
        self.store.put_metas(&[]).map_err(io_err)?;
        if snap.last_seq > top {
            self.store
                .store_msg(&StoredMsg {
                    seq: snap.last_seq,
                    subject: PLACEHOLDER_SUBJECT.to_string(),
                    headers: Bytes::new(),
                    payload: Bytes::new(),
                    timestamp_ns: snap.last_ts,
                })
                .map_err(io_err)?;
            self.store.remove(snap.last_seq).map_err(io_err)?;
        }
        if top == 0 && snap.first_seq > 0 {
            // An emptied stream (e.g. purged) keeps its next position.
            self.store.skip_to(snap.first_seq).map_err(io_err)?;
        }
        let mut dedup = DedupIndex::default();
        for e in &snap.dedup {
            dedup.insert(&e.msg_id, e.seq, e.timestamp_ns);
        }
        self.limits = limits_for(&config);
        self.config = config;
        self.created_ns = snap.created_ns;
        self.clock_ns = snap.clock_ns;
        self.dedup = dedup;
        self.last_msg_id = snap.last_msg_id;
        self.source_positions = snap
            .source_positions
            .iter()
            .map(|p| (p.key.clone(), p.origin_seq))
            .collect();
        self.import_consumers(&snap.consumers)
            .map_err(|e| corrupt(format!("consumers: {e}")))?;
        self.rebuild_ttls().map_err(io_err)?;
        self.rebuild_schedules().map_err(io_err)?;
        self.save_meta().map_err(io_err)?;
        self.persist_consumers().map_err(io_err)?;
        let bytes = data.size_hint();
        if bytes >= LOGGED_RESTORE_BYTES {
            tracing::info!(
                stream = %self.config.name,
                bytes,
                msgs = self.store.state().msgs,
                checked_ms = checked.as_millis() as u64,
                total_ms = started.elapsed().as_millis() as u64,
                "stream snapshot restored"
            );
        }
        Ok(())
    }
}

/// The first pass of [`StreamStateMachine::import_data`]: the snapshot without its messages,
/// its config, and its highest message sequence, once every field decoded and the messages'
/// sequences were found ascending, non-zero and within `last_seq`.
fn check_snapshot(
    data: &SnapshotData,
) -> Result<(StreamSnapshot, StreamConfig, u64), StateMachineError> {
    let mut head = BytesMut::new();
    let mut top = 0;
    for field in Fields::new(data.chunks()) {
        let field = field?;
        if field.number == MSGS_FIELD {
            let seq = decode_msg(field.value)?.seq;
            if seq <= top {
                return Err(corrupt("message sequences out of order".to_string()));
            }
            top = seq;
        } else {
            head.extend_from_slice(&field.raw);
        }
    }
    let snap = StreamSnapshot::decode(head.freeze()).map_err(|e| corrupt(e.to_string()))?;
    if top > snap.last_seq {
        return Err(corrupt("message sequences out of order".to_string()));
    }
    let config: StreamConfig = requests::decode_stored(&snap.config_json)
        .map_err(|e| corrupt(format!("config: {}", e.description)))?;
    Ok((snap, config, top))
}

fn decode_msg(value: Bytes) -> Result<SnapshotMsg, StateMachineError> {
    SnapshotMsg::decode(value).map_err(|e| corrupt(format!("message: {e}")))
}

fn corrupt(reason: String) -> StateMachineError {
    StateMachineError::CorruptSnapshot { reason }
}
