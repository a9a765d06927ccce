//! JetStream: streams replicated by Raft, the meta group that places them, and the `$JS.API`
//! surface. See DESIGN.md §2-3.
//!
//! Pure parts (no sockets, tasks or clocks; time comes in as an argument or inside a
//! replicated command, so every replica computes the same answers):
//! - [`account`]: which accounts have JetStream, and stream keys per account.
//! - [`api`]: the `$JS.API` JSON types, the error table and config validation.
//! - [`stream`]: the replicated stream state machine.
//! - [`meta`]: the meta state machine (peers, stream placement) and the formation rule.
//! - [`op`]: which operation an API subject names and who answers it.
//! - [`transform`]: subject transforms of sources.
//! - [`backup`]: the stream backup format and requests (STREAM.SNAPSHOT/RESTORE).
//!
//! The runtime ([`runtime`]) ties them to Raft groups, internal subscriptions and the cluster.

pub mod account;
pub mod ack;
pub mod api;
pub mod backup;
pub mod meta;
pub mod op;
pub mod runtime;
pub mod stream;
pub mod transform;
