//! The `$JS.API` surface as data: errors ([`error`]), request and response types ([`types`]) and
//! stream configuration normalisation and validation ([`validate`]), byte-compatible with
//! nats-server 2.15.1 (spec/nats-protocol-and-jetstream.md §3).

pub mod consumer_validate;
pub mod error;
pub mod go_duration;
pub mod go_json;
pub mod go_schema;
pub mod types;
pub mod validate;

pub use error::{ApiError, ErrorKind};
