//! [`MetaMachine`]: the meta group's [`ReplicatedStateMachine`], a [`MetaState`] shared with
//! readers and made durable in the node's RocksDB after every apply batch.
//!
//! Invariants:
//! - Readers take the state's read lock briefly and never across `.await`; `apply` takes the
//!   write lock for one command.
//! - The durable copy (state + applied log id + membership) is written in one synced batch, so a
//!   restart resumes from a consistent point and openraft replays the rest of the log.
//! - Every change bumps a `watch` version so reconcilers wake up without polling.

use std::sync::Arc;

use bytes::Bytes;
use jetraft_proto::meta::{MetaCommand, MetaSnapshot};
use jetraft_raft::types::{GroupLogId, GroupMembership};
use jetraft_raft::{
    AppliedState, DurabilityBarrier, LogIndex, ReplicatedStateMachine, StateMachineError,
};
use jetraft_storage::{ColumnFamily, Db};
use parking_lot::RwLock;
use prost::Message;
use tokio::sync::watch;

use super::state::MetaState;

/// `sm_meta` key of the meta group's durable state.
const STATE_KEY: &[u8] = b"meta/state";
/// `sm_meta` key of the meta group's applied log id and membership.
const APPLIED_KEY: &[u8] = b"meta/applied";

/// A read handle on the meta state; clones share it.
#[derive(Clone, Debug)]
pub struct MetaView {
    /// The state, written only by the meta state machine.
    state: Arc<RwLock<MetaState>>,
    /// Bumped after every apply batch or restore.
    version: watch::Receiver<u64>,
}

impl MetaView {
    /// Runs `f` on the current state.
    pub fn read<R>(&self, f: impl FnOnce(&MetaState) -> R) -> R {
        f(&self.state.read())
    }

    /// A receiver that changes whenever the state does.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.clone()
    }
}

/// The meta group's state machine.
pub struct MetaMachine {
    /// Shared with [`MetaView`]s.
    state: Arc<RwLock<MetaState>>,
    /// Change notifications.
    version: watch::Sender<u64>,
    /// Where the durable copy lives; `None` keeps everything in memory (tests).
    db: Option<Db>,
}

impl MetaMachine {
    /// A meta machine persisted in `db` (or in memory), resuming from its durable copy, and a
    /// view on it.
    pub fn open(db: Option<Db>) -> Result<(Self, MetaView), StateMachineError> {
        let state = match &db {
            Some(db) => match db.get(ColumnFamily::SmMeta, STATE_KEY).map_err(storage)? {
                Some(bytes) => MetaState::from_snapshot(decode_snapshot(&bytes)?),
                None => MetaState::default(),
            },
            None => MetaState::default(),
        };
        let state = Arc::new(RwLock::new(state));
        let (version, rx) = watch::channel(0);
        let view = MetaView {
            state: state.clone(),
            version: rx,
        };
        Ok((Self { state, version, db }, view))
    }

    fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
    }
}

fn storage(e: jetraft_storage::StorageError) -> StateMachineError {
    StateMachineError::Storage(std::io::Error::other(e))
}

fn decode_snapshot(bytes: &[u8]) -> Result<MetaSnapshot, StateMachineError> {
    MetaSnapshot::decode(bytes).map_err(|e| StateMachineError::CorruptSnapshot {
        reason: e.to_string(),
    })
}

impl ReplicatedStateMachine for MetaMachine {
    fn apply(&mut self, index: LogIndex, command: &[u8]) -> Result<Bytes, StateMachineError> {
        let cmd = MetaCommand::decode(command).map_err(|e| StateMachineError::Apply {
            index,
            reason: format!("undecodable meta command: {e}"),
        })?;
        let result = self.state.write().apply(cmd);
        Ok(Bytes::from(result.encode_to_vec()))
    }

    fn snapshot(&self) -> Result<Bytes, StateMachineError> {
        Ok(Bytes::from(self.state.read().to_snapshot().encode_to_vec()))
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), StateMachineError> {
        let state = MetaState::from_snapshot(decode_snapshot(snapshot)?);
        *self.state.write() = state;
        self.bump();
        Ok(())
    }

    fn save_applied(&mut self, applied: &AppliedState) -> Result<(), StateMachineError> {
        if let Some(db) = &self.db {
            let state = self.state.read().to_snapshot().encode_to_vec();
            let applied = serde_json::to_vec(&(&applied.last_applied, &applied.membership))
                .map_err(|e| StateMachineError::Storage(std::io::Error::other(e)))?;
            // Not fsynced here: the meta log holds every entry after the last durable copy
            // (the barrier below runs before openraft may purge it), so a restart applies them
            // again; the next WAL fsync of any log append makes this durable anyway. An fsync
            // per meta apply cost a disk round trip on every stream create, on a runtime thread.
            db.put(&[
                (ColumnFamily::SmMeta, STATE_KEY, &state),
                (ColumnFamily::SmMeta, APPLIED_KEY, &applied),
            ])
            .map_err(storage)?;
        }
        self.bump();
        Ok(())
    }

    fn durability_barrier(&self) -> Option<DurabilityBarrier> {
        let db = self.db.clone()?;
        Some(Box::new(move || db.sync_wal().map_err(storage)))
    }

    fn load_applied(&self) -> Result<Option<AppliedState>, StateMachineError> {
        let Some(db) = &self.db else {
            return Ok(None);
        };
        let Some(bytes) = db.get(ColumnFamily::SmMeta, APPLIED_KEY).map_err(storage)? else {
            return Ok(None);
        };
        let (last_applied, membership): (Option<GroupLogId>, GroupMembership) =
            serde_json::from_slice(&bytes).map_err(|e| StateMachineError::CorruptSnapshot {
                reason: format!("meta applied state: {e}"),
            })?;
        Ok(Some(AppliedState {
            last_applied,
            membership,
        }))
    }
}

#[cfg(test)]
mod tests {
    use jetraft_proto::meta::{StreamAssignment, meta_command};

    use super::*;

    fn create(name: &str) -> Vec<u8> {
        MetaCommand {
            op: Some(meta_command::Op::CreateStream(StreamAssignment {
                name: name.into(),
                subjects: vec![name.to_lowercase()],
                replicas: vec![1],
                ..Default::default()
            })),
        }
        .encode_to_vec()
    }

    #[test]
    fn state_survives_reopen_from_rocksdb() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let (mut m, view) = MetaMachine::open(Some(db.clone())).unwrap();
        m.apply(LogIndex(1), &create("ORDERS")).unwrap();
        m.save_applied(&AppliedState::default()).unwrap();
        assert!(view.read(|s| s.stream("ORDERS").is_some()));
        drop(m);
        let (m2, view2) = MetaMachine::open(Some(db)).unwrap();
        assert!(view2.read(|s| s.stream("ORDERS").is_some()));
        assert_eq!(m2.load_applied().unwrap(), Some(AppliedState::default()));
    }

    #[test]
    fn undecodable_command_stops_the_group() {
        let (mut m, _) = MetaMachine::open(None).unwrap();
        assert!(matches!(
            m.apply(LogIndex(3), &[0xff, 0xff, 0xff]),
            Err(StateMachineError::Apply { .. })
        ));
    }

    #[test]
    fn restore_replaces_state_and_notifies() {
        let (mut a, _) = MetaMachine::open(None).unwrap();
        a.apply(LogIndex(1), &create("A")).unwrap();
        let snap = a.snapshot().unwrap();
        let (mut b, view) = MetaMachine::open(None).unwrap();
        let rx = view.subscribe();
        b.restore(&snap).unwrap();
        assert!(rx.has_changed().unwrap());
        assert!(view.read(|s| s.stream("A").is_some()));
    }
}
