//! TransferLeader requests and their delivered answers (accepted, or one of the two rejections).

use jetraft_proto::raft as pb;
use jetraft_proto::raft::transfer_leader_response::Result as PbResult;
use openraft::raft::{TransferLeaderError, TransferLeaderRequest, TransferLeaderResponse};

use super::{DecodeError, log_id, vote};
use crate::types::JetraftConfig;

/// Encodes a request of `group` sent by `from`.
pub fn request_to_pb(
    group: u64,
    from: u64,
    r: &TransferLeaderRequest<JetraftConfig>,
) -> pb::TransferLeaderRequest {
    pb::TransferLeaderRequest {
        group_id: group,
        from,
        from_leader: Some(vote::to_pb(r.from_leader())),
        to: *r.to_node_id(),
        last_log_id: log_id::opt_to_pb(r.last_log_id()),
    }
}

/// Decodes a request (group and sender are read by the caller).
pub fn request_from_pb(
    r: pb::TransferLeaderRequest,
) -> Result<TransferLeaderRequest<JetraftConfig>, DecodeError> {
    Ok(TransferLeaderRequest::new(
        vote::required_from_pb(r.from_leader, "TransferLeaderRequest.from_leader")?,
        r.to,
        log_id::opt_from_pb(r.last_log_id),
    ))
}

/// Encodes the target's answer.
pub fn response_to_pb(r: &TransferLeaderResponse<JetraftConfig>) -> pb::TransferLeaderResponse {
    let result = match r {
        Ok(()) => PbResult::Accepted(pb::Empty {}),
        Err(TransferLeaderError::VoteChanged { expected, actual }) => {
            PbResult::VoteChanged(pb::VoteChanged {
                expected: Some(vote::to_pb(expected)),
                actual: Some(vote::to_pb(actual)),
            })
        }
        Err(TransferLeaderError::LogNotFlushed { expected, actual }) => {
            PbResult::LogNotFlushed(pb::LogNotFlushed {
                expected: log_id::opt_to_pb(expected.as_ref()),
                actual: log_id::opt_to_pb(actual.as_ref()),
            })
        }
    };
    pb::TransferLeaderResponse {
        result: Some(result),
    }
}

/// Decodes the target's answer.
pub fn response_from_pb(
    r: pb::TransferLeaderResponse,
) -> Result<TransferLeaderResponse<JetraftConfig>, DecodeError> {
    Ok(
        match super::required(r.result, "TransferLeaderResponse.result")? {
            PbResult::Accepted(pb::Empty {}) => Ok(()),
            PbResult::VoteChanged(v) => Err(TransferLeaderError::VoteChanged {
                expected: vote::required_from_pb(v.expected, "VoteChanged.expected")?,
                actual: vote::required_from_pb(v.actual, "VoteChanged.actual")?,
            }),
            PbResult::LogNotFlushed(l) => Err(TransferLeaderError::LogNotFlushed {
                expected: log_id::opt_from_pb(l.expected),
                actual: log_id::opt_from_pb(l.actual),
            }),
        },
    )
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::convert::strategies;

    fn response() -> impl Strategy<Value = TransferLeaderResponse<JetraftConfig>> {
        prop_oneof![
            Just(Ok(())),
            (strategies::vote(), strategies::vote()).prop_map(|(expected, actual)| Err(
                TransferLeaderError::VoteChanged { expected, actual }
            )),
            (strategies::opt_log_id(), strategies::opt_log_id()).prop_map(
                |(expected, actual)| Err(TransferLeaderError::LogNotFlushed { expected, actual })
            ),
        ]
    }

    proptest! {
        #[test]
        fn request_round_trips(
            v in strategies::vote(),
            to in any::<u64>(),
            last in strategies::opt_log_id(),
        ) {
            let req = TransferLeaderRequest::<JetraftConfig>::new(v, to, last);
            let pb = request_to_pb(1, 2, &req);
            prop_assert_eq!(request_from_pb(pb).unwrap(), req);
        }

        #[test]
        fn response_round_trips(r in response()) {
            prop_assert_eq!(response_from_pb(response_to_pb(&r)).unwrap(), r);
        }
    }
}
