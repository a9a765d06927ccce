//! Votes: `Vote { leader_id: (term, node), committed }` <-> `pb::Vote`, plus vote RPCs.

use jetraft_proto::raft as pb;
use openraft::raft::{VoteRequest, VoteResponse};

use super::{DecodeError, log_id, required};
use crate::types::{GroupVote, JetraftConfig};

/// Encodes a vote.
pub fn to_pb(v: &GroupVote) -> pb::Vote {
    pb::Vote {
        term: v.leader_id.term,
        node_id: v.leader_id.node_id,
        committed: v.committed,
    }
}

/// Decodes a vote (every field value is valid).
pub fn from_pb(v: pb::Vote) -> GroupVote {
    if v.committed {
        GroupVote::new_committed(v.term, v.node_id)
    } else {
        GroupVote::new(v.term, v.node_id)
    }
}

/// Decodes a vote that must be present.
pub fn required_from_pb(
    v: Option<pb::Vote>,
    field: &'static str,
) -> Result<GroupVote, DecodeError> {
    required(v, field).map(from_pb)
}

/// Encodes a vote or pre-vote request of `group` sent by `from`.
pub fn request_to_pb(group: u64, from: u64, r: &VoteRequest<JetraftConfig>) -> pb::VoteRequest {
    pb::VoteRequest {
        group_id: group,
        from,
        vote: Some(to_pb(&r.vote)),
        last_log_id: log_id::opt_to_pb(r.last_log_id.as_ref()),
        leadership_transfer: r.leadership_transfer,
    }
}

/// Decodes a vote or pre-vote request (group and sender are read by the caller).
pub fn request_from_pb(r: pb::VoteRequest) -> Result<VoteRequest<JetraftConfig>, DecodeError> {
    let mut req = VoteRequest::new(
        required_from_pb(r.vote, "VoteRequest.vote")?,
        log_id::opt_from_pb(r.last_log_id),
    );
    req.leadership_transfer = r.leadership_transfer;
    Ok(req)
}

/// Encodes a vote response.
pub fn response_to_pb(r: &VoteResponse<JetraftConfig>) -> pb::VoteResponse {
    pb::VoteResponse {
        vote: Some(to_pb(&r.vote)),
        vote_granted: r.vote_granted,
        last_log_id: log_id::opt_to_pb(r.last_log_id.as_ref()),
    }
}

/// Decodes a vote response.
pub fn response_from_pb(r: pb::VoteResponse) -> Result<VoteResponse<JetraftConfig>, DecodeError> {
    Ok(VoteResponse::new(
        required_from_pb(r.vote, "VoteResponse.vote")?,
        log_id::opt_from_pb(r.last_log_id),
        r.vote_granted,
    ))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::convert::strategies;

    proptest! {
        #[test]
        fn vote_round_trips(v in strategies::vote()) {
            prop_assert_eq!(from_pb(to_pb(&v)), v);
        }

        #[test]
        fn vote_request_round_trips(
            v in strategies::vote(),
            last in strategies::opt_log_id(),
            transfer in any::<bool>(),
        ) {
            let mut req = VoteRequest::<JetraftConfig>::new(v, last);
            req.leadership_transfer = transfer;
            let pb = request_to_pb(5, 9, &req);
            prop_assert_eq!((pb.group_id, pb.from), (5, 9));
            prop_assert_eq!(request_from_pb(pb).unwrap(), req);
        }

        #[test]
        fn vote_response_round_trips(
            v in strategies::vote(),
            last in strategies::opt_log_id(),
            granted in any::<bool>(),
        ) {
            let resp = VoteResponse::<JetraftConfig>::new(v, last, granted);
            prop_assert_eq!(response_from_pb(response_to_pb(&resp)).unwrap(), resp);
        }
    }

    #[test]
    fn request_without_vote_is_refused() {
        let pb = pb::VoteRequest::default();
        assert_eq!(
            request_from_pb(pb).unwrap_err(),
            DecodeError::Missing("VoteRequest.vote")
        );
    }
}
