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
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use jetraft_proto::raft::raft_service_client::RaftServiceClient;
use openraft::base::BoxFuture;
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

use super::append_outbound::{Closer, Outbound};
use super::peers::{GrpcSettings, Peer, Peers};
use super::security::LinkSecurity;
use super::snapshot_send::wire_chunks;
use crate::convert::snapshot::CHUNK_SIZE;
use crate::convert::{DecodeError, append, snapshot, transfer, vote};
use crate::network::{AppendAnswer, AppendAnswers, AppendRequests, Transport};
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
    /// TLS and route credentials of every link.
    security: LinkSecurity,
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
        Self::with_security(node, settings, LinkSecurity::default())
    }

    /// A transport for `node` with `settings` whose links use `security` (TLS, credentials).
    pub fn with_security(node: NodeId, settings: GrpcSettings, security: LinkSecurity) -> Self {
        Self {
            inner: Arc::new(Inner {
                node,
                settings,
                security,
                peers: Peers::default(),
            }),
        }
    }

    /// Records that `node` listens at `addr` (`host:port` or a URI). Membership changes do the
    /// same through [`Transport::note_peer`]; call this for peers known before any group runs.
    /// Must run inside a tokio runtime. Returns false if `addr` cannot be dialed.
    pub fn add_peer(&self, node: NodeId, addr: &str) -> bool {
        match self
            .inner
            .peers
            .set(node.0, addr, &self.inner.settings, &self.inner.security)
        {
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
        peer.ready(Instant::now(), &self.inner.settings)
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
                peer.failed(Instant::now(), &self.inner.settings, &err);
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
        self.inner.security.stamp(&mut request);
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
impl GrpcTransport {
    async fn open_append_stream(
        self,
        target: u64,
        group: GroupId,
        requests: AppendRequests,
        ttl: Duration,
    ) -> Result<AppendAnswers, RPCError<JetraftConfig>> {
        // The first request first: openraft waits out the group's replication backoff while
        // producing it. Failing before that (the peer is known down) would send the group
        // straight into its next session, without any wait.
        let mut requests = requests;
        let Some(first) = requests.next().await else {
            return Ok(Box::pin(futures_util::stream::empty()));
        };
        let requests: AppendRequests = Box::pin(
            futures_util::stream::once(futures_util::future::ready(first)).chain(requests),
        );
        let peer = self
            .peer(target)
            .map_err(|f| self.rpc_error(f, target, RPCTypes::AppendEntries, ttl))?;
        let from = self.inner.node.0;
        let sent = Arc::new(AtomicU64::new(0));
        let more = Arc::new(tokio::sync::Notify::new());
        let (outbound, closer) = Outbound::new(requests, group.0, from, sent.clone(), more.clone());
        let mut request = tonic::Request::new(outbound);
        address_to(&mut request, target);
        self.inner.security.stamp(&mut request);
        let mut rpc = peer.rpc.clone();
        let opened = tokio::time::timeout(ttl, rpc.stream_append(request)).await;
        let answers = match opened {
            Err(_elapsed) => Err(Failure::Timeout),
            Ok(Err(status)) => Err(self.status_failure(&peer, target, &status)),
            Ok(Ok(resp)) => Ok(resp.into_inner()),
        }
        .map_err(|f| self.rpc_error(f, target, RPCTypes::AppendEntries, ttl))?;
        peer.succeeded();
        let stream = AppendStream {
            _closer: closer,
            answers,
            transport: self,
            peer,
            target,
            ttl,
            sent,
            more,
            received: 0,
        };
        Ok(Box::pin(futures_util::stream::unfold(
            Some(stream),
            AppendStream::step,
        )))
    }
}

/// The receiving half of an open append stream.
struct AppendStream {
    /// Ends the call's request stream when the answers are dropped.
    _closer: Closer,
    answers: tonic::Streaming<jetraft_proto::raft::StreamAppendResponse>,
    transport: GrpcTransport,
    peer: Arc<Peer>,
    target: u64,
    /// Longest a request may wait for its answer.
    ttl: Duration,
    /// Requests taken from openraft so far.
    sent: Arc<AtomicU64>,
    /// Signalled after each request taken, so an idle stream waits without a timer.
    more: Arc<tokio::sync::Notify>,
    /// Answers received so far.
    received: u64,
}

impl AppendStream {
    /// `unfold` step: the next answer, and the stream again unless it ended or failed.
    async fn step(stream: Option<Self>) -> Option<(AppendAnswer, Option<Self>)> {
        let mut stream = stream?;
        let answer = stream.next_answer().await?;
        let go_on = answer.as_ref().is_ok_and(Result::is_ok);
        Some((answer, go_on.then_some(stream)))
    }

    /// The next answer; `None` once the call ended with every request answered. A request
    /// left unanswered for a whole `ttl` (checked every `ttl` while requests are outstanding,
    /// so found within two), an error status, an undecodable answer or an end with requests
    /// unanswered is an error.
    async fn next_answer(&mut self) -> Option<AppendAnswer> {
        let mut waiting_since: Option<u64> = None;
        loop {
            let outstanding = self.sent.load(Ordering::Relaxed) > self.received;
            let next = if outstanding {
                tokio::time::timeout(self.ttl, self.answers.message()).await
            } else {
                // Nothing to wait for: no timer until the next request goes out.
                tokio::select! {
                    next = self.answers.message() => Ok(next),
                    () = self.more.notified() => {
                        waiting_since = None;
                        continue;
                    }
                }
            };
            let failure = match next {
                Ok(Ok(Some(pb))) => {
                    self.received += 1;
                    self.peer.succeeded();
                    return Some(append::stream_result_from_pb(pb).map_err(|source| {
                        RPCError::Network(NetworkError::new(&LinkError::Decode {
                            node: NodeId(self.target),
                            source,
                        }))
                    }));
                }
                Ok(Ok(None)) if !outstanding => return None,
                Ok(Ok(None)) => Failure::Network(LinkError::Status {
                    node: NodeId(self.target),
                    code: Code::Aborted,
                    message: "append stream ended with requests unanswered".to_string(),
                }),
                Ok(Err(status)) => self
                    .transport
                    .status_failure(&self.peer, self.target, &status),
                // Outstanding at two checks in a row without an answer in between: the oldest
                // request has waited at least `ttl`.
                Err(_elapsed) if waiting_since == Some(self.received) => Failure::Timeout,
                Err(_elapsed) => {
                    waiting_since = Some(self.received);
                    continue;
                }
            };
            let ttl = self.ttl;
            return Some(Err(self.transport.rpc_error(
                failure,
                self.target,
                RPCTypes::AppendEntries,
                ttl,
            )));
        }
    }
}

fn address_to<T>(request: &mut tonic::Request<T>, target: u64) {
    if let Ok(v) = tonic::metadata::MetadataValue::try_from(target.to_string()) {
        request.metadata_mut().insert(super::TARGET_NODE_HEADER, v);
    }
}

impl Transport for GrpcTransport {
    /// Calls to `target` stop backing off ([`Peer::link_up`](super::peers::Peer)).
    fn peer_link_up(&self, target: u64) {
        if let Some(peer) = self.inner.peers.get(target) {
            peer.link_up();
        }
    }

    fn note_peer(&self, target: u64, node: &PeerNode) {
        self.add_peer(NodeId(target), &node.addr);
    }

    fn pipelines_appends(&self) -> bool {
        true
    }

    /// One bidirectional `StreamAppend` call carries the requests as openraft produces them;
    /// the answers come back in order (see [`AppendStream`]). No `grpc-timeout` is set: the
    /// call lives as long as the replication session.
    fn stream_append(
        &self,
        target: u64,
        group: GroupId,
        requests: AppendRequests,
        option: RPCOption,
    ) -> BoxFuture<'static, Result<AppendAnswers, RPCError<JetraftConfig>>> {
        Box::pin(
            self.clone()
                .open_append_stream(target, group, requests, option.hard_ttl()),
        )
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
    /// channel, reading a lazy payload as it goes. `hard_ttl` bounds each chunk (openraft's
    /// `install_snapshot_timeout` is per segment), so the whole call may take `hard_ttl` per
    /// chunk (as many as the payload's size hint gives) plus one for the install.
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
        let chunks = snapshot.snapshot.size_hint() / chunk_size as u64 + 2;
        let rounds = u32::try_from(chunks).unwrap_or(u32::MAX);
        let ttl = option.hard_ttl().saturating_mul(rounds);
        // Held until the replica answered, which it does once the snapshot is installed: while
        // a view is out, its group builds no snapshot and so purges no log the replica needs
        // right after it (`snapshot_hold`).
        let _view = snapshot.snapshot.clone();
        let chunks = wire_chunks(group.0, self.inner.node.0, &vote, snapshot, chunk_size);
        let mut request = tonic::Request::new(chunks);
        request.set_timeout(ttl);
        address_to(&mut request, target);
        self.inner.security.stamp(&mut request);
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

    /// A loopback port nobody listens on (a listener bound and dropped).
    fn closed_port() -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn refused_connection_is_unreachable_and_starts_the_backoff() {
        let port = closed_port();
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

    /// openraft waits out a group's replication backoff while it produces the first request
    /// of a session: an append stream to a peer known down must take that request before it
    /// fails, or the group retries in a busy loop.
    #[tokio::test]
    async fn append_stream_to_a_peer_backing_off_takes_its_first_request_before_failing() {
        let port = closed_port();
        let t = GrpcTransport::new(NodeId(1));
        assert!(t.add_peer(NodeId(2), &format!("127.0.0.1:{port}")));
        let opt = RPCOption::new(Duration::from_secs(2));
        let _ = t.vote(2, GroupId(1), vote_req(), opt.clone()).await;
        // The "backoff": the first request comes only after a while.
        let wait = Duration::from_millis(300);
        let requests: AppendRequests = Box::pin(futures_util::stream::once(async move {
            tokio::time::sleep(wait).await;
            AppendEntriesRequest {
                vote: GroupVote::new(1, 1),
                prev_log_id: None,
                leader_commit: None,
                entries: vec![],
            }
        }));
        let started = Instant::now();
        let r = Transport::stream_append(&t, 2, GroupId(1), requests, opt).await;
        assert!(matches!(r, Err(RPCError::Unreachable(_))), "{:?}", r.err());
        assert!(
            started.elapsed() >= wait,
            "failed after {:?}",
            started.elapsed()
        );
    }
}
