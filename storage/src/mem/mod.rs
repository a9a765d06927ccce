//! In-memory implementations of the storage traits, for memory streams and for tests above the
//! storage layer. Same behaviour as [`crate::rocks`] (minus durability), checked by the same
//! conformance suites; [`MemLogStore`] passes openraft's log-storage suite like
//! [`crate::rocks::RaftLogStore`].

mod consumer;
mod raft_log;
mod stream;

pub use consumer::MemConsumerStore;
pub use raft_log::MemLogStore;
pub use stream::MemStreamStore;
