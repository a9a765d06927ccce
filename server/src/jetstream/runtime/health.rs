//! JetStream health for `/healthz` and leadership hand-off for lame duck mode.
//!
//! Health follows nats-server's `healthz`: the meta group must have a leader this node hears
//! and be current with it, and every stream replica the meta state assigns to this node must
//! exist here and be current in its group ([`jetraft_raft::Currency`]). A node that just
//! restarted is therefore not healthy until it caught up, which is what readiness and
//! rolling restarts wait for.

use std::collections::BTreeSet;
use std::time::Duration;

use jetraft_raft::{Currency, GroupId};
use jetraft_storage::stream::StreamUid;
use tracing::{error, info, warn};

use super::JetStream;

/// The account every stream lives in (jetraft has one account).
const ACCOUNT: &str = "$G";

/// What `/healthz` checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthScope {
    /// The meta group only (`js-meta-only`).
    Meta,
    /// The meta group and every stream replica assigned here (the default check).
    All,
    /// One stream (`account=...&stream=...`), and optionally one of its consumers.
    Stream {
        /// Stream name.
        stream: String,
        /// Consumer name.
        consumer: Option<String>,
    },
}

/// One reason JetStream is not healthy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthProblem {
    /// Whether the asset does not exist (404) rather than not being current (503).
    pub not_found: bool,
    /// The asset: `JETSTREAM` (meta), `STREAM` or `CONSUMER` (`details=true` shows it).
    pub kind: &'static str,
    /// The stream concerned, if any.
    pub stream: Option<String>,
    /// The consumer concerned, if any.
    pub consumer: Option<String>,
    /// nats-server's wording.
    pub error: String,
}

impl HealthProblem {
    /// The server itself is not serving (`why`: shutting down, lame duck).
    pub fn server(why: &str) -> Self {
        Self {
            kind: "SERVER",
            ..Self::meta(why)
        }
    }

    /// JetStream has not started yet.
    pub fn starting() -> Self {
        Self::meta("JetStream is starting")
    }

    fn meta(error: &str) -> Self {
        Self {
            not_found: false,
            kind: "JETSTREAM",
            stream: None,
            consumer: None,
            error: error.to_string(),
        }
    }

    /// The stream with key `key` (see `jetstream::account`) is not current here.
    fn stream_not_current(key: &str) -> Self {
        let (account, stream) = (
            crate::jetstream::account::stream_account(key),
            crate::jetstream::account::stream_name(key),
        );
        Self {
            not_found: false,
            kind: "STREAM",
            stream: Some(stream.to_string()),
            consumer: None,
            error: format!("JetStream stream '{account} > {stream}' is not current"),
        }
    }

    /// The stream with key `key` can never commit again: `dead`, a majority of its group's
    /// voters, are retired ids (see [`JetStream::majority_lost`]).
    fn majority_lost(key: &str, dead: &[u64]) -> Self {
        let ids: Vec<String> = dead.iter().map(|d| format!("{d:x}")).collect();
        Self {
            error: format!(
                "{} and lost a majority of its replicas: their nodes lost their data (old ids {}) \
                 before new replicas could take their place; only an operator can recover it \
                 (README: Deploy, \"A stream that lost a majority of its replicas\")",
                Self::stream_not_current(key).error,
                ids.join(", ")
            ),
            ..Self::stream_not_current(key)
        }
    }
}

/// Streams (by uid) whose lost majority was logged already (once per stream and process).
static MAJORITY_LOST_LOGGED: std::sync::Mutex<BTreeSet<u64>> =
    std::sync::Mutex::new(BTreeSet::new());

impl JetStream {
    /// The voters of stream `name`'s group (as this replica knows them) whose ids are retired,
    /// if they are a majority. A retired id never answers again (its node lost its data, or was
    /// removed), so the group can never elect a leader or commit, not even the change that
    /// would replace them: Raft cannot go on safely from the replicas left (they may miss
    /// entries the lost ones acknowledged), and jetraft never forces it to. Logged once.
    fn majority_lost(&self, name: &str) -> Option<Vec<u64>> {
        let ls = self.local_stream(name)?;
        let voters: Vec<u64> = self.registry.raft(ls.group()).ok()?.voter_ids().collect();
        let dead: Vec<u64> = (voters.iter().copied())
            .filter(|v| self.meta.read(|m| m.is_retired(*v)))
            .collect();
        if dead.is_empty() || dead.len() * 2 < voters.len() {
            return None;
        }
        let first = MAJORITY_LOST_LOGGED
            .lock()
            .is_ok_and(|mut logged| logged.insert(ls.uid.0));
        if first {
            error!(
                stream = %name,
                voters = ?voters,
                lost = ?dead,
                "stream lost a majority of its replicas: it cannot commit until an operator \
                 recovers it (README: Deploy, \"A stream that lost a majority of its replicas\")"
            );
        }
        Some(dead)
    }

    /// Problems that make this node's JetStream unhealthy for `scope`; empty when healthy.
    pub fn health(&self, scope: &HealthScope) -> Vec<HealthProblem> {
        let mut problems = Vec::new();
        match self.registry.currency(GroupId::META) {
            Ok(Currency::NoLeader) | Err(_) => {
                problems.push(HealthProblem::meta(
                    "JetStream has not established contact with a meta leader",
                ));
                return problems;
            }
            Ok(c) if !c.is_current() => {
                problems.push(HealthProblem::meta(
                    "JetStream is not current with the meta leader",
                ));
                return problems;
            }
            Ok(_) => {}
        }
        if self.meta.read(|m| m.is_retired(self.node.0)) {
            problems.push(HealthProblem::meta(
                "JetStream server was removed from the cluster",
            ));
            return problems;
        }
        match scope {
            HealthScope::Meta => {}
            HealthScope::All => {
                let assigned: Vec<(String, StreamUid)> = self.meta.read(|m| {
                    m.streams()
                        .filter(|s| s.replicas.contains(&self.node.0))
                        .map(|s| (s.name.clone(), StreamUid(s.uid)))
                        .collect()
                });
                for (name, uid) in assigned {
                    // First: a leader that lost its majority for good may still count itself
                    // current (it leads, and nothing it could commit is pending).
                    if let Some(dead) = self.majority_lost(&name) {
                        problems.push(HealthProblem::majority_lost(&name, &dead));
                    } else if !self.replica_current(&name, uid) {
                        problems.push(HealthProblem::stream_not_current(&name));
                    }
                }
                // A replica left on a node id that lost its data (retired) is about to be
                // reassigned, in a three-node cluster to the node that came back under a new
                // id: until then, a node without a replica of such a stream is not current.
                let repairing: Vec<String> = self.meta.read(|m| {
                    m.streams()
                        .filter(|s| s.replicas.len() > 1 && !s.replicas.contains(&self.node.0))
                        .filter(|s| s.replicas.iter().any(|r| m.is_retired(*r)))
                        .map(|s| s.name.clone())
                        .collect()
                });
                for name in repairing {
                    problems.push(HealthProblem::stream_not_current(&name));
                }
            }
            HealthScope::Stream { stream, consumer } => {
                self.stream_health(stream, consumer.as_deref(), &mut problems)
            }
        }
        problems
    }

    fn stream_health(&self, stream: &str, consumer: Option<&str>, out: &mut Vec<HealthProblem>) {
        let assignment = self.meta.read(|m| {
            m.stream(stream)
                .map(|s| (StreamUid(s.uid), s.replicas.clone()))
        });
        let Some((uid, replicas)) = assignment else {
            out.push(HealthProblem {
                not_found: true,
                kind: "STREAM",
                stream: Some(stream.to_string()),
                consumer: None,
                error: format!("JetStream stream \"{stream}\" not found on account \"{ACCOUNT}\""),
            });
            return;
        };
        if replicas.contains(&self.node.0) && !self.replica_current(stream, uid) {
            out.push(HealthProblem::stream_not_current(stream));
            return;
        }
        let Some(consumer) = consumer else {
            return;
        };
        let exists = self
            .local_stream(stream)
            .is_some_and(|ls| ls.sm.lock().consumer(consumer).is_some());
        if !exists {
            out.push(HealthProblem {
                not_found: true,
                kind: "CONSUMER",
                stream: Some(stream.to_string()),
                consumer: Some(consumer.to_string()),
                error: format!(
                    "JetStream consumer \"{consumer}\" not found for stream \"{stream}\" on account \"{ACCOUNT}\""
                ),
            });
        }
    }

    /// Whether the replica of stream `name` (uid `uid`) runs here, is current and votes: a
    /// replica still joining as a learner (a rebuilt node taking over a retired id's place)
    /// does not count yet, since until it votes the group's quorum still needs the old id.
    fn replica_current(&self, name: &str, uid: StreamUid) -> bool {
        let Some(ls) = self.local_stream(name) else {
            return false;
        };
        ls.uid == uid
            && self
                .registry
                .currency(ls.group())
                .is_ok_and(|c| c.is_current())
            && self
                .registry
                .raft(ls.group())
                .is_ok_and(|r| r.voter_ids().any(|v| v == self.node.0))
    }

    /// Lame duck: stops this node from starting elections in any group, then hands every
    /// leadership it holds to another voter, retrying until none is left here or `bound`
    /// passed. Groups without another live voter (a single node, an R1 stream) keep their
    /// leader: they stop with the node whatever happens.
    pub async fn hand_off_leaderships(&self, bound: Duration) {
        let deadline = tokio::time::Instant::now() + bound;
        let groups = self.registry.groups().ids();
        for g in &groups {
            let _ = self.registry.set_electable(*g, false);
        }
        let mut pending: Vec<GroupId> = groups;
        while !pending.is_empty() && tokio::time::Instant::now() < deadline {
            let tries = pending.iter().map(|g| {
                let g = *g;
                async move { (g, self.registry.hand_off(g).await) }
            });
            let results = futures_util::future::join_all(tries).await;
            pending.clear();
            for (g, r) in results {
                match r {
                    Ok(Some(to)) => info!(group = %g, to = %to, "lame duck: leadership handed off"),
                    Ok(None) => {
                        // Not leader, or nobody to take over: retry only if we still lead
                        // and a voter may come back.
                        if self.registry.leader(g).is_ok_and(|l| l.is_self)
                            && self.has_other_voters(g)
                        {
                            pending.push(g);
                        }
                    }
                    Err(e) => {
                        warn!(group = %g, error = %e, "lame duck: leadership hand-off failed");
                        pending.push(g);
                    }
                }
            }
            if !pending.is_empty() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        if !pending.is_empty() {
            warn!(
                groups = pending.len(),
                "lame duck: some leaderships could not be handed off"
            );
        }
    }

    fn has_other_voters(&self, group: GroupId) -> bool {
        self.registry
            .raft(group)
            .is_ok_and(|r| r.voter_ids().any(|v| v != self.node.0))
    }
}
