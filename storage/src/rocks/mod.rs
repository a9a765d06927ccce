//! RocksDB implementations of the storage traits, all sharing the node's one [`crate::Db`].
//!
//! Every value goes through [`crate::record`] (version + CRC over key and body) and every read
//! checks it. Stream and consumer writes are atomic batches written without the WAL (durable with
//! the next atomic flush, see [`crate::db`]): the Raft log ([`RaftLogStore`], fsynced through the
//! node-wide [`LogWriter`]) is the durable source they are re-applied from. Only this module and `db.rs` name `rocksdb`.

mod bulk_ingest;
mod consumer;
#[cfg(test)]
mod crash_tests;
mod log_cache;
mod log_writer;
mod raft_log;
mod snapshot;
mod stream;
mod stream_records;
mod stream_view;
#[cfg(test)]
mod unlogged_crash_tests;

pub(crate) use bulk_ingest::clear_leftovers as clear_ingest_leftovers;
pub use consumer::RocksConsumerStore;
pub use log_writer::{LogWriter, LogWriterStats};
pub use raft_log::{GroupId, InlineSyncPolicy, LogCodec, RaftLogStore};
pub use snapshot::{StreamSnapshotInstaller, StreamSnapshotReader};
pub use stream::RocksStreamStore;
