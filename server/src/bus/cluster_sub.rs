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
    account: String,
    subject: String,
}

impl ClusterSub {
    /// Subscribes to `subject` (wildcards allowed) on this node and across the cluster.
    pub fn new(bus: &Bus, subject: &str) -> Result<Self, SublistError> {
        Self::new_in(bus, crate::config::GLOBAL_ACCOUNT, subject)
    }

    /// [`ClusterSub::new`] in `account`'s namespace (a backup of a stream of that account).
    pub fn new_in(bus: &Bus, account: &str, subject: &str) -> Result<Self, SublistError> {
        let ns = bus.namespace(account);
        let local = ns.internal.subscribe(subject)?;
        let peers = ns.internal.subscribe_inbox(subject)?;
        bus.announce_interest_in(account, subject);
        Ok(Self {
            local,
            peers,
            bus: bus.clone(),
            account: account.to_string(),
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
        self.bus.withdraw_interest_in(&self.account, &self.subject);
    }
}
