//! Log ids: `LogId { leader_id: (term, node), index }` <-> `pb::LogId`.

use jetraft_proto::raft as pb;
use openraft::LogId;
use openraft::impls::leader_id_adv::LeaderId;

use crate::types::GroupLogId;

/// The log id at `index` proposed by `node` in `term`.
pub fn new(term: u64, node: u64, index: u64) -> GroupLogId {
    LogId::new(
        LeaderId {
            term,
            node_id: node,
        },
        index,
    )
}

/// Encodes a log id.
pub fn to_pb(id: &GroupLogId) -> pb::LogId {
    pb::LogId {
        term: id.leader_id.term,
        leader_node: id.leader_id.node_id,
        index: id.index,
    }
}

/// Decodes a log id (every field value is valid).
pub fn from_pb(id: pb::LogId) -> GroupLogId {
    new(id.term, id.leader_node, id.index)
}

/// Encodes an optional log id (absent stays absent).
pub fn opt_to_pb(id: Option<&GroupLogId>) -> Option<pb::LogId> {
    id.map(to_pb)
}

/// Decodes an optional log id.
pub fn opt_from_pb(id: Option<pb::LogId>) -> Option<GroupLogId> {
    id.map(from_pb)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::convert::strategies;

    proptest! {
        #[test]
        fn log_id_round_trips(id in strategies::opt_log_id()) {
            prop_assert_eq!(opt_from_pb(opt_to_pb(id.as_ref())), id);
        }
    }

    #[test]
    fn fields_map_one_to_one() {
        let pb = to_pb(&new(3, 7, 42));
        assert_eq!((pb.term, pb.leader_node, pb.index), (3, 7, 42));
    }
}
