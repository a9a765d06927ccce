//! The stream state machine: one per stream Raft group, applying committed
//! [`jetraft_proto::stream::StreamCommand`]s to a [`StreamStore`] deterministically.
//!
//! Invariants:
//! - `apply` reads no clock: time comes inside the command (`Append.timestamp_ns`,
//!   `Expire.now_ns`), and the dedup window's "now" is the newest such time seen ([`clock_ns`]).
//! - Every publish check (sealed, expected headers, dedup, rollup, size, limits) runs at apply
//!   time on the committed order, so two racing publishers with the same expected sequence get
//!   one success and one `10071`, identically on every replica.
//! - Client-visible refusals are answers (PubAck/API error JSON), never apply errors; an apply
//!   error means storage failed or a command is undecodable, and stops the group (fail-stop).
//! - Answers are the exact JSON bytes the API dispatcher sends (PubAck for appends,
//!   `stream_purge_response`, `stream_msg_delete_response`, `stream_update_response`); an
//!   `Expire` answers with an empty body. `no_ack` streams still produce the PubAck: the caller
//!   decides not to send it.
//!
//! Durability: the stream's messages live in the store; the stored config, the last `Nats-Msg-Id`
//! and the applied log id are kept with [`StreamStore::put_metas`]. Each apply stages its appends
//! ([`StreamStore::begin_batch`]) and [`ReplicatedStateMachine::save_applied`], at the end of
//! openraft's apply batch, writes them in one RocksDB batch with the meta record and the applied
//! log id: after a crash the store holds all of a batch's appends and its applied id, or none of
//! them, and the batch is applied again from the Raft log. Commands that remove messages (limits
//! with discard old, rollups, purges, deletes, interest retention, updates) write the staged
//! appends before removing, without the applied id; a crash between that write and the end of
//! the batch re-applies the batch's earlier entries (the remaining gap, idempotent only for
//! messages with `Nats-Msg-Id`).
//!
//! Cost: the encoded config is cached (`config_json`) and the meta record is
//! assembled around it, so a batch of appends costs one store write, not one per message plus
//! a JSON encoding of the whole config.
//!
//! The store's writes skip RocksDB's WAL (the Raft log holds every entry durably): they become
//! durable with the next atomic flush of the database, and the state after a crash is the
//! result of a prefix of them, exactly as a WAL replay would give. [`Self::durability_barrier`]
//! forces that flush; the Raft adapter passes it before letting its log be purged.
//!
//! Crash recovery ([`recovery`]): every store mutation also records the index of the entry that
//! made it (the store's write tag), so a replica restarted after a crash that left the store ahead
//! of the applied id skips the entries already in the store when they are applied again.
//! Consumer commands are always applied again (their state is saved with the applied id).
//!
//! [`clock_ns`]: StreamStateMachine::clock_ns

mod append;
mod atomic;
pub mod command;
pub mod consumers;
#[cfg(test)]
mod copy_tests;
mod counter;
pub mod dedup;
pub mod direct;
#[cfg(test)]
mod durability_tests;
pub mod headers;
pub mod info;
mod ops;
#[cfg(test)]
mod prop_tests;
#[cfg(test)]
mod raft_tests;
mod recovery;
pub mod republish;
mod restore;
mod schedule;
pub use restore::RESTORED;
mod snapshot;
mod snapshot_fields;
#[cfg(test)]
pub(crate) mod test_consumers;
pub mod ttl;

use bytes::Bytes;
use jetraft_proto::stream::{StreamCommand, stream_command::Cmd};
use jetraft_raft::{
    AppliedState, DurabilityBarrier, LogIndex, ReplicatedStateMachine, SnapshotData,
    StateMachineError,
};
use jetraft_storage::StorageError;
use jetraft_storage::consumer::ConsumerStore;
use jetraft_storage::keys::META_USER_MIN;
use jetraft_storage::stream::limits::{self, StreamLimits};
use jetraft_storage::stream::{StreamState, StreamStore};
use prost::Message;

use crate::jetstream::api::types::{DiscardPolicy, StreamConfig};
use dedup::DedupIndex;

/// `put_meta` kind of the applied log id and membership (JSON).
const META_APPLIED: u8 = META_USER_MIN;
/// `put_meta` kind of the stored config, creation time, clock and last msg id (JSON).
const META_CONFIG: u8 = META_USER_MIN + 1;
/// `put_meta` kind of every consumer's config in one JSON list, as stores written before the
/// per-consumer config records hold them (read once and moved; see `load_consumers`).
const META_CONSUMERS: u8 = META_USER_MIN + 2;

/// What the server reports about itself in responses (`_nats.ver`, `_nats.level`, the leader's
/// name). Not replicated state: every replica runs the same binary and only the leader answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerIdentity {
    /// Version string for `_nats.ver`.
    pub version: String,
    /// API level for `_nats.level`.
    pub api_level: u32,
    /// JetStream domain, named in PubAcks when configured.
    pub domain: Option<String>,
}

/// The replicated state of one stream.
pub struct StreamStateMachine {
    /// The stream's messages (`Sync` because replicated state machines are shared).
    store: Box<dyn StreamStore + Sync>,
    /// The stored (normalised) config.
    config: StreamConfig,
    /// `config` as storage limits, cached.
    limits: StreamLimits,
    /// Creation time, Unix ns (from the meta group's create command).
    created_ns: u64,
    /// Newest command time applied: the dedup window's "now".
    clock_ns: u64,
    /// Recently seen `Nats-Msg-Id`s.
    dedup: DedupIndex,
    /// `Nats-Msg-Id` of the last stored message, "" when it had none.
    last_msg_id: String,
    /// Consumers attached (interest retention drops messages while there are none).
    consumer_count: u64,
    /// The consumers, by name.
    consumers: std::collections::BTreeMap<String, consumers::ConsumerRecord>,
    /// Durable consumer states.
    consumer_store: Box<dyn ConsumerStore + Sync>,
    /// Consumers whose state changed since the last `save_applied`.
    dirty_consumers: std::collections::BTreeSet<String>,
    /// Consumers deleted since the last `save_applied`.
    deleted_consumers: std::collections::BTreeSet<String>,
    /// Consumers created or reconfigured since the last `save_applied` (their config records
    /// are written then, one per consumer).
    configs_changed: std::collections::BTreeSet<String>,
    /// Bumped whenever messages are removed other than by consumer acks (so consumers know
    /// when `num_pending` must be recounted rather than updated).
    removals: u64,
    /// Response decoration.
    server: ServerIdentity,
    /// `config` as JSON, encoded once per config change for the meta record; `None` = stale.
    config_json: Option<String>,
    /// Bumped whenever the meta record is written (a config change among others), so the
    /// replica's owner task can tell that it must look at the config again.
    meta_version: u64,
    /// Log index of the last entry whose effects reached the store before a crash, while
    /// entries up to it are being applied again (see `recovery`).
    recover_until: Option<u64>,
    /// Per-message TTL index and `max_age` scan position (derived from the store).
    expiry: ttl::Expiry,
    /// Origin sequence last copied, per source key (sourcing streams; see `append`). Replicated
    /// state: the sourcing task of a new leader resumes after it.
    source_positions: std::collections::BTreeMap<String, u64>,
    /// Pending message schedules (derived from the store; see `schedule`).
    schedules: schedule::ScheduleIndex,
    /// Where this replica republishes the messages it stores as the proposer (`republish`).
    republish_sink: Option<republish::RepublishSink>,
    /// Set on a stand-in ([`Self::stand_in`]) only.
    stand_in: Option<snapshot::StandIn>,
    /// A restore replaced the state and its marker is cleared with the next applied position
    /// ([`StreamStore::end_restore`]).
    restored: bool,
}

impl std::fmt::Debug for StreamStateMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamStateMachine")
            .field("stream", &self.config.name)
            .field("state", &self.store.state())
            .field("clock_ns", &self.clock_ns)
            .finish_non_exhaustive()
    }
}

/// The durable part of the state machine besides messages (META_CONFIG record).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct StoredMeta {
    config: StreamConfig,
    created_ns: u64,
    clock_ns: u64,
    last_msg_id: String,
    /// Added with sources; absent in records written before.
    #[serde(default)]
    source_positions: std::collections::BTreeMap<String, u64>,
}

/// Storage limits for a config (`-1`/`0` mean unlimited).
pub fn limits_for(cfg: &StreamConfig) -> StreamLimits {
    let positive = |v: i64| u64::try_from(v).ok().filter(|v| *v > 0);
    StreamLimits {
        max_msgs: positive(cfg.max_msgs),
        max_bytes: positive(cfg.max_bytes),
        max_age_ns: positive(cfg.max_age),
        max_msgs_per_subject: positive(cfg.max_msgs_per_subject),
        max_msg_size: positive(i64::from(cfg.max_msg_size)),
        discard: match cfg.discard {
            DiscardPolicy::Old => limits::DiscardPolicy::Old,
            DiscardPolicy::New => limits::DiscardPolicy::New,
        },
        discard_new_per_subject: cfg.discard_new_per_subject,
    }
}

fn storage_err(index: LogIndex) -> impl Fn(StorageError) -> StateMachineError {
    move |e| StateMachineError::Apply {
        index,
        reason: e.to_string(),
    }
}

fn io_err(e: StorageError) -> StateMachineError {
    StateMachineError::Storage(std::io::Error::other(e))
}

impl StreamStateMachine {
    /// Counts a removal when an entry left fewer messages than sequences it added (limits,
    /// purge, delete, expiry). Consumer commands only remove what every consumer is past.
    fn count_removals(&mut self, before: &StreamState, consumer_cmd: bool) {
        if consumer_cmd {
            return;
        }
        let after = self.store.state();
        let added = i128::from(after.last_seq) - i128::from(before.last_seq);
        let grew = i128::from(after.msgs) - i128::from(before.msgs);
        if grew < added {
            self.removals += 1;
        }
    }

    /// Opens the state machine of a stream over its store.
    ///
    /// A store that already holds a config record (a restart) resumes from it and rebuilds the
    /// dedup index from stored `Nats-Msg-Id` headers within the window; otherwise the stream
    /// is new: `config` and `created_ns` (from the meta group) are recorded and `first_seq` is
    /// applied.
    ///
    /// Consumer states are kept in memory only; nodes use [`Self::open_with`].
    pub fn open(
        store: Box<dyn StreamStore + Sync>,
        config: StreamConfig,
        created_ns: u64,
        server: ServerIdentity,
    ) -> Result<Self, StateMachineError> {
        let consumers = Box::new(jetraft_storage::mem::MemConsumerStore::new());
        Self::open_with(store, consumers, config, created_ns, server)
    }

    /// [`Self::open`] with the store that keeps consumer states (the node's RocksDB for file
    /// streams).
    pub fn open_with(
        mut store: Box<dyn StreamStore + Sync>,
        consumer_store: Box<dyn ConsumerStore + Sync>,
        config: StreamConfig,
        created_ns: u64,
        server: ServerIdentity,
    ) -> Result<Self, StateMachineError> {
        let stored = match store.get_meta(META_CONFIG).map_err(io_err)? {
            Some(bytes) => Some(serde_json::from_slice::<StoredMeta>(&bytes).map_err(|e| {
                StateMachineError::CorruptSnapshot {
                    reason: format!("stream meta record: {e}"),
                }
            })?),
            None => None,
        };
        let fresh = stored.is_none();
        let meta = stored.unwrap_or(StoredMeta {
            config,
            created_ns,
            clock_ns: 0,
            last_msg_id: String::new(),
            source_positions: std::collections::BTreeMap::new(),
        });
        if fresh && meta.config.first_seq > 1 && store.state().last_seq == 0 {
            store.skip_to(meta.config.first_seq).map_err(io_err)?;
        }
        let mut sm = Self {
            limits: limits_for(&meta.config),
            store,
            config: meta.config,
            created_ns: meta.created_ns,
            clock_ns: meta.clock_ns,
            dedup: DedupIndex::default(),
            last_msg_id: meta.last_msg_id,
            consumer_count: 0,
            consumers: std::collections::BTreeMap::new(),
            consumer_store,
            dirty_consumers: std::collections::BTreeSet::new(),
            deleted_consumers: std::collections::BTreeSet::new(),
            configs_changed: std::collections::BTreeSet::new(),
            removals: 0,
            server,
            config_json: None,
            meta_version: 0,
            recover_until: None,
            expiry: ttl::Expiry::default(),
            source_positions: meta.source_positions,
            schedules: schedule::ScheduleIndex::new(),
            republish_sink: None,
            stand_in: None,
            restored: false,
        };
        if fresh {
            sm.save_meta().map_err(io_err)?;
        } else {
            sm.rebuild_dedup().map_err(io_err)?;
            sm.rebuild_ttls().map_err(io_err)?;
            sm.rebuild_schedules().map_err(io_err)?;
            sm.load_consumers().map_err(io_err)?;
            sm.recover_until = sm.recovery_point()?;
            if sm.recover_until.is_some() {
                sm.recover_last_msg_id()?;
            }
        }
        Ok(sm)
    }

    /// Deletes every message (the stream was removed from this node).
    pub fn purge_all(&mut self) -> Result<u64, StorageError> {
        if let Some(s) = &mut self.stand_in {
            s.dropped = true;
        }
        self.store.drop_all()
    }

    /// The stored config.
    pub fn config(&self) -> &StreamConfig {
        &self.config
    }

    /// Sets where the messages this replica stores as the proposer are republished (see
    /// [`republish`]); without a sink nothing is.
    pub fn set_republish_sink(&mut self, sink: republish::RepublishSink) {
        self.republish_sink = Some(sink);
    }

    /// Republishes one stored message through the sink, if the config still asks for it.
    fn republish(&self, p: &republish::Pending) {
        if let (Some(sink), Some(cfg)) = (&self.republish_sink, &self.config.republish)
            && let Some((subject, headers, payload)) = republish::message(cfg, &self.config.name, p)
        {
            sink(&subject, headers, payload);
        }
    }

    /// Creation time, Unix ns.
    pub fn created_ns(&self) -> u64 {
        self.created_ns
    }

    /// Newest command time applied, Unix ns.
    pub fn clock_ns(&self) -> u64 {
        self.clock_ns
    }

    /// Summary state of the messages.
    pub fn state(&self) -> StreamState {
        self.store.state()
    }

    /// Read access to the messages (info, msg get, consumers).
    pub fn store(&self) -> &dyn StreamStore {
        self.store.as_ref()
    }

    /// The dedup index (tests and diagnostics).
    pub fn dedup(&self) -> &DedupIndex {
        &self.dedup
    }

    /// Consumers attached to the stream.
    pub fn consumer_count(&self) -> u64 {
        self.consumer_count
    }

    /// How many times messages were removed other than by consumer acks.
    pub fn removals(&self) -> u64 {
        self.removals
    }

    /// The origin sequence last copied from the source with `key` (0 = nothing yet).
    pub fn source_position(&self, key: &str) -> u64 {
        self.source_positions.get(key).copied().unwrap_or(0)
    }

    /// The response decoration in use.
    pub fn server(&self) -> &ServerIdentity {
        &self.server
    }

    /// Changes whenever the stream's meta record (its config among others) is written.
    pub fn meta_version(&self) -> u64 {
        self.meta_version
    }

    fn duplicate_window(&self) -> u64 {
        u64::try_from(self.config.duplicate_window).unwrap_or(0)
    }

    fn advance_clock(&mut self, now_ns: u64) {
        self.clock_ns = self.clock_ns.max(now_ns);
        self.dedup.prune(self.clock_ns, self.duplicate_window());
    }

    /// Writes the meta record (and any staged appends); called after every config change.
    fn save_meta(&mut self) -> Result<(), StorageError> {
        self.config_json = None;
        self.meta_version += 1;
        let bytes = self.encoded_meta();
        self.store.put_meta(META_CONFIG, &bytes)
    }

    /// The [`StoredMeta`] JSON, built around the cached config JSON.
    fn encoded_meta(&mut self) -> Vec<u8> {
        let config = self
            .config_json
            .get_or_insert_with(|| serde_json::to_string(&self.config).unwrap_or_default());
        let last_msg_id = serde_json::to_string(&self.last_msg_id).unwrap_or_default();
        let positions = serde_json::to_string(&self.source_positions).unwrap_or_default();
        format!(
            "{{\"config\":{config},\"created_ns\":{},\"clock_ns\":{},\"last_msg_id\":{last_msg_id},\"source_positions\":{positions}}}",
            self.created_ns, self.clock_ns
        )
        .into_bytes()
    }

    /// Rebuilds the dedup index from stored messages within the window, newest first, as
    /// nats-server does after a restart.
    fn rebuild_dedup(&mut self) -> Result<(), StorageError> {
        let st = self.store.state();
        let now = self.clock_ns.max(st.last_ts);
        let window = self.duplicate_window();
        let mut found = Vec::new();
        if st.msgs > 0 {
            let mut seq = st.last_seq;
            while seq >= st.first_seq && seq > 0 {
                if let Some(m) = self.store.get(seq)? {
                    if m.timestamp_ns.saturating_add(window) <= now {
                        break;
                    }
                    if let Some(id) = headers::get(&m.headers, headers::MSG_ID) {
                        found.push((id.to_string(), m.seq, m.timestamp_ns));
                    }
                }
                seq -= 1;
            }
        }
        self.dedup = DedupIndex::default();
        for (id, seq, ts) in found.into_iter().rev() {
            self.dedup.insert(&id, seq, ts);
        }
        self.clock_ns = now;
        Ok(())
    }
}

impl ReplicatedStateMachine for StreamStateMachine {
    fn apply(&mut self, index: LogIndex, command: &[u8]) -> Result<Bytes, StateMachineError> {
        self.apply_shared(index, &Bytes::copy_from_slice(command), true)
    }

    fn apply_shared(
        &mut self,
        index: LogIndex,
        command: &Bytes,
        answer_wanted: bool,
    ) -> Result<Bytes, StateMachineError> {
        // Appends stay staged until `save_applied` writes them with the applied id.
        self.store.begin_batch();
        // Decoding from `Bytes` makes the headers and payloads slices of the entry, not copies.
        let cmd = StreamCommand::decode(command.clone()).map_err(|e| StateMachineError::Apply {
            index,
            reason: format!("undecodable stream command: {e}"),
        })?;
        let err = storage_err(index);
        let resume = match self.replay(index, &cmd).map_err(&err)? {
            recovery::Replay::Done(answer) => return Ok(Bytes::from(answer)),
            recovery::Replay::Apply => None,
            recovery::Replay::ResumeBatch(position) => Some(position),
        };
        self.store.set_write_tag(recovery::write_tag(index.0, 0));
        let consumer_cmd = matches!(
            cmd.cmd,
            Some(Cmd::ConsumerCreate(_) | Cmd::ConsumerDelete(_) | Cmd::ConsumerProgress(_))
        );
        let before = self.store.state();
        let answer = match cmd.cmd {
            Some(Cmd::Append(a)) => self.apply_append(a).map_err(&err)?,
            Some(Cmd::AppendBatch(b)) => {
                // A batch resumed after a crash passed its checks before it.
                let answers = if b.atomic_batch_id.is_empty() || resume.is_some() {
                    self.apply_append_batch(index.0, b.appends, resume, answer_wanted)
                } else {
                    self.apply_atomic_batch(index.0, b.appends, &b.atomic_batch_id, answer_wanted)
                }
                .map_err(&err)?;
                self.count_removals(&before, consumer_cmd);
                return Ok(answers);
            }
            Some(Cmd::Purge(p)) => self.apply_purge(&p).map_err(&err)?,
            Some(Cmd::DeleteMsg(d)) => self.apply_delete(&d).map_err(&err)?,
            Some(Cmd::UpdateConfig(u)) => self.apply_update(index, &u)?,
            Some(Cmd::Expire(e)) => {
                self.apply_expire(e.now_ns).map_err(&err)?;
                String::new()
            }
            Some(Cmd::ConsumerCreate(c)) => {
                self.apply_consumer_create(&c).map_err(&err)?;
                String::new()
            }
            Some(Cmd::ConsumerDelete(d)) => {
                self.apply_consumer_delete(&d.name).map_err(&err)?;
                String::new()
            }
            Some(Cmd::ConsumerProgress(p)) => {
                self.apply_consumer_progress(&p).map_err(&err)?;
                String::new()
            }
            Some(Cmd::Restore(r)) => self.apply_restore(r, index)?,
            None => {
                return Err(StateMachineError::Apply {
                    index,
                    reason: "empty stream command".to_string(),
                });
            }
        };
        self.count_removals(&before, consumer_cmd);
        Ok(Bytes::from(answer))
    }

    fn snapshot(&self) -> Result<Bytes, StateMachineError> {
        self.snapshot_source()?.into_bytes()
    }

    fn snapshot_source(&self) -> Result<SnapshotData, StateMachineError> {
        self.lazy_snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), StateMachineError> {
        self.restore_shared(&Bytes::copy_from_slice(snapshot))
    }

    fn restore_shared(&mut self, snapshot: &Bytes) -> Result<(), StateMachineError> {
        self.restore_data(&SnapshotData::from(snapshot.clone()))
    }

    fn restore_data(&mut self, snapshot: &SnapshotData) -> Result<(), StateMachineError> {
        self.removals += 1;
        self.import_data(snapshot)
    }

    fn save_applied(&mut self, state: &AppliedState) -> Result<(), StateMachineError> {
        let applied = serde_json::to_vec(&(&state.last_applied, &state.membership))
            .map_err(|e| StateMachineError::Storage(std::io::Error::other(e)))?;
        // Consumer states first: a crash before the applied index replays their batch.
        self.persist_consumers().map_err(io_err)?;
        if std::mem::take(&mut self.restored) {
            // The restore's marker goes in the same write as the position it restored to.
            self.store.end_restore();
        }
        let meta = self.encoded_meta();
        self.store
            .put_metas(&[(META_CONFIG, &meta), (META_APPLIED, &applied)])
            .map_err(io_err)
    }

    fn durability_barrier(&self) -> Option<DurabilityBarrier> {
        let barrier = self.store.durability_barrier()?;
        Some(Box::new(move || barrier().map_err(io_err)))
    }

    fn load_applied(&self) -> Result<Option<AppliedState>, StateMachineError> {
        let Some(bytes) = self.store.get_meta(META_APPLIED).map_err(io_err)? else {
            return Ok(None);
        };
        let (last_applied, membership) =
            serde_json::from_slice(&bytes).map_err(|e| StateMachineError::CorruptSnapshot {
                reason: format!("applied state record: {e}"),
            })?;
        Ok(Some(AppliedState {
            last_applied,
            membership,
        }))
    }
}

#[cfg(test)]
mod tests;
