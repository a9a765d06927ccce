//! `$JS.API.INFO` (spec/nats-protocol-and-jetstream.md §3.3): the full shape, since async-nats
//! refuses to create a KV bucket
//! when any of these fields is missing.

use serde::{Deserialize, Serialize};

use super::response_type;

/// Account limits; -1 = unlimited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountLimits {
    /// Memory storage limit.
    pub max_memory: i64,
    /// File storage limit.
    pub max_storage: i64,
    /// Stream count limit.
    pub max_streams: i64,
    /// Consumer count limit.
    pub max_consumers: i64,
    /// Per-consumer max ack pending limit.
    pub max_ack_pending: i64,
    /// Per-stream max bytes for memory streams.
    pub memory_max_stream_bytes: i64,
    /// Per-stream max bytes for file streams.
    pub storage_max_stream_bytes: i64,
    /// Streams must set `max_bytes`.
    pub max_bytes_required: bool,
}

impl Default for AccountLimits {
    fn default() -> Self {
        Self {
            max_memory: -1,
            max_storage: -1,
            max_streams: -1,
            max_consumers: -1,
            max_ack_pending: -1,
            memory_max_stream_bytes: -1,
            storage_max_stream_bytes: -1,
            max_bytes_required: false,
        }
    }
}

/// API usage counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiStats {
    /// Highest API level implemented (spec/nats-protocol-and-jetstream.md §3.3: 0 = 2.10, 1 = 2.11, 2 = 2.12
    /// ...).
    pub level: u32,
    /// Requests served.
    pub total: u64,
    /// Requests answered with an error.
    pub errors: u64,
}

/// The `account_info_response` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountInfo {
    /// Always `account_info_response`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Memory bytes used.
    pub memory: u64,
    /// File bytes used.
    pub storage: u64,
    /// Sum of `max_bytes` of memory streams.
    pub reserved_memory: u64,
    /// Sum of `max_bytes` of file streams.
    pub reserved_storage: u64,
    /// Stream count.
    pub streams: u64,
    /// Consumer count.
    pub consumers: u64,
    /// Limits.
    pub limits: AccountLimits,
    /// JetStream domain, when configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// API counters.
    pub api: ApiStats,
}

impl Default for AccountInfo {
    fn default() -> Self {
        Self {
            kind: response_type::ACCOUNT_INFO.to_string(),
            memory: 0,
            storage: 0,
            reserved_memory: 0,
            reserved_storage: 0,
            streams: 0,
            consumers: 0,
            limits: AccountLimits::default(),
            domain: None,
            api: ApiStats::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jetstream::api::types::to_go_json;

    #[test]
    fn fresh_account_info_matches_the_spec_shape() {
        let info = AccountInfo {
            api: ApiStats {
                level: 5,
                total: 0,
                errors: 0,
            },
            ..AccountInfo::default()
        };
        assert_eq!(
            to_go_json(&info),
            concat!(
                r#"{"type":"io.nats.jetstream.api.v1.account_info_response","#,
                r#""memory":0,"storage":0,"reserved_memory":0,"reserved_storage":0,"streams":0,"consumers":0,"#,
                r#""limits":{"max_memory":-1,"max_storage":-1,"max_streams":-1,"max_consumers":-1,"max_ack_pending":-1,"#,
                r#""memory_max_stream_bytes":-1,"storage_max_stream_bytes":-1,"max_bytes_required":false},"#,
                r#""api":{"level":5,"total":0,"errors":0}}"#
            )
        );
    }
}
