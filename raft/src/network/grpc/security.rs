//! How a node's outbound cluster links are secured: TLS (the peer's certificate verified
//! against the cluster CA, this node's own certificate presented) and the route credentials
//! stamped on every call. One [`LinkSecurity`] serves the Raft transport and the node links.

use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{ClientTlsConfig, Endpoint};

/// gRPC metadata key carrying the route credentials (`user:password`, base64).
pub const ROUTE_AUTH_HEADER: &str = "jetraft-route-auth";

/// TLS and credentials for dialing peers. The default is plaintext without credentials.
#[derive(Clone, Default)]
pub struct LinkSecurity {
    /// Client-side TLS; `None`: plaintext links.
    pub tls: Option<ClientTlsConfig>,
    /// The [`ROUTE_AUTH_HEADER`] value presented on every call.
    pub credentials: Option<MetadataValue<Ascii>>,
}

impl std::fmt::Debug for LinkSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkSecurity")
            .field("tls", &self.tls.is_some())
            .field("credentials", &self.credentials.is_some())
            .finish()
    }
}

impl LinkSecurity {
    /// An endpoint for `addr` (`host:port` or a URI): `https://` with the TLS settings when
    /// TLS is on, `http://` otherwise. `Err` carries why the address is unusable.
    pub fn endpoint(&self, addr: &str, connect_timeout: Duration) -> Result<Endpoint, String> {
        let host_port = addr.split_once("://").map_or(addr, |(_, rest)| rest);
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let endpoint = Endpoint::from_shared(format!("{scheme}://{host_port}"))
            .map_err(|e| e.to_string())?
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true);
        match &self.tls {
            Some(tls) => endpoint
                .tls_config(tls.clone().assume_http2(true))
                .map_err(|e| e.to_string()),
            None => Ok(endpoint),
        }
    }

    /// Adds the route credentials to `request`.
    pub fn stamp<T>(&self, request: &mut tonic::Request<T>) {
        if let Some(v) = &self.credentials {
            request.metadata_mut().insert(ROUTE_AUTH_HEADER, v.clone());
        }
    }
}
