//! Crash recovery: a restarted replica never applies an entry twice.
//!
//! The applied log id is saved at the end of each apply batch ([`super::META_APPLIED`]), but the
//! entries' effects are written to the store one mutation at a time before that. A crash in
//! between (kill -9 while publishing) leaves a store that already holds the effects of entries
//! after the saved applied index; openraft re-applies those entries after the restart. Applying
//! an `Append` again would store the message a second time at a new sequence, and any entry
//! evaluated against a store that is already ahead of it can decide differently than it did: the
//! replica would diverge from the others.
//!
//! So every mutation carries, atomically in its write batch, the log index of the entry being
//! applied (the store's write tag, [`StreamStore::set_write_tag`]). At open, a write tag `M`
//! above the saved applied index `X` means entries `X+1 .. M-1` reached the store completely and
//! entry `M` at least partly. When they are applied again:
//! - entries below `M` are skipped (only the clock moves, as the first time);
//! - entry `M` is completed: an `Append`'s first mutation stores its message, so the message is
//!   there and only the steps after it run again (limits, rollup, interest retention), which are
//!   idempotent; every other command is idempotent as a whole and runs again;
//! - entries after `M` apply normally.
//!
//! An `AppendBatch` entry holds several publishes, and a crash can fall between two of them, so
//! the write tag also names the publish being applied ([`write_tag`]): at `(M, p)` the batch's
//! publishes before `p` are complete and are skipped, publish `p` is completed as above, and the
//! rest apply normally.
//!
//! Replayed entries have no proposer waiting (the node restarted), so skipped entries answer
//! nothing.
//!
//! [`StreamStore::set_write_tag`]: jetraft_storage::stream::StreamStore::set_write_tag

use jetraft_proto::stream::{Append, StreamCommand, stream_command::Cmd};
use jetraft_raft::{LogIndex, ReplicatedStateMachine as _, StateMachineError};
use jetraft_storage::StorageError;
use jetraft_storage::stream::PurgeRequest;
use jetraft_storage::stream::limits;

use super::{StreamStateMachine, headers, io_err};
use crate::jetstream::api::types::RetentionPolicy;

/// Bits of a write tag that hold the position of the publish within an `AppendBatch`.
const TAG_POSITION_BITS: u32 = 16;

/// Most publishes an `AppendBatch` may hold (the positions a write tag can name).
pub(crate) const MAX_BATCH_PUBLISHES: usize = 1 << TAG_POSITION_BITS;

/// The store's write tag while applying publish `position` of the entry at `index` (0 for an
/// entry that is not a batch).
pub(super) fn write_tag(index: u64, position: usize) -> u64 {
    (index << TAG_POSITION_BITS) | (position as u64 & (MAX_BATCH_PUBLISHES as u64 - 1))
}

/// The entry index and batch position of a write tag.
fn split_tag(tag: u64) -> (u64, usize) {
    (
        tag >> TAG_POSITION_BITS,
        (tag & (MAX_BATCH_PUBLISHES as u64 - 1)) as usize,
    )
}

/// What to do with an entry applied while recovering.
pub(super) enum Replay {
    /// Apply it normally.
    Apply,
    /// Its effects are in the store: answer this and do nothing else.
    Done(String),
    /// An `AppendBatch` whose publishes before this position are complete and whose publish at
    /// this position is complete up to storing its message.
    ResumeBatch(usize),
}

impl StreamStateMachine {
    /// The write tag of the store when it is ahead of the saved applied index (a crash between
    /// an entry's effects and the applied record), else `None`.
    pub(super) fn recovery_point(&self) -> Result<Option<u64>, StateMachineError> {
        let tag = self.store.write_tag();
        if split_tag(tag).0 == 0 {
            return Ok(None);
        }
        let applied = self
            .load_applied()?
            .and_then(|a| a.last_applied)
            .map_or(0, |id| id.index);
        Ok((split_tag(tag).0 > applied).then_some(tag))
    }

    /// After a crash ahead of the applied record: the Nats-Msg-Id of the newest stored message
    /// is the last one stored (the saved value may predate it).
    pub(super) fn recover_last_msg_id(&mut self) -> Result<(), StateMachineError> {
        let last = self.store.state().last_seq;
        if let Some(m) = self.store.get(last).map_err(io_err)? {
            self.last_msg_id = headers::get(&m.headers, headers::MSG_ID)
                .unwrap_or_default()
                .to_string();
        }
        Ok(())
    }

    /// Decides how entry `index` is applied while a recovery point is pending.
    pub(super) fn replay(
        &mut self,
        index: LogIndex,
        cmd: &StreamCommand,
    ) -> Result<Replay, StorageError> {
        let Some((point, position)) = self.recover_until.map(split_tag) else {
            return Ok(Replay::Apply);
        };
        if index.0 > point {
            self.recover_until = None;
            return Ok(Replay::Apply);
        }
        if index.0 < point {
            if matches!(
                cmd.cmd,
                Some(
                    Cmd::ConsumerCreate(_)
                        | Cmd::ConsumerDelete(_)
                        | Cmd::ConsumerProgress(_)
                        | Cmd::Restore(_)
                )
            ) {
                // Consumer state is saved with the applied id, not with the store's writes:
                // apply again (acks and drops are idempotent, and so is a restore part).
                return Ok(Replay::Apply);
            }
            let now = match &cmd.cmd {
                Some(Cmd::Append(a)) => {
                    // The copy reached the store; its source position is saved with the
                    // applied id, so it must move again.
                    self.note_source_position(a);
                    a.timestamp_ns
                }
                Some(Cmd::AppendBatch(b)) => {
                    b.appends.iter().for_each(|a| self.note_source_position(a));
                    b.appends.iter().map(|a| a.timestamp_ns).max().unwrap_or(0)
                }
                Some(Cmd::UpdateConfig(u)) => u.timestamp_ns,
                Some(Cmd::Expire(e)) => e.now_ns,
                _ => 0,
            };
            self.advance_clock(now);
            return Ok(Replay::Done(String::new()));
        }
        self.recover_until = None;
        match &cmd.cmd {
            Some(Cmd::Append(a)) => {
                self.store.set_write_tag(write_tag(index.0, 0));
                self.note_source_position(a);
                self.finish_append(a)?;
                Ok(Replay::Done(String::new()))
            }
            Some(Cmd::AppendBatch(_)) => Ok(Replay::ResumeBatch(position)),
            _ => Ok(Replay::Apply),
        }
    }

    /// Runs again the steps of an `Append` that follow storing its message (the newest one).
    pub(super) fn finish_append(&mut self, a: &Append) -> Result<(), StorageError> {
        self.advance_clock(a.timestamp_ns);
        let seq = self.store.state().last_seq;
        limits::enforce(self.store.as_mut(), &self.limits, Some(&a.subject))?;
        let filter = match headers::get(&a.headers, headers::ROLLUP) {
            Some("sub") => Some(Some(a.subject.clone())),
            Some("all") => Some(None),
            _ => None,
        };
        if let Some(filter) = filter
            && self.config.allow_rollup_hdrs
        {
            self.store.purge(&PurgeRequest {
                filter,
                up_to_seq: Some(seq),
                keep: None,
            })?;
        }
        if self.config.retention == RetentionPolicy::Interest && !self.has_interest(&a.subject) {
            self.store.remove(seq)?;
        }
        Ok(())
    }
}
