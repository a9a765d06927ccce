//! `jetraft-server`: a NATS-compatible server. This crate owns the client protocol
//! ([`protocol`]), connections ([`conn`]), subject routing ([`router`]), authentication
//! ([`auth`]), monitoring ([`monitor`], [`metrics`]) and configuration ([`config`]).
//! Core NATS across nodes (interest and message forwarding over gRPC) is [`cluster`].
//! JetStream builds on these in later stages; see DESIGN.md.
//!
//! Start a server with [`server::Server::start`].

#![recursion_limit = "256"]

pub mod auth;
pub mod cluster;
pub mod config;
pub mod conn;
pub mod control;
pub mod internal;
pub mod jetstream;
pub mod lame_duck;
pub mod logging;
pub mod metrics;
pub mod monitor;
pub mod protocol;
pub mod router;
pub mod server;

pub use server::{Server, ServerHandle};
