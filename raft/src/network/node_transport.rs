//! [`NodeTransport`]: the transport a node runs its groups over, chosen at start-up: gRPC between
//! processes (production) or the in-process [`MemTransport`] (tests that run several nodes in
//! one process, with its fault knobs).
//!
//! Every call is delegated to the variant unchanged, so a node over `Grpc` behaves exactly as
//! over a bare [`GrpcTransport`]. The enum (rather than a type parameter on everything that
//! holds a registry) keeps the code above the raft crate free of transport generics; the cost is
//! one `match` per RPC.

use std::future::Future;
use std::time::Duration;

use openraft::OptionalSend;
use openraft::base::BoxFuture;
use openraft::error::{RPCError, ReplicationClosed, StreamingError};
use openraft::network::{Backoff, RPCOption};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft_multi::GroupRouter;

use super::grpc::GrpcTransport;
use super::mem::MemTransport;
use super::{AppendAnswers, AppendRequests, Transport};
use crate::quiesce::QuiesceRequest;
use crate::types::{GroupSnapshot, GroupVote, JetraftConfig, PeerNode, SnapshotData};
use crate::{GroupId, NodeId};

/// A node's outbound Raft transport: gRPC or in-process. Clones share the variant's state.
#[derive(Clone)]
pub enum NodeTransport {
    /// tonic over the cluster port: what a server process uses.
    Grpc(GrpcTransport),
    /// The in-process wire of a test cluster ([`super::mem::MemNetwork`]).
    Mem(MemTransport),
}

impl From<GrpcTransport> for NodeTransport {
    fn from(t: GrpcTransport) -> Self {
        Self::Grpc(t)
    }
}

impl From<MemTransport> for NodeTransport {
    fn from(t: MemTransport) -> Self {
        Self::Mem(t)
    }
}

impl NodeTransport {
    /// Records that `node` listens at `addr` ([`GrpcTransport::add_peer`]). The in-process wire
    /// finds nodes by id, so there it does nothing and returns true.
    pub fn add_peer(&self, node: NodeId, addr: &str) -> bool {
        match self {
            Self::Grpc(t) => t.add_peer(node, addr),
            Self::Mem(_) => true,
        }
    }

    /// The address `node` is dialed at, if known ([`GrpcTransport::peer_addr`]); always `None`
    /// in process.
    pub fn peer_addr(&self, node: NodeId) -> Option<String> {
        match self {
            Self::Grpc(t) => t.peer_addr(node),
            Self::Mem(_) => None,
        }
    }
}

impl Transport for NodeTransport {
    fn note_peer(&self, target: u64, node: &PeerNode) {
        match self {
            Self::Grpc(t) => t.note_peer(target, node),
            Self::Mem(t) => t.note_peer(target, node),
        }
    }

    fn peer_link_up(&self, target: u64) {
        match self {
            Self::Grpc(t) => t.peer_link_up(target),
            Self::Mem(t) => t.peer_link_up(target),
        }
    }

    async fn quiesce(
        &self,
        target: u64,
        req: QuiesceRequest,
        ttl: Duration,
    ) -> Result<bool, String> {
        match self {
            Self::Grpc(t) => t.quiesce(target, req, ttl).await,
            Self::Mem(t) => t.quiesce(target, req, ttl).await,
        }
    }

    fn pipelines_appends(&self) -> bool {
        match self {
            Self::Grpc(t) => t.pipelines_appends(),
            Self::Mem(t) => t.pipelines_appends(),
        }
    }

    fn stream_append(
        &self,
        target: u64,
        group: GroupId,
        requests: AppendRequests,
        option: RPCOption,
    ) -> BoxFuture<'static, Result<AppendAnswers, RPCError<JetraftConfig>>> {
        match self {
            Self::Grpc(t) => t.stream_append(target, group, requests, option),
            Self::Mem(t) => t.stream_append(target, group, requests, option),
        }
    }
}

impl GroupRouter<JetraftConfig, GroupId> for NodeTransport {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &self,
        target: u64,
        group: GroupId,
        rpc: AppendEntriesRequest<JetraftConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<JetraftConfig>, RPCError<JetraftConfig>> {
        match self {
            Self::Grpc(t) => t.append_entries(target, group, rpc, option).await,
            Self::Mem(t) => t.append_entries(target, group, rpc, option).await,
        }
    }

    async fn vote(
        &self,
        target: u64,
        group: GroupId,
        rpc: VoteRequest<JetraftConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<JetraftConfig>, RPCError<JetraftConfig>> {
        match self {
            Self::Grpc(t) => t.vote(target, group, rpc, option).await,
            Self::Mem(t) => t.vote(target, group, rpc, option).await,
        }
    }

    async fn pre_vote(
        &self,
        target: u64,
        group: GroupId,
        rpc: VoteRequest<JetraftConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<JetraftConfig>, RPCError<JetraftConfig>> {
        match self {
            Self::Grpc(t) => t.pre_vote(target, group, rpc, option).await,
            Self::Mem(t) => t.pre_vote(target, group, rpc, option).await,
        }
    }

    async fn full_snapshot(
        &self,
        target: u64,
        group: GroupId,
        vote: GroupVote,
        snapshot: GroupSnapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<JetraftConfig>, StreamingError<JetraftConfig>> {
        match self {
            Self::Grpc(t) => {
                t.full_snapshot(target, group, vote, snapshot, cancel, option)
                    .await
            }
            Self::Mem(t) => {
                t.full_snapshot(target, group, vote, snapshot, cancel, option)
                    .await
            }
        }
    }

    async fn transfer_leader(
        &self,
        target: u64,
        group: GroupId,
        req: TransferLeaderRequest<JetraftConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<JetraftConfig>, RPCError<JetraftConfig>> {
        match self {
            Self::Grpc(t) => t.transfer_leader(target, group, req, option).await,
            Self::Mem(t) => t.transfer_leader(target, group, req, option).await,
        }
    }

    fn backoff(&self) -> Option<Backoff> {
        match self {
            Self::Grpc(t) => t.backoff(),
            Self::Mem(t) => t.backoff(),
        }
    }
}
