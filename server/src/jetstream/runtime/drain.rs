//! Draining a node for maintenance: it hands every leadership it holds (the meta group's and
//! its streams', with their consumers) to other nodes and keeps none, while it stays a running,
//! voting follower; undraining lets it lead again. nats-server has nothing alike (its lame duck
//! mode also shuts the server down), so this is a jetraft extension:
//!
//! - the drained set is part of the meta state (`Drain` commands), so every node knows it, it
//!   survives leader changes and restarts, and step-downs never pick a drained node
//!   (`stepdown::successors`);
//! - `$JS.API.SERVER.DRAIN` (meta leader; body `{"peer":"<server name>","drain":true|false}`)
//!   records it; `/drainz` on the monitoring port (`POST` drains, `DELETE` undrains, `GET`
//!   reports) sends that request for its own node;
//! - a drained node's stream owner tasks and its meta task hand off any leadership they find
//!   ([`JetStream::hand_off_if_drained`]); an R1 stream cannot move its leader (no other
//!   replica) and is reported as still led here.

use std::time::Duration;

use jetraft_proto::meta::{Drain, meta_command};
use jetraft_raft::GroupId;
use serde::Deserialize;
use serde_json::{Value, json};
use tracing::{info, warn};

use super::JetStream;
use super::api::meta_answer;
use crate::bus::internal::InternalMsg;
use crate::jetstream::api::types::requests::{ApiRequest, BodyRule, parse_body};
use crate::jetstream::api::{ApiError, ErrorKind};

/// The drain request subject (a jetraft extension).
const DRAIN_SUBJECT: &str = "$JS.API.SERVER.DRAIN";
/// Response type of a drain request.
pub(super) const DRAIN_RESPONSE: &str = "io.jetraft.api.v1.server_drain_response";
/// How long `/drainz` waits for the meta leader's answer.
const DRAIN_WAIT: Duration = Duration::from_secs(5);

/// `$JS.API.SERVER.DRAIN` request body.
#[derive(Debug, Clone, Default, Deserialize)]
pub(super) struct DrainRequest {
    /// The server to drain: a server name or a node id in hex.
    #[serde(default)]
    peer: String,
    /// True (the default) to drain, false to undo it.
    #[serde(default = "yes")]
    drain: bool,
}

fn yes() -> bool {
    true
}

impl ApiRequest for DrainRequest {
    const GO_TYPE: &'static str = "server.JSApiServerDrainRequest";
}

impl JetStream {
    /// Answers `$JS.API.SERVER.DRAIN` on the meta leader: 10010 when not clustered, 10003 for
    /// a missing body or peer, 10040 for a server that is not a member.
    pub(super) async fn server_drain(&self, msg: &InternalMsg) -> Result<String, ApiError> {
        if !self.clustered() {
            return Err(ApiError::new(ErrorKind::ClusterRequired));
        }
        let req: DrainRequest =
            parse_body(BodyRule::Required, &msg.payload)?.ok_or_else(ApiError::bad_request)?;
        if req.peer.is_empty() {
            return Err(ApiError::bad_request());
        }
        let node = self.meta.read(|m| {
            m.peers()
                .values()
                .find(|p| p.server_name == req.peer || format!("{:x}", p.node_id) == req.peer)
                .map(|p| p.node_id)
        });
        let Some(node) = node else {
            return Err(ApiError::new(ErrorKind::ClusterPeerNotMember));
        };
        let op = meta_command::Op::Drain(Drain {
            node_id: node,
            drained: req.drain,
        });
        meta_answer(self.propose_meta(op).await?)?;
        info!(peer = %req.peer, drained = req.drain, "drain recorded");
        Ok(json!({"type": DRAIN_RESPONSE, "success": true}).to_string())
    }

    /// Whether this node is drained.
    pub fn is_drained(&self) -> bool {
        self.meta.read(|m| m.is_drained(self.node.0))
    }

    /// Drains this node (`drain`) or undoes it, through the meta leader; the answer's JSON, once
    /// this node applied it. Retried for a while when the meta group cannot answer (a leader
    /// change under way).
    pub async fn request_drain(&self, drain: bool) -> Result<Value, ApiError> {
        let deadline = tokio::time::Instant::now() + DRAIN_WAIT;
        loop {
            let answer = self.request_drain_once(drain).await;
            let unavailable = ApiError::new(ErrorKind::ClusterNotAvail).err_code;
            let retry = match &answer {
                Err(e) => e.err_code == unavailable,
                Ok(v) => v["error"]["err_code"] == unavailable,
            };
            if !retry || tokio::time::Instant::now() >= deadline {
                if answer.as_ref().is_ok_and(|v| v["success"] == true) {
                    // Answer once this node's meta replica has it too (what `/drainz` shows).
                    while self.is_drained() != drain && tokio::time::Instant::now() < deadline {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                return answer;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn request_drain_once(&self, drain: bool) -> Result<Value, ApiError> {
        let body = json!({"peer": self.info.server_name, "drain": drain}).to_string();
        let leader = self
            .registry
            .leader(GroupId::META)
            .ok()
            .and_then(|l| l.leader)
            .ok_or_else(|| ApiError::new(ErrorKind::ClusterNotAvail))?;
        let answer = if leader == self.node {
            let msg = InternalMsg::global(DRAIN_SUBJECT.to_string(), None, None, body.into());
            self.server_drain(&msg).await?
        } else {
            let bytes = self
                .ask_with(leader.0, DRAIN_SUBJECT, body.into(), DRAIN_WAIT)
                .await
                .ok_or_else(|| ApiError::new(ErrorKind::ClusterNotAvail))?;
            String::from_utf8_lossy(&bytes).into_owned()
        };
        serde_json::from_str(&answer).map_err(|e| ApiError::store_failed(&e.to_string()))
    }

    /// What `/drainz` reports: whether this node is drained and which leaderships it still
    /// holds.
    pub fn drain_status(&self) -> Value {
        let meta_leader = self.is_meta_leader();
        let mut streams: Vec<String> = self
            .local
            .read()
            .values()
            .filter(|ls| self.registry.leader(ls.group()).is_ok_and(|l| l.is_self))
            .map(|ls| ls.name.clone())
            .collect();
        streams.sort();
        json!({
            "server_name": self.info.server_name,
            "drained": self.is_drained(),
            "meta_leader": meta_leader,
            "stream_leaders": streams,
        })
    }

    /// On a drained node that leads `group`: hands the leadership to a node that is not
    /// drained (if there is one).
    pub(super) async fn hand_off_if_drained(&self, group: GroupId) {
        if !self.is_drained()
            || !self.registry.leader(group).is_ok_and(|l| l.is_self)
            || self.successors(group).is_empty()
        {
            return;
        }
        match self.step_down(group, b"").await {
            Ok(()) => info!(%group, "leadership handed off (drained)"),
            Err(e) => warn!(%group, error = %e, "drained node could not hand off leadership"),
        }
    }
}
