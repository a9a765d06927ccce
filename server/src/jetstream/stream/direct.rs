//! DIRECT.GET answers, as nats-server's `getDirectRequest` / `getDirectMulti` give them: one
//! message, a batch (`batch`, `max_bytes`) ended by a `204 EOB` status, or the last message of
//! each subject matching `multi_last` up to a sequence or time; the `408`/`404`/`413` statuses
//! for requests that are empty, malformed, conflicting, unanswerable or too broad.
//!
//! Pure over a [`StreamStore`]: the caller holds the replica's lock, takes the replies and
//! publishes them in order to the request's reply subject.

use bytes::Bytes;
use jetraft_storage::stream::{StoredMsg, StreamStore};

use super::consumers::count_pending;
use super::info::{DirectReply, direct_get_reply};
use crate::jetstream::api::types::go_time;
use crate::jetstream::api::types::requests::MsgGetRequest;
use crate::protocol::headers::push_header;

/// Most subjects one `multi_last` request may answer (nats-server's `maxAllowedResponses`).
const MAX_MULTI_RESULTS: usize = 1024;

/// The replies to one DIRECT.GET of stream `stream`: `last_subject` is the subject tail of
/// `$JS.API.DIRECT.GET.<stream>.<subject>` requests, `body` the request payload, `max_pending`
/// the server's `max_pending` (the default byte bound of a batch).
pub fn answer(
    store: &dyn StreamStore,
    stream: &str,
    last_subject: Option<&str>,
    body: &[u8],
    max_pending: u64,
) -> Vec<DirectReply> {
    let req = match request(last_subject, body) {
        Ok(req) => req,
        Err(status) => return vec![status],
    };
    let max_bytes = if req.max_bytes > 0 {
        req.max_bytes
    } else {
        max_pending
    };
    let out = if !req.multi_last.is_empty() {
        multi_last(store, stream, &req, max_bytes)
    } else {
        single_or_batch(store, stream, &req, max_bytes)
    };
    out.unwrap_or_else(|_| vec![status(404, "Message Not Found")])
}

/// The request, checked as nats-server checks it, or the status that answers it.
fn request(last_subject: Option<&str>, body: &[u8]) -> Result<MsgGetRequest, DirectReply> {
    let parse = |body: &[u8]| parse_lenient(body).map(|(req, _)| req);
    if let Some(subject) = last_subject {
        // `DIRECT.GET.<stream>.<subject>`: a body may only carry `no_hdr`-like options.
        let req = if body.is_empty() {
            MsgGetRequest::default()
        } else {
            parse(body)?
        };
        if subject.is_empty()
            || !req.last_by_subj.is_empty()
            || !req.next_by_subj.is_empty()
            || !req.multi_last.is_empty()
            || req.seq != 0
            || req.batch != 0
            || req.start_time.is_some()
            || req.up_to_seq != 0
            || req.up_to_time.is_some()
        {
            return Err(status(408, "Bad Request"));
        }
        return Ok(MsgGetRequest {
            last_by_subj: subject.to_string(),
            ..req
        });
    }
    if body.is_empty() {
        return Err(status(408, "Empty Request"));
    }
    let (req, negative_batch) = parse_lenient(body)?;
    let (seq, last, next) = (
        req.seq > 0,
        !req.last_by_subj.is_empty(),
        !req.next_by_subj.is_empty(),
    );
    let (multi, start, batch) = (
        !req.multi_last.is_empty(),
        req.start_time.is_some(),
        req.batch > 0,
    );
    if !seq && !last && !next && !multi && !start {
        return Err(status(408, "Empty Request"));
    }
    // At most one of seq, last_by_subj and start_time; last_by_subj alone; no next with
    // multi_last; one upper bound.
    let conflict = [seq, last, start].into_iter().filter(|x| *x).count() > 1
        || (last && (next || batch || multi))
        || (next && multi)
        || (req.up_to_seq > 0 && req.up_to_time.is_some());
    if conflict {
        return Err(status(408, "Bad Request"));
    }
    if negative_batch {
        // Go's `batch int` below zero: a batch request that sends nothing but its end.
        return Err(eob(0, 0, None));
    }
    Ok(req)
}

/// The fields of nats-server's `JSApiMsgGetRequest`.
const MSG_GET_FIELDS: &[&str] = &[
    "seq",
    "last_by_subj",
    "next_by_subj",
    "batch",
    "max_bytes",
    "start_time",
    "multi_last",
    "up_to_seq",
    "up_to_time",
    "no_hdr",
];

/// Decodes a direct get body as nats-server's lenient `json.Unmarshal` does: one JSON value,
/// `null` is the zero request, unknown fields are ignored, anything else that fails is `408
/// Malformed Request`. A negative `batch` (Go's `int`) is reported apart (`true`).
fn parse_lenient(body: &[u8]) -> Result<(MsgGetRequest, bool), DirectReply> {
    let malformed = || status(408, "Malformed Request");
    let mut fields = match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Null) => serde_json::Map::new(),
        Ok(serde_json::Value::Object(m)) => m,
        _ => return Err(malformed()),
    };
    fields.retain(|k, _| MSG_GET_FIELDS.contains(&k.as_str()));
    let negative_batch = fields
        .get("batch")
        .and_then(serde_json::Value::as_i64)
        .is_some_and(|b| b < 0);
    if negative_batch {
        fields.remove("batch");
    }
    let req = serde_json::from_value(serde_json::Value::Object(fields)).map_err(|_| malformed())?;
    Ok((req, negative_batch))
}

/// One message, or a batch of up to `batch` messages ended by `204 EOB`.
fn single_or_batch(
    store: &dyn StreamStore,
    stream: &str,
    req: &MsgGetRequest,
    max_bytes: u64,
) -> Result<Vec<DirectReply>, jetraft_storage::StorageError> {
    if !req.last_by_subj.is_empty() {
        return Ok(match store.last_for_subject(&req.last_by_subj)? {
            Some(m) => vec![direct_get_reply(stream, &m, req.no_hdr)],
            None => vec![status(404, "Message Not Found")],
        });
    }
    let mut seq = match &req.start_time {
        Some(t) => match go_time::parse(t) {
            Some(ns) => first_at_or_after(store, ns)?,
            None => return Ok(vec![status(408, "Malformed Request")]),
        },
        None => req.seq,
    };
    let filters: Vec<&str> = if req.next_by_subj.is_empty() {
        Vec::new()
    } else {
        vec![req.next_by_subj.as_str()]
    };
    let is_batch = req.batch > 0;
    let mut pending = if is_batch {
        let owned: Vec<String> = filters.iter().map(|f| (*f).to_string()).collect();
        count_pending(store, seq, &owned)?
    } else {
        0
    };
    let mut out = Vec::new();
    let (mut last_seq, mut sent_bytes) = (0u64, 0u64);
    for i in 0..req.batch.max(1) {
        // A single exact `seq` is looked up as is; batches and subject filters step over gaps.
        let found = if i == 0 && !is_batch && filters.is_empty() {
            store.get(seq)?
        } else {
            store.next_matching(seq, &filters)?
        };
        let Some(m) = found else {
            if i > 0 {
                break;
            }
            return Ok(vec![status(404, "Message Not Found")]);
        };
        seq = m.seq + 1;
        let reply = if is_batch && !req.no_hdr {
            pending = pending.saturating_sub(1);
            batch_reply(stream, &m, pending, last_seq)
        } else {
            direct_get_reply(stream, &m, req.no_hdr)
        };
        last_seq = m.seq;
        sent_bytes += size(&m);
        out.push(reply);
        if sent_bytes >= max_bytes {
            break;
        }
    }
    if is_batch {
        out.push(eob(pending, last_seq, None));
    }
    Ok(out)
}

/// The last message of each subject matching `multi_last`, up to `up_to_seq`/`up_to_time`,
/// oldest first, from `seq` on, ended by `204 EOB` with `Nats-UpTo-Sequence`.
fn multi_last(
    store: &dyn StreamStore,
    stream: &str,
    req: &MsgGetRequest,
    max_bytes: u64,
) -> Result<Vec<DirectReply>, jetraft_storage::StorageError> {
    let state = store.state();
    let mut up_to = req.up_to_seq;
    if let Some(t) = &req.up_to_time {
        let Some(ns) = go_time::parse(t) else {
            return Ok(vec![status(408, "Malformed Request")]);
        };
        let at = first_at_or_after(store, ns)?;
        if at <= state.first_seq {
            return Ok(vec![status(404, "No Results")]);
        }
        // The first message at or after the time is the one past the ceiling.
        up_to = at - 1;
    }
    if up_to == 0 {
        up_to = state.last_seq;
    }
    let mut seqs = std::collections::BTreeSet::new();
    for filter in &req.multi_last {
        for subject in store.subject_counts(filter)?.into_keys() {
            if let Some(seq) = last_at_or_before(store, &subject, up_to)? {
                seqs.insert(seq);
            }
        }
        if seqs.len() > MAX_MULTI_RESULTS {
            return Ok(vec![status(413, "Too Many Results")]);
        }
    }
    if seqs.is_empty() {
        return Ok(vec![status(404, "No Results")]);
    }
    let mut pending = seqs.len() as u64;
    let mut out = Vec::new();
    let (mut last_seq, mut sent_bytes, mut sent) = (0u64, 0u64, 0u64);
    for seq in seqs {
        pending = pending.saturating_sub(1);
        if seq < req.seq {
            continue;
        }
        let Some(m) = store.get(seq)? else {
            return Ok(vec![status(404, "Message Not Found")]);
        };
        out.push(batch_reply(stream, &m, pending, last_seq));
        last_seq = m.seq;
        sent_bytes += size(&m);
        if sent_bytes >= max_bytes {
            break;
        }
        sent += 1;
        if req.batch > 0 && sent >= req.batch {
            break;
        }
    }
    out.push(eob(pending, last_seq, Some(up_to)));
    Ok(out)
}

/// The sequence of the first message stored at or after `ns` (one past the last if none).
fn first_at_or_after(
    store: &dyn StreamStore,
    ns: u64,
) -> Result<u64, jetraft_storage::StorageError> {
    let state = store.state();
    let mut at = state.first_seq;
    while let Some(m) = store.next_matching(at, &[])? {
        if m.timestamp_ns >= ns {
            return Ok(m.seq);
        }
        at = m.seq + 1;
    }
    Ok(state.last_seq + 1)
}

/// The newest sequence on literal `subject` at or before `up_to`.
fn last_at_or_before(
    store: &dyn StreamStore,
    subject: &str,
    up_to: u64,
) -> Result<Option<u64>, jetraft_storage::StorageError> {
    if let Some(m) = store.last_for_subject(subject)?
        && m.seq <= up_to
    {
        return Ok(Some(m.seq));
    }
    let mut found = None;
    let mut at = store.first_seq_for_subject(subject)?.unwrap_or(u64::MAX);
    while at <= up_to {
        match store.next_matching(at, &[subject])? {
            Some(m) if m.seq <= up_to => {
                found = Some(m.seq);
                at = m.seq + 1;
            }
            _ => break,
        }
    }
    Ok(found)
}

/// What a message counts against `max_bytes` (subject, headers and payload, as nats-server).
fn size(m: &StoredMsg) -> u64 {
    (m.subject.len() + m.headers.len() + m.payload.len()) as u64
}

/// A batch message: the direct-get headers plus `Nats-Num-Pending` and `Nats-Last-Sequence`.
fn batch_reply(stream: &str, m: &StoredMsg, pending: u64, last_seq: u64) -> DirectReply {
    let mut r = direct_get_reply(stream, m, false);
    r.headers.truncate(r.headers.len() - 2); // reopen the block before its final empty line
    push_header(&mut r.headers, "Nats-Num-Pending", &pending.to_string());
    push_header(&mut r.headers, "Nats-Last-Sequence", &last_seq.to_string());
    r.headers.extend_from_slice(b"\r\n");
    r
}

/// The `204 EOB` status that ends a batch.
fn eob(pending: u64, last_seq: u64, up_to: Option<u64>) -> DirectReply {
    let mut headers = b"NATS/1.0 204 EOB\r\n".to_vec();
    push_header(&mut headers, "Nats-Num-Pending", &pending.to_string());
    push_header(&mut headers, "Nats-Last-Sequence", &last_seq.to_string());
    if let Some(up_to) = up_to {
        push_header(&mut headers, "Nats-UpTo-Sequence", &up_to.to_string());
    }
    headers.extend_from_slice(b"\r\n");
    DirectReply {
        headers,
        payload: Bytes::new(),
    }
}

/// A status reply with no payload.
fn status(code: u16, description: &str) -> DirectReply {
    DirectReply {
        headers: super::info::direct_status(code, description),
        payload: Bytes::new(),
    }
}

#[cfg(test)]
#[path = "direct_tests.rs"]
mod tests;
