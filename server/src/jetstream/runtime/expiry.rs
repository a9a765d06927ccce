//! Expiry on the leader: every tick of a replica's owner task (`owner`) it asks the stream
//! whether messages are due to expire (`max_age`, per-message TTL, marker TTL) and, if so,
//! proposes an `Expire` stamped with its clock. Replicas remove messages only when that command
//! is applied, so they all remove the same ones (see `stream::ttl`).
//!
//! The owner wakes when the next message is due ([`StreamStateMachine::next_expiry`], at most
//! a tick and at least 25 ms away), so a TTL ends within a few milliseconds of its time (1 s
//! TTLs measured 1.01-1.06 s in a debug build, nats-server 1.00-1.01 s), and a stream whose
//! messages expire one after another proposes at most 40 `Expire`s a second.
//!
//! [`StreamStateMachine::next_expiry`]: crate::jetstream::stream::StreamStateMachine::next_expiry

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
