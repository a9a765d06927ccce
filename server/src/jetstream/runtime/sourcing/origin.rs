//! Reading an origin stream for a mirror or source: from the local replica when this node
//! hosts one, otherwise through the ordinary JetStream API of the node hosting it
//! (`STREAM.INFO` for its last sequence, then `STREAM.MSG.GET` with `next_by_subj` per message),
//! asked through this node's forward inbox like STREAM.LIST asks for remote infos.
//!
//! Only committed messages are ever read (a replica's store holds applied entries only), so a
//! copy never has to be taken back.

use std::time::Duration;

use bytes::Bytes;
use jetraft_storage::stream::StoredMsg;
use serde::Deserialize;

use super::super::JetStream;
use crate::jetstream::api::types::requests::MsgSelector;
use crate::jetstream::api::types::{base64, go_time};
use crate::jetstream::api::{ApiError, ErrorKind};
use crate::jetstream::stream::info;

/// How long one API request to the origin's node may take.
const ASK_BOUND: Duration = Duration::from_secs(2);

/// Messages read from an origin in one round.
#[derive(Debug, Default)]
pub(super) struct Fetched {
    /// Matching messages at or after the requested sequence, ascending.
    pub msgs: Vec<StoredMsg>,
    /// The origin's last sequence when read.
    pub origin_last: u64,
    /// Every matching message up to `origin_last` is in `msgs` (nothing more to read now).
    pub complete: bool,
    /// The sequence to read from next time (past everything examined).
    pub next: u64,
}

/// The parts of a `stream_info_response` needed here.
#[derive(Deserialize)]
struct InfoAnswer {
    #[serde(default)]
    error: Option<ApiError>,
    #[serde(default)]
    state: Option<InfoState>,
}

#[derive(Deserialize)]
struct InfoState {
    #[serde(default)]
    last_seq: u64,
}

/// The parts of a `stream_msg_get_response` needed here.
#[derive(Deserialize)]
struct GetAnswer {
    #[serde(default)]
    error: Option<ApiError>,
    #[serde(default)]
    message: Option<GetMessage>,
}

#[derive(Deserialize)]
struct GetMessage {
    subject: String,
    seq: u64,
    #[serde(default)]
    hdrs: Option<String>,
    #[serde(default)]
    data: Option<String>,
    time: String,
}

impl GetMessage {
    fn into_stored(self) -> Option<StoredMsg> {
        let decode = |b: Option<String>| match b {
            Some(text) => base64::decode(&text).map(Bytes::from),
            None => Some(Bytes::new()),
        };
        Some(StoredMsg {
            seq: self.seq,
            subject: self.subject,
            headers: decode(self.hdrs)?,
            payload: decode(self.data)?,
            timestamp_ns: go_time::parse(&self.time)?,
        })
    }
}

fn unavailable() -> ApiError {
    ApiError::new(ErrorKind::ClusterNotAvail)
}

impl JetStream {
    /// Reads up to `max` messages of `origin` matching `filters` (empty = all) from sequence
    /// `from` on. `exclude` is a replica node to skip when asking remotely (this node).
    pub(super) async fn fetch_origin(
        &self,
        origin: &str,
        from: u64,
        filters: &[String],
        max: usize,
        attempt: usize,
    ) -> Result<Fetched, ApiError> {
        if let Some(ls) = self.local_stream(origin) {
            let sm = ls.sm.lock();
            let store = sm.store();
            let refs: Vec<&str> = filters.iter().map(String::as_str).collect();
            let origin_last = store.state().last_seq;
            let mut out = Fetched {
                origin_last,
                next: from,
                ..Fetched::default()
            };
            while out.msgs.len() < max {
                let want = max - out.msgs.len();
                let msgs = store
                    .next_matching_batch(out.next, &refs, want, usize::MAX)
                    .map_err(|e| ApiError::store_failed(&e.to_string()))?;
                let Some(last) = msgs.last() else {
                    out.complete = true;
                    out.next = out.next.max(origin_last + 1);
                    break;
                };
                out.next = last.seq + 1;
                out.msgs.extend(msgs);
            }
            return Ok(out);
        }
        self.fetch_remote(origin, from, filters, max, attempt).await
    }

    /// The origin's replica nodes other than this one, rotated by `attempt`.
    fn origin_node(&self, origin: &str, attempt: usize) -> Result<u64, ApiError> {
        let replicas = self
            .meta
            .read(|m| m.stream(origin).map(|s| s.replicas.clone()))
            .ok_or_else(ApiError::stream_not_found)?;
        let others: Vec<u64> = replicas.into_iter().filter(|r| *r != self.node.0).collect();
        if others.is_empty() {
            return Err(unavailable());
        }
        Ok(others[attempt % others.len()])
    }

    async fn fetch_remote(
        &self,
        origin: &str,
        from: u64,
        filters: &[String],
        max: usize,
        attempt: usize,
    ) -> Result<Fetched, ApiError> {
        let node = self.origin_node(origin, attempt)?;
        let info = self
            .ask_stream(node, "STREAM.INFO", origin, Bytes::new(), ASK_BOUND)
            .await
            .ok_or_else(unavailable)?;
        let info: InfoAnswer = serde_json::from_slice(&info).map_err(|_| unavailable())?;
        if let Some(e) = info.error {
            return Err(e);
        }
        let origin_last = info.state.map_or(0, |s| s.last_seq);
        let filter = match filters {
            [one] => one.clone(),
            _ => ">".to_string(),
        };
        let mut out = Fetched {
            origin_last,
            next: from,
            ..Fetched::default()
        };
        while out.msgs.len() < max {
            if out.next > origin_last {
                out.complete = true;
                break;
            }
            let body = serde_json::json!({"seq": out.next, "next_by_subj": filter}).to_string();
            let answer = self
                .ask_stream(node, "STREAM.MSG.GET", origin, Bytes::from(body), ASK_BOUND)
                .await
                .ok_or_else(unavailable)?;
            let answer: GetAnswer = serde_json::from_slice(&answer).map_err(|_| unavailable())?;
            match (answer.error, answer.message) {
                (Some(e), _) if e.err_code == ApiError::no_message_found().err_code => {
                    out.complete = true;
                    out.next = out.next.max(origin_last + 1);
                    break;
                }
                (Some(e), _) => return Err(e),
                (None, Some(m)) => {
                    let m = m.into_stored().ok_or_else(unavailable)?;
                    out.next = m.seq + 1;
                    if filters.is_empty()
                        || filters
                            .iter()
                            .any(|f| crate::router::subject::matches(f, &m.subject))
                    {
                        out.msgs.push(m);
                    }
                }
                (None, None) => return Err(unavailable()),
            }
        }
        Ok(out)
    }

    /// The first origin sequence stored at or after `time_ns` (`opt_start_time`); `None`
    /// when the origin has no such message yet.
    pub(super) async fn origin_seq_at(
        &self,
        origin: &str,
        time_ns: u64,
        attempt: usize,
    ) -> Result<Option<u64>, ApiError> {
        if let Some(ls) = self.local_stream(origin) {
            let sm = ls.sm.lock();
            return info::find_message(sm.store(), &MsgSelector::StartTime(time_ns))
                .map(|m| m.map(|m| m.seq))
                .map_err(|e| ApiError::store_failed(&e.to_string()));
        }
        let node = self.origin_node(origin, attempt)?;
        let body = serde_json::json!({"start_time": go_time::format(time_ns)}).to_string();
        let answer = self
            .ask_stream(node, "STREAM.MSG.GET", origin, Bytes::from(body), ASK_BOUND)
            .await
            .ok_or_else(unavailable)?;
        let answer: GetAnswer = serde_json::from_slice(&answer).map_err(|_| unavailable())?;
        match (answer.error, answer.message) {
            (Some(e), _) if e.err_code == ApiError::no_message_found().err_code => Ok(None),
            (Some(e), _) => Err(e),
            (None, Some(m)) => Ok(Some(m.seq)),
            (None, None) => Err(unavailable()),
        }
    }
}
