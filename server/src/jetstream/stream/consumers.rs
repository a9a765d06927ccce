//! The replicated side of consumers: their configs and delivery/ack state live in the stream's
//! state machine, changed only by committed `ConsumerCreate`/`ConsumerDelete`/`ConsumerProgress`
//! commands, identically on every replica.
//!
//! The delivery engine (runtime, leader only) decides what to deliver and proposes what it did;
//! this module only records it. Invariants:
//! - A consumer's start position is computed at apply time from the store, so every replica
//!   agrees on it.
//! - The ack floor never moves backwards: acks and drops only remove pending entries, and a
//!   delivery below the floor is ignored.
//! - Retention is applied here: a work-queue stream removes a message once its consumer acked
//!   or dropped it; an interest stream once every consumer whose filter matches has.
//!
//! Durability: configs are one `put_meta` record (rewritten on create/delete), states go to the
//! [`ConsumerStore`] for the consumers touched since the last `save_applied`, before the applied
//! log id is written (so a crash replays, never skips, a progress batch; replays are
//! idempotent apart from delivery counts).

use std::collections::{BTreeMap, BTreeSet};

use jetraft_proto::stream::{ConsumerCreate, ConsumerProgress, ConsumerSnapshot};
use jetraft_storage::StorageError;
use jetraft_storage::consumer::{ConsumerState, codec};
use jetraft_storage::stream::StreamStore;

use super::StreamStateMachine;
use crate::jetstream::api::types::consumer::{AckPolicy, ConsumerConfig, DeliverPolicy};
use crate::jetstream::api::types::{RetentionPolicy, go_time, to_go_json};

/// One consumer as the state machine knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerRecord {
    /// Normalised configuration.
    pub config: ConsumerConfig,
    /// Creation time, Unix ns.
    pub created_ns: u64,
    /// For `last_per_subject`: the stream's last sequence when the consumer was created; up to
    /// it only the last message of each subject is delivered.
    pub lps_end: u64,
    /// Delivery and ack state.
    pub state: ConsumerState,
    /// Time of the last delivery, Unix ns (0 = none yet).
    pub last_delivered_ns: u64,
    /// Time of the last ack, Unix ns (0 = none yet).
    pub last_ack_ns: u64,
    /// The state the consumer was created with (nothing delivered yet), for the create
    /// response: nats-server answers a create with the info snapshotted before delivery
    /// starts (clients read `num_pending` there to know how much history to expect). Not
    /// persisted: after a restart or snapshot it is the state loaded.
    pub initial: ConsumerState,
}

/// The durable description of a consumer (state lives in the consumer store).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct StoredConsumer {
    name: String,
    config: ConsumerConfig,
    created_ns: u64,
    lps_end: u64,
}

/// The config record of consumer `name` (JSON of [`StoredConsumer`]).
fn stored_config(name: &str, r: &ConsumerRecord) -> Vec<u8> {
    let stored = StoredConsumer {
        name: name.to_string(),
        config: r.config.clone(),
        created_ns: r.created_ns,
        lps_end: r.lps_end,
    };
    serde_json::to_vec(&stored).unwrap_or_default()
}

impl ConsumerRecord {
    /// The subject filters as string slices (empty = everything).
    pub fn filters(&self) -> Vec<String> {
        self.config.filters()
    }

    /// Whether a message on `subject` is for this consumer.
    pub fn matches(&self, subject: &str) -> bool {
        let filters = self.filters();
        filters.is_empty()
            || filters
                .iter()
                .any(|f| jetraft_storage::subject::matches(f, subject))
    }

    /// Whether `seq` counts as acknowledged by this consumer (below the floor, or delivered
    /// and no longer pending).
    pub fn has_acked(&self, seq: u64) -> bool {
        seq <= self.state.ack_floor.stream_seq
            || (seq <= self.state.delivered.stream_seq && !self.state.pending.contains_key(&seq))
    }

    /// The next stream sequence to consider for delivery.
    pub fn next_seq(&self) -> u64 {
        self.state.delivered.stream_seq + 1
    }
}

/// Where a new consumer starts: the first stream sequence it may deliver.
pub fn start_seq(store: &dyn StreamStore, cfg: &ConsumerConfig) -> Result<u64, StorageError> {
    let st = store.state();
    let end = st.last_seq + 1;
    let filters = cfg.filters();
    let refs: Vec<&str> = filters.iter().map(String::as_str).collect();
    let first_matching = |from: u64| -> Result<u64, StorageError> {
        Ok(store.next_matching(from, &refs)?.map_or(end, |m| m.seq))
    };
    Ok(match cfg.deliver_policy {
        DeliverPolicy::All => first_matching(st.first_seq.max(1))?,
        DeliverPolicy::New => end,
        DeliverPolicy::Last => {
            let mut last = 0;
            if filters.is_empty() {
                last = if st.msgs > 0 { st.last_seq } else { 0 };
            } else {
                for f in &filters {
                    if let Some(m) = store.last_for_subject(f)? {
                        last = last.max(m.seq);
                    }
                }
            }
            if last == 0 { end } else { last }
        }
        DeliverPolicy::ByStartSequence => cfg.opt_start_seq.max(st.first_seq).max(1),
        DeliverPolicy::ByStartTime => {
            let at = cfg
                .opt_start_time
                .as_deref()
                .and_then(go_time::parse)
                .unwrap_or(0);
            first_at_or_after(store, at, &refs)?
        }
        DeliverPolicy::LastPerSubject => {
            let mut first = end;
            let patterns = if filters.is_empty() {
                vec![">".to_string()]
            } else {
                filters.clone()
            };
            for f in &patterns {
                for subject in store.subject_counts(f)?.keys() {
                    if let Some(m) = store.last_for_subject(subject)? {
                        first = first.min(m.seq);
                    }
                }
            }
            first
        }
    })
}

/// The first matching message with a timestamp at or after `at_ns` (binary search on the
/// sequence, timestamps being non-decreasing).
fn first_at_or_after(
    store: &dyn StreamStore,
    at_ns: u64,
    filters: &[&str],
) -> Result<u64, StorageError> {
    let st = store.state();
    let end = st.last_seq + 1;
    let (mut lo, mut hi) = (st.first_seq.max(1), end);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match store.next_matching(mid, &[])? {
            Some(m) if m.seq < hi => {
                if m.timestamp_ns >= at_ns {
                    hi = mid;
                } else {
                    lo = m.seq + 1;
                }
            }
            _ => hi = mid,
        }
    }
    Ok(store.next_matching(lo, filters)?.map_or(end, |m| m.seq))
}

/// Matching messages with a sequence at or above `from` (what `num_pending` counts).
///
/// Cost: free when `from` is at or below the first message; otherwise it walks the smaller
/// side of the stream (unfiltered) or the messages from `from` on (filtered).
pub fn count_pending(
    store: &dyn StreamStore,
    from: u64,
    filters: &[String],
) -> Result<u64, StorageError> {
    let st = store.state();
    if st.msgs == 0 || from > st.last_seq {
        return Ok(0);
    }
    if from <= st.first_seq {
        if filters.is_empty() {
            return Ok(st.msgs);
        }
        let mut n = 0;
        for f in filters {
            n += store.subject_counts(f)?.values().sum::<u64>();
        }
        return Ok(n);
    }
    let count_from = |start: u64, below: Option<u64>, refs: &[&str]| {
        let mut n = 0u64;
        let mut at = start;
        while let Some(m) = store.next_matching(at, refs)? {
            if below.is_some_and(|b| m.seq >= b) {
                break;
            }
            n += 1;
            at = m.seq + 1;
        }
        Ok::<u64, StorageError>(n)
    };
    if filters.is_empty() {
        // Walk whichever side is shorter.
        return if from - st.first_seq < st.last_seq - from {
            Ok(st.msgs - count_from(st.first_seq, Some(from), &[])?)
        } else {
            count_from(from, None, &[])
        };
    }
    let refs: Vec<&str> = filters.iter().map(String::as_str).collect();
    count_from(from, None, &refs)
}

/// For `last_per_subject` consumers still inside their initial set: the remaining last
/// messages (one per subject) at or above `from`, where "last" is judged as of `lps_end`
/// (the stream's last sequence when the consumer was created).
///
/// A subject's initial message is its last one at or below `lps_end`; it is at or above `from`
/// exactly when the subject has any message in `from..=lps_end`. Messages published after the
/// consumer was created do not take a subject out of the initial set (nats-server fixes that
/// set at creation).
pub fn count_last_per_subject(
    store: &dyn StreamStore,
    from: u64,
    lps_end: u64,
    filters: &[String],
) -> Result<u64, StorageError> {
    let patterns = if filters.is_empty() {
        vec![">".to_string()]
    } else {
        filters.to_vec()
    };
    let mut n = 0;
    for f in &patterns {
        for subject in store.subject_counts(f)?.keys() {
            if store
                .next_matching(from, &[subject.as_str()])?
                .is_some_and(|m| m.seq <= lps_end)
            {
                n += 1;
            }
        }
    }
    Ok(n)
}

/// For `last_per_subject` consumers: whether the message `seq` on `subject` (at or below
/// `lps_end`) belongs to the initial set, that is, no later message on its subject is at or
/// below `lps_end`.
pub fn is_initial_last_per_subject(
    store: &dyn StreamStore,
    seq: u64,
    subject: &str,
    lps_end: u64,
) -> Result<bool, StorageError> {
    Ok(store
        .next_matching(seq + 1, &[subject])?
        .is_none_or(|later| later.seq > lps_end))
}

impl StreamStateMachine {
    /// The consumers, by name.
    pub fn consumers(&self) -> &BTreeMap<String, ConsumerRecord> {
        &self.consumers
    }

    /// One consumer.
    pub fn consumer(&self, name: &str) -> Option<&ConsumerRecord> {
        self.consumers.get(name)
    }

    pub(super) fn apply_consumer_create(&mut self, c: &ConsumerCreate) -> Result<(), StorageError> {
        let config: ConsumerConfig = match serde_json::from_slice(&c.config_json) {
            Ok(cfg) => cfg,
            // The leader validated it; an undecodable config is dropped, not fatal.
            Err(_) => return Ok(()),
        };
        if let Some(rec) = self.consumers.get_mut(&c.name) {
            rec.config = config;
        } else {
            let start = start_seq(self.store.as_ref(), &config)?;
            let mut state = ConsumerState::default();
            state.delivered.stream_seq = start.saturating_sub(1);
            state.ack_floor.stream_seq = start.saturating_sub(1);
            let lps_end = self.store.state().last_seq;
            self.consumers.insert(
                c.name.clone(),
                ConsumerRecord {
                    config,
                    created_ns: c.created_ns,
                    lps_end,
                    initial: state.clone(),
                    state,
                    last_delivered_ns: 0,
                    last_ack_ns: 0,
                },
            );
            self.dirty_consumers.insert(c.name.clone());
        }
        self.consumer_count = self.consumers.len() as u64;
        self.configs_changed.insert(c.name.clone());
        Ok(())
    }

    pub(super) fn apply_consumer_delete(&mut self, name: &str) -> Result<(), StorageError> {
        if self.consumers.remove(name).is_none() {
            return Ok(());
        }
        self.consumer_count = self.consumers.len() as u64;
        self.configs_changed.remove(name);
        self.dirty_consumers.remove(name);
        self.deleted_consumers.insert(name.to_string());
        if self.config.retention == RetentionPolicy::Interest {
            // Messages only the deleted consumer was holding are free now.
            let st = self.store.state();
            let mut at = st.first_seq.max(1);
            let mut free = Vec::new();
            while let Some(m) = self.store.next_matching(at, &[])? {
                at = m.seq + 1;
                if self.interest_done(m.seq, &m.subject) {
                    free.push(m.seq);
                }
            }
            for seq in free {
                self.store.remove(seq)?;
            }
        }
        Ok(())
    }

    pub(super) fn apply_consumer_progress(
        &mut self,
        p: &ConsumerProgress,
    ) -> Result<(), StorageError> {
        let Some(rec) = self.consumers.get_mut(&p.name) else {
            return Ok(());
        };
        let mut done: BTreeSet<u64> = BTreeSet::new();
        let ack_none = rec.config.ack_policy == AckPolicy::None;
        for d in &p.delivered {
            if d.stream_seq <= rec.state.ack_floor.stream_seq && !ack_none {
                continue;
            }
            rec.state
                .record_delivery(d.stream_seq, d.consumer_seq, d.delivered_ns);
            rec.last_delivered_ns = rec.last_delivered_ns.max(d.delivered_ns);
            if ack_none {
                rec.state.pending.remove(&d.stream_seq);
                rec.state.ack_floor = rec.state.delivered;
                done.insert(d.stream_seq);
            }
        }
        for &seq in &p.acked {
            if rec.config.ack_policy == AckPolicy::All {
                let upto: Vec<u64> = rec.state.pending.range(..=seq).map(|(s, _)| *s).collect();
                for s in upto {
                    rec.state.ack(s);
                    done.insert(s);
                }
            } else if rec.state.ack(seq) {
                done.insert(seq);
            }
        }
        for &seq in &p.dropped {
            if rec.state.ack(seq) {
                done.insert(seq);
            }
        }
        if !p.acked.is_empty() || !p.dropped.is_empty() {
            rec.last_ack_ns = rec.last_ack_ns.max(p.now_ns);
        }
        self.dirty_consumers.insert(p.name.clone());
        match self.config.retention {
            RetentionPolicy::Limits => {}
            RetentionPolicy::WorkQueue => {
                for seq in done {
                    self.store.remove(seq)?;
                }
            }
            RetentionPolicy::Interest => {
                for seq in done {
                    if let Some(m) = self.store.get(seq)?
                        && self.interest_done(seq, &m.subject)
                    {
                        self.store.remove(seq)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether any consumer is interested in `subject` (an interest-retention stream keeps a
    /// new message only then).
    pub(super) fn has_interest(&self, subject: &str) -> bool {
        self.consumers.values().any(|c| c.matches(subject))
    }

    /// Whether every consumer interested in `subject` has acknowledged `seq`.
    fn interest_done(&self, seq: u64, subject: &str) -> bool {
        self.consumers
            .values()
            .all(|c| !c.matches(subject) || c.has_acked(seq))
    }

    /// Writes configs (if changed) and touched states; called before the applied id is saved.
    pub(super) fn persist_consumers(&mut self) -> Result<(), StorageError> {
        for name in std::mem::take(&mut self.deleted_consumers) {
            let uid = self.store.uid();
            self.consumer_store.delete(uid, &name)?;
        }
        for name in std::mem::take(&mut self.dirty_consumers) {
            if let Some(rec) = self.consumers.get(&name) {
                let uid = self.store.uid();
                self.consumer_store.save(uid, &name, &rec.state)?;
            }
        }
        // One record per changed consumer: a create writes that consumer, not every
        // consumer's config again (which made N creates cost O(N^2) bytes).
        for name in std::mem::take(&mut self.configs_changed) {
            if let Some(r) = self.consumers.get(&name) {
                let uid = self.store.uid();
                self.consumer_store
                    .save_config(uid, &name, &stored_config(&name, r))?;
            }
        }
        Ok(())
    }

    /// Loads consumers after a restart: their config records, or the one list of a store
    /// written before those, which is then moved into records (the list is emptied last, so a
    /// crash part-way moves it again at the next start).
    pub(super) fn load_consumers(&mut self) -> Result<(), StorageError> {
        let corrupt = |e: serde_json::Error| StorageError::Corrupt {
            cf: "sm_meta",
            detail: format!("consumer configs: {e}"),
        };
        let uid = self.store.uid();
        let legacy: Vec<StoredConsumer> = match self.store.get_meta(super::META_CONSUMERS)? {
            Some(bytes) => serde_json::from_slice(&bytes).map_err(corrupt)?,
            None => Vec::new(),
        };
        let stored: Vec<StoredConsumer> = if legacy.is_empty() {
            self.consumer_store
                .configs(uid)?
                .iter()
                .map(|(_, body)| serde_json::from_slice(body).map_err(corrupt))
                .collect::<Result<_, _>>()?
        } else {
            let keep: BTreeSet<&str> = legacy.iter().map(|s| s.name.as_str()).collect();
            for (name, _) in self.consumer_store.configs(uid)? {
                if !keep.contains(name.as_str()) {
                    self.consumer_store.delete(uid, &name)?;
                }
            }
            for s in &legacy {
                let body = serde_json::to_vec(s).map_err(corrupt)?;
                self.consumer_store.save_config(uid, &s.name, &body)?;
            }
            self.store.put_meta(super::META_CONSUMERS, b"[]")?;
            legacy
        };
        for s in stored {
            let state = self.consumer_store.load(uid, &s.name)?.unwrap_or_default();
            self.consumers.insert(
                s.name,
                ConsumerRecord {
                    config: s.config,
                    created_ns: s.created_ns,
                    lps_end: s.lps_end,
                    initial: state.clone(),
                    state,
                    last_delivered_ns: 0,
                    last_ack_ns: 0,
                },
            );
        }
        self.consumer_count = self.consumers.len() as u64;
        Ok(())
    }

    /// The consumers for a snapshot.
    pub(super) fn export_consumers(&self) -> Vec<ConsumerSnapshot> {
        self.consumers
            .iter()
            .map(|(name, r)| ConsumerSnapshot {
                name: name.clone(),
                config_json: to_go_json(&r.config).into_bytes().into(),
                created_ns: r.created_ns,
                state: codec::encode(&r.state).into(),
                lps_end: r.lps_end,
            })
            .collect()
    }

    /// Replaces the consumers with a snapshot's.
    pub(super) fn import_consumers(&mut self, snaps: &[ConsumerSnapshot]) -> Result<(), String> {
        let mut consumers = BTreeMap::new();
        for s in snaps {
            let config: ConsumerConfig =
                serde_json::from_slice(&s.config_json).map_err(|e| e.to_string())?;
            let state = codec::decode(&s.state).map_err(|e| e.to_string())?;
            consumers.insert(
                s.name.clone(),
                ConsumerRecord {
                    config,
                    created_ns: s.created_ns,
                    lps_end: s.lps_end,
                    initial: state.clone(),
                    state,
                    last_delivered_ns: 0,
                    last_ack_ns: 0,
                },
            );
        }
        for name in self.consumers.keys() {
            if !consumers.contains_key(name) {
                self.deleted_consumers.insert(name.clone());
            }
        }
        self.dirty_consumers = consumers.keys().cloned().collect();
        self.configs_changed = consumers.keys().cloned().collect();
        self.consumers = consumers;
        self.consumer_count = self.consumers.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
#[path = "consumers_tests.rs"]
mod tests;
