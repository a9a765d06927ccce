//! Response envelopes: `{"type":..., ["error":{...},] ...body}` with the zero-valued siblings
//! 2.15.1 keeps on errors (observed: stream info errors keep `total/offset/limit`, purge errors
//! keep `purged`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::info::StreamInfo;
use super::{base64, go_time, is_false, response_type, to_go_json};
use crate::jetstream::api::ApiError;

/// A typed API response: `type`, optional `error`, then the body's fields.
#[derive(Debug, Clone, Serialize)]
pub struct ApiResponse<T: Serialize> {
    /// The `io.nats.jetstream.api.v1.*_response` string.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Present only on failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ApiError>,
    /// The payload fields.
    #[serde(flatten)]
    pub body: T,
}

impl<T: Serialize> ApiResponse<T> {
    /// A success response.
    pub fn ok(kind: &'static str, body: T) -> Self {
        Self {
            kind,
            error: None,
            body,
        }
    }

    /// An error response carrying `body`'s always-present fields.
    pub fn err(kind: &'static str, error: ApiError, body: T) -> Self {
        Self {
            kind,
            error: Some(error),
            body,
        }
    }

    /// The exact JSON bytes.
    pub fn to_json(&self) -> String {
        to_go_json(self)
    }
}

/// An error response without siblings: `{"type":...,"error":{...}}`.
pub fn error_json(kind: &'static str, error: ApiError) -> String {
    ApiResponse::err(kind, error, Empty {}).to_json()
}

/// No body fields.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Empty {}

/// Paging fields of list-like responses (and of stream info, where they are zero unless a
/// subjects filter was used).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Paging {
    /// Items in total.
    pub total: u64,
    /// Offset of this page.
    pub offset: u64,
    /// Page size.
    pub limit: u64,
}

/// `stream_info_response` body: paging, then the info.
#[derive(Debug, Clone, Serialize)]
pub struct StreamInfoBody {
    /// Paging of the subjects map.
    #[serde(flatten)]
    pub paging: Paging,
    /// The info.
    #[serde(flatten)]
    pub info: StreamInfo,
}

/// `stream_create_response` body: the info plus `did_create` (true even when an identical
/// stream already existed, observed).
#[derive(Debug, Clone, Serialize)]
pub struct StreamCreateBody {
    /// The info.
    #[serde(flatten)]
    pub info: StreamInfo,
    /// Always true on success.
    pub did_create: bool,
}

/// Serialises an empty list as `null`, as Go does for a nil slice.
fn null_if_empty<S: serde::Serializer>(v: &[String], s: S) -> Result<S::Ok, S::Error> {
    if v.is_empty() {
        s.serialize_none()
    } else {
        s.collect_seq(v)
    }
}

/// `stream_names_response` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StreamNamesResponse {
    /// Paging (limit 1024).
    #[serde(flatten)]
    pub paging: Paging,
    /// Sorted names; `null` when there are none (observed, Go's nil slice).
    #[serde(serialize_with = "null_if_empty")]
    pub streams: Vec<String>,
}

/// `stream_list_response` body: full infos, paged by [`LIST_PAGE_LIMIT`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct StreamListResponse {
    /// Paging (limit 256).
    #[serde(flatten)]
    pub paging: Paging,
    /// Infos, sorted by name (configs without `_nats.ver`/`_nats.level`, observed).
    pub streams: Vec<StreamInfo>,
    /// Streams that could not be reached (clustered mode).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
}

/// Names of the streams whose subjects collide with `subject` (STREAM.NAMES/LIST `subject`
/// filter; empty = all). nats-py uses it to find the stream bound to a subject.
pub fn names_matching(streams: &[(String, Vec<String>)], subject: &str) -> Vec<String> {
    streams
        .iter()
        .filter(|(_, subjects)| {
            subject.is_empty()
                || subjects
                    .iter()
                    .any(|s| crate::jetstream::api::validate::subjects_overlap(s, subject))
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// `stream_purge_response` body; `success` is omitted on error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PurgeResponse {
    /// The purge happened.
    #[serde(skip_serializing_if = "is_false")]
    pub success: bool,
    /// Messages removed.
    pub purged: u64,
}

/// `stream_msg_delete_response` body; `success` is omitted on error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MsgDeleteResponse {
    /// The message was removed.
    #[serde(skip_serializing_if = "is_false")]
    pub success: bool,
}

/// A stored message as `STREAM.MSG.GET` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StoredMessage {
    /// Subject.
    pub subject: String,
    /// Sequence.
    pub seq: u64,
    /// Base64 header block; omitted when there are none (or `no_hdr`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hdrs: Option<String>,
    /// Base64 payload; omitted when empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// Store time (RFC 3339).
    pub time: String,
}

impl StoredMessage {
    /// Builds the JSON form of a stored message.
    pub fn from_stored(msg: &jetraft_storage::stream::StoredMsg, no_hdr: bool) -> Self {
        Self {
            subject: msg.subject.clone(),
            seq: msg.seq,
            hdrs: (!no_hdr && !msg.headers.is_empty()).then(|| base64::encode(&msg.headers)),
            data: (!msg.payload.is_empty()).then(|| base64::encode(&msg.payload)),
            time: go_time::format(msg.timestamp_ns),
        }
    }
}

/// `stream_msg_get_response` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MsgGetResponse {
    /// The message.
    pub message: StoredMessage,
}

/// The `subjects` paging limit of STREAM.INFO.
pub const SUBJECTS_PAGE_LIMIT: u64 = 100_000;
/// The page size of STREAM.NAMES.
pub const NAMES_PAGE_LIMIT: u64 = 1024;
/// The page size of STREAM.LIST.
pub const LIST_PAGE_LIMIT: u64 = 256;

/// Pages sorted names as STREAM.NAMES does (offsets past the end are clamped to `total`).
pub fn names_page(names: Vec<String>, offset: u64) -> StreamNamesResponse {
    page_of_names(names, offset, NAMES_PAGE_LIMIT)
}

/// Pages sorted names as STREAM.LIST does: the names of the streams whose infos make up the
/// page, at most [`LIST_PAGE_LIMIT`] of them, with the LIST paging fields.
pub fn list_names_page(names: Vec<String>, offset: u64) -> StreamNamesResponse {
    page_of_names(names, offset, LIST_PAGE_LIMIT)
}

fn page_of_names(mut names: Vec<String>, offset: u64, limit: u64) -> StreamNamesResponse {
    names.sort();
    let total = names.len() as u64;
    let offset = offset.min(total);
    let streams = names
        .into_iter()
        .skip(usize::try_from(offset).unwrap_or(usize::MAX))
        .take(usize::try_from(limit).unwrap_or(usize::MAX))
        .collect();
    StreamNamesResponse {
        paging: Paging {
            total,
            offset,
            limit,
        },
        streams,
    }
}

/// Slices a subjects map for STREAM.INFO paging; returns the page and its paging fields.
pub fn subjects_page(all: BTreeMap<String, u64>, offset: u64) -> (BTreeMap<String, u64>, Paging) {
    let total = all.len() as u64;
    let offset = offset.min(total);
    let page = all
        .into_iter()
        .skip(usize::try_from(offset).unwrap_or(usize::MAX))
        .take(SUBJECTS_PAGE_LIMIT as usize)
        .collect();
    (
        page,
        Paging {
            total,
            offset,
            limit: SUBJECTS_PAGE_LIMIT,
        },
    )
}

/// JSON of a successful purge.
pub fn purge_json(purged: u64) -> String {
    ApiResponse::ok(
        response_type::STREAM_PURGE,
        PurgeResponse {
            success: true,
            purged,
        },
    )
    .to_json()
}

/// JSON of a failed purge (`purged:0` kept, as observed).
pub fn purge_error_json(error: ApiError) -> String {
    ApiResponse::err(response_type::STREAM_PURGE, error, PurgeResponse::default()).to_json()
}

/// JSON of a successful message delete.
pub fn msg_delete_json() -> String {
    ApiResponse::ok(
        response_type::STREAM_MSG_DELETE,
        MsgDeleteResponse { success: true },
    )
    .to_json()
}

/// JSON of a failed message delete.
pub fn msg_delete_error_json(error: ApiError) -> String {
    error_json(response_type::STREAM_MSG_DELETE, error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jetstream::api::ErrorKind;

    fn fixture(name: &str) -> String {
        let all: serde_json::Value = serde_json::from_str(include_str!(
            "../../../../tests/fixtures/jetstream/nats_2_15_1_stream_api.json"
        ))
        .unwrap();
        all[name].as_str().unwrap().to_string()
    }

    #[test]
    fn error_envelopes_match_captured_bytes() {
        assert_eq!(
            purge_error_json(ApiError::bad_request()),
            fixture("err_purge_seq_keep")
        );
        assert_eq!(
            purge_error_json(ApiError::new(ErrorKind::StreamSealed)),
            fixture("err_purge_sealed")
        );
        assert_eq!(
            msg_delete_error_json(ApiError::with_err(
                ErrorKind::StreamMsgDeleteFailed,
                "message delete not permitted"
            )),
            fixture("err_msg_delete_denied")
        );
        assert_eq!(
            ApiResponse::err(
                response_type::STREAM_INFO,
                ApiError::stream_not_found(),
                Paging::default()
            )
            .to_json(),
            fixture("err_info_notfound")
        );
        assert_eq!(
            error_json(response_type::STREAM_MSG_GET, ApiError::no_message_found()),
            fixture("err_msg_get_none")
        );
        assert_eq!(
            error_json(
                response_type::STREAM_CREATE,
                ApiError::invalid_config("subject \"a.>\" overlaps with \"a.b\"")
            ),
            fixture("err_self_overlap")
        );
    }

    #[test]
    fn success_envelopes_match_captured_bytes() {
        assert_eq!(purge_json(0), fixture("purge_all"));
        let names = names_page(
            ["ZL", "TM2", "ORDERS", "NOSUBJ", "FULL", "DW2"]
                .map(String::from)
                .to_vec(),
            0,
        );
        assert_eq!(
            ApiResponse::ok(response_type::STREAM_NAMES, names).to_json(),
            fixture("names_all")
        );
        assert_eq!(
            ApiResponse::ok(
                response_type::STREAM_DELETE,
                MsgDeleteResponse { success: true }
            )
            .to_json(),
            fixture("delete")
        );
    }

    #[test]
    fn msg_get_shape_matches_the_spec_example() {
        let msg = jetraft_storage::stream::StoredMsg {
            seq: 3,
            subject: "m.a".into(),
            headers: bytes::Bytes::from_static(b"NATS/1.0\r\nX-I: 3\r\n\r\n"),
            payload: bytes::Bytes::from_static(b"v3"),
            timestamp_ns: 1_796_199_467_555_474_235,
        };
        let body = MsgGetResponse {
            message: StoredMessage::from_stored(&msg, false),
        };
        assert_eq!(
            ApiResponse::ok(response_type::STREAM_MSG_GET, body).to_json(),
            concat!(
                r#"{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","#,
                r#""message":{"subject":"m.a","seq":3,"hdrs":"TkFUUy8xLjANClgtSTogMw0KDQo=","data":"djM=","#,
                r#""time":"2026-12-02T08:17:47.555474235Z"}}"#
            )
        );
        let empty = jetraft_storage::stream::StoredMsg {
            payload: bytes::Bytes::new(),
            ..msg
        };
        let m = StoredMessage::from_stored(&empty, true);
        assert_eq!((m.hdrs, m.data), (None, None));
    }

    #[test]
    fn empty_names_and_names_errors_carry_null_streams() {
        let all: serde_json::Value = serde_json::from_str(include_str!(
            "../../../../tests/fixtures/jetstream/nats_2_15_1_stream_msgs.json"
        ))
        .unwrap();
        let none = ApiResponse::ok(response_type::STREAM_NAMES, names_page(Vec::new(), 0));
        assert_eq!(none.to_json(), all["names_none"].as_str().unwrap());
        let err = crate::jetstream::api::types::requests::decode::<
            crate::jetstream::api::types::StreamNamesRequest,
        >(b"[]")
        .unwrap_err();
        let json = ApiResponse::err(
            response_type::STREAM_NAMES,
            err,
            StreamNamesResponse::default(),
        )
        .to_json();
        assert_eq!(json, all["names_bad"].as_str().unwrap());
    }

    #[test]
    fn names_filter_by_colliding_subject() {
        let streams = vec![
            ("ORDERS".to_string(), vec!["orders.>".to_string()]),
            ("KV".to_string(), vec!["$KV.b.>".to_string()]),
        ];
        assert_eq!(
            names_matching(&streams, "orders.x"),
            vec!["ORDERS".to_string()]
        );
        assert_eq!(names_matching(&streams, "$KV.*.k"), vec!["KV".to_string()]);
        assert!(names_matching(&streams, "zzz").is_empty());
        assert_eq!(names_matching(&streams, "").len(), 2);
    }

    #[test]
    fn names_paging_clamps_offset() {
        let page = names_page(vec!["b".into(), "a".into()], 5);
        assert_eq!(
            page.paging,
            Paging {
                total: 2,
                offset: 2,
                limit: 1024
            }
        );
        assert!(page.streams.is_empty());
    }

    #[test]
    fn list_pages_hold_256_names_and_names_pages_1024() {
        let many: Vec<String> = (0..300).rev().map(|i| format!("S{i:03}")).collect();
        let list = list_names_page(many.clone(), 0);
        assert_eq!((list.paging.total, list.paging.limit), (300, 256));
        assert_eq!(list.streams.len(), 256);
        assert_eq!(list.streams[0], "S000");
        let rest = list_names_page(many.clone(), 256);
        assert_eq!(rest.streams.len(), 44);
        assert_eq!(rest.streams[0], "S256");
        let names = names_page(many, 0);
        assert_eq!((names.paging.limit, names.streams.len()), (1024, 300));
    }
}
