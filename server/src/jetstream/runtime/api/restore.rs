//! `$JS.API.STREAM.RESTORE.<stream>` on the meta leader, as nats-server answers it: the config
//! is checked, a stream of that name must not exist (`10130`), and the answer names a deliver
//! subject (`$JS.SNAPSHOT.RESTORE.<stream>.<id>`). The client sends the backup there in chunks,
//! each as a request answered with an empty message, then an empty chunk; that last request is
//! answered with a `stream_create_response` (the restored stream's info) or a `10062 restore
//! failed: <reason>`. A corrupt chunk is refused at once (`10062` to that chunk); no chunk for
//! 5 s abandons the restore.
//!
//! Restoring (jetraft): the backup is decompressed as it arrives and held in memory (the
//! messages are slices of it), then checked whole (S2 checksums, archive structure, consumer
//! configs) before anything is created. The stream is
//! then created through the meta group with its replicas (R1 or R3 as configured), this node
//! among them, but without its subjects, so nothing is captured for it yet; this node becomes
//! its leader and proposes the backup as `Restore` entries (messages at their sequences and
//! times, then the position and the consumers), so every replica applies it through Raft and a
//! quorum holds it durably (and, unless one is down for more than 10 s, every replica) before
//! the answer. Only then does a meta update give the stream its subjects. A restore that fails
//! after the create deletes the stream again.

use std::sync::Arc;
use std::time::Duration;

use jetraft_proto::meta::meta_command;
use jetraft_proto::stream::{
    ConsumerSnapshot, Restore, SnapshotMsg, StreamCommand, stream_command::Cmd,
};
use prost::Message;

use super::meta_answer;
use crate::bus::Msg;
use crate::bus::cluster_sub::ClusterSub;
use crate::bus::internal::InternalMsg;
use crate::jetstream::account;
use crate::jetstream::api::types::consumer::ConsumerConfig;
use crate::jetstream::api::types::requests::{BodyRule, decode, parse_body};
use crate::jetstream::api::types::responses::error_json;
use crate::jetstream::api::types::{StreamConfig, go_time, response_type, to_go_json};
use crate::jetstream::api::validate::{CreateOutcome, ValidationContext, check_create};
use crate::jetstream::api::{ApiError, ErrorKind};
use crate::jetstream::backup::archive::{self, Archive};
use crate::jetstream::backup::s2::Decoder;
use crate::jetstream::backup::{BackupState, ConsumerEntry, RestoreRequest};
use crate::jetstream::op::ApiOp;
use crate::jetstream::runtime::advisory::random_id;
use crate::jetstream::runtime::{JetStream, now_ns};
use crate::jetstream::stream::RESTORED;

/// The response type of a restore request.
pub(super) const RESTORE_RESPONSE: &str = "io.nats.jetstream.api.v1.stream_restore_response";
/// A restore with no chunk for this long is abandoned (nats-server's).
const STALL: Duration = Duration::from_secs(5);
/// Most messages per `Restore` entry.
const BATCH_MSGS: usize = 1024;
/// Most message bytes per `Restore` entry.
const BATCH_BYTES: usize = 1 << 20;
/// How long the restore waits for the new stream's replica and leadership here.
const LEAD_WAIT: Duration = Duration::from_secs(10);
/// How long the answer waits for every replica (not only a quorum) to hold the data.
const ALL_REPLICAS_WAIT: Duration = Duration::from_secs(10);

/// `restore failed: <why>`.
fn failed(why: &str) -> ApiError {
    ApiError::with_err(ErrorKind::StreamRestore, why)
}

/// A backup checked and ready to propose.
struct Checked {
    state: BackupState,
    archive: Archive,
    consumers: Vec<ConsumerSnapshot>,
}

impl JetStream {
    /// Checks the request, answers with the deliver subject and starts receiving the backup.
    pub(super) fn stream_restore(
        self: &Arc<Self>,
        key: &str,
        msg: &InternalMsg,
    ) -> Result<(), ApiError> {
        // The stream is restored into the account the request was made in.
        let (acc, name) = (account::stream_account(key), account::stream_name(key));
        let req: RestoreRequest =
            parse_body(BodyRule::Required, &msg.payload)?.ok_or_else(ApiError::bad_request)?;
        let mut config = req.config;
        if config
            .get("name")
            .and_then(|n| n.as_str())
            .is_none_or(str::is_empty)
            && let Some(obj) = config.as_object_mut()
        {
            obj.insert("name".into(), name.into());
        }
        let cfg: StreamConfig = decode(config.to_string().as_bytes())?;
        if cfg.name != name {
            return Err(ApiError::new(ErrorKind::StreamMismatch));
        }
        if name.contains(['/', '\\']) {
            return Err(ApiError::new(ErrorKind::StreamNameContainsPathSeparators));
        }
        let others = self.other_streams(key);
        let ctx = ValidationContext {
            clustered: self.clustered(),
            cluster_size: self.voters().len(),
            other_streams: &others,
            max_bytes: self.max_bytes_limits(key),
        };
        let CreateOutcome::Create(cfg) = check_create(name, cfg, None, &ctx)? else {
            return Err(ApiError::new(ErrorKind::StreamNameExistRestoreFailed));
        };
        // The account's limits before the name, as nats-server checks them.
        self.check_stream_limits(key, &cfg, false)?;
        if self.existing_config(key).is_some() {
            return Err(ApiError::new(ErrorKind::StreamNameExistRestoreFailed));
        }
        let deliver = format!("$JS.SNAPSHOT.RESTORE.{name}.{}", random_id());
        let chunks = ClusterSub::new_in(&self.bus, acc, &deliver).map_err(|e| {
            ApiError::with(
                ErrorKind::RestoreSubscribeFailed,
                &[("subject", &deliver), ("err", &e.to_string())],
            )
        })?;
        let answer = format!(
            "{{\"type\":\"{RESTORE_RESPONSE}\",\"deliver_subject\":{}}}",
            serde_json::Value::from(deliver.as_str())
        );
        self.reply(msg, &answer);
        self.advise_restore_create(key);
        let js = self.clone();
        let key = key.to_string();
        self.tasks
            .spawn(async move { js.receive_backup(key, *cfg, chunks).await });
        Ok(())
    }

    /// Takes the chunks until the empty one, then restores and answers it.
    async fn receive_backup(
        self: Arc<Self>,
        key: String,
        cfg: StreamConfig,
        mut chunks: ClusterSub,
    ) {
        let (acc, name) = (account::stream_account(&key), key.as_str());
        let start = now_ns();
        let mut received = 0u64;
        let mut decoder = Decoder::new();
        let mut plain = Vec::new();
        let last_reply = loop {
            let Ok(Some(chunk)) = tokio::time::timeout(STALL, chunks.recv()).await else {
                tracing::warn!(stream = %name, "restore stalled: abandoned");
                return;
            };
            let Some(reply) = chunk.reply else {
                tracing::warn!(stream = %name, "restore chunk without reply subject: abandoned");
                return;
            };
            if chunk.payload.is_empty() {
                break reply;
            }
            received += chunk.payload.len() as u64;
            if let Err(e) = decoder.feed(&chunk.payload, &mut plain) {
                self.send_create_answer(acc, &reply, Err(failed(&e.to_string())));
                return;
            }
            self.bus.publish(&Msg::new(&reply, b"").in_account(acc));
        };
        drop(chunks);
        let result = match check_backup(&decoder, plain.into()) {
            Ok(checked) => self.restore_checked(name, &cfg, checked).await,
            Err(e) => Err(e),
        };
        self.advise_restore_complete(name, start, received);
        match &result {
            Ok(_) => tracing::info!(stream = %name, "restore completed"),
            Err(e) => tracing::warn!(stream = %name, error = %e, "restore failed"),
        }
        self.send_create_answer(acc, &last_reply, result);
    }

    fn send_create_answer(&self, account: &str, reply: &str, result: Result<String, ApiError>) {
        let json = result.unwrap_or_else(|e| error_json(response_type::STREAM_CREATE, e));
        self.bus
            .publish(&Msg::new(reply, json.as_bytes()).in_account(account));
    }

    /// Creates the stream with key `name`, proposes the backup into it and opens it to
    /// publishes.
    async fn restore_checked(
        &self,
        name: &str,
        cfg: &StreamConfig,
        b: Checked,
    ) -> Result<String, ApiError> {
        if self.existing_config(name).is_some() {
            return Err(ApiError::new(ErrorKind::StreamNameExistRestoreFailed));
        }
        let replicas = usize::try_from(cfg.num_replicas.max(1)).unwrap_or(1);
        let candidates = self.voters();
        let Some(mut placed) = self.meta.read(|m| m.place(replicas, &candidates)) else {
            return Err(ApiError::new(ErrorKind::InsufficientResources));
        };
        // This node leads the restore: it must be one of the replicas.
        placed.retain(|n| *n != self.node.0);
        placed.insert(0, self.node.0);
        placed.truncate(replicas);
        let sa = jetraft_proto::meta::StreamAssignment {
            name: name.to_string(),
            uid: 0,
            config_json: to_go_json(cfg).into_bytes().into(),
            replicas: placed,
            created_ns: i64::try_from(now_ns()).unwrap_or(i64::MAX),
            subjects: Vec::new(),
            joining: Vec::new(),
            revision: 0,
        };
        let created = meta_answer(
            self.propose_meta(meta_command::Op::CreateStream(sa))
                .await?,
        )?
        .ok_or_else(|| failed("stream was not created"))?;
        let outcome = self.fill(name, cfg, &b).await;
        if let Err(e) = outcome {
            let _ = self
                .propose_meta(meta_command::Op::DeleteStream(name.to_string()))
                .await;
            return Err(e);
        }
        let opened = jetraft_proto::meta::StreamAssignment {
            subjects: cfg.subjects.clone(),
            ..created
        };
        meta_answer(
            self.propose_meta(meta_command::Op::UpdateStream(opened))
                .await?,
        )?;
        let ls = self
            .local_stream(name)
            .ok_or_else(|| failed("stream replica not found"))?;
        let json = crate::jetstream::stream::info::create_response_json(&ls.sm.lock(), now_ns());
        self.wait_in_force(&ApiOp::StreamCreate(name.to_string()), json.as_bytes())
            .await;
        Ok(json)
    }

    /// Leads the new stream's group (key `name`) and proposes the backup into it.
    async fn fill(&self, name: &str, cfg: &StreamConfig, b: &Checked) -> Result<(), ApiError> {
        let deadline = tokio::time::Instant::now() + LEAD_WAIT;
        let ls = loop {
            if let Some(ls) = self.local_stream(name) {
                break ls;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(failed("stream replica did not start"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let group = ls.group();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.wait_group_leader(group, left).await {
                Some(l) if l == self.node => break,
                Some(_) if !left.is_zero() => {
                    let _ = self.registry.transfer_leadership(group, self.node).await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                _ => return Err(failed("no leader for the restored stream")),
            }
        }
        let last_ts = go_time::parse(&b.state.last_ts).unwrap_or(0);
        let mut parts = batches(&b.archive);
        if parts.is_empty() {
            parts.push(Vec::new());
        }
        let count = parts.len();
        for (i, msgs) in parts.into_iter().enumerate() {
            let last = i + 1 == count;
            let restore = Restore {
                msgs,
                last,
                first_seq: b.state.first_seq,
                last_seq: b.state.last_seq,
                last_ts,
                consumers: if last {
                    b.consumers.clone()
                } else {
                    Vec::new()
                },
            };
            let cmd = StreamCommand {
                cmd: Some(Cmd::Restore(restore)),
            };
            let answer = self
                .registry
                .propose(group, cmd.encode_to_vec().into())
                .await
                .map_err(|e| failed(&e.to_string()))?;
            if answer.as_ref() != RESTORED.as_bytes() {
                return Err(failed(&String::from_utf8_lossy(&answer)));
            }
        }
        self.wait_all_replicas(group, cfg.num_replicas).await;
        Ok(())
    }

    /// Waits (bounded) until every replica of `group` acknowledged the whole log, i.e. holds
    /// the restored data durably; a quorum already does, so a replica that is down only delays
    /// the answer by [`ALL_REPLICAS_WAIT`].
    async fn wait_all_replicas(&self, group: jetraft_raft::GroupId, replicas: i64) {
        let others = usize::try_from(replicas.max(1) - 1).unwrap_or(0);
        let deadline = tokio::time::Instant::now() + ALL_REPLICAS_WAIT;
        loop {
            let caught_up = self
                .registry
                .followers(group)
                .is_ok_and(|f| f.len() >= others && f.iter().all(|p| p.lag == 0));
            if caught_up || tokio::time::Instant::now() >= deadline {
                if !caught_up {
                    tracing::warn!(%group, "restore answered with a replica still catching up");
                }
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The archive's messages as `Restore` entries' worth of messages.
fn batches(a: &Archive) -> Vec<Vec<SnapshotMsg>> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    let mut bytes = 0;
    for m in &a.msgs {
        let size = m.subject.len() + m.headers.len() + m.payload.len();
        if !cur.is_empty() && (cur.len() == BATCH_MSGS || bytes + size > BATCH_BYTES) {
            out.push(std::mem::take(&mut cur));
            bytes = 0;
        }
        bytes += size;
        cur.push(SnapshotMsg {
            seq: m.seq,
            subject: m.subject.clone(),
            headers: m.headers.clone(),
            payload: m.payload.clone(),
            timestamp_ns: u64::try_from(m.timestamp_ns).unwrap_or(0),
        });
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Checks a whole backup: complete S2 stream, archive structure, state and consumers.
fn check_backup(decoder: &Decoder, plain: bytes::Bytes) -> Result<Checked, ApiError> {
    if !decoder.at_boundary() {
        return Err(failed("backup was truncated"));
    }
    let archive = archive::parse(&plain).map_err(|e| failed(&e.to_string()))?;
    let state: BackupState = serde_json::from_slice(&archive.state_json)
        .map_err(|e| failed(&format!("error in state.json: {e}")))?;
    if archive.consumers.len() as u64 != state.consumer_count {
        return Err(failed("consumer count does not match the backup"));
    }
    if archive.msgs.iter().any(|m| m.seq > state.last_seq) {
        return Err(failed("message sequence past the backup's last sequence"));
    }
    let created_ns = now_ns();
    let mut consumers = Vec::with_capacity(archive.consumers.len());
    for (name, json) in &archive.consumers {
        let entry: ConsumerEntry = serde_json::from_slice(json)
            .map_err(|e| failed(&format!("failed to decode consumer {name:?} state: {e}")))?;
        let config: ConsumerConfig = serde_json::from_value(entry.config)
            .map_err(|e| failed(&format!("failed to decode consumer {name:?} config: {e}")))?;
        consumers.push(ConsumerSnapshot {
            name: name.clone(),
            config_json: to_go_json(&config).into_bytes().into(),
            created_ns,
            state: jetraft_storage::consumer::codec::encode(&entry.state.to_state()).into(),
            lps_end: 0,
        });
    }
    Ok(Checked {
        state,
        archive,
        consumers,
    })
}
