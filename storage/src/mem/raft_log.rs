//! [`MemLogStore`]: openraft's log storage held in memory, for Raft tests above the storage layer
//! (`MemTransport` clusters) and for anything that needs a log without a disk.
//!
//! Invariants: same contract as [`crate::rocks::RaftLogStore`], minus durability: `append`
//! completes its callback before returning (memory is as durable as it gets); entries are kept in
//! a `BTreeMap` by index; truncation and purge remove ranges, so no hole is ever left. Clones share
//! the same log (the clone is the reader).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::type_config::alias::{LogIdOf, VoteOf};
use openraft::{LogId, OptionalSend, RaftLogReader, RaftTypeConfig};

struct Inner<C: RaftTypeConfig> {
    entries: BTreeMap<u64, C::Entry>,
    vote: Option<VoteOf<C>>,
    committed: Option<LogIdOf<C>>,
    purged: Option<LogIdOf<C>>,
}

/// An in-memory Raft log for one group; cheap to clone.
pub struct MemLogStore<C: RaftTypeConfig> {
    inner: Arc<Mutex<Inner<C>>>,
}

impl<C: RaftTypeConfig> Clone for MemLogStore<C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<C: RaftTypeConfig> Default for MemLogStore<C> {
    fn default() -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                entries: BTreeMap::new(),
                vote: None,
                committed: None,
                purged: None,
            })),
        }
    }
}

impl<C: RaftTypeConfig> Debug for MemLogStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemLogStore").finish_non_exhaustive()
    }
}

impl<C: RaftTypeConfig> MemLogStore<C> {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of live (unpurged) entries, for tests that check purging.
    pub fn len(&self) -> usize {
        self.inner.lock().map_or(0, |g| g.entries.len())
    }

    /// Whether the log holds no live entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> Result<MutexGuard<'_, Inner<C>>, io::Error> {
        self.inner
            .lock()
            .map_err(|_| io::Error::other("memory log lock poisoned"))
    }
}

impl<C> RaftLogReader<C> for MemLogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Clone,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, io::Error> {
        Ok(self
            .lock()?
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }

    async fn read_vote(&mut self) -> Result<Option<VoteOf<C>>, io::Error> {
        Ok(self.lock()?.vote.clone())
    }
}

impl<C> RaftLogStorage<C> for MemLogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Clone,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, io::Error> {
        let inner = self.lock()?;
        let last = inner.entries.values().next_back().map(|e| {
            let (leader, index) = e.log_id_parts();
            LogId::new(leader.clone(), index)
        });
        Ok(LogState {
            last_purged_log_id: inner.purged.clone(),
            last_log_id: last.or_else(|| inner.purged.clone()),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &VoteOf<C>) -> Result<(), io::Error> {
        self.lock()?.vote = Some(vote.clone());
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogIdOf<C>>) -> Result<(), io::Error> {
        self.lock()?.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogIdOf<C>>, io::Error> {
        Ok(self.lock()?.committed.clone())
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<C>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        {
            let mut inner = self.lock()?;
            for e in entries {
                inner.entries.insert(e.log_id_parts().1, e);
            }
        }
        callback.io_completed(Ok(()));
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogIdOf<C>>) -> Result<(), io::Error> {
        let from = last_log_id.map_or(0, |id| id.index() + 1);
        drop(self.lock()?.entries.split_off(&from));
        Ok(())
    }

    async fn purge(&mut self, log_id: LogIdOf<C>) -> Result<(), io::Error> {
        let mut inner = self.lock()?;
        let keep = inner.entries.split_off(&(log_id.index() + 1));
        inner.entries = keep;
        inner.purged = Some(log_id);
        Ok(())
    }
}
