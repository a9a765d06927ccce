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
//! A follower's task sleeps until leadership moves (or [`FOLLOWER_TICK`]). A leader's wakes
//! every [`LEADER_TICK`] while something needs watching (a replicated group's quorum, copy
//! tasks, open atomic batches, a drain, a barrier to retry), otherwise only when its stream's
//! config changes, its next message expires, or after [`IDLE_LEADER_TICK`]: a node with many
//! idle single-replica streams then stays idle too.

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
/// How often an idle leader (nothing to watch) re-checks anyway.
const IDLE_LEADER_TICK: Duration = Duration::from_secs(5);
/// How often a follower re-checks without a leadership signal (everything a follower does
/// follows a leadership change, which wakes it at once).
const FOLLOWER_TICK: Duration = Duration::from_secs(5);

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
                    // Boxed here and below: this task lives as long as the stream, and its
                    // future is as large as the largest await it holds (the rare ones boxed,
                    // it stays small instead of ~6 KB per stream).
                    match Box::pin(self.registry.propose(ls.group(), barrier)).await {
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
                    Box::pin(self.hand_off_if_drained(ls.group())).await;
                    Box::pin(self.expire_if_due(&ls)).await;
                }
                self.sync_sourcing(&ls, now.is_self);
                let tick = if now.is_self {
                    let watched = self.leader_watches(&ls, ready_term == Some(now.term));
                    let longest = if watched {
                        LEADER_TICK
                    } else {
                        IDLE_LEADER_TICK
                    };
                    // Wake when the next message expires, so a TTL is kept to the
                    // millisecond rather than to the tick.
                    let next = ls.sm.lock().next_expiry();
                    next.map_or(longest, |at| {
                        Duration::from_nanos(at.saturating_sub(super::now_ns()))
                            .clamp(EXPIRY_MIN_WAIT, longest)
                    })
                } else {
                    FOLLOWER_TICK
                };
                tokio::select! {
                    () = ls.cancel.cancelled() => break,
                    r = watch.changed() => if r.is_err() { break },
                    () = ls.config_changed.notified() => {}
                    () = tokio::time::sleep(tick) => {}
                }
            }
        }
        ls.engines.stop_all(false);
        Self::stop_sourcing(&ls);
    }

    /// Whether the leader of `ls` has something to look at on every [`LEADER_TICK`]: the
    /// quorum of a replicated group (quorum-lost advisories), copy tasks, open atomic batches,
    /// a drain to hand off for, or the new term's consumer barrier still to retry.
    fn leader_watches(&self, ls: &LocalStream, barrier_done: bool) -> bool {
        !barrier_done
            || (self.clustered && ls.replicas().len() > 1)
            || ls.sourcing.lock().is_some()
            || {
                let sm = ls.sm.lock();
                let c = sm.config();
                c.mirror.is_some() || !c.sources.is_empty()
            }
            || ls.batches.lock().any_open()
            || self.is_drained()
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
            .cluster_info(ls)
            .map(|ci| ci.replicas)
            .unwrap_or_default();
        self.advise_leader_elected(&ls.name, &consumers, replicas);
    }
}
