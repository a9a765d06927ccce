//! Core NATS between nodes: links to peers, interest propagation and message forwarding.
//!
//! - [`identity`]: the permanent [`NodeId`] kept in the store dir.
//! - [`peers`]: [`ClusterPeers`], the peer table others read and watch.
//! - [`interest`]: pure counting of local and remote interest.
//! - [`outbound`]: [`outbound::PeerSender`], the batched, bounded send side of a link.
//! - [`link`]: dialing peers (reconnect with backoff forever) and the `NodeLink` service that
//!   accepts their links.
//! - [`listener`]: the tonic server on the cluster port; other node-to-node services (Raft)
//!   are added to the same router there.
//!
//! Links: each node dials every peer it knows (from `--routes`, back to any node that dialed it,
//! and every peer a member of an existing cluster names in its `Hello`: route gossip, so a node
//! that joins through one seed links to all members), and sends its `Hello`, interest and forwarded messages only on the call it dialed; it
//! receives a peer's on the call the peer dialed. A node listed in its own routes recognises
//! itself by node id in the `Hello` and stops dialing that address; peers with another cluster
//! name are refused. Forwarding is one hop (full mesh, as nats-server routes): a message that
//! arrived from a peer is only delivered locally.
//!
//! Lock order: `local` (this node's interest) may be held while taking `senders` and a
//! sender's queue lock; `remote` may be held while calling into the sublist. The sublist never
//! calls back here.

pub mod identity;
pub mod interest;
pub mod link;
pub mod listener;
pub mod outbound;
pub mod peers;
pub mod security;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use jetraft_proto::cluster::{InterestChange, Msg};
use jetraft_proto::node::NodeIdentity;
use parking_lot::{Mutex, RwLock};
use tracing::debug;

use crate::bus::{Bus, PeerLinks, SubRef, account_from_wire, wire_account};

pub use identity::NodeId;
pub use peers::{ClusterPeers, PeerInfo};

use interest::{InterestKey, LocalInterest, RemoteInterest, Transition};
use outbound::PeerSender;

/// Counters of the cluster layer.
#[derive(Debug, Default)]
pub struct ClusterStats {
    /// Messages forwarded to peers (one per peer per message).
    pub forwarded_msgs: AtomicU64,
    /// Messages received from peers.
    pub received_msgs: AtomicU64,
    /// Messages dropped because the peer's link was down or its queue full.
    pub dropped_msgs: Arc<AtomicU64>,
}

/// The cluster state shared by the server, the link tasks and the `NodeLink` service.
#[derive(Debug)]
pub struct ClusterState {
    /// Who this node is, as sent in `Hello`.
    pub identity: NodeIdentity,
    /// The peer table.
    pub peers: ClusterPeers,
    /// Counters.
    pub stats: ClusterStats,
    /// This node's client interest; the source of snapshots and deltas.
    local: Mutex<LocalInterest>,
    /// Send sides of the outbound links that are up, by peer.
    senders: RwLock<HashMap<NodeId, Arc<PeerSender>>>,
    /// Interest announced by each peer on its current inbound link.
    remote: Mutex<HashMap<NodeId, RemoteInterest>>,
    /// Source of inbound link session numbers.
    next_session: AtomicU64,
    /// Whether this node has meta-group state (sent in `Hello` for cluster formation).
    has_meta_state: std::sync::atomic::AtomicBool,
    /// Addresses with a running dial loop, and the peer each turned out to be (once known).
    pub(crate) dialers: Mutex<HashMap<String, Option<NodeId>>>,
    /// Per dial-loop address, what cuts its reconnect backoff short.
    pub(crate) dial_wakes: Mutex<HashMap<String, Arc<tokio::sync::Notify>>>,
    /// Notified whenever a link to a peer went up or down (see [`Self::links_changed`]).
    changed: tokio::sync::Notify,
}

/// What the cluster layer's tasks need from the node.
#[derive(Debug, Clone)]
pub struct ClusterContext {
    /// Where messages forwarded by peers go (and whose sublist holds peers' interest).
    pub bus: Bus,
    /// The links, peers and interest.
    pub cluster: Arc<ClusterState>,
    /// Link tasks, awaited at shutdown.
    pub tasks: tokio_util::task::TaskTracker,
    /// Cancelled on shutdown.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// TLS and route credentials of the links this node dials.
    pub security: jetraft_raft::network::grpc::LinkSecurity,
    /// This node as message trace events name it.
    pub node: Arc<crate::node::NodeInfo>,
    /// Whether JetStream runs here (trace events say so).
    pub jetstream: bool,
}

impl PeerLinks for ClusterState {
    fn peer_name(&self, node: NodeId) -> Option<String> {
        self.peers
            .snapshot()
            .get(&node)
            .map(|p| p.server_name.clone())
    }

    fn forward(&self, node: NodeId, msg: Msg) {
        ClusterState::forward(self, node, msg);
    }

    fn has_outbound(&self, node: NodeId) -> bool {
        ClusterState::has_outbound(self, node)
    }

    fn local_subscribed(&self, account: &str, subject: &str, queue: Option<&str>) {
        self.local_changed(account, subject, queue, true);
    }

    fn local_unsubscribed(&self, account: &str, subject: &str, queue: Option<&str>) {
        self.local_changed(account, subject, queue, false);
    }
}

impl ClusterState {
    /// Cluster state for a node with this identity and no links yet.
    pub fn new(identity: NodeIdentity) -> Self {
        Self {
            identity,
            peers: ClusterPeers::default(),
            stats: ClusterStats::default(),
            local: Mutex::new(LocalInterest::default()),
            senders: RwLock::new(HashMap::new()),
            remote: Mutex::new(HashMap::new()),
            next_session: AtomicU64::new(1),
            dialers: Mutex::new(HashMap::new()),
            dial_wakes: Mutex::new(HashMap::new()),
            has_meta_state: std::sync::atomic::AtomicBool::new(false),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// Records that a link to a peer went up or down; [`Self::wait_links_changed`] returns.
    pub fn links_changed(&self) {
        self.changed.notify_one();
    }

    /// Waits until a link went up or down since the last call returned (a change made while
    /// nobody waited is not lost).
    pub async fn wait_links_changed(&self) {
        self.changed.notified().await;
    }

    /// Whether this node has meta-group state, as announced to peers.
    pub fn has_meta_state(&self) -> bool {
        self.has_meta_state.load(Ordering::Relaxed)
    }

    /// Records whether this node has meta-group state (announced on new links). When it just
    /// got it, a fresh `Hello` goes out on every link that is up: a peer that linked while this
    /// node had none ignored its route gossip then, and follows it now.
    pub fn set_has_meta_state(&self, has: bool) {
        let had = self.has_meta_state.swap(has, Ordering::Relaxed);
        if has && !had {
            let hello = link::hello(self);
            for s in self.senders.read().values() {
                s.push_hello(hello.clone());
            }
        }
    }

    /// Ends the reconnect backoff of the dial loops that reach `node` (or `addr`, before the
    /// loop learned whose address it is) when no outbound link to `node` is up: the peer just
    /// linked to us, so it is listening, and what we send it is dropped until our link exists.
    pub(crate) fn redial(&self, node: NodeId, addr: &str) {
        if self.has_outbound(node) {
            return;
        }
        let addrs: Vec<String> = self
            .dialers
            .lock()
            .iter()
            .filter(|(a, n)| **n == Some(node) || (n.is_none() && a.as_str() == addr))
            .map(|(a, _)| a.clone())
            .collect();
        let wakes = self.dial_wakes.lock();
        for a in addrs {
            if let Some(w) = wakes.get(&a) {
                w.notify_one();
            }
        }
    }

    /// How many other nodes this node expects to hear from: one per route address not (yet)
    /// identified, plus each distinct identified peer. Routes that turned out to be this node
    /// are dropped from the dial table, so they do not count.
    pub fn expected_peers(&self) -> usize {
        let dialers = self.dialers.lock();
        let unknown = dialers.values().filter(|d| d.is_none()).count();
        let known: std::collections::BTreeSet<NodeId> =
            dialers.values().flatten().copied().collect();
        unknown + known.len()
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        NodeId(self.identity.node_id)
    }

    /// The cluster name links must agree on.
    pub fn cluster_name(&self) -> &str {
        &self.identity.cluster_name
    }

    /// A local client subscribed in the global account: tell peers if the pattern is new on
    /// this node.
    pub fn local_subscribed(&self, subject: &str, queue: Option<&str>) {
        self.local_changed(crate::config::GLOBAL_ACCOUNT, subject, queue, true);
    }

    /// A local client subscription in the global account went away: tell peers if it was the
    /// last on the pattern.
    pub fn local_unsubscribed(&self, subject: &str, queue: Option<&str>) {
        self.local_changed(crate::config::GLOBAL_ACCOUNT, subject, queue, false);
    }

    fn local_changed(&self, account: &str, subject: &str, queue: Option<&str>, added: bool) {
        let key: InterestKey = (
            wire_account(account).to_string(),
            subject.to_string(),
            queue.map(str::to_string),
        );
        let mut local = self.local.lock();
        let t = if added {
            local.add(key.clone())
        } else {
            local.remove(&key)
        };
        if let Some(t) = t {
            for s in self.senders.read().values() {
                s.push_interest(key.clone(), t.delta());
            }
        }
    }

    /// Registers the send side of a new outbound link, with this node's interest snapshot as
    /// its first content. Returns `false` when a link to that peer is already up.
    pub(crate) fn register_sender(&self, node: NodeId, sender: &Arc<PeerSender>) -> bool {
        let local = self.local.lock();
        let mut senders = self.senders.write();
        if senders.contains_key(&node) {
            return false;
        }
        sender.set_snapshot(local.keys());
        senders.insert(node, sender.clone());
        true
    }

    /// Removes the send side of an outbound link that ended (if it is still the registered one).
    pub(crate) fn unregister_sender(&self, node: NodeId, sender: &Arc<PeerSender>) {
        let mut senders = self.senders.write();
        if senders.get(&node).is_some_and(|s| Arc::ptr_eq(s, sender)) {
            senders.remove(&node);
        }
        sender.closed.cancel();
    }

    /// Whether an outbound link to `node` is up.
    pub fn has_outbound(&self, node: NodeId) -> bool {
        self.senders.read().contains_key(&node)
    }

    /// Queues `msg` for `node`; counts a drop when its link is down or its queue full.
    pub fn forward(&self, node: NodeId, msg: Msg) {
        let sender = self.senders.read().get(&node).cloned();
        match sender {
            Some(s) => {
                if s.push_msg(msg) {
                    self.stats.forwarded_msgs.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => {
                self.stats.dropped_msgs.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Starts a new inbound session from `node`, dropping whatever an older session announced.
    pub(crate) fn remote_begin(&self, node: NodeId, bus: &Bus) -> u64 {
        let session = self.next_session.fetch_add(1, Ordering::Relaxed);
        let mut remote = self.remote.lock();
        if let Some(mut old) = remote.insert(node, RemoteInterest::new(session)) {
            remove_all(node, &mut old, bus);
        }
        session
    }

    /// Applies interest changes from `node`'s session `session` to the sublist. A snapshot
    /// replaces everything that session announced before.
    pub(crate) fn remote_apply(
        &self,
        node: NodeId,
        session: u64,
        snapshot: bool,
        changes: Vec<InterestChange>,
        bus: &Bus,
    ) {
        let mut remote = self.remote.lock();
        let Some(table) = remote.get_mut(&node).filter(|t| t.session == session) else {
            return;
        };
        if snapshot {
            remove_all(node, table, bus);
        }
        for c in changes {
            let queue = (!c.queue.is_empty()).then_some(c.queue);
            let key = (c.account, c.subject, queue);
            let Some(t) = table.apply(key.clone(), c.delta) else {
                continue;
            };
            let (account, subject, queue) = &key;
            let ns = bus.namespace(account_from_wire(account));
            let sublist = &ns.sublist;
            match t {
                Transition::Added => {
                    if let Err(e) = sublist.insert(subject, queue.as_deref(), SubRef::Remote(node))
                    {
                        debug!(peer = %node, error = %e, "peer announced an invalid subject");
                        table.apply(key.clone(), -c.delta);
                    }
                }
                Transition::Removed => {
                    sublist.remove(subject, queue.as_deref(), &SubRef::Remote(node));
                }
            }
        }
    }

    /// Ends `node`'s inbound session `session`: its interest leaves the sublist.
    /// Returns whether `session` was `node`'s current inbound session (an older one that ends
    /// after a newer one began changes nothing).
    pub(crate) fn remote_end(&self, node: NodeId, session: u64, bus: &Bus) -> bool {
        let mut remote = self.remote.lock();
        if remote.get(&node).is_some_and(|t| t.session == session)
            && let Some(mut old) = remote.remove(&node)
        {
            remove_all(node, &mut old, bus);
            return true;
        }
        false
    }
}

fn remove_all(node: NodeId, table: &mut RemoteInterest, bus: &Bus) {
    for (account, subject, queue) in table.drain() {
        bus.namespace(account_from_wire(&account)).sublist.remove(
            &subject,
            queue.as_deref(),
            &SubRef::Remote(node),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> ClusterState {
        ClusterState::new(NodeIdentity {
            node_id: 1,
            cluster_name: "c".into(),
            ..NodeIdentity::default()
        })
    }

    fn change(s: &str, q: &str, delta: i32) -> InterestChange {
        InterestChange {
            subject: s.into(),
            queue: q.into(),
            delta,
            account: String::new(),
        }
    }

    #[test]
    fn remote_interest_enters_and_leaves_the_sublist() {
        let st = state();
        let bus = Bus::new(None);
        let sl = bus.sublist();
        let peer = NodeId(9);
        let s1 = st.remote_begin(peer, &bus);
        st.remote_apply(
            peer,
            s1,
            true,
            vec![change("a.*", "", 1), change("b", "q", 1)],
            &bus,
        );
        assert_eq!(sl.match_subject("a.x").plain, vec![SubRef::Remote(peer)]);
        assert_eq!(
            sl.match_subject("b").queues[0].members,
            vec![SubRef::Remote(peer)]
        );
        st.remote_apply(peer, s1, false, vec![change("a.*", "", -1)], &bus);
        assert!(sl.match_subject("a.x").is_empty());
        // A new session (reconnect) starts from nothing; the old session's frames are ignored.
        let s2 = st.remote_begin(peer, &bus);
        assert!(sl.match_subject("b").is_empty());
        st.remote_apply(peer, s1, false, vec![change("c", "", 1)], &bus);
        assert!(sl.match_subject("c").is_empty());
        st.remote_apply(peer, s2, true, vec![change("c", "", 1)], &bus);
        st.remote_end(peer, s1, &bus);
        assert_eq!(sl.count(), 1, "ending a stale session changes nothing");
        st.remote_end(peer, s2, &bus);
        assert_eq!(sl.count(), 0);
    }

    #[test]
    fn a_snapshot_replaces_earlier_interest() {
        let st = state();
        let bus = Bus::new(None);
        let sl = bus.sublist();
        let peer = NodeId(2);
        let s = st.remote_begin(peer, &bus);
        st.remote_apply(peer, s, true, vec![change("old", "", 1)], &bus);
        st.remote_apply(peer, s, true, vec![change("new", "", 1)], &bus);
        assert!(sl.match_subject("old").is_empty());
        assert!(!sl.match_subject("new").is_empty());
    }

    #[test]
    fn local_changes_reach_registered_senders_as_presence() {
        let st = state();
        st.local_subscribed("x", None);
        let sender = Arc::new(PeerSender::new(Arc::default()));
        assert!(st.register_sender(NodeId(5), &sender));
        assert!(!st.register_sender(NodeId(5), &Arc::new(PeerSender::new(Arc::default()))));
        assert!(st.has_outbound(NodeId(5)));
        st.local_subscribed("x", None);
        st.local_unsubscribed("x", None);
        let msg = crate::bus::Msg::new("x", b"hi").to_wire(Vec::new());
        st.forward(NodeId(5), msg.clone());
        st.forward(NodeId(6), msg);
        assert_eq!(st.stats.forwarded_msgs.load(Ordering::Relaxed), 1);
        assert_eq!(st.stats.dropped_msgs.load(Ordering::Relaxed), 1);
        st.unregister_sender(NodeId(5), &sender);
        assert!(!st.has_outbound(NodeId(5)));
        assert!(sender.closed.is_cancelled());
    }

    #[test]
    fn frames_of_nodes_without_accounts_decode_into_the_global_account() {
        use prost::Message as _;
        // `Msg { subject: "a", payload: "x" }` and `InterestChange { subject: "s", delta: 1 }`
        // as a node before the `account` fields encodes them.
        let msg = Msg::decode(&[0x0a, 0x01, b'a', 0x22, 0x01, b'x'][..]).unwrap();
        assert_eq!(
            account_from_wire(&msg.account),
            crate::config::GLOBAL_ACCOUNT
        );
        let change = InterestChange::decode(&[0x0a, 0x01, b's', 0x18, 0x02][..]).unwrap();
        assert_eq!((change.subject.as_str(), change.delta), ("s", 1));
        assert_eq!(
            account_from_wire(&change.account),
            crate::config::GLOBAL_ACCOUNT
        );
        // And the global account is sent as nothing, so older nodes read it as before.
        let wire = crate::bus::Msg::new("a", b"x").to_wire(Vec::new());
        assert!(wire.account.is_empty());
        assert_eq!(
            wire.encode_to_vec(),
            vec![0x0a, 0x01, b'a', 0x22, 0x01, b'x']
        );
        let other = crate::bus::Msg::new("a", b"x")
            .in_account("A")
            .to_wire(Vec::new());
        assert_eq!(other.account, "A");
    }

    #[test]
    fn remote_interest_lands_in_its_accounts_sublist() {
        let st = state();
        let bus = Bus::new(None);
        let peer = NodeId(3);
        let s = st.remote_begin(peer, &bus);
        let mut c = change("x", "", 1);
        c.account = "A".into();
        st.remote_apply(peer, s, true, vec![c], &bus);
        assert!(bus.sublist().match_subject("x").is_empty(), "not in $G");
        assert_eq!(
            bus.namespace("A").sublist.match_subject("x").plain,
            vec![SubRef::Remote(peer)]
        );
        st.remote_end(peer, s, &bus);
        assert!(bus.namespace("A").sublist.match_subject("x").is_empty());
    }
}
