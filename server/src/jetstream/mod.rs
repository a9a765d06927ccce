//! JetStream: the `$JS.API` JSON types and errors ([`api`]) and the replicated stream state
//! machine ([`stream`]).
//!
//! Everything here is pure: no sockets, tasks or clocks. The API dispatcher, the meta group and
//! the server wiring call into these modules; time always comes in as an argument or inside a
//! replicated command, so every replica computes the same answers.

pub mod api;
pub mod stream;
