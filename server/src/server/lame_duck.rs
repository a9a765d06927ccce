//! Lame duck mode (SIGUSR2, `jetraft --signal ldm`): leave the cluster gently before stopping.
//!
//! The steps, in nats-server's order:
//! 1. stop accepting clients (the client listener closes) and tell connected clients with an
//!    INFO carrying `ldm: true`; `/healthz` answers 503 from now on;
//! 2. never start another election here, and hand every Raft leadership this node holds (meta
//!    and streams) to the most caught-up voter, waiting until each took over;
//! 3. after `lame_duck_grace_period`, close the clients spread over the rest of
//!    `lame_duck_duration` so they reconnect to other nodes a few at a time;
//! 4. shut down as for SIGTERM.
//!
//! Step 2 is what keeps publishing going through a rolling restart: when the process stops,
//! no group it led has to wait for an election timeout.

use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use super::ServerHandle;
use crate::bus::{Client, CloseReason};

/// Longest the leadership hand-off may take before the node goes on regardless.
const HANDOFF_BOUND: Duration = Duration::from_secs(15);
/// Shortest pause between two batches of closed clients.
const MIN_CLOSE_INTERVAL: Duration = Duration::from_millis(10);

impl ServerHandle {
    /// Runs lame duck mode to its end: the server has shut down when this returns.
    pub async fn lame_duck(&self) {
        let conns = &self.conns;
        info!("entering lame duck mode, stop accepting new clients");
        conns.lame_duck.cancel();
        conns.send_async_info();
        if let Some(js) = &self.jetstream {
            js.hand_off_leaderships(HANDOFF_BOUND).await;
        }
        let clients = conns.clients.live();
        if !clients.is_empty() {
            let config = conns.config();
            let grace = config.lame_duck_grace_period;
            let window = config.lame_duck_duration.saturating_sub(grace);
            info!(
                clients = clients.len(),
                ?grace,
                ?window,
                "lame duck: closing client connections"
            );
            tokio::select! {
                () = tokio::time::sleep(grace) => {}
                () = self.shutdown.cancelled() => {}
            }
            close_spread(&conns.clients.live(), window, &self.shutdown).await;
        }
        self.shutdown().await;
    }
}

/// Closes `clients` evenly over `window` (in batches when there are many), stopping early if
/// the server shuts down meanwhile.
async fn close_spread(
    clients: &[Arc<Client>],
    window: Duration,
    shutdown: &tokio_util::sync::CancellationToken,
) {
    let (batch, pause) = schedule(clients.len(), window);
    for (i, chunk) in clients.chunks(batch).enumerate() {
        if i > 0 {
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = shutdown.cancelled() => return,
            }
        }
        for c in chunk {
            c.close(CloseReason::ServerShutdown);
        }
    }
}

/// Batch size and pause between batches to close `n` clients over `window`: one client per
/// pause when the pause stays above [`MIN_CLOSE_INTERVAL`], bigger batches otherwise.
fn schedule(n: usize, window: Duration) -> (usize, Duration) {
    if n <= 1 {
        return (1, Duration::ZERO);
    }
    let gaps = u32::try_from(n - 1).unwrap_or(u32::MAX);
    let pause = window / gaps;
    if pause >= MIN_CLOSE_INTERVAL {
        return (1, pause);
    }
    let steps = window.as_millis() / MIN_CLOSE_INTERVAL.as_millis();
    let batches = usize::try_from(steps)
        .unwrap_or(usize::MAX)
        .saturating_add(1);
    (n.div_ceil(batches), MIN_CLOSE_INTERVAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_clients_are_closed_one_by_one_over_the_window() {
        assert_eq!(schedule(0, Duration::from_secs(20)), (1, Duration::ZERO));
        assert_eq!(schedule(1, Duration::from_secs(20)), (1, Duration::ZERO));
        assert_eq!(
            schedule(5, Duration::from_secs(20)),
            (1, Duration::from_secs(5))
        );
    }

    #[test]
    fn many_clients_are_closed_in_batches_no_faster_than_the_minimum_pause() {
        let (batch, pause) = schedule(100_000, Duration::from_secs(10));
        assert_eq!(pause, MIN_CLOSE_INTERVAL);
        let batches = 100_000usize.div_ceil(batch);
        assert!(batches <= 1001, "{batches} batches");
        assert!(batch > 1);
        // An empty window still closes everyone, in one go after no pause.
        let (batch, _) = schedule(10, Duration::ZERO);
        assert_eq!(batch, 10);
    }
}
