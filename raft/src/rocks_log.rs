//! RocksDB-backed group logs: [`RocksLogs`] hands out each group's
//! [`RaftLogStore`](jetraft_storage::rocks::RaftLogStore) over the node's one [`Db`] and
//! group-commit [`LogWriter`], and deletes a group's log when the group leaves the node.
//!
//! Invariant: a group's log data is deleted only after its Raft core stopped
//! ([`RocksLogs::remove_group`]), so no append can land after the delete.

use std::path::Path;
use std::sync::Arc;

use jetraft_storage::rocks::{self, LogWriter};
use jetraft_storage::{Db, StorageError};
use openraft::async_runtime::WatchReceiver;

use crate::GroupId;
use crate::codec::ProstCodec;
use crate::error::RaftError;
use crate::in_flight::InFlight;
use crate::network::Transport;
use crate::registry::GroupRegistry;
use crate::sm::ReplicatedStateMachine;
use crate::types::{GroupRaft, JetraftConfig};

/// A group's RocksDB log, protobuf-encoded.
pub type GroupLogStore = rocks::RaftLogStore<JetraftConfig, ProstCodec>;

/// Appends fsync inline (when the syncer is idle) only on a single-voter leader whose one
/// proposal in flight is a client's (a lone publish; [`crate::in_flight`]): its commit waits
/// for that fsync alone. Not on a leader with followers, whose replication starts only once its
/// append returned, so its fsync must run alongside the followers'; not on a follower (measured:
/// no gain on R3 latency) or with more proposals in flight, where an fsync on the group's core
/// would stop it from appending the next ones meanwhile (-7% async publish and pull throughput
/// when tried).
fn inline_for_a_lone_client_write(
    raft: &GroupRaft,
    in_flight: Arc<InFlight>,
) -> rocks::InlineSyncPolicy {
    let metrics = raft.server_metrics();
    Box::new(move || {
        if !in_flight.lone_client_proposal() {
            return false;
        }
        let m = metrics.borrow_watched();
        m.state == openraft::ServerState::Leader
            && m.membership_config
                .membership()
                .voter_ids()
                .nth(1)
                .is_none()
    })
}

/// The node's RocksDB and log writer, shared by every group's log. Clones share both.
#[derive(Debug, Clone)]
pub struct RocksLogs {
    /// The node's one database.
    db: Db,
    /// Group commit for every group's appends.
    writer: LogWriter,
}

impl RocksLogs {
    /// Logs over an already open database and its writer.
    pub fn new(db: Db, writer: LogWriter) -> Self {
        Self { db, writer }
    }

    /// Opens (or creates) the database in `dir` and starts its log writer.
    pub fn open(dir: &Path) -> Result<Self, StorageError> {
        let db = Db::open(dir)?;
        let writer = LogWriter::start(db.clone())?;
        Ok(Self { db, writer })
    }

    /// The node's database, for state machines that store next to the logs.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The group-commit writer's counters (fsyncs made by the syncer and inline).
    pub fn writer_stats(&self) -> &rocks::LogWriterStats {
        self.writer.stats()
    }

    /// The log of `group` (empty if the group never ran here).
    pub fn log(&self, group: GroupId) -> GroupLogStore {
        GroupLogStore::new(
            self.db.clone(),
            self.writer.clone(),
            rocks::GroupId(group.0),
        )
    }

    /// Starts `group` on `registry` over its RocksDB log (resuming whatever the log holds).
    pub async fn create_group<T: Transport>(
        &self,
        registry: &GroupRegistry<T>,
        group: GroupId,
        sm: Box<dyn ReplicatedStateMachine>,
    ) -> Result<GroupRaft, RaftError> {
        let log = self.log(group);
        let raft = registry.create_group(group, log.clone(), sm).await?;
        if let Some(in_flight) = registry.in_flight(group) {
            log.set_inline_sync(inline_for_a_lone_client_write(&raft, in_flight));
        }
        Ok(raft)
    }

    /// [`Self::create_group`] over an unsynced log
    /// ([`RaftLogStore::unsynced`](jetraft_storage::rocks::RaftLogStore::unsynced)): appends
    /// count as flushed without waiting for a WAL fsync. For memory streams.
    pub async fn create_unsynced_group<T: Transport>(
        &self,
        registry: &GroupRegistry<T>,
        group: GroupId,
        sm: Box<dyn ReplicatedStateMachine>,
    ) -> Result<GroupRaft, RaftError> {
        registry
            .create_group(group, self.log(group).unsynced(), sm)
            .await
    }

    /// Stops `group` on `registry`, then deletes its log and Raft state from the database.
    pub async fn remove_group<T: Transport>(
        &self,
        registry: &GroupRegistry<T>,
        group: GroupId,
    ) -> Result<(), RaftError> {
        registry.remove_group(group).await?;
        self.log(group)
            .destroy()
            .await
            .map_err(|e| RaftError::Stopped {
                group,
                reason: format!("deleting the group's log failed: {e}"),
            })
    }
}
