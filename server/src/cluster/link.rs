//! Links between nodes: [`dial_loop`] keeps an outbound link to one address up forever, and
//! [`LinkService`] (the `NodeLink` gRPC service) accepts peers' links and applies what they send.
//!
//! Handshake: the dialer sends its `Hello` first; the acceptor answers with its own. A `Hello`
//! with this node's own id means the address is this node (a node may list itself in
//! `--routes`): the dialer stops dialing it. A different cluster name refuses the link: the
//! acceptor answers with its `Hello` and ends the call, and the dialer keeps retrying at the
//! slowest backoff (the other side may be reconfigured).

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::Stream;
use jetraft_proto::cluster::node_link_client::NodeLinkClient;
use jetraft_proto::cluster::node_link_server::NodeLink;
use jetraft_proto::cluster::{Frame, Hello, KnownPeer, frame::Kind};
use jetraft_proto::node::NodeIdentity;
use rand::Rng;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, info, warn};

use super::ClusterContext;
use super::identity::NodeId;
use super::listener::{CONNECTION_WINDOW, STREAM_WINDOW};
use super::outbound::PeerSender;
use super::peers::{Direction, PeerInfo};
use crate::bus::{FlushSet, Msg, Origin};
use crate::trace::{Ingress, Trace, Tracer};

/// Largest frame accepted on a link (batches aim at 1 MiB; one message may reach max_payload).
pub const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;
/// Bound on connecting and on waiting for the peer's `Hello`.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// HTTP/2 pings on node links, both directions. A link whose ping goes unanswered for
/// [`KEEPALIVE_TIMEOUT`] is closed, and a peer with no link left counts as unreachable: that is
/// how quiet Raft groups (which send no heartbeats) notice a hung or silently cut-off leader,
/// within interval + timeout, and how soon the others elect a successor of a silently cut-off
/// leader (the chaos suite's isolate-leader publish gap went from 5.0 s to 2.8 s when this was
/// lowered from 2 s + 3 s). Leaders' read leases are a third of the timeout (see
/// `jetstream::runtime::api`), so lowering it shortens them too.
pub(crate) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
/// See [`KEEPALIVE_INTERVAL`].
pub(crate) const KEEPALIVE_TIMEOUT: Duration = Duration::from_millis(1500);
/// First reconnect delay.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Longest reconnect delay (plus up to half of it as jitter). It bounds how long a healed
/// partition waits for the first redial (the side that gets through first makes the other
/// redial at once, see `ClusterState::redial`); a dial to a peer that is down costs one refused
/// connect, so a short cap is cheap.
const BACKOFF_MAX: Duration = Duration::from_millis(750);

/// How one attempt at an outbound link ended.
#[derive(Debug)]
enum LinkEnd {
    /// The address is this node.
    IsSelf,
    /// The peer belongs to another cluster.
    Refused {
        /// The peer's cluster name.
        cluster: String,
    },
    /// A link to that peer is already up (the address is an alias).
    Duplicate,
    /// Connecting or the handshake failed.
    Failed(String),
    /// The link was up and then ended.
    Closed,
}

/// Starts a dial loop to `addr` unless one is running for that address or for `node`.
pub fn ensure_dialer(ctx: &ClusterContext, addr: &str, node: Option<NodeId>) {
    let cluster = &ctx.cluster;
    {
        let mut dialers = cluster.dialers.lock();
        let known = dialers.contains_key(addr)
            || node.is_some_and(|n| dialers.values().any(|d| *d == Some(n)));
        if known {
            return;
        }
        dialers.insert(addr.to_string(), node);
    }
    ctx.tasks.spawn(dial_loop(ctx.clone(), addr.to_string()));
}

/// Keeps an outbound link to `addr` up, reconnecting with jittered exponential backoff, until
/// shutdown or until the address turns out to be this node.
async fn dial_loop(ctx: ClusterContext, addr: String) {
    let mut backoff = BACKOFF_MIN;
    let mut refused_logged = false;
    let wake = Arc::new(tokio::sync::Notify::new());
    ctx.cluster
        .dial_wakes
        .lock()
        .insert(addr.clone(), wake.clone());
    loop {
        if ctx.shutdown.is_cancelled() {
            return;
        }
        match run_link(&ctx, &addr).await {
            LinkEnd::IsSelf => {
                debug!(%addr, "route to self ignored");
                ctx.cluster.dialers.lock().remove(&addr);
                ctx.cluster.dial_wakes.lock().remove(&addr);
                return;
            }
            LinkEnd::Refused { cluster } => {
                if !refused_logged {
                    warn!(%addr, peer_cluster = %cluster, "route refused: cluster name differs");
                    refused_logged = true;
                }
                backoff = BACKOFF_MAX;
            }
            LinkEnd::Duplicate => backoff = BACKOFF_MAX,
            LinkEnd::Failed(e) => debug!(%addr, error = %e, "route connect failed"),
            LinkEnd::Closed => {
                backoff = BACKOFF_MIN;
                refused_logged = false;
            }
        }
        let jitter = rand::rng().random_range(0..=backoff.as_millis() as u64 / 2);
        let delay = backoff + Duration::from_millis(jitter);
        tokio::select! {
            () = ctx.shutdown.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
            () = wake.notified() => {
                debug!(%addr, "peer linked to us: redialing now");
                backoff = BACKOFF_MIN;
                continue;
            }
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// One outbound link attempt: connect, handshake, register, then wait until it ends.
async fn run_link(ctx: &ClusterContext, addr: &str) -> LinkEnd {
    let cluster = &ctx.cluster;
    // A link to the node behind this address is already up (dialed through another address
    // or before this loop was woken): dialing again would only open a session the peer takes
    // as current and that then ends as a duplicate.
    let known = cluster.dialers.lock().get(addr).copied().flatten();
    if known.is_some_and(|n| cluster.has_outbound(n)) {
        return LinkEnd::Duplicate;
    }
    let endpoint = match ctx.security.endpoint(addr, HANDSHAKE_TIMEOUT) {
        Ok(e) => e,
        Err(e) => return LinkEnd::Failed(e),
    };
    let endpoint = endpoint
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT);
    let channel = match ctx.security.connect(&endpoint).await {
        Ok(c) => c,
        Err(e) => return LinkEnd::Failed(e.to_string()),
    };
    let mut client = NodeLinkClient::new(channel).max_decoding_message_size(MAX_FRAME_BYTES);
    let sender = Arc::new(PeerSender::new(cluster.stats.dropped_msgs.clone()));
    let first = hello(cluster);
    let sent_meta = first.has_meta_state;
    let mut request = tonic::Request::new(sender.clone().frames(first));
    ctx.security.stamp(&mut request);
    let mut inbound = match tokio::time::timeout(HANDSHAKE_TIMEOUT, client.link(request)).await {
        Ok(Ok(r)) => r.into_inner(),
        Ok(Err(status)) => return LinkEnd::Failed(status.to_string()),
        Err(_) => return LinkEnd::Failed("handshake timed out".into()),
    };
    let end = |e: LinkEnd| {
        sender.closed.cancel();
        e
    };
    let (peer, peer_meta, gossip) =
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, inbound.message()).await {
            Ok(Ok(Some(Frame {
                kind: Some(Kind::Hello(h)),
            }))) => (h.identity.unwrap_or_default(), h.has_meta_state, h.gossip),
            Ok(Ok(_)) => return end(LinkEnd::Failed("peer did not send Hello".into())),
            Ok(Err(status)) => return end(LinkEnd::Failed(status.to_string())),
            Err(_) => return end(LinkEnd::Failed("no Hello from peer".into())),
        };
    if peer.node_id == cluster.identity.node_id {
        return end(LinkEnd::IsSelf);
    }
    if peer.cluster_name != cluster.identity.cluster_name {
        return end(LinkEnd::Refused {
            cluster: peer.cluster_name,
        });
    }
    let node = NodeId(peer.node_id);
    // Known from here on, also when it is an alias of a link already up: the next attempt
    // then ends before connecting (see the check at the top).
    cluster.dialers.lock().insert(addr.to_string(), Some(node));
    if !cluster.register_sender(node, &sender) {
        return end(LinkEnd::Duplicate);
    }
    if !sent_meta && cluster.has_meta_state() {
        // Meta state arrived between our Hello and the registration, so the fresh Hello of
        // `ClusterState::set_has_meta_state` missed this link: send it now.
        sender.push_hello(hello(cluster));
    }
    let host = addr.rsplit_once(':').map(|(h, _)| h);
    let info = peer_info(&peer, peer_meta, host.and_then(|h| h.parse().ok()));
    info!(peer = %info.server_name, %addr, "route connection created");
    cluster.peers.set_link(&info, Direction::Outbound, true);
    cluster.links_changed();
    if peer_meta {
        follow_gossip(ctx, &gossip);
    }
    // The response stream carries nothing after the Hello; it ends when the peer drops us.
    loop {
        tokio::select! {
            () = ctx.shutdown.cancelled() => break,
            () = sender.closed.cancelled() => break,
            m = inbound.message() => match m {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            },
        }
    }
    cluster.unregister_sender(node, &sender);
    cluster.peers.set_link(&info, Direction::Outbound, false);
    cluster.links_changed();
    info!(peer = %info.server_name, %addr, "route connection closed");
    LinkEnd::Closed
}

/// This node's `Hello`.
pub(crate) fn hello(cluster: &super::ClusterState) -> Hello {
    let peers = cluster.peers.snapshot();
    Hello {
        identity: Some(cluster.identity.clone()),
        has_meta_state: cluster.has_meta_state(),
        known_peers: peers.values().map(|p| p.cluster_addr.clone()).collect(),
        // Only peers linked now: a member scaled away long ago is not worth a dial loop.
        gossip: peers
            .values()
            .filter(|p| p.is_connected() && !p.cluster_addr.is_empty())
            .map(|p| KnownPeer {
                node_id: p.node_id.0,
                cluster_addr: p.cluster_addr.clone(),
            })
            .collect(),
    }
}

/// Route gossip: dials every peer a member of the cluster told us about that no dial loop
/// reaches yet, so a node that joins through one seed links to every member (and they link
/// back when it dials them). Only followed from peers with meta state (an existing cluster):
/// during the first formation every node's routes name all of them, and a dial loop per
/// gossiped address would count in [`super::ClusterState::expected_peers`].
fn follow_gossip(ctx: &ClusterContext, gossip: &[KnownPeer]) {
    let me = ctx.cluster.identity.node_id;
    for p in gossip {
        if p.node_id == me || p.node_id == 0 || p.cluster_addr.is_empty() {
            continue;
        }
        ensure_dialer(ctx, &p.cluster_addr, Some(NodeId(p.node_id)));
    }
}

/// A peer's table entry from its identity; an unspecified advertised host (`0.0.0.0`) is
/// replaced by the address the peer was reached at.
fn peer_info(id: &NodeIdentity, has_meta_state: bool, seen_at: Option<IpAddr>) -> PeerInfo {
    PeerInfo {
        has_meta_state,
        node_id: NodeId(id.node_id),
        server_name: id.server_name.clone(),
        server_id: id.server_id.clone(),
        client_url: concrete_addr(&id.client_url, seen_at),
        cluster_addr: concrete_addr(&id.cluster_addr, seen_at),
        tags: id.tags.clone(),
        inbound: false,
        outbound: false,
    }
}

/// `host:port` with an unspecified host replaced by `seen_at`.
pub fn concrete_addr(addr: &str, seen_at: Option<IpAddr>) -> String {
    let Some((host, port)) = addr.rsplit_once(':') else {
        return addr.to_string();
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let unspecified = host.is_empty() || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified());
    match seen_at {
        Some(IpAddr::V6(ip)) if unspecified => format!("[{ip}]:{port}"),
        Some(ip) if unspecified => format!("{ip}:{port}"),
        _ => addr.to_string(),
    }
}

/// The `NodeLink` service: accepts peers' links.
#[derive(Debug)]
pub struct LinkService {
    /// The node whose local subscribers get forwarded messages.
    ctx: ClusterContext,
}

impl LinkService {
    /// The service of the node behind `ctx`.
    pub fn new(ctx: ClusterContext) -> Self {
        Self { ctx }
    }
}

/// The response stream of an accepted link: our `Hello`, then nothing until the link ends.
type HelloThenWait = Pin<Box<dyn Stream<Item = Result<Frame, Status>> + Send>>;

fn hello_then_wait(hello: Hello, done: CancellationToken) -> HelloThenWait {
    let first = Frame {
        kind: Some(Kind::Hello(hello)),
    };
    Box::pin(futures_util::stream::unfold(
        (Some(first), done),
        |(first, done)| async move {
            if let Some(f) = first {
                return Some((Ok(f), (None, done)));
            }
            done.cancelled().await;
            None
        },
    ))
}

#[tonic::async_trait]
impl NodeLink for LinkService {
    type LinkStream = HelloThenWait;

    async fn link(
        &self,
        request: Request<Streaming<Frame>>,
    ) -> Result<Response<Self::LinkStream>, Status> {
        let cluster = &self.ctx.cluster;
        let seen_at = request.remote_addr().map(|a| a.ip());
        let mut inbound = request.into_inner();
        let (peer, peer_meta, gossip) =
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, inbound.message()).await {
                Ok(Ok(Some(Frame {
                    kind: Some(Kind::Hello(h)),
                }))) => (h.identity.unwrap_or_default(), h.has_meta_state, h.gossip),
                Ok(Ok(_)) => return Err(Status::invalid_argument("first frame must be Hello")),
                Ok(Err(status)) => return Err(status),
                Err(_) => return Err(Status::deadline_exceeded("no Hello")),
            };
        let done = CancellationToken::new();
        let reply = hello_then_wait(hello(cluster), done.clone());
        if peer.node_id == cluster.identity.node_id || peer.node_id == 0 {
            done.cancel();
            return Ok(Response::new(reply));
        }
        if peer.cluster_name != cluster.identity.cluster_name {
            warn!(
                peer = %peer.server_name,
                peer_cluster = %peer.cluster_name,
                "route refused: cluster name differs"
            );
            done.cancel();
            return Ok(Response::new(reply));
        }
        let info = peer_info(&peer, peer_meta, seen_at);
        if peer_meta {
            follow_gossip(&self.ctx, &gossip);
        }
        self.ctx
            .tasks
            .spawn(run_inbound(self.ctx.clone(), info, inbound, done));
        Ok(Response::new(reply))
    }
}

/// Applies an accepted link's frames until it ends, then forgets the peer's interest.
async fn run_inbound(
    ctx: ClusterContext,
    info: PeerInfo,
    mut inbound: Streaming<Frame>,
    done: CancellationToken,
) {
    let cluster = &ctx.cluster;
    let node = info.node_id;
    let session = cluster.remote_begin(node, &ctx.bus);
    cluster.peers.set_link(&info, Direction::Inbound, true);
    cluster.links_changed();
    ensure_dialer(&ctx, &info.cluster_addr, Some(node));
    cluster.redial(node, &info.cluster_addr);
    let mut flush = FlushSet::default();
    loop {
        let frame = tokio::select! {
            () = ctx.shutdown.cancelled() => break,
            m = inbound.message() => match m {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    debug!(peer = %info.server_name, error = %e, "route read failed");
                    break;
                }
            },
        };
        match frame.kind {
            Some(Kind::Interest(i)) => {
                cluster.remote_apply(node, session, i.snapshot, i.changes, &ctx.bus);
            }
            Some(Kind::Msgs(batch)) => {
                cluster
                    .stats
                    .received_msgs
                    .fetch_add(batch.msgs.len() as u64, Ordering::Relaxed);
                for m in &batch.msgs {
                    let reply = (!m.reply.is_empty()).then_some(&m.reply[..]);
                    let hdrs = (!m.headers.is_empty()).then_some(&m.headers[..]);
                    let shown = if m.shown_subject.is_empty() {
                        &m.subject
                    } else {
                        &m.shown_subject
                    };
                    let msg = Msg::new(&m.subject, &m.payload)
                        .in_account(crate::bus::account_from_wire(&m.account))
                        .reply(reply)
                        .headers(hdrs)
                        .shown_as(shown);
                    // Only copies routing forwarded carry a hop; JetStream's own forwards
                    // (publishes sent to a stream leader) are not deliveries to trace.
                    let trace = hdrs
                        .and_then(|h| Trace::from_headers(h, msg.size()))
                        .filter(Trace::has_hop);
                    flush.trace = trace.as_ref().map(Trace::recorder);
                    ctx.bus
                        .route(Origin::Peer { queues: &m.queues }, &msg, &mut flush);
                    if let Some(t) = trace {
                        let route = flush.trace.take().unwrap_or_default();
                        let tracer = Tracer {
                            bus: &ctx.bus,
                            node: &ctx.node,
                            tags: &cluster.identity.tags,
                            jetstream: ctx.jetstream,
                        };
                        let from = Ingress::Peer {
                            node: node.0,
                            name: &info.server_name,
                        };
                        t.publish(tracer, from, msg.account, &m.subject, &route);
                    }
                }
                for c in flush.wake.drain(..) {
                    c.notify.notify_one();
                }
                flush.stalled.clear();
                flush.paced.clear();
            }
            // A later `Hello`: the peer got meta state since the link began (see
            // `ClusterState::set_has_meta_state`); its gossip now counts.
            Some(Kind::Hello(h)) if h.has_meta_state => follow_gossip(&ctx, &h.gossip),
            Some(Kind::Hello(_)) | None => {}
        }
    }
    if cluster.remote_end(node, session, &ctx.bus) {
        // Only the peer's current session says whether its link to us is up.
        cluster.peers.set_link(&info, Direction::Inbound, false);
        cluster.links_changed();
    }
    done.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unspecified_hosts_become_the_address_seen() {
        let ip: IpAddr = "10.0.0.5".parse().unwrap();
        assert_eq!(concrete_addr("0.0.0.0:4222", Some(ip)), "10.0.0.5:4222");
        assert_eq!(concrete_addr("[::]:4222", Some(ip)), "10.0.0.5:4222");
        assert_eq!(concrete_addr("n1:4222", Some(ip)), "n1:4222");
        assert_eq!(concrete_addr("0.0.0.0:4222", None), "0.0.0.0:4222");
        let v6: IpAddr = "::1".parse().unwrap();
        assert_eq!(concrete_addr("0.0.0.0:1", Some(v6)), "[::1]:1");
    }
}
