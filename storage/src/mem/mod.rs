//! In-memory implementations of the storage traits, for memory streams and for tests above the
//! storage layer. Same behaviour as [`crate::rocks`], checked by the same conformance suites.

mod consumer;
mod stream;

pub use consumer::MemConsumerStore;
pub use stream::MemStreamStore;
