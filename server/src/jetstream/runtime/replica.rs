//! A stream replica hosted on this node, and the handle everything else reaches it through.
//!
//! [`LocalStream`] is the owner of one replica: its state machine (shared between Raft, which
//! applies committed entries, and the API/publish paths, which read it on the leader), its
//! consumer engines, its PubAck queue and its mirror/source copy tasks. Two tasks work for it
//! and end with it (`cancel`): the ack task (`publish`) and the owner task (`owner`:
//! leadership, consumers, expiry, sourcing). Only the meta task (`reconcile`) creates and
//! removes replicas.
//!
//! Invariants:
//! - The state machine mutex is a `parking_lot` mutex, held only for synchronous reads or one
//!   apply, never across `.await`.
//! - Only Raft mutates the state machine; readers never write.

use std::sync::Arc;

use bytes::Bytes;
use jetraft_raft::{
    AppliedState, DurabilityBarrier, GroupId, LogIndex, ReplicatedStateMachine, SnapshotData,
    StateMachineError,
};
use jetraft_storage::stream::StreamUid;
use parking_lot::{Mutex, RwLock};

use super::publish::AckQueue;
use super::sourcing::SourcingRun;
use crate::jetstream::api::types::config::StreamConfig;
use crate::jetstream::stream::StreamStateMachine;

/// One stream replica on this node.
#[derive(Debug)]
pub struct LocalStream {
    /// Stream name.
    pub name: String,
    /// Stream uid (also its Raft group id).
    pub uid: StreamUid,
    /// Replica node ids, as the meta group assigned them (changed by a peer removal).
    replicas: RwLock<Vec<u64>>,
    /// The replicated state, shared with Raft's apply.
    pub sm: Arc<Mutex<StreamStateMachine>>,
    /// Bumped after every applied entry (consumer engines wait on it for new messages).
    pub changes: tokio::sync::watch::Sender<u64>,
    /// Consumer engines running here (on the leader).
    pub(crate) engines: super::consumer::Engines,
    /// Proposed publishes waiting for their PubAcks, answered in order by the ack task.
    pub(super) acks: AckQueue,
    /// How many proposals went to the ack task and how many it answered (`settle`).
    pub(super) applied: Arc<super::settle::Applied>,
    /// The copy tasks of a mirror or sourcing stream, while this node leads it (written only
    /// by the owner task).
    pub(super) sourcing: Mutex<Option<SourcingRun>>,
    /// Atomic batches being staged while this replica leads (`atomic_batch`).
    pub(super) batches: Mutex<super::atomic_batch::AtomicBatches>,
    /// Cancelled when the replica is removed from this node.
    pub cancel: tokio_util::sync::CancellationToken,
    /// When the replica started here (the first replica initialises the group at once, the
    /// others only if it still has no leader a while later).
    pub started: std::time::Instant,
    /// Set once the group is known to be initialised (it never goes back), so the meta task
    /// stops asking its Raft core on every pass.
    pub(super) initialized: std::sync::atomic::AtomicBool,
    /// The meta group's config JSON that the replica's config was last found equal to, with
    /// the state machine's [`StreamStateMachine::meta_version`] then: while neither changed,
    /// the meta task neither parses nor compares the config again. (The JSON shares the meta
    /// state's buffer; no parsed copy of the config is kept per stream.)
    config_in_sync: Mutex<Option<(Bytes, u64)>>,
    /// Wakes the owner task when the stream's config or its next expiry may have changed (see
    /// [`SharedStream`]).
    pub(super) config_changed: Arc<tokio::sync::Notify>,
}

impl LocalStream {
    /// A replica handle around the opened state machine and signals that `shared` hands Raft;
    /// `acks` is its ack task's queue.
    pub(super) fn new(
        name: String,
        uid: StreamUid,
        replicas: Vec<u64>,
        shared: SharedStream,
        acks: AckQueue,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Self {
        let SharedStream(sm, changes, config_changed) = shared;
        Self {
            name,
            uid,
            replicas: RwLock::new(replicas),
            sm,
            changes,
            engines: super::consumer::Engines::default(),
            acks,
            applied: Arc::default(),
            sourcing: Mutex::new(None),
            batches: Mutex::new(super::atomic_batch::AtomicBatches::default()),
            cancel,
            started: std::time::Instant::now(),
            initialized: std::sync::atomic::AtomicBool::new(false),
            config_in_sync: Mutex::new(None),
            config_changed,
        }
    }

    /// The meta group's config `json` for the stream, parsed, if the replica's config differs
    /// from it (`None` once they are equal, or if `json` does not parse). A config found equal
    /// is remembered until `json` or the replica's meta record changes.
    pub(super) fn config_to_push(&self, json: &Bytes) -> Option<StreamConfig> {
        let version = self.sm.lock().meta_version();
        if let Some((seen, at)) = &*self.config_in_sync.lock()
            && seen == json
            && *at == version
        {
            return None;
        }
        let wanted = serde_json::from_slice::<StreamConfig>(json).ok()?;
        let sm = self.sm.lock();
        if *sm.config() == wanted {
            *self.config_in_sync.lock() = Some((json.clone(), sm.meta_version()));
            return None;
        }
        Some(wanted)
    }

    /// Replica node ids, as the meta group assigned them.
    pub fn replicas(&self) -> Vec<u64> {
        self.replicas.read().clone()
    }

    /// The first assigned replica (it initialises a new group).
    pub fn first_replica(&self) -> Option<u64> {
        self.replicas.read().first().copied()
    }

    /// Records the meta group's new replica list; false if it did not change.
    pub(super) fn set_replicas(&self, replicas: &[u64]) -> bool {
        let mut current = self.replicas.write();
        if *current == replicas {
            return false;
        }
        *current = replicas.to_vec();
        true
    }

    /// The stream's Raft group.
    pub fn group(&self) -> GroupId {
        GroupId(self.uid.0)
    }
}

/// Hands Raft a [`ReplicatedStateMachine`] that applies to the shared state and signals each
/// applied entry that changed the messages (or the config) on the watch channel (the consumer
/// engines'), and a change of the stream's meta record (its config) on the notify (the owner
/// task's).
///
/// Entries that leave the messages as they were (consumer creates and progress, duplicates)
/// wake no engine: every engine of the stream watches the channel, so waking them all for one
/// consumer's ack made N consumers cost O(N) wake-ups and recounts per entry.
#[derive(Clone)]
pub struct SharedStream(
    pub Arc<Mutex<StreamStateMachine>>,
    pub tokio::sync::watch::Sender<u64>,
    pub Arc<tokio::sync::Notify>,
);

/// What tells whether an entry changed a stream's messages: counts, ends, removals.
fn messages(sm: &StreamStateMachine) -> (u64, u64, u64, u64, u64) {
    let st = sm.state();
    (st.msgs, st.bytes, st.first_seq, st.last_seq, sm.removals())
}

impl ReplicatedStateMachine for SharedStream {
    fn apply(&mut self, index: LogIndex, command: &[u8]) -> Result<Bytes, StateMachineError> {
        self.apply_shared(index, &Bytes::copy_from_slice(command), true)
    }

    fn apply_shared(
        &mut self,
        index: LogIndex,
        command: &Bytes,
        answer_wanted: bool,
    ) -> Result<Bytes, StateMachineError> {
        let (answer, config_changed, messages_changed) = {
            let mut sm = self.0.lock();
            let before = (sm.meta_version(), sm.expiry_hint());
            let messages_before = messages(&sm);
            let answer = sm.apply_shared(index, command, answer_wanted);
            // A new config, or a message or schedule that changes when expiry is next due:
            // the owner task plans its next wake-up again.
            let config_changed = (sm.meta_version(), sm.expiry_hint()) != before;
            (answer, config_changed, messages(&sm) != messages_before)
        };
        if messages_changed || config_changed {
            self.1.send_replace(index.0);
        }
        if config_changed {
            self.2.notify_one();
        }
        answer
    }

    fn snapshot(&self) -> Result<Bytes, StateMachineError> {
        self.0.lock().snapshot()
    }

    fn snapshot_source(&self) -> Result<SnapshotData, StateMachineError> {
        self.0.lock().snapshot_source()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), StateMachineError> {
        self.restore_shared(&Bytes::copy_from_slice(snapshot))
    }

    /// Restores with the state machine taken out from under its lock: readers (stream info,
    /// `/jsz`, health checks, all on runtime workers) meanwhile see a stand-in without messages
    /// instead of blocking a worker for the seconds a large restore writes.
    fn restore_shared(&mut self, snapshot: &Bytes) -> Result<(), StateMachineError> {
        self.restore_data(&SnapshotData::from(snapshot.clone()))
    }

    fn restore_data(&mut self, snapshot: &SnapshotData) -> Result<(), StateMachineError> {
        let stand_in = self.0.lock().stand_in()?;
        let mut sm = std::mem::replace(&mut *self.0.lock(), stand_in);
        let mut r = sm.restore_data(snapshot);
        {
            let mut guard = self.0.lock();
            let stand_in = std::mem::replace(&mut *guard, sm);
            let taken_back = guard.replace_stand_in(&stand_in);
            if r.is_ok() {
                r = taken_back;
            }
        }
        self.1.send_modify(|v| *v += 1);
        self.2.notify_one();
        r
    }

    fn save_applied(&mut self, state: &AppliedState) -> Result<(), StateMachineError> {
        self.0.lock().save_applied(state)
    }

    fn load_applied(&self) -> Result<Option<AppliedState>, StateMachineError> {
        self.0.lock().load_applied()
    }

    fn durability_barrier(&self) -> Option<DurabilityBarrier> {
        self.0.lock().durability_barrier()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use jetraft_raft::{LogIndex, ReplicatedStateMachine};
    use jetraft_storage::mem::MemStreamStore;
    use jetraft_storage::stream::StreamUid;

    use super::*;
    use crate::jetstream::api::types::consumer::{AckPolicy, ConsumerConfig};
    use crate::jetstream::api::types::requests::decode;
    use crate::jetstream::api::validate::normalize;
    use crate::jetstream::stream::test_consumers::HookedConsumers;
    use crate::jetstream::stream::{ServerIdentity, command};

    const T0: u64 = 1_796_199_467_000_000_000;

    /// A work-queue stream `W` on the memory store, shared as its Raft group sees it.
    fn shared() -> (SharedStream, tokio::sync::watch::Receiver<u64>) {
        shared_with(Box::new(jetraft_storage::mem::MemConsumerStore::new()))
    }

    /// [`shared`] keeping consumer states in `consumers`.
    fn shared_with(
        consumers: Box<dyn jetraft_storage::consumer::ConsumerStore + Sync>,
    ) -> (SharedStream, tokio::sync::watch::Receiver<u64>) {
        let mut cfg: StreamConfig =
            decode(br#"{"name":"W","subjects":["w"],"retention":"workqueue"}"#).unwrap();
        normalize(&mut cfg);
        let server = ServerIdentity {
            version: "2.15.1".into(),
            api_level: 5,
            domain: None,
        };
        let store = Box::new(MemStreamStore::new(StreamUid(1)));
        let sm = StreamStateMachine::open_with(store, consumers, cfg, T0, server).unwrap();
        let (tx, rx) = tokio::sync::watch::channel(0u64);
        let shared = SharedStream(
            Arc::new(Mutex::new(sm)),
            tx,
            Arc::new(tokio::sync::Notify::new()),
        );
        (shared, rx)
    }

    #[test]
    fn a_config_in_sync_is_skipped_until_the_assignment_or_the_replica_changes() {
        let (shared, _changes) = shared();
        let sm = shared.0.clone();
        let (acks, _acks_rx) = jetraft_raft::rt::mpsc::unbounded();
        let ls = LocalStream::new(
            "W".into(),
            StreamUid(1),
            vec![1],
            shared,
            acks,
            tokio_util::sync::CancellationToken::new(),
        );
        let apply = |index: u64, config: &StreamConfig| {
            let cmd = command::update_config(config, T0);
            sm.lock().apply(LogIndex(index), &cmd).unwrap();
        };
        let json = |config: &StreamConfig| Bytes::from(serde_json::to_vec(config).unwrap());
        let original = sm.lock().config().clone();
        assert_eq!(
            ls.config_to_push(&json(&original)),
            None,
            "the replica's own config"
        );
        assert!(ls.config_in_sync.lock().is_some(), "remembered as in sync");

        let mut assigned = original.clone();
        assigned.description = "assigned".into();
        let assigned_json = json(&assigned);
        assert_eq!(ls.config_to_push(&assigned_json), Some(assigned.clone()));
        apply(1, &assigned);
        assert_eq!(ls.config_to_push(&assigned_json), None, "applied");

        // The replica's config changes while the assignment stays (a stale update applied):
        // the remembered verdict no longer holds.
        apply(2, &original);
        assert_eq!(ls.config_to_push(&assigned_json), Some(assigned));
    }

    #[test]
    fn engines_are_woken_only_by_entries_that_change_the_messages() {
        let (mut s, mut changes) = shared();
        let mut index = 0;
        let mut apply = |s: &mut SharedStream, cmd: Bytes| {
            index += 1;
            s.apply_shared(LogIndex(index), &cmd, true).unwrap();
        };
        let consumer = ConsumerConfig {
            ack_policy: AckPolicy::Explicit,
            ack_wait: 30_000_000_000,
            ..Default::default()
        };
        apply(&mut s, command::consumer_create("c", &consumer, T0));
        assert!(!changes.has_changed().unwrap(), "a consumer create");
        apply(&mut s, command::append("w", Bytes::new(), Bytes::new(), T0));
        assert!(changes.has_changed().unwrap(), "a stored message");
        changes.borrow_and_update();
        // The consumer's delivery changes no message; its ack removes one (work queue).
        let delivered = jetraft_proto::stream::ConsumerProgress {
            name: "c".into(),
            delivered: vec![jetraft_proto::stream::Delivery {
                stream_seq: 1,
                consumer_seq: 1,
                delivered_ns: T0,
            }],
            ..Default::default()
        };
        apply(&mut s, command::consumer_progress(delivered));
        assert!(!changes.has_changed().unwrap(), "a delivery record");
        let acked = jetraft_proto::stream::ConsumerProgress {
            name: "c".into(),
            acked: vec![1],
            now_ns: T0,
            ..Default::default()
        };
        apply(&mut s, command::consumer_progress(acked));
        assert!(
            changes.has_changed().unwrap(),
            "an ack that removed a message"
        );
        assert_eq!(s.0.lock().state().msgs, 0);
    }

    /// Restores stream `W` (a consumer `c`, then 5 messages in the snapshot, a 6th after it)
    /// from its snapshot on another thread, held at its first consumer write (all messages
    /// written), and runs `meanwhile` on what a reader then gets within 10 s; returns the
    /// state machine after the restore.
    fn restore_with_reader_meanwhile(
        meanwhile: impl FnOnce(&mut StreamStateMachine),
    ) -> Arc<Mutex<StreamStateMachine>> {
        let gate = Arc::new((Mutex::new(false), parking_lot::Condvar::new()));
        let (waiting, waited) = std::sync::mpsc::channel();
        // Consumer writes wait while the gate is closed, telling the test that one waits.
        let held = gate.clone();
        let (mut s, _) = shared_with(Box::new(HookedConsumers::new(move |_| {
            let (closed, cv) = &*held;
            let mut closed = closed.lock();
            if *closed {
                let _ = waiting.send(());
            }
            while *closed {
                cv.wait(&mut closed);
            }
        })));
        let consumer = ConsumerConfig {
            ack_policy: AckPolicy::Explicit,
            ack_wait: 30_000_000_000,
            ..Default::default()
        };
        let mut index = 0;
        let mut apply = |s: &mut SharedStream, cmd: Bytes| {
            index += 1;
            s.apply_shared(LogIndex(index), &cmd, true).unwrap();
        };
        apply(&mut s, command::consumer_create("c", &consumer, T0));
        for _ in 0..5 {
            apply(
                &mut s,
                command::append("w", Bytes::new(), Bytes::from("x"), T0),
            );
        }
        let snapshot = s.snapshot().unwrap();
        apply(
            &mut s,
            command::append("w", Bytes::new(), Bytes::from("y"), T0),
        );
        assert_eq!(s.0.lock().state().msgs, 6);

        *gate.0.lock() = true;
        let sm = s.0.clone();
        let mut restoring = s.clone();
        let restore = std::thread::spawn(move || restoring.restore_shared(&snapshot));
        waited
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the restore reached the consumer store");
        {
            let mut reader = sm
                .try_lock_for(std::time::Duration::from_secs(10))
                .expect("a reader gets the lock while the restore writes");
            meanwhile(&mut reader);
        }
        let (closed, cv) = &*gate;
        *closed.lock() = false;
        cv.notify_all();
        restore.join().unwrap().unwrap();
        sm
    }

    #[test]
    fn readers_see_a_stand_in_while_a_restore_writes_and_the_restored_state_after() {
        let sm = restore_with_reader_meanwhile(|reader| {
            assert!(reader.is_stand_in());
            assert_eq!(reader.config().name, "W");
            assert!(
                reader.consumer("c").is_some(),
                "the stand-in has the consumers"
            );
            assert_eq!(reader.state().last_seq, 6, "and the ends");
            assert_eq!(reader.state().msgs, 0, "but no messages");
        });
        let after = sm.lock();
        assert!(!after.is_stand_in());
        assert_eq!(after.state().msgs, 5, "the snapshot's messages");
        assert_eq!(after.state().last_seq, 5);
        assert!(after.consumer("c").is_some());
    }

    #[test]
    fn a_replica_removed_during_a_restore_keeps_none_of_the_restored_messages() {
        // Removing a replica drops its messages (`reconcile`): here, the stand-in's.
        let sm = restore_with_reader_meanwhile(|reader| {
            reader.purge_all().unwrap();
        });
        let after = sm.lock();
        assert!(!after.is_stand_in());
        assert_eq!(after.state().msgs, 0);
        assert!(after.store().get(1).unwrap().is_none());
    }
}
