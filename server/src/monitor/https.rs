//! The monitoring endpoints over HTTPS (`https_port`, `-ms`): an [`axum::serve::Listener`]
//! whose connections are TLS streams. Handshakes run in tasks of their own, bounded by the
//! TLS `timeout`, so a client that stalls its handshake holds up nobody.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// Handshaken connections waiting for the HTTP server.
const QUEUE: usize = 64;

/// A listener yielding TLS connections.
pub(super) struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    /// Accepts on `listener` and hands out the connections whose handshake completed within
    /// `timeout`, until `shutdown`.
    pub(super) fn new(
        listener: TcpListener,
        acceptor: TlsAcceptor,
        timeout: Duration,
        shutdown: CancellationToken,
    ) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(QUEUE);
        tokio::spawn(async move {
            loop {
                let (sock, addr) = tokio::select! {
                    () = shutdown.cancelled() => return,
                    accepted = listener.accept() => match accepted {
                        Ok(a) => a,
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                };
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(timeout, acceptor.accept(sock)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, addr)).await;
                        }
                        Ok(Err(e)) => debug!(%addr, error = %e, "monitoring TLS handshake error"),
                        Err(_) => debug!(%addr, "monitoring TLS handshake timeout"),
                    }
                });
            }
        });
        Ok(Self { local, ready })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The acceptor stopped (shutdown): the server's graceful shutdown ends it.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
