//! Durable consumer state: how far a consumer has delivered and acknowledged, and what is
//! pending acknowledgement.
//!
//! [`ConsumerState`] is stored as one compact record per consumer (see [`codec`]): sequences are
//! delta-encoded varints relative to the ack floor and timestamps relative to the oldest pending
//! delivery, so 100k pending acks take about 1 MB. Two implementations share one trait and one
//! conformance suite: [`crate::mem::MemConsumerStore`] and [`crate::rocks::RocksConsumerStore`].
//!
//! Invariants of a well-formed state (kept by the helpers, checked by [`ConsumerState::check`]):
//! every pending stream sequence is above `ack_floor.stream_seq` and at most
//! `delivered.stream_seq`, and every pending entry has at least one delivery.

pub mod codec;
#[cfg(test)]
pub(crate) mod conformance;

use std::collections::BTreeMap;

use crate::StorageError;
use crate::stream::StreamUid;

/// A consumer sequence with the stream sequence it delivered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SequencePair {
    /// The consumer's own delivery counter.
    pub consumer_seq: u64,
    /// The stream sequence of that delivery.
    pub stream_seq: u64,
}

/// One delivered, not yet acknowledged message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pending {
    /// Consumer sequence of the latest delivery (the ack reply subject carries it).
    pub consumer_seq: u64,
    /// How many times it has been delivered (1 = never redelivered); drives `max_deliver`.
    pub deliveries: u64,
    /// When it was last delivered (ns since epoch); drives `ack_wait` redelivery.
    pub last_delivered_ns: u64,
}

/// Everything a consumer must remember across restarts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerState {
    /// The last delivery.
    pub delivered: SequencePair,
    /// Everything at or below this is acknowledged.
    pub ack_floor: SequencePair,
    /// Delivered but unacknowledged messages, by stream sequence.
    pub pending: BTreeMap<u64, Pending>,
}

impl ConsumerState {
    /// Records a delivery of `stream_seq` as consumer sequence `consumer_seq` at `now_ns`; a
    /// second delivery of a pending message counts as a redelivery.
    pub fn record_delivery(&mut self, stream_seq: u64, consumer_seq: u64, now_ns: u64) {
        let p = self.pending.entry(stream_seq).or_default();
        p.consumer_seq = consumer_seq;
        p.deliveries += 1;
        p.last_delivered_ns = now_ns;
        if consumer_seq > self.delivered.consumer_seq {
            self.delivered.consumer_seq = consumer_seq;
        }
        if stream_seq > self.delivered.stream_seq {
            self.delivered.stream_seq = stream_seq;
        }
    }

    /// Acknowledges `stream_seq`; returns false if it was not pending. The ack floor moves up to
    /// just below the oldest remaining pending message (its consumer sequence to just below that
    /// message's latest delivery), or to `delivered` when nothing is pending.
    pub fn ack(&mut self, stream_seq: u64) -> bool {
        if self.pending.remove(&stream_seq).is_none() {
            return false;
        }
        match self.pending.first_key_value() {
            None => self.ack_floor = self.delivered,
            Some((&oldest, p)) => {
                let floor = &mut self.ack_floor;
                floor.stream_seq = floor.stream_seq.max(oldest - 1);
                floor.consumer_seq = floor.consumer_seq.max(p.consumer_seq.saturating_sub(1));
            }
        }
        true
    }

    /// Pending messages delivered at or before `cutoff_ns` (their `ack_wait` has passed), oldest
    /// stream sequence first.
    pub fn due_for_redelivery(&self, cutoff_ns: u64) -> Vec<u64> {
        self.pending
            .iter()
            .filter(|(_, p)| p.last_delivered_ns <= cutoff_ns)
            .map(|(seq, _)| *seq)
            .collect()
    }

    /// Checks the invariants in the module docs.
    pub fn check(&self) -> Result<(), String> {
        if let Some((&first, _)) = self.pending.first_key_value()
            && first <= self.ack_floor.stream_seq
        {
            return Err(format!(
                "pending {first} at or below ack floor {}",
                self.ack_floor.stream_seq
            ));
        }
        if let Some((&last, _)) = self.pending.last_key_value()
            && last > self.delivered.stream_seq
        {
            return Err(format!(
                "pending {last} above delivered {}",
                self.delivered.stream_seq
            ));
        }
        if self.pending.values().any(|p| p.deliveries == 0) {
            return Err("pending entry with zero deliveries".into());
        }
        Ok(())
    }
}

/// Durable storage of consumer states, and of each consumer's config record (opaque bytes the
/// caller encodes), keyed by stream uid and consumer name. One record per consumer, so adding or
/// changing one consumer writes that consumer only.
pub trait ConsumerStore: Send {
    /// Replaces the stored state of `name`.
    fn save(
        &mut self,
        stream: StreamUid,
        name: &str,
        state: &ConsumerState,
    ) -> Result<(), StorageError>;
    /// The stored state of `name`, if any.
    fn load(&self, stream: StreamUid, name: &str) -> Result<Option<ConsumerState>, StorageError>;
    /// Deletes `name`'s state and config record; false if it had no state.
    fn delete(&mut self, stream: StreamUid, name: &str) -> Result<bool, StorageError>;
    /// Every consumer name of `stream` with a stored state, sorted.
    fn list(&self, stream: StreamUid) -> Result<Vec<String>, StorageError>;
    /// Replaces the config record of `name`.
    fn save_config(
        &mut self,
        stream: StreamUid,
        name: &str,
        body: &[u8],
    ) -> Result<(), StorageError>;
    /// Every config record of `stream`, by consumer name, sorted.
    fn configs(&self, stream: StreamUid) -> Result<Vec<(String, Vec<u8>)>, StorageError>;
}
