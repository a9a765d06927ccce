//! Leaderless-group watchdog: a group that stays without a leader for longer than a few
//! election timeouts is reported, with the Raft state that explains it, and woken if its timers
//! were stopped.
//!
//! A ticking replica without a leader elects on its own (openraft's election timeout); one
//! whose timers were stopped by [`crate::quiesce`] cannot, and only a wake-up from outside
//! (a message, a link change) restarts them. No path is known that leaves a replica quiet
//! without a leader, but a stream that never gets one again is an outage, so this pass is the
//! safety net, and its warning says which state the group was in when it fired.
//!
//! The same pass reports a group whose Raft core is no longer running although the group was
//! not removed (openraft's core panicked, or stopped on a fatal storage error): one ERROR line
//! per group, and the replica counts as [`crate::health::Currency::Stopped`] (unhealthy) from
//! then on. Without it such a replica would fail silently: openraft only logs the panic
//! message, and every later call into the group fails.
//!
//! Invariants: the watchdog never starts an election itself (a lame-duck node must not take
//! back a leadership it handed away; openraft's timers decide); it only restarts timers, which
//! a wake-up does anyway on every proposal; one warning per leaderless spell.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use openraft::async_runtime::WatchReceiver;

use crate::GroupId;
use crate::network::Transport;
use crate::registry::GroupRegistry;

/// How often groups are looked at.
const PERIOD: Duration = Duration::from_secs(1);

/// A group is reported once it has been leaderless for this many largest election timeouts.
const TIMEOUTS: u32 = 3;

/// Per group: since when it is leaderless here, and whether that spell was reported.
type Leaderless = HashMap<GroupId, (Instant, bool)>;

/// Groups whose stopped core was reported already.
type Failed = std::collections::HashSet<GroupId>;

impl<T: Transport> GroupRegistry<T> {
    /// Starts the watchdog task; it runs until [`shutdown`](Self::shutdown). Call once per
    /// registry, inside a Tokio runtime.
    pub fn spawn_leaderless_watchdog(&self) {
        let this = self.clone();
        self.spawn_task(async move {
            let mut spells = Leaderless::new();
            let mut failed = Failed::new();
            let mut every = tokio::time::interval(PERIOD);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                if this.is_shut_down() {
                    return;
                }
                this.watch_failed(&mut failed);
                this.watch_leaderless(&mut spells, Instant::now());
            }
        });
    }

    /// Reports every group whose core stopped without being removed, once.
    fn watch_failed(&self, failed: &mut Failed) {
        let groups = self.groups().flags();
        failed.retain(|g| groups.iter().any(|(id, _, _)| id == g));
        for (group, raft, _) in groups {
            if failed.contains(&group) || self.is_shut_down() || !crate::health::core_stopped(&raft)
            {
                continue;
            }
            failed.insert(group);
            let state = raft.metrics().borrow_watched().running_state.clone();
            tracing::error!(
                group = %group,
                node = %self.node_id(),
                ?state,
                "raft group core stopped (panicked or fatal error); the replica is unhealthy \
                 until the node restarts"
            );
        }
    }

    /// One pass over every group (see the module documentation).
    fn watch_leaderless(&self, spells: &mut Leaderless, now: Instant) {
        let limit = self.timing().election_max * TIMEOUTS;
        let me = self.node_id().0;
        let groups = self.groups().flags();
        if !spells.is_empty() {
            let present: std::collections::HashSet<GroupId> =
                groups.iter().map(|(id, _, _)| *id).collect();
            spells.retain(|g, _| present.contains(g));
        }
        for (group, raft, flag) in groups {
            let leaderless = {
                let rx = raft.metrics();
                let m = rx.borrow_watched();
                // A replica that is not a voter (uninitialised, or a learner) waits to be told;
                // the term-0 "leader" of a just-initialised group leads nothing yet.
                let voter = m
                    .membership_config
                    .membership()
                    .voter_ids()
                    .any(|v| v == me);
                let leader = m.current_leader.filter(|_| m.current_term > 0);
                voter && leader.is_none()
            };
            if !leaderless {
                spells.remove(&group);
                continue;
            }
            let (since, reported) = spells.entry(group).or_insert((now, false));
            if *reported || now.duration_since(*since) < limit {
                continue;
            }
            *reported = true;
            // Described only when reported: this pass runs over every group every second.
            let detail = {
                let rx = raft.metrics();
                let m = rx.borrow_watched();
                format!(
                    "state {:?}, term {}, vote {}, last log {:?}, committed {:?}, applied {:?}",
                    m.state,
                    m.current_term,
                    m.vote,
                    m.last_log_index,
                    m.cluster_committed.as_ref().map(|l| l.index),
                    m.last_applied.as_ref().map(|l| l.index),
                )
            };
            let quiet = flag.is_quiet();
            tracing::warn!(
                group = %group,
                leaderless_for = ?now.duration_since(*since),
                quiet,
                "raft group without a leader ({detail}){}",
                if quiet { ": timers were stopped, waking it" } else { "" }
            );
            if quiet {
                flag.wake(&raft);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bytes::Bytes;
    use openraft::async_runtime::WatchReceiver;

    use super::*;
    use crate::mem_log::MemLogStore;
    use crate::network::mem::MemNetwork;
    use crate::sm::{ReplicatedStateMachine, StateMachineError};
    use crate::types::PeerNode;
    use crate::{LogIndex, NodeId, RaftTiming};

    /// A state machine that keeps nothing: the test only looks at elections.
    struct Nothing;

    impl ReplicatedStateMachine for Nothing {
        fn apply(&mut self, _: LogIndex, _: &[u8]) -> Result<Bytes, StateMachineError> {
            Ok(Bytes::new())
        }
        fn snapshot(&self) -> Result<Bytes, StateMachineError> {
            Ok(Bytes::new())
        }
        fn restore(&mut self, _: &[u8]) -> Result<(), StateMachineError> {
            Ok(())
        }
    }

    fn term(registry: &GroupRegistry<crate::network::mem::MemTransport>, g: GroupId) -> u64 {
        registry
            .raft(g)
            .unwrap()
            .metrics()
            .borrow_watched()
            .current_term
    }

    /// A voter of a three-voter group whose peers never answer cannot get a leader; with its
    /// timers stopped it would not even try again. The watchdog restarts them, and its
    /// elections (each a new term) resume.
    #[tokio::test]
    async fn a_quiet_voter_without_a_leader_is_woken() {
        let timing = RaftTiming {
            heartbeat: Duration::from_millis(20),
            election_min: Duration::from_millis(100),
            election_max: Duration::from_millis(150),
            ..RaftTiming::default()
        };
        let net = MemNetwork::new(7);
        let me = NodeId(1);
        let registry = GroupRegistry::new(me, net.transport(me), timing).unwrap();
        net.register(me, registry.groups().clone());
        let g = GroupId(9);
        registry
            .create_group(g, MemLogStore::new(), Box::new(Nothing))
            .await
            .unwrap();
        let members: BTreeMap<NodeId, PeerNode> = (1..=3)
            .map(|n| (NodeId(n), PeerNode::new(format!("node-{n}"))))
            .collect();
        registry.initialize(g, members).await.unwrap();

        let (raft, flag) = registry.groups().flag(g).unwrap();
        assert!(flag.quiesce(&raft, flag.wakes()), "timers stop");
        // Let an election already under way finish, then check nothing more happens.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let stuck = term(&registry, g);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            term(&registry, g),
            stuck,
            "a quiet voter started an election"
        );

        registry.spawn_leaderless_watchdog();
        // Woken, its timers run again. (Its elections are Pre-Votes nobody answers here, so
        // its term no longer climbs: the timers are what the watchdog restores.)
        let deadline = Instant::now() + Duration::from_secs(5);
        while flag.is_quiet() {
            assert!(
                Instant::now() < deadline,
                "not woken within 5 s of the watchdog starting (term {})",
                term(&registry, g)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        registry.shutdown().await;
    }
}
