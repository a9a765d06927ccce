//! Applying a `Restore` part (STREAM.RESTORE): messages go in at their original sequences and
//! times (skipped sequences become deleted gaps); the last part sets the backed-up stream's
//! position (`first_seq` of an empty stream, `last_seq` past deleted messages at the tail) and
//! its consumers.
//!
//! Idempotent, as crash recovery needs (see `recovery`): a message at or below the stream's
//! last sequence is already there and is skipped; the position and the consumers are set, not
//! added to.

use bytes::Bytes;
use jetraft_proto::stream::Restore;
use jetraft_raft::{LogIndex, StateMachineError};
use jetraft_storage::stream::StoredMsg;

use super::{StreamStateMachine, storage_err};

/// Subject of the transient message that carries `last_seq` past the last present message.
const PLACEHOLDER_SUBJECT: &str = "_jetraft.restore.placeholder";

/// The answer of a part that went in.
pub const RESTORED: &str = "ok";

impl StreamStateMachine {
    /// Applies one part of a restore; answers [`RESTORED`] or the reason it was refused.
    pub(super) fn apply_restore(
        &mut self,
        r: Restore,
        index: LogIndex,
    ) -> Result<String, StateMachineError> {
        let err = storage_err(index);
        for m in r.msgs {
            if m.seq <= self.store.state().last_seq {
                continue;
            }
            self.store
                .store_msg(&StoredMsg {
                    seq: m.seq,
                    subject: m.subject,
                    headers: m.headers,
                    payload: m.payload,
                    timestamp_ns: m.timestamp_ns,
                })
                .map_err(&err)?;
        }
        if !r.last {
            return Ok(RESTORED.to_string());
        }
        let st = self.store.state();
        if st.msgs == 0 && r.first_seq > st.last_seq.saturating_add(1) {
            // An emptied stream keeps its next position.
            self.store.skip_to(r.first_seq).map_err(&err)?;
        }
        if r.last_seq > self.store.state().last_seq {
            self.store
                .store_msg(&StoredMsg {
                    seq: r.last_seq,
                    subject: PLACEHOLDER_SUBJECT.to_string(),
                    headers: Bytes::new(),
                    payload: Bytes::new(),
                    timestamp_ns: r.last_ts,
                })
                .map_err(&err)?;
            self.store.remove(r.last_seq).map_err(&err)?;
        }
        if let Err(e) = self.import_consumers(&r.consumers) {
            return Ok(format!("consumers: {e}"));
        }
        self.rebuild_dedup().map_err(&err)?;
        self.rebuild_ttls().map_err(&err)?;
        self.rebuild_schedules().map_err(&err)?;
        self.save_meta().map_err(&err)?;
        Ok(RESTORED.to_string())
    }
}

#[cfg(test)]
mod tests {
    use jetraft_proto::stream::{SnapshotMsg, StreamCommand, stream_command::Cmd};
    use jetraft_raft::{LogIndex, ReplicatedStateMachine};
    use prost::Message;

    use super::*;
    use crate::jetstream::stream::tests::mem_sm;

    fn machine() -> StreamStateMachine {
        mem_sm(r#"{"name":"S","subjects":["s.>"]}"#)
    }

    fn msg(seq: u64) -> SnapshotMsg {
        SnapshotMsg {
            seq,
            subject: format!("s.{seq}"),
            headers: Bytes::new(),
            payload: Bytes::from(format!("m{seq}")),
            timestamp_ns: 1_000 + seq,
        }
    }

    fn apply(sm: &mut StreamStateMachine, index: u64, r: Restore) -> String {
        let cmd = StreamCommand {
            cmd: Some(Cmd::Restore(r)),
        };
        let out = sm
            .apply(LogIndex(index), &cmd.encode_to_vec())
            .expect("applied");
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn messages_keep_sequences_times_gaps_and_the_tail_position() {
        let mut sm = machine();
        let first = Restore {
            msgs: vec![msg(3), msg(4), msg(7)],
            ..Restore::default()
        };
        assert_eq!(apply(&mut sm, 1, first.clone()), RESTORED);
        // Applied again (crash recovery): nothing doubles.
        assert_eq!(apply(&mut sm, 2, first), RESTORED);
        let last = Restore {
            msgs: vec![msg(9)],
            last: true,
            first_seq: 3,
            last_seq: 12,
            last_ts: 5_000,
            consumers: vec![],
        };
        assert_eq!(apply(&mut sm, 3, last), RESTORED);
        let st = sm.state();
        assert_eq!((st.first_seq, st.last_seq, st.msgs), (3, 12, 4));
        let m = sm.store().get(7).unwrap().unwrap();
        assert_eq!((m.subject.as_str(), m.timestamp_ns), ("s.7", 1_007));
        assert!(sm.store().get(5).unwrap().is_none());
        assert!(sm.store().get(12).unwrap().is_none());
    }

    #[test]
    fn an_empty_backup_keeps_its_next_position() {
        let mut sm = machine();
        let last = Restore {
            last: true,
            first_seq: 41,
            last_seq: 40,
            ..Restore::default()
        };
        assert_eq!(apply(&mut sm, 1, last), RESTORED);
        let st = sm.state();
        assert_eq!((st.first_seq, st.last_seq, st.msgs), (41, 40, 0));
    }

    #[test]
    fn commands_encoded_before_restore_existed_decode_unchanged() {
        // `StreamCommand { purge: Purge { seq: 5 } }` as written by earlier binaries: the new
        // `restore` field (7) of the oneof changes no existing tag.
        let old: &[u8] = &[0x12, 0x02, 0x10, 0x05];
        let cmd = StreamCommand::decode(old).unwrap();
        let Some(Cmd::Purge(p)) = cmd.cmd else {
            panic!("not a purge: {cmd:?}");
        };
        assert_eq!(p.seq, 5);
    }
}
