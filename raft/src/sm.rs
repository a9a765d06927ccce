//! The replicated state machine contract and its openraft adapter.
//!
//! A jetraft state machine (meta, stream) implements [`ReplicatedStateMachine`]: a plain,
//! synchronous, deterministic object that turns committed command bytes into response bytes and
//! can export/import its whole state as snapshot bytes. [`StateMachineAdapter`] implements
//! openraft's [`RaftStateMachine`] on top of it.
//!
//! Invariants:
//! - `apply` is called exactly once per committed normal entry, in log order, with the entry's
//!   index; it must not read clocks, randomness or anything outside its state and the command.
//! - The adapter answers *every* entry that carries a responder (normal, blank and membership
//!   entries alike), otherwise the proposer's `client_write` would hang.
//! - An apply or snapshot error is returned to openraft as an I/O error, which stops the group
//!   (fail-stop): a replica never continues with a state it failed to compute.
//! - The adapter tracks the last applied log id and membership ([`AppliedState`]) and hands them
//!   to [`ReplicatedStateMachine::save_applied`] at the end of every apply batch and after a
//!   snapshot install. A durable state machine writes them in the same batch as the effects of
//!   the entries (DESIGN §4 `sm_meta`) and returns them from
//!   [`ReplicatedStateMachine::load_applied`] after a restart; an in-memory one keeps the defaults.
//! - The mutex around the state machine is a `parking_lot` mutex and is never held across
//!   `.await`.
//!
//! Durability barriers: a state machine whose saved state becomes durable only with a later flush
//! (stream stores write without RocksDB's WAL) hands out a barrier. A built snapshot is reported
//! to openraft, which then purges the log behind it, only after the barrier passed; so the log
//! always holds every entry after the durable applied id, and a restart applies them again.
//!
//! Snapshots are lazy. A jetraft state machine is durable by itself (its applied log id is saved
//! with its effects), so a snapshot is only needed to send to a replica that is behind the purged
//! log. Building one (openraft asks every `snapshot_policy` entries, to purge the log) therefore
//! only records the applied log id and membership. When openraft asks for the current snapshot
//! (to send it, or at start-up), [`ReplicatedStateMachine::snapshot_source`] takes a
//! point-in-time view of the state as of the last applied entry, under the lock but without
//! exporting anything, and that entry's log id becomes the meta. That meta is at or after the
//! last one built, so every log entry the exported state lacks is still in the log. The bytes are
//! read from the view only as the transport sends them ([`SnapshotData::Lazy`]), outside the
//! lock and off openraft's state machine worker: applying (and so publishing) goes on while a
//! replica is rebuilt. Exporting the whole state under the lock made a stream's publishes stall
//! for as long as the export of all its messages took.

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::{Stream, TryStreamExt};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::type_config::alias::SnapshotMetaOf;
use openraft::{EntryPayload, RaftSnapshotBuilder};
use parking_lot::Mutex;

use crate::LogIndex;
use crate::snapshot_hold::ViewsOut;
use crate::types::{
    GroupLogId, GroupMembership, GroupSnapshot, JetraftConfig, Response, SnapshotData,
};

/// Why a state machine refused to apply or to (de)serialise its state.
#[derive(Debug, thiserror::Error)]
pub enum StateMachineError {
    /// A command could not be applied; the group stops rather than diverge.
    #[error("apply failed at index {index}: {reason}")]
    Apply {
        /// Log index of the command.
        index: LogIndex,
        /// What went wrong.
        reason: String,
    },
    /// Snapshot bytes could not be decoded.
    #[error("corrupt snapshot: {reason}")]
    CorruptSnapshot {
        /// What was wrong with the bytes.
        reason: String,
    },
    /// The state machine's own storage failed.
    #[error("state machine storage failed")]
    Storage(#[source] io::Error),
}

/// A blocking call that makes a state machine's saved state durable (see
/// [`ReplicatedStateMachine::durability_barrier`]).
pub type DurabilityBarrier = Box<dyn FnOnce() -> Result<(), StateMachineError> + Send>;

/// Raft bookkeeping that must be stored atomically with a state machine's data.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AppliedState {
    /// Log id of the last entry whose effects are included (any entry kind).
    pub last_applied: Option<GroupLogId>,
    /// The last membership applied; openraft needs it back after a restart.
    pub membership: GroupMembership,
}

/// What a meta or stream state machine implements to be replicated by a jetraft group.
///
/// Implementations are plain structs (STYLE B4): no tasks, no sleeping, no clocks.
pub trait ReplicatedStateMachine: Send + Sync + 'static {
    /// Applies one committed command and returns the answer for its proposer.
    ///
    /// Must be deterministic: every replica applying the same commands in the same order reaches
    /// the same state and returns the same bytes.
    fn apply(&mut self, index: LogIndex, command: &[u8]) -> Result<Bytes, StateMachineError>;

    /// [`apply`](Self::apply) as the group calls it: the command in shared bytes (decoding may
    /// slice it instead of copying), and whether a proposer waits for the answer. Nobody does on
    /// a follower, or on a leader for entries an earlier leader proposed; the answer may then be
    /// left empty, the state change must not differ. Defaults to `apply`.
    fn apply_shared(
        &mut self,
        index: LogIndex,
        command: &Bytes,
        answer_wanted: bool,
    ) -> Result<Bytes, StateMachineError> {
        let _ = answer_wanted;
        self.apply(index, command)
    }

    /// Exports the whole state as bytes, consistent as of the last applied command.
    fn snapshot(&self) -> Result<Bytes, StateMachineError>;

    /// The state as of the last applied command, for sending to another replica: the bytes
    /// [`snapshot`](Self::snapshot) would return, or a lazy [`SnapshotData`] that reads them from
    /// a point-in-time view as they are sent. Called under the state machine's lock, so a large
    /// state should take a cheap view (a storage snapshot) rather than export. Defaults to
    /// `snapshot`.
    fn snapshot_source(&self) -> Result<SnapshotData, StateMachineError> {
        self.snapshot().map(SnapshotData::from)
    }

    /// Replaces the whole state with one exported by [`snapshot`](Self::snapshot).
    ///
    /// Must be atomic: on error the previous state is kept.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), StateMachineError>;

    /// [`restore`](Self::restore) as the group calls it: the snapshot in shared bytes, so
    /// decoding may slice it instead of copying. Defaults to `restore`.
    fn restore_shared(&mut self, snapshot: &Bytes) -> Result<(), StateMachineError> {
        self.restore(snapshot)
    }

    /// [`restore`](Self::restore) from a payload that may be read chunk by chunk (a received
    /// snapshot spooled to disk, a lazy one handed over in process): blocking; called off the
    /// async runtime. A large state should read it in passes over [`SnapshotData::chunks`]
    /// rather than whole. Defaults to reading it into memory and
    /// [`restore_shared`](Self::restore_shared).
    fn restore_data(&mut self, snapshot: &SnapshotData) -> Result<(), StateMachineError> {
        self.restore_shared(&snapshot.clone().into_bytes()?)
    }

    /// Makes the effects of every `apply` so far durable together with `state` (one batch).
    /// Called at the end of each apply batch and after a restore. Effects of `apply` must be
    /// visible to reads at once; this only makes them durable. In-memory state machines keep the
    /// default, which stores nothing.
    fn save_applied(&mut self, state: &AppliedState) -> Result<(), StateMachineError> {
        let _ = state;
        Ok(())
    }

    /// For state machines whose saved state becomes durable only later (writes that skip the
    /// WAL, made durable by the next flush): a blocking call that makes everything saved so far
    /// durable. The adapter runs it (off the runtime) before it reports a snapshot built, since
    /// openraft then purges the log up to that snapshot, and after installing one. `None` (the
    /// default) when [`save_applied`](Self::save_applied) is durable by itself or nothing is kept.
    fn durability_barrier(&self) -> Option<DurabilityBarrier> {
        None
    }

    /// The state last passed to [`save_applied`](Self::save_applied) that is durable, read once
    /// when the group starts. `None` means a fresh state machine.
    fn load_applied(&self) -> Result<Option<AppliedState>, StateMachineError> {
        Ok(None)
    }
}

/// State shared by the adapter and its snapshot builder.
struct AdapterState {
    /// The application's state machine.
    sm: Box<dyn ReplicatedStateMachine>,
    /// Log id of the last applied entry (any kind); openraft resumes from here.
    last_applied: Option<GroupLogId>,
    /// Last membership applied; snapshots must carry it.
    membership: GroupMembership,
    /// Whether a snapshot was built (or installed) since start: until then openraft has none and
    /// [`RaftStateMachine::get_current_snapshot`] answers `None`, as it expects after a start.
    built: bool,
}

impl AdapterState {
    fn save_applied(&mut self) -> Result<(), io::Error> {
        let state = AppliedState {
            last_applied: self.last_applied,
            membership: self.membership.clone(),
        };
        self.sm.save_applied(&state).map_err(io::Error::other)
    }
}

/// openraft [`RaftStateMachine`] over a boxed [`ReplicatedStateMachine`].
///
/// Cloning gives another handle to the same state (used by the snapshot builder).
#[derive(Clone)]
pub struct StateMachineAdapter {
    /// Shared so a snapshot builder can read the state; locked only for synchronous work.
    state: Arc<Mutex<AdapterState>>,
    /// Snapshot views being sent: policy-based builds wait for them (see `snapshot_hold`).
    views_out: ViewsOut,
}

impl StateMachineAdapter {
    /// Wraps a state machine, resuming from what it reports as durably applied.
    pub fn new(sm: Box<dyn ReplicatedStateMachine>) -> Result<Self, StateMachineError> {
        let applied = sm.load_applied()?.unwrap_or_default();
        Ok(Self {
            state: Arc::new(Mutex::new(AdapterState {
                sm,
                last_applied: applied.last_applied,
                membership: applied.membership,
                built: false,
            })),
            views_out: ViewsOut::default(),
        })
    }

    /// The snapshot views of this group being sent (shared), to give them the group's lag
    /// check once it runs.
    pub(crate) fn views_out(&self) -> ViewsOut {
        self.views_out.clone()
    }

    /// Index of the last applied entry, if any.
    pub fn last_applied_index(&self) -> Option<LogIndex> {
        self.state.lock().last_applied.map(|id| LogIndex(id.index))
    }

    /// Records a snapshot at the last applied entry without exporting anything: openraft only
    /// keeps the meta of a built snapshot (to purge the log behind it). Also returns the state
    /// machine's durability barrier, after saving everything applied so far, when it has one:
    /// the snapshot may be reported only once that barrier passed.
    fn build(&self) -> Result<(GroupSnapshot, Option<DurabilityBarrier>), io::Error> {
        let mut st = self.state.lock();
        let barrier = st.sm.durability_barrier();
        if barrier.is_some() {
            // An apply batch may be half-way: its entries are applied but not yet saved.
            st.save_applied()?;
        }
        st.built = true;
        self.views_out.note_built();
        let snapshot = GroupSnapshot {
            meta: SnapshotMetaOf::<JetraftConfig> {
                last_log_id: st.last_applied,
                last_membership: st.membership.clone(),
            },
            snapshot: SnapshotData::new(),
        };
        Ok((snapshot, barrier))
    }

    /// The snapshot to send: a point-in-time view of the state as of the last applied entry,
    /// taken now (cheaply: its bytes are read as they are sent). A fresh view every time, so
    /// none outlives its transfer (a storage snapshot pins old data).
    fn current(&self) -> Result<Option<GroupSnapshot>, io::Error> {
        let st = self.state.lock();
        if !st.built {
            return Ok(None);
        }
        let data = self
            .views_out
            .track(st.sm.snapshot_source().map_err(io::Error::other)?);
        Ok(Some(GroupSnapshot {
            meta: SnapshotMetaOf::<JetraftConfig> {
                last_log_id: st.last_applied,
                last_membership: st.membership.clone(),
            },
            snapshot: data,
        }))
    }
}

/// Builds snapshots from the adapter's state.
pub struct SnapshotBuilder {
    /// The adapter whose state is exported.
    adapter: StateMachineAdapter,
}

impl RaftSnapshotBuilder<JetraftConfig> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<GroupSnapshot, io::Error> {
        let (snapshot, barrier) = self.adapter.build()?;
        pass_barrier(barrier).await?;
        Ok(snapshot)
    }
}

/// Runs a durability barrier on a blocking thread (it waits on the disk).
async fn pass_barrier(barrier: Option<DurabilityBarrier>) -> Result<(), io::Error> {
    let Some(barrier) = barrier else {
        return Ok(());
    };
    off_runtime(barrier).await
}

/// Runs blocking `work` (disk waits, large restores) on a blocking thread, so no runtime
/// worker is held; its error, or its panic, becomes an `io::Error`.
async fn off_runtime<T, E>(work: impl FnOnce() -> Result<T, E> + Send + 'static) -> io::Result<T>
where
    T: Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(io::Error::other)?
        .map_err(io::Error::other)
}

impl RaftStateMachine<JetraftConfig> for StateMachineAdapter {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<GroupLogId>, GroupMembership), io::Error> {
        let st = self.state.lock();
        Ok((st.last_applied, st.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<JetraftConfig>, io::Error>> + Unpin + Send,
    {
        let mut applied_any = false;
        let mut answered = false;
        let mut bytes = 0;
        while let Some((entry, responder)) = entries.try_next().await? {
            applied_any = true;
            let log_id = entry.log_id;
            let response = {
                let mut st = self.state.lock();
                let out = match entry.payload {
                    EntryPayload::Blank => Bytes::new(),
                    EntryPayload::Normal(cmd) => {
                        bytes += cmd.0.len() as u64;
                        st.sm
                            .apply_shared(LogIndex(log_id.index), &cmd.0, responder.is_some())
                            .map_err(io::Error::other)?
                    }
                    EntryPayload::Membership(m) => {
                        st.membership = GroupMembership::new(Some(log_id), m);
                        Bytes::new()
                    }
                };
                st.last_applied = Some(log_id);
                out
            };
            if let Some(responder) = responder {
                answered = true;
                responder.send(Response(response));
            }
        }
        if answered {
            // Let the tasks just woken (the answers' receivers, last in this worker's
            // not-stealable LIFO slot) run before the state is written: the answers leave
            // while the write happens, instead of after it. Reads see the state machine's
            // staged writes either way.
            tokio::task::yield_now().await;
        }
        self.views_out.note_applied(bytes);
        if applied_any {
            self.state.lock().save_applied()?;
        }
        Ok(())
    }

    async fn try_create_snapshot_builder(&mut self, force: bool) -> Option<Self::SnapshotBuilder> {
        // A build purges the log behind it: not while a replica still receives a snapshot and
        // will need the entries after it (openraft asks again after more entries).
        if !force && self.views_out.holding() {
            tracing::debug!("snapshot build deferred: a snapshot is being sent");
            return None;
        }
        if !force && self.views_out.replica_needs_log() {
            tracing::debug!("snapshot build deferred: a replica still replays the log");
            return None;
        }
        Some(self.get_snapshot_builder().await)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            adapter: self.clone(),
        }
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<JetraftConfig>,
        snapshot: Self::SnapshotData,
    ) -> Result<(), io::Error> {
        // Restoring a large state takes seconds (2 GB: about ten): off the runtime, or it holds
        // a worker thread that long, and with a second one waiting on this state's lock the
        // node answered nothing, its node links timed out and the leader sent the snapshot
        // again.
        let state = self.state.clone();
        let meta = meta.clone();
        let barrier = off_runtime(move || -> Result<_, io::Error> {
            let mut st = state.lock();
            st.sm.restore_data(&snapshot).map_err(io::Error::other)?;
            st.last_applied = meta.last_log_id;
            st.membership = meta.last_membership;
            st.built = true;
            st.save_applied()?;
            Ok(st.sm.durability_barrier())
        })
        .await?;
        // openraft purges the log up to the snapshot next: the installed state must be durable.
        pass_barrier(barrier).await
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<GroupSnapshot>, io::Error> {
        self.current()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the calls a durable state machine gets, in order.
    struct Recorder(Arc<Mutex<Vec<&'static str>>>, bool);

    impl ReplicatedStateMachine for Recorder {
        fn apply(&mut self, _: LogIndex, _: &[u8]) -> Result<Bytes, StateMachineError> {
            Ok(Bytes::new())
        }
        fn snapshot(&self) -> Result<Bytes, StateMachineError> {
            Ok(Bytes::new())
        }
        fn restore(&mut self, _: &[u8]) -> Result<(), StateMachineError> {
            self.0.lock().push("restore");
            Ok(())
        }
        fn save_applied(&mut self, _: &AppliedState) -> Result<(), StateMachineError> {
            self.0.lock().push("save");
            Ok(())
        }
        fn durability_barrier(&self) -> Option<DurabilityBarrier> {
            if !self.1 {
                return None;
            }
            let calls = self.0.clone();
            Some(Box::new(move || {
                calls.lock().push("barrier");
                Ok(())
            }))
        }
    }

    /// An adapter over `sm` after one snapshot build.
    async fn built_over(sm: Box<dyn ReplicatedStateMachine>) -> StateMachineAdapter {
        let mut adapter = StateMachineAdapter::new(sm).unwrap();
        adapter
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        adapter
    }

    /// An adapter over a [`Recorder`] (with or without a barrier) after one snapshot build.
    async fn built(barrier: bool) -> (Arc<Mutex<Vec<&'static str>>>, StateMachineAdapter) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let adapter = built_over(Box::new(Recorder(calls.clone(), barrier))).await;
        (calls, adapter)
    }

    #[tokio::test]
    async fn a_built_snapshot_waits_for_the_barrier_after_saving() {
        let (calls, mut adapter) = built(true).await;
        assert_eq!(*calls.lock(), ["save", "barrier"]);

        calls.lock().clear();
        let meta = SnapshotMetaOf::<JetraftConfig>::default();
        adapter
            .install_snapshot(&meta, SnapshotData::new())
            .await
            .unwrap();
        assert_eq!(*calls.lock(), ["restore", "save", "barrier"]);
    }

    /// A state machine whose restore waits (blocking its thread, as a large restore does) for a
    /// signal that another task on the runtime sends.
    struct SlowRestore(Mutex<std::sync::mpsc::Receiver<()>>);

    impl ReplicatedStateMachine for SlowRestore {
        fn apply(&mut self, _: LogIndex, _: &[u8]) -> Result<Bytes, StateMachineError> {
            Ok(Bytes::new())
        }
        fn snapshot(&self) -> Result<Bytes, StateMachineError> {
            Ok(Bytes::new())
        }
        fn restore(&mut self, _: &[u8]) -> Result<(), StateMachineError> {
            self.0
                .lock()
                .recv_timeout(std::time::Duration::from_secs(5))
                .map_err(|e| StateMachineError::Storage(io::Error::other(e)))
        }
    }

    /// On a single-threaded runtime, the install completes only if the restore runs off the
    /// runtime's thread: the task that lets it finish must run meanwhile.
    #[tokio::test(flavor = "current_thread")]
    async fn a_restore_does_not_hold_the_runtime() {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut adapter = built_over(Box::new(SlowRestore(Mutex::new(rx)))).await;
        let signal = tokio::spawn(async move { tx.send(()) });
        let meta = SnapshotMetaOf::<JetraftConfig>::default();
        adapter
            .install_snapshot(&meta, SnapshotData::new())
            .await
            .expect("the restore got its signal while it ran");
        assert!(signal.await.unwrap().is_ok());
    }

    #[tokio::test]
    async fn without_a_barrier_a_build_writes_nothing() {
        let (calls, _) = built(false).await;
        assert!(calls.lock().is_empty(), "{:?}", calls.lock());
    }

    /// A state machine whose snapshots are lazy views.
    struct Viewed;

    impl crate::snapshot_data::SnapshotSource for Viewed {
        fn chunks(self: Arc<Self>) -> crate::snapshot_data::SnapshotChunks {
            Box::new(std::iter::once(Ok(Bytes::from_static(b"view"))))
        }
        fn size_hint(&self) -> u64 {
            4
        }
    }

    impl ReplicatedStateMachine for Viewed {
        fn apply(&mut self, _: LogIndex, _: &[u8]) -> Result<Bytes, StateMachineError> {
            Ok(Bytes::new())
        }
        fn snapshot(&self) -> Result<Bytes, StateMachineError> {
            Ok(Bytes::from_static(b"view"))
        }
        fn snapshot_source(&self) -> Result<SnapshotData, StateMachineError> {
            Ok(SnapshotData::Lazy(Arc::new(Viewed)))
        }
        fn restore(&mut self, _: &[u8]) -> Result<(), StateMachineError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn policy_builds_wait_while_a_snapshot_is_being_sent() {
        let mut adapter = built_over(Box::new(Viewed)).await;
        let sending = adapter.get_current_snapshot().await.unwrap().unwrap();
        // Building would purge the log the replica receiving `sending` needs next.
        assert!(adapter.try_create_snapshot_builder(false).await.is_none());
        // A build replication needs is never refused.
        assert!(adapter.try_create_snapshot_builder(true).await.is_some());
        assert_eq!(
            sending.snapshot.into_bytes().unwrap(),
            Bytes::from_static(b"view")
        );
        assert!(adapter.try_create_snapshot_builder(false).await.is_some());
    }

    #[tokio::test]
    async fn policy_builds_wait_while_a_replica_replays_the_log() {
        let mut adapter = built_over(Box::new(Viewed)).await;
        let replaying = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let flag = replaying.clone();
        adapter.views_out().set_lag_check(Box::new(move || {
            flag.load(std::sync::atomic::Ordering::Relaxed).then_some(1)
        }));
        // Building would purge entries the replica has still to fetch.
        assert!(adapter.try_create_snapshot_builder(false).await.is_none());
        assert!(adapter.try_create_snapshot_builder(true).await.is_some());
        replaying.store(false, std::sync::atomic::Ordering::Relaxed);
        assert!(adapter.try_create_snapshot_builder(false).await.is_some());
    }
}
