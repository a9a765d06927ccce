//! [`RaftGrpcService`]: the inbound side. Looks each RPC's group up in the node's [`Groups`]
//! and hands it to that group's Raft, then wakes the group if it was quiet
//! ([`crate::quiesce`]); quiesce requests are answered by the group table itself.
//!
//! Every message is screened before it reaches openraft ([`super::screen`]): fields out of
//! range are refused with `InvalidArgument`, senders that are not members of the group with
//! `PermissionDenied`; refusals are logged at most once per [`REFUSAL_REPORT`].
//!
//! Status codes (the client side maps them, see [`super::client`]): unknown group `NotFound`,
//! group stopped `FailedPrecondition`, malformed or refused request or snapshot stream
//! `InvalidArgument`, sender not a member `PermissionDenied`, node shutting down
//! `Unavailable` (as for link problems, which tonic reports): once the node's shutdown began,
//! no call reaches a group (see [`Groups::run`]).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{FutureExt, Stream, StreamExt};
use jetraft_proto::raft as pb;
use jetraft_proto::raft::raft_service_server::{RaftService, RaftServiceServer};
use openraft::raft::StreamAppendError;
use parking_lot::Mutex;
use tonic::{Request, Response, Status};

use super::screen::{Local, Refusal};
use crate::convert::snapshot::Assembler;
use crate::convert::{DecodeError, append, snapshot, transfer, vote};
use crate::quiesce::QuiesceRequest;
use crate::registry::Groups;
use crate::snapshot_spool::SnapshotSpool;
use crate::types::GroupRaft;
use crate::{GroupId, NodeId};

/// Largest snapshot a node accepts over the wire into memory (without a spool).
pub const MAX_SNAPSHOT_BYTES: usize = 4 << 30;
/// Largest snapshot a node accepts over the wire into its spool (bounded by disk, not memory):
/// a stream of any size a node can hold can be sent whole.
pub const MAX_SPOOLED_SNAPSHOT_BYTES: usize = 1 << 40;
/// How long a Raft message for a group that does not exist here waits for it to be created.
const NEW_GROUP_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Shortest interval between two log lines about refused messages.
pub const REFUSAL_REPORT: Duration = Duration::from_secs(10);

/// Refused messages since the last line about them: a peer (or anyone else) sending garbage
/// in a loop costs one line per [`REFUSAL_REPORT`].
#[derive(Debug, Default)]
struct Refusals {
    /// When the last line was written, and how many refusals it did not mention yet.
    state: Mutex<(Option<Instant>, u64)>,
}

impl Refusals {
    fn note(&self, group: u64, from: u64, why: &Refusal) {
        let now = Instant::now();
        let mut st = self.state.lock();
        st.1 += 1;
        if st
            .0
            .is_some_and(|at| now.saturating_duration_since(at) < REFUSAL_REPORT)
        {
            return;
        }
        let refused = std::mem::take(&mut st.1);
        st.0 = Some(now);
        drop(st);
        tracing::warn!(
            group,
            from,
            reason = %why,
            refused,
            "refused raft message(s) on the cluster port"
        );
    }
}

/// Serves the Raft RPCs of every group in a node's [`Groups`].
#[derive(Clone)]
pub struct RaftGrpcService {
    node: NodeId,
    groups: Groups,
    max_snapshot: usize,
    /// Where received snapshots larger than a batch go; `None` keeps them in memory.
    spool: Option<SnapshotSpool>,
    refusals: Arc<Refusals>,
}

impl RaftGrpcService {
    /// The service of node `node` over `groups` (shared with the node's registry).
    pub fn new(node: NodeId, groups: Groups) -> Self {
        Self {
            node,
            groups,
            max_snapshot: MAX_SNAPSHOT_BYTES,
            spool: None,
            refusals: Arc::default(),
        }
    }

    /// The same service spooling received snapshots to disk ([`crate::snapshot_spool`]): a
    /// receiver then holds at most one batch of a snapshot in memory, and accepts snapshots up
    /// to [`MAX_SPOOLED_SNAPSHOT_BYTES`].
    pub fn spooling(mut self, spool: SnapshotSpool) -> Self {
        self.spool = Some(spool);
        self.max_snapshot = MAX_SPOOLED_SNAPSHOT_BYTES;
        self
    }

    /// The service wrapped for a tonic server with the default message size limit.
    pub fn into_server(self) -> RaftServiceServer<RaftGrpcService> {
        let max = super::GrpcSettings::default().max_message_size;
        RaftServiceServer::new(self)
            .max_decoding_message_size(max)
            .max_encoding_message_size(max)
    }

    /// What this node's replica of `group` knows, to screen a message against.
    fn local(&self, group: u64, raft: &GroupRaft) -> Local {
        Local::of(group, self.node.0, raft)
    }

    /// `check`'s verdict as a status, the refusal counted for the log.
    fn screened(&self, group: u64, from: u64, check: Result<(), Refusal>) -> Result<(), Status> {
        check.map_err(|why| {
            self.refusals.note(group, from, &why);
            Status::from(why)
        })
    }

    /// Runs `call` into a group unless the node is shutting down.
    async fn call<F: std::future::Future>(&self, call: F) -> Result<F::Output, Status> {
        self.groups.run(call).await.ok_or_else(shutting_down)
    }

    /// Refuses a request addressed to another node id (a node that lost its data and came
    /// back under a new id must not answer for the old one: it would look like a replica
    /// whose log went backwards).
    fn check_target<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let Some(v) = request.metadata().get(super::TARGET_NODE_HEADER) else {
            return Ok(());
        };
        let to = v.to_str().ok().and_then(|t| t.parse::<u64>().ok());
        match to {
            Some(to) if to == self.node.0 => Ok(()),
            Some(to) => Err(Status::failed_precondition(format!(
                "request for node {} reached node {}",
                NodeId(to),
                self.node
            ))),
            None => Err(bad_request("malformed target node")),
        }
    }

    fn raft(&self, group: u64) -> Result<GroupRaft, Status> {
        self.groups
            .get(GroupId(group))
            .ok_or_else(|| Status::not_found(format!("raft group {group} is not on this node")))
    }

    /// [`Self::raft`], waiting up to [`NEW_GROUP_WAIT`] for a group that is not created yet
    /// (the first vote requests of a brand-new group race with its creation on this node).
    async fn raft_soon(&self, group: u64) -> Result<GroupRaft, Status> {
        self.groups
            .get_soon(GroupId(group), NEW_GROUP_WAIT)
            .await
            .ok_or_else(|| Status::not_found(format!("raft group {group} is not on this node")))
    }
}

/// The service wrapped for a tonic server, accepting messages up to `max_message_size` bytes
/// (use the senders' [`GrpcSettings::max_message_size`](super::GrpcSettings)).
pub fn service_with_limit(
    node: NodeId,
    groups: Groups,
    max_message_size: usize,
) -> RaftServiceServer<RaftGrpcService> {
    RaftServiceServer::new(RaftGrpcService::new(node, groups))
        .max_decoding_message_size(max_message_size)
        .max_encoding_message_size(max_message_size)
}

/// The service wrapped for a tonic server with the default message size limit; add it to the
/// node's cluster-port server next to its other services.
pub fn service(node: NodeId, groups: Groups) -> RaftServiceServer<RaftGrpcService> {
    service_with_limit(
        node,
        groups,
        super::GrpcSettings::default().max_message_size,
    )
}

fn bad_request(e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(e.to_string())
}

fn spool_failed(e: impl std::fmt::Display) -> Status {
    Status::internal(format!("spooling the snapshot failed: {e}"))
}

fn shutting_down() -> Status {
    Status::unavailable("node is shutting down")
}

fn stopped(group: u64, e: impl std::fmt::Display) -> Status {
    Status::failed_precondition(format!("raft group {group} stopped: {e}"))
}

fn decoded<T>(r: Result<T, DecodeError>) -> Result<T, Status> {
    r.map_err(bad_request)
}

impl RaftGrpcService {
    /// The answers to an append stream, once its first request named the group.
    async fn append_answers(
        self,
        mut inbound: tonic::Streaming<pb::AppendEntriesRequest>,
    ) -> AnswerStream {
        let first = match inbound.message().await {
            Ok(Some(first)) => first,
            Ok(None) => return Box::pin(futures_util::stream::empty()),
            Err(status) => return Box::pin(futures_util::stream::once(async { Err(status) })),
        };
        let group = first.group_id;
        let from = first.from;
        let raft = match self.raft(group) {
            Ok(raft) => raft,
            Err(status) => return Box::pin(futures_util::stream::once(async { Err(status) })),
        };
        // The sender and the local membership are fixed for the stream (a leader opens a new
        // one per term); every request is screened against them.
        let local = self.local(group, &raft);
        if let Err(status) = self.screened(group, from, local.check_append(&first)) {
            return Box::pin(futures_util::stream::once(async { Err(status) }));
        }
        let refusals = self.refusals.clone();
        let deliveries = Arc::new(Deliveries {
            groups: self.groups.clone(),
            group: GroupId(group),
            state: Mutex::new((VecDeque::new(), false)),
        });
        let delivered = deliveries.clone();
        let requests = futures_util::stream::once(futures_util::future::ready(Ok(first)))
            .chain(inbound)
            .scan((), move |(), next| {
                let rpc = match next {
                    Ok(req) if req.group_id == group && req.from == from => {
                        match local.check_append(&req) {
                            Ok(()) => append::request_from_pb(req).ok(),
                            Err(why) => {
                                refusals.note(group, from, &why);
                                None
                            }
                        }
                    }
                    _ => None,
                };
                if let Some(rpc) = &rpc {
                    delivered.handed(rpc.entries.is_empty());
                }
                futures_util::future::ready(rpc)
            });
        let answered = CloseOnDrop(deliveries);
        // Both directions end when the node's shutdown begins: openraft feeds the requests to
        // the group from a task of its own, which must not hand any to a group about to stop.
        let (stop_in, stop_out) = (self.groups.clone(), self.groups.clone());
        let requests = requests.take_until(async move { stop_in.stopped().await });
        let answers = raft
            .stream_append(requests)
            .take_until(async move { stop_out.stopped().await });
        Box::pin(answers.map(move |answer| {
            let result = answer.map_err(|e| stopped(group, e))?;
            answered
                .0
                .answered(!matches!(result, Err(StreamAppendError::HigherVote(_))));
            Ok(append::stream_result_to_pb(&result))
        }))
    }
}

/// The requests of one append stream handed to Raft and not answered yet, in order: whether
/// each was a heartbeat. A request with entries counts as a delivery in progress for the
/// group's quiescence ([`Groups::begin_delivery`]) until its answer wakes the group.
struct Deliveries {
    groups: Groups,
    group: GroupId,
    /// Heartbeat flags of the unanswered requests, and whether the stream's answers are gone.
    state: Mutex<(VecDeque<bool>, bool)>,
}

impl Deliveries {
    /// A request was handed to Raft.
    fn handed(&self, heartbeat: bool) {
        let mut st = self.state.lock();
        if st.1 {
            return;
        }
        if !heartbeat {
            self.groups.begin_delivery(self.group);
        }
        st.0.push_back(heartbeat);
    }

    /// The oldest request was answered; `contact` when the answer was not a higher vote. As
    /// for single calls: leader contact is noted, and a request with entries wakes the group.
    fn answered(&self, contact: bool) {
        let heartbeat = self.state.lock().0.pop_front().unwrap_or(true);
        if contact {
            self.groups.note_leader_contact(self.group);
        }
        if !heartbeat {
            self.groups.wake(self.group);
            self.groups.end_delivery(self.group);
        }
    }
}

/// Ends the deliveries of a stream whose answers were dropped (the sender went away).
struct CloseOnDrop(Arc<Deliveries>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        let mut st = self.0.state.lock();
        st.1 = true;
        for heartbeat in st.0.drain(..) {
            if !heartbeat {
                self.0.groups.end_delivery(self.0.group);
            }
        }
    }
}

/// The answers of an append stream, as tonic sends them.
type AnswerStream = Pin<Box<dyn Stream<Item = Result<pb::StreamAppendResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RaftService for RaftGrpcService {
    type StreamAppendStream = AnswerStream;

    /// A pipelined append stream of one group: the requests go to the group's Raft in order and
    /// each answer comes back once its entries are flushed here. The stream ends at the first
    /// request for another group or that cannot be decoded (the sender then sees its requests
    /// unanswered and opens a new stream). As for single calls, an answer other than a higher
    /// vote counts as leader contact, and a request with entries wakes a quiet group.
    async fn stream_append(
        &self,
        request: Request<tonic::Streaming<pb::AppendEntriesRequest>>,
    ) -> Result<Response<AnswerStream>, Status> {
        self.check_target(&request)?;
        let inbound = request.into_inner();
        // Answer the call at once: the first request may be a while coming (openraft opens the
        // stream before it has entries to send), and the sender times out the call's setup.
        let answers = self.clone().append_answers(inbound).flatten_stream();
        Ok(Response::new(Box::pin(answers)))
    }

    async fn append_entries(
        &self,
        request: Request<pb::AppendEntriesRequest>,
    ) -> Result<Response<pb::AppendEntriesResponse>, Status> {
        self.check_target(&request)?;
        let req = request.into_inner();
        let group = req.group_id;
        let raft = self.raft(group)?;
        self.screened(group, req.from, self.local(group, &raft).check_append(&req))?;
        let rpc = decoded(append::request_from_pb(req))?;
        // A heartbeat leaves a quiet follower quiet (see `crate::quiesce`).
        let heartbeat = rpc.entries.is_empty();
        let resp = self
            .call(raft.append_entries(rpc))
            .await?
            .map_err(|e| stopped(group, e))?;
        if !matches!(resp, openraft::raft::AppendEntriesResponse::HigherVote(_)) {
            self.groups.note_leader_contact(GroupId(group));
        }
        if !heartbeat {
            self.groups.wake(GroupId(group));
        }
        Ok(Response::new(append::response_to_pb(&resp)))
    }

    async fn vote(
        &self,
        request: Request<pb::VoteRequest>,
    ) -> Result<Response<pb::VoteResponse>, Status> {
        self.check_target(&request)?;
        let req = request.into_inner();
        let group = req.group_id;
        let raft = self.raft_soon(group).await?;
        self.screened(
            group,
            req.from,
            self.local(group, &raft).check_vote_request(&req),
        )?;
        let mut rpc = decoded(vote::request_from_pb(req))?;
        if !rpc.leadership_transfer
            && self
                .groups
                .leader_unreachable(GroupId(group), rpc.vote.leader_id.node_id)
        {
            rpc.leadership_transfer = true;
        }
        let resp = self
            .call(raft.vote(rpc))
            .await?
            .map_err(|e| stopped(group, e))?;
        self.groups.wake(GroupId(group));
        Ok(Response::new(vote::response_to_pb(&resp)))
    }

    async fn pre_vote(
        &self,
        request: Request<pb::VoteRequest>,
    ) -> Result<Response<pb::VoteResponse>, Status> {
        self.check_target(&request)?;
        let req = request.into_inner();
        let group = req.group_id;
        let raft = self.raft_soon(group).await?;
        self.screened(
            group,
            req.from,
            self.local(group, &raft).check_vote_request(&req),
        )?;
        let rpc = decoded(vote::request_from_pb(req))?;
        let resp = self
            .call(raft.pre_vote(rpc))
            .await?
            .map_err(|e| stopped(group, e))?;
        self.groups.wake(GroupId(group));
        Ok(Response::new(vote::response_to_pb(&resp)))
    }

    async fn install_snapshot(
        &self,
        request: Request<tonic::Streaming<pb::SnapshotChunk>>,
    ) -> Result<Response<pb::SnapshotResponse>, Status> {
        self.check_target(&request)?;
        let mut stream = request.into_inner();
        let mut asm = Assembler::new(self.max_snapshot);
        let batch = self.spool.as_ref().map_or(usize::MAX, |s| s.batch);
        let mut spool = None;
        while let Some(chunk) = stream.message().await? {
            let first = asm.group().is_none();
            let from = chunk.from;
            asm.push(chunk).map_err(bad_request)?;
            if first && let Some(group) = asm.group() {
                // Refuse early rather than after receiving the whole snapshot.
                let raft = self.raft(group)?;
                self.screened(group, from, self.local(group, &raft).check_sender(from))?;
                asm.reserve_hinted(batch);
            }
            if asm.buffered() >= batch
                && let Some(settings) = &self.spool
            {
                let file = match &mut spool {
                    Some(file) => file,
                    None => spool.insert(settings.create().await.map_err(spool_failed)?),
                };
                file.append(asm.take_buffered())
                    .await
                    .map_err(spool_failed)?;
            }
        }
        let (group, from, vote, mut snap) = asm.finish().map_err(bad_request)?;
        if let Some(mut spool) = spool {
            let rest = std::mem::take(&mut snap.snapshot).into_bytes();
            spool
                .append(rest.map_err(spool_failed)?)
                .await
                .map_err(spool_failed)?;
            snap.snapshot = spool.into_data();
        }
        let raft = self.raft(group)?;
        self.screened(
            group,
            from,
            self.local(group, &raft).check_snapshot(from, &vote, &snap),
        )?;
        tracing::info!(
            group,
            from,
            bytes = snap.snapshot.size_hint(),
            "installing snapshot received over grpc"
        );
        let resp = self
            .call(raft.install_full_snapshot(vote, snap))
            .await?
            .map_err(|e| stopped(group, e))?;
        self.groups.wake(GroupId(group));
        Ok(Response::new(snapshot::response_to_pb(&resp)))
    }

    async fn transfer_leader(
        &self,
        request: Request<pb::TransferLeaderRequest>,
    ) -> Result<Response<pb::TransferLeaderResponse>, Status> {
        self.check_target(&request)?;
        let req = request.into_inner();
        let group = req.group_id;
        let raft = self.raft(group)?;
        self.screened(
            group,
            req.from,
            self.local(group, &raft).check_transfer(&req),
        )?;
        let rpc = decoded(transfer::request_from_pb(req))?;
        let resp = self
            .call(raft.handle_transfer_leader(rpc))
            .await?
            .map_err(|e| stopped(group, e))?;
        self.groups.wake(GroupId(group));
        Ok(Response::new(transfer::response_to_pb(&resp)))
    }

    async fn quiesce(
        &self,
        request: Request<pb::QuiesceRequest>,
    ) -> Result<Response<pb::QuiesceResponse>, Status> {
        self.check_target(&request)?;
        let pb_req = request.into_inner();
        let raft = self.raft(pb_req.group_id)?;
        let group = pb_req.group_id;
        self.screened(
            group,
            pb_req.from,
            self.local(group, &raft).check_quiesce(&pb_req),
        )?;
        if self.groups.is_stopping() {
            return Err(shutting_down());
        }
        let req = decoded(QuiesceRequest::from_pb(pb_req))?;
        let quiet = self.groups.accept_quiesce(&req);
        Ok(Response::new(pb::QuiesceResponse { quiet }))
    }
}
