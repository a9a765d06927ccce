//! Pure builders of the JSON the dispatcher sends for stream reads: STREAM.INFO (and the
//! create/update responses), MSG.GET and DIRECT.GET replies.

use jetraft_storage::StorageError;
use jetraft_storage::stream::{StoredMsg, StreamStore};

use super::StreamStateMachine;
use crate::jetstream::api::types::requests::MsgSelector;
use crate::jetstream::api::types::responses::{
    ApiResponse, MsgGetResponse, Paging, StreamCreateBody, StreamInfoBody, error_json,
    subjects_page,
};
use crate::jetstream::api::types::{
    ClusterInfo, StoredMessage, StreamInfo, StreamInfoRequest, StreamSourceInfo, StreamStateInfo,
    go_time, response_type,
};
use crate::jetstream::api::validate::with_response_metadata;
use crate::jetstream::api::{ApiError, ErrorKind};

/// Builds a `StreamInfo` (without paging) as of `now_ns`. `cluster` is `None` in create/update
/// responses on a single server (observed) and `{"leader":..}` in STREAM.INFO.
pub fn stream_info(
    sm: &StreamStateMachine,
    now_ns: u64,
    cluster: Option<ClusterInfo>,
) -> StreamInfo {
    let server = sm.server();
    StreamInfo {
        config: with_response_metadata(sm.config(), &server.version, server.api_level),
        created: go_time::format(sm.created_ns()),
        state: StreamStateInfo::from_store(&sm.state(), sm.consumer_count()),
        cluster,
        mirror: sm.config().mirror.as_ref().map(StreamSourceInfo::idle),
        sources: sm
            .config()
            .sources
            .iter()
            .map(StreamSourceInfo::idle)
            .collect(),
        alternates: Vec::new(),
        ts: go_time::format(now_ns),
    }
}

/// The STREAM.INFO response JSON for `req` (deleted details and subjects when asked);
/// `decorate` fills in what only the runtime knows (live mirror/source state).
pub fn info_response_json(
    sm: &StreamStateMachine,
    req: &StreamInfoRequest,
    now_ns: u64,
    cluster: Option<ClusterInfo>,
    decorate: impl FnOnce(&mut StreamInfo),
) -> Result<String, StorageError> {
    let mut info = stream_info(sm, now_ns, cluster);
    decorate(&mut info);
    let mut paging = Paging::default();
    if req.deleted_details {
        info.state.deleted = sm.store().deleted()?;
    }
    if !req.subjects_filter.is_empty() {
        let counts = sm.store().subject_counts(&req.subjects_filter)?;
        let (page, p) = subjects_page(counts, req.offset);
        info.state.subjects = page;
        paging = p;
    }
    Ok(ApiResponse::ok(response_type::STREAM_INFO, StreamInfoBody { paging, info }).to_json())
}

/// The STREAM.INFO error JSON (keeps the zero paging fields, observed).
pub fn info_error_json(error: ApiError) -> String {
    ApiResponse::err(response_type::STREAM_INFO, error, Paging::default()).to_json()
}

/// The `stream_create_response` JSON (`did_create:true`, no `cluster` on a single server).
pub fn create_response_json(sm: &StreamStateMachine, now_ns: u64) -> String {
    let body = StreamCreateBody {
        info: stream_info(sm, now_ns, None),
        did_create: true,
    };
    ApiResponse::ok(response_type::STREAM_CREATE, body).to_json()
}

/// The `stream_update_response` JSON.
pub fn update_response_json(sm: &StreamStateMachine, now_ns: u64) -> String {
    ApiResponse::ok(response_type::STREAM_UPDATE, stream_info(sm, now_ns, None)).to_json()
}

/// Finds the message a MSG.GET/DIRECT.GET selector asks for.
pub fn find_message(
    store: &dyn StreamStore,
    selector: &MsgSelector,
) -> Result<Option<StoredMsg>, StorageError> {
    match selector {
        MsgSelector::Seq(seq) => store.get(*seq),
        MsgSelector::LastBySubject(subject) => store.last_for_subject(subject),
        MsgSelector::NextBySubject { subject, from } => {
            store.next_matching(*from, &[subject.as_str()])
        }
        MsgSelector::StartTime(ns) => first_at_or_after(store, *ns, &[]),
        MsgSelector::NextBySubjectFromTime { subject, time_ns } => {
            first_at_or_after(store, *time_ns, &[subject.as_str()])
        }
    }
}

/// The first message matching `filters` stored at or after `ns`. Timestamps grow with
/// sequences, so it is found by walking forward from the first one.
fn first_at_or_after(
    store: &dyn StreamStore,
    ns: u64,
    filters: &[&str],
) -> Result<Option<StoredMsg>, StorageError> {
    let mut at = store.state().first_seq;
    while let Some(m) = store.next_matching(at, filters)? {
        if m.timestamp_ns >= ns {
            return Ok(Some(m));
        }
        at = m.seq + 1;
    }
    Ok(None)
}

/// The STREAM.MSG.GET response JSON: the message, or `404/10037 no message found`.
pub fn msg_get_response_json(
    store: &dyn StreamStore,
    selector: &MsgSelector,
    no_hdr: bool,
) -> Result<String, StorageError> {
    Ok(match find_message(store, selector)? {
        Some(m) => ApiResponse::ok(
            response_type::STREAM_MSG_GET,
            MsgGetResponse {
                message: StoredMessage::from_stored(&m, no_hdr),
            },
        )
        .to_json(),
        None => error_json(
            response_type::STREAM_MSG_GET,
            ApiError::new(ErrorKind::NoMessageFound),
        ),
    })
}

/// A DIRECT.GET reply: the header block and payload to publish to the reply subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectReply {
    /// Header block (`NATS/1.0...`), empty for `no_hdr` replies (sent as plain `MSG`).
    pub headers: Vec<u8>,
    /// Payload.
    pub payload: bytes::Bytes,
}

/// Builds the DIRECT.GET reply for a found message (spec/nats-protocol-and-jetstream.md §3.12):
/// the original headers followed
/// by `Nats-Stream`, `Nats-Subject`, `Nats-Sequence`, `Nats-Time-Stamp`; or, with `no_hdr`,
/// the payload alone.
pub fn direct_get_reply(stream: &str, msg: &StoredMsg, no_hdr: bool) -> DirectReply {
    if no_hdr {
        return DirectReply {
            headers: Vec::new(),
            payload: msg.payload.clone(),
        };
    }
    let mut headers = if msg.headers.is_empty() {
        b"NATS/1.0\r\n".to_vec()
    } else {
        // Drop the block's final empty line so the added headers continue it.
        let h: &[u8] = &msg.headers;
        h.strip_suffix(b"\r\n").unwrap_or(h).to_vec()
    };
    for (k, v) in [
        ("Nats-Stream", stream.to_string()),
        ("Nats-Subject", msg.subject.clone()),
        ("Nats-Sequence", msg.seq.to_string()),
        ("Nats-Time-Stamp", go_time::format(msg.timestamp_ns)),
    ] {
        crate::protocol::headers::push_header(&mut headers, k, &v);
    }
    headers.extend_from_slice(b"\r\n");
    DirectReply {
        headers,
        payload: msg.payload.clone(),
    }
}

/// A DIRECT.GET status reply with no payload (`404 Message Not Found`, `408 Bad Request`, ...).
pub fn direct_status(code: u16, description: &str) -> Vec<u8> {
    format!("NATS/1.0 {code} {description}\r\n\r\n").into_bytes()
}
