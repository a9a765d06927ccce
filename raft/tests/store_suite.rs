//! openraft's storage conformance suite, run on `MemLogStore` + `StateMachineAdapter`.
//!
//! The RocksDB log store from `jetraft-storage` must pass the same suite with the same adapter.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use jetraft_raft::JetraftConfig;
use jetraft_raft::mem_log::MemLogStore;
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
