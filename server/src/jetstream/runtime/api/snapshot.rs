//! `$JS.API.STREAM.SNAPSHOT.<stream>` on the stream's leader, as nats-server answers it: the
//! response (config and state) first, then the backup in chunks to `deliver_subject`.
//!
//! Flow control: each full chunk carries a reply subject
//! `$JS.SNAPSHOT.ACK.<stream>.<id>.<chunk bytes>.<index>`; the client publishes anything there
//! to acknowledge it, and at most `window / chunk` chunks are unacknowledged at a time. The last
//! (short) chunk has no reply subject. The end is an empty message: with the header
//! `NATS/1.0 204` once any full chunk went out (a backup shorter than one chunk ends with an
//! empty message without headers, as on nats-server), `408 No Flow Response` when no ack came
//! for 5 s, `408 No Interest` when the receiver left, `500 <reason>` when the store failed.
//!
//! Consistency: the state, the consumers and the last sequence are read at one applied point
//! (under the state machine lock); the messages are then read in batches up to that last
//! sequence while publishes go on, so the backup holds the stream as of that point for
//! everything appended since. As on nats-server, a message removed while the backup is being
//! read (a delete or a limit) is missing from it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jetraft_storage::consumer::ConsumerState;

use crate::bus::Msg;
use crate::bus::cluster_sub::ClusterSub;
use crate::bus::internal::InternalMsg;
use crate::jetstream::account;
use crate::jetstream::api::types::info::StreamStateInfo;
use crate::jetstream::api::types::requests::{BodyRule, parse_body};
use crate::jetstream::api::types::to_go_json;
use crate::jetstream::api::validate::with_response_metadata;
use crate::jetstream::api::{ApiError, ErrorKind};
use crate::jetstream::backup::archive::ArchiveWriter;
use crate::jetstream::backup::s2::Encoder;
use crate::jetstream::backup::{ConsumerEntry, SnapshotRequest, WireConsumerState};
use crate::jetstream::runtime::advisory::random_id;
use crate::jetstream::runtime::replica::LocalStream;
use crate::jetstream::runtime::{JetStream, now_ns};
use crate::router::subject::is_valid_literal_subject;

/// The response type of a snapshot request.
pub(super) const SNAPSHOT_RESPONSE: &str = "io.nats.jetstream.api.v1.stream_snapshot_response";
/// How long the stream waits for an acknowledgement before giving up (nats-server's).
const ACK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the stream waits for the receiver to subscribe (clients subscribe after the
/// response).
const INTEREST_WAIT: Duration = Duration::from_secs(2);
/// Messages read from the store per lock.
const READ_BATCH: usize = 512;
/// Bytes read from the store per lock.
const READ_BATCH_BYTES: usize = 1 << 20;

/// What the backup holds, read at one applied point.
struct Point {
    /// The response JSON.
    response: String,
    /// The archive's beginning (state and consumers), not yet compressed.
    head: Vec<u8>,
    /// The first message sequence to read.
    first_seq: u64,
    /// The last message sequence the backup holds.
    last_seq: u64,
}

/// How a backup's streaming ended.
enum End {
    /// Everything was sent; whether any chunk had a reply subject.
    Done(bool),
    /// Stopped with this status line (`408 No Flow Response`, ...).
    Failed(String),
}

impl JetStream {
    /// Checks the request, answers it and starts streaming the backup.
    pub(super) async fn stream_snapshot(
        self: &Arc<Self>,
        name: &str,
        msg: &InternalMsg,
    ) -> Result<(), ApiError> {
        let req: SnapshotRequest =
            parse_body(BodyRule::Required, &msg.payload)?.ok_or_else(ApiError::bad_request)?;
        let ls = self
            .local_stream(name)
            .ok_or_else(ApiError::stream_not_found)?;
        if !is_valid_literal_subject(&req.deliver_subject) {
            return Err(ApiError::new(ErrorKind::SnapshotDeliverSubjectInvalid));
        }
        let mut live = BTreeMap::new();
        if !req.no_consumers {
            let names: Vec<String> = ls.sm.lock().consumers().keys().cloned().collect();
            for name in names {
                // The engine's state includes deliveries and acks still being replicated.
                if let Some(view) = self.engine_view(&ls, &name).await {
                    live.insert(name, view.state);
                }
            }
        }
        let point = self.snapshot_point(&ls, !req.no_consumers, &live);
        self.reply(msg, &point.response);
        let start = now_ns();
        if let Ok(resp) = serde_json::from_str::<serde_json::Value>(&point.response) {
            self.advise_snapshot_create(name, resp["state"].clone());
        }
        let js = self.clone();
        self.tasks.spawn(async move {
            let name = ls.name.clone();
            let end = js.send_backup(&ls, &req, point).await;
            let (hdr, outcome) = match end {
                End::Done(true) => (Some("NATS/1.0 204\r\n\r\n".to_string()), None),
                End::Done(false) => (None, None),
                End::Failed(status) => (Some(format!("NATS/1.0 {status}\r\n\r\n")), Some(status)),
            };
            let eof = Msg::new(&req.deliver_subject, b"")
                .headers(hdr.as_deref().map(str::as_bytes))
                .in_account(account::stream_account(&name));
            js.bus.publish(&eof);
            js.advise_snapshot_complete(&name, start, outcome.as_deref());
            match outcome {
                None => tracing::info!(stream = %name, "snapshot completed"),
                Some(status) => tracing::warn!(stream = %name, %status, "snapshot failed"),
            }
        });
        Ok(())
    }

    /// Reads the response, the state and the consumers at one applied point (a consumer's
    /// state from `live` when its engine runs here).
    fn snapshot_point(
        &self,
        ls: &LocalStream,
        with_consumers: bool,
        live: &BTreeMap<String, ConsumerState>,
    ) -> Point {
        let now = i64::try_from(now_ns()).unwrap_or(i64::MAX);
        let sm = ls.sm.lock();
        let st = sm.state();
        let cfg =
            with_response_metadata(sm.config(), &self.identity.version, self.identity.api_level);
        let mut state = StreamStateInfo::from_store(&st, sm.consumer_count());
        state.num_deleted = st.num_deleted();
        let response = format!(
            "{{\"type\":\"{SNAPSHOT_RESPONSE}\",\"config\":{},\"state\":{}}}",
            to_go_json(&cfg),
            to_go_json(&state)
        );
        let mut archive = ArchiveWriter::new();
        let consumers: Vec<(String, Vec<u8>)> = if with_consumers {
            sm.consumers()
                .iter()
                .map(|(name, rec)| {
                    let entry = ConsumerEntry {
                        config: serde_json::from_str(&to_go_json(&rec.config)).unwrap_or_default(),
                        state: WireConsumerState::from_state(
                            live.get(name).unwrap_or(&rec.state),
                            st.last_seq,
                        ),
                    };
                    (name.clone(), to_go_json(&entry).into_bytes())
                })
                .collect()
        } else {
            Vec::new()
        };
        state.consumer_count = consumers.len() as u64;
        archive.state(to_go_json(&state).as_bytes(), now);
        for (name, json) in &consumers {
            archive.consumer(name, json, now);
        }
        Point {
            response,
            head: archive.take(),
            first_seq: st.first_seq,
            last_seq: st.last_seq,
        }
    }

    /// Streams the backup to the receiver with flow control.
    async fn send_backup(&self, ls: &LocalStream, req: &SnapshotRequest, point: Point) -> End {
        let (chunk, window) = req.flow();
        // The receiver and its acks are in the stream's account.
        let acc = account::stream_account(&ls.name);
        let ack_subject = format!(
            "$JS.SNAPSHOT.ACK.{}.{}",
            account::stream_name(&ls.name),
            random_id()
        );
        let Ok(mut acks) = ClusterSub::new_in(&self.bus, acc, &format!("{ack_subject}.>")) else {
            return End::Failed("500 ack subscription failed".to_string());
        };
        let deliver = req.deliver_subject.as_str();
        self.wait_for_receiver(acc, deliver).await;
        let mut sender = ChunkSender {
            js: self,
            account: acc,
            deliver,
            ack_subject,
            chunk,
            slots: window,
            index: 1,
        };
        let mut enc = Encoder::new();
        enc.write(&point.head);
        let mut next = point.first_seq.max(1);
        let mut out = Vec::new();
        while next <= point.last_seq {
            let batch = {
                let sm = ls.sm.lock();
                sm.store()
                    .next_matching_batch(next, &[], READ_BATCH, READ_BATCH_BYTES)
            };
            let batch = match batch {
                Ok(b) => b,
                Err(e) => return End::Failed(format!("500 {e}")),
            };
            let mut archive = ArchiveWriter::default();
            let mut any = false;
            for m in batch.iter().take_while(|m| m.seq <= point.last_seq) {
                let ts = i64::try_from(m.timestamp_ns).unwrap_or(i64::MAX);
                archive.msg(m.seq, &m.subject, &m.headers, &m.payload, ts);
                next = m.seq + 1;
                any = true;
            }
            if !any {
                break;
            }
            enc.write(&archive.take());
            out.extend_from_slice(&enc.take());
            if let Err(end) = sender.send_full(&mut out, &mut acks).await {
                return end;
            }
        }
        let mut archive = ArchiveWriter::default();
        archive.end();
        enc.write(&archive.take());
        out.extend_from_slice(&enc.finish());
        if let Err(end) = sender.send_full(&mut out, &mut acks).await {
            return end;
        }
        if !out.is_empty() {
            self.bus.publish(&Msg::new(deliver, &out).in_account(acc));
        }
        End::Done(sender.index > 1)
    }

    /// Waits (bounded) until someone listens on `subject` in `account`.
    async fn wait_for_receiver(&self, account: &str, subject: &str) {
        let deadline = tokio::time::Instant::now() + INTEREST_WAIT;
        while !self.bus.has_interest_in(account, subject) && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Sends full chunks under the flow-control window.
struct ChunkSender<'a> {
    js: &'a JetStream,
    /// The stream's account, where the receiver is.
    account: &'a str,
    deliver: &'a str,
    ack_subject: String,
    chunk: usize,
    /// Chunks that may still be sent before an acknowledgement.
    slots: usize,
    /// Index of the next chunk (from 1).
    index: u64,
}

impl ChunkSender<'_> {
    /// Sends every full chunk at the front of `out`, waiting for acks when the window is full.
    async fn send_full(&mut self, out: &mut Vec<u8>, acks: &mut ClusterSub) -> Result<(), End> {
        let mut at = 0;
        while out.len() - at >= self.chunk {
            while let Some(_ack) = acks.try_recv() {
                self.slots += 1;
            }
            if self.slots == 0 {
                match tokio::time::timeout(ACK_TIMEOUT, acks.recv()).await {
                    Ok(Some(_)) => self.slots += 1,
                    Ok(None) | Err(_) => {
                        return Err(End::Failed("408 No Flow Response".to_string()));
                    }
                }
                continue;
            }
            if !self.js.bus.has_interest_in(self.account, self.deliver) {
                return Err(End::Failed("408 No Interest".to_string()));
            }
            let piece = &out[at..at + self.chunk];
            let reply = format!("{}.{}.{}", self.ack_subject, piece.len(), self.index);
            self.js.bus.publish(
                &Msg::new(self.deliver, piece)
                    .reply_str(Some(&reply))
                    .in_account(self.account),
            );
            self.slots -= 1;
            self.index += 1;
            at += self.chunk;
        }
        out.drain(..at);
        Ok(())
    }
}
