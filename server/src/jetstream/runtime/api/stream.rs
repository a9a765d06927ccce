//! The stream family of the API: STREAM.CREATE/UPDATE/DELETE/NAMES/LIST (meta leader),
//! STREAM.INFO/PURGE, MSG.GET/DELETE and STREAM.LEADER.STEPDOWN (stream leader).

use std::time::Duration;

use jetraft_proto::meta::{StreamAssignment, meta_command};
use jetraft_raft::GroupId;

use super::{meta_answer, raft_api_error};
use crate::bus::internal::InternalMsg;
use crate::jetstream::account;
use crate::jetstream::api::types::requests::{
    BodyRule, MsgDeleteRequest, MsgGetRequest, PurgeRequest, StreamInfoRequest, StreamListRequest,
    StreamNamesRequest, decode, parse_body,
};
use crate::jetstream::api::types::responses::{
    ApiResponse, StreamCreateBody, StreamListResponse, error_json, list_names_page, names_page,
};
use crate::jetstream::api::types::{
    ClusterInfo, StreamAlternate, StreamConfig, StreamInfo, StreamSourceInfo, StreamStateInfo,
    go_time, response_type,
};
use crate::jetstream::api::validate::{
    CreateOutcome, ValidationContext, check_create, check_update, with_response_metadata,
};
use crate::jetstream::api::{ApiError, ErrorKind};
use crate::jetstream::runtime::advisory::Action;
use crate::jetstream::runtime::replica::LocalStream;
use crate::jetstream::runtime::{JetStream, now_ns};
use crate::jetstream::stream::{command, info};

/// How long STREAM.LIST waits for the info of a stream led by another node.
const REMOTE_INFO_WAIT: Duration = Duration::from_secs(2);

/// A follower that has not acknowledged the stream leader for this long is reported offline.
const OFFLINE_AFTER: Duration = Duration::from_secs(10);

/// How long a create waits for the new stream's group to elect a leader before answering.
const CREATE_LEADER_WAIT: Duration = Duration::from_secs(5);

impl JetStream {
    /// The other streams of the account of the stream with key `name`: their names (as its
    /// clients know them) and subjects.
    pub(crate) fn other_streams(&self, name: &str) -> Vec<(String, Vec<String>)> {
        let account = account::stream_account(name);
        self.meta.read(|m| {
            m.streams()
                .filter(|s| s.name != name && account::in_account(&s.name, account))
                .map(|s| {
                    (
                        account::stream_name(&s.name).to_string(),
                        s.subjects.clone(),
                    )
                })
                .collect()
        })
    }

    /// A mirror of a stream with `allow_direct` answers its direct gets too (nats-server sets
    /// `mirror_direct` at create, observed).
    pub(crate) fn set_mirror_direct(&self, name: &str, cfg: &mut StreamConfig) {
        let Some(origin) = cfg.mirror.as_ref().map(|m| m.name.clone()) else {
            return;
        };
        let origin_direct = self
            .existing_config(&account::stream_key(account::stream_account(name), &origin))
            .is_some_and(|(_, c)| c.allow_direct);
        if origin_direct {
            cfg.mirror_direct = true;
        }
    }

    pub(crate) fn existing_config(&self, name: &str) -> Option<(StreamAssignment, StreamConfig)> {
        let sa = self.meta.read(|m| m.stream(name).cloned())?;
        let cfg = serde_json::from_slice(&sa.config_json).ok()?;
        Some((sa, cfg))
    }

    pub(crate) async fn stream_create(
        &self,
        name: &str,
        msg: &InternalMsg,
    ) -> Result<String, ApiError> {
        // Decoded as Go does: an empty body is the zero config (then a name mismatch).
        let mut cfg: StreamConfig = decode(&msg.payload)?;
        self.set_mirror_direct(name, &mut cfg);
        let others = self.other_streams(name);
        let existing = self.existing_config(name);
        let ctx = ValidationContext {
            clustered: self.clustered(),
            cluster_size: self.placement_size(cfg.num_replicas).await,
            other_streams: &others,
            max_bytes: self.max_bytes_limits(name),
        };
        let shown = account::stream_name(name);
        let cfg = match check_create(shown, cfg, existing.as_ref().map(|(_, c)| c), &ctx)? {
            CreateOutcome::Create(cfg) => cfg,
            CreateOutcome::AlreadyExists => return Ok(self.create_answer(name).await),
        };
        self.check_stream_limits(name, &cfg, false)?;
        let replicas = usize::try_from(cfg.num_replicas.max(1)).unwrap_or(1);
        let placed = self.pick_new(&cfg, &[], replicas)?;
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
            revision: 0,
        };
        meta_answer(
            self.propose_meta(meta_command::Op::CreateStream(sa))
                .await?,
        )?;
        let answer = self.create_answer(name).await;
        self.advise_stream(name, Action::Create);
        Ok(answer)
    }

    /// The create response: from the local replica once its group has a leader, else from the
    /// meta record with an empty state.
    pub(crate) async fn create_answer(&self, name: &str) -> String {
        let deadline = tokio::time::Instant::now() + CREATE_LEADER_WAIT;
        loop {
            // Registered before looking, so a replica added in between still wakes this.
            let added = self.local_changed.notified();
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
            // Woken as soon as the meta task adds a replica (it used to be polled every 10 ms,
            // which was most of a create's time); the timeout bounds a missed wake-up.
            let _ = tokio::time::timeout(Duration::from_millis(10), added).await;
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
    pub(crate) async fn led_elsewhere(
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
    pub(crate) async fn info_from(
        &self,
        node: u64,
        name: &str,
        deadline: tokio::time::Instant,
        accept: impl Fn(&serde_json::Value) -> bool,
    ) -> Option<StreamInfo> {
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            let bound = left.min(REMOTE_INFO_WAIT);
            let asked =
                (self.ask_stream(node, "STREAM.INFO", name, bytes::Bytes::new(), bound)).await;
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
    pub(crate) fn remote_info(&self, sa: &StreamAssignment, cfg: &StreamConfig) -> StreamInfo {
        StreamInfo {
            config: with_response_metadata(cfg, &self.identity.version, self.identity.api_level),
            created: go_time::format(u64::try_from(sa.created_ns).unwrap_or(0)),
            state: StreamStateInfo::default(),
            cluster: None,
            mirror: cfg.mirror.as_ref().map(StreamSourceInfo::idle),
            sources: cfg.sources.iter().map(StreamSourceInfo::idle).collect(),
            alternates: Vec::new(),
            ts: go_time::format(now_ns()),
        }
    }

    pub(crate) async fn stream_update(
        &self,
        name: &str,
        msg: &InternalMsg,
    ) -> Result<String, ApiError> {
        let cfg: StreamConfig = decode(&msg.payload)?;
        let others = self.other_streams(name);
        let existing = self.existing_config(name);
        let ctx = ValidationContext {
            clustered: self.clustered(),
            cluster_size: self.cluster_size(),
            other_streams: &others,
            max_bytes: self.max_bytes_limits(name),
        };
        let cfg = check_update(
            account::stream_name(name),
            cfg,
            existing.as_ref().map(|(_, c)| c),
            &ctx,
        )?;
        let Some((sa, old)) = existing else {
            return Err(ApiError::stream_not_found());
        };
        self.check_stream_limits(name, &cfg, true)?;
        // A new replica count or placement moves replicas (the stream's leader carries it out).
        let placed = self.replicas_for_update(&sa, &old, &cfg).await?;
        let updated = StreamAssignment {
            config_json: crate::jetstream::api::types::to_go_json(&cfg)
                .into_bytes()
                .into(),
            subjects: cfg.subjects.clone(),
            ..placed
        };
        meta_answer(
            self.propose_meta(meta_command::Op::UpdateStream(updated))
                .await?,
        )?;
        self.advise_stream(name, Action::Modify);
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

    pub(crate) async fn stream_delete(
        &self,
        name: &str,
        msg: &InternalMsg,
    ) -> Result<String, ApiError> {
        parse_body::<StreamInfoRequest>(BodyRule::Empty, &msg.payload)?;
        meta_answer(
            self.propose_meta(meta_command::Op::DeleteStream(name.to_string()))
                .await?,
        )?;
        self.advise_stream(name, Action::Delete);
        Ok(format!(
            "{{\"type\":\"{}\",\"success\":true}}",
            response_type::STREAM_DELETE
        ))
    }

    pub(crate) fn stream_names(&self, msg: &InternalMsg) -> Result<String, ApiError> {
        let req: StreamNamesRequest =
            parse_body(BodyRule::Optional, &msg.payload)?.unwrap_or_default();
        let names = self.filtered_names(&msg.account, &req.subject);
        let page = names_page(names, req.offset);
        Ok(ApiResponse::ok(response_type::STREAM_NAMES, page).to_json())
    }

    /// The names of `account`'s streams (as its clients know them) with a subject overlapping
    /// `subject` (all when empty).
    pub(crate) fn filtered_names(&self, account: &str, subject: &str) -> Vec<String> {
        self.meta.read(|m| {
            m.streams()
                .filter(|s| {
                    account::in_account(&s.name, account)
                        && (subject.is_empty()
                            || s.subjects.iter().any(|f| {
                                crate::jetstream::api::validate::subjects_overlap(f, subject)
                            }))
                })
                .map(|s| account::stream_name(&s.name).to_string())
                .collect()
        })
    }

    pub(crate) async fn stream_list(&self, msg: &InternalMsg) -> Result<String, ApiError> {
        let StreamListRequest(req) =
            parse_body(BodyRule::Optional, &msg.payload)?.unwrap_or_default();
        let page = list_names_page(self.filtered_names(&msg.account, &req.subject), req.offset);
        // Every stream of the page is asked for at once: one slow or unreachable node costs
        // one wait, not one per stream it leads.
        let answers = futures_util::future::join_all(
            page.streams
                .iter()
                .map(|n| self.list_entry(account::stream_key(&msg.account, n))),
        )
        .await;
        let mut infos = Vec::with_capacity(page.streams.len());
        let mut missing = Vec::new();
        for (name, info) in page.streams.iter().zip(answers) {
            match info {
                Some(info) => infos.push(info),
                None => missing.push(name.clone()),
            }
        }
        // nats-server leaves `missing` out when every stream answered.
        let body = StreamListResponse {
            paging: page.paging,
            streams: infos,
            missing,
        };
        Ok(ApiResponse::ok(response_type::STREAM_LIST, body).to_json())
    }

    /// One stream's entry in STREAM.LIST: the stream leader's view (state and replica
    /// progress), asked for when another node leads; this node's replica when the leader
    /// cannot answer in time; `None` (listed as missing) when neither is at hand.
    pub(crate) async fn list_entry(&self, key: String) -> Option<StreamInfo> {
        let name = key.as_str();
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
        let asked = match target {
            Some(t) => {
                self.ask_stream(
                    t,
                    "STREAM.INFO",
                    name,
                    bytes::Bytes::new(),
                    REMOTE_INFO_WAIT,
                )
                .await
            }
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

    /// The cluster section of stream replica `ls`. Its replicas are the members of the
    /// stream's Raft group as this replica knows them (voters, then learners still catching
    /// up), not the meta assignment: during a replica move (SERVER.REMOVE, PEER.REMOVE) the
    /// assignment names the new replicas at once, while the old ones still count for the
    /// group's quorum until the voter change is committed. A leaving node must not look
    /// drained before then (a StatefulSet scale-down waits on it).
    pub(crate) fn cluster_info(&self, ls: &LocalStream) -> Option<ClusterInfo> {
        let members = self
            .registry
            .members(ls.group())
            .ok()
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| ls.replicas());
        self.group_cluster_info(ls.group(), &members)
    }

    /// The cluster section of group `group` whose replicas are `replicas`: its leader and the
    /// other replicas (with their progress when this node leads).
    pub(crate) fn group_cluster_info(
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
                // As nats-server: current once it holds what the leader applied (a healthy
                // follower under steady publishes always has a few entries in flight).
                peer.current = p.is_some_and(|p| p.has_applied) && !peer.offline;
            }
            ci.replicas.push(peer);
        }
        Some(ci)
    }

    pub(crate) fn stream_info(&self, name: &str, msg: &InternalMsg) -> Result<String, ApiError> {
        let req: StreamInfoRequest =
            parse_body(BodyRule::Optional, &msg.payload)?.unwrap_or_default();
        let ls = self
            .local_stream(name)
            .ok_or_else(ApiError::stream_not_found)?;
        let cluster = self.cluster_info(&ls);
        let alternates = self.alternates(name);
        let decorate = |i: &mut StreamInfo| {
            self.decorate_sources(&ls, i);
            i.alternates = alternates;
        };
        info::info_response_json(&ls.sm.lock(), &req, now_ns(), cluster, decorate)
            .map_err(|e| ApiError::store_failed(&e.to_string()))
    }

    /// The stream with key `key` and the streams of its account mirroring it, as nats-server
    /// lists them in clustered mode (none on a single server, or when there is no mirror).
    fn alternates(&self, key: &str) -> Vec<StreamAlternate> {
        if !self.clustered() {
            return Vec::new();
        }
        let account = account::stream_account(key);
        let name = account::stream_name(key);
        let alternate = |s: &StreamAssignment| StreamAlternate {
            name: account::stream_name(&s.name).to_string(),
            domain: self.identity.domain.clone().unwrap_or_default(),
            cluster: self.info.cluster_name.clone().unwrap_or_default(),
        };
        let mirrors = |s: &StreamAssignment| {
            // Most configs have no mirror: only those that name one are parsed.
            s.config_json.windows(8).any(|w| w == b"\"mirror\"")
                && serde_json::from_slice::<serde_json::Value>(&s.config_json)
                    .is_ok_and(|c| c["mirror"]["name"] == name)
        };
        let found: Vec<StreamAlternate> = self.meta.read(|m| {
            m.streams()
                .filter(|s| account::in_account(&s.name, account))
                .filter(|s| account::stream_name(&s.name) == name || mirrors(s))
                .map(alternate)
                .collect()
        });
        if found.len() < 2 { Vec::new() } else { found }
    }

    pub(crate) async fn propose_stream(
        &self,
        name: &str,
        cmd: bytes::Bytes,
    ) -> Result<String, ApiError> {
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

    pub(crate) async fn stream_purge(
        &self,
        name: &str,
        msg: &InternalMsg,
    ) -> Result<String, ApiError> {
        let req: PurgeRequest = parse_body(BodyRule::Optional, &msg.payload)?.unwrap_or_default();
        req.to_store()?;
        self.propose_stream(name, command::purge(&req.filter, req.seq, req.keep))
            .await
    }

    pub(crate) async fn msg_delete(
        &self,
        name: &str,
        msg: &InternalMsg,
    ) -> Result<String, ApiError> {
        let req: MsgDeleteRequest =
            parse_body(BodyRule::Required, &msg.payload)?.ok_or_else(ApiError::bad_request)?;
        self.propose_stream(name, command::delete_msg(req.seq, req.no_erase))
            .await
    }

    pub(crate) fn msg_get(&self, name: &str, msg: &InternalMsg) -> Result<String, ApiError> {
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

    pub(crate) async fn stream_stepdown(
        &self,
        name: &str,
        body: &[u8],
    ) -> Result<String, ApiError> {
        if !self.clustered() {
            return Err(ApiError::new(ErrorKind::ClusterRequired));
        }
        let ls = self
            .local_stream(name)
            .ok_or_else(ApiError::stream_not_found)?;
        self.step_down(ls.group(), body).await?;
        Ok(format!(
            "{{\"type\":\"{}\",\"success\":true}}",
            response_type::STREAM_LEADER_STEPDOWN
        ))
    }
}
