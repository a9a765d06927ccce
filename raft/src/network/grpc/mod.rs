//! The gRPC Raft transport: [`GrpcTransport`] (outbound, a
//! [`GroupRouter`](openraft_multi::GroupRouter) with one connection per peer address shared by
//! every group) and [`RaftGrpcService`] (inbound, dispatching by group id through
//! [`crate::Groups`]).
//!
//! A node hosts one tonic server on its cluster port; it adds [`service`] next to its own
//! services, or uses [`serve`] when the Raft service is all it needs (tests, examples):
//!
//! ```text
//! let transport = GrpcTransport::new(node);
//! let registry = GroupRegistry::new(node, transport.clone(), timing)?;
//! Server::builder().add_service(grpc::service(registry.node_id(), registry.groups().clone())).serve(addr);
//! ```
//!
//! Messages are the `jetraft.raft` protobufs ([`crate::convert`] maps them); snapshots travel as
//! a client stream of chunks of at most [`CHUNK_SIZE`](crate::convert::snapshot::CHUNK_SIZE)
//! bytes on a separate channel, so a transfer does not hold up heartbeats; a lazy snapshot is read
//! as it is sent.

mod append_outbound;
mod client;
mod peers;
pub mod screen;
mod security;
mod server;
mod snapshot_send;

/// HTTP/2 streams a peer may hold open on one connection. Every group this node follows keeps
/// an append stream open from its leader's node for as long as the leader leads, on the one
/// connection per peer, so the common server default of 200 would stall the 201st group's
/// replication and every call queued behind it (heartbeats, votes).
pub const MAX_CONCURRENT_STREAMS: u32 = 1 << 20;
use std::future::Future;

use futures_util::Stream;
use tokio::net::{TcpListener, TcpStream};

pub use client::GrpcTransport;
pub use peers::GrpcSettings;
pub use security::{LinkSecurity, ROUTE_AUTH_HEADER};
pub use server::{
    MAX_SNAPSHOT_BYTES, MAX_SPOOLED_SNAPSHOT_BYTES, REFUSAL_REPORT, RaftGrpcService, service,
    service_with_limit,
};

/// gRPC metadata key carrying the Raft node id a request is addressed to; the receiving node
/// refuses requests addressed to another id (`FailedPrecondition`).
pub const TARGET_NODE_HEADER: &str = "jetraft-target-node";

use crate::registry::Groups;

/// Accepted connections of `listener` as a stream for tonic, with `TCP_NODELAY` set.
pub fn incoming(listener: TcpListener) -> impl Stream<Item = std::io::Result<TcpStream>> {
    futures_util::stream::unfold(listener, |listener| async move {
        let conn = listener.accept().await.and_then(|(stream, _peer)| {
            stream.set_nodelay(true)?;
            Ok(stream)
        });
        Some((conn, listener))
    })
}

/// Serves only the Raft service of node `node` for `groups` on `listener` until `shutdown`
/// resolves.
///
/// Servers of the Raft service must allow [`MAX_CONCURRENT_STREAMS`].
pub async fn serve(
    listener: TcpListener,
    node: crate::NodeId,
    groups: Groups,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .add_service(service(node, groups))
        .serve_with_incoming_shutdown(incoming(listener), shutdown)
        .await
}
