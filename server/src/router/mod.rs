//! Message routing: subject syntax and the subscription interest index.
//!
//! - [`subject`]: validation of subjects, patterns and queue names; wildcard matching and
//!   subset checks. Pure functions, no state.
//! - [`sublist`]: [`Sublist`], the trie of subscription patterns with a match-result cache
//!   that every publish consults.
//! - [`interest_watch`]: callbacks for whoever waits for interest in a literal subject (push
//!   consumers) when a matching subscription comes or goes.
//!
//! This module knows nothing about connections, accounts or permissions: values stored in a
//! [`Sublist`] are opaque to it, and delivery (including picking one member per queue group)
//! belongs to the caller.

pub mod interest_watch;
pub mod subject;
pub mod sublist;

pub use sublist::{MatchResult, QueueGroup, Sublist, SublistError, SublistStats};
