//! Applying a publish: the checks of nats-server's `processJetStreamMsg`, in its order
//! (spec/nats-protocol-and-jetstream.md §4.3, confirmed by the fixture where
//! `Nats-Expected-Last-Sequence` fails before a
//! duplicate `Nats-Msg-Id` is noticed): sealed → expected stream → TTL enabled → expected last
//! subject sequence → expected last sequence → msg-id dedup → expected last msg id → rollup
//! permission → header size → message size → store with limits (discard policy).
//!
//! Copies from a mirror's or source's origin (`Append.origin_seq > 0`, proposed by the leader's
//! sourcing task) skip the publish checks: a mirror copy is stored at the origin's sequence with
//! the origin's time (gaps preserved), a source copy at the next sequence; both only if the
//! origin sequence is past the copy position (the mirror's `last_seq`, or the source's recorded
//! position), so copying again after a leader change changes nothing. Source copies still honour
//! `Nats-Msg-Id` de-duplication (sources merging the same messages), mirror copies do not.
//! Rollup headers of copies are not acted on.

use bytes::Bytes;
use jetraft_proto::stream::Append;
use jetraft_storage::StorageError;
use jetraft_storage::stream::limits::{LimitViolation, StoreOutcome, store_with_limits};
use jetraft_storage::stream::{PurgeRequest, StoredMsg};

use super::StreamStateMachine;
use super::{command, counter, headers, republish};
use crate::jetstream::api::types::pub_ack::push_plain_json;
use crate::jetstream::api::types::{PubAck, RetentionPolicy};
use crate::jetstream::api::{ApiError, ErrorKind};

/// Largest header block nats-server accepts into a stream.
pub(super) const MAX_HEADER_BYTES: usize = 64 * 1024;

/// What a `Nats-Rollup` header asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rollup {
    /// Remove older messages on the same subject.
    Subject,
    /// Remove every older message.
    All,
}

/// A publish that was applied: stored at `seq`, or a duplicate of the message at `seq`.
#[derive(Debug, Clone)]
pub(super) struct Applied {
    seq: u64,
    duplicate: bool,
    /// The stored message, when the stream republishes it.
    pub(super) republish: Option<Box<republish::Pending>>,
    /// A counter's new total (the PubAck's `val`).
    counter: Option<String>,
}

impl Applied {
    fn stored(seq: u64) -> Self {
        Self {
            seq,
            duplicate: false,
            republish: None,
            counter: None,
        }
    }

    fn duplicate(seq: u64) -> Self {
        Self {
            seq,
            duplicate: true,
            republish: None,
            counter: None,
        }
    }
}

impl StreamStateMachine {
    /// Applies one publish; returns the PubAck JSON (success, duplicate or error).
    pub(super) fn apply_append(&mut self, a: Append) -> Result<String, StorageError> {
        let outcome = self.append_outcome(a)?;
        Ok(self.pub_ack(outcome).to_json())
    }

    /// Applies the publishes of an `AppendBatch` entry at `index` in order, each as its own
    /// `Append` would be; returns their answers framed in the same order (see
    /// `command::push_answer`), or nothing when no one waits for them. `resume` is the position
    /// to complete after a crash (see `recovery`): publishes before it are skipped.
    pub(super) fn apply_append_batch(
        &mut self,
        index: u64,
        appends: Vec<Append>,
        resume: Option<usize>,
        answer_wanted: bool,
    ) -> Result<Bytes, StorageError> {
        let mut answers = Vec::new();
        if answer_wanted {
            answers.reserve(appends.len() * (40 + self.config.name.len()));
        }
        for (position, a) in appends.into_iter().enumerate() {
            self.store
                .set_write_tag(super::recovery::write_tag(index, position));
            let outcome = match resume {
                Some(at) if position < at => {
                    self.note_source_position(&a);
                    self.advance_clock(a.timestamp_ns);
                    None
                }
                Some(at) if position == at => {
                    self.note_source_position(&a);
                    self.finish_append(&a)?;
                    None
                }
                _ => Some(self.append_outcome(a)?),
            };
            if !answer_wanted {
                continue;
            }
            match outcome {
                None => command::push_answer(&mut answers, b""),
                Some(Ok(mut applied)) => command::push_answer_with(&mut answers, |out| {
                    // Only the proposer, still waiting for this answer, republishes.
                    if let Some(p) = applied.republish.take() {
                        self.republish(&p);
                    }
                    let name = &self.config.name;
                    if self.server.domain.is_some()
                        || applied.counter.is_some()
                        || !push_plain_json(out, name, applied.seq, applied.duplicate)
                    {
                        let ack = self.pub_ack(Ok(applied.clone())).to_json();
                        out.extend_from_slice(ack.as_bytes());
                    }
                }),
                Some(Err(e)) => {
                    command::push_answer(&mut answers, self.pub_ack(Err(e)).to_json().as_bytes())
                }
            }
        }
        Ok(Bytes::from(answers))
    }

    /// Applies one publish or copy; what it did, or why it was refused.
    pub(super) fn append_outcome(
        &mut self,
        a: Append,
    ) -> Result<Result<Applied, ApiError>, StorageError> {
        self.advance_clock(a.timestamp_ns);
        if a.origin_seq > 0 {
            self.try_copy(a)
        } else {
            self.try_append(a)
        }
    }

    /// The PubAck for an applied or refused publish.
    pub(super) fn pub_ack(&self, outcome: Result<Applied, ApiError>) -> PubAck {
        let name = &self.config.name;
        let mut ack = match outcome {
            Ok(Applied {
                seq,
                duplicate: false,
                counter,
                ..
            }) => PubAck {
                val: counter,
                ..PubAck::stored(name, seq)
            },
            Ok(Applied {
                seq,
                duplicate: true,
                ..
            }) => PubAck::duplicate(name, seq),
            Err(e) => PubAck::error(name, e),
        };
        if ack.error.is_none() {
            ack.domain.clone_from(&self.server.domain);
        }
        ack
    }

    /// Moves a source's recorded position to a copy's origin sequence (never backwards).
    pub(super) fn note_source_position(&mut self, a: &Append) {
        if a.origin_seq > 0 && !a.source_key.is_empty() {
            let pos = self
                .source_positions
                .entry(a.source_key.clone())
                .or_default();
            *pos = (*pos).max(a.origin_seq);
        }
    }

    /// Applies a copy from an origin stream (see the module doc).
    fn try_copy(&mut self, a: Append) -> Result<Result<Applied, ApiError>, StorageError> {
        let mirror = a.source_key.is_empty();
        let last_seq = self.store.state().last_seq;
        let position = if mirror {
            last_seq
        } else {
            self.source_position(&a.source_key)
        };
        if a.origin_seq <= position || (mirror && self.config.mirror.is_none()) {
            return Ok(Ok(Applied::duplicate(position)));
        }
        self.note_source_position(&a);
        let msg_id = header_value(&a.headers, headers::MSG_ID).filter(|_| !mirror);
        if let Some(hit) = msg_id.as_deref().and_then(|id| self.dedup.get(id)) {
            return Ok(Ok(Applied::duplicate(hit.seq)));
        }
        let seq = if mirror {
            a.origin_seq
        } else {
            match next_seq(last_seq) {
                Some(seq) => seq,
                None => return Ok(Err(sequence_space_exhausted())),
            }
        };
        let (mut headers, mut payload) = (a.headers, a.payload);
        let mut total = None;
        if self.config.allow_msg_counter && !mirror {
            // A copy from a counter stream adds what its origin counted since the last copy.
            let Some(incr) =
                header_value(&headers, counter::INCR).and_then(|v| counter::parse_int(&v))
            else {
                return Ok(Err(ApiError::new(ErrorKind::MessageIncrMissing)));
            };
            match self.count(&a.subject, &headers, &payload, incr)? {
                Ok(c) => {
                    (headers, payload) = (c.headers, c.payload);
                    total = Some(c.total);
                }
                Err(e) => return Ok(Err(e)),
            }
        }
        let msg = StoredMsg {
            seq,
            subject: a.subject,
            headers,
            payload,
            timestamp_ns: a.timestamp_ns,
        };
        match store_with_limits(self.store.as_mut(), &self.limits, &msg)? {
            StoreOutcome::Stored { .. } => {
                if self.config.allow_msg_ttl {
                    self.track_ttl(&msg);
                }
            }
            StoreOutcome::Rejected(LimitViolation::MaxMsgSize) => {
                return Ok(Err(ApiError::new(ErrorKind::StreamMessageExceedsMaximum)));
            }
            StoreOutcome::Rejected(v) => return Ok(Err(ApiError::store_failed(&v.to_string()))),
        }
        if let Some(id) = msg_id {
            self.dedup.insert(&id, seq, a.timestamp_ns);
            self.last_msg_id = id;
        }
        if self.config.retention == RetentionPolicy::Interest && !self.has_interest(&msg.subject) {
            self.store.remove(seq)?;
        }
        let mut applied = Applied::stored(seq);
        applied.counter = total;
        Ok(Ok(applied))
    }

    /// A counter publish on `subject` applied to the subject's last message (see `counter`).
    fn count(
        &self,
        subject: &str,
        hdrs: &[u8],
        payload: &[u8],
        incr: num_bigint::BigInt,
    ) -> Result<Result<counter::Counted, ApiError>, StorageError> {
        let last = self.store.last_for_subject(subject)?;
        let last = last
            .as_ref()
            .map(|m| (m.headers.as_ref(), m.payload.as_ref()));
        Ok(counter::count(hdrs, payload, incr, last))
    }

    /// `subject` after the stream's input `subject_transform`, when it maps it.
    pub(super) fn transformed_subject(&self, subject: &str) -> String {
        self.config
            .subject_transform
            .as_ref()
            .and_then(|t| transform_subject(t, subject))
            .unwrap_or_else(|| subject.to_string())
    }

    fn try_append(&mut self, mut a: Append) -> Result<Result<Applied, ApiError>, StorageError> {
        if self.config.subject_transform.is_some() {
            a.subject = self.transformed_subject(&a.subject);
        }
        let name = &self.config.name;
        let hdrs: &[u8] = &a.headers;
        let header = |key: &str| headers::get(hdrs, key);
        if self.config.sealed {
            return Ok(Err(ApiError::new(ErrorKind::StreamSealed)));
        }
        let incr = match counter::check_publish(hdrs, &a.payload, self.config.allow_msg_counter) {
            Ok(incr) => incr,
            Err(e) => return Ok(Err(e)),
        };
        if header(headers::EXPECTED_STREAM).is_some_and(|s| s != name.as_str()) {
            return Ok(Err(ApiError::new(ErrorKind::StreamNotMatch)));
        }
        if let Some(ttl) = header(headers::TTL) {
            if !self.config.allow_msg_ttl {
                return Ok(Err(ApiError::new(ErrorKind::MessageTTLDisabled)));
            }
            if super::ttl::parse_ttl(ttl).is_none() {
                return Ok(Err(ApiError::new(ErrorKind::MessageTTLInvalid)));
            }
        }
        let subject_seq = header(headers::EXPECTED_LAST_SUBJECT_SEQ);
        let subject_seq_subject = header(headers::EXPECTED_LAST_SUBJECT_SEQ_SUBJECT);
        if subject_seq.is_none() && subject_seq_subject.is_some() {
            return Ok(Err(ApiError::new(
                ErrorKind::StreamExpectedLastSeqPerSubjectInvalid,
            )));
        }
        if let Some(expected) = subject_seq {
            let filter = subject_seq_subject.unwrap_or(&a.subject);
            let actual = self.store.last_for_subject(filter)?.map_or(0, |m| m.seq);
            if expected.parse::<u64>().ok() != Some(actual) {
                return Ok(Err(ApiError::wrong_last_sequence(actual)));
            }
        }
        if let Some(expected) = header(headers::EXPECTED_LAST_SEQ) {
            let actual = self.store.state().last_seq;
            if expected.parse::<u64>().ok() != Some(actual) {
                return Ok(Err(ApiError::wrong_last_sequence(actual)));
            }
        }
        let msg_id = header(headers::MSG_ID).filter(|id| !id.is_empty());
        if let Some(hit) = msg_id.and_then(|id| self.dedup.get(id)) {
            return Ok(Ok(Applied::duplicate(hit.seq)));
        }
        if let Some(expected) = header(headers::EXPECTED_LAST_MSG_ID)
            && expected != self.last_msg_id
        {
            return Ok(Err(ApiError::wrong_last_msg_id(&self.last_msg_id)));
        }
        // A schedule gets `Nats-Rollup: sub` added (see `schedule`).
        let scheduled = if mentions_schedules(hdrs) {
            match self.check_schedule(&a.subject, &a.headers) {
                Ok(block) => Some(block),
                Err(e) => return Ok(Err(e)),
            }
        } else {
            None
        };
        let rollup_value = match &scheduled {
            Some(block) => headers::get(block, headers::ROLLUP),
            None => header(headers::ROLLUP),
        };
        let rollup = match rollup_value {
            None => None,
            Some(_) if !self.config.allow_rollup_hdrs => {
                return Ok(Err(ApiError::with_err(
                    ErrorKind::StreamRollupFailed,
                    "rollup not permitted",
                )));
            }
            Some("sub") => Some(Rollup::Subject),
            Some("all") => Some(Rollup::All),
            Some(other) => {
                return Ok(Err(ApiError::with_err(
                    ErrorKind::StreamRollupFailed,
                    &format!("rollup value invalid: {other:?}"),
                )));
            }
        };
        if hdrs.len() > MAX_HEADER_BYTES {
            return Ok(Err(ApiError::new(ErrorKind::StreamHeaderExceedsMaximum)));
        }
        let counted = match (incr, self.config.allow_msg_counter) {
            (None, true) => return Ok(Err(ApiError::new(ErrorKind::MessageIncrMissing))),
            (Some(incr), true) => match self.count(&a.subject, &a.headers, &a.payload, incr)? {
                Ok(counted) => Some(counted),
                Err(e) => return Ok(Err(e)),
            },
            (_, false) => None,
        };
        let Some(seq) = next_seq(self.store.state().last_seq) else {
            return Ok(Err(sequence_space_exhausted()));
        };
        // The previous message on this subject, for the republished copy's Nats-Last-Sequence.
        let republish_last = match &self.config.republish {
            Some(r) if republish::target(r, &a.subject).is_some() => Some(
                self.store
                    .last_for_subject(&a.subject)?
                    .map_or(0, |m| m.seq),
            ),
            _ => None,
        };
        let (headers, payload, total) = match counted {
            Some(c) => (c.headers, c.payload, Some(c.total)),
            None => (
                self.ttl_floor(scheduled.as_ref().unwrap_or(&a.headers)),
                a.payload,
                None,
            ),
        };
        let msg = StoredMsg {
            seq,
            subject: a.subject,
            headers,
            payload,
            timestamp_ns: a.timestamp_ns,
        };
        match store_with_limits(self.store.as_mut(), &self.limits, &msg)? {
            StoreOutcome::Stored { .. } => {
                if self.config.allow_msg_ttl {
                    self.track_ttl(&msg);
                }
            }
            StoreOutcome::Rejected(LimitViolation::MaxMsgSize) => {
                return Ok(Err(ApiError::new(ErrorKind::StreamMessageExceedsMaximum)));
            }
            StoreOutcome::Rejected(v) => return Ok(Err(ApiError::store_failed(&v.to_string()))),
        }
        self.last_msg_id = msg_id.unwrap_or_default().to_string();
        if let Some(id) = msg_id {
            self.dedup.insert(id, seq, a.timestamp_ns);
        }
        match rollup {
            Some(Rollup::Subject) => {
                self.store.purge(&PurgeRequest {
                    filter: Some(msg.subject.clone()),
                    up_to_seq: Some(seq),
                    keep: None,
                })?;
            }
            Some(Rollup::All) => {
                self.store.purge(&PurgeRequest {
                    filter: None,
                    up_to_seq: Some(seq),
                    keep: None,
                })?;
            }
            None => {}
        }
        if self.config.allow_msg_schedules {
            self.after_store_schedule(&msg)?;
        }
        if self.config.retention == RetentionPolicy::Interest && !self.has_interest(&msg.subject) {
            // Acknowledged with a sequence, but no consumer is interested in its subject, so
            // not kept (as nats-server does, with no consumers or only filtered ones).
            self.store.remove(seq)?;
        }
        let mut applied = Applied::stored(seq);
        applied.counter = total;
        applied.republish =
            republish_last.map(|last_seq| Box::new(republish::Pending { msg, last_seq }));
        Ok(Ok(applied))
    }
}

/// `subject` after the stream's input `subject_transform`, if it matches the transform's source.
fn transform_subject(
    t: &crate::jetstream::api::types::SubjectTransform,
    subject: &str,
) -> Option<String> {
    let src = if t.src.is_empty() { ">" } else { &t.src };
    crate::jetstream::transform::Transform::new(src, &t.dest)
        .ok()?
        .apply(subject)
}

/// Whether a header block may hold schedule headers (`Nats-Schedule*`, `Nats-Scheduler`): a
/// cheap test before the real checks.
pub(super) fn mentions_schedules(hdrs: &[u8]) -> bool {
    const NAME: &[u8] = b"Nats-Schedul";
    hdrs.windows(NAME.len()).any(|w| w == NAME)
}

/// A header's value, owned (the copy path mutates `self` while holding it).
fn header_value(hdrs: &[u8], key: &str) -> Option<String> {
    headers::get(hdrs, key)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// The sequence after `last`, if a stream may store it. The last storable sequence is 2^64-2:
/// the stores keep `first_seq = last_seq + 1` for an empty stream and use 2^64-1 as "no upper
/// bound" in purges, so 2^64-1 itself is never stored.
pub(super) fn next_seq(last: u64) -> Option<u64> {
    last.checked_add(1).filter(|seq| *seq < u64::MAX)
}

/// The answer to a publish past the last storable sequence (a stream created with a
/// `first_seq` near 2^64): refused like any store failure, so every replica applies the entry
/// the same way and the group goes on (nats-server wraps around to 0, which a store ordered by
/// sequence cannot hold).
pub(super) fn sequence_space_exhausted() -> ApiError {
    ApiError::store_failed("stream sequence space exhausted")
}
