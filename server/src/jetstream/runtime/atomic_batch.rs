//! Staging atomic batches on the stream leader (ADR-50): publishes carrying `Nats-Batch-Id` are
//! held here, in memory, until the one with `Nats-Batch-Commit`; then the whole batch is
//! proposed as one `AppendBatch` entry (`stream::atomic` checks and applies it all or none).
//!
//! The checks done per message on arrival follow nats-server's
//! `processJetStreamAtomicBatchMsg`, in its order: sealed (10109), message size (10054),
//! `allow_atomic` (10174), batch id longer than 64 bytes (10179), `Nats-Batch-Sequence` missing
//! or not a number (10175), then the batch: an unknown id with a sequence other than 1 is
//! incomplete (10176; 10199 when the sequence is past the size limit), a new batch beyond the
//! per-stream limit of open batches is refused (10210), a commit value other than `1` or `eob`
//! (10200), a batch idle for longer than [`BATCH_TIMEOUT`] or a gap in the sequence (10176), a
//! batch over [`MAX_BATCH_SIZE`] messages (10199). A `Nats-Required-Api-Level` above this
//! server's refuses the batch (10185); a met one is removed from the message. A refusal after
//! the batch was opened abandons it (advised with nats-server's reason when it had messages). A staged message is answered with an empty message (when it has a reply
//! subject), as nats-server does once it holds it.
//!
//! `Nats-Batch-Commit: eob` commits without storing the commit message itself; the last stored
//! message then gets `Nats-Batch-Commit: 1`, as in nats-server.
//!
//! Staged batches are not replicated: a leader change loses them, and the commit then finds no
//! batch (10176), as with nats-server. Time is passed in ([`Instant`]), so the rules are tested
//! without a clock.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::bus::internal::InternalMsg;
use crate::jetstream::api::{ApiError, ErrorKind};
use crate::jetstream::stream::headers;
use crate::node::API_LEVEL;

/// `Nats-Batch-Id`: the batch a publish belongs to.
pub(super) const BATCH_ID: &str = "Nats-Batch-Id";
/// `Nats-Batch-Sequence`: the publish's position in its batch, from 1.
const BATCH_SEQ: &str = "Nats-Batch-Sequence";
/// `Nats-Batch-Commit`: `1` (store this message and commit) or `eob` (commit without it).
pub(super) const BATCH_COMMIT: &str = "Nats-Batch-Commit";
/// Most messages in one batch (nats-server's default `max_batch_size`).
pub(super) const MAX_BATCH_SIZE: u64 = 1000;
/// Most batches open at once on one stream (nats-server's default).
const MAX_OPEN_PER_STREAM: usize = 50;
/// A batch with no message for this long is abandoned (nats-server's default).
pub(super) const BATCH_TIMEOUT: Duration = Duration::from_secs(10);
/// `Nats-Required-Api-Level`: the API level the publisher needs.
const REQUIRED_API_LEVEL: &str = "Nats-Required-Api-Level";
/// Longest batch id accepted.
const MAX_BATCH_ID_LEN: usize = 64;

/// The `Nats-Batch-Id` of a publish, when it has a non-empty one.
pub(super) fn batch_id(msg: &InternalMsg) -> Option<&str> {
    let block = msg.hdrs.as_deref()?;
    headers::get(block, BATCH_ID).filter(|id| !id.is_empty())
}

/// What the stream's config says about batches, read when a batch message arrives.
#[derive(Debug, Clone, Copy)]
pub(super) struct BatchRules {
    /// `allow_atomic`.
    pub allow_atomic: bool,
    /// `sealed`.
    pub sealed: bool,
    /// `max_msg_size` when positive.
    pub max_msg_size: Option<u64>,
}

/// What became of one batch message.
#[derive(Debug)]
pub(super) enum Staging {
    /// Held in its batch; answered with an empty message at this reply subject.
    Staged(Option<String>),
    /// Refused with this error, answered at the reply subject.
    Refused(Option<String>, ApiError),
    /// The commit: every message of the batch, in order, the commit last.
    Commit {
        /// The batch id.
        id: String,
        /// The messages, the commit message last.
        msgs: Vec<InternalMsg>,
        /// Whether the commit was `eob` (the commit message itself is not stored).
        eob: bool,
    },
}

/// One open batch.
#[derive(Debug)]
struct Open {
    msgs: Vec<InternalMsg>,
    touched: Instant,
}

/// Why an open batch was given up (the `reason` of nats-server's `stream_batch_abandoned`
/// advisory).
pub(super) type AbandonReason = &'static str;

/// The batches open on one stream replica (used while it leads).
#[derive(Debug, Default)]
pub(crate) struct AtomicBatches {
    open: HashMap<String, Open>,
    /// Batches given up since the last [`Self::take_abandoned`]: id and reason.
    abandoned: Vec<(String, AbandonReason)>,
}

impl AtomicBatches {
    /// Gives up the batches idle for longer than [`BATCH_TIMEOUT`] (reason `timeout`).
    pub(super) fn sweep(&mut self, now: Instant) {
        let expired: Vec<String> = self
            .open
            .iter()
            .filter(|(_, b)| now.saturating_duration_since(b.touched) > BATCH_TIMEOUT)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.open.remove(&id);
            self.abandoned.push((id, "timeout"));
        }
    }

    /// The batches given up since the last call, for their advisories.
    /// Whether a batch is open (the owner task then sweeps it on its tick).
    pub(super) fn any_open(&self) -> bool {
        !self.open.is_empty()
    }

    pub(super) fn take_abandoned(&mut self) -> Vec<(String, AbandonReason)> {
        std::mem::take(&mut self.abandoned)
    }

    /// Takes one message carrying a batch id (see the module doc for the rules).
    pub(super) fn on_msg(&mut self, rules: BatchRules, msg: InternalMsg, now: Instant) -> Staging {
        self.sweep(now);
        let reply = msg.reply.clone();
        let refuse = |kind: ErrorKind| Staging::Refused(reply.clone(), ApiError::new(kind));
        let block = msg.hdrs.clone().unwrap_or_default();
        let header = |name: &str| headers::get(&block, name);
        let Some(id) = header(BATCH_ID).map(str::to_string) else {
            return refuse(ErrorKind::AtomicPublishInvalidBatchID);
        };
        if rules.sealed {
            return refuse(ErrorKind::StreamSealed);
        }
        let size = block.len() + msg.payload.len();
        if rules.max_msg_size.is_some_and(|max| size as u64 > max) {
            return refuse(ErrorKind::StreamMessageExceedsMaximum);
        }
        if !rules.allow_atomic {
            return refuse(ErrorKind::AtomicPublishDisabled);
        }
        if id.len() > MAX_BATCH_ID_LEN {
            return refuse(ErrorKind::AtomicPublishInvalidBatchID);
        }
        let Some(seq) = header(BATCH_SEQ).and_then(|s| s.parse::<u64>().ok()) else {
            return refuse(ErrorKind::AtomicPublishMissingSeq);
        };
        let commit = header(BATCH_COMMIT);
        let eob = commit == Some("eob");
        let too_large = || {
            Staging::Refused(
                reply.clone(),
                ApiError::with(
                    ErrorKind::AtomicPublishTooLargeBatch,
                    &[("size", &MAX_BATCH_SIZE.to_string())],
                ),
            )
        };
        // The end-of-batch marker does not count towards the size.
        let counted = if eob { seq.saturating_sub(1) } else { seq };
        if !self.open.contains_key(&id) {
            if seq != 1 {
                if counted > MAX_BATCH_SIZE {
                    return too_large();
                }
                return refuse(ErrorKind::AtomicPublishIncompleteBatch);
            }
            if self.open.len() >= MAX_OPEN_PER_STREAM {
                return refuse(ErrorKind::AtomicPublishTooManyInflight);
            }
            self.open.insert(
                id.clone(),
                Open {
                    msgs: Vec::new(),
                    touched: now,
                },
            );
        }
        if commit.is_some() && !eob && commit != Some("1") {
            self.open.remove(&id);
            return refuse(ErrorKind::AtomicPublishInvalidBatchCommit);
        }
        // A level this server has is met, and the header is not stored.
        let mut msg = msg;
        if let Some(level) = header(REQUIRED_API_LEVEL) {
            if level
                .parse::<i64>()
                .map_or(true, |l| l > i64::from(API_LEVEL))
            {
                self.open.remove(&id);
                self.abandoned.push((id, "unsupported"));
                return refuse(ErrorKind::RequiredApiLevel);
            }
            msg.hdrs = Some(headers::filtered(&block, |n| n != REQUIRED_API_LEVEL, &[]));
        }
        let Some(batch) = self.open.get_mut(&id) else {
            return refuse(ErrorKind::AtomicPublishIncompleteBatch);
        };
        batch.touched = now;
        if batch.msgs.len() as u64 + 1 != seq || (seq == 1 && eob) {
            self.open.remove(&id);
            self.abandoned.push((id, "incomplete"));
            return refuse(ErrorKind::AtomicPublishIncompleteBatch);
        }
        if counted > MAX_BATCH_SIZE {
            self.open.remove(&id);
            self.abandoned.push((id, "large"));
            return too_large();
        }
        batch.msgs.push(msg);
        if commit.is_none() {
            return Staging::Staged(reply);
        }
        let msgs = self.open.remove(&id).map(|b| b.msgs).unwrap_or_default();
        Staging::Commit { id, msgs, eob }
    }

    /// Forgets every open batch (this replica no longer leads).
    pub(super) fn clear(&mut self) {
        self.open.clear();
        self.abandoned.clear();
    }

    /// How many batches are open.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    const RULES: BatchRules = BatchRules {
        allow_atomic: true,
        sealed: false,
        max_msg_size: None,
    };

    fn msg(id: &str, seq: &str, commit: Option<&str>) -> InternalMsg {
        let mut pairs = vec![(BATCH_ID, id), (BATCH_SEQ, seq)];
        if let Some(c) = commit {
            pairs.push((BATCH_COMMIT, c));
        }
        InternalMsg::global(
            "s".into(),
            Some("r".into()),
            Some(Bytes::from(headers::block(&pairs))),
            Bytes::from_static(b"x"),
        )
    }

    fn err_code(s: &Staging) -> u16 {
        match s {
            Staging::Refused(_, e) => e.err_code,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_batch_is_staged_in_order_and_handed_over_whole_at_its_commit() {
        let mut b = AtomicBatches::default();
        let t = Instant::now();
        assert!(matches!(
            b.on_msg(RULES, msg("a", "1", None), t),
            Staging::Staged(Some(_))
        ));
        assert!(matches!(
            b.on_msg(RULES, msg("a", "2", None), t),
            Staging::Staged(_)
        ));
        match b.on_msg(RULES, msg("a", "3", Some("1")), t) {
            Staging::Commit { id, msgs, eob } => {
                assert_eq!((id.as_str(), msgs.len(), eob), ("a", 3, false));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(b.len(), 0);
    }

    #[test]
    fn gaps_unknown_batches_and_bad_headers_get_nats_server_codes() {
        let mut b = AtomicBatches::default();
        let t = Instant::now();
        assert_eq!(err_code(&b.on_msg(RULES, msg("a", "2", None), t)), 10176);
        assert_eq!(err_code(&b.on_msg(RULES, msg("a", "x", None), t)), 10175);
        assert_eq!(err_code(&b.on_msg(RULES, msg("a", "1001", None), t)), 10199);
        assert_eq!(
            err_code(&b.on_msg(RULES, msg(&"i".repeat(65), "1", None), t)),
            10179
        );
        assert_eq!(
            err_code(&b.on_msg(RULES, msg("a", "1", Some("eob")), t)),
            10176
        );
        // `eob` as the first message opened the batch and gave it up at once.
        assert_eq!(b.take_abandoned(), [("a".to_string(), "incomplete")]);
        b.on_msg(RULES, msg("a", "1", None), t);
        assert_eq!(err_code(&b.on_msg(RULES, msg("a", "3", None), t)), 10176);
        assert_eq!(b.take_abandoned(), [("a".to_string(), "incomplete")]);
        // The gap abandoned the batch: its commit is incomplete too.
        assert_eq!(
            err_code(&b.on_msg(RULES, msg("a", "2", Some("1")), t)),
            10176
        );
        b.on_msg(RULES, msg("c", "1", None), t);
        assert_eq!(
            err_code(&b.on_msg(RULES, msg("c", "2", Some("yes")), t)),
            10200
        );
        b.on_msg(RULES, msg("lvl", "1", None), t);
        let mut high = msg("lvl", "2", None);
        high.hdrs = Some(Bytes::from(headers::block(&[
            (BATCH_ID, "lvl"),
            (BATCH_SEQ, "2"),
            (REQUIRED_API_LEVEL, "99"),
        ])));
        assert_eq!(err_code(&b.on_msg(RULES, high, t)), 10185);
        let mut met = msg("ok", "1", Some("1"));
        met.hdrs = Some(Bytes::from(headers::block(&[
            (BATCH_ID, "ok"),
            (BATCH_SEQ, "1"),
            (BATCH_COMMIT, "1"),
            (REQUIRED_API_LEVEL, "0"),
        ])));
        match b.on_msg(RULES, met, t) {
            Staging::Commit { msgs, .. } => {
                let hdrs = msgs[0].hdrs.clone().unwrap_or_default();
                assert_eq!(headers::get(&hdrs, REQUIRED_API_LEVEL), None);
                assert_eq!(headers::get(&hdrs, BATCH_ID), Some("ok"));
            }
            other => panic!("{other:?}"),
        }
        let off = BatchRules {
            allow_atomic: false,
            ..RULES
        };
        assert_eq!(err_code(&b.on_msg(off, msg("d", "1", None), t)), 10174);
        let small = BatchRules {
            max_msg_size: Some(4),
            ..RULES
        };
        assert_eq!(err_code(&b.on_msg(small, msg("d", "1", None), t)), 10054);
    }

    #[test]
    fn an_idle_batch_is_abandoned_after_the_timeout() {
        let mut b = AtomicBatches::default();
        let t = Instant::now();
        b.on_msg(RULES, msg("a", "1", None), t);
        b.sweep(t + BATCH_TIMEOUT);
        assert_eq!(b.len(), 1, "not idle for longer than the timeout yet");
        let later = t + BATCH_TIMEOUT + Duration::from_millis(1);
        b.sweep(later);
        assert_eq!(b.take_abandoned(), [("a".to_string(), "timeout")]);
        assert_eq!(
            err_code(&b.on_msg(RULES, msg("a", "2", Some("1")), later)),
            10176
        );
        assert_eq!(b.len(), 0);
    }

    #[test]
    fn eob_commits_without_counting_the_marker_and_too_many_open_batches_are_refused() {
        let mut b = AtomicBatches::default();
        let t = Instant::now();
        b.on_msg(RULES, msg("a", "1", None), t);
        assert!(matches!(
            b.on_msg(RULES, msg("a", "2", Some("eob")), t),
            Staging::Commit { eob: true, .. }
        ));
        for i in 0..MAX_OPEN_PER_STREAM {
            b.on_msg(RULES, msg(&format!("o{i}"), "1", None), t);
        }
        assert_eq!(
            err_code(&b.on_msg(RULES, msg("one-more", "1", None), t)),
            10210
        );
    }
}
