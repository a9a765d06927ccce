//! Applying an atomic batch (ADR-50, `Nats-Batch-Id`): the publishes of one `AppendBatch`
//! entry with an `atomic_batch_id` are stored all or none.
//!
//! The whole batch is checked first against the state as of the entry, the way nats-server's
//! leader checks a batch before proposing it (`checkMsgHeadersPreClusteredProposal` with a
//! staged diff): per message, in its order, `Nats-Expected-Last-Msg-Id` is unsupported (10177),
//! header size, expected stream, TTL, `Nats-Msg-Id` (a repeat inside the batch or one in the
//! dedup window refuses the batch with 10201, it is not answered as a duplicate), expected last
//! sequence (only the first message may carry one: later ones get 10164), expected last subject
//! sequence (10164 for a subject the batch already wrote), rollups (`sub` only on a subject's
//! first message in the batch, `all` only on the batch's first message), and with discard new
//! the message, byte and per-subject limits counting the batch's earlier messages. One failing
//! check refuses the whole batch with that check's error; otherwise every publish is applied in
//! order exactly as its own `Append` would be (limits with discard old, rollups and interest
//! retention act per message).
//!
//! Answers: one per publish, framed as for any `AppendBatch`; all are empty except the last,
//! which is the batch's PubAck (`batch` and `count` added) or its error.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use jetraft_proto::stream::Append;
use jetraft_storage::StorageError;
use jetraft_storage::stream::limits::LimitViolation;
use tracing::warn;

use super::append::MAX_HEADER_BYTES;
use super::{StreamStateMachine, command, counter, headers};
use crate::jetstream::api::types::DiscardPolicy;
use crate::jetstream::api::{ApiError, ErrorKind};

/// What a batch's earlier messages wrote on one subject (nats-server's inflight totals).
#[derive(Default, Clone, Copy)]
struct Inflight {
    msgs: u64,
    bytes: u64,
}

impl StreamStateMachine {
    /// Applies atomic batch `batch_id` (the entry at `index`); see the module doc.
    pub(super) fn apply_atomic_batch(
        &mut self,
        index: u64,
        appends: Vec<Append>,
        batch_id: &str,
        answer_wanted: bool,
    ) -> Result<Bytes, StorageError> {
        let count = appends.len();
        // The dedup window as of the batch's time, as each publish would see it.
        if let Some(first) = appends.first() {
            self.advance_clock(first.timestamp_ns);
        }
        let outcome = match self.check_atomic(&appends)? {
            Err(e) => Err(e),
            Ok(()) => {
                let mut last = Err(ApiError::new(ErrorKind::AtomicPublishIncompleteBatch));
                for (position, a) in appends.into_iter().enumerate() {
                    self.store
                        .set_write_tag(super::recovery::write_tag(index, position));
                    match self.append_outcome(a)? {
                        Ok(mut applied) => {
                            if answer_wanted && let Some(p) = applied.republish.take() {
                                self.republish(&p);
                            }
                            last = Ok(applied);
                        }
                        Err(e) => {
                            // The checks above cover every refusal of a publish; one that
                            // still fails here is reported, and the batch stays partly stored.
                            warn!(stream = %self.config.name, batch_id, error = %e,
                                "atomic batch publish refused after its checks passed");
                            last = Err(e);
                        }
                    }
                }
                last
            }
        };
        if !answer_wanted {
            return Ok(Bytes::new());
        }
        let mut answers = Vec::new();
        for _ in 1..count {
            command::push_answer(&mut answers, b"");
        }
        let mut ack = self.pub_ack(outcome);
        if ack.error.is_none() {
            ack.batch = Some((batch_id.to_string(), count as u64));
        }
        command::push_answer(&mut answers, ack.to_json().as_bytes());
        Ok(Bytes::from(answers))
    }

    /// Checks every publish of a batch against the state and the batch's earlier publishes.
    fn check_atomic(&self, appends: &[Append]) -> Result<Result<(), ApiError>, StorageError> {
        if self.config.sealed {
            return Ok(Err(ApiError::new(ErrorKind::StreamSealed)));
        }
        if appends.is_empty() {
            return Ok(Err(ApiError::new(ErrorKind::AtomicPublishIncompleteBatch)));
        }
        let state = self.store.state();
        let last = state.last_seq.saturating_add(appends.len() as u64 - 1);
        if super::append::next_seq(last).is_none() {
            return Ok(Err(super::append::sequence_space_exhausted()));
        }
        let mut msg_ids: HashSet<&str> = HashSet::new();
        let mut inflight: HashMap<String, Inflight> = HashMap::new();
        let mut expected_per_subject: HashMap<String, u64> = HashMap::new();
        let (mut total_msgs, mut total_bytes) = (state.msgs, state.bytes);
        for (i, a) in appends.iter().enumerate() {
            let subject = self.transformed_subject(&a.subject);
            let hdrs: &[u8] = &a.headers;
            let header = |key: &str| headers::get(hdrs, key);
            if header(headers::EXPECTED_LAST_MSG_ID).is_some_and(|v| !v.is_empty()) {
                return Ok(Err(ApiError::with(
                    ErrorKind::AtomicPublishUnsupportedHeaderBatch,
                    &[("header", headers::EXPECTED_LAST_MSG_ID)],
                )));
            }
            let max_size = u64::try_from(self.config.max_msg_size)
                .ok()
                .filter(|m| *m > 0);
            if max_size.is_some_and(|m| (hdrs.len() + a.payload.len()) as u64 > m) {
                return Ok(Err(ApiError::new(ErrorKind::StreamMessageExceedsMaximum)));
            }
            if hdrs.len() > MAX_HEADER_BYTES {
                return Ok(Err(ApiError::new(ErrorKind::StreamHeaderExceedsMaximum)));
            }
            let counters = self.config.allow_msg_counter;
            match counter::check_publish(hdrs, &a.payload, counters) {
                Err(e) => return Ok(Err(e)),
                Ok(None) if counters => {
                    return Ok(Err(ApiError::new(ErrorKind::MessageIncrMissing)));
                }
                Ok(_) => {}
            }
            if header(headers::EXPECTED_STREAM).is_some_and(|s| s != self.config.name) {
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
            if let Some(id) = header(headers::MSG_ID).filter(|id| !id.is_empty())
                && (!msg_ids.insert(id) || self.dedup.get(id).is_some())
            {
                return Ok(Err(ApiError::new(
                    ErrorKind::AtomicPublishContainsDuplicateMessage,
                )));
            }
            if let Some(expected) = header(headers::EXPECTED_LAST_SEQ) {
                let last = state.last_seq + i as u64;
                if expected.parse::<u64>().ok() != Some(last) {
                    return Ok(Err(ApiError::wrong_last_sequence(last)));
                }
                if i > 0 {
                    return Ok(Err(ApiError::new(
                        ErrorKind::StreamWrongLastSequenceConstant,
                    )));
                }
            }
            if let Err(e) = self.check_expected_subject_seq(
                &subject,
                hdrs,
                &inflight,
                &mut expected_per_subject,
            )? {
                return Ok(Err(e));
            }
            if super::append::mentions_schedules(hdrs)
                && let Err(e) = self.check_schedule(&subject, &a.headers)
            {
                return Ok(Err(e));
            }
            if let Some(rollup) = header(headers::ROLLUP) {
                let refused =
                    |err: &str| Ok(Err(ApiError::with_err(ErrorKind::StreamRollupFailed, err)));
                if !self.config.allow_rollup_hdrs || self.config.deny_purge {
                    return refused("rollup not permitted");
                }
                match rollup {
                    "sub" if inflight.contains_key(&subject) => {
                        return refused("batch rollup sub invalid");
                    }
                    "all" if !inflight.is_empty() => return refused("batch rollup all invalid"),
                    "sub" | "all" => {}
                    other => return refused(&format!("rollup value invalid: {other:?}")),
                }
            }
            let size = self.store.msg_size(&subject, hdrs.len(), a.payload.len());
            let on_subject = inflight.entry(subject.clone()).or_default();
            on_subject.msgs += 1;
            on_subject.bytes += size;
            let batch_on_subject = on_subject.msgs;
            total_msgs += 1;
            total_bytes += size;
            if self.config.discard == DiscardPolicy::New {
                let violation = if self.limits.max_msgs.is_some_and(|m| total_msgs > m) {
                    Some(LimitViolation::MaxMsgs)
                } else if self.limits.max_bytes.is_some_and(|m| total_bytes > m) {
                    Some(LimitViolation::MaxBytes)
                } else if self.config.discard_new_per_subject
                    && header(headers::ROLLUP).is_none()
                    && self
                        .limits
                        .max_msgs_per_subject
                        .is_some_and(|m| self.store.subject_count(&subject) + batch_on_subject > m)
                {
                    Some(LimitViolation::MaxMsgsPerSubject)
                } else {
                    None
                };
                if let Some(v) = violation {
                    return Ok(Err(ApiError::store_failed(&v.to_string())));
                }
            }
        }
        Ok(Ok(()))
    }

    /// `Nats-Expected-Last-Subject-Sequence` of one batch message: refused on a subject the
    /// batch already wrote, otherwise checked against the store once per subject.
    fn check_expected_subject_seq(
        &self,
        subject: &str,
        hdrs: &[u8],
        inflight: &HashMap<String, Inflight>,
        checked: &mut HashMap<String, u64>,
    ) -> Result<Result<(), ApiError>, StorageError> {
        let filter = headers::get(hdrs, headers::EXPECTED_LAST_SUBJECT_SEQ_SUBJECT);
        let Some(expected) = headers::get(hdrs, headers::EXPECTED_LAST_SUBJECT_SEQ) else {
            if filter.is_some() {
                return Ok(Err(ApiError::new(
                    ErrorKind::StreamExpectedLastSeqPerSubjectInvalid,
                )));
            }
            return Ok(Ok(()));
        };
        let filter = filter.unwrap_or(subject);
        if inflight.contains_key(filter) {
            return Ok(Err(ApiError::new(
                ErrorKind::StreamWrongLastSequenceConstant,
            )));
        }
        let actual = match checked.get(filter) {
            Some(seq) => *seq,
            None => {
                let seq = self.store.last_for_subject(filter)?.map_or(0, |m| m.seq);
                checked.insert(filter.to_string(), seq);
                seq
            }
        };
        if expected.parse::<u64>().ok() != Some(actual) {
            return Ok(Err(ApiError::wrong_last_sequence(actual)));
        }
        Ok(Ok(()))
    }
}
