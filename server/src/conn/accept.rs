//! The client listener's accept loop: each accepted socket gets its INFO, a registry entry and
//! its reader and writer tasks.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

use super::{ConnContext, reader, writer};
use crate::bus::{Client, CloseReason};
use crate::protocol::encode;

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
    let cid = ctx.clients.next_cid();
    let client = Arc::new(Client::new(
        cid,
        addr,
        ctx.config.max_pending,
        &ctx.shutdown,
    ));
    {
        let mut out = client.out.lock();
        encode::info(&mut out.buf, &ctx.info_for(&client, false));
    }
    client.wake_writer();
    let max = usize::try_from(ctx.config.max_connections).unwrap_or(usize::MAX);
    let too_many = !ctx.clients.register(&client, max);
    debug!(cid, %addr, "client connection created");
    if too_many {
        client.send_err("maximum connections exceeded");
        client.close(CloseReason::MaxConnections);
    }
    let (rd, wr) = sock.into_split();
    ctx.tasks
        .spawn(writer::run(ctx.clone(), client.clone(), wr));
    if !too_many {
        ctx.tasks.spawn(reader::run(ctx.clone(), client, rd));
    }
}
