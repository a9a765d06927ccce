//! `jetraft-server`: a NATS-compatible server. This crate owns the client protocol
//! ([`protocol`]), connections ([`conn`]), subject routing ([`router`]), authentication
//! ([`auth`]), monitoring ([`monitor`], [`metrics`]) and configuration ([`config`]).
//! JetStream and clustering build on these in later stages; see DESIGN.md.
//!
//! Start a server with [`server::Server::start`].

#![recursion_limit = "256"]

pub mod auth;
pub mod config;
pub mod conn;
pub mod jetstream;
pub mod logging;
pub mod metrics;
pub mod monitor;
pub mod protocol;
pub mod router;
pub mod server;

pub use server::{Server, ServerHandle};
