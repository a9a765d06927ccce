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
//! and the applied log id are kept with [`StreamStore::put_meta`]. The applied id is written after
//! each apply batch, so a crash can leave the store ahead of it; every store mutation records the
//! index of the entry that made it, and `recovery` skips entries already in the store when
//! they are applied again after the restart.
//!
//! [`clock_ns`]: StreamStateMachine::clock_ns

mod append;
pub mod command;
pub mod dedup;
pub mod headers;
pub mod info;
mod ops;
#[cfg(test)]
mod prop_tests;
#[cfg(test)]
mod raft_tests;
mod recovery;
mod snapshot;

use bytes::Bytes;
use jetraft_proto::stream::{StreamCommand, stream_command::Cmd};
use jetraft_raft::{AppliedState, LogIndex, ReplicatedStateMachine, StateMachineError};
use jetraft_storage::StorageError;
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

/// What the server reports about itself in responses (`_nats.ver`, `_nats.level`, the leader's
/// name). Not replicated state: every replica runs the same binary and only the leader answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerIdentity {
    /// Version string for `_nats.ver`.
    pub version: String,
    /// API level for `_nats.level`.
    pub api_level: u32,
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
    /// Response decoration.
    server: ServerIdentity,
    /// Log index of the last entry whose effects reached the store before a crash, while
    /// entries up to it are being applied again (see `recovery`).
    recover_until: Option<u64>,
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
    /// Opens the state machine of a stream over its store.
    ///
    /// A store that already holds a config record (a restart) resumes from it and rebuilds the
    /// dedup index from stored `Nats-Msg-Id` headers within the window; otherwise the stream
    /// is new: `config` and `created_ns` (from the meta group) are recorded and `first_seq` is
    /// applied.
    pub fn open(
        mut store: Box<dyn StreamStore + Sync>,
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
            server,
            recover_until: None,
        };
        if fresh {
            sm.save_meta().map_err(io_err)?;
        } else {
            sm.rebuild_dedup().map_err(io_err)?;
            sm.recover_until = sm.recovery_point()?;
            if sm.recover_until.is_some() {
                sm.recover_last_msg_id()?;
            }
        }
        Ok(sm)
    }

    /// Deletes every message (the stream was removed from this node).
    pub fn purge_all(&mut self) -> Result<u64, StorageError> {
        self.store
            .purge(&jetraft_storage::stream::PurgeRequest::default())
    }

    /// The stored config.
    pub fn config(&self) -> &StreamConfig {
        &self.config
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

    /// Sets the consumer count (until consumer commands are replicated here).
    pub fn set_consumer_count(&mut self, n: u64) {
        self.consumer_count = n;
    }

    /// The response decoration in use.
    pub fn server(&self) -> &ServerIdentity {
        &self.server
    }

    fn duplicate_window(&self) -> u64 {
        u64::try_from(self.config.duplicate_window).unwrap_or(0)
    }

    fn advance_clock(&mut self, now_ns: u64) {
        self.clock_ns = self.clock_ns.max(now_ns);
        self.dedup.prune(self.clock_ns, self.duplicate_window());
    }

    fn save_meta(&mut self) -> Result<(), StorageError> {
        let meta = StoredMeta {
            config: self.config.clone(),
            created_ns: self.created_ns,
            clock_ns: self.clock_ns,
            last_msg_id: self.last_msg_id.clone(),
        };
        let bytes = serde_json::to_vec(&meta).unwrap_or_default();
        self.store.put_meta(META_CONFIG, &bytes)
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
        let cmd = StreamCommand::decode(command).map_err(|e| StateMachineError::Apply {
            index,
            reason: format!("undecodable stream command: {e}"),
        })?;
        let err = storage_err(index);
        if let recovery::Replay::Done(answer) = self.replay(index, &cmd).map_err(&err)? {
            return Ok(Bytes::from(answer));
        }
        self.store.set_write_tag(index.0);
        let answer = match cmd.cmd {
            Some(Cmd::Append(a)) => self.apply_append(&a).map_err(&err)?,
            Some(Cmd::Purge(p)) => self.apply_purge(&p).map_err(&err)?,
            Some(Cmd::DeleteMsg(d)) => self.apply_delete(&d).map_err(&err)?,
            Some(Cmd::UpdateConfig(u)) => self.apply_update(index, &u)?,
            Some(Cmd::Expire(e)) => {
                self.apply_expire(e.now_ns).map_err(&err)?;
                String::new()
            }
            None => {
                return Err(StateMachineError::Apply {
                    index,
                    reason: "empty stream command".to_string(),
                });
            }
        };
        Ok(Bytes::from(answer))
    }

    fn snapshot(&self) -> Result<Bytes, StateMachineError> {
        self.export().map(|s| Bytes::from(s.encode_to_vec()))
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), StateMachineError> {
        self.import(snapshot)
    }

    fn save_applied(&mut self, state: &AppliedState) -> Result<(), StateMachineError> {
        let bytes = serde_json::to_vec(&(&state.last_applied, &state.membership))
            .map_err(|e| StateMachineError::Storage(std::io::Error::other(e)))?;
        self.save_meta().map_err(io_err)?;
        self.store.put_meta(META_APPLIED, &bytes).map_err(io_err)
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
