//! AppendEntries requests, all four responses (success, partial success, conflict, higher
//! vote) and the answers of a pipelined StreamAppend.

use jetraft_proto::raft as pb;
use jetraft_proto::raft::append_entries_response::Result as PbResult;
use jetraft_proto::raft::stream_append_response::Result as StreamResult;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, StreamAppendError, StreamAppendResult,
};

use super::{DecodeError, entry, log_id, required, vote};
use crate::types::JetraftConfig;

/// Encodes a request of `group` sent by `from`.
pub fn request_to_pb(
    group: u64,
    from: u64,
    r: &AppendEntriesRequest<JetraftConfig>,
) -> pb::AppendEntriesRequest {
    pb::AppendEntriesRequest {
        group_id: group,
        from,
        vote: Some(vote::to_pb(&r.vote)),
        prev_log_id: log_id::opt_to_pb(r.prev_log_id.as_ref()),
        entries: r.entries.iter().map(entry::to_pb).collect(),
        leader_commit: log_id::opt_to_pb(r.leader_commit.as_ref()),
    }
}

/// Decodes a request (group and sender are read by the caller).
pub fn request_from_pb(
    r: pb::AppendEntriesRequest,
) -> Result<AppendEntriesRequest<JetraftConfig>, DecodeError> {
    Ok(AppendEntriesRequest {
        vote: vote::required_from_pb(r.vote, "AppendEntriesRequest.vote")?,
        prev_log_id: log_id::opt_from_pb(r.prev_log_id),
        entries: r
            .entries
            .into_iter()
            .map(entry::from_pb)
            .collect::<Result<_, _>>()?,
        leader_commit: log_id::opt_from_pb(r.leader_commit),
    })
}

/// Encodes a response.
pub fn response_to_pb(r: &AppendEntriesResponse<JetraftConfig>) -> pb::AppendEntriesResponse {
    let result = match r {
        AppendEntriesResponse::Success => PbResult::Success(pb::Empty {}),
        AppendEntriesResponse::PartialSuccess(m) => PbResult::PartialSuccess(pb::PartialSuccess {
            matching: log_id::opt_to_pb(m.as_ref()),
        }),
        AppendEntriesResponse::Conflict => PbResult::Conflict(pb::Empty {}),
        AppendEntriesResponse::HigherVote(v) => PbResult::HigherVote(vote::to_pb(v)),
    };
    pb::AppendEntriesResponse {
        result: Some(result),
    }
}

/// Decodes a response.
pub fn response_from_pb(
    r: pb::AppendEntriesResponse,
) -> Result<AppendEntriesResponse<JetraftConfig>, DecodeError> {
    Ok(match required(r.result, "AppendEntriesResponse.result")? {
        PbResult::Success(pb::Empty {}) => AppendEntriesResponse::Success,
        PbResult::PartialSuccess(p) => {
            AppendEntriesResponse::PartialSuccess(log_id::opt_from_pb(p.matching))
        }
        PbResult::Conflict(pb::Empty {}) => AppendEntriesResponse::Conflict,
        PbResult::HigherVote(v) => AppendEntriesResponse::HigherVote(vote::from_pb(v)),
    })
}

/// Encodes one answer of a StreamAppend stream.
pub fn stream_result_to_pb(r: &StreamAppendResult<JetraftConfig>) -> pb::StreamAppendResponse {
    let result = match r {
        Ok(m) => StreamResult::Matching(pb::PartialSuccess {
            matching: log_id::opt_to_pb(m.as_ref()),
        }),
        Err(StreamAppendError::Conflict(l)) => StreamResult::Conflict(log_id::to_pb(l)),
        Err(StreamAppendError::HigherVote(v)) => StreamResult::HigherVote(vote::to_pb(v)),
    };
    pb::StreamAppendResponse {
        result: Some(result),
    }
}

/// Decodes one answer of a StreamAppend stream.
pub fn stream_result_from_pb(
    r: pb::StreamAppendResponse,
) -> Result<StreamAppendResult<JetraftConfig>, DecodeError> {
    Ok(match required(r.result, "StreamAppendResponse.result")? {
        StreamResult::Matching(m) => Ok(log_id::opt_from_pb(m.matching)),
        StreamResult::Conflict(l) => Err(StreamAppendError::Conflict(log_id::from_pb(l))),
        StreamResult::HigherVote(v) => Err(StreamAppendError::HigherVote(vote::from_pb(v))),
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use prost::Message;

    use super::*;
    use crate::convert::entry::tests::entry;
    use crate::convert::strategies;

    fn response() -> impl Strategy<Value = AppendEntriesResponse<JetraftConfig>> {
        prop_oneof![
            Just(AppendEntriesResponse::Success),
            strategies::opt_log_id().prop_map(AppendEntriesResponse::PartialSuccess),
            Just(AppendEntriesResponse::Conflict),
            strategies::vote().prop_map(AppendEntriesResponse::HigherVote),
        ]
    }

    fn stream_result() -> impl Strategy<Value = StreamAppendResult<JetraftConfig>> {
        prop_oneof![
            strategies::opt_log_id().prop_map(Ok),
            strategies::log_id().prop_map(|l| Err(StreamAppendError::Conflict(l))),
            strategies::vote().prop_map(|v| Err(StreamAppendError::HigherVote(v))),
        ]
    }

    proptest! {
        #[test]
        fn request_round_trips_through_bytes(
            v in strategies::vote(),
            prev in strategies::opt_log_id(),
            entries in proptest::collection::vec(entry(), 0..5),
            commit in strategies::opt_log_id(),
        ) {
            let req = AppendEntriesRequest::<JetraftConfig> {
                vote: v,
                prev_log_id: prev,
                entries,
                leader_commit: commit,
            };
            let bytes = request_to_pb(3, 4, &req).encode_to_vec();
            let pb = pb::AppendEntriesRequest::decode(bytes.as_slice()).unwrap();
            prop_assert_eq!((pb.group_id, pb.from), (3, 4));
            // AppendEntriesRequest has no PartialEq: compare field by field.
            let back = request_from_pb(pb).unwrap();
            prop_assert_eq!(back.vote, req.vote);
            prop_assert_eq!(back.prev_log_id, req.prev_log_id);
            prop_assert_eq!(back.entries, req.entries);
            prop_assert_eq!(back.leader_commit, req.leader_commit);
        }

        #[test]
        fn every_stream_answer_round_trips_through_bytes(r in stream_result()) {
            let bytes = stream_result_to_pb(&r).encode_to_vec();
            let pb = pb::StreamAppendResponse::decode(bytes.as_slice()).unwrap();
            prop_assert_eq!(stream_result_from_pb(pb).unwrap(), r);
        }

        #[test]
        fn every_response_variant_round_trips_through_bytes(r in response()) {
            let bytes = response_to_pb(&r).encode_to_vec();
            let pb = pb::AppendEntriesResponse::decode(bytes.as_slice()).unwrap();
            prop_assert_eq!(response_from_pb(pb).unwrap(), r);
        }
    }

    #[test]
    fn partial_success_of_nothing_differs_from_success() {
        let none = AppendEntriesResponse::<JetraftConfig>::PartialSuccess(None);
        let bytes = response_to_pb(&none).encode_to_vec();
        let back = response_from_pb(pb::AppendEntriesResponse::decode(bytes.as_slice()).unwrap());
        assert_eq!(back.unwrap(), none);
    }
}
