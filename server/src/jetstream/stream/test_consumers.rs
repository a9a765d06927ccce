//! A consumer store for tests that calls a hook before every write.

use jetraft_storage::StorageError;
use jetraft_storage::consumer::{ConsumerState, ConsumerStore};
use jetraft_storage::mem::MemConsumerStore;
use jetraft_storage::stream::StreamUid;

/// What a write to a [`HookedConsumers`] stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConsumerWrite {
    /// A consumer's state.
    State,
    /// A consumer's config record.
    Config,
}

/// A [`MemConsumerStore`] that calls its hook before each state or config write (to count
/// them, or to hold the writer at a gate).
pub(crate) struct HookedConsumers {
    inner: MemConsumerStore,
    hook: Box<dyn Fn(ConsumerWrite) + Send + Sync>,
}

impl HookedConsumers {
    /// An empty store calling `hook`.
    pub(crate) fn new(hook: impl Fn(ConsumerWrite) + Send + Sync + 'static) -> Self {
        Self {
            inner: MemConsumerStore::new(),
            hook: Box::new(hook),
        }
    }
}

impl ConsumerStore for HookedConsumers {
    fn save(
        &mut self,
        stream: StreamUid,
        name: &str,
        state: &ConsumerState,
    ) -> Result<(), StorageError> {
        (self.hook)(ConsumerWrite::State);
        self.inner.save(stream, name, state)
    }

    fn load(&self, stream: StreamUid, name: &str) -> Result<Option<ConsumerState>, StorageError> {
        self.inner.load(stream, name)
    }

    fn delete(&mut self, stream: StreamUid, name: &str) -> Result<bool, StorageError> {
        self.inner.delete(stream, name)
    }

    fn list(&self, stream: StreamUid) -> Result<Vec<String>, StorageError> {
        self.inner.list(stream)
    }

    fn save_config(
        &mut self,
        stream: StreamUid,
        name: &str,
        body: &[u8],
    ) -> Result<(), StorageError> {
        (self.hook)(ConsumerWrite::Config);
        self.inner.save_config(stream, name, body)
    }

    fn configs(&self, stream: StreamUid) -> Result<Vec<(String, Vec<u8>)>, StorageError> {
        self.inner.configs(stream)
    }
}
