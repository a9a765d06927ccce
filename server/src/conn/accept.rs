//! The client listener's accept loop: each accepted socket gets its INFO, a registry entry and
//! its reader and writer tasks.
//!
//! With client TLS, the NATS upgrade runs first, in a task of its own so a slow handshake holds
//! up nobody: INFO in plaintext, then the client starts TLS (or, with `handshake_first`, TLS
//! before INFO). With `allow_non_tls`, the first byte the client sends tells whether it starts
//! TLS (a handshake record) or stays in plaintext. A failed or timed-out handshake closes the
//! socket without a word to the client (nats-server does the same) and logs
//! `TLS handshake error`.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

use super::{ClientTls, ConnContext, reader, writer};
use crate::auth::new_nonce;
use crate::bus::{Client, CloseReason};
use crate::protocol::encode;
use crate::tls::HANDSHAKE_RECORD;
use crate::tls::identity::cert_identities;

/// Accepts clients until shutdown or lame duck mode (the listener closes, new clients go to
/// other nodes).
pub async fn run(ctx: Arc<ConnContext>, listener: TcpListener) {
    loop {
        tokio::select! {
            () = ctx.shutdown.cancelled() => break,
            () = ctx.lame_duck.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((sock, addr)) => on_accept(&ctx, sock, addr),
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
        }
    }
}

fn on_accept(ctx: &Arc<ConnContext>, sock: TcpStream, addr: SocketAddr) {
    let _ = sock.set_nodelay(true);
    let settings = ctx.settings.load();
    let client = new_client(ctx, addr);
    match settings.tls.clone() {
        None => {
            queue_info(ctx, &client);
            let (rd, wr) = sock.into_split();
            start(ctx, client, rd, wr, None);
        }
        Some(tls) => {
            let ctx2 = ctx.clone();
            ctx.tasks.spawn(async move {
                let shutdown = ctx2.shutdown.clone();
                tokio::select! {
                    () = shutdown.cancelled() => {}
                    () = upgrade(ctx2, tls, client, sock) => {}
                }
            });
        }
    }
}

/// A new connection's state (its nonce set when NKEY users are configured).
fn new_client(ctx: &ConnContext, addr: SocketAddr) -> Arc<Client> {
    let cid = ctx.clients.next_cid();
    let client = Arc::new(Client::new(
        cid,
        addr,
        ctx.config().max_pending,
        &ctx.shutdown,
    ));
    if ctx.auth().wants_nonce() {
        let _ = client.nonce.set(new_nonce());
    }
    debug!(cid, %addr, "client connection created");
    client
}

/// Queues the first INFO for the writer.
fn queue_info(ctx: &ConnContext, client: &Client) {
    let mut out = client.out.lock();
    encode::info(&mut out.buf, &ctx.info_for(client, false));
}

/// The TLS upgrade of one connection, then its reader and writer.
async fn upgrade(ctx: Arc<ConnContext>, tls: ClientTls, client: Arc<Client>, mut sock: TcpStream) {
    let timeout = tls.settings.timeout;
    if !tls.settings.handshake_first {
        let mut info = BytesMut::new();
        encode::info(&mut info, &ctx.info_for(&client, false));
        match tokio::time::timeout(timeout, sock.write_all(&info)).await {
            Ok(Ok(())) => {}
            _ => return,
        }
        if !starts_tls(&sock, timeout).await {
            if tls.allow_non_tls {
                let (rd, wr) = sock.into_split();
                start(&ctx, client, rd, wr, None);
            } else {
                // Not a TLS client: close without an alert or -ERR, as nats-server does.
                handshake_failed(&client, "first record does not look like a TLS handshake");
            }
            return;
        }
    }
    let stream = match tokio::time::timeout(timeout, tls.acceptor.accept(sock)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            handshake_failed(&client, &e.to_string());
            return;
        }
        Err(_) => {
            handshake_failed(&client, "timeout");
            return;
        }
    };
    let (_, conn) = stream.get_ref();
    let identities = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| cert_identities(c.as_ref()));
    let (version, cipher) = crate::tls::describe(conn);
    {
        let mut meta = client.meta.lock();
        meta.tls_version = version;
        meta.tls_cipher = cipher;
    }
    if tls.settings.handshake_first {
        queue_info(&ctx, &client);
    }
    let (rd, wr) = tokio::io::split(stream);
    start(&ctx, client, rd, wr, identities);
}

/// Whether the client's first byte opens a TLS handshake. A client that says nothing within
/// `timeout` is not a TLS client (with `allow_non_tls`, its reader applies the auth timeout).
async fn starts_tls(sock: &TcpStream, timeout: std::time::Duration) -> bool {
    let mut first = [0u8; 1];
    matches!(
        tokio::time::timeout(timeout, sock.peek(&mut first)).await,
        Ok(Ok(1)) if first[0] == HANDSHAKE_RECORD
    )
}

/// nats-server's log line for a failed handshake; the client gets no `-ERR`.
fn handshake_failed(client: &Client, why: &str) {
    warn!(cid = client.cid, addr = %client.addr, "TLS handshake error: {why}");
    client.close(CloseReason::TlsHandshakeError);
}

/// Registers the client and starts its reader and writer on the (possibly TLS) stream halves.
fn start<R, W>(
    ctx: &Arc<ConnContext>,
    client: Arc<Client>,
    rd: R,
    wr: W,
    cert_identities: Option<Vec<String>>,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    client.wake_writer();
    let max = usize::try_from(ctx.config().max_connections).unwrap_or(usize::MAX);
    let too_many = !ctx.clients.register(&client, max);
    if too_many {
        client.send_err("maximum connections exceeded");
        client.close(CloseReason::MaxConnections);
    }
    ctx.tasks
        .spawn(writer::run(ctx.clone(), client.clone(), wr));
    if !too_many {
        ctx.tasks
            .spawn(reader::run(ctx.clone(), client, rd, cert_identities));
    }
}
