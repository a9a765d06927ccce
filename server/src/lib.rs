//! `jetraft-server`: a NATS-compatible server with JetStream.
//!
//! Layers, each importing only the ones before it (the `tidy` test checks the arrows that
//! matter):
//! - [`protocol`] (the sans-IO client protocol), [`router`] (subjects and the interest index),
//!   [`config`], [`accounts`] (what accounts share), [`auth`], [`node`] (what this node is);
//! - [`bus`]: routing messages to local subscribers, internal subscribers and peers;
//! - [`conn`] (client connections), [`cluster`] (links to peers, interest and forwarding),
//!   [`jetstream`] (streams, consumers, the `$JS.API`), each holding a [`bus::Bus`] and small
//!   read-only views, never the server object;
//! - [`trace`]: message tracing (`Nats-Trace-Dest`), used by [`conn`] and [`cluster`];
//! - [`monitor`]: the monitoring HTTP endpoints over read-only views, and the web console at `/`;
//! - [`system`]: the system account's services (`$SYS.REQ.SERVER.*`), over the monitoring
//!   endpoints;
//! - `server`: the wiring that builds all of the above; only `main` uses it
//!   ([`server::start`]).
//! - `testkit` (tests only): in-process JetStream clusters over the raft crate's
//!   `MemTransport`, for the cluster tests of the unit-test tier.

#![recursion_limit = "256"]

pub mod accounts;
pub mod auth;
pub mod bus;
pub mod cluster;
pub mod config;
pub mod conn;
pub mod control;
pub mod jetstream;
pub mod logging;
pub mod monitor;
pub mod node;
pub mod protocol;
pub mod router;
pub mod server;
pub mod system;
#[cfg(test)]
mod testkit;
pub mod tls;
pub mod trace;

pub use server::{ServerHandle, start};
