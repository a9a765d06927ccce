//! The writer task of a connection: flushes the outbound buffer and runs the ping timer.
//!
//! Each wake-up swaps the whole outbound buffer out and writes it at once under the write
//! deadline. When the connection is closing, whatever is queued (typically a final `-ERR`) is
//! written with a short deadline before the socket is shut down.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tracing::debug;

use super::ConnContext;
use crate::bus::{Client, CloseReason};
use crate::config::Config;
use crate::protocol::encode;

/// nats-server sends the first PING soon after connect to measure RTT.
const FIRST_PING: Duration = Duration::from_secs(2);
/// Deadline for the final flush of a closing connection.
const CLOSE_FLUSH: Duration = Duration::from_secs(1);

/// Runs the writer until the connection closes.
pub async fn run<W: AsyncWrite + Unpin>(ctx: Arc<ConnContext>, client: Arc<Client>, mut wr: W) {
    let (settings, mut settings_version) = ctx.settings.load_versioned();
    let mut cfg = settings.config.clone();
    drop(settings);
    let mut spare = BytesMut::with_capacity(64 * 1024);
    // No PINGs before CONNECT; the first one comes FIRST_PING after it (to measure RTT).
    let far = || after(Duration::from_secs(86400));
    let mut next_ping = far();
    let mut connected = false;
    let mut rtt_pending = true;
    loop {
        tokio::select! {
            biased;
            () = client.notify.notified() => {}
            () = tokio::time::sleep_until(next_ping) => {}
            () = client.closing.cancelled() => break,
        }
        if ctx.settings.version() != settings_version {
            // A config reload: new ping interval, ping_max and write deadline from now on.
            let (settings, version) = ctx.settings.load_versioned();
            cfg = settings.config.clone();
            settings_version = version;
        }
        if !connected && client.connected.load(Ordering::Acquire) {
            connected = true;
            next_ping = after(FIRST_PING.min(cfg.ping_interval));
        }
        // Checked after every wake-up, so a constantly busy writer still runs its ping timer.
        if tokio::time::Instant::now() >= next_ping {
            next_ping = after(cfg.ping_interval);
            on_ping_timer(&cfg, &client, rtt_pending);
            rtt_pending = false;
        }
        if let Err(reason) = flush(&client, &mut wr, &mut spare, cfg.write_deadline).await {
            client.close(reason);
            break;
        }
    }
    // Best effort: deliver what is queued (e.g. the final -ERR) before closing the socket.
    let _ = flush(&client, &mut wr, &mut spare, CLOSE_FLUSH).await;
    let _ = tokio::time::timeout(CLOSE_FLUSH, wr.shutdown()).await;
    client.drained.notify_waiters();
    debug!(cid = client.cid, "writer done");
}

/// `now + d`, saturating at a day so absurd configured intervals cannot overflow the clock.
fn after(d: Duration) -> tokio::time::Instant {
    tokio::time::Instant::now() + d.min(Duration::from_secs(86400))
}

/// Writes everything queued. `Err` carries the reason to close the connection.
async fn flush<W: AsyncWrite + Unpin>(
    client: &Client,
    wr: &mut W,
    spare: &mut BytesMut,
    deadline: Duration,
) -> Result<(), CloseReason> {
    client.flush_scheduled.store(false, Ordering::Release);
    {
        let mut out = client.out.lock();
        if out.buf.is_empty() {
            return Ok(());
        }
        std::mem::swap(&mut out.buf, spare);
        out.inflight = spare.len();
    }
    let res = tokio::time::timeout(deadline, async {
        wr.write_all(spare).await?;
        // A TLS stream buffers records until flushed; a TCP stream's flush is free.
        wr.flush().await
    })
    .await;
    spare.clear();
    if spare.capacity() > 4 * 1024 * 1024 {
        // Do not keep a burst-sized buffer around forever.
        *spare = BytesMut::with_capacity(64 * 1024);
    }
    client.out.lock().inflight = 0;
    client.drained.notify_waiters();
    match res {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(CloseReason::IoError),
        Err(_) => Err(CloseReason::SlowConsumer),
    }
}

/// nats-server's ping timer: PING when idle (or to measure the first RTT); close as stale when
/// too many PINGs are unanswered.
fn on_ping_timer(cfg: &Config, client: &Client, rtt_pending: bool) {
    let idle = time::OffsetDateTime::now_utc() - *client.last_activity.lock();
    if !(rtt_pending || idle >= cfg.ping_interval) {
        return;
    }
    let out = client.pings_out.load(Ordering::Relaxed);
    if out + 1 > cfg.ping_max {
        debug!(cid = client.cid, "stale client connection - closing");
        let mut buf = client.out.lock();
        encode::err(&mut buf.buf, "Stale Connection");
        drop(buf);
        client.close(CloseReason::StaleConnection);
        return;
    }
    client.pings_out.fetch_add(1, Ordering::Relaxed);
    *client.ping_sent.lock() = Some(Instant::now());
    client.out.lock().buf.extend_from_slice(encode::PING);
}
