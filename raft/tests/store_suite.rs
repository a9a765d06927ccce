//! openraft's storage conformance suite, run on `MemLogStore` + `StateMachineAdapter` and on the
//! RocksDB log store with the protobuf codec (`GroupLogStore`), each build in its own tempdir.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use jetraft_raft::GroupId;
use jetraft_raft::JetraftConfig;
use jetraft_raft::mem_log::MemLogStore;
use jetraft_raft::rocks_log::{GroupLogStore, RocksLogs};
use jetraft_raft::sm::StateMachineAdapter;
use openraft::StorageError;
use openraft::testing::log::{StoreBuilder, Suite};
use support::ListMachine;

struct MemBuilder;

impl StoreBuilder<JetraftConfig, MemLogStore, StateMachineAdapter> for MemBuilder {
    async fn build(
        &self,
    ) -> Result<((), MemLogStore, StateMachineAdapter), StorageError<JetraftConfig>> {
        let sm = StateMachineAdapter::new(Box::new(ListMachine::default())).unwrap();
        Ok(((), MemLogStore::new(), sm))
    }
}

#[tokio::test]
async fn mem_log_store_passes_openraft_conformance_suite() {
    if let Err(e) = Suite::test_all(MemBuilder).await {
        panic!("conformance suite failed: {e}");
    }
}

struct RocksBuilder;

impl StoreBuilder<JetraftConfig, GroupLogStore, StateMachineAdapter, tempfile::TempDir>
    for RocksBuilder
{
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, GroupLogStore, StateMachineAdapter), StorageError<JetraftConfig>>
    {
        let dir = tempfile::tempdir().unwrap();
        let logs = RocksLogs::open(dir.path()).unwrap();
        let sm = StateMachineAdapter::new(Box::new(ListMachine::default())).unwrap();
        // The tempdir is the guard: it outlives the store and is deleted after each case.
        Ok((dir, logs.log(GroupId(7)), sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rocks_log_store_with_prost_codec_passes_openraft_conformance_suite() {
    if let Err(e) = Suite::test_all(RocksBuilder).await {
        panic!("conformance suite failed: {e}");
    }
}
