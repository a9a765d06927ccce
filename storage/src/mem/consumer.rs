//! [`MemConsumerStore`]: consumer states in a `BTreeMap`, for memory streams and tests.
//!
//! States are stored encoded ([`crate::consumer::codec`]) so the memory store exercises the same
//! codec as the RocksDB store.

use std::collections::BTreeMap;

use crate::StorageError;
use crate::consumer::{ConsumerState, ConsumerStore, codec};
use crate::stream::StreamUid;

/// Consumer states held in memory.
#[derive(Debug, Default)]
pub struct MemConsumerStore {
    states: BTreeMap<(u64, String), Vec<u8>>,
    configs: BTreeMap<(u64, String), Vec<u8>>,
}

impl MemConsumerStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl ConsumerStore for MemConsumerStore {
    fn save(
        &mut self,
        stream: StreamUid,
        name: &str,
        state: &ConsumerState,
    ) -> Result<(), StorageError> {
        self.states
            .insert((stream.0, name.to_string()), codec::encode(state));
        Ok(())
    }

    fn load(&self, stream: StreamUid, name: &str) -> Result<Option<ConsumerState>, StorageError> {
        self.states
            .get(&(stream.0, name.to_string()))
            .map(|b| codec::decode(b.as_slice()))
            .transpose()
    }

    fn delete(&mut self, stream: StreamUid, name: &str) -> Result<bool, StorageError> {
        let key = (stream.0, name.to_string());
        self.configs.remove(&key);
        Ok(self.states.remove(&key).is_some())
    }

    fn list(&self, stream: StreamUid) -> Result<Vec<String>, StorageError> {
        Ok(self
            .states
            .range((stream.0, String::new())..)
            .take_while(|((uid, _), _)| *uid == stream.0)
            .map(|((_, name), _)| name.clone())
            .collect())
    }

    fn save_config(
        &mut self,
        stream: StreamUid,
        name: &str,
        body: &[u8],
    ) -> Result<(), StorageError> {
        self.configs
            .insert((stream.0, name.to_string()), body.to_vec());
        Ok(())
    }

    fn configs(&self, stream: StreamUid) -> Result<Vec<(String, Vec<u8>)>, StorageError> {
        Ok(self
            .configs
            .range((stream.0, String::new())..)
            .take_while(|((uid, _), _)| *uid == stream.0)
            .map(|((_, name), body)| (name.clone(), body.clone()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::consumer::conformance::consumer_conformance_tests!(|| ((), MemConsumerStore::new()));
}
