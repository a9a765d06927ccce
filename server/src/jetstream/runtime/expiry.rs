//! The leader's expiry timer: every [`TICK`] it asks each stream it leads whether messages are
//! due to expire (`max_age`, per-message TTL, marker TTL) and, if so, proposes an `Expire`
//! stamped with its clock. Replicas remove messages only when that command is applied, so they
//! all remove the same ones (see `stream::ttl`).
//!
//! nats-server checks ages at least once a second; a quarter second keeps a 1 s TTL from
//! living much longer than asked while costing one state check per stream per tick.

use std::sync::Arc;
use std::time::Duration;

use tracing::debug;

use super::replica::LocalStream;
use super::{JetStream, now_ns};
use crate::jetstream::stream::command;

/// How often the leader checks its streams for expired messages.
const TICK: Duration = Duration::from_millis(250);

impl JetStream {
    /// Runs until the runtime is cancelled.
    pub(super) async fn expiry_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = self.cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let streams: Vec<Arc<LocalStream>> = self.local.read().values().cloned().collect();
            for ls in streams {
                let now = now_ns();
                if !ls.sm.lock().expiry_due(now) {
                    continue;
                }
                let leading = self.registry.leader(ls.group()).is_ok_and(|l| l.is_self);
                if !leading {
                    continue;
                }
                if let Err(e) = self
                    .registry
                    .propose(ls.group(), command::expire(now))
                    .await
                {
                    // Retried on the next tick (e.g. leadership moved meanwhile).
                    debug!(stream = %ls.name, error = %e, "expire proposal failed");
                }
            }
        }
    }
}
