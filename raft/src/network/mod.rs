//! Transports: how a group's RPCs reach the same group on another node.
//!
//! A transport is one [`GroupRouter`] per node, shared by all of that node's groups; every call
//! names its target node and group. [`GroupNetwork`] is the per-group openraft network factory:
//! it binds (target, group) with openraft-multi's [`GroupNetworkAdapter`].
//!
//! Implementations: [`mem::MemTransport`] (in-process, with fault knobs) and
//! [`grpc::GrpcTransport`] (tonic, one connection per peer address shared by all groups).
//!
//! Peers are addressed by node id; a transport that dials addresses learns them from
//! [`Transport::note_peer`], which [`GroupNetwork`] calls with the [`PeerNode`] openraft takes
//! from the group's membership whenever it opens a client to a peer.
//!
//! Invariant: every transport call is bounded by the `RPCOption::hard_ttl` openraft passes in.

pub mod grpc;
pub mod mem;

use std::future::Future;
use std::time::Duration;

use openraft::RaftNetworkFactory;
use openraft_multi::{GroupNetworkAdapter, GroupRouter};

use crate::GroupId;
use crate::quiesce::QuiesceRequest;
use crate::types::{JetraftConfig, PeerNode, SnapshotData};

/// A node's shared outbound transport for all its groups.
pub trait Transport: GroupRouter<JetraftConfig, GroupId, SnapshotData = SnapshotData> {
    /// openraft is about to talk to `target`, which membership says is at `node`. Transports
    /// that dial addresses remember it; the default ignores it.
    fn note_peer(&self, target: u64, node: &PeerNode) {
        let _ = (target, node);
    }

    /// Asks `target` to quiesce its replica of `req.group` ([`crate::quiesce`]) within `ttl`;
    /// `Ok(true)` when it agreed, `Err` with the reason when the call failed.
    fn quiesce(
        &self,
        target: u64,
        req: QuiesceRequest,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, String>> + Send;
}

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

    async fn new_client(&mut self, target: u64, node: &PeerNode) -> Self::Network {
        self.transport.note_peer(target, node);
        GroupNetworkAdapter::new(self.transport.clone(), target, self.group)
    }
}
