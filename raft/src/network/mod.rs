//! Transports: how a group's RPCs reach the same group on another node.
//!
//! A transport is one [`GroupRouter`] per node, shared by all of that node's groups; every call
//! names its target node and group. [`GroupNetwork`] is the per-group openraft network factory:
//! it binds (target, group) with openraft-multi's [`GroupNetworkAdapter`].
//!
//! Implementations: [`mem::MemTransport`] (in-process, with fault knobs) today; the gRPC
//! transport (one connection per peer) comes with the proto services.
//!
//! Invariant: every transport call is bounded by the `RPCOption::hard_ttl` openraft passes in.

pub mod mem;

use openraft::RaftNetworkFactory;
use openraft_multi::{GroupNetworkAdapter, GroupRouter};

use crate::GroupId;
use crate::types::{JetraftConfig, PeerNode, SnapshotData};

/// A node's shared outbound transport for all its groups.
pub trait Transport: GroupRouter<JetraftConfig, GroupId, SnapshotData = SnapshotData> {}

impl<T> Transport for T where T: GroupRouter<JetraftConfig, GroupId, SnapshotData = SnapshotData> {}

/// openraft network factory for one group: clients are the shared transport bound to a target.
#[derive(Clone)]
pub struct GroupNetwork<T: Transport> {
    /// The node's shared transport.
    transport: T,
    /// The group every client of this factory speaks for.
    group: GroupId,
}

impl<T: Transport> GroupNetwork<T> {
    /// A factory for `group` over `transport`.
    pub fn new(transport: T, group: GroupId) -> Self {
        Self { transport, group }
    }
}

impl<T: Transport> RaftNetworkFactory<JetraftConfig> for GroupNetwork<T> {
    type Network = GroupNetworkAdapter<JetraftConfig, GroupId, T>;

    async fn new_client(&mut self, target: u64, _node: &PeerNode) -> Self::Network {
        GroupNetworkAdapter::new(self.transport.clone(), target, self.group)
    }
}
