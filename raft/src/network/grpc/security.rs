//! How a node's outbound cluster links are secured: TLS (this node's certificate presented,
//! the peer's verified against the cluster CA) and the route credentials stamped on every
//! call. One [`LinkSecurity`] serves the Raft transport and the node links.
//!
//! The peer's certificate must chain to the cluster CA; its host name is not checked, because
//! peers are also dialed at the address they were seen at (a pod IP in Kubernetes) rather than
//! a name in their certificate. With a private cluster CA, holding a certificate it issued is
//! what admits a node; the listener side demands one from every dialer too.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tonic::codegen::http::Uri;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, Endpoint};

/// gRPC metadata key carrying the route credentials (`user:password`, base64).
pub const ROUTE_AUTH_HEADER: &str = "jetraft-route-auth";

/// TLS and credentials for dialing peers. The default is plaintext without credentials.
#[derive(Clone, Default)]
pub struct LinkSecurity {
    /// Client-side TLS; `None`: plaintext links.
    pub tls: Option<Arc<rustls::ClientConfig>>,
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
    /// A rustls client configuration for cluster links: peers verified against `roots` (chain,
    /// validity, key usage; not the host name), `certs`/`key` presented, HTTP/2.
    pub fn client_config(
        provider: Arc<rustls::crypto::CryptoProvider>,
        roots: rustls::RootCertStore,
        certs: Vec<CertificateDer<'static>>,
        key: rustls::pki_types::PrivateKeyDer<'static>,
    ) -> Result<Arc<rustls::ClientConfig>, String> {
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| e.to_string())?;
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(CaOnly(webpki)))
            .with_client_auth_cert(certs, key)
            .map_err(|e| e.to_string())?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }

    /// An endpoint for `addr` (`host:port` or a URI). `Err` carries why it is unusable.
    pub fn endpoint(&self, addr: &str, connect_timeout: Duration) -> Result<Endpoint, String> {
        let host_port = addr.split_once("://").map_or(addr, |(_, rest)| rest);
        Ok(Endpoint::from_shared(format!("http://{host_port}"))
            .map_err(|e| e.to_string())?
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true))
    }

    /// A channel to `endpoint` that connects on first use.
    pub fn connect_lazy(&self, endpoint: &Endpoint) -> Channel {
        match &self.tls {
            Some(tls) => endpoint.connect_with_connector_lazy(TlsConnector(tls.clone())),
            None => endpoint.connect_lazy(),
        }
    }

    /// A channel to `endpoint`, connected now.
    pub async fn connect(&self, endpoint: &Endpoint) -> Result<Channel, tonic::transport::Error> {
        match &self.tls {
            Some(tls) => {
                endpoint
                    .connect_with_connector(TlsConnector(tls.clone()))
                    .await
            }
            None => endpoint.connect().await,
        }
    }

    /// Adds the route credentials to `request`.
    pub fn stamp<T>(&self, request: &mut tonic::Request<T>) {
        if let Some(v) = &self.credentials {
            request.metadata_mut().insert(ROUTE_AUTH_HEADER, v.clone());
        }
    }
}

/// Verifies the chain of a peer's certificate against the cluster CA, whatever name it was
/// dialed by (see the module docs); everything else as webpki does.
#[derive(Debug)]
struct CaOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for CaOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Dials a peer and runs the TLS handshake, for tonic.
#[derive(Clone)]
struct TlsConnector(Arc<rustls::ClientConfig>);

type Connecting =
    Pin<Box<dyn Future<Output = std::io::Result<TokioIo<TlsStream<TcpStream>>>> + Send>>;

impl tonic::codegen::Service<Uri> for TlsConnector {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = std::io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let config = self.0.clone();
        Box::pin(async move {
            let bad =
                |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_string());
            let host = uri.host().ok_or_else(|| bad("no host"))?;
            let host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let port = uri.port_u16().ok_or_else(|| bad("no port"))?;
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let name = ServerName::try_from(host).map_err(|_| bad("bad host name"))?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await?;
            Ok(TokioIo::new(tls))
        })
    }
}
