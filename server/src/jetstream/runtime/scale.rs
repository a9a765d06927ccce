//! Where a stream's replicas go when STREAM.CREATE places it and when STREAM.UPDATE changes
//! its `num_replicas` or its `placement` (answered by the meta leader, as nats-server's
//! `jsClusteredStreamUpdateRequest`):
//!
//! - a new replica count and a new placement in one update: 400/10123;
//! - more replicas: the least loaded fitting nodes without a replica join (recorded as
//!   `joining`: the stream's leader adds them as learners, which catch up by snapshot and log,
//!   then makes them voters, `peer_remove::drive_membership`); too few: 400/10005 with the
//!   placement's reasons;
//! - fewer replicas: followers leave, the leader stays (a leader that must go hands its
//!   leadership to a staying voter first);
//! - a new placement: replicas that fit stay, the others are replaced by fitting nodes.

use std::collections::BTreeMap;

use jetraft_proto::meta::{Peer, StreamAssignment};

use super::JetStream;
use crate::jetstream::api::types::StreamConfig;
use crate::jetstream::api::{ApiError, ErrorKind};
use crate::jetstream::meta::placement::{self, Fit};

/// How long the meta leader asks a stream's replica who leads it before shrinking.
const LEADER_ASK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl JetStream {
    /// The nodes among `among` that fit `cfg`'s placement (tags and cluster name). A single
    /// server ignores placement, as nats-server does outside a cluster.
    pub(crate) fn fitting(&self, cfg: &StreamConfig, among: &[u64]) -> Fit {
        let cluster = self.info.cluster_name.clone().unwrap_or_default();
        let placement = if self.clustered() {
            cfg.placement.as_ref()
        } else {
            None
        };
        placement::fitting(&self.peer_records(), among, &cluster, placement)
    }

    /// Every node's record (name, tags): the meta peers, this node as it is now, and for nodes
    /// the meta leader has not recorded yet (just after the cluster formed) the cluster layer's
    /// table.
    pub(crate) fn peer_records(&self) -> BTreeMap<u64, Peer> {
        let mut records = self.meta.read(|m| m.peers().clone());
        if let Some(cluster) = &self.cluster {
            for p in cluster.peers.snapshot().into_values() {
                records.entry(p.node_id.0).or_insert_with(|| Peer {
                    node_id: p.node_id.0,
                    server_name: p.server_name,
                    cluster_addr: p.cluster_addr,
                    client_url: p.client_url,
                    tags: p.tags,
                });
            }
        }
        records.insert(self.node.0, self.self_peer());
        records
    }

    /// `count` least loaded voters that fit `cfg`'s placement, hold no replica in `existing`
    /// and are not retired, or nats-server's no-placement error.
    pub(crate) fn pick_new(
        &self,
        cfg: &StreamConfig,
        existing: &[u64],
        count: usize,
    ) -> Result<Vec<u64>, ApiError> {
        if count == 0 {
            return Ok(Vec::new());
        }
        // A removed server (SERVER.REMOVE) stays a voter until its replicas moved off: it
        // takes no new ones.
        let voters = self.voters();
        let candidates: Vec<u64> = self.meta.read(|m| {
            (voters.into_iter())
                .filter(|v| !existing.contains(v) && !m.is_retired(*v))
                .collect()
        });
        let fit = self.fitting(cfg, &candidates);
        self.meta
            .read(|m| m.place(count, &fit.nodes))
            .ok_or_else(|| fit.error())
    }

    /// The assignment `sa` updated from config `old` to `new`: its replicas and joining nodes
    /// follow a changed replica count or placement; the config itself is the caller's.
    pub(crate) async fn replicas_for_update(
        &self,
        sa: &StreamAssignment,
        old: &StreamConfig,
        new: &StreamConfig,
    ) -> Result<StreamAssignment, ApiError> {
        let moved = new.placement.is_some() && new.placement != old.placement;
        let rescaled = new.num_replicas != old.num_replicas;
        if moved && rescaled {
            return Err(ApiError::new(ErrorKind::StreamMoveAndScale));
        }
        let want = usize::try_from(new.num_replicas.max(1)).unwrap_or(1);
        let current = &sa.replicas;
        let replicas = if rescaled && want > current.len() {
            let added = self.pick_new(new, current, want - current.len())?;
            placement::rescale(current, None, want, &added)
        } else if rescaled && want < current.len() {
            let leader = self.stream_leader(sa).await;
            placement::rescale(current, leader, want, &[])
        } else if moved {
            let staying = self.fitting(new, current).nodes;
            let added = self.pick_new(new, current, want.saturating_sub(staying.len()))?;
            Some(staying.into_iter().chain(added).take(want).collect())
        } else {
            None
        };
        let Some(replicas) = replicas.filter(|r| r != current) else {
            return Ok(sa.clone());
        };
        // New replicas join the running group (they never initialise it themselves).
        let joining = (replicas.iter().copied())
            .filter(|n| sa.joining.contains(n) || !current.contains(n))
            .collect();
        Ok(StreamAssignment {
            replicas,
            joining,
            ..sa.clone()
        })
    }

    /// The node leading stream `sa`'s group: seen here when a replica runs here, else asked of
    /// its first replica. `None` when unknown.
    async fn stream_leader(&self, sa: &StreamAssignment) -> Option<u64> {
        if let Some(ls) = self.local_stream(&sa.name)
            && let Ok(info) = self.registry.leader(ls.group())
            && let Some(l) = info.leader
        {
            return Some(l.0);
        }
        let first = *sa.replicas.first()?;
        let deadline = tokio::time::Instant::now() + LEADER_ASK_WAIT;
        let info = self.info_from(first, &sa.name, deadline, |_| true).await?;
        let name = info.cluster?.leader;
        (self.peer_records().into_values())
            .find(|p| p.server_name == name)
            .map(|p| p.node_id)
    }
}
