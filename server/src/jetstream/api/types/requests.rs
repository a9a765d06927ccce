//! Request bodies and the body-acceptance rules of 2.15.1 (spec/nats-protocol-and-jetstream.md
//! §3.1, all observed).
//!
//! Go's JSON decoder errors are mapped to the texts clients see after `invalid JSON: `:
//! `json: unknown field "x"`, `unexpected EOF`, `can not unmarshal "\"bogus\""` for a bad enum.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use super::{go_time, nullable};
use crate::jetstream::api::go_json::{self, GoStruct};
use crate::jetstream::api::go_schema;
use crate::jetstream::api::{ApiError, ErrorKind};

/// How an API treats its request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyRule {
    /// `$JS.API.INFO`: the body is ignored entirely.
    Ignored,
    /// STREAM.INFO/NAMES/LIST/PURGE: decoded only if it starts with `{` or `[` (after
    /// whitespace); anything else (empty, `null`, junk) means "no options".
    Optional,
    /// STREAM.DELETE, CONSUMER.INFO/DELETE: only empty or `{}`; else `400/10038`.
    Empty,
    /// MSG.GET/MSG.DELETE, create/update: decoded; empty or `{}` is `400/10003` for msg APIs
    /// (create/update check the name instead, see [`parse_body`]).
    Required,
}

/// Maps a serde_json error to Go's `encoding/json` wording.
fn go_json_error(e: &serde_json::Error) -> ApiError {
    let msg = e.to_string();
    let text = if let Some(rest) = msg.strip_prefix("unknown field `") {
        let field = rest.split('`').next().unwrap_or_default();
        format!("json: unknown field \"{field}\"")
    } else if let Some(rest) = msg.strip_prefix("unknown variant `") {
        let value = rest.split('`').next().unwrap_or_default();
        format!("can not unmarshal \"\\\"{value}\\\"\"")
    } else if e.is_eof() {
        "unexpected EOF".to_string()
    } else {
        // serde_json appends " at line L column C"; Go reports offsets differently, and clients
        // only display the text, so the position is dropped.
        match msg.rfind(" at line ") {
            Some(i) => msg[..i].to_string(),
            None => msg,
        }
    };
    ApiError::invalid_json(&text)
}

/// A request body type, named as nats-server's Go type (it appears in decode errors).
pub trait ApiRequest: DeserializeOwned {
    /// Go type name, e.g. `server.JSApiStreamNamesRequest`.
    const GO_TYPE: &'static str;
    /// The Go type's fields, when known: bodies are then checked as Go's decoder reads them
    /// (error texts, field order, unknown fields) before serde decodes them.
    const GO_SCHEMA: Option<&'static GoStruct> = None;
}

impl ApiRequest for crate::jetstream::api::types::StreamConfig {
    const GO_TYPE: &'static str = "server.StreamConfigRequest";
    const GO_SCHEMA: Option<&'static GoStruct> = Some(&go_schema::STREAM_CONFIG_REQUEST);
}
impl ApiRequest for StreamInfoRequest {
    const GO_TYPE: &'static str = "server.JSApiStreamInfoRequest";
    const GO_SCHEMA: Option<&'static GoStruct> = Some(&go_schema::STREAM_INFO_REQUEST);
}
impl ApiRequest for StreamNamesRequest {
    const GO_TYPE: &'static str = "server.JSApiStreamNamesRequest";
    const GO_SCHEMA: Option<&'static GoStruct> = Some(&go_schema::STREAM_NAMES_REQUEST);
}
impl ApiRequest for PurgeRequest {
    const GO_TYPE: &'static str = "server.JSApiStreamPurgeRequest";
    const GO_SCHEMA: Option<&'static GoStruct> = Some(&go_schema::STREAM_PURGE_REQUEST);
}
impl ApiRequest for MsgGetRequest {
    const GO_TYPE: &'static str = "server.JSApiMsgGetRequest";
    const GO_SCHEMA: Option<&'static GoStruct> = Some(&go_schema::MSG_GET_REQUEST);
}
impl ApiRequest for MsgDeleteRequest {
    const GO_TYPE: &'static str = "server.JSApiMsgDeleteRequest";
    const GO_SCHEMA: Option<&'static GoStruct> = Some(&go_schema::MSG_DELETE_REQUEST);
}

/// Decodes a JSON body into `T`, mapping errors to `400/10025`.
///
/// Every request type is a JSON object; serde would also accept an array for a struct, Go does
/// not (observed: `json: cannot unmarshal array into Go value of type
/// server.JSApiStreamNamesRequest`), so arrays are refused first.
pub fn decode<T: ApiRequest>(body: &[u8]) -> Result<T, ApiError> {
    if let Some(schema) = T::GO_SCHEMA {
        go_json::check(body, schema).map_err(|e| ApiError::invalid_json(&e))?;
        return decode_values(body, schema);
    }
    go_json::check_syntax(body).map_err(|e| ApiError::invalid_json(&e))?;
    decode_stored(body)
}

/// Decodes a body Go's decoder accepted: every JSON value in it is decoded into the same
/// struct (later fields win, `null` changes nothing), as `Decode` called until end of input.
fn decode_values<T: ApiRequest>(body: &[u8], schema: &'static GoStruct) -> Result<T, ApiError> {
    let mut merged = serde_json::Map::new();
    for value in serde_json::Deserializer::from_slice(body).into_iter::<serde_json::Value>() {
        let mut value = value.map_err(|e| go_json_error(&e))?;
        go_json::canonicalize(&mut value, schema);
        if let serde_json::Value::Object(fields) = value {
            merged.extend(fields);
        }
    }
    serde_json::from_value(serde_json::Value::Object(merged)).map_err(|e| go_json_error(&e))
}

/// Decodes JSON this server wrote itself (stored configs in Raft entries and snapshots) with
/// serde alone, so a stored config never fails on a request-only rule.
pub fn decode_stored<T: ApiRequest>(body: &[u8]) -> Result<T, ApiError> {
    if body.trim_ascii_start().starts_with(b"[") {
        return Err(ApiError::invalid_json(&format!(
            "json: cannot unmarshal array into Go value of type {}",
            T::GO_TYPE
        )));
    }
    serde_json::from_slice(body).map_err(|e| go_json_error(&e))
}

/// True when `body` is empty or a JSON object with no keys.
fn is_empty_object(body: &[u8]) -> bool {
    if body.is_empty() {
        return true;
    }
    matches!(
        serde_json::from_slice::<serde_json::Value>(body),
        Ok(serde_json::Value::Object(m)) if m.is_empty()
    )
}

/// Applies `rule` to `body`: `Ok(None)` when there are no options (or the body is ignored),
/// `Ok(Some(T))` when decoded.
pub fn parse_body<T: ApiRequest>(rule: BodyRule, body: &[u8]) -> Result<Option<T>, ApiError> {
    match rule {
        BodyRule::Ignored => Ok(None),
        BodyRule::Optional => {
            let trimmed = body.trim_ascii_start();
            if trimmed.starts_with(b"{") || trimmed.starts_with(b"[") {
                decode(body).map(Some)
            } else {
                Ok(None)
            }
        }
        BodyRule::Empty => {
            if is_empty_object(body) {
                Ok(None)
            } else {
                Err(ApiError::new(ErrorKind::NotEmptyRequest))
            }
        }
        BodyRule::Required => {
            if is_empty_object(body) {
                Err(ApiError::bad_request())
            } else {
                decode(body).map(Some)
            }
        }
    }
}

/// `$JS.API.STREAM.INFO` options.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamInfoRequest {
    /// Include the deleted sequences.
    #[serde(default, deserialize_with = "nullable")]
    pub deleted_details: bool,
    /// Include per-subject counts for subjects matching this filter.
    #[serde(default, deserialize_with = "nullable")]
    pub subjects_filter: String,
    /// Paging offset into the subjects map (negative is 0, as Go's `offset int` is).
    #[serde(default, deserialize_with = "go_offset")]
    pub offset: u64,
}

/// Deserialises Go's `offset int` (`null` is 0, negatives are clamped to 0 as the server does).
pub(super) fn go_offset<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(Option::<i64>::deserialize(d)?.map_or(0, |v| u64::try_from(v).unwrap_or(0)))
}

/// `$JS.API.STREAM.LIST` options: the fields of STREAM.NAMES under Go's other type name (it
/// appears in decode errors).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct StreamListRequest(pub StreamNamesRequest);

impl ApiRequest for StreamListRequest {
    const GO_TYPE: &'static str = "server.JSApiStreamListRequest";
    const GO_SCHEMA: Option<&'static GoStruct> = Some(&go_schema::STREAM_LIST_REQUEST);
}

/// `$JS.API.STREAM.NAMES` / `STREAM.LIST` options.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamNamesRequest {
    /// Paging offset (clamped to the total; negative is 0, as Go's `offset int` is).
    #[serde(default, deserialize_with = "go_offset")]
    pub offset: u64,
    /// Only streams whose subjects collide with this subject (wildcards allowed).
    #[serde(default, deserialize_with = "nullable")]
    pub subject: String,
}

/// `$JS.API.STREAM.PURGE` options.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PurgeRequest {
    /// Only messages on matching subjects.
    #[serde(default, deserialize_with = "nullable")]
    pub filter: String,
    /// Purge everything below this sequence (exclusive).
    #[serde(default, deserialize_with = "nullable")]
    pub seq: u64,
    /// Keep the newest N messages.
    #[serde(default, deserialize_with = "nullable")]
    pub keep: u64,
}

impl PurgeRequest {
    /// Validates (`seq` and `keep` together are `400/10003`) and converts to the storage form.
    pub fn to_store(&self) -> Result<jetraft_storage::stream::PurgeRequest, ApiError> {
        if self.seq > 0 && self.keep > 0 {
            return Err(ApiError::bad_request());
        }
        Ok(jetraft_storage::stream::PurgeRequest {
            filter: (!self.filter.is_empty()).then(|| self.filter.clone()),
            up_to_seq: (self.seq > 0).then_some(self.seq),
            keep: (self.keep > 0).then_some(self.keep),
        })
    }
}

/// `$JS.API.STREAM.MSG.GET` (and the JSON form of DIRECT.GET).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MsgGetRequest {
    /// Exact sequence (or the start for `next_by_subj`).
    #[serde(default, deserialize_with = "nullable")]
    pub seq: u64,
    /// Newest message on this subject (wildcards allowed).
    #[serde(default, deserialize_with = "nullable")]
    pub last_by_subj: String,
    /// First message at or after `seq` on this subject (wildcards allowed).
    #[serde(default, deserialize_with = "nullable")]
    pub next_by_subj: String,
    /// First message at or after this time (RFC 3339).
    #[serde(default)]
    pub start_time: Option<String>,
    /// Leave the headers out of the answer.
    #[serde(default, deserialize_with = "nullable")]
    pub no_hdr: bool,
    /// DIRECT.GET batch size.
    #[serde(default, deserialize_with = "nullable")]
    pub batch: u64,
    /// DIRECT.GET batch byte limit.
    #[serde(default, deserialize_with = "nullable")]
    pub max_bytes: u64,
    /// DIRECT.GET multi-last subjects.
    #[serde(default, deserialize_with = "nullable")]
    pub multi_last: Vec<String>,
    /// DIRECT.GET multi-last upper sequence.
    #[serde(default, deserialize_with = "nullable")]
    pub up_to_seq: u64,
    /// DIRECT.GET multi-last upper time.
    #[serde(default)]
    pub up_to_time: Option<String>,
}

/// What a [`MsgGetRequest`] asks for, after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MsgSelector {
    /// The message at this sequence.
    Seq(u64),
    /// The newest message matching the subject.
    LastBySubject(String),
    /// The first message with `seq >= from` matching the subject.
    NextBySubject {
        /// Subject filter.
        subject: String,
        /// Starting sequence (0 = from the start).
        from: u64,
    },
    /// The first message stored at or after this time (Unix ns).
    StartTime(u64),
    /// The first message matching the subject stored at or after this time (Unix ns).
    NextBySubjectFromTime {
        /// Subject filter.
        subject: String,
        /// Earliest store time, Unix ns.
        time_ns: u64,
    },
}

impl MsgGetRequest {
    /// Checks the selector combination as nats-server does: exactly one of `seq`,
    /// `last_by_subj`, `next_by_subj` (which may carry `seq`), `start_time`; otherwise
    /// `400/10003 bad request`.
    pub fn selector(&self) -> Result<MsgSelector, ApiError> {
        // STREAM.MSG.GET does not batch (DIRECT.GET does).
        if self.batch > 0 || self.max_bytes > 0 {
            return Err(ApiError::bad_request());
        }
        let last = !self.last_by_subj.is_empty();
        let next = !self.next_by_subj.is_empty();
        let start = self.start_time.is_some();
        match (self.seq > 0, last, next, start) {
            (true, false, false, false) => Ok(MsgSelector::Seq(self.seq)),
            (false, true, false, false) => {
                Ok(MsgSelector::LastBySubject(self.last_by_subj.clone()))
            }
            (_, false, true, false) => Ok(MsgSelector::NextBySubject {
                subject: self.next_by_subj.clone(),
                from: self.seq,
            }),
            (false, false, true, true) => self
                .start_time
                .as_deref()
                .and_then(go_time::parse)
                .map(|time_ns| MsgSelector::NextBySubjectFromTime {
                    subject: self.next_by_subj.clone(),
                    time_ns,
                })
                .ok_or_else(ApiError::bad_request),
            (false, false, false, true) => self
                .start_time
                .as_deref()
                .and_then(go_time::parse)
                .map(MsgSelector::StartTime)
                .ok_or_else(ApiError::bad_request),
            _ => Err(ApiError::bad_request()),
        }
    }
}

/// `$JS.API.STREAM.MSG.DELETE`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MsgDeleteRequest {
    /// Sequence to delete.
    #[serde(default, deserialize_with = "nullable")]
    pub seq: u64,
    /// Only remove, do not overwrite on disk.
    #[serde(default, deserialize_with = "nullable")]
    pub no_erase: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jetstream::api::types::StreamConfig;

    #[test]
    fn optional_bodies_decode_only_objects_and_arrays() {
        let none: Option<StreamInfoRequest> = parse_body(BodyRule::Optional, b"null").unwrap();
        assert_eq!(none, None);
        assert_eq!(
            parse_body::<StreamInfoRequest>(BodyRule::Optional, b"").unwrap(),
            None
        );
        assert_eq!(
            parse_body::<StreamInfoRequest>(BodyRule::Optional, b"junk").unwrap(),
            None
        );
        let err = parse_body::<StreamNamesRequest>(BodyRule::Optional, b"[]").unwrap_err();
        assert_eq!(
            err.description,
            "invalid JSON: json: cannot unmarshal array into Go value of type server.JSApiStreamNamesRequest"
        );
        let some =
            parse_body::<StreamInfoRequest>(BodyRule::Optional, br#" {"deleted_details":true}"#)
                .unwrap()
                .unwrap();
        assert!(some.deleted_details);
    }

    #[test]
    fn empty_bodies_accept_only_nothing_or_an_empty_object() {
        for ok in [&b""[..], b"{}", b" { } "] {
            assert_eq!(
                parse_body::<StreamInfoRequest>(BodyRule::Empty, ok).unwrap(),
                None
            );
        }
        for bad in [&b"null"[..], b"[]", b" ", br#"{"x":1}"#] {
            let e = parse_body::<StreamInfoRequest>(BodyRule::Empty, bad).unwrap_err();
            assert_eq!((e.code, e.err_code), (400, 10038), "{bad:?}");
        }
    }

    #[test]
    fn required_bodies_refuse_empty_with_bad_request() {
        for bad in [&b""[..], b"{}"] {
            let e = parse_body::<MsgGetRequest>(BodyRule::Required, bad).unwrap_err();
            assert_eq!(e, ApiError::bad_request());
        }
    }

    #[test]
    fn decode_errors_use_go_wording() {
        let e = decode::<StreamConfig>(br#"{"name":"UF","foo_bar":1}"#).unwrap_err();
        assert_eq!(
            e.description,
            r#"invalid JSON: json: unknown field "foo_bar""#
        );
        let e = decode::<StreamConfig>(br#"{"name":"BE","retention":"bogus"}"#).unwrap_err();
        assert_eq!(
            e.description,
            r#"invalid JSON: can not unmarshal "\"bogus\"""#
        );
        let e = decode::<StreamConfig>(br#"{"name":"#).unwrap_err();
        assert_eq!(e.description, "invalid JSON: unexpected EOF");
    }

    #[test]
    fn msg_get_selectors_follow_the_server() {
        let sel = |json: &str| decode::<MsgGetRequest>(json.as_bytes()).unwrap().selector();
        assert_eq!(sel(r#"{"seq":3}"#), Ok(MsgSelector::Seq(3)));
        assert_eq!(
            sel(r#"{"last_by_subj":"a.*"}"#),
            Ok(MsgSelector::LastBySubject("a.*".into()))
        );
        assert_eq!(
            sel(r#"{"next_by_subj":"a","seq":4}"#),
            Ok(MsgSelector::NextBySubject {
                subject: "a".into(),
                from: 4
            })
        );
        for bad in [
            r#"{"seq":1,"last_by_subj":"a"}"#,
            r#"{"last_by_subj":"a","next_by_subj":"b"}"#,
            r#"{"seq":1,"start_time":"2026-12-02T08:17:47Z"}"#,
            r#"{"no_hdr":true}"#,
        ] {
            assert_eq!(sel(bad), Err(ApiError::bad_request()), "{bad}");
        }
        assert_eq!(
            sel(r#"{"start_time":"1970-01-01T00:00:01Z"}"#),
            Ok(MsgSelector::StartTime(1_000_000_000))
        );
    }

    #[test]
    fn purge_seq_and_keep_together_is_bad_request() {
        let req = PurgeRequest {
            seq: 2,
            keep: 1,
            ..PurgeRequest::default()
        };
        assert_eq!(req.to_store(), Err(ApiError::bad_request()));
        let req = PurgeRequest {
            filter: "a.>".into(),
            keep: 1,
            ..PurgeRequest::default()
        };
        let s = req.to_store().unwrap();
        assert_eq!(
            (s.filter.as_deref(), s.up_to_seq, s.keep),
            (Some("a.>"), None, Some(1))
        );
    }
}
