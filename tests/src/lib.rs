//! Black-box test support for jetraft.
//!
//! The [`harness`] module spawns a server binary as a child process (jetraft, or the reference
//! `nats-server` when `JETRAFT_TEST_SERVER=nats-server`) and offers a raw-byte client and a tiny
//! HTTP client for the monitoring port. The integration tests under `tests/tests/` are written
//! against the observable behaviour of nats-server 2.15.1 and must pass against both servers.
//!
//! Running:
//! ```text
//! # against the reference (the expectations were captured from it; must always pass):
//! JETRAFT_TEST_SERVER=nats-server NATS_SERVER_BIN=/path/to/nats-server \
//!     cargo nextest run -p jetraft-tests
//! # against jetraft (binary next to the test executables, or JETRAFT_BIN=/path/to/jetraft):
//! cargo build -p jetraft-server && cargo nextest run -p jetraft-tests
//! ```
//! Environment: `JETRAFT_TEST_SERVER` (`nats-server` selects the reference, anything else
//! jetraft), `NATS_SERVER_BIN` (else `<repo>/.venv/bin/nats-server`, else `PATH`), `JETRAFT_BIN`
//! (else `<target>/<profile>/jetraft` derived from the test executable's path).
//!
//! This crate never links the server: everything goes through sockets and process signals, so
//! the tests see exactly what a client on the network would see.

pub mod harness;
