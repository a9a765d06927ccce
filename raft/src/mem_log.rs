//! The in-memory openraft log store used by raft-level tests: storage's
//! [`jetraft_storage::mem::MemLogStore`] instantiated for [`JetraftConfig`]. It reports a write
//! as flushed only after the entries are stored; clones share the same log. RocksDB groups use
//! `jetraft_storage::rocks::RaftLogStore` instead.

use crate::types::JetraftConfig;

/// An in-memory log for one group of [`JetraftConfig`]; clones share the same log.
pub type MemLogStore = jetraft_storage::mem::MemLogStore<JetraftConfig>;
