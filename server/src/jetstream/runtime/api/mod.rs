//! The `$JS.API` request loop: parse the operation, decide where it is answered
//! (`dispatch`), answer here or forward there. The handlers, one file per family:
//! - `meta`: account info and the cluster operations the meta leader answers;
//! - `stream`: stream create/update/delete/names/list/info/purge, MSG.GET/DELETE, stepdown;
//! - `stepdown`: META/STREAM.LEADER.STEPDOWN with a placement preference;
//! - `direct`: DIRECT.GET from any replica or a local mirror;
//! - `snapshot` / `restore`: STREAM.SNAPSHOT (stream leader) and STREAM.RESTORE (meta leader);
//! - the consumer family is `runtime::consumer::api`.

mod direct;
mod meta;
mod restore;
mod snapshot;
mod stepdown;
mod stream;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use jetraft_proto::meta::{MetaResult, StreamAssignment, meta_result};
use jetraft_raft::{GroupId, NodeId, RaftError};
use tracing::debug;

use super::dispatch::{self, Facts, Route, StreamFacts};
use super::in_force;
use super::{JetStream, next_msg};
use crate::bus::Msg;
use crate::bus::internal::{InternalMsg, InternalSub};
use crate::jetstream::api::types::response_type;
use crate::jetstream::api::types::responses::error_json;
use crate::jetstream::api::{ApiError, ErrorKind};
use crate::jetstream::op::{ApiOp, Owner};
use crate::jetstream::stream::info;

/// How long a request waits for the meta group to elect a leader (start-up, failover).
const META_LEADER_WAIT: Duration = Duration::from_secs(3);
/// How long a request waits for its stream group to elect a leader.
const STREAM_LEADER_WAIT: Duration = Duration::from_secs(2);

/// How long a leader that has not applied its predecessors' entries yet holds an API request
/// back (see `JetStream::wait_leader_caught_up`).
const LEADER_CATCH_UP_WAIT: Duration = Duration::from_secs(5);
/// How long a leader tries to confirm it still leads before it answers a message read (see
/// `GroupRegistry::confirm_read`): past it the read is passed on or left unanswered.
const READ_CONFIRM_WAIT: Duration = Duration::from_secs(2);
/// A leader answers reads without asking its followers again while a quorum answered a
/// heartbeat it sent at most this long ago: a third of the node links' keepalive timeout,
/// which bounds how soon followers of a silently cut-off leader may elect another.
const READ_LEASE: Duration = match crate::cluster::link::KEEPALIVE_TIMEOUT.checked_div(3) {
    Some(lease) => lease,
    None => Duration::ZERO,
};

/// nats-server's answer to `op` from an account without JetStream: 10039 with the operation's
/// response type (and, for the list-like operations, its empty paging and list fields).
pub(crate) fn not_enabled_for_account_json(op: &ApiOp) -> String {
    let error = ApiError::new(ErrorKind::NotEnabledForAccount);
    let list = match op {
        ApiOp::StreamInfo(_) => return info::info_error_json(error),
        ApiOp::StreamNames | ApiOp::StreamList => "streams",
        ApiOp::ConsumerNames(_) | ApiOp::ConsumerList(_) => "consumers",
        _ => return error_json(kind(op), error),
    };
    let mut json: serde_json::Value =
        serde_json::from_str(&error_json(kind(op), error)).unwrap_or_default();
    if let Some(map) = json.as_object_mut() {
        for field in ["total", "offset", "limit"] {
            map.insert(field.into(), 0.into());
        }
        map.insert(list.into(), serde_json::Value::Null);
    }
    json.to_string()
}

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
        ApiOp::ServerRemove => "io.nats.jetstream.api.v1.meta_server_remove_response",
        ApiOp::StreamSnapshot(_) => snapshot::SNAPSHOT_RESPONSE,
        ApiOp::StreamRestore(_) => restore::RESTORE_RESPONSE,
        ApiOp::ServerDrain => super::drain::DRAIN_RESPONSE,
        ApiOp::DirectGet(_) | ApiOp::DirectGetLast(..) | ApiOp::ConsumerNext(..) => {
            response_type::SYSTEM
        }
        ApiOp::ConsumerCreate(..) => response_type::CONSUMER_CREATE,
        ApiOp::ConsumerInfo(..) => response_type::CONSUMER_INFO,
        ApiOp::ConsumerDelete(..) => response_type::CONSUMER_DELETE,
        ApiOp::ConsumerNames(_) => response_type::CONSUMER_NAMES,
        ApiOp::ConsumerList(_) => response_type::CONSUMER_LIST,
        ApiOp::ConsumerPause(..) => response_type::CONSUMER_PAUSE,
        ApiOp::ConsumerUnpin(..) => response_type::CONSUMER_UNPIN,
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

    /// Requests on `$JS.<domain>.API.>` (`prefix` is `$JS.<domain>.API.`): handled as the same
    /// request on `$JS.API.>`, pull requests through the consumer's engine first as on the
    /// ack loop, and direct gets only for streams that take them.
    pub(super) async fn domain_api_loop(self: Arc<Self>, mut sub: InternalSub, prefix: String) {
        loop {
            let Some(mut msg) = next_msg(&mut sub, &self.cancel).await else {
                break;
            };
            let Some(rest) = msg.subject.strip_prefix(prefix.as_str()) else {
                continue;
            };
            let rest = rest.to_string();
            msg.subject = format!("$JS.API.{rest}");
            if let Some(name) = rest.strip_prefix("DIRECT.GET.") {
                let name = name.split('.').next().unwrap_or_default();
                let key = crate::jetstream::account::stream_key(&msg.account, name);
                if !self.routing.borrow().direct.contains(&key) {
                    continue;
                }
            }
            if msg.subject.starts_with(super::consumer::NEXT_PREFIX)
                && self.pull_to_local_engine(&msg)
            {
                self.api_total.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let js = self.clone();
            self.tasks.spawn(async move { js.handle_api(msg, 0).await });
        }
    }

    pub(super) fn reply(&self, msg: &InternalMsg, json: &str) {
        self.advise_api_audit(msg, json);
        let to_node = msg.reply.as_deref().and_then(super::remote::inbox_node);
        if to_node.is_none() {
            // Answers to another node are counted where they reach the client.
            self.api_counts.count(&msg.account, json);
        }
        if let Some(reply) = &msg.reply {
            // A node asking for itself (`remote`) waits in its forward inbox, which has no
            // routed interest: the answer goes straight to it.
            if let Some(node) = to_node
                && node != self.node.0
            {
                self.bus.send_to_node(
                    NodeId(node),
                    &Msg::new(reply, json.as_bytes()).in_account(&msg.account),
                );
                return;
            }
            self.bus
                .publish(&Msg::new(reply, json.as_bytes()).in_account(&msg.account));
        }
    }

    fn reply_error(&self, msg: &InternalMsg, op: &ApiOp, error: ApiError) {
        self.api_errors.fetch_add(1, Ordering::Relaxed);
        debug!(subject = %msg.subject, error = %error, "API request refused");
        if matches!(op, ApiOp::ConsumerNext(..)) {
            // A pull's answers go to the client's fetch inbox, where a JSON body would look
            // like a message without its ack reply: answer with the status nats-server's
            // missing consumer subscription leaves (no responders).
            if let Some(reply) = &msg.reply {
                let hdrs = crate::protocol::headers::status_block(503, None, &[]);
                self.bus.publish(
                    &Msg::new(reply, b"")
                        .headers(Some(&hdrs))
                        .in_account(&msg.account),
                );
            }
            return;
        }
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
        // The stream named is the one of the account the request was published in.
        let Some(op) = ApiOp::parse(&msg.subject).map(|op| op.keyed(&msg.account)) else {
            return;
        };
        if hops == 0 && op.is_cluster_op() && !self.accounts.runs_cluster_ops(&msg.account) {
            // Only the system account runs them (nats-server leaves them unanswered elsewhere).
            // Forwarded requests and node-to-node asks (drain) passed this check where they
            // came in.
            return;
        }
        if hops == 0 {
            self.api_total.fetch_add(1, Ordering::Relaxed);
        }
        if requires_higher_level(&op, &msg) {
            return self.reply_error(&msg, &op, ApiError::new(ErrorKind::RequiredApiLevel));
        }
        // A single server refuses stream and consumer stepdowns before looking the asset up,
        // as nats-server does.
        if !self.clustered()
            && matches!(
                op,
                ApiOp::StreamLeaderStepdown(_) | ApiOp::ConsumerLeaderStepdown(..)
            )
        {
            self.reply_error(&msg, &op, ApiError::new(ErrorKind::ClusterRequired));
            return;
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
        debug!(subject = %msg.subject, hops, ?route, "API request routed");
        let name = op.stream().unwrap_or_default();
        match route {
            Route::AsLeader(group) => self.answer_as_leader(&op, &msg, hops, group).await,
            Route::FromMirror => {
                if let Some(mirror) = self.local_direct_mirror(name) {
                    let last = match &op {
                        ApiOp::DirectGetLast(_, subject) => Some(subject.as_str()),
                        _ => None,
                    };
                    self.direct_get_from(&mirror, last, &msg);
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
            Owner::StreamLeader => {
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
        let arrived = tokio::time::Instant::now();
        self.wait_leader_caught_up(group, LEADER_CATCH_UP_WAIT)
            .await;
        if op.reads_messages()
            && !self
                .registry
                .confirm_read(group, READ_LEASE, READ_CONFIRM_WAIT)
                .await
                .unwrap_or(false)
        {
            self.unconfirmed_read(op, msg, hops, group);
            return;
        }
        let started = tokio::time::Instant::now();
        let Some(result) = self.api_answer(op, msg).await else {
            return;
        };
        debug!(
            subject = %msg.subject,
            catching_up = ?started.duration_since(arrived),
            took = ?started.elapsed(),
            ok = result.is_ok(),
            "API request answered as leader"
        );
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

    /// A message read this node could not confirm it leads for (cut off from its majority, or
    /// leadership moved): the new leader answers if one is known, else no message is returned
    /// (a direct get goes unanswered, a message get gets `cluster not available`).
    fn unconfirmed_read(&self, op: &ApiOp, msg: &InternalMsg, hops: u32, group: GroupId) {
        if let Some(now) = self.registry.leader(group).ok().and_then(|l| l.leader)
            && now != self.node
            && self.forward_to(now, hops, msg)
        {
            return;
        }
        debug!(subject = %msg.subject, "read not answered: leadership not confirmed");
        if matches!(op, ApiOp::MsgGet(_)) {
            self.reply_error(msg, op, ApiError::new(ErrorKind::ClusterNotAvail));
        }
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
        // Counting every publish handed over before the request (`settle`).
        self.settle_before(op, &msg.account).await;
        let result = match op {
            ApiOp::AccountInfo => Ok(self.account_info(&msg.account).await),
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
            ApiOp::StreamLeaderStepdown(name) => self.stream_stepdown(name, &msg.payload).await,
            ApiOp::MetaLeaderStepdown => self.meta_stepdown(&msg.payload).await,
            ApiOp::StreamPeerRemove(name) => self.stream_peer_remove(name, msg).await,
            ApiOp::ServerRemove => return self.server_remove(msg).await,
            ApiOp::StreamSnapshot(name) => match self.stream_snapshot(name, msg).await {
                Ok(()) => return None,
                Err(e) => Err(e),
            },
            ApiOp::StreamRestore(name) => match self.stream_restore(name, msg) {
                Ok(()) => return None,
                Err(e) => Err(e),
            },
            ApiOp::ServerDrain => self.server_drain(msg).await,
            ApiOp::ConsumerCreate(s, form) => self.consumer_create(s, form, msg).await,
            ApiOp::ConsumerInfo(s, c) => self.consumer_info_api(s, c, msg).await,
            ApiOp::ConsumerDelete(s, c) => self.consumer_delete_api(s, c, msg).await,
            ApiOp::ConsumerNames(s) => self.consumer_names_api(s, msg),
            ApiOp::ConsumerList(s) => self.consumer_list_api(s, msg).await,
            ApiOp::ConsumerNext(s, c) => {
                self.consumer_next(s, c, msg);
                return None;
            }
            ApiOp::ConsumerPause(s, c) => self.consumer_pause_api(s, c, msg).await,
            ApiOp::ConsumerUnpin(s, c) => self.consumer_unpin_api(s, c, msg),
            ApiOp::ConsumerLeaderStepdown(s, c) => self.consumer_stepdown(s, c).await,
        };
        Some(result)
    }
}

/// Maps a meta state machine answer to success or the API error it carries.
/// `Nats-Required-Api-Level` on an API request: one that is not a number or is above this
/// server's level refuses the request (10185), as nats-server 2.12 does for its API handlers
/// (not for direct gets and pull requests, which it does not check).
const REQUIRED_API_LEVEL: &str = "Nats-Required-Api-Level";

fn requires_higher_level(op: &ApiOp, msg: &InternalMsg) -> bool {
    if matches!(
        op,
        ApiOp::ConsumerNext(..) | ApiOp::DirectGet(..) | ApiOp::DirectGetLast(..)
    ) {
        return false;
    }
    let Some(level) = msg
        .hdrs
        .as_deref()
        .and_then(|h| crate::jetstream::stream::headers::get(h, REQUIRED_API_LEVEL))
    else {
        return false;
    };
    level
        .parse::<i64>()
        .map_or(true, |l| l > i64::from(crate::node::API_LEVEL))
}

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
