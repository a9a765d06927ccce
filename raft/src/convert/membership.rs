//! Memberships: joint voter sets plus every node's [`PeerNode`] address.
//!
//! Nodes are written sorted by id (openraft keeps them in a `BTreeMap`), so the same membership
//! always encodes to the same bytes.

use std::collections::{BTreeMap, BTreeSet};

use jetraft_proto::raft as pb;
use openraft::Membership;

use super::{DecodeError, log_id, required};
use crate::types::{GroupMembership, PeerNode};

/// Encodes a membership.
pub fn to_pb(m: &Membership<u64, PeerNode>) -> pb::Membership {
    pb::Membership {
        configs: m
            .get_joint_config()
            .iter()
            .map(|set| pb::VoterSet {
                ids: set.iter().copied().collect(),
            })
            .collect(),
        nodes: m
            .nodes()
            .map(|(id, node)| pb::Member {
                id: *id,
                addr: node.addr.clone(),
            })
            .collect(),
    }
}

/// Decodes a membership; openraft's validity rules apply (every voter has a node, no empty
/// voter set).
pub fn from_pb(m: pb::Membership) -> Result<Membership<u64, PeerNode>, DecodeError> {
    let configs: Vec<BTreeSet<u64>> = m
        .configs
        .into_iter()
        .map(|set| set.ids.into_iter().collect())
        .collect();
    let nodes: BTreeMap<u64, PeerNode> = m
        .nodes
        .into_iter()
        .map(|n| (n.id, PeerNode { addr: n.addr }))
        .collect();
    Membership::new(configs, nodes).map_err(|e| DecodeError::Membership(e.to_string()))
}

/// Encodes a membership with the log id that set it.
pub fn stored_to_pb(m: &GroupMembership) -> pb::StoredMembership {
    pb::StoredMembership {
        log_id: log_id::opt_to_pb(m.log_id().as_ref()),
        membership: Some(to_pb(m.membership())),
    }
}

/// Decodes a membership with the log id that set it.
pub fn stored_from_pb(m: pb::StoredMembership) -> Result<GroupMembership, DecodeError> {
    let membership = from_pb(required(m.membership, "StoredMembership.membership")?)?;
    Ok(GroupMembership::new(
        log_id::opt_from_pb(m.log_id),
        membership,
    ))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::convert::strategies;

    proptest! {
        #[test]
        fn membership_round_trips(m in strategies::membership()) {
            prop_assert_eq!(from_pb(to_pb(&m)).unwrap(), m);
        }

        #[test]
        fn stored_membership_round_trips(m in strategies::stored_membership()) {
            prop_assert_eq!(stored_from_pb(stored_to_pb(&m)).unwrap(), m);
        }
    }

    #[test]
    fn empty_membership_round_trips() {
        let m = GroupMembership::default();
        assert_eq!(stored_from_pb(stored_to_pb(&m)).unwrap(), m);
    }

    #[test]
    fn voter_without_node_is_refused() {
        let pb = pb::Membership {
            configs: vec![pb::VoterSet { ids: vec![1, 2] }],
            nodes: vec![pb::Member {
                id: 1,
                addr: "a:1".into(),
            }],
        };
        assert!(matches!(from_pb(pb), Err(DecodeError::Membership(_))));
    }
}
