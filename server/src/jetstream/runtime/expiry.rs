//! Expiry on the leader: every tick of a replica's owner task (`owner`) it asks the stream
//! whether messages are due to expire (`max_age`, per-message TTL, marker TTL) and, if so,
//! proposes an `Expire` stamped with its clock. Replicas remove messages only when that command
//! is applied, so they all remove the same ones (see `stream::ttl`).
//!
//! nats-server checks ages at least once a second; the owner's quarter-second tick keeps a 1 s
//! TTL from living much longer than asked while costing one state check per stream per tick.

use tracing::debug;

use super::replica::LocalStream;
use super::{JetStream, now_ns};
use crate::jetstream::stream::command;

impl JetStream {
    /// On the stream's leader: proposes `Expire` if messages are due.
    pub(super) async fn expire_if_due(&self, ls: &LocalStream) {
        let now = now_ns();
        if !ls.sm.lock().expiry_due(now) {
            return;
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
