//! Black-box test support for jetraft.
//!
//! The [`harness`] module spawns a server binary as a child process (jetraft, or the reference
//! `nats-server` when `JETRAFT_TEST_SERVER=nats-server`) and offers a raw-byte client and a tiny
//! HTTP client for the monitoring port. The integration tests under `tests/tests/` are written
//! against the observable behaviour of nats-server 2.15.1 and must pass against both servers.
//!
//! This crate never links the server: everything goes through sockets and process signals, so
//! the tests see exactly what a client on the network would see.

pub mod harness;
