//! `StreamInfo`, its `state` and `cluster` objects (spec/nats-protocol-and-jetstream.md §3.6).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::config::StreamConfig;
use super::{go_time, is_false, is_zero_u64};

/// Messages lost to data corruption (`lost`, omitted when none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostStreamData {
    /// Lost sequences.
    pub msgs: Vec<u64>,
    /// Lost bytes.
    pub bytes: u64,
}

/// The `state` object of a stream info.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamStateInfo {
    /// Messages present.
    pub messages: u64,
    /// Stored bytes (spec/nats-protocol-and-jetstream.md §4.6).
    pub bytes: u64,
    /// Lowest present sequence, `last_seq + 1` when empty, 0 for a brand-new stream.
    pub first_seq: u64,
    /// Time of the first message, Go's zero time when empty.
    pub first_ts: String,
    /// Highest sequence ever assigned.
    pub last_seq: u64,
    /// Time of the last message (kept after a purge).
    pub last_ts: String,
    /// Distinct subjects present.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub num_subjects: u64,
    /// Per-subject counts, only with a `subjects_filter` request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub subjects: BTreeMap<String, u64>,
    /// Interior gaps between first and last sequence.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub num_deleted: u64,
    /// The gaps themselves, only with `deleted_details`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted: Vec<u64>,
    /// Data loss report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<LostStreamData>,
    /// Consumers of the stream; always present (clients require it).
    pub consumer_count: u64,
}

impl StreamStateInfo {
    /// The state object for a store state; subjects and deleted details are filled by the
    /// caller when requested.
    pub fn from_store(state: &jetraft_storage::stream::StreamState, consumer_count: u64) -> Self {
        Self {
            messages: state.msgs,
            bytes: state.bytes,
            first_seq: state.first_seq,
            first_ts: go_time::format(if state.msgs == 0 { 0 } else { state.first_ts }),
            last_seq: state.last_seq,
            last_ts: go_time::format(state.last_ts),
            num_subjects: state.num_subjects,
            subjects: BTreeMap::new(),
            num_deleted: state.num_deleted(),
            deleted: Vec::new(),
            lost: None,
            consumer_count,
        }
    }
}

/// One replica in `cluster.replicas` (the leader is not listed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerInfo {
    /// Server name.
    pub name: String,
    /// Caught up with the leader.
    pub current: bool,
    /// Not reachable.
    #[serde(default, skip_serializing_if = "is_false")]
    pub offline: bool,
    /// Nanoseconds since the leader last heard from it.
    pub active: u64,
    /// Operations behind the leader.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub lag: u64,
    /// Peer id.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub peer: String,
}

/// The `cluster` object: `{"leader":"n1"}` on a single server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterInfo {
    /// Cluster name (clustered mode only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Raft group name (clustered mode only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub raft_group: String,
    /// Leader server name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub leader: String,
    /// When the leader was elected (RFC 3339), clustered mode only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_since: Option<String>,
    /// Followers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<PeerInfo>,
}

/// `StreamInfo` as create/update/info/list responses carry it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamInfo {
    /// The normalised configuration (with the server's `_nats.*` metadata keys).
    pub config: StreamConfig,
    /// Creation time (RFC 3339).
    pub created: String,
    /// Message state.
    pub state: StreamStateInfo,
    /// Leader and replicas; absent in create/update responses on a single server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterInfo>,
    /// How the mirror is doing (mirrors only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<StreamSourceInfo>,
    /// How each source is doing, in config order (sourcing streams only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<StreamSourceInfo>,
    /// The stream and the streams mirroring it, where a client may read (STREAM.INFO in
    /// clustered mode, when there is a mirror).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alternates: Vec<StreamAlternate>,
    /// When this info was gathered (RFC 3339).
    pub ts: String,
}

/// `StreamAlternate`: a stream a client may read a stream's messages from (itself or a mirror).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamAlternate {
    /// The stream's name.
    pub name: String,
    /// The JetStream domain, when configured.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    /// The cluster it is in.
    pub cluster: String,
}

/// `StreamSourceInfo`: the state of a mirror or of one source (spec/nats-protocol-and-jetstream.md
/// §9.2). Field order is
/// nats-server's (observed: `name, lag, seq, active, error, filter_subject, subject_transforms`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamSourceInfo {
    /// Origin stream name.
    pub name: String,
    /// Remote origin, when configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<super::External>,
    /// Origin messages not copied yet.
    pub lag: u64,
    /// Origin sequence last copied (sources only, once something was copied; observed).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub seq: u64,
    /// Nanoseconds since the origin was last reached; `-1` = never.
    pub active: i64,
    /// Why copying fails right now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<crate::jetstream::api::ApiError>,
    /// The configured filter.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub filter_subject: String,
    /// The configured transforms.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subject_transforms: Vec<super::SubjectTransform>,
}

impl StreamSourceInfo {
    /// The info of a mirror or source nothing is known about yet (`active: -1`).
    pub fn idle(src: &super::StreamSource) -> Self {
        Self {
            name: src.name.clone(),
            external: src.external.clone(),
            lag: 0,
            seq: 0,
            active: -1,
            error: None,
            filter_subject: src.filter_subject.clone(),
            subject_transforms: src.subject_transforms.clone(),
        }
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}
