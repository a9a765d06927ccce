//! [`GrpcTransport`]: the outbound side. A [`GroupRouter`] over one pair of tonic channels per
//! peer (see [`super::peers`]), shared by every group of the node.
//!
//! Error mapping (openraft backs off on `Unreachable` and retries `Network` errors sooner):
//! - unknown peer, bad address, backing off, connection failure (`Unavailable`/`Unknown`
//!   status), group not on the peer (`NotFound`) or stopped there (`FailedPrecondition`):
//!   `Unreachable`; only link failures start the peer's backoff;
//! - past the deadline (local timer, `DeadlineExceeded` or `Cancelled`): `Timeout`;
//! - anything else, including an undecodable answer: `Network`.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jetraft_proto::raft::raft_service_client::RaftServiceClient;
use openraft::error::{
    NetworkError, RPCError, ReplicationClosed, StreamingError, Timeout, Unreachable,
};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{OptionalSend, RPCTypes};
use openraft_multi::GroupRouter;
use tonic::Code;
use tonic::transport::Channel;

use super::peers::{GrpcSettings, Peer, Peers};
use crate::convert::snapshot::CHUNK_SIZE;
use crate::convert::{DecodeError, append, snapshot, transfer, vote};
use crate::network::Transport;
use crate::quiesce::QuiesceRequest;
use crate::types::{GroupSnapshot, GroupVote, JetraftConfig, PeerNode, SnapshotData};
use crate::{GroupId, NodeId};

/// Why a call did not produce an answer.
#[derive(Debug, thiserror::Error)]
enum LinkError {
    #[error("no address known for node {node}")]
    UnknownPeer { node: NodeId },
    #[error("node {node} is backing off for another {wait:?} after a link failure")]
    BackingOff { node: NodeId, wait: Duration },
    #[error("node {node} answered {code:?}: {message}")]
    Status {
        node: NodeId,
        code: Code,
        message: String,
    },
    #[error("node {node} sent an undecodable answer: {source}")]
    Decode {
        node: NodeId,
        #[source]
        source: DecodeError,
    },
}

/// What a failed call becomes for openraft.
enum Failure {
    Unreachable(LinkError),
    Timeout,
    Network(LinkError),
}

struct Inner {
    /// This node: the `from` of every request.
    node: NodeId,
    settings: GrpcSettings,
    peers: Peers,
}

/// A node's gRPC transport for all its groups. Clones share the peer table and channels.
#[derive(Clone)]
pub struct GrpcTransport {
    inner: Arc<Inner>,
}

impl GrpcTransport {
    /// A transport for `node` with default settings and no peers yet.
    pub fn new(node: NodeId) -> Self {
        Self::with_settings(node, GrpcSettings::default())
    }

    /// A transport for `node` with `settings`.
    pub fn with_settings(node: NodeId, settings: GrpcSettings) -> Self {
        Self {
            inner: Arc::new(Inner {
                node,
                settings,
                peers: Peers::default(),
            }),
        }
    }

    /// Records that `node` listens at `addr` (`host:port` or a URI). Membership changes do the
    /// same through [`Transport::note_peer`]; call this for peers known before any group runs.
    /// Must run inside a tokio runtime. Returns false if `addr` cannot be dialed.
    pub fn add_peer(&self, node: NodeId, addr: &str) -> bool {
        match self.inner.peers.set(node.0, addr, &self.inner.settings) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(peer = %node, error = %e, "peer address refused");
                false
            }
        }
    }

    /// The address `node` is dialed at, if known.
    pub fn peer_addr(&self, node: NodeId) -> Option<String> {
        self.inner.peers.get(node.0).map(|p| p.addr.clone())
    }

    /// How many peer connections (each a Raft channel plus a snapshot channel) were ever set
    /// up: one per peer address, however many groups use it.
    pub fn peer_channels_created(&self) -> usize {
        self.inner.peers.created()
    }

    fn peer(&self, target: u64) -> Result<Arc<Peer>, Failure> {
        let node = NodeId(target);
        let peer = self
            .inner
            .peers
            .get(target)
            .ok_or(Failure::Unreachable(LinkError::UnknownPeer { node }))?;
        peer.ready(Instant::now())
            .map_err(|wait| Failure::Unreachable(LinkError::BackingOff { node, wait }))?;
        Ok(peer)
    }

    fn status_failure(&self, peer: &Peer, target: u64, status: &tonic::Status) -> Failure {
        let err = LinkError::Status {
            node: NodeId(target),
            code: status.code(),
            message: status.message().to_string(),
        };
        match status.code() {
            Code::Unavailable | Code::Unknown => {
                peer.failed(Instant::now(), &self.inner.settings);
                Failure::Unreachable(err)
            }
            Code::NotFound | Code::FailedPrecondition => Failure::Unreachable(err),
            Code::DeadlineExceeded | Code::Cancelled => Failure::Timeout,
            _ => Failure::Network(err),
        }
    }

    /// One unary call to `target`, bounded by `ttl` (locally and in the `grpc-timeout` header).
    async fn unary<Req, Resp, Out, F, Fut>(
        &self,
        target: u64,
        ttl: Duration,
        req: Req,
        call: F,
        decode: impl FnOnce(Resp) -> Result<Out, DecodeError>,
    ) -> Result<Out, Failure>
    where
        F: FnOnce(RaftServiceClient<Channel>, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let peer = self.peer(target)?;
        let mut request = tonic::Request::new(req);
        request.set_timeout(ttl);
        address_to(&mut request, target);
        match tokio::time::timeout(ttl, call(peer.rpc.clone(), request)).await {
            Err(_elapsed) => Err(Failure::Timeout),
            Ok(Err(status)) => Err(self.status_failure(&peer, target, &status)),
            Ok(Ok(resp)) => {
                peer.succeeded();
                decode(resp.into_inner()).map_err(|source| {
                    Failure::Network(LinkError::Decode {
                        node: NodeId(target),
                        source,
                    })
                })
            }
        }
    }

    fn rpc_error(
        &self,
        f: Failure,
        target: u64,
        action: RPCTypes,
        ttl: Duration,
    ) -> RPCError<JetraftConfig> {
        match f {
            Failure::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
            Failure::Network(e) => RPCError::Network(NetworkError::new(&e)),
            Failure::Timeout => RPCError::Timeout(Timeout {
                action,
                id: self.inner.node.0,
                target,
                timeout: ttl,
            }),
        }
    }

    async fn send_vote(
        &self,
        target: u64,
        group: GroupId,
        rpc: &VoteRequest<JetraftConfig>,
        option: &RPCOption,
        pre: bool,
    ) -> Result<VoteResponse<JetraftConfig>, RPCError<JetraftConfig>> {
        let ttl = option.hard_ttl();
        let req = vote::request_to_pb(group.0, self.inner.node.0, rpc);
        self.unary(
            target,
            ttl,
            req,
            |mut c, r| async move {
                if pre {
                    c.pre_vote(r).await
                } else {
                    c.vote(r).await
                }
            },
            vote::response_from_pb,
        )
        .await
        .map_err(|f| self.rpc_error(f, target, RPCTypes::Vote, ttl))
    }
}

/// Names the node a request is meant for ([`super::TARGET_NODE_HEADER`]): after a node lost
/// its data, a new node with a new id listens at the old address, and must refuse what was
/// sent to the old id.
fn address_to<T>(request: &mut tonic::Request<T>, target: u64) {
    if let Ok(v) = tonic::metadata::MetadataValue::try_from(target.to_string()) {
        request.metadata_mut().insert(super::TARGET_NODE_HEADER, v);
    }
}

impl Transport for GrpcTransport {
    fn note_peer(&self, target: u64, node: &PeerNode) {
        self.add_peer(NodeId(target), &node.addr);
    }

    async fn quiesce(
        &self,
        target: u64,
        req: QuiesceRequest,
        ttl: Duration,
    ) -> Result<bool, String> {
        self.unary(
            target,
            ttl,
            req.to_pb(),
            |mut c, r| async move { c.quiesce(r).await },
            |r: jetraft_proto::raft::QuiesceResponse| Ok(r.quiet),
        )
        .await
        .map_err(|f| match f {
            Failure::Unreachable(e) | Failure::Network(e) => e.to_string(),
            Failure::Timeout => format!("no answer within {ttl:?}"),
        })
    }
}

impl GroupRouter<JetraftConfig, GroupId> for GrpcTransport {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &self,
        target: u64,
        group: GroupId,
        rpc: AppendEntriesRequest<JetraftConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<JetraftConfig>, RPCError<JetraftConfig>> {
        let ttl = option.hard_ttl();
        let req = append::request_to_pb(group.0, self.inner.node.0, &rpc);
        self.unary(
            target,
            ttl,
            req,
            |mut c, r| async move { c.append_entries(r).await },
            append::response_from_pb,
        )
        .await
        .map_err(|f| self.rpc_error(f, target, RPCTypes::AppendEntries, ttl))
    }

    async fn vote(
        &self,
        target: u64,
        group: GroupId,
        rpc: VoteRequest<JetraftConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<JetraftConfig>, RPCError<JetraftConfig>> {
        self.send_vote(target, group, &rpc, &option, false).await
    }

    async fn pre_vote(
        &self,
        target: u64,
        group: GroupId,
        rpc: VoteRequest<JetraftConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<JetraftConfig>, RPCError<JetraftConfig>> {
        self.send_vote(target, group, &rpc, &option, true).await
    }

    async fn transfer_leader(
        &self,
        target: u64,
        group: GroupId,
        req: TransferLeaderRequest<JetraftConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<JetraftConfig>, RPCError<JetraftConfig>> {
        let ttl = option.hard_ttl();
        let pb_req = transfer::request_to_pb(group.0, self.inner.node.0, &req);
        self.unary(
            target,
            ttl,
            pb_req,
            |mut c, r| async move { c.transfer_leader(r).await },
            transfer::response_from_pb,
        )
        .await
        .map_err(|f| self.rpc_error(f, target, RPCTypes::TransferLeader, ttl))
    }

    /// Streams the snapshot in chunks of at most [`CHUNK_SIZE`] bytes over the peer's snapshot
    /// channel. `hard_ttl` bounds each chunk (openraft's `install_snapshot_timeout` is per
    /// segment), so the whole call may take `hard_ttl` per chunk plus one for the install.
    async fn full_snapshot(
        &self,
        target: u64,
        group: GroupId,
        vote: GroupVote,
        snapshot: GroupSnapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<JetraftConfig>, StreamingError<JetraftConfig>> {
        let to_streaming = |f: Failure, ttl: Duration| match self.rpc_error(
            f,
            target,
            RPCTypes::InstallSnapshot,
            ttl,
        ) {
            RPCError::Timeout(t) => StreamingError::Timeout(t),
            RPCError::Unreachable(u) => StreamingError::Unreachable(u),
            RPCError::Network(n) => StreamingError::Network(n),
            RPCError::RemoteError(r) => StreamingError::Unreachable(Unreachable::new(&r)),
        };
        let peer = self
            .peer(target)
            .map_err(|f| to_streaming(f, option.hard_ttl()))?;
        let chunk_size = option
            .snapshot_chunk_size()
            .unwrap_or(CHUNK_SIZE)
            .clamp(1, CHUNK_SIZE);
        let chunks = snapshot::to_chunks(group.0, self.inner.node.0, &vote, &snapshot, chunk_size);
        let rounds = u32::try_from(chunks.len() + 1).unwrap_or(u32::MAX);
        let ttl = option.hard_ttl().saturating_mul(rounds);
        let mut request = tonic::Request::new(futures_util::stream::iter(chunks));
        request.set_timeout(ttl);
        address_to(&mut request, target);
        let mut client = peer.snapshots.clone();
        let send = tokio::time::timeout(ttl, client.install_snapshot(request));
        let outcome = tokio::select! {
            r = send => r,
            closed = cancel => return Err(StreamingError::Closed(closed)),
        };
        let resp = match outcome {
            Err(_elapsed) => return Err(to_streaming(Failure::Timeout, ttl)),
            Ok(Err(status)) => {
                return Err(to_streaming(
                    self.status_failure(&peer, target, &status),
                    ttl,
                ));
            }
            Ok(Ok(resp)) => resp.into_inner(),
        };
        peer.succeeded();
        snapshot::response_from_pb(resp).map_err(|source| {
            to_streaming(
                Failure::Network(LinkError::Decode {
                    node: NodeId(target),
                    source,
                }),
                ttl,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote_req() -> VoteRequest<JetraftConfig> {
        VoteRequest::new(GroupVote::new(1, 1), None)
    }

    #[tokio::test]
    async fn unknown_peer_is_unreachable() {
        let t = GrpcTransport::new(NodeId(1));
        let err = t
            .vote(
                2,
                GroupId(1),
                vote_req(),
                RPCOption::new(Duration::from_millis(200)),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, RPCError::Unreachable(_)), "{err:?}");
    }

    #[tokio::test]
    async fn refused_connection_is_unreachable_and_starts_the_backoff() {
        // Bind and drop a listener to get a loopback port nobody listens on.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let t = GrpcTransport::new(NodeId(1));
        assert!(t.add_peer(NodeId(2), &format!("127.0.0.1:{port}")));
        let opt = RPCOption::new(Duration::from_secs(2));
        let first = t
            .vote(2, GroupId(1), vote_req(), opt.clone())
            .await
            .unwrap_err();
        assert!(matches!(first, RPCError::Unreachable(_)), "{first:?}");
        // The second call fails fast without dialing: the peer is backing off.
        let second = t.vote(2, GroupId(1), vote_req(), opt).await.unwrap_err();
        assert!(second.to_string().contains("backing off"), "{second}");
    }
}
