//! Log entries: blank, normal ([`Command`] bytes) and membership payloads.

use jetraft_proto::raft as pb;
use jetraft_proto::raft::entry::Payload;
use openraft::EntryPayload;

use super::{DecodeError, log_id, membership, required};
use crate::types::{Command, GroupEntry};

/// Encodes an entry. The command bytes are shared, not copied.
pub fn to_pb(e: &GroupEntry) -> pb::Entry {
    let payload = match &e.payload {
        EntryPayload::Blank => Payload::Blank(pb::Blank {}),
        EntryPayload::Normal(cmd) => Payload::Normal(cmd.0.clone()),
        EntryPayload::Membership(m) => Payload::Membership(membership::to_pb(m)),
    };
    pb::Entry {
        log_id: Some(log_id::to_pb(&e.log_id)),
        payload: Some(payload),
    }
}

/// Decodes an entry.
pub fn from_pb(e: pb::Entry) -> Result<GroupEntry, DecodeError> {
    let payload = match required(e.payload, "Entry.payload")? {
        Payload::Blank(pb::Blank {}) => EntryPayload::Blank,
        Payload::Normal(bytes) => EntryPayload::Normal(Command(bytes)),
        Payload::Membership(m) => EntryPayload::Membership(membership::from_pb(m)?),
    };
    Ok(openraft::Entry {
        log_id: log_id::from_pb(required(e.log_id, "Entry.log_id")?),
        payload,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use bytes::Bytes;
    use proptest::prelude::*;

    use super::*;
    use crate::convert::strategies;

    /// Entries of all three kinds.
    pub(crate) fn entry() -> impl Strategy<Value = GroupEntry> {
        let payload = prop_oneof![
            Just(EntryPayload::Blank),
            proptest::collection::vec(any::<u8>(), 0..64)
                .prop_map(|b| EntryPayload::Normal(Command(Bytes::from(b)))),
            strategies::membership().prop_map(EntryPayload::Membership),
        ];
        (strategies::log_id(), payload)
            .prop_map(|(log_id, payload)| openraft::Entry { log_id, payload })
    }

    proptest! {
        #[test]
        fn entry_round_trips(e in entry()) {
            prop_assert_eq!(from_pb(to_pb(&e)).unwrap(), e);
        }
    }

    #[test]
    fn empty_command_is_not_a_blank_entry() {
        let e = openraft::Entry {
            log_id: log_id::new(1, 1, 1),
            payload: EntryPayload::Normal(Command(Bytes::new())),
        };
        assert_eq!(from_pb(to_pb(&e)).unwrap(), e);
    }

    #[test]
    fn entry_without_payload_is_refused() {
        let e = pb::Entry {
            log_id: Some(log_id::to_pb(&log_id::new(1, 1, 1))),
            payload: None,
        };
        assert_eq!(
            from_pb(e).unwrap_err(),
            DecodeError::Missing("Entry.payload")
        );
    }
}
