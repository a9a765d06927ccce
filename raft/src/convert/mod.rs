//! Conversions between openraft's types for [`JetraftConfig`](crate::JetraftConfig) and the
//! `jetraft.raft` protobuf messages, one file per family. Each module has `to_pb` (infallible)
//! and `from_pb` (checks required fields) so that `from_pb(to_pb(x)) == x` for every value.
//!
//! Orphan rules forbid `From` impls between two foreign types, hence free functions.
//!
//! Invariant: a required message that is absent is a [`DecodeError`], never a default value,
//! so a peer or a disk that drops a field cannot make us invent a vote or a log position.

pub mod append;
pub mod entry;
pub mod log_id;
pub mod membership;
pub mod snapshot;
pub mod transfer;
pub mod vote;

/// Why protobuf bytes or messages could not become openraft values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A required field was absent.
    #[error("missing field {0}")]
    Missing(&'static str),
    /// A membership that openraft refuses (e.g. a voter without a node).
    #[error("invalid membership: {0}")]
    Membership(String),
    /// The bytes are not a valid message.
    #[error("undecodable message: {0}")]
    Prost(String),
}

impl From<prost::DecodeError> for DecodeError {
    fn from(e: prost::DecodeError) -> Self {
        DecodeError::Prost(e.to_string())
    }
}

/// Returns the field or a [`DecodeError::Missing`] naming it.
pub(crate) fn required<T>(v: Option<T>, field: &'static str) -> Result<T, DecodeError> {
    v.ok_or(DecodeError::Missing(field))
}

#[cfg(test)]
pub(crate) mod strategies {
    //! proptest strategies for the openraft values the round-trip tests feed through.

    use std::collections::{BTreeMap, BTreeSet};

    use openraft::Membership;
    use proptest::prelude::*;

    use crate::types::{GroupLogId, GroupMembership, GroupVote, PeerNode};

    pub(crate) fn log_id() -> impl Strategy<Value = GroupLogId> {
        (any::<u64>(), any::<u64>(), any::<u64>())
            .prop_map(|(term, node, index)| super::log_id::new(term, node, index))
    }

    pub(crate) fn opt_log_id() -> impl Strategy<Value = Option<GroupLogId>> {
        proptest::option::of(log_id())
    }

    pub(crate) fn vote() -> impl Strategy<Value = GroupVote> {
        (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(term, node, committed)| {
            if committed {
                GroupVote::new_committed(term, node)
            } else {
                GroupVote::new(term, node)
            }
        })
    }

    /// One or two (joint) voter sets over ids 0..8 plus learners, every node with an address.
    pub(crate) fn membership() -> impl Strategy<Value = Membership<u64, PeerNode>> {
        (
            proptest::collection::vec(proptest::collection::btree_set(0u64..8, 1..4), 0..3),
            proptest::collection::btree_set(0u64..12, 0..4),
            "[a-z0-9.:]{0,12}",
        )
            .prop_map(|(configs, learners, host)| {
                let ids: BTreeSet<u64> =
                    configs.iter().flatten().copied().chain(learners).collect();
                let nodes: BTreeMap<u64, PeerNode> = ids
                    .into_iter()
                    .map(|id| (id, PeerNode::new(format!("{host}:{id}"))))
                    .collect();
                Membership::new(configs, nodes).unwrap()
            })
    }

    pub(crate) fn stored_membership() -> impl Strategy<Value = GroupMembership> {
        (opt_log_id(), membership()).prop_map(|(id, m)| GroupMembership::new(id, m))
    }
}
