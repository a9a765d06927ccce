//! Quiescence: a group with nothing to replicate stops its Raft timers on every replica.
//!
//! openraft wakes each group's Raft core on every tick (13/64 of the heartbeat interval) and a
//! leader sends each follower a heartbeat per interval, whether or not anything happens: a node
//! hosting a hundred idle groups spends nearly all its idle CPU there. So, in the manner of
//! CockroachDB's range quiescence, a leader whose group wrote no log entry for
//! [`RaftTiming::quiesce_after`](crate::RaftTiming::quiesce_after), and whose reachable members
//! (a majority of the voters at least) all hold and applied its whole log, asks each of them to
//! stop ticking ([`QuiesceRequest`]); once all agreed, it stops its own ticks. A quiet group
//! costs nothing until one of these wakes it:
//! - a proposal or membership change on the leader (the registry wakes the group first);
//! - any Raft message but a heartbeat reaching a replica: the inbound transports wake the group
//!   after handing the message over, so the leader's first AppendEntries after a write (which
//!   refreshes the follower's lease) wakes the followers, and so do votes and snapshots. A
//!   heartbeat (an AppendEntries without entries) does not: one reaches a quiet follower when
//!   its leader woke without a write (a member's link came back), or when one sent just before
//!   the leader stopped arrives after the follower agreed to; the leader goes quiet again
//!   without asking a follower that is already quiet, so waking it would leave it ticking under
//!   a silent leader until its election timeout started a needless election;
//! - a member's node link going down or coming back, or the member restarting (see
//!   [`GroupRegistry::set_peer_reachable`] and [`GroupRegistry::peer_restarted`]): on a leader's
//!   loss its followers wake and elect at once (`crate::failover`), and a leader wakes when a
//!   member returns so that it hears heartbeats again.
//!
//! Safety never depends on timers, only liveness does. What a quiet group gives up is failover
//! by election timeout alone: its leader's failure is noticed through the node link (at once
//! when the process dies, within the link keepalive when the node hangs or is cut off silently).
//!
//! Invariants: only the leader starts quiescence; a follower agrees only to the leader it
//! follows, in its term, with exactly the leader's last log id committed and applied; a wake-up
//! that races with a leader going quiet wins (a wake-up counter is checked again after the
//! timers stopped).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use jetraft_proto::raft as pb;
use openraft::ServerState;
use openraft::async_runtime::WatchReceiver;

use crate::convert::{DecodeError, log_id, required};
use crate::network::Transport;
use crate::registry::{GroupRegistry, Groups};
use crate::types::{GroupLogId, GroupMetrics, GroupRaft};
use crate::{GroupId, NodeId};

/// Whether a group's timers are stopped on this node, with a count of wake-ups that tells a
/// leader whether something woke the group while it was asking its followers to go quiet.
#[derive(Debug, Default)]
pub(crate) struct QuietFlag {
    quiet: AtomicBool,
    wakes: AtomicU64,
    /// Streamed AppendEntries with entries handed to Raft whose answer (and the wake that goes
    /// with it) is not out yet; the group does not agree to go quiet meanwhile.
    deliveries: AtomicU64,
}

impl QuietFlag {
    /// Whether the group's timers are stopped here.
    pub(crate) fn is_quiet(&self) -> bool {
        self.quiet.load(Ordering::SeqCst)
    }

    /// Starts the group's timers again if they were stopped. Runs before every proposal, so
    /// the usual case (not quiet) costs one atomic add and one load.
    pub(crate) fn wake(&self, raft: &GroupRaft) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        if self.quiet.load(Ordering::SeqCst) && self.quiet.swap(false, Ordering::SeqCst) {
            raft.runtime_config().tick(true);
        }
    }

    /// The wake-up count, read before deciding to go quiet.
    pub(crate) fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::SeqCst)
    }

    /// Stops the group's timers unless it was woken since the count was `seen`; returns
    /// whether the group is now quiet. A wake-up that slips in while the timers are being
    /// stopped is caught by the second look at the count, and the timers start again.
    pub(crate) fn quiesce(&self, raft: &GroupRaft, seen: u64) -> bool {
        self.quiet.store(true, Ordering::SeqCst);
        raft.runtime_config().tick(false);
        if self.wakes.load(Ordering::SeqCst) != seen {
            self.quiet.store(false, Ordering::SeqCst);
            raft.runtime_config().tick(true);
            return false;
        }
        true
    }
}

/// A leader's request that a follower of an idle group stop its timers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuiesceRequest {
    /// The group.
    pub group: GroupId,
    /// The leader asking.
    pub leader: NodeId,
    /// The leader's term.
    pub term: u64,
    /// The leader's last log id, which it has committed and applied.
    pub last_log: GroupLogId,
}

impl QuiesceRequest {
    /// The wire form.
    pub fn to_pb(&self) -> pb::QuiesceRequest {
        pb::QuiesceRequest {
            group_id: self.group.0,
            from: self.leader.0,
            term: self.term,
            last_log: Some(log_id::to_pb(&self.last_log)),
        }
    }

    /// Decodes the wire form; the last log id is required.
    pub fn from_pb(r: pb::QuiesceRequest) -> Result<Self, DecodeError> {
        Ok(Self {
            group: GroupId(r.group_id),
            leader: NodeId(r.from),
            term: r.term,
            last_log: log_id::from_pb(required(r.last_log, "QuiesceRequest.last_log")?),
        })
    }
}

impl Groups {
    /// Whether `group`'s timers are stopped on this node.
    pub fn is_quiet(&self, group: GroupId) -> bool {
        self.flag(group).is_some_and(|(_, flag)| flag.is_quiet())
    }

    /// How many groups here have their timers stopped.
    pub fn quiet_count(&self) -> usize {
        self.flags()
            .iter()
            .filter(|(_, _, flag)| flag.is_quiet())
            .count()
    }

    /// Starts `group`'s timers again if they were stopped (the inbound transports call this
    /// after handing a Raft message to the group).
    pub fn wake(&self, group: GroupId) {
        if let Some((raft, flag)) = self.flag(group) {
            flag.wake(&raft);
        }
    }

    /// A streamed AppendEntries with entries was handed to `group`'s Raft; its answer will
    /// [`wake`](Self::wake) the group and call [`end_delivery`](Self::end_delivery). Until
    /// then the group refuses to go quiet: that wake, coming after the entries were applied and
    /// the leader asked for quiet, would otherwise leave a follower ticking under a quiet
    /// leader.
    pub fn begin_delivery(&self, group: GroupId) {
        if let Some((_, flag)) = self.flag(group) {
            flag.deliveries.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The answer of a delivery counted by [`begin_delivery`](Self::begin_delivery) went out
    /// (or never will: its stream ended).
    pub fn end_delivery(&self, group: GroupId) {
        if let Some((_, flag)) = self.flag(group) {
            let _ = flag
                .deliveries
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        }
    }

    /// A follower's answer to [`QuiesceRequest`]: stops the group's timers and returns true
    /// only if this replica follows the asking leader in its term and has exactly its last
    /// log id as last logged, committed and applied entry.
    pub fn accept_quiesce(&self, req: &QuiesceRequest) -> bool {
        let Some((raft, flag)) = self.flag(req.group) else {
            return false;
        };
        let seen = flag.wakes();
        if flag.deliveries.load(Ordering::SeqCst) > 0 {
            tracing::debug!(group = %req.group, "quiesce refused: entries still being delivered");
            return false;
        }
        let agrees = {
            let rx = raft.metrics();
            let m = rx.borrow_watched();
            m.state != ServerState::Leader
                && m.current_leader == Some(req.leader.0)
                && m.current_term == req.term
                && m.last_log_index == Some(req.last_log.index)
                && m.cluster_committed.as_ref() == Some(&req.last_log)
                && m.last_applied.as_ref() == Some(&req.last_log)
        };
        if !agrees {
            tracing::debug!(group = %req.group, leader = %req.leader, "quiesce refused: not in step with the leader");
            return false;
        }
        // Quiet counts as current for readiness: the replica was caught up when it agreed,
        // and any later write wakes it.
        self.note_leader_contact(req.group);
        flag.quiesce(&raft, seen)
    }
}

/// How often the quiescence task looks at groups that are already quiet (the safety net that
/// wakes a quiet leader whose log moved).
const FULL_PASS: Duration = Duration::from_secs(1);

/// How long a leader waits for a follower's answer to a quiesce request.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);

/// Per group, the last log index a leader saw and since when (see
/// [`GroupRegistry::spawn_quiescence`]).
type IdleSince = HashMap<GroupId, (Option<u64>, Instant)>;

impl<T: Transport> GroupRegistry<T> {
    /// Starts the task that quiesces idle groups this node leads, if
    /// [`RaftTiming::quiesce_after`](crate::RaftTiming::quiesce_after) is set; it runs until
    /// [`shutdown`](Self::shutdown). Call once per registry, inside a Tokio runtime.
    pub fn spawn_quiescence(&self) {
        let Some(after) = self.timing().quiesce_after else {
            return;
        };
        let this = self.clone();
        let period = (after / 2).clamp(Duration::from_millis(50), Duration::from_secs(1));
        // Groups already quiet are looked at only on every `full_every`-th pass (about once a
        // second): with thousands of idle groups, reading each one's metrics every pass cost
        // more CPU than the groups themselves.
        let full_every = (FULL_PASS.as_millis() / period.as_millis()).max(1);
        self.spawn_task(async move {
            let mut idle = IdleSince::new();
            let mut every = tokio::time::interval(period);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut pass: u128 = 0;
            loop {
                every.tick().await;
                if this.is_shut_down() {
                    return;
                }
                let full = pass.is_multiple_of(full_every);
                pass += 1;
                this.quiesce_idle(&mut idle, after, full).await;
            }
        });
    }

    /// One pass: asks the followers of every group this node leads that has been idle for
    /// `after` to go quiet, and (on a `full` pass) wakes a quiet group whose log moved anyway.
    async fn quiesce_idle(&self, idle: &mut IdleSince, after: Duration, full: bool) {
        let now = Instant::now();
        let entries = self.groups().flags();
        if full {
            let live: std::collections::HashSet<GroupId> =
                entries.iter().map(|(id, _, _)| *id).collect();
            idle.retain(|g, _| live.contains(g));
        }
        let mut asks = tokio::task::JoinSet::new();
        for (group, raft, flag) in entries {
            if !full && flag.is_quiet() {
                continue;
            }
            let Some((req, peers)) = self.idle_leader(group, &raft, &flag, idle, now, after) else {
                continue;
            };
            let seen = flag.wakes();
            let transport = self.transport().clone();
            asks.spawn(async move {
                for peer in peers {
                    if !matches!(
                        transport.quiesce(peer, req.clone(), ASK_TIMEOUT).await,
                        Ok(true)
                    ) {
                        return;
                    }
                }
                if flag.quiesce(&raft, seen) {
                    tracing::debug!(group = %group, "raft group quiet");
                }
            });
        }
        while asks.join_next().await.is_some() {}
    }

    /// If this node leads `group`, which is idle for `after`, fully replicated to its reachable
    /// members and not quiet yet: the request to send and the members to send it to.
    fn idle_leader(
        &self,
        group: GroupId,
        raft: &GroupRaft,
        flag: &QuietFlag,
        idle: &mut IdleSince,
        now: Instant,
        after: Duration,
    ) -> Option<(QuiesceRequest, Vec<u64>)> {
        let rx = raft.metrics();
        let m = rx.borrow_watched();
        if m.state != ServerState::Leader {
            idle.remove(&group);
            return None;
        }
        let since = idle.entry(group).or_insert((m.last_log_index, now));
        if since.0 != m.last_log_index {
            *since = (m.last_log_index, now);
            // A quiet leader whose log moved was written to without a wake-up (no such path
            // is known; this is the safety net that keeps heartbeats going while it is busy).
            flag.wake(raft);
            return None;
        }
        if flag.is_quiet() || now.duration_since(since.1) < after {
            return None;
        }
        let last_log = m.last_applied?;
        if m.last_log_index != Some(last_log.index)
            || m.cluster_committed.as_ref() != Some(&last_log)
        {
            return None;
        }
        let membership = m.membership_config.membership();
        if membership.get_joint_config().len() != 1 {
            return None;
        }
        let me = self.node_id().0;
        let reachable: Vec<u64> = membership
            .nodes()
            .map(|(id, _)| *id)
            .filter(|id| *id != me && self.groups().is_reachable(*id))
            .collect();
        let voters: Vec<u64> = membership.voter_ids().collect();
        let live_voters = voters
            .iter()
            .filter(|v| **v == me || reachable.contains(v))
            .count();
        if live_voters * 2 <= voters.len() {
            return None;
        }
        let replication = m.replication.as_ref()?;
        let caught_up = reachable
            .iter()
            .all(|id| replication.get(id).and_then(|l| l.as_ref()) == Some(&last_log));
        if !caught_up {
            return None;
        }
        let req = QuiesceRequest {
            group,
            leader: self.node_id(),
            term: m.current_term,
            last_log,
        };
        Some((req, reachable))
    }

    /// Renews the leader lease of a group before a membership change, a leadership transfer or
    /// a linearizable read: openraft refuses membership changes on a leader that has not heard
    /// from a quorum within the lease (the largest election timeout), as a quiet leader that
    /// sent no heartbeats, or one that just won an election. (Client writes need no lease: see
    /// `GroupRegistry::awake_raft_unleased`.) Sends a heartbeat round at once and waits (at most
    /// the proposal deadline) for a quorum to answer it. A follower or a single-voter leader has
    /// nothing to renew.
    pub(crate) async fn renew_lease(&self, raft: &GroupRaft) {
        use openraft::async_runtime::Instant as _;
        let me = self.node_id().0;
        let needed = {
            let rx = raft.metrics();
            let m = rx.borrow_watched();
            m.current_leader == Some(me) && m.membership_config.membership().voter_ids().count() > 1
        };
        if needed {
            let fresh = self.timing().election_max / 2;
            // Not once shutdown began: the group may be stopping (openraft logs calls into a
            // stopped group as errors).
            let _ = self.groups().run(raft.trigger().heartbeat()).await;
            let _ = raft
                .wait(Some(self.timing().propose_timeout))
                .metrics(
                    |m| {
                        m.current_leader != Some(me)
                            || m.last_quorum_acked
                                .as_ref()
                                .is_some_and(|at| at.elapsed() < fresh)
                    },
                    "leader lease renewed",
                )
                .await;
        }
    }

    /// Whether this node leads `raft`'s group with other voters but heard no quorum answer
    /// recently enough for openraft to accept writes, as right after it won an election: a
    /// write now would be refused (and a refused publish would get no answer).
    pub(crate) fn lease_unbacked(&self, raft: &GroupRaft) -> bool {
        use openraft::async_runtime::Instant as _;
        let rx = raft.metrics();
        let m = rx.borrow_watched();
        m.current_leader == Some(self.node_id().0)
            && m.last_quorum_acked
                .as_ref()
                .is_none_or(|at| at.elapsed() >= self.timing().election_max / 2)
            && m.membership_config
                .membership()
                .voter_ids()
                .nth(1)
                .is_some()
    }

    /// `peer` restarted (its node came back with a new run while its links may never have
    /// looked down): wakes the groups here that it leads or that this node leads with it as a
    /// member, as when its link comes back.
    pub fn peer_restarted(&self, peer: NodeId) {
        self.wake_groups_of(peer);
    }

    /// Wakes every quiet group here that `peer` leads, or that this node leads with `peer` as
    /// a member. Followers of other leaders stay quiet: their leader wakes them.
    pub(crate) fn wake_groups_of(&self, peer: NodeId) {
        self.wake_where(|m, me| m.current_leader == Some(peer.0) || leads_with(m, me, peer.0));
    }

    /// Wakes every quiet group this node leads with `peer` as a member, so that the leader
    /// heartbeats `peer` (and brings it up to date) when its link comes back. A follower of
    /// `peer` stays quiet: the leader's messages reach it anyway, and a follower woken under
    /// a quiet leader would only time out and start a needless election.
    pub(crate) fn wake_groups_led_with(&self, peer: NodeId) {
        self.wake_where(|m, me| leads_with(m, me, peer.0));
    }

    fn wake_where(&self, concerned: impl Fn(&GroupMetrics, u64) -> bool) {
        let me = self.node_id().0;
        for (group, raft, flag) in self.groups().flags() {
            if !flag.is_quiet() {
                continue;
            }
            let wake = {
                let rx = raft.metrics();
                let m = rx.borrow_watched();
                concerned(&m, me)
            };
            if wake {
                tracing::debug!(group = %group, "waking a quiet group for a peer's link change");
                flag.wake(&raft);
            }
        }
    }
}

/// Whether `me` leads the group of `m` with `peer` as a member.
fn leads_with(m: &GroupMetrics, me: u64, peer: u64) -> bool {
    m.current_leader == Some(me)
        && m.membership_config
            .membership()
            .nodes()
            .any(|(id, _)| *id == peer)
}

/// The flags of every group, cloned out of the table (see [`Groups::flags`]).
pub(crate) type GroupFlags = Vec<(GroupId, GroupRaft, Arc<QuietFlag>)>;
