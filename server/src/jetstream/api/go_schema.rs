//! nats-server's Go request types, described for [`go_json`](super::go_json): field names and
//! types of `StreamConfigRequest`, `CreateConsumerRequest` and the other `$JS.API` request
//! bodies (server/stream.go, consumer.go, jetstream_api.go; embedded structs flattened).

use super::go_json::{Enum, GoStruct, Ty};

const STRINGS: Ty = Ty::Slice(&Ty::Str, "[]string");
const METADATA: Ty = Ty::Map(&Ty::Str, "map[string]string");

static SUBJECT_TRANSFORM: GoStruct = GoStruct {
    name: "SubjectTransformConfig",
    qualified: "server.SubjectTransformConfig",
    fields: &[("src", Ty::Str), ("dest", Ty::Str)],
};

static EXTERNAL: GoStruct = GoStruct {
    name: "ExternalStream",
    qualified: "server.ExternalStream",
    fields: &[("api", Ty::Str), ("deliver", Ty::Str)],
};

static SOURCE_CONSUMER: GoStruct = GoStruct {
    name: "StreamConsumerSource",
    qualified: "server.StreamConsumerSource",
    fields: &[("name", Ty::Str), ("deliver_subject", Ty::Str)],
};

static STREAM_SOURCE: GoStruct = GoStruct {
    name: "StreamSource",
    qualified: "server.StreamSource",
    fields: &[
        ("name", Ty::Str),
        ("opt_start_seq", Ty::Uint64),
        ("opt_start_time", Ty::Time),
        ("filter_subject", Ty::Str),
        (
            "subject_transforms",
            Ty::Slice(
                &Ty::Struct(&SUBJECT_TRANSFORM),
                "[]server.SubjectTransformConfig",
            ),
        ),
        ("external", Ty::Struct(&EXTERNAL)),
        ("consumer", Ty::Struct(&SOURCE_CONSUMER)),
    ],
};

static PLACEMENT: GoStruct = GoStruct {
    name: "Placement",
    qualified: "server.Placement",
    fields: &[
        ("cluster", Ty::Str),
        ("tags", STRINGS),
        ("preferred", Ty::Str),
    ],
};

static REPUBLISH: GoStruct = GoStruct {
    name: "RePublish",
    qualified: "server.RePublish",
    fields: &[
        ("src", Ty::Str),
        ("dest", Ty::Str),
        ("headers_only", Ty::Bool),
    ],
};

static CONSUMER_LIMITS: GoStruct = GoStruct {
    name: "StreamConsumerLimits",
    qualified: "server.StreamConsumerLimits",
    fields: &[
        ("inactive_threshold", Ty::Duration),
        ("max_ack_pending", Ty::Int),
    ],
};

/// `server.StreamConfigRequest` (STREAM.CREATE/UPDATE): `StreamConfig` plus `pedantic`.
pub static STREAM_CONFIG_REQUEST: GoStruct = GoStruct {
    name: "StreamConfigRequest",
    qualified: "server.StreamConfigRequest",
    fields: &[
        ("name", Ty::Str),
        ("description", Ty::Str),
        ("subjects", STRINGS),
        (
            "retention",
            Ty::Enum(Enum::Exact(&[
                "\"limits\"",
                "\"interest\"",
                "\"workqueue\"",
            ])),
        ),
        ("max_consumers", Ty::Int),
        ("max_msgs", Ty::Int64),
        ("max_bytes", Ty::Int64),
        ("max_age", Ty::Duration),
        ("max_msgs_per_subject", Ty::Int64),
        ("max_msg_size", Ty::Int32),
        ("discard", Ty::Enum(Enum::Lower(&["\"old\"", "\"new\""]))),
        (
            "storage",
            Ty::Enum(Enum::Exact(&["\"memory\"", "\"file\""])),
        ),
        ("num_replicas", Ty::Int),
        ("no_ack", Ty::Bool),
        ("duplicate_window", Ty::Duration),
        ("placement", Ty::Struct(&PLACEMENT)),
        ("mirror", Ty::Struct(&STREAM_SOURCE)),
        (
            "sources",
            Ty::Slice(&Ty::Struct(&STREAM_SOURCE), "[]*server.StreamSource"),
        ),
        ("compression", Ty::Enum(Enum::Compression)),
        ("first_seq", Ty::Uint64),
        ("subject_transform", Ty::Struct(&SUBJECT_TRANSFORM)),
        ("republish", Ty::Struct(&REPUBLISH)),
        ("allow_direct", Ty::Bool),
        ("mirror_direct", Ty::Bool),
        ("discard_new_per_subject", Ty::Bool),
        ("sealed", Ty::Bool),
        ("deny_delete", Ty::Bool),
        ("deny_purge", Ty::Bool),
        ("allow_rollup_hdrs", Ty::Bool),
        ("consumer_limits", Ty::Struct(&CONSUMER_LIMITS)),
        ("allow_msg_ttl", Ty::Bool),
        ("subject_delete_marker_ttl", Ty::Duration),
        ("allow_msg_counter", Ty::Bool),
        ("allow_atomic", Ty::Bool),
        ("allow_msg_schedules", Ty::Bool),
        (
            "persist_mode",
            Ty::Enum(Enum::Exact(&["\"default\"", "\"\"", "\"async\""])),
        ),
        ("allow_batched", Ty::Bool),
        ("metadata", METADATA),
        ("pedantic", Ty::Bool),
    ],
};

static CONSUMER_CONFIG: GoStruct = GoStruct {
    name: "ConsumerConfig",
    qualified: "server.ConsumerConfig",
    fields: &[
        ("durable_name", Ty::Str),
        ("name", Ty::Str),
        ("description", Ty::Str),
        (
            "deliver_policy",
            Ty::Enum(Enum::Exact(&[
                "\"all\"",
                "\"undefined\"",
                "\"last\"",
                "\"last_per_subject\"",
                "\"new\"",
                "\"by_start_sequence\"",
                "\"by_start_time\"",
            ])),
        ),
        ("opt_start_seq", Ty::Uint64),
        ("opt_start_time", Ty::Time),
        (
            "ack_policy",
            Ty::Enum(Enum::Exact(&[
                "\"none\"",
                "\"all\"",
                "\"explicit\"",
                "\"flow_control\"",
            ])),
        ),
        ("ack_wait", Ty::Duration),
        ("max_deliver", Ty::Int),
        ("backoff", Ty::Slice(&Ty::Duration, "[]time.Duration")),
        ("filter_subject", Ty::Str),
        ("filter_subjects", STRINGS),
        (
            "replay_policy",
            Ty::Enum(Enum::Exact(&["\"instant\"", "\"original\""])),
        ),
        ("rate_limit_bps", Ty::Uint64),
        ("sample_freq", Ty::Str),
        ("max_waiting", Ty::Int),
        ("max_ack_pending", Ty::Int),
        ("flow_control", Ty::Bool),
        ("headers_only", Ty::Bool),
        ("max_batch", Ty::Int),
        ("max_expires", Ty::Duration),
        ("max_bytes", Ty::Int),
        ("deliver_subject", Ty::Str),
        ("deliver_group", Ty::Str),
        ("idle_heartbeat", Ty::Duration),
        ("inactive_threshold", Ty::Duration),
        ("num_replicas", Ty::Int),
        ("mem_storage", Ty::Bool),
        ("direct", Ty::Bool),
        ("sourcing", Ty::Bool),
        ("metadata", METADATA),
        ("pause_until", Ty::Time),
        ("priority_groups", STRINGS),
        ("priority_policy", Ty::Enum(Enum::Priority)),
        ("priority_timeout", Ty::Duration),
    ],
};

/// `server.CreateConsumerRequest` (CONSUMER.CREATE / DURABLE.CREATE).
pub static CREATE_CONSUMER_REQUEST: GoStruct = GoStruct {
    name: "CreateConsumerRequest",
    qualified: "server.CreateConsumerRequest",
    fields: &[
        ("stream_name", Ty::Str),
        ("config", Ty::Struct(&CONSUMER_CONFIG)),
        ("action", Ty::Enum(Enum::Action)),
        ("pedantic", Ty::Bool),
    ],
};

/// `server.JSApiStreamInfoRequest`.
pub static STREAM_INFO_REQUEST: GoStruct = GoStruct {
    name: "JSApiStreamInfoRequest",
    qualified: "server.JSApiStreamInfoRequest",
    fields: &[
        ("offset", Ty::Int),
        ("deleted_details", Ty::Bool),
        ("subjects_filter", Ty::Str),
    ],
};

/// `server.JSApiStreamNamesRequest`.
pub static STREAM_NAMES_REQUEST: GoStruct = GoStruct {
    name: "JSApiStreamNamesRequest",
    qualified: "server.JSApiStreamNamesRequest",
    fields: &[("offset", Ty::Int), ("subject", Ty::Str)],
};

/// `server.JSApiStreamListRequest`.
pub static STREAM_LIST_REQUEST: GoStruct = GoStruct {
    name: "JSApiStreamListRequest",
    qualified: "server.JSApiStreamListRequest",
    fields: &[("offset", Ty::Int), ("subject", Ty::Str)],
};

/// `server.JSApiStreamPurgeRequest`.
pub static STREAM_PURGE_REQUEST: GoStruct = GoStruct {
    name: "JSApiStreamPurgeRequest",
    qualified: "server.JSApiStreamPurgeRequest",
    fields: &[
        ("seq", Ty::Uint64),
        ("filter", Ty::Str),
        ("keep", Ty::Uint64),
    ],
};

/// `server.JSApiMsgGetRequest` (STREAM.MSG.GET and DIRECT.GET).
pub static MSG_GET_REQUEST: GoStruct = GoStruct {
    name: "JSApiMsgGetRequest",
    qualified: "server.JSApiMsgGetRequest",
    fields: &[
        ("seq", Ty::Uint64),
        ("last_by_subj", Ty::Str),
        ("next_by_subj", Ty::Str),
        ("batch", Ty::Int),
        ("max_bytes", Ty::Int),
        ("start_time", Ty::Time),
        ("multi_last", STRINGS),
        ("up_to_seq", Ty::Uint64),
        ("up_to_time", Ty::Time),
        ("no_hdr", Ty::Bool),
    ],
};

/// `server.JSApiMsgDeleteRequest`.
pub static MSG_DELETE_REQUEST: GoStruct = GoStruct {
    name: "JSApiMsgDeleteRequest",
    qualified: "server.JSApiMsgDeleteRequest",
    fields: &[("seq", Ty::Uint64), ("no_erase", Ty::Bool)],
};

/// `server.JSApiConsumersRequest` (CONSUMER.NAMES/LIST).
pub static CONSUMERS_REQUEST: GoStruct = GoStruct {
    name: "JSApiConsumersRequest",
    qualified: "server.JSApiConsumersRequest",
    fields: &[("offset", Ty::Int)],
};

/// `server.JSApiConsumerPauseRequest`.
pub static CONSUMER_PAUSE_REQUEST: GoStruct = GoStruct {
    name: "JSApiConsumerPauseRequest",
    qualified: "server.JSApiConsumerPauseRequest",
    fields: &[("pause_until", Ty::Time)],
};

/// `server.JSApiConsumerUnpinRequest` (decoded with plain `json.Unmarshal`).
pub static CONSUMER_UNPIN_REQUEST: GoStruct = GoStruct {
    name: "JSApiConsumerUnpinRequest",
    qualified: "server.JSApiConsumerUnpinRequest",
    fields: &[("group", Ty::Str)],
};
