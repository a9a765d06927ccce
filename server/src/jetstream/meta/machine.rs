//! [`MetaMachine`]: the meta group's [`ReplicatedStateMachine`], a [`MetaState`] shared with
//! readers and made durable in the node's RocksDB after every apply batch.
//!
//! The durable copy is one record per stream assignment (`meta/stream/<key>`) and one for the
//! rest (`meta/rest`: peers, retired and drained ids, the next uid), so an apply batch writes only
//! the streams its commands named: rewriting the whole state made every stream create write all
//! assignments again (quadratic in the number of streams). A store written by an older version
//! holds the whole state in `meta/state`; it is read once and replaced at the first save.
//!
//! Invariants:
//! - Readers take the state's read lock briefly and never across `.await`; `apply` takes the
//!   write lock for one command.
//! - The changed records, the rest and the applied log id + membership are written in one
//!   batch, so a restart resumes from a consistent point and openraft replays the rest of the
//!   log. The batch goes through the WAL without its own fsync; the durability barrier fsyncs
//!   it before openraft may purge the log behind a snapshot.
//! - Every change bumps a `watch` version so reconcilers wake up without polling.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use jetraft_proto::meta::{MetaCommand, MetaSnapshot, StreamAssignment, meta_command};
use jetraft_raft::types::{GroupLogId, GroupMembership};
use jetraft_raft::{
    AppliedState, DurabilityBarrier, LogIndex, ReplicatedStateMachine, StateMachineError,
};
use jetraft_storage::{Change, ColumnFamily, Db};
use parking_lot::RwLock;
use prost::Message;
use tokio::sync::watch;

use super::state::MetaState;

/// `sm_meta` key of the whole meta state as older versions wrote it (read once, then deleted).
const LEGACY_STATE_KEY: &[u8] = b"meta/state";
/// `sm_meta` key of the meta state without its stream assignments.
const REST_KEY: &[u8] = b"meta/rest";
/// `sm_meta` key prefix of one stream assignment each (the stream's key follows).
const STREAM_PREFIX: &[u8] = b"meta/stream/";
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
    /// Streams named by commands applied since the last save (their records are written again,
    /// or deleted).
    dirty: BTreeSet<String>,
    /// Every record must be written again at the next save (after a restore, or a load of the
    /// older single-record layout).
    all_dirty: bool,
}

/// `sm_meta` key of the assignment of stream `key`.
fn stream_key(key: &str) -> Vec<u8> {
    [STREAM_PREFIX, key.as_bytes()].concat()
}

/// The stream a command may change, if any.
fn named_stream(cmd: &MetaCommand) -> Option<&str> {
    match cmd.op.as_ref()? {
        meta_command::Op::CreateStream(sa) | meta_command::Op::UpdateStream(sa) => Some(&sa.name),
        meta_command::Op::DeleteStream(name) => Some(name),
        meta_command::Op::AddPeer(_)
        | meta_command::Op::RemovePeer(_)
        | meta_command::Op::Drain(_) => None,
    }
}

impl MetaMachine {
    /// A meta machine persisted in `db` (or in memory), resuming from its durable copy, and a
    /// view on it.
    pub fn open(db: Option<Db>) -> Result<(Self, MetaView), StateMachineError> {
        let (state, all_dirty) = match &db {
            Some(db) => load(db)?,
            None => (MetaState::default(), false),
        };
        let state = Arc::new(RwLock::new(state));
        let (version, rx) = watch::channel(0);
        let view = MetaView {
            state: state.clone(),
            version: rx,
        };
        Ok((
            Self {
                state,
                version,
                db,
                dirty: BTreeSet::new(),
                all_dirty,
            },
            view,
        ))
    }

    fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    /// Writes the records changed since the last save, the rest and `applied` in one batch.
    fn write_changed(&self, db: &Db, applied: &AppliedState) -> Result<(), StateMachineError> {
        let state = self.state.read();
        // (key, new value or None to delete), in write order.
        let mut records: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        if self.all_dirty {
            for (key, _) in db
                .scan_prefix(ColumnFamily::SmMeta, STREAM_PREFIX)
                .map_err(storage)?
            {
                records.push((key, None));
            }
            for sa in state.streams() {
                records.push((stream_key(&sa.name), Some(sa.encode_to_vec())));
            }
            records.push((LEGACY_STATE_KEY.to_vec(), None));
        } else {
            for name in &self.dirty {
                let value = state.stream(name).map(Message::encode_to_vec);
                records.push((stream_key(name), value));
            }
        }
        let rest = state.rest_snapshot().encode_to_vec();
        drop(state);
        let applied = serde_json::to_vec(&(&applied.last_applied, &applied.membership))
            .map_err(|e| StateMachineError::Storage(std::io::Error::other(e)))?;
        let mut changes: Vec<Change<'_>> = records
            .iter()
            .map(|(key, value)| match value {
                Some(v) => Change::Put(ColumnFamily::SmMeta, key, v),
                None => Change::Delete(ColumnFamily::SmMeta, key),
            })
            .collect();
        changes.push(Change::Put(ColumnFamily::SmMeta, REST_KEY, &rest));
        changes.push(Change::Put(ColumnFamily::SmMeta, APPLIED_KEY, &applied));
        db.write_changes(&changes).map_err(storage)
    }
}

/// The durable state in `db`, and whether it came from the older single-record layout.
fn load(db: &Db) -> Result<(MetaState, bool), StateMachineError> {
    if let Some(rest) = db.get(ColumnFamily::SmMeta, REST_KEY).map_err(storage)? {
        let mut snap = decode_snapshot(&rest)?;
        for (key, value) in db
            .scan_prefix(ColumnFamily::SmMeta, STREAM_PREFIX)
            .map_err(storage)?
        {
            let sa = StreamAssignment::decode(value.as_slice()).map_err(|e| {
                StateMachineError::CorruptSnapshot {
                    reason: format!("meta stream record {}: {e}", String::from_utf8_lossy(&key)),
                }
            })?;
            snap.streams.push(sa);
        }
        return Ok((MetaState::from_snapshot(snap), false));
    }
    match db
        .get(ColumnFamily::SmMeta, LEGACY_STATE_KEY)
        .map_err(storage)?
    {
        Some(bytes) => Ok((MetaState::from_snapshot(decode_snapshot(&bytes)?), true)),
        None => Ok((MetaState::default(), false)),
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
        if let Some(name) = named_stream(&cmd) {
            self.dirty.insert(name.to_string());
        }
        let result = self.state.write().apply(cmd);
        Ok(Bytes::from(result.encode_to_vec()))
    }

    fn snapshot(&self) -> Result<Bytes, StateMachineError> {
        Ok(Bytes::from(self.state.read().to_snapshot().encode_to_vec()))
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), StateMachineError> {
        let state = MetaState::from_snapshot(decode_snapshot(snapshot)?);
        *self.state.write() = state;
        self.all_dirty = true;
        self.bump();
        Ok(())
    }

    fn save_applied(&mut self, applied: &AppliedState) -> Result<(), StateMachineError> {
        if let Some(db) = &self.db {
            // Not fsynced here: the meta log holds every entry after the last durable copy
            // (the barrier below runs before openraft may purge it), so a restart applies them
            // again; the next WAL fsync of any log append makes this durable anyway. An fsync
            // per meta apply cost a disk round trip on every stream create, on a runtime thread.
            self.write_changed(db, applied)?;
        }
        self.dirty.clear();
        self.all_dirty = false;
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

    fn delete(name: &str) -> Vec<u8> {
        MetaCommand {
            op: Some(meta_command::Op::DeleteStream(name.into())),
        }
        .encode_to_vec()
    }

    /// The stream keys of the records in `db`.
    fn records(db: &Db) -> Vec<String> {
        db.scan_prefix(ColumnFamily::SmMeta, STREAM_PREFIX)
            .unwrap()
            .into_iter()
            .map(|(k, _)| String::from_utf8_lossy(&k[STREAM_PREFIX.len()..]).into_owned())
            .collect()
    }

    #[test]
    fn a_save_writes_and_deletes_only_the_named_streams() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let (mut m, _) = MetaMachine::open(Some(db.clone())).unwrap();
        m.apply(LogIndex(1), &create("A")).unwrap();
        m.apply(LogIndex(2), &create("B")).unwrap();
        m.save_applied(&AppliedState::default()).unwrap();
        assert_eq!(records(&db), ["A", "B"]);
        // A record changed behind the machine's back stays as it is unless a command names it.
        let a = db.get(ColumnFamily::SmMeta, &stream_key("A")).unwrap();
        db.write_changes(&[Change::Put(ColumnFamily::SmMeta, &stream_key("A"), b"x")])
            .unwrap();
        m.apply(LogIndex(3), &delete("B")).unwrap();
        m.apply(LogIndex(4), &create("C")).unwrap();
        m.save_applied(&AppliedState::default()).unwrap();
        assert_eq!(records(&db), ["A", "C"]);
        assert_eq!(
            db.get(ColumnFamily::SmMeta, &stream_key("A"))
                .unwrap()
                .as_deref(),
            Some(&b"x"[..]),
            "A was not written again"
        );
        db.write_changes(&[Change::Put(
            ColumnFamily::SmMeta,
            &stream_key("A"),
            &a.unwrap(),
        )])
        .unwrap();
        drop(m);
        let (_, view) = MetaMachine::open(Some(db)).unwrap();
        let names: Vec<String> = view.read(|s| s.streams().map(|s| s.name.clone()).collect());
        assert_eq!(names, ["A", "C"]);
        assert!(
            view.read(|s| s.stream("A").unwrap().uid) < view.read(|s| s.stream("C").unwrap().uid)
        );
    }

    #[test]
    fn the_older_single_record_layout_is_read_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let (mut old, _) = MetaMachine::open(None).unwrap();
        old.apply(LogIndex(1), &create("OLD")).unwrap();
        let legacy = old.snapshot().unwrap();
        db.write_changes(&[Change::Put(ColumnFamily::SmMeta, LEGACY_STATE_KEY, &legacy)])
            .unwrap();
        let (mut m, view) = MetaMachine::open(Some(db.clone())).unwrap();
        assert!(view.read(|s| s.stream("OLD").is_some()));
        m.apply(LogIndex(2), &create("NEW")).unwrap();
        m.save_applied(&AppliedState::default()).unwrap();
        assert_eq!(records(&db), ["NEW", "OLD"]);
        assert_eq!(
            db.get(ColumnFamily::SmMeta, LEGACY_STATE_KEY).unwrap(),
            None
        );
        drop(m);
        let (_, view) = MetaMachine::open(Some(db)).unwrap();
        assert!(view.read(|s| s.stream("OLD").is_some() && s.stream("NEW").is_some()));
    }

    #[test]
    fn a_restored_snapshot_replaces_every_record() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let (mut m, _) = MetaMachine::open(Some(db.clone())).unwrap();
        m.apply(LogIndex(1), &create("A")).unwrap();
        m.save_applied(&AppliedState::default()).unwrap();
        let (mut other, _) = MetaMachine::open(None).unwrap();
        other.apply(LogIndex(1), &create("B")).unwrap();
        m.restore(&other.snapshot().unwrap()).unwrap();
        m.save_applied(&AppliedState::default()).unwrap();
        assert_eq!(records(&db), ["B"]);
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
