//! [`RaftError`]: what callers of the raft layer see when a group operation fails.
//!
//! openraft's own error types are mapped here once, so the server never matches on openraft
//! generics. Retryable: [`RaftError::NotLeader`] (go to the hint), [`RaftError::Timeout`].
//! Not retryable without application dedup: [`RaftError::OutcomeUnknown`]. Fatal for the group:
//! [`RaftError::Stopped`].

use std::time::Duration;

use crate::{GroupId, NodeId, TimingError};

/// A failed operation on a Raft group.
#[derive(Debug, thiserror::Error)]
pub enum RaftError {
    /// This node does not host the group.
    #[error("group {group} not found on this node")]
    GroupNotFound {
        /// The group asked for.
        group: GroupId,
    },
    /// The group already runs on this node.
    #[error("group {group} already exists on this node")]
    GroupExists {
        /// The group asked for.
        group: GroupId,
    },
    /// This replica is not the leader; retry on `leader` if known.
    #[error("not the leader of group {group} (leader hint: {leader:?})")]
    NotLeader {
        /// The group proposed to.
        group: GroupId,
        /// The leader this replica believes in, if any.
        leader: Option<NodeId>,
        /// That leader's cluster address, if known.
        leader_addr: Option<String>,
    },
    /// The proposal's entry was replaced when leadership changed: it may or may not commit.
    /// Retrying needs application-level deduplication.
    #[error("outcome of proposal to group {group} unknown after leader change (hint: {leader:?})")]
    OutcomeUnknown {
        /// The group proposed to.
        group: GroupId,
        /// The new leader, if known.
        leader: Option<NodeId>,
    },
    /// The operation did not finish within its deadline.
    #[error("group {group} operation timed out after {after:?}")]
    Timeout {
        /// The group operated on.
        group: GroupId,
        /// The deadline that elapsed.
        after: Duration,
    },
    /// A membership change was refused.
    #[error("membership change on group {group} refused: {reason}")]
    Membership {
        /// The group operated on.
        group: GroupId,
        /// openraft's explanation.
        reason: String,
    },
    /// openraft refused the write for another reason (e.g. a failed precondition).
    #[error("write to group {group} refused: {reason}")]
    Rejected {
        /// The group operated on.
        group: GroupId,
        /// openraft's explanation.
        reason: String,
    },
    /// Initialising the group was refused (e.g. it is already initialised).
    #[error("initialising group {group} refused: {reason}")]
    Initialize {
        /// The group operated on.
        group: GroupId,
        /// openraft's explanation.
        reason: String,
    },
    /// The group's Raft core stopped (shutdown, storage failure or panic); fail-stop.
    #[error("group {group} stopped: {reason}")]
    Stopped {
        /// The group operated on.
        group: GroupId,
        /// Why it stopped.
        reason: String,
    },
    /// The timing configuration is unusable.
    #[error("invalid raft timing")]
    Timing(#[from] TimingError),
    /// openraft refused the derived configuration.
    #[error("invalid openraft config: {reason}")]
    Config {
        /// openraft's explanation.
        reason: String,
    },
}
