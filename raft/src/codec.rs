//! [`ProstCodec`]: the Raft log's on-disk encoding for [`JetraftConfig`], with the
//! `jetraft.raft` protobuf messages ([`crate::convert`]), for
//! `jetraft_storage::rocks::RaftLogStore<JetraftConfig, ProstCodec>`.
//!
//! The storage wraps these bytes in its versioned, checksummed record, so a decode error here
//! means a format or codec bug and is reported as corruption.

use jetraft_proto::raft as pb;
use jetraft_storage::rocks::LogCodec;
use prost::Message;

use crate::convert::{entry, log_id, vote};
use crate::types::{GroupEntry, GroupLogId, GroupVote, JetraftConfig};

/// Protobuf codec for entries, votes and log ids of every jetraft group.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProstCodec;

fn decode<M: Message + Default>(bytes: &[u8]) -> Result<M, String> {
    M::decode(bytes).map_err(|e| e.to_string())
}

impl LogCodec<JetraftConfig> for ProstCodec {
    fn encode_entry(e: &GroupEntry, out: &mut Vec<u8>) {
        entry::to_pb(e).encode_raw(out);
    }

    fn decode_entry(bytes: &[u8]) -> Result<GroupEntry, String> {
        entry::from_pb(decode(bytes)?).map_err(|e| e.to_string())
    }

    fn encode_vote(v: &GroupVote, out: &mut Vec<u8>) {
        vote::to_pb(v).encode_raw(out);
    }

    fn decode_vote(bytes: &[u8]) -> Result<GroupVote, String> {
        Ok(vote::from_pb(decode::<pb::Vote>(bytes)?))
    }

    fn encode_log_id(id: &GroupLogId, out: &mut Vec<u8>) {
        log_id::to_pb(id).encode_raw(out);
    }

    fn decode_log_id(bytes: &[u8]) -> Result<GroupLogId, String> {
        Ok(log_id::from_pb(decode::<pb::LogId>(bytes)?))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::convert::entry::tests::entry as any_entry;
    use crate::convert::strategies;

    proptest! {
        #[test]
        fn entries_round_trip(e in any_entry()) {
            let mut out = vec![0xAA]; // appends, keeping what was there
            ProstCodec::encode_entry(&e, &mut out);
            prop_assert_eq!(out[0], 0xAA);
            prop_assert_eq!(ProstCodec::decode_entry(&out[1..]).unwrap(), e);
        }

        #[test]
        fn votes_and_log_ids_round_trip(v in strategies::vote(), id in strategies::log_id()) {
            let mut out = Vec::new();
            ProstCodec::encode_vote(&v, &mut out);
            prop_assert_eq!(ProstCodec::decode_vote(&out).unwrap(), v);
            out.clear();
            ProstCodec::encode_log_id(&id, &mut out);
            prop_assert_eq!(ProstCodec::decode_log_id(&out).unwrap(), id);
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_default() {
        assert!(ProstCodec::decode_entry(&[0xFF, 0xFF, 0xFF]).is_err());
        // A valid but empty message lacks the entry's required fields.
        assert!(ProstCodec::decode_entry(&[]).is_err());
    }
}
