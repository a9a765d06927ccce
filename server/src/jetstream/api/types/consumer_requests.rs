//! Consumer API request and response bodies (spec/nats-protocol-and-jetstream.md §3.8, §3.10,
//! §5.4) and the pull request
//! (`CONSUMER.MSG.NEXT`) parser.
//!
//! Decoding follows nats-server 2.15.1 (server/jetstream_api.go, server/consumer.go):
//! - CONSUMER.CREATE bodies are decoded strictly, as nats-server's request decoder does
//!   (unknown fields refused, Go's error texts: see `go_json`); an empty body is an empty
//!   request, which then fails the stream-name check with `10056`.
//! - CONSUMER.NAMES/LIST/PAUSE bodies follow [`BodyRule::Optional`](super::BodyRule).
//! - Pull requests are empty, a bare integer or JSON decoded like Go's `json.Unmarshal`
//!   (lenient); errors are the `400 Bad Request - ...` status texts Go prints, checked against
//!   the real server (see the tests).

use serde::{Deserialize, Serialize};

use super::consumer::{ConsumerConfig, ConsumerInfo};
use super::requests::ApiRequest;
use super::{go_time, is_false, is_zero_i64, nullable};
use crate::jetstream::api::{ApiError, go_duration};

/// What a CONSUMER.CREATE request may do to an existing consumer (`action`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CreateAction {
    /// `""` (or absent): create, or update an existing consumer's mutable fields.
    #[default]
    CreateOrUpdate,
    /// `"create"`: fail with `10148` if a consumer with a different config exists.
    Create,
    /// `"update"`: fail with `10149` if the consumer does not exist.
    Update,
}

/// `$JS.API.CONSUMER.CREATE...` / `CONSUMER.DURABLE.CREATE...` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct CreateConsumerRequest {
    /// Must equal the stream token of the subject (else `400/10056`).
    #[serde(default, deserialize_with = "nullable")]
    pub stream_name: String,
    /// The requested config. nats-server's field is not a pointer, so a missing config is
    /// the zero config (it never answers `10078 consumer config required` here).
    #[serde(default)]
    pub config: Option<ConsumerConfig>,
    /// `""`, `"create"` or `"update"`; see [`CreateConsumerRequest::action`].
    #[serde(default, deserialize_with = "nullable")]
    pub action: String,
    /// Refuse instead of silently correcting odd values (`10157`).
    #[serde(default, deserialize_with = "nullable")]
    pub pedantic: bool,
}

impl ApiRequest for CreateConsumerRequest {
    const GO_TYPE: &'static str = "server.CreateConsumerRequest";
    const GO_SCHEMA: Option<&'static crate::jetstream::api::go_json::GoStruct> =
        Some(&crate::jetstream::api::go_schema::CREATE_CONSUMER_REQUEST);
}

impl CreateConsumerRequest {
    /// Decodes a create body: empty (or `null`) is the empty request, as in Go where the
    /// decoder hits EOF at once; anything else must be a JSON object (`400/10025`).
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let trimmed = body.trim_ascii();
        if trimmed.is_empty() || trimmed == b"null" {
            return Ok(Self::default());
        }
        super::decode(trimmed)
    }

    /// The `action` as an enum. An unknown value is `400/10025 invalid JSON: unknown consumer
    /// action: "bogus"` (observed; a JSON `null` is refused the same way by the decoder).
    pub fn action(&self) -> Result<CreateAction, ApiError> {
        match self.action.as_str() {
            "" => Ok(CreateAction::CreateOrUpdate),
            "create" => Ok(CreateAction::Create),
            "update" => Ok(CreateAction::Update),
            other => Err(ApiError::invalid_json(&format!(
                "unknown consumer action: {}",
                serde_json::to_string(other).unwrap_or_default()
            ))),
        }
    }
}

/// `$JS.API.CONSUMER.NAMES.<S>` options.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerNamesRequest {
    /// Paging offset (clamped to the total).
    #[serde(default, deserialize_with = "super::requests::go_offset")]
    pub offset: u64,
}

impl ApiRequest for ConsumerNamesRequest {
    const GO_TYPE: &'static str = "server.JSApiConsumersRequest";
    const GO_SCHEMA: Option<&'static crate::jetstream::api::go_json::GoStruct> =
        Some(&crate::jetstream::api::go_schema::CONSUMERS_REQUEST);
}

/// `$JS.API.CONSUMER.LIST.<S>` options.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerListRequest {
    /// Paging offset (clamped to the total).
    #[serde(default, deserialize_with = "super::requests::go_offset")]
    pub offset: u64,
}

impl ApiRequest for ConsumerListRequest {
    const GO_TYPE: &'static str = "server.JSApiConsumersRequest";
    const GO_SCHEMA: Option<&'static crate::jetstream::api::go_json::GoStruct> =
        Some(&crate::jetstream::api::go_schema::CONSUMERS_REQUEST);
}

/// Page size of CONSUMER.NAMES (Go `JSApiNamesLimit`).
pub const CONSUMER_NAMES_LIMIT: u64 = 1024;
/// Page size of CONSUMER.LIST (Go `JSApiListLimit`).
pub const CONSUMER_LIST_LIMIT: u64 = 256;

/// `consumer_names_response` body. `consumers` is always an array, `[]` when empty and on
/// errors (observed; unlike STREAM.NAMES, which prints `null`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ConsumerNamesResponse {
    /// Consumers in total.
    pub total: u64,
    /// Offset of this page (clamped to `total`).
    pub offset: u64,
    /// Page size (1024).
    pub limit: u64,
    /// Sorted names of this page.
    pub consumers: Vec<String>,
}

/// `consumer_list_response` body.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ConsumerListResponse {
    /// Consumers in total.
    pub total: u64,
    /// Offset of this page (clamped to `total`).
    pub offset: u64,
    /// Page size (256).
    pub limit: u64,
    /// Infos of this page, sorted by name; always an array.
    pub consumers: Vec<ConsumerInfo>,
    /// Consumers that could not be reached (clustered mode); omitted when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
}

/// Sorts `items` by `key` and cuts the page at `offset` (clamped to the total) of at most
/// `limit` items; returns the page, the total and the clamped offset.
fn page<T>(
    mut items: Vec<T>,
    offset: u64,
    limit: u64,
    key: impl Fn(&T) -> &str,
) -> (Vec<T>, u64, u64) {
    items.sort_by(|a, b| key(a).cmp(key(b)));
    let total = items.len() as u64;
    let offset = offset.min(total);
    let page = items
        .into_iter()
        .skip(usize::try_from(offset).unwrap_or(usize::MAX))
        .take(usize::try_from(limit).unwrap_or(usize::MAX))
        .collect();
    (page, total, offset)
}

/// Pages consumer names as CONSUMER.NAMES does (sorted, 1024 per page).
pub fn consumer_names_page(names: Vec<String>, offset: u64) -> ConsumerNamesResponse {
    let (consumers, total, offset) = page(names, offset, CONSUMER_NAMES_LIMIT, String::as_str);
    ConsumerNamesResponse {
        total,
        offset,
        limit: CONSUMER_NAMES_LIMIT,
        consumers,
    }
}

/// Pages consumer infos as CONSUMER.LIST does (sorted by name, 256 per page); `missing`
/// is left empty for the caller to fill.
pub fn consumer_list_page(infos: Vec<ConsumerInfo>, offset: u64) -> ConsumerListResponse {
    let (consumers, total, offset) = page(infos, offset, CONSUMER_LIST_LIMIT, |i| &i.name);
    ConsumerListResponse {
        total,
        offset,
        limit: CONSUMER_LIST_LIMIT,
        consumers,
        missing: Vec::new(),
    }
}

/// `consumer_delete_response` body; `success` is omitted on error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ConsumerDeleteResponse {
    /// The consumer was deleted.
    #[serde(skip_serializing_if = "is_false")]
    pub success: bool,
}

/// `$JS.API.CONSUMER.PAUSE.<S>.<C>` body; no body (or no `pause_until`) resumes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerPauseRequest {
    /// Pause until this time (RFC 3339).
    #[serde(default)]
    pub pause_until: Option<String>,
}

impl ApiRequest for ConsumerPauseRequest {
    const GO_TYPE: &'static str = "server.JSApiConsumerPauseRequest";
    const GO_SCHEMA: Option<&'static crate::jetstream::api::go_json::GoStruct> =
        Some(&crate::jetstream::api::go_schema::CONSUMER_PAUSE_REQUEST);
}

impl ConsumerPauseRequest {
    /// The pause deadline in Unix ns; 0 (Go's zero time, or none) means resume. An unparsable
    /// time is `400/10025` like Go's time decoding error.
    pub fn pause_until_ns(&self) -> Result<u64, ApiError> {
        match self.pause_until.as_deref() {
            None => Ok(0),
            Some(s) => go_time::parse(s).ok_or_else(|| {
                ApiError::invalid_json(&format!(
                    "parsing time {:?} as \"2006-01-02T15:04:05Z07:00\": cannot parse",
                    s
                ))
            }),
        }
    }
}

/// `consumer_pause_response` body (observed: `{"paused":true,"pause_until":"2099-01-01T00:00:00Z",
/// "pause_remaining":<ns>}`; resume: `{"paused":false,"pause_until":"0001-01-01T00:00:00Z"}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ConsumerPauseResponse {
    /// Whether the deadline is still ahead.
    pub paused: bool,
    /// The deadline (RFC 3339; Go's zero time when resumed).
    pub pause_until: String,
    /// Time left, ns; omitted when not paused.
    #[serde(skip_serializing_if = "is_zero_i64")]
    pub pause_remaining: i64,
}

impl ConsumerPauseResponse {
    /// The answer for a deadline `pause_until_ns` (0 = resumed) seen at `now_ns`.
    pub fn at(pause_until_ns: u64, now_ns: u64) -> Self {
        let paused = pause_until_ns > now_ns;
        Self {
            paused,
            pause_until: go_time::format(pause_until_ns),
            pause_remaining: if paused {
                i64::try_from(pause_until_ns - now_ns).unwrap_or(i64::MAX)
            } else {
                0
            },
        }
    }
}

/// The priority-group fields of a JSON pull request (nats-server's embedded `PriorityGroup`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PriorityRequest {
    /// The priority group the request pulls for.
    pub group: String,
    /// `overflow`: served only while the consumer has at least this many messages pending.
    pub min_pending: i64,
    /// `overflow`: served only while at least this many messages wait for their ack.
    pub min_ack_pending: i64,
    /// `pinned_client`: the pin id the client was given (`Nats-Pin-Id`).
    pub id: String,
    /// `prioritized`: 0 (served first) to 9.
    pub priority: i64,
}

/// A pull request (`$JS.API.CONSUMER.MSG.NEXT.<S>.<C>`), normalised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextRequest {
    /// Messages wanted; at least 1 (a zero or negative batch behaves as 1).
    pub batch: u64,
    /// Request lifetime, ns; 0 = no expiry. A negative `expires` becomes 1 ns (expired at
    /// once, as in nats-server where the deadline is already past).
    pub expires_ns: u64,
    /// Byte budget; 0 = unlimited (negatives too).
    pub max_bytes: u64,
    /// Answer `404 No Messages` rather than wait when nothing is available.
    pub no_wait: bool,
    /// Send `100 Idle Heartbeat` after this long without activity, ns; 0 = never.
    pub idle_heartbeat_ns: u64,
    /// The priority-group fields: present for every JSON request (zero values when absent),
    /// none for an empty or numeric body, as in nats-server.
    pub priority: Option<PriorityRequest>,
}

impl Default for NextRequest {
    fn default() -> Self {
        Self {
            batch: 1,
            expires_ns: 0,
            max_bytes: 0,
            no_wait: false,
            idle_heartbeat_ns: 0,
            priority: None,
        }
    }
}

/// The Go type of each known pull-request field, for type-error texts.
const NEXT_FIELDS: &[(&str, GoType)] = &[
    ("expires", GoType::Duration),
    ("batch", GoType::Int),
    ("max_bytes", GoType::Int),
    ("no_wait", GoType::Bool),
    ("idle_heartbeat", GoType::Duration),
    // Priority-group fields (embedded `PriorityGroup`): only type-checked here.
    ("group", GoType::String),
    ("min_pending", GoType::Int64),
    ("min_ack_pending", GoType::Int64),
    ("id", GoType::String),
    ("priority", GoType::Int),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GoType {
    Int,
    Int64,
    Duration,
    Bool,
    String,
}

impl GoType {
    fn name(self) -> &'static str {
        match self {
            GoType::Int => "int",
            GoType::Int64 => "int64",
            GoType::Duration => "time.Duration",
            GoType::Bool => "bool",
            GoType::String => "string",
        }
    }
}

/// Parses a pull request body as nats-server's `nextReqFromMsg`: after trimming, empty is
/// batch 1; a body starting with `{` is JSON; a decimal integer is the batch; anything else is
/// batch 1. `Err` carries the full `400` status description, e.g. `Bad Request - invalid
/// character 'b' looking for beginning of object key string` or `Bad Request - heartbeat value
/// too large` (`idle_heartbeat` more than half of `expires`).
pub fn parse_next_request(body: &[u8]) -> Result<NextRequest, String> {
    let req = body.trim_ascii();
    if req.is_empty() {
        return Ok(NextRequest::default());
    }
    if req[0] != b'{' {
        let batch = std::str::from_utf8(req).ok().and_then(go_atoi).unwrap_or(1);
        return Ok(NextRequest {
            batch: positive_batch(batch),
            ..NextRequest::default()
        });
    }
    let value: serde_json::Value =
        serde_json::from_slice(req).map_err(|e| bad_request(&go_syntax_error(&e, req)))?;
    let serde_json::Value::Object(map) = value else {
        // Unreachable for a body starting with `{`, kept total.
        return Err(bad_request("unexpected end of JSON input"));
    };
    let mut ints = [0i64; 4];
    let mut no_wait = false;
    let mut priority = PriorityRequest::default();
    for (key, v) in &map {
        // Go matches field names case-insensitively (exact match preferred).
        let Some(&(name, ty)) = NEXT_FIELDS.iter().find(|(n, _)| n == key).or_else(|| {
            NEXT_FIELDS
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(key))
        }) else {
            continue;
        };
        if v.is_null() {
            continue;
        }
        let type_err = || {
            bad_request(&format!(
                "json: cannot unmarshal {} into Go struct field .{name} of type {}",
                go_value_kind(v),
                ty.name()
            ))
        };
        match ty {
            GoType::Bool => no_wait = v.as_bool().ok_or_else(type_err)?,
            GoType::String => {
                let text = v.as_str().ok_or_else(type_err)?.to_string();
                match name {
                    "group" => priority.group = text,
                    _ => priority.id = text,
                }
            }
            GoType::Int | GoType::Int64 | GoType::Duration => {
                let n = v.as_i64().ok_or_else(type_err)?;
                match name {
                    "expires" => ints[0] = n,
                    "batch" => ints[1] = n,
                    "max_bytes" => ints[2] = n,
                    "idle_heartbeat" => ints[3] = n,
                    "min_pending" => priority.min_pending = n,
                    "min_ack_pending" => priority.min_ack_pending = n,
                    _ => priority.priority = n,
                }
            }
        }
    }
    let [expires, batch, max_bytes, heartbeat] = ints;
    if heartbeat > 0 && heartbeat.wrapping_mul(2) > expires {
        return Err(bad_request("heartbeat value too large"));
    }
    Ok(NextRequest {
        batch: positive_batch(batch),
        expires_ns: match expires {
            e if e < 0 => 1,
            e => e.unsigned_abs(),
        },
        max_bytes: u64::try_from(max_bytes).unwrap_or(0),
        no_wait,
        idle_heartbeat_ns: u64::try_from(heartbeat).unwrap_or(0),
        priority: Some(priority),
    })
}

/// Checks a pull request against the consumer's `max_batch`, `max_expires` and `max_bytes`;
/// `Err` is the `409` status description (`Exceeded MaxRequestBatch of 2`, `Exceeded
/// MaxRequestExpires of 1.5s`, `Exceeded MaxRequestMaxBytes of 100`, all observed).
pub fn check_next_request_limits(req: &NextRequest, cfg: &ConsumerConfig) -> Result<(), String> {
    let over = |v: u64, max: i64| max > 0 && v > max.unsigned_abs();
    if over(req.batch, cfg.max_batch) {
        return Err(format!("Exceeded MaxRequestBatch of {}", cfg.max_batch));
    }
    if req.expires_ns > 0 && over(req.expires_ns, cfg.max_expires) {
        return Err(format!(
            "Exceeded MaxRequestExpires of {}",
            go_duration::format(cfg.max_expires)
        ));
    }
    if req.max_bytes > 0 && over(req.max_bytes, cfg.max_bytes) {
        return Err(format!("Exceeded MaxRequestMaxBytes of {}", cfg.max_bytes));
    }
    Ok(())
}

fn bad_request(text: &str) -> String {
    format!("Bad Request - {text}")
}

fn positive_batch(n: i64) -> u64 {
    u64::try_from(n).ok().filter(|&b| b > 0).unwrap_or(1)
}

/// Go's `strconv.Atoi`: optional sign, decimal digits, fits in 64 bits.
fn go_atoi(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// How Go names a JSON value in an unmarshal type error.
fn go_value_kind(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "null".into(),
        serde_json::Value::Bool(_) => "bool".into(),
        serde_json::Value::Number(n) => format!("number {n}"),
        serde_json::Value::String(_) => "string".into(),
        serde_json::Value::Array(_) => "array".into(),
        serde_json::Value::Object(_) => "object".into(),
    }
}

/// Maps a serde_json syntax error to Go's `encoding/json` text for the common cases
/// (`invalid character 'b' looking for beginning of object key string`, `unexpected end of
/// JSON input`); other errors keep serde's wording without the position.
fn go_syntax_error(e: &serde_json::Error, input: &[u8]) -> String {
    if e.is_eof() {
        return "unexpected end of JSON input".into();
    }
    let msg = e.to_string();
    let base = msg.rfind(" at line ").map_or(msg.as_str(), |i| &msg[..i]);
    let Some(c) = char_at(input, e.line(), e.column()) else {
        return base.to_string();
    };
    let context = match base {
        "key must be a string" => "looking for beginning of object key string",
        "expected value" | "expected ident" | "invalid number" => "looking for beginning of value",
        "expected `:`" => "after object key",
        "expected `,` or `}`" => "after object key:value pair",
        "expected `,` or `]`" => "after array element",
        "trailing characters" => "after top-level value",
        "trailing comma" if c == '}' => "looking for beginning of object key string",
        "trailing comma" => "looking for beginning of value",
        _ if base.starts_with("control character") => "in string literal",
        "invalid escape" => "in string escape code",
        _ => return base.to_string(),
    };
    format!("invalid character {} {context}", go_quote_char(c))
}

/// The character at serde's 1-based `line`/`column` (columns count bytes).
fn char_at(input: &[u8], line: usize, column: usize) -> Option<char> {
    let text = std::str::from_utf8(input).ok()?;
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line.checked_sub(1)?)
        .map(str::len)
        .sum();
    text.get(line_start + column.checked_sub(1)?..)?
        .chars()
        .next()
}

/// Go's `quoteChar`: `'x'`, with `'\''` and `'"'` special-cased, others as `strconv.Quote`.
fn go_quote_char(c: char) -> String {
    match c {
        '\'' => r"'\''".into(),
        '"' => "'\"'".into(),
        c if c.is_ascii_graphic() || c == ' ' => format!("'{c}'"),
        '\n' => r"'\n'".into(),
        '\r' => r"'\r'".into(),
        '\t' => r"'\t'".into(),
        c if (c as u32) < 0x20 => format!("'\\x{:02x}'", c as u32),
        c => format!("'{c}'"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jetstream::api::ErrorKind;
    use crate::jetstream::api::types::{ApiResponse, BodyRule, parse_body, response_type};

    fn next(body: &str) -> Result<NextRequest, String> {
        parse_next_request(body.as_bytes())
    }

    #[test]
    fn create_request_is_strict_and_empty_bodies_are_empty_requests() {
        for empty in ["", "  ", "null"] {
            assert_eq!(
                CreateConsumerRequest::parse(empty.as_bytes()).unwrap(),
                CreateConsumerRequest::default()
            );
        }
        let req = CreateConsumerRequest::parse(
            br#"{"stream_name":"S","config":{"durable_name":"d","ack_wait":null},
                "action":"create","pedantic":null}"#,
        )
        .unwrap();
        assert_eq!(req.stream_name, "S");
        assert_eq!(req.config.as_ref().unwrap().durable_name, "d");
        assert_eq!(req.action(), Ok(CreateAction::Create));
        assert!(!req.pedantic);
        // nats-server 2.15.1 decodes strictly: unknown fields are refused at any depth.
        let e =
            CreateConsumerRequest::parse(br#"{"stream_name":"S","config":{"foo":1}}"#).unwrap_err();
        assert_eq!(e.description, r#"invalid JSON: json: unknown field "foo""#);
        let e = CreateConsumerRequest::parse(b"[]").unwrap_err();
        assert_eq!(e.err_code, 10025);
        let e =
            CreateConsumerRequest::parse(br#"{"stream_name":"S","config":{"ack_policy":"bogus"}}"#)
                .unwrap_err();
        assert_eq!(
            e.description,
            r#"invalid JSON: can not unmarshal "\"bogus\"""#
        );
    }

    #[test]
    fn create_actions_follow_nats_server() {
        let action = |a: &str| {
            CreateConsumerRequest {
                action: a.into(),
                ..Default::default()
            }
            .action()
        };
        assert_eq!(action(""), Ok(CreateAction::CreateOrUpdate));
        assert_eq!(action("update"), Ok(CreateAction::Update));
        // Observed on nats-server 2.15.1.
        let e = action("bogus").unwrap_err();
        assert_eq!((e.code, e.err_code), (400, 10025));
        assert_eq!(
            e.description,
            r#"invalid JSON: unknown consumer action: "bogus""#
        );
        let e = CreateConsumerRequest::parse(br#"{"action":null}"#).unwrap_err();
        assert_eq!(e.description, "invalid JSON: unknown consumer action: null");
    }

    #[test]
    fn names_and_list_requests_clamp_offsets_and_refuse_unknown_fields() {
        let r: ConsumerNamesRequest = parse_body(BodyRule::Optional, br#"{"offset":-3}"#)
            .unwrap()
            .unwrap();
        assert_eq!(r.offset, 0);
        let r: ConsumerListRequest = parse_body(BodyRule::Optional, br#"{"offset":7}"#)
            .unwrap()
            .unwrap();
        assert_eq!(r.offset, 7);
        let none: Option<ConsumerNamesRequest> = parse_body(BodyRule::Optional, b"null").unwrap();
        assert_eq!(none, None);
        let e = parse_body::<ConsumerNamesRequest>(BodyRule::Optional, br#"{"x":1}"#).unwrap_err();
        assert_eq!(e.kind(), Some(ErrorKind::InvalidJSON));
    }

    #[test]
    fn names_page_matches_the_observed_response() {
        let page = consumer_names_page(["x", "dur2", "dur1"].map(String::from).to_vec(), 0);
        assert_eq!(
            ApiResponse::ok(response_type::CONSUMER_NAMES, page).to_json(),
            concat!(
                r#"{"type":"io.nats.jetstream.api.v1.consumer_names_response","total":3,"#,
                r#""offset":0,"limit":1024,"consumers":["dur1","dur2","x"]}"#
            )
        );
        let empty = consumer_names_page(Vec::new(), 9);
        assert_eq!(
            serde_json::to_string(&empty).unwrap(),
            r#"{"total":0,"offset":0,"limit":1024,"consumers":[]}"#
        );
        let many: Vec<String> = (0..1500).map(|i| format!("c{i:04}")).collect();
        let p = consumer_names_page(many, 1000);
        assert_eq!((p.total, p.offset, p.consumers.len()), (1500, 1000, 500));
        assert_eq!(p.consumers[0], "c1000");
    }

    #[test]
    fn list_page_sorts_by_name_and_pages_by_256() {
        let infos: Vec<ConsumerInfo> = (0..300)
            .rev()
            .map(|i| ConsumerInfo {
                name: format!("c{i:03}"),
                ..Default::default()
            })
            .collect();
        let p = consumer_list_page(infos, 10);
        assert_eq!((p.total, p.offset, p.limit), (300, 10, 256));
        assert_eq!(p.consumers.len(), 256);
        assert_eq!(p.consumers[0].name, "c010");
        let json = serde_json::to_string(&consumer_list_page(Vec::new(), 0)).unwrap();
        assert_eq!(json, r#"{"total":0,"offset":0,"limit":256,"consumers":[]}"#);
    }

    #[test]
    fn delete_and_pause_responses_match_observed_shapes() {
        assert_eq!(
            ApiResponse::ok(
                response_type::CONSUMER_DELETE,
                ConsumerDeleteResponse { success: true }
            )
            .to_json(),
            r#"{"type":"io.nats.jetstream.api.v1.consumer_delete_response","success":true}"#
        );
        let until = go_time::parse("2099-01-01T00:00:00Z").unwrap();
        let now = until - 2_274_680_702_905_500_333;
        assert_eq!(
            serde_json::to_string(&ConsumerPauseResponse::at(until, now)).unwrap(),
            r#"{"paused":true,"pause_until":"2099-01-01T00:00:00Z","pause_remaining":2274680702905500333}"#
        );
        assert_eq!(
            serde_json::to_string(&ConsumerPauseResponse::at(0, now)).unwrap(),
            r#"{"paused":false,"pause_until":"0001-01-01T00:00:00Z"}"#
        );
        // A deadline in the past is reported, but not paused.
        let past = ConsumerPauseResponse::at(now - 1, now);
        assert!(!past.paused && past.pause_remaining == 0);
        let req: ConsumerPauseRequest = parse_body(
            BodyRule::Optional,
            br#"{"pause_until":"2099-01-01T00:00:00Z"}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(req.pause_until_ns(), Ok(until));
        assert_eq!(ConsumerPauseRequest::default().pause_until_ns(), Ok(0));
        let bad = ConsumerPauseRequest {
            pause_until: Some("soon".into()),
        };
        assert_eq!(bad.pause_until_ns().unwrap_err().err_code, 10025);
    }

    #[test]
    fn next_request_forms() {
        let one = NextRequest::default();
        // A JSON request carries its (empty) priority-group fields.
        let json = NextRequest {
            priority: Some(PriorityRequest::default()),
            ..NextRequest::default()
        };
        assert_eq!(next(""), Ok(one.clone()));
        assert_eq!(next(" \r\n"), Ok(one.clone()));
        assert_eq!(
            next("5"),
            Ok(NextRequest {
                batch: 5,
                ..one.clone()
            })
        );
        assert_eq!(
            next(" 7 "),
            Ok(NextRequest {
                batch: 7,
                ..one.clone()
            })
        );
        assert_eq!(next("-2"), Ok(one.clone()));
        // Not JSON and not an integer: batch 1, no error (observed: no reply, request waits).
        assert_eq!(next("bad"), Ok(one.clone()));
        assert_eq!(next("[]"), Ok(one.clone()));
        assert_eq!(
            next(
                r#"{"batch":200,"expires":30000000000,"max_bytes":0,"idle_heartbeat":15000000000,"min_pending":null,"min_ack_pending":null,"group":null,"priority":null}"#
            ),
            Ok(NextRequest {
                batch: 200,
                expires_ns: 30_000_000_000,
                idle_heartbeat_ns: 15_000_000_000,
                ..json.clone()
            })
        );
        assert_eq!(
            next(r#"{"batch": 3, "expires": 999900000, "no_wait": true}"#),
            Ok(NextRequest {
                batch: 3,
                expires_ns: 999_900_000,
                no_wait: true,
                ..json.clone()
            })
        );
        // Unknown fields and nulls are ignored; names match case-insensitively as in Go.
        assert_eq!(
            next(r#"{"batch":1,"no_wait":true,"foo":1,"max_bytes":null}"#),
            Ok(NextRequest {
                no_wait: true,
                ..json.clone()
            })
        );
        assert_eq!(
            next(r#"{"BATCH":4}"#),
            Ok(NextRequest {
                batch: 4,
                ..json.clone()
            })
        );
        assert_eq!(next(r#"{"batch":0}"#), Ok(json.clone()));
        assert_eq!(
            next(r#"{"batch":-1,"no_wait":true}"#),
            Ok(NextRequest {
                no_wait: true,
                ..json.clone()
            })
        );
        assert_eq!(
            next(r#"{"expires":-5,"max_bytes":-1}"#),
            Ok(NextRequest {
                expires_ns: 1,
                ..json.clone()
            })
        );
    }

    #[test]
    fn next_request_errors_match_nats_server_texts() {
        // Every text below was observed from nats-server 2.15.1 (400 status descriptions).
        let cases = [
            (
                "{bad}",
                "Bad Request - invalid character 'b' looking for beginning of object key string",
            ),
            (
                r#"{"batch":"x"}"#,
                "Bad Request - json: cannot unmarshal string into Go struct field .batch of type int",
            ),
            (
                r#"{"batch":1,"#,
                "Bad Request - unexpected end of JSON input",
            ),
            (
                r#"{"batch":1,"expires":1000000000,"idle_heartbeat":600000000}"#,
                "Bad Request - heartbeat value too large",
            ),
            (
                r#"{"expires":"1s"}"#,
                "Bad Request - json: cannot unmarshal string into Go struct field .expires of type time.Duration",
            ),
            (
                r#"{"batch":1.5}"#,
                "Bad Request - json: cannot unmarshal number 1.5 into Go struct field .batch of type int",
            ),
        ];
        for (body, want) in cases {
            assert_eq!(next(body), Err(want.to_string()), "{body}");
        }
        // Go's texts for other syntax errors (encoding/json scanner wording).
        let go = [
            (r#"{"batch" 1}"#, "invalid character '1' after object key"),
            (
                r#"{"batch":1 "x":2}"#,
                "invalid character '\"' after object key:value pair",
            ),
            (
                r#"{"batch":}"#,
                "invalid character '}' looking for beginning of value",
            ),
            (
                r#"{"batch":1}x"#,
                "invalid character 'x' after top-level value",
            ),
            (
                r#"{"batch":1,}"#,
                "invalid character '}' looking for beginning of object key string",
            ),
            ("{", "unexpected end of JSON input"),
        ];
        for (body, want) in go {
            assert_eq!(next(body), Err(format!("Bad Request - {want}")), "{body}");
        }
        // A heartbeat without expires is too large; exactly half is fine.
        assert!(next(r#"{"idle_heartbeat":1}"#).is_err());
        assert!(next(r#"{"expires":2000,"idle_heartbeat":1000}"#).is_ok());
    }

    #[test]
    fn next_request_limits_give_the_409_texts() {
        let cfg = ConsumerConfig {
            max_batch: 2,
            max_expires: 1_500_000_000,
            max_bytes: 100,
            ..Default::default()
        };
        let req = |batch, expires_ns, max_bytes| NextRequest {
            batch,
            expires_ns,
            max_bytes,
            ..NextRequest::default()
        };
        // Texts observed from nats-server 2.15.1.
        assert_eq!(
            check_next_request_limits(&req(3, 0, 0), &cfg),
            Err("Exceeded MaxRequestBatch of 2".into())
        );
        assert_eq!(
            check_next_request_limits(&req(1, 2_000_000_000, 0), &cfg),
            Err("Exceeded MaxRequestExpires of 1.5s".into())
        );
        assert_eq!(
            check_next_request_limits(&req(1, 0, 101), &cfg),
            Err("Exceeded MaxRequestMaxBytes of 100".into())
        );
        assert_eq!(
            check_next_request_limits(&req(2, 1_500_000_000, 100), &cfg),
            Ok(())
        );
        assert_eq!(
            check_next_request_limits(&req(1000, u64::MAX, u64::MAX), &ConsumerConfig::default()),
            Ok(())
        );
        let one_sec = ConsumerConfig {
            max_expires: 1_000_000_000,
            ..Default::default()
        };
        assert_eq!(
            check_next_request_limits(&req(1, 1_000_000_001, 0), &one_sec),
            Err("Exceeded MaxRequestExpires of 1s".into())
        );
    }
}
