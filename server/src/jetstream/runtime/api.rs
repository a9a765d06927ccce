//! The `$JS.API` request loop: parse the operation, find the node that owns the answer, answer
//! here or forward there.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use jetraft_proto::meta::{MetaCommand, MetaResult, StreamAssignment, meta_command, meta_result};
use jetraft_raft::{GroupId, NodeId, RaftError};
use prost::Message;
use tracing::debug;

use super::dispatch::{self, Facts, Route, StreamFacts};
use super::in_force;
use super::replica::LocalStream;
use super::{JetStream, next_msg, now_ns};
use crate::bus::Msg;
use crate::bus::internal::{InternalMsg, InternalSub};
use crate::jetstream::api::types::requests::{
    BodyRule, MsgDeleteRequest, MsgGetRequest, PurgeRequest, StreamInfoRequest, StreamNamesRequest,
    parse_body,
};
use crate::jetstream::api::types::responses::{
    ApiResponse, StreamCreateBody, error_json, names_page,
};
use crate::jetstream::api::types::{
    AccountInfo, ClusterInfo, StreamConfig, StreamInfo, StreamSourceInfo, StreamStateInfo, go_time,
    response_type,
};
use crate::jetstream::api::validate::{
    CreateOutcome, ValidationContext, check_create, check_update, with_response_metadata,
};
use crate::jetstream::api::{ApiError, ErrorKind};
use crate::jetstream::op::{ApiOp, Owner};
use crate::jetstream::stream::{command, info};

/// How long STREAM.LIST waits for the info of a stream led by another node.
const REMOTE_INFO_WAIT: Duration = Duration::from_secs(2);

/// A follower that has not acknowledged the stream leader for this long is reported offline.
const OFFLINE_AFTER: Duration = Duration::from_secs(10);

/// How long a request waits for the meta group to elect a leader (start-up, failover).
const META_LEADER_WAIT: Duration = Duration::from_secs(3);
/// How long a request waits for its stream group to elect a leader.
const STREAM_LEADER_WAIT: Duration = Duration::from_secs(2);

/// How long a create waits for the new stream's group to elect a leader before answering.
const CREATE_LEADER_WAIT: Duration = Duration::from_secs(5);
/// How long a leader that has not applied its predecessors' entries yet holds an API request
/// back (see `JetStream::wait_leader_caught_up`).
const LEADER_CATCH_UP_WAIT: Duration = Duration::from_secs(5);

/// The response `type` of an operation.
fn kind(op: &ApiOp) -> &'static str {
    match op {
        ApiOp::AccountInfo => response_type::ACCOUNT_INFO,
        ApiOp::StreamCreate(_) => response_type::STREAM_CREATE,
        ApiOp::StreamUpdate(_) => response_type::STREAM_UPDATE,
        ApiOp::StreamInfo(_) => response_type::STREAM_INFO,
        ApiOp::StreamDelete(_) => response_type::STREAM_DELETE,
        ApiOp::StreamNames => response_type::STREAM_NAMES,
        ApiOp::StreamList => response_type::STREAM_LIST,
        ApiOp::StreamPurge(_) => response_type::STREAM_PURGE,
        ApiOp::MsgGet(_) => response_type::STREAM_MSG_GET,
        ApiOp::MsgDelete(_) => response_type::STREAM_MSG_DELETE,
        ApiOp::StreamLeaderStepdown(_) => response_type::STREAM_LEADER_STEPDOWN,
        ApiOp::MetaLeaderStepdown => "io.nats.jetstream.api.v1.meta_leader_stepdown_response",
        ApiOp::StreamPeerRemove(_) => "io.nats.jetstream.api.v1.stream_remove_peer_response",
        ApiOp::DirectGet(_) | ApiOp::DirectGetLast(..) | ApiOp::ConsumerNext(..) => {
            response_type::SYSTEM
        }
        ApiOp::ConsumerCreate(..) => response_type::CONSUMER_CREATE,
        ApiOp::ConsumerInfo(..) => response_type::CONSUMER_INFO,
        ApiOp::ConsumerDelete(..) => response_type::CONSUMER_DELETE,
        ApiOp::ConsumerNames(_) => response_type::CONSUMER_NAMES,
        ApiOp::ConsumerList(_) => response_type::CONSUMER_LIST,
        ApiOp::ConsumerPause(..) => response_type::CONSUMER_PAUSE,
        ApiOp::ConsumerLeaderStepdown(..) => response_type::CONSUMER_LEADER_STEPDOWN,
    }
}

impl JetStream {
    pub(super) async fn api_loop(self: Arc<Self>, mut sub: InternalSub) {
        loop {
            let Some(msg) = next_msg(&mut sub, &self.cancel).await else {
                break;
            };
            let js = self.clone();
            self.tasks.spawn(async move { js.handle_api(msg, 0).await });
        }
    }

    pub(super) fn reply(&self, msg: &InternalMsg, json: &str) {
        if let Some(reply) = &msg.reply {
            // A node asking for itself (`remote`) waits in its forward inbox, which has no
            // routed interest: the answer goes straight to it.
            if let Some(node) = super::remote::inbox_node(reply)
                && node != self.node.0
            {
                self.bus
                    .send_to_node(NodeId(node), &Msg::new(reply, json.as_bytes()));
                return;
            }
            self.bus.publish(&Msg::new(reply, json.as_bytes()));
        }
    }

    fn reply_error(&self, msg: &InternalMsg, op: &ApiOp, error: ApiError) {
        self.api_errors.fetch_add(1, Ordering::Relaxed);
        debug!(subject = %msg.subject, error = %error, "API request refused");
        let json = match op {
            ApiOp::StreamInfo(_) => info::info_error_json(error),
            _ => error_json(kind(op), error),
        };
        self.reply(msg, &json);
    }

    /// Answers (or forwards) one API request; `hops` counts forwards so far. Where it is
    /// answered is [`dispatch::route`]'s decision over what this node knows; this carries it
    /// out, waiting at most once for an election.
    pub(super) async fn handle_api(self: Arc<Self>, msg: InternalMsg, hops: u32) {
        let Some(op) = ApiOp::parse(&msg.subject) else {
            return;
        };
        if hops == 0 {
            self.api_total.fetch_add(1, Ordering::Relaxed);
        }
        let relays = in_force::holds_answer(&op);
        let mut waited = false;
        let route = loop {
            let facts = self.dispatch_facts(&op, hops, waited);
            match dispatch::route(&op, &facts, relays) {
                Route::WaitForLeader(group) if !waited => {
                    let (group, bound) = match group {
                        None => (GroupId::META, META_LEADER_WAIT),
                        Some(g) => (g, STREAM_LEADER_WAIT),
                    };
                    self.wait_group_leader(group, bound).await;
                    waited = true;
                }
                route => break route,
            }
        };
        let name = op.stream().unwrap_or_default();
        match route {
            Route::AsLeader(group) => self.answer_as_leader(&op, &msg, hops, group).await,
            Route::FromReplica(group) => {
                // Any replica may answer, but the leader not before it caught up (a
                // follower's answer may lag, as on nats-server).
                self.wait_leader_caught_up(group, LEADER_CATCH_UP_WAIT)
                    .await;
                let local = self.local_stream(name);
                match (&op, local) {
                    (ApiOp::DirectGet(_), Some(local)) => {
                        self.direct_get_from(&local, None, &msg, Some(hops));
                    }
                    (ApiOp::DirectGetLast(_, subject), Some(local)) => {
                        self.direct_get_from(&local, Some(subject), &msg, Some(hops));
                    }
                    _ => self.answer_here(&op, &msg).await,
                }
            }
            Route::FromMirror => {
                if let Some(mirror) = self.local_direct_mirror(name) {
                    let last = match &op {
                        ApiOp::DirectGetLast(_, subject) => Some(subject.as_str()),
                        _ => None,
                    };
                    self.direct_get_from(&mirror, last, &msg, None);
                }
            }
            Route::RelayInForce(leader) => {
                if !self.relay_in_force(leader, &op, &msg).await {
                    self.reply_error(&msg, &op, ApiError::new(ErrorKind::ClusterNotAvail));
                }
            }
            Route::Forward(node) => {
                if !self.forward_to(node, hops, &msg) {
                    self.reply_error(&msg, &op, ApiError::new(ErrorKind::ClusterNotAvail));
                }
            }
            Route::PullForUnknownStream => {
                if let ApiOp::ConsumerNext(s, c) = &op {
                    self.consumer_next(s, c, &msg);
                }
            }
            Route::Ignore | Route::WaitForLeader(_) => {}
            Route::Refuse(error) => self.reply_error(&msg, &op, error),
        }
    }

    /// What [`dispatch::route`] needs to know about `op`'s owner, as this node sees it now.
    fn dispatch_facts(&self, op: &ApiOp, hops: u32, waited: bool) -> Facts {
        let mut facts = Facts {
            node: self.node,
            hops,
            meta_leader: None,
            stream: None,
            direct_mirror: false,
            waited,
        };
        match op.owner() {
            Owner::MetaLeader => facts.meta_leader = self.meta_leader(),
            Owner::StreamLeader | Owner::AnyReplica => {
                let name = op.stream().unwrap_or_default();
                let local = self.local_stream(name);
                if matches!(op, ApiOp::DirectGet(_) | ApiOp::DirectGetLast(..)) && local.is_none() {
                    facts.direct_mirror = self.local_direct_mirror(name).is_some();
                }
                let replicas = self
                    .meta
                    .read(|m| m.stream(name).map(|s| s.replicas.clone()));
                facts.stream = replicas.map(|replicas| {
                    let local_group = local.as_ref().map(|l| l.group());
                    StreamFacts {
                        replicas: replicas.into_iter().map(NodeId).collect(),
                        local_group,
                        leader: local_group
                            .and_then(|g| self.registry.leader(g).ok().and_then(|l| l.leader)),
                    }
                });
            }
        }
        facts
    }

    async fn answer_here(self: &Arc<Self>, op: &ApiOp, msg: &InternalMsg) {
        if let Some(result) = self.api_answer(op, msg).await {
            self.respond(msg, op, result);
        }
    }

    /// Answers a request this node owns as the leader of `group`. When the answer is "not
    /// available" because leadership moved while the request was being handled (a proposal
    /// refused as not leader), the request goes to the new leader instead, as if it had
    /// arrived a moment later (bounded by the forward hop count).
    async fn answer_as_leader(
        self: &Arc<Self>,
        op: &ApiOp,
        msg: &InternalMsg,
        hops: u32,
        group: GroupId,
    ) {
        self.wait_leader_caught_up(group, LEADER_CATCH_UP_WAIT)
            .await;
        let Some(result) = self.api_answer(op, msg).await else {
            return;
        };
        if let Err(e) = &result
            && e.err_code == ApiError::new(ErrorKind::ClusterNotAvail).err_code
            && let Some(now) = self.registry.leader(group).ok().and_then(|l| l.leader)
            && now != self.node
            && self.forward_to(now, hops, msg)
        {
            debug!(subject = %msg.subject, to = %now, "leader moved mid-request: forwarded");
            return;
        }
        if let Ok(json) = &result
            && hops == 0
            && in_force::holds_answer(op)
        {
            self.wait_in_force(op, json.as_bytes()).await;
        }
        self.respond(msg, op, result);
    }

    fn respond(&self, msg: &InternalMsg, op: &ApiOp, result: Result<String, ApiError>) {
        match result {
            Ok(json) => self.reply(msg, &json),
            Err(e) => self.reply_error(msg, op, e),
        }
    }

    /// The answer to `op`, or `None` when its handler replied itself (direct gets, pull
    /// requests).
    async fn api_answer(
        self: &Arc<Self>,
        op: &ApiOp,
        msg: &InternalMsg,
    ) -> Option<Result<String, ApiError>> {
        let result = match op {
            ApiOp::AccountInfo => Ok(self.account_info()),
            ApiOp::StreamNames => self.stream_names(msg),
            ApiOp::StreamList => self.stream_list(msg).await,
            ApiOp::StreamCreate(name) => self.stream_create(name, msg).await,
            ApiOp::StreamUpdate(name) => self.stream_update(name, msg).await,
            ApiOp::StreamDelete(name) => self.stream_delete(name, msg).await,
            ApiOp::StreamInfo(name) => self.stream_info(name, msg),
            ApiOp::StreamPurge(name) => self.stream_purge(name, msg).await,
            ApiOp::MsgGet(name) => self.msg_get(name, msg),
            ApiOp::MsgDelete(name) => self.msg_delete(name, msg).await,
            ApiOp::DirectGet(name) => {
                self.direct_get(name, None, msg);
                return None;
            }
            ApiOp::DirectGetLast(name, subject) => {
                self.direct_get(name, Some(subject), msg);
                return None;
            }
            ApiOp::StreamLeaderStepdown(name) => self.stream_stepdown(name).await,
            ApiOp::MetaLeaderStepdown => self.meta_stepdown().await,
            ApiOp::StreamPeerRemove(name) => self.stream_peer_remove(name, msg).await,
            ApiOp::ConsumerCreate(s, form) => self.consumer_create(s, form, msg).await,
            ApiOp::ConsumerInfo(s, c) => self.consumer_info_api(s, c, msg).await,
            ApiOp::ConsumerDelete(s, c) => self.consumer_delete_api(s, c).await,
            ApiOp::ConsumerNames(s) => self.consumer_names_api(s, msg),
            ApiOp::ConsumerList(s) => self.consumer_list_api(s, msg).await,
            ApiOp::ConsumerNext(s, c) => {
                self.consumer_next(s, c, msg);
                return None;
            }
            ApiOp::ConsumerPause(s, c) => self.consumer_pause_api(s, c, msg).await,
            ApiOp::ConsumerLeaderStepdown(s, c) => self.consumer_stepdown(s, c).await,
        };
        Some(result)
    }

    fn account_info(&self) -> String {
        // Usage of the replicas on this node (the meta leader answers), as `/jsz` reports it.
        let st = self.jsz_stats();
        let mut info = AccountInfo {
            streams: self.meta.read(|m| m.streams().count() as u64),
            consumers: st.consumers,
            memory: st.memory,
            storage: st.storage,
            ..AccountInfo::default()
        };
        info.api.total = st.api_total;
        info.api.errors = st.api_errors;
        // Clients gate features on it (async-nats refuses KV limit markers below level 1).
        info.api.level = st.api_level;
        crate::jetstream::api::types::to_go_json(&info)
    }

    fn other_streams(&self, name: &str) -> Vec<(String, Vec<String>)> {
        self.meta.read(|m| {
            m.streams()
                .filter(|s| s.name != name)
                .map(|s| (s.name.clone(), s.subjects.clone()))
                .collect()
        })
    }

    /// A mirror of a stream with `allow_direct` answers its direct gets too (nats-server sets
    /// `mirror_direct` at create, observed).
    fn set_mirror_direct(&self, cfg: &mut StreamConfig) {
        let Some(origin) = cfg.mirror.as_ref().map(|m| m.name.clone()) else {
            return;
        };
        let origin_direct = self
            .existing_config(&origin)
            .is_some_and(|(_, c)| c.allow_direct);
        if origin_direct {
            cfg.mirror_direct = true;
        }
    }

    fn existing_config(&self, name: &str) -> Option<(StreamAssignment, StreamConfig)> {
        let sa = self.meta.read(|m| m.stream(name).cloned())?;
        let cfg = serde_json::from_slice(&sa.config_json).ok()?;
        Some((sa, cfg))
    }

    /// The meta group's voters: the nodes streams can be placed on.
    pub(super) fn voters(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .registry
            .raft(GroupId::META)
            .map(|r| r.voter_ids().collect())
            .unwrap_or_default();
        if v.is_empty() {
            v.push(self.node.0);
        }
        v
    }

    fn cluster_size(&self) -> usize {
        self.voters().len()
    }

    /// The number of placement candidates for `replicas`; while the cluster is still forming
    /// (fewer voters than asked for) waits a moment for joining nodes.
    async fn placement_size(&self, replicas: i64) -> usize {
        let want = usize::try_from(replicas).unwrap_or(1);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        loop {
            let n = self.cluster_size();
            if n >= want || !self.clustered() || tokio::time::Instant::now() >= deadline {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(super) async fn propose_meta(&self, op: meta_command::Op) -> Result<MetaResult, ApiError> {
        let cmd = MetaCommand { op: Some(op) };
        let bytes = self
            .registry
            .propose(GroupId::META, cmd.encode_to_vec().into())
            .await
            .map_err(raft_api_error)?;
        MetaResult::decode(bytes.as_ref()).map_err(|e| ApiError::store_failed(&e.to_string()))
    }

    async fn stream_create(&self, name: &str, msg: &InternalMsg) -> Result<String, ApiError> {
        let cfg: StreamConfig =
            parse_body(BodyRule::Required, &msg.payload)?.ok_or_else(ApiError::bad_request)?;
        let mut cfg = cfg;
        self.set_mirror_direct(&mut cfg);
        let others = self.other_streams(name);
        let existing = self.existing_config(name);
        let ctx = ValidationContext {
            clustered: self.clustered(),
            cluster_size: self.placement_size(cfg.num_replicas).await,
            other_streams: &others,
        };
        let cfg = match check_create(name, cfg, existing.as_ref().map(|(_, c)| c), &ctx)? {
            CreateOutcome::Create(cfg) => cfg,
            CreateOutcome::AlreadyExists => return Ok(self.create_answer(name).await),
        };
        let candidates = self.voters();
        let replicas = usize::try_from(cfg.num_replicas.max(1)).unwrap_or(1);
        let Some(placed) = self.meta.read(|m| m.place(replicas, &candidates)) else {
            return Err(ApiError::new(ErrorKind::InsufficientResources));
        };
        let sa = StreamAssignment {
            name: name.to_string(),
            uid: 0,
            config_json: crate::jetstream::api::types::to_go_json(&cfg)
                .into_bytes()
                .into(),
            replicas: placed,
            created_ns: i64::try_from(now_ns()).unwrap_or(i64::MAX),
            subjects: cfg.subjects.clone(),
            joining: Vec::new(),
        };
        meta_answer(
            self.propose_meta(meta_command::Op::CreateStream(sa))
                .await?,
        )?;
        Ok(self.create_answer(name).await)
    }

    /// The create response: from the local replica once its group has a leader, else from the
    /// meta record with an empty state.
    async fn create_answer(&self, name: &str) -> String {
        let deadline = tokio::time::Instant::now() + CREATE_LEADER_WAIT;
        loop {
            if let Some(ls) = self.local_stream(name) {
                self.wait_group_leader(ls.group(), CREATE_LEADER_WAIT).await;
                return info::create_response_json(&ls.sm.lock(), now_ns());
            }
            let hosted_here = self.meta.read(|m| {
                m.stream(name)
                    .is_some_and(|s| s.replicas.contains(&self.node.0))
            });
            if !hosted_here || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        match self.existing_config(name) {
            Some((sa, cfg)) => {
                let info = match self.led_elsewhere(&sa, deadline).await {
                    Some(info) => info,
                    None => self.remote_info(&sa, &cfg),
                };
                let body = StreamCreateBody {
                    info,
                    did_create: true,
                };
                ApiResponse::ok(response_type::STREAM_CREATE, body).to_json()
            }
            None => error_json(response_type::STREAM_CREATE, ApiError::stream_not_found()),
        }
    }

    /// For a stream this node does not host: its info from the node of its first replica, once
    /// that node runs it with a leader (asked until `deadline`). As on nats-server, whose
    /// stream leader answers the create, a create answered here then means the stream is up:
    /// a STREAM.LIST or INFO right after it finds the stream.
    async fn led_elsewhere(
        &self,
        sa: &StreamAssignment,
        deadline: tokio::time::Instant,
    ) -> Option<StreamInfo> {
        if sa.replicas.contains(&self.node.0) {
            return None;
        }
        let target = *sa.replicas.first()?;
        self.info_from(target, &sa.name, deadline, |_| true).await
    }

    /// The stream's info asked of `node` (which passes the request to the stream leader) until
    /// the leader answers with a leader named and `accept` takes the answer's JSON, or until
    /// `deadline`.
    async fn info_from(
        &self,
        node: u64,
        name: &str,
        deadline: tokio::time::Instant,
        accept: impl Fn(&serde_json::Value) -> bool,
    ) -> Option<StreamInfo> {
        let subject = format!("{}STREAM.INFO.{name}", crate::jetstream::op::API_PREFIX);
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            let asked = self.ask(node, &subject, left.min(REMOTE_INFO_WAIT)).await;
            let taken = asked.as_deref().and_then(|b| {
                let json: serde_json::Value = serde_json::from_slice(b).ok()?;
                let led = json["cluster"]["leader"]
                    .as_str()
                    .is_some_and(|l| !l.is_empty());
                (led && accept(&json)).then_some(())?;
                serde_json::from_value::<StreamInfo>(json).ok()
            });
            if let Some(info) = taken
                && !info.created.is_empty()
            {
                return Some(info);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stream info for a stream not hosted here: config and creation time, empty state.
    fn remote_info(&self, sa: &StreamAssignment, cfg: &StreamConfig) -> StreamInfo {
        StreamInfo {
            config: with_response_metadata(cfg, &self.identity.version, self.identity.api_level),
            created: go_time::format(u64::try_from(sa.created_ns).unwrap_or(0)),
            state: StreamStateInfo::default(),
            cluster: None,
            mirror: cfg.mirror.as_ref().map(StreamSourceInfo::idle),
            sources: cfg.sources.iter().map(StreamSourceInfo::idle).collect(),
            ts: go_time::format(now_ns()),
        }
    }

    async fn stream_update(&self, name: &str, msg: &InternalMsg) -> Result<String, ApiError> {
        let cfg: StreamConfig =
            parse_body(BodyRule::Required, &msg.payload)?.ok_or_else(ApiError::bad_request)?;
        let others = self.other_streams(name);
        let existing = self.existing_config(name);
        let ctx = ValidationContext {
            clustered: self.clustered(),
            cluster_size: self.cluster_size(),
            other_streams: &others,
        };
        let cfg = check_update(name, cfg, existing.as_ref().map(|(_, c)| c), &ctx)?;
        let Some((sa, _)) = existing else {
            return Err(ApiError::stream_not_found());
        };
        let updated = StreamAssignment {
            config_json: crate::jetstream::api::types::to_go_json(&cfg)
                .into_bytes()
                .into(),
            subjects: cfg.subjects.clone(),
            ..sa.clone()
        };
        meta_answer(
            self.propose_meta(meta_command::Op::UpdateStream(updated))
                .await?,
        )?;
        // The stream leader applies the new config (reconcile proposes it); answer with the
        // replica's state when it is here.
        if let Some(ls) = self.local_stream(name)
            && let Ok(info) = self.registry.leader(ls.group())
            && info.is_self
        {
            let cmd = command::update_config(&cfg, now_ns());
            let answer = self
                .registry
                .propose(ls.group(), cmd)
                .await
                .map_err(raft_api_error)?;
            return Ok(String::from_utf8_lossy(&answer).into_owned());
        }
        // Elsewhere the stream leader's node applies it when its meta replica catches up:
        // wait (bounded) until the leader reports the new config, so that the answer carries the
        // stream's state and an INFO or publish right after it sees the update, as on
        // nats-server, whose stream leader answers the update.
        let leader = self
            .local_stream(name)
            .and_then(|ls| self.registry.leader(ls.group()).ok()?.leader)
            .map(|l| l.0)
            .or_else(|| sa.replicas.first().copied())
            .filter(|l| *l != self.node.0);
        let wanted =
            serde_json::from_str::<serde_json::Value>(&crate::jetstream::api::types::to_go_json(
                &with_response_metadata(&cfg, &self.identity.version, self.identity.api_level),
            ))
            .ok();
        let deadline = tokio::time::Instant::now() + CREATE_LEADER_WAIT;
        if let (Some(leader), Some(wanted)) = (leader, wanted)
            && let Some(info) = self
                .info_from(leader, name, deadline, |j| j["config"] == wanted)
                .await
        {
            return Ok(ApiResponse::ok(response_type::STREAM_UPDATE, info).to_json());
        }
        Ok(ApiResponse::ok(response_type::STREAM_UPDATE, self.remote_info(&sa, &cfg)).to_json())
    }

    async fn stream_delete(&self, name: &str, msg: &InternalMsg) -> Result<String, ApiError> {
        parse_body::<StreamInfoRequest>(BodyRule::Empty, &msg.payload)?;
        meta_answer(
            self.propose_meta(meta_command::Op::DeleteStream(name.to_string()))
                .await?,
        )?;
        Ok(format!(
            "{{\"type\":\"{}\",\"success\":true}}",
            response_type::STREAM_DELETE
        ))
    }

    fn stream_names(&self, msg: &InternalMsg) -> Result<String, ApiError> {
        let req: StreamNamesRequest =
            parse_body(BodyRule::Optional, &msg.payload)?.unwrap_or_default();
        let names = self.filtered_names(&req.subject);
        let page = names_page(names, req.offset);
        Ok(ApiResponse::ok(response_type::STREAM_NAMES, page).to_json())
    }

    fn filtered_names(&self, subject: &str) -> Vec<String> {
        self.meta.read(|m| {
            m.streams()
                .filter(|s| {
                    subject.is_empty()
                        || s.subjects
                            .iter()
                            .any(|f| crate::jetstream::api::validate::subjects_overlap(f, subject))
                })
                .map(|s| s.name.clone())
                .collect()
        })
    }

    async fn stream_list(&self, msg: &InternalMsg) -> Result<String, ApiError> {
        let req: StreamNamesRequest =
            parse_body(BodyRule::Optional, &msg.payload)?.unwrap_or_default();
        let page = names_page(self.filtered_names(&req.subject), req.offset);
        // Every stream of the page is asked for at once: one slow or unreachable node costs
        // one wait, not one per stream it leads.
        let answers =
            futures_util::future::join_all(page.streams.iter().map(|n| self.list_entry(n))).await;
        let mut infos = Vec::with_capacity(page.streams.len());
        let mut missing = Vec::new();
        for (name, info) in page.streams.iter().zip(answers) {
            match info {
                Some(info) => infos.push(info),
                None => missing.push(name.clone()),
            }
        }
        let mut body = serde_json::json!({
            "total": page.paging.total,
            "offset": page.paging.offset,
            "limit": 256,
            "streams": infos,
        });
        // nats-server leaves `missing` out when every stream answered.
        if !missing.is_empty() {
            body["missing"] = missing.into();
        }
        let mut out = serde_json::Map::new();
        out.insert("type".into(), response_type::STREAM_LIST.into());
        if let serde_json::Value::Object(fields) = body {
            out.extend(fields);
        }
        Ok(crate::jetstream::api::types::to_go_json(&out))
    }

    /// One stream's entry in STREAM.LIST: the stream leader's view (state and replica
    /// progress), asked for when another node leads; this node's replica when the leader
    /// cannot answer in time; `None` (listed as missing) when neither is at hand.
    async fn list_entry(&self, name: &str) -> Option<StreamInfo> {
        let leader = self.local_stream(name).and_then(|ls| {
            let l = self.registry.leader(ls.group()).ok()?.leader?;
            Some((ls, l))
        });
        if let Some((ls, l)) = &leader
            && *l == self.node
        {
            let cluster = self.cluster_info(ls);
            return Some(info::stream_info(&ls.sm.lock(), now_ns(), cluster));
        }
        let target = match &leader {
            Some((_, l)) => Some(l.0),
            None => self
                .meta
                .read(|m| m.stream(name).and_then(|s| s.replicas.first().copied())),
        };
        let subject = format!("{}STREAM.INFO.{name}", crate::jetstream::op::API_PREFIX);
        let asked = match target {
            Some(t) => self.ask(t, &subject, REMOTE_INFO_WAIT).await,
            None => None,
        };
        match asked.and_then(|b| serde_json::from_slice::<StreamInfo>(&b).ok()) {
            Some(remote) if !remote.created.is_empty() => Some(remote),
            _ => {
                let ls = self.local_stream(name)?;
                let cluster = self.cluster_info(&ls);
                Some(info::stream_info(&ls.sm.lock(), now_ns(), cluster))
            }
        }
    }

    pub(super) fn cluster_info(&self, ls: &super::replica::LocalStream) -> Option<ClusterInfo> {
        self.group_cluster_info(ls.group(), &ls.replicas)
    }

    /// The cluster section of group `group` whose replicas are `replicas`: its leader and the
    /// other replicas (with their progress when this node leads).
    pub(super) fn group_cluster_info(
        &self,
        group: GroupId,
        replicas: &[u64],
    ) -> Option<ClusterInfo> {
        let leader = self.registry.leader(group).ok()?.leader?;
        let name = |id: u64| {
            if id == self.node.0 {
                Some(self.info.server_name.clone())
            } else {
                // The meta peers, else the cluster layer's table (a node that died before the
                // meta leader recorded it is still known there).
                self.meta
                    .read(|m| m.peers().get(&id).map(|p| p.server_name.clone()))
                    .or_else(|| {
                        self.cluster.as_ref().and_then(|c| {
                            c.peers
                                .snapshot()
                                .get(&crate::cluster::NodeId(id))
                                .map(|p| p.server_name.clone())
                        })
                    })
                    .filter(|n| !n.is_empty())
            }
        };
        let mut ci = ClusterInfo {
            name: self.info.cluster_name.clone().unwrap_or_default(),
            leader: name(leader.0).unwrap_or_default(),
            ..ClusterInfo::default()
        };
        // The leader knows how far each follower is; elsewhere nothing better than "current".
        let progress = if leader == self.node {
            self.registry.followers(group).ok()
        } else {
            None
        };
        for r in replicas {
            if *r == leader.0 {
                continue;
            }
            let mut peer = crate::jetstream::api::types::PeerInfo {
                name: name(*r).unwrap_or_default(),
                current: true,
                ..Default::default()
            };
            if let Some(progress) = &progress {
                let p = progress.iter().find(|p| p.node.0 == *r);
                let ack = p.and_then(|p| p.last_ack);
                peer.lag = p.map_or(0, |p| p.lag);
                peer.active = ack.map_or(0, |a| u64::try_from(a.as_nanos()).unwrap_or(u64::MAX));
                peer.offline = ack.is_none_or(|a| a > OFFLINE_AFTER);
                peer.current = p.is_some() && peer.lag == 0 && !peer.offline;
            }
            ci.replicas.push(peer);
        }
        Some(ci)
    }

    fn stream_info(&self, name: &str, msg: &InternalMsg) -> Result<String, ApiError> {
        let req: StreamInfoRequest =
            parse_body(BodyRule::Optional, &msg.payload)?.unwrap_or_default();
        let ls = self
            .local_stream(name)
            .ok_or_else(ApiError::stream_not_found)?;
        let cluster = self.cluster_info(&ls);
        let decorate = |i: &mut StreamInfo| self.decorate_sources(&ls, i);
        info::info_response_json(&ls.sm.lock(), &req, now_ns(), cluster, decorate)
            .map_err(|e| ApiError::store_failed(&e.to_string()))
    }

    async fn propose_stream(&self, name: &str, cmd: bytes::Bytes) -> Result<String, ApiError> {
        let ls = self
            .local_stream(name)
            .ok_or_else(ApiError::stream_not_found)?;
        let answer = self
            .registry
            .propose(ls.group(), cmd)
            .await
            .map_err(raft_api_error)?;
        Ok(String::from_utf8_lossy(&answer).into_owned())
    }

    async fn stream_purge(&self, name: &str, msg: &InternalMsg) -> Result<String, ApiError> {
        let req: PurgeRequest = parse_body(BodyRule::Optional, &msg.payload)?.unwrap_or_default();
        req.to_store()?;
        self.propose_stream(name, command::purge(&req.filter, req.seq, req.keep))
            .await
    }

    async fn msg_delete(&self, name: &str, msg: &InternalMsg) -> Result<String, ApiError> {
        let req: MsgDeleteRequest =
            parse_body(BodyRule::Required, &msg.payload)?.ok_or_else(ApiError::bad_request)?;
        self.propose_stream(name, command::delete_msg(req.seq, req.no_erase))
            .await
    }

    fn msg_get(&self, name: &str, msg: &InternalMsg) -> Result<String, ApiError> {
        let req: MsgGetRequest =
            parse_body(BodyRule::Required, &msg.payload)?.ok_or_else(ApiError::bad_request)?;
        let selector = req.selector()?;
        let ls = self
            .local_stream(name)
            .ok_or_else(ApiError::stream_not_found)?;
        let sm = ls.sm.lock();
        info::msg_get_response_json(sm.store(), &selector, req.no_hdr)
            .map_err(|e| ApiError::store_failed(&e.to_string()))
    }

    fn direct_get(&self, name: &str, last_subject: Option<&str>, msg: &InternalMsg) {
        if let Some(ls) = self.local_stream(name) {
            self.direct_get_from(&ls, last_subject, msg, None);
        }
    }

    /// A local mirror with `mirror_direct` of `origin`, if any.
    fn local_direct_mirror(&self, origin: &str) -> Option<Arc<LocalStream>> {
        let candidates: Vec<Arc<LocalStream>> = self.local.read().values().cloned().collect();
        candidates.into_iter().find(|ls| {
            let sm = ls.sm.lock();
            let cfg = sm.config();
            cfg.mirror_direct && cfg.mirror.as_ref().is_some_and(|m| m.name == origin)
        })
    }

    /// Answers a DIRECT.GET from `ls` (the stream itself with `allow_direct`, or a mirror of
    /// it with `mirror_direct`; the reply's `Nats-Stream` names the answering stream, as
    /// nats-server's does). With `miss_hops`, a follower that does not have the message passes
    /// the request to the leader (it may not have applied a write that was already acknowledged
    /// to the client) instead of answering 404.
    fn direct_get_from(
        &self,
        ls: &LocalStream,
        last_subject: Option<&str>,
        msg: &InternalMsg,
        miss_hops: Option<u32>,
    ) {
        let Some(reply) = &msg.reply else {
            return;
        };
        let name = ls.name.as_str();
        let outcome = {
            let sm = ls.sm.lock();
            if !sm.config().allow_direct && !sm.config().mirror_direct {
                return;
            }
            direct_lookup(sm.store(), last_subject, &msg.payload)
        };
        match outcome {
            DirectOutcome::Found(m, no_hdr) => {
                let r = info::direct_get_reply(name, &m, no_hdr);
                let hdrs = (!r.headers.is_empty()).then_some(r.headers.as_slice());
                self.bus.publish(&Msg::new(reply, &r.payload).headers(hdrs));
            }
            DirectOutcome::NotFound => {
                if let Some(hops) = miss_hops
                    && let Some(leader) =
                        self.registry.leader(ls.group()).ok().and_then(|l| l.leader)
                    && leader != self.node
                    && self.forward_to(leader, hops, msg)
                {
                    return;
                }
                let status = info::direct_status(404, "Message Not Found");
                self.bus
                    .publish(&Msg::new(reply, b"").headers(Some(&status)));
            }
            DirectOutcome::BadRequest => {
                let status = info::direct_status(408, "Bad Request");
                self.bus
                    .publish(&Msg::new(reply, b"").headers(Some(&status)));
            }
        }
    }

    async fn stream_stepdown(&self, name: &str) -> Result<String, ApiError> {
        if !self.clustered() {
            return Err(ApiError::new(ErrorKind::ClusterRequired));
        }
        let ls = self
            .local_stream(name)
            .ok_or_else(ApiError::stream_not_found)?;
        let to = ls.replicas.iter().copied().find(|r| *r != self.node.0);
        let Some(to) = to else {
            return Err(ApiError::new(ErrorKind::ClusterNoPeers));
        };
        self.registry
            .transfer_leadership(ls.group(), NodeId(to))
            .await
            .map_err(raft_api_error)?;
        Ok(format!(
            "{{\"type\":\"{}\",\"success\":true}}",
            response_type::STREAM_LEADER_STEPDOWN
        ))
    }

    async fn consumer_stepdown(&self, stream: &str, name: &str) -> Result<String, ApiError> {
        // Consumers follow their stream's leader: stepping one down moves the stream group.
        let exists = self
            .local_stream(stream)
            .ok_or_else(ApiError::stream_not_found)?
            .sm
            .lock()
            .consumer(name)
            .is_some();
        if !exists {
            return Err(ApiError::new(ErrorKind::ConsumerNotFound));
        }
        self.stream_stepdown(stream).await?;
        Ok(format!(
            "{{\"type\":\"{}\",\"success\":true}}",
            response_type::CONSUMER_LEADER_STEPDOWN
        ))
    }

    async fn meta_stepdown(&self) -> Result<String, ApiError> {
        if !self.clustered() {
            return Err(ApiError::new(ErrorKind::ClusterRequired));
        }
        let to = self
            .registry
            .raft(GroupId::META)
            .map_err(raft_api_error)?
            .voter_ids()
            .find(|v| *v != self.node.0);
        let Some(to) = to else {
            return Err(ApiError::new(ErrorKind::ClusterNoPeers));
        };
        self.registry
            .transfer_leadership(GroupId::META, NodeId(to))
            .await
            .map_err(raft_api_error)?;
        Ok("{\"type\":\"io.nats.jetstream.api.v1.meta_leader_stepdown_response\",\"success\":true}"
            .to_string())
    }
}

/// Maps a meta state machine answer to success or the API error it carries.
pub(super) fn meta_answer(r: MetaResult) -> Result<Option<StreamAssignment>, ApiError> {
    match r.result {
        Some(meta_result::Result::Stream(s)) => Ok(Some(s)),
        Some(meta_result::Result::Ok(_)) | None => Ok(None),
        Some(meta_result::Result::Error(e)) => Err(ApiError {
            code: u16::try_from(e.code).unwrap_or(500),
            err_code: u16::try_from(e.err_code).unwrap_or(10000),
            description: e.description,
        }),
    }
}

/// A Raft failure as the API error nats-server gives when the cluster cannot answer.
pub(super) fn raft_api_error(e: RaftError) -> ApiError {
    tracing::warn!(error = %e, "raft operation failed");
    ApiError::new(ErrorKind::ClusterNotAvail)
}

/// What a DIRECT.GET finds.
enum DirectOutcome {
    /// The message, and whether headers are left out.
    Found(jetraft_storage::stream::StoredMsg, bool),
    /// No such message.
    NotFound,
    /// The request was malformed.
    BadRequest,
}

fn direct_lookup(
    store: &dyn jetraft_storage::stream::StreamStore,
    last_subject: Option<&str>,
    body: &[u8],
) -> DirectOutcome {
    let (found, no_hdr) = match last_subject {
        Some(subject) => {
            if !body.is_empty() {
                return DirectOutcome::BadRequest;
            }
            (store.last_for_subject(subject), false)
        }
        None => {
            let Ok(Some(req)) = parse_body::<MsgGetRequest>(BodyRule::Required, body) else {
                return DirectOutcome::BadRequest;
            };
            let Ok(selector) = req.selector() else {
                return DirectOutcome::BadRequest;
            };
            (info::find_message(store, &selector), req.no_hdr)
        }
    };
    match found {
        Ok(Some(m)) => DirectOutcome::Found(m, no_hdr),
        _ => DirectOutcome::NotFound,
    }
}
