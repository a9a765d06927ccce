//! `ConsumerConfig` and `ConsumerInfo` (spec/nats-protocol-and-jetstream.md §3.9) in nats-server's
//! field order, with its
//! omitempty rules.
//!
//! Unlike `StreamConfig`, unknown fields are ignored: clients add consumer fields often
//! (priority groups, pinned TTLs) and refusing one would break an otherwise working client.
//! Every field accepts JSON `null` as "absent".

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{ClusterInfo, is_false, is_zero_i64, is_zero_u64, nullable};

/// Where a consumer starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeliverPolicy {
    /// From the first message.
    #[default]
    #[serde(rename = "all")]
    All,
    /// From the last message (matching the filter).
    #[serde(rename = "last")]
    Last,
    /// Only messages stored after creation.
    #[serde(rename = "new")]
    New,
    /// From `opt_start_seq`.
    #[serde(rename = "by_start_sequence")]
    ByStartSequence,
    /// From the first message at or after `opt_start_time`.
    #[serde(rename = "by_start_time")]
    ByStartTime,
    /// The last message of every matching subject, then everything new.
    #[serde(rename = "last_per_subject")]
    LastPerSubject,
}

/// How deliveries are acknowledged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AckPolicy {
    /// No acks: a delivery counts as acknowledged (Go's zero value).
    #[default]
    None,
    /// Acking a message acks everything delivered before it.
    All,
    /// Every message is acked on its own.
    Explicit,
    /// Flow-control acks (sourcing consumers only, 2.14+).
    #[serde(rename = "flow_control")]
    FlowControl,
}

/// Delivery pacing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplayPolicy {
    /// As fast as possible.
    #[default]
    Instant,
    /// With the stored inter-message spacing.
    Original,
}

/// A consumer's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerConfig {
    /// Makes the consumer durable.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub durable_name: String,
    /// Consumer name.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub name: String,
    /// Free text.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub description: String,
    /// Start position.
    #[serde(default, deserialize_with = "nullable")]
    pub deliver_policy: DeliverPolicy,
    /// Start sequence for `by_start_sequence`.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_u64"
    )]
    pub opt_start_seq: u64,
    /// Start time for `by_start_time` (RFC 3339).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub opt_start_time: Option<String>,
    /// Ack policy.
    #[serde(default, deserialize_with = "nullable")]
    pub ack_policy: AckPolicy,
    /// How long a delivery waits for its ack, ns.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i64"
    )]
    pub ack_wait: i64,
    /// Deliveries before giving up (-1 = unlimited).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i64"
    )]
    pub max_deliver: i64,
    /// Ack wait per delivery attempt, ns.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub backoff: Vec<i64>,
    /// Single subject filter.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub filter_subject: String,
    /// Several non-overlapping filters.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub filter_subjects: Vec<String>,
    /// Pacing.
    #[serde(default, deserialize_with = "nullable")]
    pub replay_policy: ReplayPolicy,
    /// Push delivery rate limit, bits per second.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_u64"
    )]
    pub rate_limit_bps: u64,
    /// Ack sampling frequency.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub sample_freq: String,
    /// Max outstanding pull requests.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i64"
    )]
    pub max_waiting: i64,
    /// Max unacknowledged deliveries (-1 = unlimited).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i64"
    )]
    pub max_ack_pending: i64,
    /// Push flow control.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub flow_control: bool,
    /// Deliver headers only (plus `Nats-Msg-Size`).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub headers_only: bool,
    /// Max `batch` of one pull request.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i64"
    )]
    pub max_batch: i64,
    /// Max `expires` of one pull request, ns.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i64"
    )]
    pub max_expires: i64,
    /// Max `max_bytes` of one pull request.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i64"
    )]
    pub max_bytes: i64,
    /// Push target; makes the consumer push based.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub deliver_subject: String,
    /// Push queue group.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub deliver_group: String,
    /// Push idle heartbeat, ns.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i64"
    )]
    pub idle_heartbeat: i64,
    /// Delete after this long without interest, ns.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i64"
    )]
    pub inactive_threshold: i64,
    /// Replicas (0 = the stream's).
    #[serde(default, deserialize_with = "nullable")]
    pub num_replicas: i64,
    /// Keep the consumer's state in memory.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub mem_storage: bool,
    /// Internal direct consumer (mirrors/sources).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub direct: bool,
    /// User metadata plus the server's `_nats.*` keys.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub metadata: BTreeMap<String, String>,
    /// Paused until this time (RFC 3339).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub pause_until: Option<String>,
    /// Pull priority groups.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub priority_groups: Vec<String>,
    /// Priority policy (`none` omitted).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub priority_policy: String,
    /// Pin TTL, ns.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i64"
    )]
    pub priority_timeout: i64,
}

impl ConsumerConfig {
    /// A push consumer has a deliver subject.
    pub fn is_push(&self) -> bool {
        !self.deliver_subject.is_empty()
    }

    /// Whether the consumer is durable.
    pub fn is_durable(&self) -> bool {
        !self.durable_name.is_empty()
    }

    /// The subject filters (single or several); empty means every subject.
    pub fn filters(&self) -> Vec<String> {
        if !self.filter_subjects.is_empty() {
            self.filter_subjects.clone()
        } else if !self.filter_subject.is_empty() {
            vec![self.filter_subject.clone()]
        } else {
            Vec::new()
        }
    }
}

/// A consumer/stream sequence pair with the time it last moved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SequenceInfo {
    /// Consumer sequence.
    pub consumer_seq: u64,
    /// Stream sequence.
    pub stream_seq: u64,
    /// Last activity (RFC 3339), omitted until there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_active: Option<String>,
}

/// `CONSUMER.INFO` / create answer body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConsumerInfo {
    /// Stream name.
    pub stream_name: String,
    /// Consumer name.
    pub name: String,
    /// Creation time (RFC 3339).
    pub created: String,
    /// Configuration with defaults filled in.
    pub config: ConsumerConfig,
    /// Last delivery.
    pub delivered: SequenceInfo,
    /// Ack floor.
    pub ack_floor: SequenceInfo,
    /// Delivered, not acknowledged.
    pub num_ack_pending: u64,
    /// Pending messages delivered more than once.
    pub num_redelivered: u64,
    /// Outstanding pull requests.
    pub num_waiting: u64,
    /// Matching messages not delivered yet.
    pub num_pending: u64,
    /// Cluster placement (omitted on a single server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterInfo>,
    /// A push consumer with interest on its deliver subject.
    #[serde(default, skip_serializing_if = "is_false")]
    pub push_bound: bool,
    /// Paused.
    #[serde(default, skip_serializing_if = "is_false")]
    pub paused: bool,
    /// Time left paused, ns.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub pause_remaining: i64,
    /// Priority groups and their pins (consumers with `priority_groups`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub priority_groups: Vec<PriorityGroupState>,
    /// Gathered at (RFC 3339).
    pub ts: String,
}

/// One priority group in `CONSUMER.INFO`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PriorityGroupState {
    /// The group.
    pub group: String,
    /// The pinned client's pin id (`pinned_client`), if pinned.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pinned_client_id: String,
    /// When it was pinned (RFC 3339; Go's zero time when not pinned, as nats-server shows it).
    #[serde(default)]
    pub pinned_ts: String,
}
