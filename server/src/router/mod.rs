//! Message routing: subject syntax and the subscription interest index.
//!
//! - [`subject`]: validation of subjects, patterns and queue names; wildcard matching and
//!   subset checks. Pure functions, no state.
//! - [`sublist`]: [`Sublist`], the trie of subscription patterns with a match-result cache
//!   that every publish consults.
//!
//! This module knows nothing about connections, accounts or permissions: values stored in a
//! [`Sublist`] are opaque to it, and delivery (including picking one member per queue group)
//! belongs to the caller.

pub mod subject;
pub mod sublist;

pub use sublist::{MatchResult, QueueGroup, Sublist, SublistError, SublistStats};
