//! Message schedules (ADR-51, nats-server 2.12, `allow_msg_schedules`): a message with
//! `Nats-Schedule: @at <RFC 3339 time>` and `Nats-Schedule-Target: <subject>` is stored as a
//! schedule; at its time the stream stores a copy of it on the target subject and removes the
//! schedule.
//!
//! Publishing a schedule (checked at apply, in nats-server's order): the pattern must parse
//! (10189; 10188 when schedules are off), `Nats-Schedule-TTL` must be a valid TTL (10191) and
//! needs `allow_msg_ttl` (10166), `Nats-Schedule-Rollup` may only be `sub` (10192), the target
//! must be a valid publish subject other than the schedule's own, inside the stream's subjects
//! (10190), an optional `Nats-Schedule-Source` likewise (10203). The schedule is stored with
//! `Nats-Rollup: sub` added (a new schedule on a subject replaces the previous one); another
//! rollup value is refused (10192). Only `@at` is taken (2.12's form; 2.14's `@every` and cron
//! patterns are refused with 10189).
//!
//! Firing: schedules are found at apply time of an `Expire` command, which the stream leader
//! proposes when the earliest schedule is due (with TTL and `max_age` expiry,
//! [`StreamStateMachine::next_expiry`]). Every replica stores the same fired message, at the
//! same sequence with the command's time, and removes the schedule in the same apply: a new
//! leader after a failover fires what is still pending, and nothing fires twice. The fired
//! message is the schedule's payload (or the last message on `Nats-Schedule-Source`, if any)
//! with the schedule's headers minus `Nats-Schedule*`, `Nats-Expected-*`, `Nats-Msg-Id`,
//! `Nats-TTL` and `Nats-Rollup`, plus `Nats-Scheduler: <schedule subject>`,
//! `Nats-Schedule-Next: purge`, `Nats-TTL` from `Nats-Schedule-TTL` and `Nats-Rollup` from
//! `Nats-Schedule-Rollup`, as nats-server builds it. Storing a message with
//! `Nats-Schedule-Next: purge` purges its `Nats-Scheduler` subject (clients may send one to
//! cancel a schedule, 10212 when malformed).
//!
//! The index of pending schedules is derived from the store (rebuilt on open, after a snapshot
//! install or a restore); stale entries (a schedule purged or replaced) are dropped when due.

use std::collections::BTreeSet;

use bytes::Bytes;
use jetraft_proto::stream::Append;
use jetraft_storage::StorageError;
use jetraft_storage::stream::StoredMsg;
use tracing::debug;

use super::{StreamStateMachine, headers};
use crate::jetstream::api::types::go_time;
use crate::jetstream::api::validate::subjects_overlap;
use crate::jetstream::api::{ApiError, ErrorKind};
use crate::router::subject;

/// The schedule pattern (`@at <time>`).
pub(super) const SCHEDULE: &str = "Nats-Schedule";
/// Where a fired schedule is stored.
pub(super) const SCHEDULE_TARGET: &str = "Nats-Schedule-Target";
/// `Nats-TTL` of the fired message.
pub(super) const SCHEDULE_TTL: &str = "Nats-Schedule-TTL";
/// `Nats-Rollup` of the fired message (`sub` only).
pub(super) const SCHEDULE_ROLLUP: &str = "Nats-Schedule-Rollup";
/// The subject whose last message is fired instead of the schedule's own payload.
pub(super) const SCHEDULE_SOURCE: &str = "Nats-Schedule-Source";
/// Time zone of a cron pattern (not taken with `@at`).
pub(super) const SCHEDULE_TIME_ZONE: &str = "Nats-Schedule-Time-Zone";
/// On a fired message: the schedule's subject.
pub(super) const SCHEDULER: &str = "Nats-Scheduler";
/// On a fired message: `purge` (the schedule is removed once the message is stored).
pub(super) const SCHEDULE_NEXT: &str = "Nats-Schedule-Next";
/// The [`SCHEDULE_NEXT`] value of a one-off schedule.
const NEXT_PURGE: &str = "purge";

/// Pending schedules: `(fire at ns, seq)` (derived state, never persisted).
pub(super) type ScheduleIndex = BTreeSet<(u64, u64)>;

/// When a pattern fires, Unix ns; `None` when it is not one this server takes.
fn fire_time(pattern: &str) -> Option<u64> {
    go_time::parse(pattern.strip_prefix("@at ")?)
}

/// A subject a schedule may name: valid, literal, not the schedule's own, in the stream.
fn valid_target(target: &str, own: &str, stream_subjects: &[String]) -> bool {
    subject::is_valid_literal_subject(target)
        && target != own
        && stream_subjects.iter().any(|s| subjects_overlap(s, target))
}

impl StreamStateMachine {
    /// Checks the schedule headers of a publish to `subject` (see the module doc). Returns the
    /// header block to store (with `Nats-Rollup: sub` added to a schedule), or the refusal.
    pub(super) fn check_schedule(&self, subject: &str, hdrs: &Bytes) -> Result<Bytes, ApiError> {
        let header = |name: &str| headers::get(hdrs, name);
        let allowed = self.config.allow_msg_schedules;
        let refuse = |kind: ErrorKind| Err(ApiError::new(kind));
        if let Some(pattern) = header(SCHEDULE).filter(|p| !p.is_empty()) {
            if header(SCHEDULE_TIME_ZONE).is_some() || fire_time(pattern).is_none() {
                return refuse(if allowed {
                    ErrorKind::MessageSchedulesPatternInvalid
                } else {
                    ErrorKind::MessageSchedulesDisabled
                });
            }
            if !allowed {
                return refuse(ErrorKind::MessageSchedulesDisabled);
            }
            let ttl = header(SCHEDULE_TTL).filter(|t| !t.is_empty());
            if ttl.is_some_and(|t| super::ttl::parse_ttl(t).is_none()) {
                return refuse(ErrorKind::MessageSchedulesTTLInvalid);
            }
            if header(SCHEDULE_ROLLUP).is_some_and(|r| !r.is_empty() && r != "sub") {
                return refuse(ErrorKind::MessageSchedulesRollupInvalid);
            }
            if ttl.is_some() && !self.config.allow_msg_ttl {
                return refuse(ErrorKind::MessageTTLDisabled);
            }
            let subjects = &self.config.subjects;
            let target = header(SCHEDULE_TARGET).unwrap_or_default();
            if !valid_target(target, subject, subjects) {
                return refuse(ErrorKind::MessageSchedulesTargetInvalid);
            }
            if let Some(source) = header(SCHEDULE_SOURCE).filter(|s| !s.is_empty())
                && (source == target || !valid_target(source, subject, subjects))
            {
                return refuse(ErrorKind::MessageSchedulesSourceInvalid);
            }
            return match header(headers::ROLLUP) {
                None => Ok(headers::filtered(
                    hdrs,
                    |_| true,
                    &[(headers::ROLLUP, "sub")],
                )),
                Some("sub") => Ok(hdrs.clone()),
                Some(_) => refuse(ErrorKind::MessageSchedulesRollupInvalid),
            };
        }
        if let Some(next) = header(SCHEDULE_NEXT) {
            if next != NEXT_PURGE {
                return refuse(ErrorKind::MessageSchedulesSchedulerInvalid);
            }
            let scheduler = header(SCHEDULER).unwrap_or_default();
            if scheduler.is_empty()
                || scheduler == subject
                || !subject::is_valid_literal_subject(scheduler)
            {
                return refuse(ErrorKind::MessageSchedulesSchedulerInvalid);
            }
            if !allowed {
                return refuse(ErrorKind::MessageSchedulesDisabled);
            }
            let last = self.store.last_for_subject(scheduler).ok().flatten();
            if last.is_some_and(|m| headers::get(&m.headers, SCHEDULE).is_none()) {
                return refuse(ErrorKind::MessageSchedulesSchedulerInvalid);
            }
        } else if header(SCHEDULER).is_some() {
            return refuse(ErrorKind::MessageSchedulesSchedulerInvalid);
        }
        Ok(hdrs.clone())
    }

    /// After storing `msg`: records it if it is a schedule, and removes the schedule a fired
    /// message names (`Nats-Schedule-Next: purge`).
    pub(super) fn after_store_schedule(&mut self, msg: &StoredMsg) -> Result<(), StorageError> {
        if !self.config.allow_msg_schedules {
            return Ok(());
        }
        self.track_schedule(msg);
        if headers::get(&msg.headers, SCHEDULE_NEXT) == Some(NEXT_PURGE)
            && let Some(scheduler) = headers::get(&msg.headers, SCHEDULER)
        {
            self.store.purge(&jetraft_storage::stream::PurgeRequest {
                filter: Some(scheduler.to_string()),
                up_to_seq: None,
                keep: None,
            })?;
        }
        Ok(())
    }

    fn track_schedule(&mut self, msg: &StoredMsg) {
        if let Some(at) = headers::get(&msg.headers, SCHEDULE).and_then(fire_time) {
            self.schedules.insert((at, msg.seq));
        }
    }

    /// Rebuilds the schedule index from the stored messages.
    pub(super) fn rebuild_schedules(&mut self) -> Result<(), StorageError> {
        self.schedules.clear();
        if !self.config.allow_msg_schedules {
            return Ok(());
        }
        let mut at = 0;
        while let Some(m) = self.store.next_matching(at, &[])? {
            at = m.seq + 1;
            self.track_schedule(&m);
        }
        Ok(())
    }

    /// When the earliest pending schedule fires, Unix ns.
    pub(super) fn next_schedule(&self) -> Option<u64> {
        self.schedules.first().map(|&(at, _)| at)
    }

    /// Fires every schedule due as of `now_ns` (an `Expire` being applied), in sequence order.
    pub(super) fn fire_schedules(&mut self, now_ns: u64) -> Result<(), StorageError> {
        let mut due = Vec::new();
        while let Some(&(at, seq)) = self.schedules.first() {
            if at > now_ns {
                break;
            }
            self.schedules.pop_first();
            due.push(seq);
        }
        due.sort_unstable();
        for seq in due {
            let Some(schedule) = self.store.get(seq)? else {
                continue;
            };
            let Some(fired) = self.fired_message(&schedule, now_ns)? else {
                continue;
            };
            if let Err(e) = self.append_outcome(fired)? {
                debug!(stream = %self.config.name, seq, error = %e, "scheduled message not stored");
            }
        }
        Ok(())
    }

    /// The message a due schedule stores, or `None` when it is no longer a valid schedule.
    fn fired_message(
        &self,
        schedule: &StoredMsg,
        now_ns: u64,
    ) -> Result<Option<Append>, StorageError> {
        let header = |name: &str| headers::get(&schedule.headers, name);
        let (Some(_), Some(target)) = (
            header(SCHEDULE).and_then(fire_time),
            header(SCHEDULE_TARGET).filter(|t| !t.is_empty()),
        ) else {
            return Ok(None);
        };
        let mut content = None;
        if let Some(source) = header(SCHEDULE_SOURCE).filter(|s| !s.is_empty()) {
            content = self.store.last_for_subject(source)?;
        }
        let content = content.as_ref().unwrap_or(schedule);
        let mut extra = vec![
            (SCHEDULER, schedule.subject.as_str()),
            (SCHEDULE_NEXT, NEXT_PURGE),
        ];
        if let Some(ttl) = header(SCHEDULE_TTL).filter(|t| !t.is_empty()) {
            extra.push((headers::TTL, ttl));
        }
        if let Some(rollup) = header(SCHEDULE_ROLLUP).filter(|r| !r.is_empty()) {
            extra.push((headers::ROLLUP, rollup));
        }
        let kept = |name: &str| {
            !name.starts_with("Nats-Schedule")
                && !name.starts_with("Nats-Expected-")
                && name != headers::MSG_ID
                && name != headers::TTL
                && name != headers::ROLLUP
        };
        Ok(Some(Append {
            subject: target.to_string(),
            headers: headers::filtered(&content.headers, kept, &extra),
            payload: content.payload.clone(),
            timestamp_ns: now_ns,
            ..Append::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_at_patterns_with_an_rfc3339_time_fire() {
        assert_eq!(fire_time("@at 1970-01-01T00:00:01Z"), Some(1_000_000_000));
        assert_eq!(
            fire_time("@at 2026-12-05T07:00:00+01:00"),
            go_time::parse("2026-12-05T06:00:00Z")
        );
        for bad in ["@at tomorrow", "@every 1s", "0 * * * * *", "", "@at"] {
            assert_eq!(fire_time(bad), None, "{bad}");
        }
    }
}
