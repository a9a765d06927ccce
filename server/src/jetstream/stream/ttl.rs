//! Expiry: `max_age`, per-message TTL (`Nats-TTL`, ADR-43) and subject delete markers.
//!
//! - A message with `Nats-TTL: <dur>` (allowed by `allow_msg_ttl`) is removed once its
//!   timestamp plus the TTL has passed; `Nats-TTL: never` exempts it from `max_age` too. Other
//!   messages are removed by `max_age` as before (a TTL longer than `max_age` does not extend a
//!   message's life: `max_age` still removes it, as nats-server's store does).
//! - With `subject_delete_marker_ttl`, when expiry removes the last message of a subject the
//!   stream appends a marker on that subject (empty body, headers `Nats-Marker-Reason: MaxAge`,
//!   `Nats-TTL: <marker ttl>`, `Nats-Rollup: sub`, as nats-server 2.15 writes it); the marker
//!   expires after its own TTL without leaving another marker, and so does a KV purge
//!   (`KV-Operation: PURGE`) with a TTL. Clients read the marker as a purge (KV).
//!
//! Determinism: expiry happens only when an `Expire` command is applied, as of the time the
//! leader stamped in it, so every replica removes the same messages and writes the same
//! markers with the same sequences and timestamps. The TTL index and the age cursor are derived
//! from the store (rebuilt on open and after a snapshot install); stale entries in them only
//! cost a lookup, never change an outcome.

use std::collections::BTreeSet;

use jetraft_storage::StorageError;
use jetraft_storage::stream::StoredMsg;
use jetraft_storage::stream::limits::{self, StoreOutcome, store_with_limits};

use super::{StreamStateMachine, headers};
use crate::jetstream::api::go_duration;

/// `Nats-Marker-Reason`: why the server wrote a marker.
pub const MARKER_REASON: &str = "Nats-Marker-Reason";

/// The KV client's operation header (`PUT`/`DEL`/`PURGE`); stored as is, read only here.
const KV_OPERATION: &str = "KV-Operation";

/// What a valid `Nats-TTL` value asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgTtl {
    /// Remove the message this many nanoseconds after it was stored.
    After(u64),
    /// Never remove it by age (`never`).
    Never,
}

/// Parses a `Nats-TTL` value: integer seconds (`"2"`), a Go duration (`10s`, `1m`, `1h30m`)
/// or `never`; at least one second. `None` = invalid (10165).
pub fn parse_ttl(value: &str) -> Option<MsgTtl> {
    const SEC: i64 = 1_000_000_000;
    if value == "never" {
        return Some(MsgTtl::Never);
    }
    let ns = match value.parse::<i64>() {
        Ok(secs) => secs.checked_mul(SEC)?,
        Err(_) => go_duration::parse(value)?,
    };
    (ns >= SEC).then(|| MsgTtl::After(u64::try_from(ns).unwrap_or(u64::MAX)))
}

/// The TTL a stored message carries, if any (and valid).
fn msg_ttl(msg: &StoredMsg) -> Option<MsgTtl> {
    headers::get(&msg.headers, headers::TTL).and_then(parse_ttl)
}

/// Whether `msg` is a subject delete marker, whose expiry leaves no new marker: one the server
/// wrote (`Nats-Marker-Reason`) or a KV purge (`KV-Operation: PURGE`), as nats-server decides.
/// A KV delete (`DEL`) is not one.
fn is_marker(msg: &StoredMsg) -> bool {
    headers::get(&msg.headers, MARKER_REASON).is_some()
        || headers::get(&msg.headers, KV_OPERATION) == Some("PURGE")
}

/// The expiry bookkeeping of a stream (derived state, never persisted).
#[derive(Debug, Default)]
pub(super) struct Expiry {
    /// `(expires at ns, seq)` of stored messages with a TTL.
    ttls: BTreeSet<(u64, u64)>,
    /// Where the next `max_age` scan starts: every present message below it is exempt
    /// (`Nats-TTL: never`), so scans do not revisit them.
    age_cursor: u64,
}

impl StreamStateMachine {
    /// Records the TTL of a message just stored.
    pub(super) fn track_ttl(&mut self, msg: &StoredMsg) {
        if let Some(MsgTtl::After(ttl)) = msg_ttl(msg) {
            let at = msg.timestamp_ns.saturating_add(ttl);
            self.expiry.ttls.insert((at, msg.seq));
        }
    }

    /// The header block to store for a publish: with subject delete markers on and
    /// `max_msgs_per_subject != 1`, a `Nats-TTL` shorter than the marker TTL is raised to it
    /// and written back as whole seconds (nats-server 2.15: `1s` becomes `5` under a 5 s
    /// marker TTL), so a key never expires before the marker that replaces it could.
    pub(super) fn ttl_floor(&self, block: &bytes::Bytes) -> bytes::Bytes {
        let marker_ttl = u64::try_from(self.config.subject_delete_marker_ttl).unwrap_or(0);
        if marker_ttl == 0 || self.config.max_msgs_per_subject == 1 {
            return block.clone();
        }
        match headers::get(block, headers::TTL).and_then(parse_ttl) {
            Some(MsgTtl::After(ttl)) if ttl < marker_ttl => {
                let secs = (marker_ttl / 1_000_000_000).to_string();
                bytes::Bytes::from(replace_header(block, headers::TTL, &secs))
            }
            _ => block.clone(),
        }
    }

    /// Rebuilds the TTL index from the stored messages (after open or a snapshot install).
    /// Streams that never allowed TTLs have none, so they skip the scan.
    pub(super) fn rebuild_ttls(&mut self) -> Result<(), StorageError> {
        self.expiry = Expiry::default();
        if !self.config.allow_msg_ttl {
            return Ok(());
        }
        let mut at = 0;
        while let Some(m) = self.store.next_matching(at, &[])? {
            at = m.seq + 1;
            self.track_ttl(&m);
        }
        Ok(())
    }

    /// A cheap summary of what [`Self::next_expiry`] depends on: the first TTL, the first
    /// schedule, and whether `max_age` has a message to age. The apply compares it before and
    /// after each entry and wakes the leader's owner task when it changed, so an idle leader
    /// (asleep for seconds) plans again for a message or schedule that comes due sooner.
    pub fn expiry_hint(&self) -> (Option<u64>, Option<u64>, bool) {
        (
            self.expiry.ttls.first().map(|&(at, _)| at),
            self.next_schedule(),
            self.limits.max_age_ns.is_some() && self.store.state().msgs > 0,
        )
    }

    /// Whether an `Expire` as of `now_ns` would remove something (the leader's timer asks).
    pub fn expiry_due(&self, now_ns: u64) -> bool {
        self.next_expiry().is_some_and(|at| at <= now_ns)
    }

    /// When the next message expires (its TTL, or `max_age` after the oldest message) or the
    /// next schedule fires, Unix ns; `None` when nothing will. A store error reports "now" (0), so that the `Expire`
    /// apply reports it.
    pub fn next_expiry(&self) -> Option<u64> {
        let ttl = self.expiry.ttls.first().map(|&(at, _)| at);
        let age = self.limits.max_age_ns.and_then(|max_age| {
            let st = self.store.state();
            if st.msgs == 0 {
                return None;
            }
            if !self.config.allow_msg_ttl {
                return Some(st.first_ts.saturating_add(max_age));
            }
            let from = st.first_seq.max(self.expiry.age_cursor);
            match self.store.next_matching(from, &[]) {
                Ok(Some(m)) => Some(m.timestamp_ns.saturating_add(max_age)),
                Ok(None) => None,
                Err(_) => Some(0),
            }
        });
        ttl.into_iter().chain(age).chain(self.next_schedule()).min()
    }

    /// Drops messages whose TTL or `max_age` passed as of `now_ns` and writes subject delete
    /// markers, then fires the schedules due (`schedule`); returns how many messages were
    /// removed by expiry.
    pub(super) fn apply_expire(&mut self, now_ns: u64) -> Result<u64, StorageError> {
        let removed = self.expire_messages(now_ns)?;
        self.fire_schedules(now_ns)?;
        Ok(removed)
    }

    fn expire_messages(&mut self, now_ns: u64) -> Result<u64, StorageError> {
        self.advance_clock(now_ns);
        if !self.config.allow_msg_ttl {
            return limits::expire(self.store.as_mut(), &self.limits, now_ns);
        }
        let mut removed = 0;
        // Subjects that lost a message, in removal order, unless that message was a marker.
        let mut emptied: Vec<String> = Vec::new();
        while let Some(&(at, seq)) = self.expiry.ttls.first() {
            if at > now_ns {
                break;
            }
            self.expiry.ttls.pop_first();
            if let Some(m) = self.store.get(seq)?
                && self.store.remove(seq)?
            {
                removed += 1;
                if !is_marker(&m) {
                    emptied.push(m.subject);
                }
            }
        }
        if let Some(max_age) = self.limits.max_age_ns {
            let cutoff = now_ns.saturating_sub(max_age);
            let mut at = self.store.state().first_seq.max(self.expiry.age_cursor);
            while let Some(m) = self.store.next_matching(at, &[])? {
                if m.timestamp_ns > cutoff {
                    break;
                }
                at = m.seq + 1;
                if msg_ttl(&m) == Some(MsgTtl::Never) {
                    continue;
                }
                if self.store.remove(m.seq)? {
                    removed += 1;
                    if !is_marker(&m) {
                        emptied.push(m.subject);
                    }
                }
            }
            self.expiry.age_cursor = at;
        }
        let marker_ttl = u64::try_from(self.config.subject_delete_marker_ttl).unwrap_or(0);
        if marker_ttl > 0 {
            let mut done = BTreeSet::new();
            for subject in emptied {
                if done.insert(subject.clone()) && self.store.subject_count(&subject) == 0 {
                    self.write_marker(&subject, marker_ttl, now_ns)?;
                }
            }
        }
        Ok(removed)
    }

    /// Appends a `MaxAge` subject delete marker on `subject` (skipped if limits refuse it).
    fn write_marker(
        &mut self,
        subject: &str,
        marker_ttl: u64,
        now_ns: u64,
    ) -> Result<(), StorageError> {
        let ttl = go_duration::format(i64::try_from(marker_ttl).unwrap_or(i64::MAX));
        let msg = StoredMsg {
            seq: self.store.state().last_seq + 1,
            subject: subject.to_string(),
            headers: headers::block(&[
                (MARKER_REASON, "MaxAge"),
                (headers::TTL, &ttl),
                (headers::ROLLUP, "sub"),
            ])
            .into(),
            payload: bytes::Bytes::new(),
            timestamp_ns: now_ns,
        };
        if let StoreOutcome::Stored { .. } =
            store_with_limits(self.store.as_mut(), &self.limits, &msg)?
        {
            self.last_msg_id.clear();
            self.track_ttl(&msg);
        }
        Ok(())
    }
}

/// `block` with the value of the first `name` header replaced by `value` (in place).
fn replace_header(block: &[u8], name: &str, value: &str) -> Vec<u8> {
    let Ok(text) = std::str::from_utf8(block) else {
        return block.to_vec();
    };
    let mut out = String::with_capacity(text.len() + value.len());
    let mut done = false;
    for (i, line) in text.split_inclusive("\r\n").enumerate() {
        if i > 0
            && !done
            && let Some((key, _)) = line.split_once(':')
            && key == name
        {
            out.push_str(&format!("{name}: {value}\r\n"));
            done = true;
            continue;
        }
        out.push_str(line);
    }
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_only_the_first_matching_header() {
        let block = b"NATS/1.0\r\nA: 1\r\nNats-TTL: 1s\r\nNats-TTL: 2s\r\n\r\n";
        assert_eq!(
            replace_header(block, "Nats-TTL", "5"),
            b"NATS/1.0\r\nA: 1\r\nNats-TTL: 5\r\nNats-TTL: 2s\r\n\r\n".to_vec()
        );
    }

    #[test]
    fn ttl_values_follow_the_spec() {
        let s = 1_000_000_000;
        for (v, want) in [
            ("2", MsgTtl::After(2 * s)),
            ("10s", MsgTtl::After(10 * s)),
            ("1m", MsgTtl::After(60 * s)),
            ("1h30m", MsgTtl::After(5400 * s)),
            ("1.5s", MsgTtl::After(1_500_000_000)),
            ("never", MsgTtl::Never),
        ] {
            assert_eq!(parse_ttl(v), Some(want), "{v}");
        }
        for bad in ["0", "500ms", "junk", "", "-1", "5x", "-2s"] {
            assert_eq!(parse_ttl(bad), None, "{bad}");
        }
    }
}
