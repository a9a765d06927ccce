//! The node-to-node message links of an in-process cluster: a [`PeerLinks`] per node over one
//! shared [`Hub`], in place of the gRPC `NodeLink` streams of `crate::cluster`.
//!
//! What the cluster layer does between processes, the hub does between buses:
//! - a forwarded message is routed on the target's bus as [`Origin::Peer`], so it reaches the
//!   target's local subscribers and internal subscribers that take peers' messages (JetStream's
//!   node inboxes), exactly as `cluster::link::run_inbound` routes a received batch;
//! - client interest is propagated by presence: the first local subscription on a pattern puts
//!   `SubRef::Remote(node)` into every other running node's sublist, the last one removes it
//!   (the same counting as `cluster::interest::LocalInterest`);
//! - a link is up when both nodes run and the [`MemNetwork`] (the Raft wire of the same test)
//!   does not cut them apart, so one `partition`/`isolate` call cuts Raft and messages alike.
//!
//! Differences from the real links, on purpose: delivery is synchronous (the target's `route`
//! runs inside the sender's `forward`, so messages between two nodes keep their order and no
//! task is needed), and interest stays in a peer's sublist while a partition lasts (the real
//! layer drops it with the link); a forward over a cut link is dropped either way.
//!
//! Lock order: `interest` before `buses`; the sublists never call back.

use std::collections::BTreeMap;
use std::sync::Arc;

use jetraft_raft::NodeId;
use jetraft_raft::network::mem::MemNetwork;
use parking_lot::{Mutex, RwLock};

use crate::bus::{Bus, FlushSet, Msg, Origin, PeerLinks, SubRef};
use crate::cluster::interest::{InterestKey, LocalInterest, Transition};

/// What the nodes of one in-process cluster share: their buses and client interest.
#[derive(Debug)]
pub(crate) struct Hub {
    /// Link state (partitions, isolation), shared with the Raft transport.
    net: MemNetworkRef,
    /// The bus of every running node.
    buses: RwLock<BTreeMap<NodeId, Bus>>,
    /// Each running node's client subscriptions, counted per pattern.
    interest: Mutex<BTreeMap<NodeId, LocalInterest>>,
}

/// [`MemNetwork`] has no `Debug`; this wrapper gives the hub one.
struct MemNetworkRef(MemNetwork);

impl std::fmt::Debug for MemNetworkRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemNetwork")
    }
}

impl Hub {
    /// A hub whose links follow `net`'s partitions.
    pub(crate) fn new(net: MemNetwork) -> Self {
        Self {
            net: MemNetworkRef(net),
            buses: RwLock::new(BTreeMap::new()),
            interest: Mutex::new(BTreeMap::new()),
        }
    }

    /// Puts `node`'s bus on the hub (a node starting): it learns the other nodes' interest.
    pub(crate) fn attach(&self, node: NodeId, bus: Bus) {
        let interest = self.interest.lock();
        for (other, keys) in interest.iter().filter(|(n, _)| **n != node) {
            for (_, subject, queue) in keys.keys() {
                insert_remote(&bus, *other, subject, queue.as_deref());
            }
        }
        self.buses.write().insert(node, bus);
    }

    /// Takes `node` off the hub (a node stopping): its interest leaves the other nodes'
    /// sublists, and messages to it are dropped.
    pub(crate) fn detach(&self, node: NodeId) {
        let mut interest = self.interest.lock();
        let keys: Vec<InterestKey> = interest
            .remove(&node)
            .map(|l| l.keys().cloned().collect())
            .unwrap_or_default();
        let mut buses = self.buses.write();
        buses.remove(&node);
        for bus in buses.values() {
            for (_, subject, queue) in &keys {
                bus.sublist()
                    .remove(subject, queue.as_deref(), &SubRef::Remote(node));
            }
        }
    }

    /// Forgets every bus (the cluster is dropped): a bus holds its links, which hold the hub,
    /// so this breaks the cycle.
    pub(crate) fn clear(&self) {
        self.interest.lock().clear();
        self.buses.write().clear();
    }

    /// The bus of `to` when the link `from`-`to` is up.
    fn linked_bus(&self, from: NodeId, to: NodeId) -> Option<Bus> {
        if !self.net.0.is_linked(from, to) {
            return None;
        }
        self.buses.read().get(&to).cloned()
    }

    fn local_changed(&self, node: NodeId, subject: &str, queue: Option<&str>, added: bool) {
        let key: InterestKey = (
            String::new(),
            subject.to_string(),
            queue.map(str::to_string),
        );
        let mut interest = self.interest.lock();
        let local = interest.entry(node).or_default();
        let transition = if added {
            local.add(key)
        } else {
            local.remove(&key)
        };
        let buses = self.buses.read();
        let others = buses.iter().filter(|(n, _)| **n != node);
        match transition {
            Some(Transition::Added) => {
                for (_, bus) in others {
                    insert_remote(bus, node, subject, queue);
                }
            }
            Some(Transition::Removed) => {
                for (_, bus) in others {
                    bus.sublist().remove(subject, queue, &SubRef::Remote(node));
                }
            }
            None => {}
        }
    }
}

fn insert_remote(bus: &Bus, node: NodeId, subject: &str, queue: Option<&str>) {
    // The subject was valid on the subscribing node, so it is valid here too.
    let _ = bus.sublist().insert(subject, queue, SubRef::Remote(node));
}

/// One node's links to the others over the [`Hub`].
#[derive(Debug)]
pub(crate) struct NodeLinks {
    /// The node these links belong to.
    node: NodeId,
    /// The cluster's hub.
    hub: Arc<Hub>,
}

impl NodeLinks {
    /// The links of `node`.
    pub(crate) fn new(node: NodeId, hub: Arc<Hub>) -> Self {
        Self { node, hub }
    }
}

impl PeerLinks for NodeLinks {
    fn forward(&self, node: NodeId, msg: jetraft_proto::cluster::Msg) {
        let Some(bus) = self.hub.linked_bus(self.node, node) else {
            return;
        };
        let reply = (!msg.reply.is_empty()).then_some(&msg.reply[..]);
        let hdrs = (!msg.headers.is_empty()).then_some(&msg.headers[..]);
        let shown = if msg.shown_subject.is_empty() {
            &msg.subject
        } else {
            &msg.shown_subject
        };
        let routed = Msg::new(&msg.subject, &msg.payload)
            .reply(reply)
            .headers(hdrs)
            .shown_as(shown);
        let mut flush = FlushSet::default();
        bus.route(
            Origin::Peer {
                queues: &msg.queues,
            },
            &routed,
            &mut flush,
        );
        flush.wake_all();
    }

    fn has_outbound(&self, node: NodeId) -> bool {
        self.hub.linked_bus(self.node, node).is_some()
    }

    fn local_subscribed(&self, account: &str, subject: &str, queue: Option<&str>) {
        // The in-process clusters run JetStream, which lives in `$G` only.
        if account == crate::config::GLOBAL_ACCOUNT {
            self.hub.local_changed(self.node, subject, queue, true);
        }
    }

    fn local_unsubscribed(&self, account: &str, subject: &str, queue: Option<&str>) {
        if account == crate::config::GLOBAL_ACCOUNT {
            self.hub.local_changed(self.node, subject, queue, false);
        }
    }
}
