//! The cluster port: one tonic server for every node-to-node gRPC service.
//!
//! [`routes`] lists the services; add another one (the Raft service, say) there with
//! `builder.add_service(...)`, and it is served on the same port and connections as `NodeLink`.

use std::time::Duration;

use jetraft_proto::cluster::node_link_server::NodeLinkServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::service::InterceptorLayer;
use tonic::service::{Routes, RoutesBuilder};
use tonic::transport::ServerTlsConfig;
use tonic::transport::server::TcpIncoming;
use tracing::warn;

use super::ClusterContext;
use super::link::{LinkService, MAX_FRAME_BYTES};
use super::security::RouteGate;

/// HTTP/2 flow-control window per stream: large, so a forwarding stream is not throttled to
/// 64 KiB per round trip.
pub const STREAM_WINDOW: u32 = 8 * 1024 * 1024;
/// HTTP/2 flow-control window per connection.
pub const CONNECTION_WINDOW: u32 = 16 * 1024 * 1024;

/// Every gRPC service served on the cluster port.
pub fn routes(ctx: &ClusterContext) -> Routes {
    let mut builder = RoutesBuilder::default();
    builder.add_service(
        NodeLinkServer::new(LinkService::new(ctx.clone()))
            .max_decoding_message_size(MAX_FRAME_BYTES),
    );
    builder.routes()
}

/// How long the cluster port's server lets calls in progress finish after shutdown began.
/// Peers keep long-lived calls open (node links, Raft append streams), which a graceful stop
/// would wait for without end, so the server stops after this grace regardless.
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// Serves `routes` on `listener` until `shutdown` is cancelled (plus at most
/// [`SHUTDOWN_GRACE`]), with mutual TLS when `tls` is set and every call checked by `gate`
/// (route credentials).
pub async fn serve(
    listener: TcpListener,
    routes: Routes,
    tls: Option<ServerTlsConfig>,
    gate: RouteGate,
    shutdown: CancellationToken,
) {
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = match builder.tls_config(tls) {
            Ok(b) => b,
            Err(e) => {
                warn!(error = %e, "cluster listener TLS setup failed");
                return;
            }
        };
    }
    let server = builder
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .http2_keepalive_interval(Some(super::link::KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(super::link::KEEPALIVE_TIMEOUT))
        .max_concurrent_streams(jetraft_raft::network::grpc::MAX_CONCURRENT_STREAMS)
        .layer(InterceptorLayer::new(gate))
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, shutdown.clone().cancelled_owned());
    let grace_over = async {
        shutdown.cancelled().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    let result = tokio::select! {
        result = server => result,
        // Dropping the server stops it; the connections still open close with the process.
        () = grace_over => Ok(()),
    };
    if let Err(e) = result {
        warn!(error = %e, "cluster listener failed");
    }
}
