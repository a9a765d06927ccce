//! `$JS.API.META.LEADER.STEPDOWN` and `$JS.API.STREAM.LEADER.STEPDOWN.<stream>` with an
//! optional `{"placement":{"preferred":"<server>"}}` or `{"placement":{"cluster":..,"tags":[..]}}`
//! body, as nats-server 2.11+ answers them (`getStepDownPreferredPlacement`):
//!
//! - `preferred` names a server of the group: 10005 `preferred server "x" is already leader`
//!   when it leads, 10005 `preferred server "x" not known` when it is not a member; cluster and
//!   tags are then not looked at;
//! - otherwise the new leader is a connected member other than this node whose cluster and
//!   tags match (every tag); 10005 `no replacement peer connected` when none does;
//! - no body (or not a JSON object): any other member (jetraft: a drained one last).
//!
//! jetraft also leaves drained nodes (`drain`) out unless named as `preferred`.

use serde::Deserialize;

use super::raft_api_error;
use crate::jetstream::api::types::Placement;
use crate::jetstream::api::types::requests::{ApiRequest, BodyRule, parse_body};
use crate::jetstream::api::{ApiError, ErrorKind};
use crate::jetstream::meta::placement::has_tag;
use crate::jetstream::runtime::JetStream;
use jetraft_raft::{GroupId, NodeId};

/// The step-down request body (`JSApiLeaderStepdownRequest`).
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct StepdownRequest {
    /// Where the new leader should be.
    #[serde(default)]
    pub placement: Option<Placement>,
}

impl ApiRequest for StepdownRequest {
    const GO_TYPE: &'static str = "server.JSApiLeaderStepdownRequest";
}

impl JetStream {
    /// The members of `group` other than this node that may lead it next: connected and not
    /// drained.
    pub(crate) fn successors(&self, group: GroupId) -> Vec<u64> {
        let Ok(raft) = self.registry.raft(group) else {
            return Vec::new();
        };
        let links = self.cluster.as_ref().map(|c| c.peers.snapshot());
        raft.voter_ids()
            .filter(|v| *v != self.node.0)
            .filter(|v| !self.meta.read(|m| m.is_drained(*v)))
            .filter(|v| {
                links.as_ref().is_none_or(|l| {
                    l.get(&crate::cluster::NodeId(*v))
                        .is_some_and(|p| p.is_connected())
                })
            })
            .collect()
    }

    /// The node that should lead `group` next for a step-down request with `body`, or the
    /// request's error.
    fn next_leader(&self, group: GroupId, body: &[u8]) -> Result<u64, ApiError> {
        let req: Option<StepdownRequest> = parse_body(BodyRule::Optional, body)?;
        let placement = req.and_then(|r| r.placement);
        let no_peers = |why: String| ApiError::with_err(ErrorKind::ClusterNoPeers, &why);
        if let Some(p) = placement.as_ref().filter(|p| !p.preferred.is_empty()) {
            let members: Vec<u64> = self
                .registry
                .raft(group)
                .map(|r| r.voter_ids().collect())
                .unwrap_or_default();
            let records = self.peer_records();
            let found = members.iter().copied().find(|id| {
                records
                    .get(id)
                    .is_some_and(|peer| peer.server_name == p.preferred)
            });
            return match found {
                Some(id) if id == self.node.0 => Err(no_peers(format!(
                    "preferred server {:?} is already leader",
                    p.preferred
                ))),
                Some(id) => Ok(id),
                None => Err(no_peers(format!(
                    "preferred server {:?} not known",
                    p.preferred
                ))),
            };
        }
        let Some(placement) = placement else {
            // Any other member, drained ones only when there is nothing else.
            let others = self
                .registry
                .raft(group)
                .map(|r| r.voter_ids().collect::<Vec<_>>());
            return (self.successors(group).into_iter())
                .chain(
                    others
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|v| *v != self.node.0),
                )
                .next()
                .ok_or_else(|| ApiError::new(ErrorKind::ClusterNoPeers));
        };
        let cluster = self.info.cluster_name.clone().unwrap_or_default();
        let records = self.peer_records();
        let fits = |id: &u64| {
            let p = &placement;
            let tags = records.get(id).map(|peer| peer.tags.as_slice());
            (p.cluster.is_empty() || p.cluster == cluster)
                && p.tags.iter().all(|t| has_tag(tags.unwrap_or_default(), t))
        };
        self.successors(group)
            .into_iter()
            .find(fits)
            .ok_or_else(|| no_peers("no replacement peer connected".to_string()))
    }

    /// Hands `group`'s leadership (led here) to the node a step-down request with `body` asks
    /// for.
    pub(crate) async fn step_down(&self, group: GroupId, body: &[u8]) -> Result<(), ApiError> {
        if !self.clustered() {
            return Err(ApiError::new(ErrorKind::ClusterRequired));
        }
        let to = self.next_leader(group, body)?;
        self.registry
            .transfer_leadership(group, NodeId(to))
            .await
            .map_err(raft_api_error)
    }
}
