//! `jetraft-storage` owns the node's single RocksDB instance.
//!
//! Layout (DESIGN.md section 4): a handful of column families shared by every Raft group and
//! stream on the node, with big-endian keys whose byte order is numeric order ([`keys`]), and a
//! versioned, checksummed envelope on every stored value ([`record`]). This crate knows nothing
//! about NATS beyond "a message has a subject, headers, payload and timestamp".
//!
//! What it provides:
//! - [`stream::StreamStore`]: a stream's messages, with [`mem::MemStreamStore`] and
//!   [`rocks::RocksStreamStore`], and the deterministic limit decisions in [`stream::limits`].
//! - [`consumer::ConsumerStore`]: durable consumer state (delivered, ack floor, pending).
//! - [`rocks::RaftLogStore`]: openraft's log storage per group, made durable by the node-wide
//!   group-commit [`rocks::LogWriter`].
//! - [`rocks::StreamSnapshotReader`] / [`rocks::StreamSnapshotInstaller`]: a stream's data as
//!   bounded chunks from a consistent read view, and their atomic install.
//!
//! Wiring on a node (one of each per node unless noted):
//!
//! ```text
//! let db = Db::open(data_dir)?;                         // the node's one RocksDB
//! let writer = LogWriter::start(db.clone())?;           // group commit for every Raft group
//! let log = RaftLogStore::<C, MyCodec>::new(db.clone(), writer.clone(), GroupId(g)); // per group
//! let stream = RocksStreamStore::open(db.clone(), StreamUid(uid))?;                 // per stream
//! let consumers = RocksConsumerStore::new(db.clone());
//! ```
//!
//! `MyCodec: LogCodec<C>` encodes the type config's entries, votes and log ids (the `proto`
//! crate's job); memory streams and Raft tests use [`mem::MemStreamStore`],
//! [`mem::MemConsumerStore`] and [`mem::MemLogStore`] instead.
//!
//! Invariants: corrupt bytes are never returned as data (always [`StorageError::Corrupt`]);
//! streams are keyed by [`stream::StreamUid`], never by name.

pub mod consumer;
pub mod damage;
pub mod db;
pub mod error;
pub mod keys;
pub mod mem;
pub mod record;
pub mod rocks;
pub mod stream;
pub mod subject;
pub mod verify;
mod wal_check;

pub use db::{Change, ColumnFamily, Db};
pub use error::StorageError;
