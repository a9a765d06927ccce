//! In-memory Raft log store: **test support only**.
//!
//! [`MemLogStore`] implements openraft's [`RaftLogStorage`] and [`RaftLogReader`] with a
//! `BTreeMap` so raft-level tests run without RocksDB. Nothing survives a drop, so it must never
//! back a real group: a node that restarts with it would vote as if it had a log it lost.
//! The production store is `jetraft-storage`'s RocksDB log store, which plugs into
//! [`GroupRegistry::create_group`](crate::GroupRegistry::create_group) the same way.
//!
//! Invariants:
//! - `append` completes the [`IOFlushed`] callback only after the entries are in the map
//!   ("persisted" for this store), never before.
//! - Entries are contiguous from `last_purged + 1` to the last index.
//! - The mutex is a `parking_lot` mutex and is never held across `.await`.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::sync::Arc;

use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};
use parking_lot::Mutex;

use crate::types::{GroupEntry, GroupLogId, GroupVote, JetraftConfig};

#[derive(Default)]
struct MemLog {
    /// Vote last saved; a node must never forget it.
    vote: Option<GroupVote>,
    /// Committed log id, saved so a restart can re-apply up to it.
    committed: Option<GroupLogId>,
    /// Last log id removed by `purge`; entries at or below it are gone.
    last_purged: Option<GroupLogId>,
    /// The live entries by index.
    entries: BTreeMap<u64, GroupEntry>,
}

/// An in-memory openraft log store for tests. Clones share the same log.
#[derive(Clone, Default)]
pub struct MemLogStore {
    /// Shared by the store and its readers (openraft reads from a separate task).
    log: Arc<Mutex<MemLog>>,
}

impl MemLogStore {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of live (unpurged) entries, for tests that check purging.
    pub fn len(&self) -> usize {
        self.log.lock().entries.len()
    }

    /// Whether the log holds no live entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl RaftLogReader<JetraftConfig> for MemLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<GroupEntry>, io::Error> {
        let log = self.log.lock();
        Ok(log.entries.range(range).map(|(_, e)| e.clone()).collect())
    }

    async fn read_vote(&mut self) -> Result<Option<GroupVote>, io::Error> {
        Ok(self.log.lock().vote)
    }
}

impl RaftLogStorage<JetraftConfig> for MemLogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<JetraftConfig>, io::Error> {
        let log = self.log.lock();
        let last = log.entries.values().next_back().map(|e| e.log_id);
        Ok(LogState {
            last_purged_log_id: log.last_purged,
            last_log_id: last.or(log.last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &GroupVote) -> Result<(), io::Error> {
        self.log.lock().vote = Some(*vote);
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<GroupLogId>) -> Result<(), io::Error> {
        self.log.lock().committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<GroupLogId>, io::Error> {
        Ok(self.log.lock().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<JetraftConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = GroupEntry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        {
            let mut log = self.log.lock();
            for entry in entries {
                log.entries.insert(entry.log_id.index, entry);
            }
        }
        // "Persisted": the entries are in the map, so the flush may be reported.
        callback.io_completed(Ok(()));
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<GroupLogId>) -> Result<(), io::Error> {
        let mut log = self.log.lock();
        let from = last_log_id.map_or(0, |id| id.index + 1);
        let _removed = log.entries.split_off(&from);
        Ok(())
    }

    async fn purge(&mut self, log_id: GroupLogId) -> Result<(), io::Error> {
        let mut log = self.log.lock();
        let keep = log.entries.split_off(&(log_id.index + 1));
        log.entries = keep;
        log.last_purged = Some(log_id);
        Ok(())
    }
}
