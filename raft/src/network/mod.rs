//! Transports: how a group's RPCs reach the same group on another node.
//!
//! A transport is one [`GroupRouter`] per node, shared by all of that node's groups; every call
//! names its target node and group. [`GroupNetwork`] is the per-group openraft network factory:
//! it binds (target, group) with openraft-multi's [`GroupNetworkAdapter`].
//!
//! Implementations: [`mem::MemTransport`] (in-process, with fault knobs) and
//! [`grpc::GrpcTransport`] (tonic, one connection per peer address shared by all groups);
//! [`NodeTransport`] is either of them, picked when a node starts.
//!
//! Peers are addressed by node id; a transport that dials addresses learns them from
//! [`Transport::note_peer`], which [`GroupNetwork`] calls with the [`PeerNode`] openraft takes
//! from the group's membership whenever it opens a client to a peer.
//!
//! Replication: a transport that [`Transport::pipelines_appends`] carries a group's
//! AppendEntries to a follower as one ordered stream with many requests in flight (openraft's
//! `stream_append`); otherwise openraft sends one request and waits for its answer before the
//! next. The gRPC transport pipelines, the in-memory one does not.
//!
//! Invariant: every transport call is bounded by the `RPCOption::hard_ttl` openraft passes in
//! (for an append stream: no request stays unanswered for longer).

pub mod grpc;
pub mod mem;
mod node_transport;

pub use node_transport::NodeTransport;

use std::future::Future;
use std::time::Duration;

use openraft::base::{BoxFuture, BoxStream};
use openraft::error::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{Backoff, RPCOption, RaftNetworkV2, stream_append_sequential};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendResult,
    TransferLeaderRequest, TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{OptionalSend, RaftNetworkFactory};
use openraft_multi::{GroupNetworkAdapter, GroupRouter};

use crate::GroupId;
use crate::quiesce::QuiesceRequest;
use crate::types::{GroupSnapshot, GroupVote, JetraftConfig, PeerNode, SnapshotData};

/// A stream of AppendEntries requests of one group to one follower, in log order.
pub type AppendRequests = BoxStream<'static, AppendEntriesRequest<JetraftConfig>>;
/// The answers of an append stream, one per request in the same order; ends after an error.
pub type AppendAnswers = BoxStream<'static, AppendAnswer>;
/// One answer of an append stream.
pub type AppendAnswer = Result<StreamAppendResult<JetraftConfig>, RPCError<JetraftConfig>>;

/// A node's shared outbound transport for all its groups.
pub trait Transport: GroupRouter<JetraftConfig, GroupId, SnapshotData = SnapshotData> {
    /// openraft is about to talk to `target`, which membership says is at `node`. Transports
    /// that dial addresses remember it; the default ignores it.
    fn note_peer(&self, target: u64, node: &PeerNode) {
        let _ = (target, node);
    }

    /// `target`'s node link (the cluster layer's message link) came up: it is listening again,
    /// so a transport that backs off after failures may try it at once. The default ignores it.
    fn peer_link_up(&self, target: u64) {
        let _ = target;
    }

    /// Asks `target` to quiesce its replica of `req.group` ([`crate::quiesce`]) within `ttl`;
    /// `Ok(true)` when it agreed, `Err` with the reason when the call failed.
    fn quiesce(
        &self,
        target: u64,
        req: QuiesceRequest,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, String>> + Send;

    /// Whether [`stream_append`](Self::stream_append) pipelines; the default does not.
    fn pipelines_appends(&self) -> bool {
        false
    }

    /// Opens a pipelined append stream to `target` for `group` (only called when
    /// [`pipelines_appends`](Self::pipelines_appends)). Each answer must come within
    /// `option.hard_ttl()` of its request, or the stream ends with a timeout.
    ///
    /// Take the first request from `requests` before failing the call for any reason: openraft
    /// waits out the group's replication backoff ([`GroupClient`]'s `backoff`) inside that
    /// poll, so a transport that fails before it (a peer known down) makes the group retry at
    /// once, in a loop as fast as the CPU allows.
    fn stream_append(
        &self,
        target: u64,
        group: GroupId,
        requests: AppendRequests,
        option: RPCOption,
    ) -> BoxFuture<'static, Result<AppendAnswers, RPCError<JetraftConfig>>> {
        let _ = (target, group, requests, option);
        Box::pin(async {
            Err(RPCError::Unreachable(Unreachable::from_string(
                "this transport has no append streams",
            )))
        })
    }
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
    type Network = GroupClient<T>;

    async fn new_client(&mut self, target: u64, node: &PeerNode) -> Self::Network {
        self.transport.note_peer(target, node);
        GroupClient {
            unary: GroupNetworkAdapter::new(self.transport.clone(), target, self.group),
            transport: self.transport.clone(),
            target,
            group: self.group,
        }
    }
}

/// openraft's client of one group to one target: openraft-multi's adapter for single calls,
/// plus the transport's append streams when it has them.
pub struct GroupClient<T: Transport> {
    /// Single calls, bound to (target, group).
    unary: GroupNetworkAdapter<JetraftConfig, GroupId, T>,
    /// The node's shared transport, for append streams.
    transport: T,
    /// The peer this client talks to.
    target: u64,
    /// The group it speaks for.
    group: GroupId,
}

impl<T: Transport> RaftNetworkV2<JetraftConfig> for GroupClient<T> {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<JetraftConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<JetraftConfig>, RPCError<JetraftConfig>> {
        self.unary.append_entries(rpc, option).await
    }

    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<'s, Result<BoxStream<'s, AppendAnswer>, RPCError<JetraftConfig>>>
    where
        S: futures_util::Stream<Item = AppendEntriesRequest<JetraftConfig>>
            + OptionalSend
            + Unpin
            + 'static,
    {
        if !self.transport.pipelines_appends() {
            return stream_append_sequential(&mut self.unary, input, option);
        }
        let opened = self
            .transport
            .stream_append(self.target, self.group, Box::pin(input), option);
        Box::pin(async move {
            let answers: BoxStream<'s, AppendAnswer> = opened.await?;
            Ok(answers)
        })
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<JetraftConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<JetraftConfig>, RPCError<JetraftConfig>> {
        self.unary.vote(rpc, option).await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<JetraftConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<JetraftConfig>, RPCError<JetraftConfig>> {
        self.unary.pre_vote(rpc, option).await
    }

    async fn full_snapshot(
        &mut self,
        vote: GroupVote,
        snapshot: GroupSnapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<JetraftConfig>, StreamingError<JetraftConfig>> {
        self.unary
            .full_snapshot(vote, snapshot, cancel, option)
            .await
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<JetraftConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<JetraftConfig>, RPCError<JetraftConfig>> {
        self.unary.transfer_leader(req, option).await
    }

    /// Exponential from [`BACKOFF_MIN`] to [`BACKOFF_MAX`]. openraft turns it on for a
    /// follower after a failed replication session (an `Unreachable` error, or a session the
    /// follower accepted nothing of) and waits it out before each request it takes from its
    /// request stream, until a call succeeds again; transports must therefore take the first
    /// request before they fail a call (see [`Transport::stream_append`]).
    fn backoff(&self) -> Option<Backoff> {
        Some(Backoff::new(exponential_backoff(BACKOFF_MIN, BACKOFF_MAX)))
    }
}

/// First wait of a group's replication to a follower after a failed session.
pub const BACKOFF_MIN: Duration = Duration::from_millis(50);
/// Longest wait between two replication sessions of a group to a follower that stays
/// unreachable: bounds both the retry rate while a peer is down and how long a peer that came
/// back waits for its groups to resume.
pub const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// `min`, `2 min`, `4 min`, ... capped at `max`, forever.
pub fn exponential_backoff(min: Duration, max: Duration) -> impl Iterator<Item = Duration> + Send {
    std::iter::successors(Some(min.min(max)), move |d| {
        Some(d.saturating_mul(2).min(max))
    })
}
