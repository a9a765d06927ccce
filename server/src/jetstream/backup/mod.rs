//! Stream backups (`$JS.API.STREAM.SNAPSHOT` / `RESTORE`): the request types, the flow control
//! numbers and the backup format, all pure (the runtime's `api::snapshot`/`api::restore` move
//! the bytes).
//!
//! The format is nats-server 2.15's v2 backup: an S2 stream ([`s2`]) around a `NATSARC1`
//! archive ([`archive`]) of the stream state, its consumers and its messages. A backup taken
//! from jetraft restores into nats-server and the other way round; the `nats` CLI stores it as
//! it comes (`stream.tar.s2`, named after the older tar format) and only decompresses it to
//! count bytes.

pub mod archive;
pub mod s2;

use std::collections::BTreeMap;

use jetraft_storage::consumer::{ConsumerState, Pending, SequencePair};
use serde::{Deserialize, Serialize};

/// The chunk size nats-server uses when the request names none.
pub const DEFAULT_CHUNK: usize = 128 * 1024;
/// The window (unacknowledged bytes) nats-server uses when the request names none.
pub const DEFAULT_WINDOW: usize = 8 * 1024 * 1024;

/// `$JS.API.STREAM.SNAPSHOT.<stream>` request (nats-server `JSApiStreamSnapshotRequest`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SnapshotRequest {
    /// Where the chunks go.
    pub deliver_subject: String,
    /// Leave the consumers out.
    pub no_consumers: bool,
    /// Preferred chunk size (clamped to 1 KiB..=1 MiB).
    pub chunk_size: i64,
    /// Preferred window (clamped to 1 KiB..=32 MiB, at least one chunk).
    pub window_size: i64,
    /// Check every message's checksum first (jetraft's store checks each record as it is read
    /// anyway).
    #[serde(rename = "jsck")]
    pub check_msgs: bool,
}

impl crate::jetstream::api::types::requests::ApiRequest for SnapshotRequest {
    const GO_TYPE: &'static str = "server.JSApiStreamSnapshotRequest";
}

impl crate::jetstream::api::types::requests::ApiRequest for RestoreRequest {
    const GO_TYPE: &'static str = "server.JSApiStreamRestoreRequest";
}

impl SnapshotRequest {
    /// The chunk size and how many chunks may be unacknowledged, as nats-server clamps them.
    pub fn flow(&self) -> (usize, usize) {
        let pick = |v: i64, default: usize| {
            usize::try_from(v)
                .ok()
                .filter(|v| *v > 0)
                .unwrap_or(default)
        };
        let chunk = pick(self.chunk_size, DEFAULT_CHUNK).clamp(1024, 1024 * 1024);
        let window = pick(self.window_size, DEFAULT_WINDOW)
            .clamp(1024, 32 * 1024 * 1024)
            .max(chunk);
        (chunk, window / chunk)
    }
}

/// `$JS.API.STREAM.RESTORE.<stream>` request (nats-server `JSApiStreamRestoreRequest`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct RestoreRequest {
    /// The stream's configuration.
    pub config: serde_json::Value,
    /// The stream's state when the backup was taken (informational).
    pub state: serde_json::Value,
}

/// The parts of a backup's `state.json` a restore uses (nats-server `StreamState`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct BackupState {
    /// Messages present.
    pub messages: u64,
    /// First sequence.
    pub first_seq: u64,
    /// Last sequence.
    pub last_seq: u64,
    /// Time of the last message (RFC 3339).
    pub last_ts: String,
    /// How many consumer entries follow.
    pub consumer_count: u64,
}

/// A sequence pair as nats-server writes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WirePair {
    /// Consumer sequence.
    #[serde(default)]
    pub consumer_seq: u64,
    /// Stream sequence.
    #[serde(default)]
    pub stream_seq: u64,
}

/// One pending message as nats-server writes it (its Go struct has no JSON tags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WirePending {
    /// Consumer sequence of the latest delivery.
    #[serde(rename = "Sequence", default)]
    pub sequence: u64,
    /// When it was delivered, Unix ns.
    #[serde(rename = "Timestamp", default)]
    pub timestamp: i64,
}

/// A consumer's state as nats-server's backups hold it (`ConsumerState` JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireConsumerState {
    /// The last delivery.
    #[serde(default)]
    pub delivered: WirePair,
    /// The ack floor.
    #[serde(default)]
    pub ack_floor: WirePair,
    /// Delivered, unacknowledged messages by stream sequence.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pending: BTreeMap<u64, WirePending>,
    /// Delivery counts above one, by stream sequence.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub redelivered: BTreeMap<u64, u64>,
}

impl WireConsumerState {
    /// The backup form of `state`, bounded to the stream's `last_seq` at the snapshot.
    pub fn from_state(state: &ConsumerState, last_seq: u64) -> Self {
        let pair = |p: &SequencePair| WirePair {
            consumer_seq: p.consumer_seq,
            stream_seq: p.stream_seq.min(last_seq),
        };
        let kept = || state.pending.iter().filter(|(seq, _)| **seq <= last_seq);
        Self {
            delivered: pair(&state.delivered),
            ack_floor: pair(&state.ack_floor),
            pending: kept()
                .map(|(seq, p)| {
                    let ts = i64::try_from(p.last_delivered_ns).unwrap_or(i64::MAX);
                    (
                        *seq,
                        WirePending {
                            sequence: p.consumer_seq,
                            timestamp: ts,
                        },
                    )
                })
                .collect(),
            redelivered: kept()
                .filter(|(_, p)| p.deliveries > 1)
                .map(|(seq, p)| (*seq, p.deliveries))
                .collect(),
        }
    }

    /// The state a restored consumer starts from.
    pub fn to_state(&self) -> ConsumerState {
        let pair = |p: &WirePair| SequencePair {
            consumer_seq: p.consumer_seq,
            stream_seq: p.stream_seq,
        };
        ConsumerState {
            delivered: pair(&self.delivered),
            ack_floor: pair(&self.ack_floor),
            pending: self
                .pending
                .iter()
                .map(|(seq, p)| {
                    let pending = Pending {
                        consumer_seq: p.sequence,
                        deliveries: self.redelivered.get(seq).copied().unwrap_or(1).max(1),
                        last_delivered_ns: u64::try_from(p.timestamp).unwrap_or(0),
                    };
                    (*seq, pending)
                })
                .collect(),
        }
    }
}

/// A `consumers/<name>` entry: `{"config":{..},"state":{..}}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConsumerEntry {
    /// The consumer's configuration JSON.
    pub config: serde_json::Value,
    /// Its state.
    pub state: WireConsumerState,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_is_clamped_as_nats_server_does() {
        let req = |chunk, window| SnapshotRequest {
            chunk_size: chunk,
            window_size: window,
            ..SnapshotRequest::default()
        };
        assert_eq!(req(0, 0).flow(), (128 * 1024, 64));
        assert_eq!(req(10, 10).flow(), (1024, 1));
        assert_eq!(req(4 << 20, 0).flow(), (1 << 20, 8));
        assert_eq!(req(64 * 1024, 1).flow(), (64 * 1024, 1));
        assert_eq!(req(-5, 1 << 30).flow(), (128 * 1024, 256));
    }

    #[test]
    fn consumer_state_round_trips_in_nats_server_json() {
        let mut state = ConsumerState::default();
        state.record_delivery(4, 1, 10);
        state.record_delivery(5, 2, 11);
        state.record_delivery(4, 3, 12);
        state.ack(5);
        let wire = WireConsumerState::from_state(&state, 100);
        let json = serde_json::to_string(&wire).unwrap();
        assert!(
            json.starts_with(r#"{"delivered":{"consumer_seq":3,"stream_seq":5},"ack_floor":{"#),
            "{json}"
        );
        assert!(
            json.ends_with(
                r#""pending":{"4":{"Sequence":3,"Timestamp":12}},"redelivered":{"4":2}}"#
            ),
            "{json}"
        );
        let back: WireConsumerState = serde_json::from_str(&json).unwrap();
        assert_eq!(back.to_state(), state);
    }

    #[test]
    fn consumer_state_is_bounded_to_the_snapshot() {
        let mut state = ConsumerState::default();
        state.record_delivery(4, 1, 10);
        state.record_delivery(9, 2, 11);
        let wire = WireConsumerState::from_state(&state, 5);
        assert_eq!(wire.delivered.stream_seq, 5);
        assert_eq!(wire.pending.keys().copied().collect::<Vec<_>>(), [4]);
    }
}
