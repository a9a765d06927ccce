//! Deterministic limit decisions: what a stream keeps, rejects and expires.
//!
//! These functions read only the store's state, the message and (for `max_age`) a `now` passed in
//! by the caller, so every replica applying the same command with the same `now` (taken from the
//! command, never the local clock) makes the same decision. They work on any [`StreamStore`], so
//! memory and file streams behave identically apart from `msg_size`.
//!
//! Semantics follow nats-server (spec/nats-protocol-and-jetstream.md §4.4):
//! - `max_msg_size` rejects under both discard policies.
//! - discard `new`: a message that would exceed `max_msgs` or `max_bytes` is rejected; with
//!   `discard_new_per_subject`, so is one that would exceed `max_msgs_per_subject`. Without it, a
//!   message that replaces the oldest one on its subject does not count against `max_msgs`.
//! - discard `old`: after storing, the oldest messages of the subject are removed down to
//!   `max_msgs_per_subject`, then the oldest of the stream down to `max_msgs` and `max_bytes`.
//! - `max_age`: messages are expired from the front only: expiry stops at the first message
//!   younger than the cutoff, so it costs O(expired), never a scan of the stream. Timestamps are
//!   assigned in sequence order by the leader, so the front is the oldest.

use crate::StorageError;
use crate::stream::{StoredMsg, StreamStore};

/// What happens when a limit would be exceeded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DiscardPolicy {
    /// Remove the oldest messages.
    #[default]
    Old,
    /// Reject the new message.
    New,
}

/// A stream's limits; `None` = unlimited (nats-server's `-1`/`0`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamLimits {
    /// Maximum messages in the stream.
    pub max_msgs: Option<u64>,
    /// Maximum stored bytes (`msg_size` units).
    pub max_bytes: Option<u64>,
    /// Maximum message age in nanoseconds.
    pub max_age_ns: Option<u64>,
    /// Maximum messages per subject (KV history).
    pub max_msgs_per_subject: Option<u64>,
    /// Maximum headers + payload length of one message.
    pub max_msg_size: Option<u64>,
    /// Discard policy.
    pub discard: DiscardPolicy,
    /// With `discard: New`, also reject over `max_msgs_per_subject`.
    pub discard_new_per_subject: bool,
}

/// Why a message was rejected; the server maps these to JetStream API errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LimitViolation {
    /// `400/10054 message size exceeds maximum allowed`.
    #[error("message size exceeds maximum allowed")]
    MaxMsgSize,
    /// `503/10077 maximum messages exceeded`.
    #[error("maximum messages exceeded")]
    MaxMsgs,
    /// `503/10077 maximum bytes exceeded`.
    #[error("maximum bytes exceeded")]
    MaxBytes,
    /// `503/10077 maximum messages per subject exceeded`.
    #[error("maximum messages per subject exceeded")]
    MaxMsgsPerSubject,
}

/// The result of [`store_with_limits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOutcome {
    /// Stored; `removed` older messages were discarded to make room.
    Stored {
        /// Messages removed by discard-old enforcement.
        removed: u64,
    },
    /// Rejected; nothing changed.
    Rejected(LimitViolation),
}

/// Decides whether a message may be stored, without changing anything.
pub fn check_ingest<S: StreamStore + ?Sized>(
    store: &S,
    limits: &StreamLimits,
    subject: &str,
    headers_len: usize,
    payload_len: usize,
) -> Result<Result<(), LimitViolation>, StorageError> {
    if limits
        .max_msg_size
        .is_some_and(|max| (headers_len + payload_len) as u64 > max)
    {
        return Ok(Err(LimitViolation::MaxMsgSize));
    }
    if limits.discard != DiscardPolicy::New {
        return Ok(Ok(()));
    }
    let state = store.state();
    // Would storing this message push out the oldest one on its subject?
    let replaces_one = limits
        .max_msgs_per_subject
        .is_some_and(|max| store.subject_count(subject) >= max);
    if replaces_one && limits.discard_new_per_subject {
        return Ok(Err(LimitViolation::MaxMsgsPerSubject));
    }
    if limits.max_msgs.is_some_and(|max| state.msgs >= max) && !replaces_one {
        return Ok(Err(LimitViolation::MaxMsgs));
    }
    if let Some(max) = limits.max_bytes {
        let size = store.msg_size(subject, headers_len, payload_len);
        let mut freed = 0;
        if replaces_one
            && let Some(seq) = store.first_seq_for_subject(subject)?
            && let Some(old) = store.get(seq)?
        {
            freed = store.msg_size(&old.subject, old.headers.len(), old.payload.len());
        }
        if (state.bytes + size).saturating_sub(freed) > max {
            return Ok(Err(LimitViolation::MaxBytes));
        }
    }
    Ok(Ok(()))
}

/// Applies the count and size limits after a store (or a limits change): per-subject first, then
/// `max_msgs`, then `max_bytes`, always removing the oldest. Returns the number removed.
pub fn enforce<S: StreamStore + ?Sized>(
    store: &mut S,
    limits: &StreamLimits,
    subject: Option<&str>,
) -> Result<u64, StorageError> {
    let mut removed = 0;
    if let (Some(max), Some(subject)) = (limits.max_msgs_per_subject, subject) {
        while store.subject_count(subject) > max {
            if store.remove_first_for_subject(subject)?.is_none() {
                break;
            }
            removed += 1;
        }
    }
    loop {
        let state = store.state();
        let over = limits.max_msgs.is_some_and(|m| state.msgs > m)
            || limits.max_bytes.is_some_and(|m| state.bytes > m);
        if !over || state.msgs == 0 || !store.remove(state.first_seq)? {
            break;
        }
        removed += 1;
    }
    Ok(removed)
}

/// Checks, stores and enforces in one step: what a stream's state machine does per publish.
pub fn store_with_limits<S: StreamStore + ?Sized>(
    store: &mut S,
    limits: &StreamLimits,
    msg: &StoredMsg,
) -> Result<StoreOutcome, StorageError> {
    let verdict = check_ingest(
        store,
        limits,
        &msg.subject,
        msg.headers.len(),
        msg.payload.len(),
    )?;
    if let Err(v) = verdict {
        return Ok(StoreOutcome::Rejected(v));
    }
    store.store_msg(msg)?;
    let removed = enforce(store, limits, Some(&msg.subject))?;
    Ok(StoreOutcome::Stored { removed })
}

/// Removes messages older than `now_ns - max_age_ns` from the front; returns how many.
pub fn expire<S: StreamStore + ?Sized>(
    store: &mut S,
    limits: &StreamLimits,
    now_ns: u64,
) -> Result<u64, StorageError> {
    let Some(max_age) = limits.max_age_ns else {
        return Ok(0);
    };
    let cutoff = now_ns.saturating_sub(max_age);
    let mut removed = 0;
    loop {
        let state = store.state();
        if state.msgs == 0 || state.first_ts > cutoff || !store.remove(state.first_seq)? {
            return Ok(removed);
        }
        removed += 1;
    }
}

/// When the next message expires (ns since epoch), for the expiry timer; `None` if never.
pub fn next_expiry<S: StreamStore + ?Sized>(store: &S, limits: &StreamLimits) -> Option<u64> {
    let max_age = limits.max_age_ns?;
    let state = store.state();
    (state.msgs > 0).then(|| state.first_ts.saturating_add(max_age))
}
