//! [`ClusterPeers`]: the table of known peer nodes and the state of the links to them, which
//! other parts of the server read (INFO `connect_urls`, monitoring, later cluster formation) and
//! watch for changes.
//!
//! A peer appears when a link to or from it has exchanged `Hello`s and stays in the table when
//! its links drop (marked disconnected), so the table also remembers who the cluster was.

use std::collections::BTreeMap;

use tokio::sync::watch;

use super::identity::NodeId;

/// What this node knows about one peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's permanent id.
    pub node_id: NodeId,
    /// Its server name.
    pub server_name: String,
    /// Its server id of the current run.
    pub server_id: String,
    /// Its client URL (`host:port`), for INFO `connect_urls`.
    pub client_url: String,
    /// Its cluster address (`host:port`), for dialing it.
    pub cluster_addr: String,
    /// Its server tags (`server_tags`), for stream placement.
    pub tags: Vec<String>,
    /// The peer's link to us is up: we receive its interest and messages.
    pub inbound: bool,
    /// Our link to the peer is up: it receives our interest and messages.
    pub outbound: bool,
    /// The peer reported meta-group state in its last `Hello` (cluster formation).
    pub has_meta_state: bool,
}

impl PeerInfo {
    /// Both directions of the link are up.
    pub fn is_connected(&self) -> bool {
        self.inbound && self.outbound
    }
}

/// Which direction of a link changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// The peer dialed us.
    Inbound,
    /// We dialed the peer.
    Outbound,
}

/// The peer table. Cheap to read; [`ClusterPeers::watch`] notifies on every change.
#[derive(Debug)]
pub struct ClusterPeers {
    /// The table; a `watch` so readers get the latest version and can wait for changes.
    tx: watch::Sender<BTreeMap<NodeId, PeerInfo>>,
}

impl Default for ClusterPeers {
    fn default() -> Self {
        Self {
            tx: watch::Sender::new(BTreeMap::new()),
        }
    }
}

impl ClusterPeers {
    /// A copy of the table.
    pub fn snapshot(&self) -> BTreeMap<NodeId, PeerInfo> {
        self.tx.borrow().clone()
    }

    /// A receiver that sees every later change of the table.
    pub fn watch(&self) -> watch::Receiver<BTreeMap<NodeId, PeerInfo>> {
        self.tx.subscribe()
    }

    /// Client URLs of the peers whose links are both up, sorted.
    pub fn connected_client_urls(&self) -> Vec<String> {
        let mut urls: Vec<String> = self
            .tx
            .borrow()
            .values()
            .filter(|p| p.is_connected() && !p.client_url.is_empty())
            .map(|p| p.client_url.clone())
            .collect();
        urls.sort();
        urls.dedup();
        urls
    }

    /// Records that one direction of the link to `info.node_id` went up or down, updating the
    /// peer's identity fields from `info`.
    pub(crate) fn set_link(&self, info: &PeerInfo, dir: Direction, up: bool) {
        self.tx.send_modify(|table| {
            let entry = table.entry(info.node_id).or_insert_with(|| PeerInfo {
                inbound: false,
                outbound: false,
                ..info.clone()
            });
            entry.server_name.clone_from(&info.server_name);
            entry.server_id.clone_from(&info.server_id);
            entry.client_url.clone_from(&info.client_url);
            entry.has_meta_state = info.has_meta_state;
            entry.cluster_addr.clone_from(&info.cluster_addr);
            entry.tags.clone_from(&info.tags);
            match dir {
                Direction::Inbound => entry.inbound = up,
                Direction::Outbound => entry.outbound = up,
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: u64, url: &str) -> PeerInfo {
        PeerInfo {
            node_id: NodeId(id),
            server_name: format!("n{id}"),
            server_id: "NID".into(),
            client_url: url.into(),
            cluster_addr: "127.0.0.1:1".into(),
            tags: Vec::new(),
            inbound: false,
            outbound: false,
            has_meta_state: false,
        }
    }

    #[test]
    fn a_peer_is_connected_only_with_both_directions_up() {
        let peers = ClusterPeers::default();
        let a = info(1, "h:1");
        peers.set_link(&a, Direction::Inbound, true);
        assert!(peers.connected_client_urls().is_empty());
        peers.set_link(&a, Direction::Outbound, true);
        assert_eq!(peers.connected_client_urls(), vec!["h:1".to_string()]);
        peers.set_link(&a, Direction::Inbound, false);
        assert!(peers.connected_client_urls().is_empty());
        let snap = peers.snapshot();
        assert_eq!(snap.len(), 1, "a disconnected peer is remembered");
        assert!(snap[&NodeId(1)].outbound && !snap[&NodeId(1)].inbound);
    }

    #[test]
    fn watchers_see_changes() {
        let peers = ClusterPeers::default();
        let mut rx = peers.watch();
        assert!(!rx.has_changed().unwrap());
        peers.set_link(&info(2, "h:2"), Direction::Outbound, true);
        assert!(rx.has_changed().unwrap());
        assert!(rx.borrow_and_update().contains_key(&NodeId(2)));
    }

    #[test]
    fn a_restarted_peer_updates_its_server_id() {
        let peers = ClusterPeers::default();
        peers.set_link(&info(3, "h:3"), Direction::Inbound, true);
        let mut again = info(3, "h:3");
        again.server_id = "NEW".into();
        peers.set_link(&again, Direction::Inbound, true);
        assert_eq!(peers.snapshot()[&NodeId(3)].server_id, "NEW");
    }
}
