//! `jetraft-storage` owns the node's single RocksDB instance.
//!
//! Layout (DESIGN.md section 4): a handful of column families shared by every Raft group and
//! stream on the node, with big-endian keys whose byte order is numeric order. This crate knows
//! nothing about NATS beyond "a message has a subject, headers, payload and timestamp".
//!
//! What exists today: opening the database with its column families ([`Db`]) and the key
//! encodings ([`keys`]). The stream store, consumer store and Raft log store are built on top of
//! these by the storage issue.

pub mod db;
pub mod error;
pub mod keys;

pub use db::{ColumnFamily, Db};
pub use error::StorageError;
