//! Mirrors and sources (spec/nats-protocol-and-jetstream.md §9): the leader of a stream with
//! `mirror` or `sources` copies its
//! origins' messages into its own Raft group.
//!
//! Design:
//! - [`JetStream::sync_sourcing`], called by each replica's owner task (`owner`), runs one copy
//!   task per origin while this node leads the stream; a task stops when leadership moves, the
//!   stream is removed, or its mirror/sources config changes (a new leader starts its own).
//! - A copy task reads the origin ([`origin`]: the local replica when this node hosts one,
//!   otherwise `STREAM.INFO` + `STREAM.MSG.GET` through the JetStream API of a node hosting
//!   it) and proposes `Append` entries carrying the origin sequence (`Append.origin_seq`).
//!   Followers get the copies by replication like any publish.
//! - Where to resume is replicated state, never the task's memory: a mirror's `last_seq` *is*
//!   the origin sequence last copied (copies keep the origin's sequence and time), and a source's
//!   position is recorded per source key by the state machine when it applies a copy. Copies at
//!   or below the position are ignored at apply, so a task that re-reads after a leader change
//!   or a failed proposal cannot duplicate messages.
//! - An unreachable or missing origin is retried with backoff ([`MIN_BACKOFF`]..[`MAX_BACKOFF`]);
//!   an origin's error answer (e.g. 10059 stream not found) is shown as the source's `error` in
//!   STREAM.INFO, an unreachable origin only lets `active` grow (as nats-server shows it); when
//!   the origin is back the task catches up from the replicated position.
//!
//! nats-server uses internal push consumers with flow control on the origin instead; the
//! observable behaviour (copied data, sequences, `Nats-Stream-Source`, the info blocks) is what
//! is kept. Not done: `external` (other domains/accounts) origins are reported as failing, and
//! a mirror whose origin was recreated with lower sequences stays where it is.
//!
//! Lock order: a stream's state-machine mutex, then `LocalStream::sourcing`, then a status
//! mutex; the copy tasks take them one at a time.

mod origin;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::replica::LocalStream;
use super::{JetStream, now_ns};
use crate::jetstream::api::types::{StreamConfig, StreamInfo, StreamSource, go_time};
use crate::jetstream::api::{ApiError, ErrorKind};
use crate::jetstream::stream::command;
use crate::jetstream::transform::Transform;

/// Pause between polls of an origin that had nothing new (local replica).
const POLL_LOCAL: Duration = Duration::from_millis(50);
/// Pause between polls of an origin that had nothing new (another node).
const POLL_REMOTE: Duration = Duration::from_millis(200);
/// First retry delay after a failure.
const MIN_BACKOFF: Duration = Duration::from_millis(250);
/// Longest retry delay.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Messages read and proposed per round.
const BATCH: usize = 256;

/// What one copy task reports for STREAM.INFO.
#[derive(Debug, Default)]
pub(super) struct SourceStatus {
    /// Origin messages not copied yet (as of the last read).
    lag: u64,
    /// Origin sequence last copied (shown for sources).
    seq: u64,
    /// When the origin was last reached.
    active_at: Option<Instant>,
    /// Why the last attempt failed.
    error: Option<ApiError>,
}

/// The copy tasks of one stream on its leader.
#[derive(Debug)]
pub(super) struct SourcingRun {
    /// The mirror (`true`) or the sources these tasks copy, as configured.
    mirror: bool,
    /// The configured origins, in config order.
    origins: Vec<StreamSource>,
    /// One status per origin, in config order.
    status: Vec<Arc<Mutex<SourceStatus>>>,
    /// Stops the tasks.
    cancel: CancellationToken,
}

/// Identifies a source within its stream: copies record their position under this key.
pub(super) fn source_key(src: &StreamSource) -> String {
    let transforms: Vec<String> = src
        .subject_transforms
        .iter()
        .map(|t| format!("{}>{}", t.src, t.dest))
        .collect();
    format!(
        "{}|{}|{}",
        src.name,
        src.filter_subject,
        transforms.join(",")
    )
}

/// A short stable id of a source key (the last field of `Nats-Stream-Source`).
fn key_id(key: &str) -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    // FNV-1a: stable across processes and versions (std's hasher is not).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (0..8)
        .map(|i| char::from(ALPHABET[usize::try_from((h >> (i * 6)) % 62).unwrap_or(0)]))
        .collect()
}

/// Appends `name: value` to a raw header block (creating one if empty).
fn with_header(block: &[u8], name: &str, value: &str) -> Bytes {
    let mut out = Vec::with_capacity(block.len() + name.len() + value.len() + 16);
    match block.strip_suffix(b"\r\n\r\n") {
        Some(head) if !block.is_empty() => {
            out.extend_from_slice(head);
            out.extend_from_slice(b"\r\n");
        }
        _ => out.extend_from_slice(b"NATS/1.0\r\n"),
    }
    out.extend_from_slice(format!("{name}: {value}\r\n\r\n").as_bytes());
    Bytes::from(out)
}

/// The origins a config copies from: `(is mirror, origins)`.
fn origins_of(cfg: &StreamConfig) -> (bool, Vec<StreamSource>) {
    match &cfg.mirror {
        Some(m) => (true, vec![m.clone()]),
        None => (false, cfg.sources.clone()),
    }
}

/// How one origin's messages are selected and renamed.
struct CopyPlan {
    /// Mirror copy (keeps sequence and time) or source copy.
    mirror: bool,
    /// The source key (empty for a mirror).
    key: String,
    /// Subjects read from the origin (empty = all).
    filters: Vec<String>,
    /// Transforms; a message matching none of them is not copied (when there are any).
    transforms: Vec<Transform>,
    /// The origin config, for the header and `opt_start_*`.
    src: StreamSource,
}

impl CopyPlan {
    fn new(mirror: bool, src: &StreamSource) -> Self {
        let transforms: Vec<Transform> = src
            .subject_transforms
            .iter()
            .filter_map(|t| Transform::new(&t.src, &t.dest).ok())
            .collect();
        let filters = if !src.filter_subject.is_empty() {
            vec![src.filter_subject.clone()]
        } else if transforms.iter().any(|t| t.src() == ">") {
            Vec::new()
        } else {
            transforms.iter().map(|t| t.src().to_string()).collect()
        };
        Self {
            mirror,
            key: if mirror {
                String::new()
            } else {
                source_key(src)
            },
            filters,
            transforms,
            src: src.clone(),
        }
    }

    /// The `Append` copying `m`, or `None` when no transform takes it.
    fn command(&self, m: &jetraft_storage::stream::StoredMsg) -> Option<Bytes> {
        let subject = if self.transforms.is_empty() {
            m.subject.clone()
        } else {
            self.transforms.iter().find_map(|t| t.apply(&m.subject))?
        };
        if self.mirror {
            return Some(command::copy(
                &subject,
                m.headers.clone(),
                m.payload.clone(),
                m.timestamp_ns,
                m.seq,
                "",
            ));
        }
        let filter = if self.src.filter_subject.is_empty() {
            ">"
        } else {
            &self.src.filter_subject
        };
        let dest = self
            .src
            .subject_transforms
            .first()
            .map_or(">", |t| t.dest.as_str());
        let value = format!(
            "{} {} {filter} {dest} {} {}",
            self.src.name,
            m.seq,
            m.subject,
            key_id(&self.key)
        );
        let headers = with_header(
            &m.headers,
            crate::jetstream::stream::headers::STREAM_SOURCE,
            &value,
        );
        Some(command::copy(
            &subject,
            headers,
            m.payload.clone(),
            now_ns(),
            m.seq,
            &self.key,
        ))
    }
}

/// Sleeps `d` unless cancelled first; false when cancelled.
async fn pause(cancel: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        () = cancel.cancelled() => false,
        () = tokio::time::sleep(d) => true,
    }
}

impl JetStream {
    /// Starts and stops the copy tasks of `ls` to match leadership and its config (called by
    /// the replica's owner task, the only writer of `ls.sourcing`).
    pub(super) fn sync_sourcing(self: &Arc<Self>, ls: &Arc<LocalStream>, leading: bool) {
        let (mirror, origins) = origins_of(ls.sm.lock().config());
        let wanted = leading && !origins.is_empty() && !ls.cancel.is_cancelled();
        let mut run = ls.sourcing.lock();
        if let Some(r) = run.as_ref()
            && !(wanted && r.mirror == mirror && r.origins == origins)
        {
            r.cancel.cancel();
            debug!(stream = %ls.name, "copy tasks stopped");
            *run = None;
        }
        if !wanted || run.is_some() {
            return;
        }
        let cancel = ls.cancel.child_token();
        let status: Vec<Arc<Mutex<SourceStatus>>> = origins
            .iter()
            .map(|_| Arc::new(Mutex::new(SourceStatus::default())))
            .collect();
        for (src, st) in origins.iter().zip(&status) {
            let js = self.clone();
            let plan = CopyPlan::new(mirror, src);
            let (ls, st, cancel) = (ls.clone(), st.clone(), cancel.clone());
            self.tasks
                .spawn(async move { js.copy_task(ls, plan, st, cancel).await });
        }
        info!(stream = %ls.name, origins = origins.len(), mirror, "copy tasks started");
        *run = Some(SourcingRun {
            mirror,
            origins,
            status,
            cancel,
        });
    }

    /// Stops the copy tasks of `ls` (its owner task ends).
    pub(super) fn stop_sourcing(ls: &LocalStream) {
        if let Some(run) = ls.sourcing.lock().take() {
            run.cancel.cancel();
        }
    }

    /// The replicated copy position of `plan` in `ls` (0 = nothing copied yet).
    fn copy_position(ls: &LocalStream, plan: &CopyPlan) -> u64 {
        let sm = ls.sm.lock();
        if plan.mirror {
            sm.state().last_seq
        } else {
            sm.source_position(&plan.key)
        }
    }

    /// Where reading starts when nothing was copied yet (`opt_start_seq`/`opt_start_time`).
    async fn start_seq(
        &self,
        origin: &str,
        plan: &CopyPlan,
        attempt: usize,
    ) -> Result<u64, ApiError> {
        if plan.src.opt_start_seq > 0 {
            return Ok(plan.src.opt_start_seq);
        }
        let Some(time) = plan.src.opt_start_time.as_deref().and_then(go_time::parse) else {
            return Ok(1);
        };
        // No message at or after the time yet: start after everything there is now.
        match self.origin_seq_at(origin, time, attempt).await? {
            Some(seq) => Ok(seq),
            None => {
                let all = self.fetch_origin(origin, 1, &[], 0, attempt).await?;
                Ok(all.origin_last + 1)
            }
        }
    }

    /// Copies one origin into `ls` until cancelled.
    async fn copy_task(
        self: Arc<Self>,
        ls: Arc<LocalStream>,
        plan: CopyPlan,
        status: Arc<Mutex<SourceStatus>>,
        cancel: CancellationToken,
    ) {
        // The origin is a stream of the same account (its key, see `jetstream::account`).
        let origin = crate::jetstream::account::stream_key(
            crate::jetstream::account::stream_account(&ls.name),
            &plan.src.name,
        );
        if plan.src.external.is_some() {
            status.lock().error = Some(ApiError::with_err(
                ErrorKind::StreamCreate,
                "external sources are not supported by this server",
            ));
            return;
        }
        let mut backoff = MIN_BACKOFF;
        let mut attempt = 0usize;
        // Next origin sequence to read; `None` = derive from the replicated position.
        let mut cursor: Option<u64> = None;
        while !cancel.is_cancelled() {
            let result = match cursor {
                Some(c) => Ok(c),
                None => match Self::copy_position(&ls, &plan) {
                    0 => self.start_seq(&origin, &plan, attempt).await,
                    pos => Ok(pos + 1),
                },
            };
            let fetched = match result {
                Ok(from) => {
                    self.fetch_origin(&origin, from, &plan.filters, BATCH, attempt)
                        .await
                }
                Err(e) => Err(e),
            };
            let fetched = match fetched {
                Ok(f) => f,
                Err(e) => {
                    debug!(stream = %ls.name, origin = %origin, error = %e, "origin not readable");
                    // Like nats-server, an origin that exists but cannot be reached right
                    // now is not an error (only `active` grows); its answers are.
                    let transient =
                        e.err_code == ApiError::new(ErrorKind::ClusterNotAvail).err_code;
                    if !transient {
                        status.lock().error = Some(e);
                    }
                    attempt += 1;
                    cursor = None;
                    if !pause(&cancel, backoff).await {
                        break;
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            backoff = MIN_BACKOFF;
            let local = self.local_stream(&origin).is_some();
            let last_read = fetched.msgs.last().map(|m| m.seq);
            let proposed = self.propose_copies(&ls, &plan, &fetched.msgs).await;
            {
                let mut st = status.lock();
                st.active_at = Some(Instant::now());
                st.error = None;
                st.lag = if fetched.complete {
                    0
                } else {
                    fetched
                        .origin_last
                        .saturating_sub(last_read.unwrap_or(fetched.next.saturating_sub(1)))
                };
                if proposed && let Some(seq) = last_read {
                    st.seq = st.seq.max(seq);
                }
            }
            if !proposed {
                cursor = None;
                if !pause(&cancel, backoff).await {
                    break;
                }
                continue;
            }
            cursor = Some(fetched.next);
            if fetched.msgs.is_empty() || fetched.complete {
                let poll = if local { POLL_LOCAL } else { POLL_REMOTE };
                if !pause(&cancel, poll).await {
                    break;
                }
            }
        }
    }

    /// Proposes the copies of `msgs` (pipelined, in order) and waits for them; false when a
    /// proposal failed (the caller re-reads from the replicated position).
    async fn propose_copies(
        &self,
        ls: &LocalStream,
        plan: &CopyPlan,
        msgs: &[jetraft_storage::stream::StoredMsg],
    ) -> bool {
        let mut answers = Vec::with_capacity(msgs.len());
        for m in msgs {
            let Some(cmd) = plan.command(m) else {
                continue;
            };
            match self.registry.submit(ls.group(), cmd).await {
                Ok(answer) => answers.push(answer),
                Err(e) => {
                    debug!(stream = %ls.name, error = %e, "copy proposal refused");
                    return false;
                }
            }
        }
        for answer in answers {
            match answer.await {
                Ok(ack) if ack.windows(8).any(|w| w == b"\"error\":") => {
                    // Refused by the stream (limits, size): nats-server skips it too.
                    debug!(stream = %ls.name, ack = %String::from_utf8_lossy(&ack), "copy refused");
                }
                Ok(_) => {}
                Err(e) => {
                    debug!(stream = %ls.name, error = %e, "copy proposal failed");
                    return false;
                }
            }
        }
        true
    }

    /// Fills `info.mirror`/`info.sources` with the live state of this node's copy tasks (the
    /// leader's; other nodes keep the idle defaults).
    pub(super) fn decorate_sources(&self, ls: &LocalStream, info: &mut StreamInfo) {
        let run = ls.sourcing.lock();
        let Some(run) = run.as_ref() else {
            return;
        };
        let targets: Vec<&mut crate::jetstream::api::types::StreamSourceInfo> = if run.mirror {
            info.mirror.iter_mut().collect()
        } else {
            info.sources.iter_mut().collect()
        };
        for (target, status) in targets.into_iter().zip(&run.status) {
            let st = status.lock();
            target.lag = st.lag;
            if !run.mirror {
                target.seq = st.seq;
            }
            target.active = st.active_at.map_or(-1, |t| {
                i64::try_from(t.elapsed().as_nanos()).unwrap_or(i64::MAX)
            });
            target.error = st.error.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_appended_to_existing_or_new_blocks() {
        assert_eq!(
            with_header(b"", "A", "1"),
            Bytes::from_static(b"NATS/1.0\r\nA: 1\r\n\r\n")
        );
        assert_eq!(
            with_header(b"NATS/1.0\r\nX: 1\r\n\r\n", "A", "1"),
            Bytes::from_static(b"NATS/1.0\r\nX: 1\r\nA: 1\r\n\r\n")
        );
    }

    #[test]
    fn source_keys_differ_by_filter_and_transform() {
        let a = StreamSource {
            name: "O".into(),
            filter_subject: "a".into(),
            ..StreamSource::default()
        };
        let b = StreamSource {
            name: "O".into(),
            filter_subject: "b".into(),
            ..StreamSource::default()
        };
        assert_ne!(source_key(&a), source_key(&b));
        assert_eq!(key_id(&source_key(&a)), key_id(&source_key(&a)));
        assert_eq!(key_id("x").len(), 8);
    }
}
