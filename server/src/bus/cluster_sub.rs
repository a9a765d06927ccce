//! [`ClusterSub`]: a server-internal subscription that takes a subject's messages from this
//! node's clients and from peers alike (an internal subscription takes one or the other), for
//! exchanges with a client that may be connected to any node: the console's requests, a stream
//! backup's flow-control acks and restore chunks.

use super::{Bus, InternalMsg, InternalSub};
use crate::router::SublistError;

/// A server-internal subscription that also takes what peers forward: a local subscription, a
/// peer inbox on the same pattern, and the interest announced to peers (withdrawn on drop).
#[derive(Debug)]
pub struct ClusterSub {
    local: InternalSub,
    peers: InternalSub,
    bus: Bus,
    subject: String,
}

impl ClusterSub {
    /// Subscribes to `subject` (wildcards allowed) on this node and across the cluster.
    pub fn new(bus: &Bus, subject: &str) -> Result<Self, SublistError> {
        let local = bus.internal().subscribe(subject)?;
        let peers = bus.internal().subscribe_inbox(subject)?;
        bus.announce_interest(subject);
        Ok(Self {
            local,
            peers,
            bus: bus.clone(),
            subject: subject.to_string(),
        })
    }

    /// The next message, from this node or a peer.
    pub async fn recv(&mut self) -> Option<InternalMsg> {
        tokio::select! {
            m = self.local.rx.recv() => m,
            m = self.peers.rx.recv() => m,
        }
    }

    /// A message if one is queued.
    pub fn try_recv(&mut self) -> Option<InternalMsg> {
        self.local
            .rx
            .try_recv()
            .or_else(|_| self.peers.rx.try_recv())
            .ok()
    }
}

impl Drop for ClusterSub {
    fn drop(&mut self) {
        self.bus.withdraw_interest(&self.subject);
    }
}
