//! `StreamConfig` (spec/nats-protocol-and-jetstream.md §3.5) in nats-server's field order, with
//! its omitempty rules.
//!
//! Fields that Go always emits are plain values; omitempty ones are skipped when zero/empty.
//! Every field accepts JSON `null` as "absent". Unknown fields are rejected, as 2.15.1 does in
//! its default strict mode (`invalid JSON: json: unknown field "x"`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{is_false, is_zero_i64, is_zero_u64, nullable};

/// How messages are retained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RetentionPolicy {
    /// Keep messages until a limit removes them.
    #[default]
    Limits,
    /// Keep messages while a consumer has not acknowledged them.
    Interest,
    /// Remove a message once one consumer acknowledged it.
    #[serde(rename = "workqueue")]
    WorkQueue,
}

/// What happens when a limit is reached. Decoded case-insensitively, as nats-server does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DiscardPolicy {
    /// Remove the oldest messages.
    #[default]
    Old,
    /// Reject new messages.
    New,
}

impl<'de> Deserialize<'de> for DiscardPolicy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        match text.to_lowercase().as_str() {
            "old" => Ok(DiscardPolicy::Old),
            "new" => Ok(DiscardPolicy::New),
            _ => Err(serde::de::Error::unknown_variant(&text, &["old", "new"])),
        }
    }
}

/// Where the stream's messages live.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageType {
    /// On disk (RocksDB here).
    #[default]
    File,
    /// In memory.
    Memory,
}

/// On-disk compression; invisible on the wire apart from this field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageCompression {
    /// No compression.
    #[default]
    None,
    /// S2 compression.
    S2,
}

/// Placement hints for clustered streams.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// Target cluster name.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub cluster: String,
    /// Server tags every replica must have.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tags: Vec<String>,
    /// Preferred leader (only valid in step-down requests, refused in a config).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub preferred: String,
}

/// A subject transform `{src, dest}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubjectTransform {
    /// Source subject filter.
    #[serde(default, deserialize_with = "nullable")]
    pub src: String,
    /// Destination template.
    #[serde(default, deserialize_with = "nullable")]
    pub dest: String,
}

/// Republish stored messages to another subject.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RePublish {
    /// Which stored subjects to republish (empty means `>`).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub src: String,
    /// Destination template.
    #[serde(default, deserialize_with = "nullable")]
    pub dest: String,
    /// Send only headers.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub headers_only: bool,
}

/// An external (other domain/account) source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct External {
    /// API prefix of the remote JetStream.
    #[serde(default, deserialize_with = "nullable")]
    pub api: String,
    /// Delivery prefix.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub deliver: String,
}

/// A mirror or source definition (spec/nats-protocol-and-jetstream.md §9).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamSource {
    /// Origin stream name.
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// Start at this sequence.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_u64"
    )]
    pub opt_start_seq: u64,
    /// Start at this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opt_start_time: Option<String>,
    /// Only this subject.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub filter_subject: String,
    /// Transforms applied to sourced subjects.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub subject_transforms: Vec<SubjectTransform>,
    /// Remote origin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<External>,
}

/// Defaults and maxima for the stream's consumers. Always emitted, `{}` when unset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerLimits {
    /// Default/maximum inactive threshold (ns).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i64"
    )]
    pub inactive_threshold: i64,
    /// Maximum `max_ack_pending`.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i64"
    )]
    pub max_ack_pending: i64,
}

/// A stream's configuration as `$JS.API.STREAM.CREATE/UPDATE` take it and every response shows
/// it. Durations are integer nanoseconds. Field order is nats-server's (Go struct order).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamConfig {
    /// Stream name (required; also the default subject).
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// Free text, at most 4096 bytes.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub description: String,
    /// Subjects captured by the stream.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub subjects: Vec<String>,
    /// Retention policy.
    #[serde(default, deserialize_with = "nullable")]
    pub retention: RetentionPolicy,
    /// Maximum consumers, -1 unlimited.
    #[serde(default, deserialize_with = "nullable")]
    pub max_consumers: i64,
    /// Maximum messages, -1 unlimited.
    #[serde(default, deserialize_with = "nullable")]
    pub max_msgs: i64,
    /// Maximum stored bytes, -1 unlimited.
    #[serde(default, deserialize_with = "nullable")]
    pub max_bytes: i64,
    /// Maximum message age in ns, 0 unlimited.
    #[serde(default, deserialize_with = "nullable")]
    pub max_age: i64,
    /// Maximum messages per subject, -1 unlimited.
    #[serde(default, deserialize_with = "nullable")]
    pub max_msgs_per_subject: i64,
    /// Maximum headers + payload size, -1 unlimited (an `int32` in Go).
    #[serde(default, deserialize_with = "nullable")]
    pub max_msg_size: i32,
    /// Discard policy.
    #[serde(default, deserialize_with = "nullable")]
    pub discard: DiscardPolicy,
    /// Storage type (immutable).
    #[serde(default, deserialize_with = "nullable")]
    pub storage: StorageType,
    /// Replica count, 1..5.
    #[serde(default, deserialize_with = "nullable")]
    pub num_replicas: i64,
    /// Publishes get no PubAck.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub no_ack: bool,
    /// Obsolete template name; accepted and ignored (nats-py sends it).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub template_owner: String,
    /// `Nats-Msg-Id` de-duplication window in ns.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i64"
    )]
    pub duplicate_window: i64,
    /// Placement hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// Mirror origin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<StreamSource>,
    /// Sources.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub sources: Vec<StreamSource>,
    /// Storage compression.
    #[serde(default, deserialize_with = "nullable")]
    pub compression: StorageCompression,
    /// First sequence of a new stream.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_u64"
    )]
    pub first_seq: u64,
    /// Transform applied to incoming subjects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_transform: Option<SubjectTransform>,
    /// Republish configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub republish: Option<RePublish>,
    /// Enables `$JS.API.DIRECT.GET`.
    #[serde(default, deserialize_with = "nullable")]
    pub allow_direct: bool,
    /// Mirror answers direct gets for its origin.
    #[serde(default, deserialize_with = "nullable")]
    pub mirror_direct: bool,
    /// With discard new, also reject over `max_msgs_per_subject`.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub discard_new_per_subject: bool,
    /// No more writes, deletes or purges.
    #[serde(default, deserialize_with = "nullable")]
    pub sealed: bool,
    /// Refuse `MSG.DELETE`.
    #[serde(default, deserialize_with = "nullable")]
    pub deny_delete: bool,
    /// Refuse `PURGE`.
    #[serde(default, deserialize_with = "nullable")]
    pub deny_purge: bool,
    /// Honour `Nats-Rollup`.
    #[serde(default, deserialize_with = "nullable")]
    pub allow_rollup_hdrs: bool,
    /// Consumer defaults and maxima.
    #[serde(default, deserialize_with = "nullable")]
    pub consumer_limits: ConsumerLimits,
    /// Honour `Nats-TTL`.
    #[serde(default, deserialize_with = "nullable")]
    pub allow_msg_ttl: bool,
    /// TTL of subject delete markers (ns).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i64"
    )]
    pub subject_delete_marker_ttl: i64,
    /// Counter streams (2.12); refused until implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub allow_msg_counter: bool,
    /// Atomic batch publish (2.12); refused until implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub allow_atomic: bool,
    /// Message schedules (2.12); refused until implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub allow_msg_schedules: bool,
    /// Fast batch publish (2.14); refused until implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub allow_batched: bool,
    /// Persist mode (2.12): `Some("async")`, or `None` for the default (`"default"` and `""`
    /// decode to it, and it is not shown, as nats-server's `omitempty` int). jetraft stores
    /// and reports it; writes stay synchronous either way (see `persist_mode`).
    #[serde(
        default,
        deserialize_with = "persist_mode",
        skip_serializing_if = "Option::is_none"
    )]
    pub persist_mode: Option<String>,
    /// User metadata plus the server's `_nats.*` keys. Sorted, as Go marshals maps.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub metadata: BTreeMap<String, String>,
    /// Create/update request flag: reject instead of silently normalising. Never stored or
    /// shown (it is part of the request, not the config).
    #[serde(default, deserialize_with = "nullable", skip_serializing)]
    pub pedantic: bool,
}

/// Decodes `persist_mode` as nats-server does: `"default"` or `""` is the default (`None`),
/// `"async"` is kept; any other value, `null` included, is refused (10025 `can not unmarshal`).
fn persist_mode<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    use serde::de::Error as _;
    match Option::<String>::deserialize(d)?.as_deref() {
        Some("default" | "") => Ok(None),
        Some("async") => Ok(Some("async".to_string())),
        Some(other) => Err(D::Error::unknown_variant(other, &["default", "async"])),
        None => Err(D::Error::custom("can not unmarshal \"null\"")),
    }
}
