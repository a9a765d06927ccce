//! Lost quorum: the `stream_quorum_lost` and `consumer_quorum_lost` advisories nats-server sends
//! when a replicated stream's group stalls because a majority of its replicas is unreachable.
//!
//! The stream's owner task calls [`JetStream::watch_quorum`] on every tick. While this node
//! leads, a follower counts as reachable if it acknowledged within [`LOST_AFTER`]
//! (nats-server's `lostQuorumInterval`; a quiet group's followers count while their node link
//! is up); once the leader and the reachable followers are fewer than a majority, the
//! advisories go out, at most once per [`ADVISORY_INTERVAL`] while it lasts. A leader that loses its leadership while it had no
//! quorum sends them then (nats-server sends them when it steps down for that reason). The
//! replicas are listed as stream info shows them (with `offline`, `active`).

use std::time::{Duration, Instant};

use super::JetStream;
use super::replica::LocalStream;

/// How long a follower may stay silent before it counts as lost.
const LOST_AFTER: Duration = Duration::from_secs(10);
/// Shortest time between two advisories of one stream (nats-server's `lostQuorumAdvInterval`).
const ADVISORY_INTERVAL: Duration = Duration::from_secs(10);

/// What the owner task of one replica remembers about its group's quorum.
#[derive(Debug, Default)]
pub(super) struct QuorumWatch {
    /// Since when this leader has had no quorum.
    lost_since: Option<Instant>,
    /// When the last advisory went out.
    last_sent: Option<Instant>,
}

impl JetStream {
    /// Checks the quorum of `ls`'s group (see the module docs); `leading` says whether this
    /// node leads it now.
    pub(super) fn watch_quorum(&self, ls: &LocalStream, leading: bool, w: &mut QuorumWatch) {
        let now = Instant::now();
        let voters = ls.replicas();
        if !self.clustered || voters.len() < 2 {
            return;
        }
        if !leading {
            // Stepped down (or never led) while the quorum was lost: say so once.
            if w.lost_since.take().is_some() {
                self.send_quorum_lost(ls, now, w);
            }
            return;
        }
        let Ok(followers) = self.registry.followers(ls.group()) else {
            return;
        };
        let reachable = followers
            .iter()
            .filter(|f| voters.contains(&f.node.0))
            .filter(|f| f.last_ack.is_some_and(|a| a <= LOST_AFTER))
            .count();
        if 1 + reachable > voters.len() / 2 {
            w.lost_since = None;
            return;
        }
        w.lost_since.get_or_insert(now);
        self.send_quorum_lost(ls, now, w);
    }

    fn send_quorum_lost(&self, ls: &LocalStream, now: Instant, w: &mut QuorumWatch) {
        if w.last_sent
            .is_some_and(|t| now.duration_since(t) < ADVISORY_INTERVAL)
        {
            return;
        }
        w.last_sent = Some(now);
        tracing::warn!(stream = %ls.name, "stream has no quorum, stalled");
        let consumers: Vec<String> = ls.sm.lock().consumers().keys().cloned().collect();
        let replicas = self
            .cluster_info(ls)
            .map(|ci| ci.replicas)
            .unwrap_or_default();
        self.advise_quorum_lost(&ls.name, &consumers, replicas);
    }
}
