//! Cluster formation and meta membership, driven by the cluster layer's peer table.
//!
//! Every node runs [`JetStream::membership_loop`]: while it has no meta state it applies the
//! formation rule ([`formation::decide`]); once the meta group exists, the meta leader admits
//! every connected peer (learner first, then voter), records it in the meta peers, and retires
//! the old id of a node that came back under a new id after losing its data (same server name).
//! Retired ids (those and the ones `$JS.API.SERVER.REMOVE` retired, see `server_remove`) are
//! never admitted again; their stream replicas move to other voters and, once no stream names
//! them, they leave the meta group's voters. Voter changes hold `JetStream::meta_members`.
//! Link state also feeds the Raft registry: a peer whose links both dropped is reported
//! unreachable, so the groups it led elect a new leader without waiting out timeouts.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jetraft_proto::meta::{MetaCommand, Peer, meta_command};
use jetraft_raft::{GroupId, NodeId, PeerNode, RemovedVoters};
use prost::Message;
use tracing::{info, warn};

use super::JetStream;
use crate::cluster::{ClusterState, PeerInfo};
use crate::jetstream::meta::formation::{self, Formation, PeerStatus};

/// Re-evaluation period when nothing changes (retries failed steps).
const TICK: Duration = Duration::from_secs(1);

/// A file in the store dir that marks a node whose damaged store was moved aside
/// (`server::store_repair`): it only joins a cluster whose meta group exists and never forms a
/// new one. Had every node of a cluster moved its store aside at once (say, a bug that made
/// sound files read as damaged), they would otherwise form a new, empty cluster and leave the
/// data only in the moved-aside stores.
pub const JOIN_ONLY_FILE: &str = "join_only";

impl JetStream {
    /// Forms or joins the cluster and keeps the meta membership in step with the live peers.
    pub async fn membership_loop(self: Arc<Self>, cluster: Arc<ClusterState>) {
        let mut rx = cluster.peers.watch();
        // Each peer's server id (new on every start), to notice a restart even when its links
        // came back before this loop saw them down.
        let mut runs: BTreeMap<u64, String> = BTreeMap::new();
        let join_only = self
            .config
            .jetstream
            .store_dir
            .join(JOIN_ONLY_FILE)
            .exists();
        if join_only {
            info!("this node's store was repaired: it joins the existing cluster only");
        }
        loop {
            let peers = cluster.peers.snapshot();
            for p in peers.values() {
                // A peer with neither link direction up is taken as gone (its process died or
                // its node is cut off): the groups it leads elect at once (see
                // `GroupRegistry::set_peer_reachable`).
                let peer = NodeId(p.node_id.0);
                self.registry
                    .set_peer_reachable(peer, p.inbound || p.outbound);
                let run = runs
                    .entry(p.node_id.0)
                    .or_insert_with(|| p.server_id.clone());
                if *run != p.server_id {
                    run.clone_from(&p.server_id);
                    self.registry.peer_restarted(peer);
                }
            }
            let has_state = self.has_meta_state().await;
            cluster.set_has_meta_state(has_state);
            if has_state {
                self.admit_peers(&peers).await;
            } else if !join_only {
                self.try_form(&peers, cluster.expected_peers()).await;
            }
            tokio::select! {
                () = self.cancel.cancelled() => break,
                changed = rx.changed() => if changed.is_err() { break },
                () = tokio::time::sleep(TICK) => {}
            }
        }
    }

    async fn try_form(&self, peers: &BTreeMap<crate::cluster::NodeId, PeerInfo>, expected: usize) {
        let heard: Vec<PeerStatus> = peers
            .values()
            .filter(|p| p.is_connected())
            .map(|p| PeerStatus {
                node_id: p.node_id.0,
                has_meta_state: p.has_meta_state,
            })
            .collect();
        let Formation::Initialize(ids) = formation::decide(self.node.0, false, expected, &heard)
        else {
            return;
        };
        let mut voters = BTreeMap::new();
        for id in ids {
            let addr = if id == self.node.0 {
                self.cluster_addr.clone()
            } else {
                match peers.get(&crate::cluster::NodeId(id)) {
                    Some(p) => p.cluster_addr.clone(),
                    None => return,
                }
            };
            if id != self.node.0 {
                self.transport.add_peer(NodeId(id), &addr);
            }
            voters.insert(NodeId(id), PeerNode::new(addr));
        }
        info!(voters = voters.len(), "forming the cluster");
        self.initialize_meta(voters).await;
    }

    /// On the meta leader: record and admit connected peers; retire replaced ids.
    async fn admit_peers(&self, peers: &BTreeMap<crate::cluster::NodeId, PeerInfo>) {
        let Ok(leader) = self.registry.leader(GroupId::META) else {
            return;
        };
        if !leader.is_self {
            return;
        }
        let Ok(raft) = self.registry.raft(GroupId::META) else {
            return;
        };
        let known = self.meta.read(|m| m.peers().clone());
        for p in peers.values().filter(|p| p.is_connected()) {
            let id = p.node_id.0;
            // Read per peer: an earlier peer of this pass may just have become a voter, and
            // the next voter set must keep it.
            let voters: BTreeSet<u64> = raft.voter_ids().collect();
            if self.meta.read(|m| m.is_retired(id)) {
                continue;
            }
            let record = Peer {
                node_id: id,
                server_name: p.server_name.clone(),
                cluster_addr: p.cluster_addr.clone(),
                client_url: p.client_url.clone(),
                tags: p.tags.clone(),
            };
            if known.get(&id) != Some(&record) {
                self.propose_peer(meta_command::Op::AddPeer(record)).await;
            }
            if voters.contains(&id) {
                continue;
            }
            // A node that lost its data comes back with a new id and the same name: its old
            // id leaves the group and is retired for good.
            // The old id is found by name in the meta peer records, or, when it died before
            // its record was proposed (right after formation), in this node's link table.
            let replaced: Vec<u64> = known
                .values()
                .filter(|k| k.server_name == p.server_name && k.node_id != id)
                .map(|k| k.node_id)
                .chain(
                    peers
                        .values()
                        .filter(|q| q.server_name == p.server_name && q.node_id.0 != id)
                        .map(|q| q.node_id.0),
                )
                .collect::<BTreeSet<u64>>()
                .into_iter()
                .filter(|old| !self.meta.read(|m| m.is_retired(*old)))
                .collect();
            // Retire the old id first: from then on its stream replicas count as lost (and
            // are reassigned), and the newcomer's /healthz waits for that repair.
            for old in &replaced {
                self.propose_peer(meta_command::Op::RemovePeer(*old)).await;
                info!(old, new = id, "replaced node id retired");
            }
            self.transport.add_peer(NodeId(id), &p.cluster_addr);
            let _changing = self.meta_members.lock().await;
            // The new id of a node that lost its data takes its old id's place as a voter at
            // once (see `peer_remove::replaces_dead_voters`); a new node catches up first.
            let peer = PeerNode::new(p.cluster_addr.clone());
            let added = if replaced.iter().any(|old| voters.contains(old)) {
                (self.registry)
                    .add_learner_now(GroupId::META, NodeId(id), peer)
                    .await
            } else {
                (self.registry)
                    .add_learner(GroupId::META, NodeId(id), peer)
                    .await
            };
            if let Err(e) = added {
                warn!(peer = id, error = %e, "adding peer as learner failed");
                continue;
            }
            let mut next: BTreeSet<NodeId> = voters
                .iter()
                .filter(|v| !replaced.contains(v) && !self.meta.read(|m| m.is_retired(**v)))
                .map(|v| NodeId(*v))
                .collect();
            next.insert(NodeId(id));
            match self
                .registry
                .change_voters(GroupId::META, next, RemovedVoters::Remove)
                .await
            {
                Ok(()) => info!(peer = id, name = %p.server_name, "peer joined the meta group"),
                Err(e) => {
                    warn!(peer = id, error = %e, "promoting peer to voter failed");
                    continue;
                }
            }
        }
        self.evacuate_retired(false).await;
        self.drop_retired_voters().await;
    }

    async fn propose_peer(&self, op: meta_command::Op) {
        let cmd = MetaCommand { op: Some(op) };
        if let Err(e) = self
            .registry
            .propose(GroupId::META, cmd.encode_to_vec().into())
            .await
        {
            warn!(error = %e, "meta peer update failed");
        }
    }
}
