//! The owner task of a stream replica: one per [`LocalStream`] on this node, from the moment the
//! meta task starts the replica until it removes it (`LocalStream::cancel`). It follows the
//! group's leadership and does everything the stream's leader does on its own clock:
//!
//! - consumers: after a barrier entry in each new term (so engines start from the latest acks),
//!   starts the engines of the stream's consumers and stops the others
//!   ([`JetStream::sync_consumers`]); on a follower it keeps none running;
//! - expiry: proposes `Expire` when messages are due (`expiry`);
//! - sourcing: runs the copy tasks of a mirror or sourcing stream (`sourcing`);
//! - drain: hands the leadership off while this node is drained (`drain`);
//! - atomic batches: gives up those idle past their timeout (`atomic_batch`).
//!
//! A follower's task sleeps until leadership moves (or [`FOLLOWER_TICK`]); a leader's wakes
//! every [`LEADER_TICK`].

use std::sync::Arc;
use std::time::Duration;

use tracing::debug;

use super::JetStream;
use super::replica::LocalStream;
use crate::jetstream::stream::command;

/// How often a leader checks for due expiry, new consumers and its copy tasks.
const LEADER_TICK: Duration = Duration::from_millis(250);
/// Shortest wait before the next expiry check (bounds the retries of a failing `Expire`).
const EXPIRY_MIN_WAIT: Duration = Duration::from_millis(25);
/// How often a follower re-checks without a leadership signal.
const FOLLOWER_TICK: Duration = Duration::from_secs(1);

impl JetStream {
    /// Runs the replica's leader duties until the replica is removed or the runtime stops.
    pub(super) async fn run_replica(self: Arc<Self>, ls: Arc<LocalStream>) {
        if let Ok(mut watch) = self.registry.watch_leader(ls.group()) {
            let mut ready_term = None;
            let mut quorum = super::quorum::QuorumWatch::default();
            loop {
                let now = watch.current();
                self.watch_quorum(&ls, now.is_self, &mut quorum);
                if now.is_self && ready_term != Some(now.term) {
                    // A new leader may not have applied everything committed before its term:
                    // a barrier entry makes sure engines start from the latest acks.
                    let barrier = command::consumer_progress(
                        jetraft_proto::stream::ConsumerProgress::default(),
                    );
                    match self.registry.propose(ls.group(), barrier).await {
                        Ok(_) => {
                            ready_term = Some(now.term);
                            self.advise_leadership(&ls);
                        }
                        Err(e) => debug!(stream = %ls.name, error = %e, "consumer barrier failed"),
                    }
                }
                if ready_term == Some(now.term) || !now.is_self {
                    self.sync_consumers(&ls);
                }
                if !now.is_self {
                    ls.batches.lock().clear();
                }
                if now.is_self {
                    self.sweep_batches(&ls);
                    self.hand_off_if_drained(ls.group()).await;
                    self.expire_if_due(&ls).await;
                }
                self.sync_sourcing(&ls, now.is_self);
                let tick = if now.is_self {
                    // Wake when the next message expires, so a TTL is kept to the
                    // millisecond rather than to the tick.
                    let next = ls.sm.lock().next_expiry();
                    next.map_or(LEADER_TICK, |at| {
                        Duration::from_nanos(at.saturating_sub(super::now_ns()))
                            .clamp(EXPIRY_MIN_WAIT, LEADER_TICK)
                    })
                } else {
                    FOLLOWER_TICK
                };
                tokio::select! {
                    () = ls.cancel.cancelled() => break,
                    r = watch.changed() => if r.is_err() { break },
                    () = tokio::time::sleep(tick) => {}
                }
            }
        }
        ls.engines.stop_all(false);
        Self::stop_sourcing(&ls);
    }

    /// Gives up the atomic batches idle past their timeout, with their advisories.
    fn sweep_batches(&self, ls: &LocalStream) {
        let abandoned = {
            let mut batches = ls.batches.lock();
            batches.sweep(std::time::Instant::now());
            batches.take_abandoned()
        };
        for (id, reason) in abandoned {
            self.advise_batch_abandoned(&ls.name, &id, reason);
        }
    }

    /// The leader-elected advisories of a replica that just became its group's ready leader;
    /// only in clustered mode, as nats-server sends them only for replicated groups.
    fn advise_leadership(&self, ls: &LocalStream) {
        if !self.clustered {
            return;
        }
        let consumers: Vec<String> = ls.sm.lock().consumers().keys().cloned().collect();
        let replicas = self
            .group_cluster_info(ls.group(), &ls.replicas())
            .map(|ci| ci.replicas)
            .unwrap_or_default();
        self.advise_leader_elected(&ls.name, &consumers, replicas);
    }
}
