//! The peer table of a [`GrpcTransport`](super::GrpcTransport): for each node id, its address
//! and two lazily connected tonic channels (Raft RPCs, snapshots), plus a reconnect backoff.
//!
//! Invariants:
//! - One entry per peer node, shared by every group; an entry is replaced only when the peer's
//!   address changes.
//! - After a link failure, calls to that peer fail fast (as `Unreachable`) until the backoff
//!   expires; the backoff doubles per consecutive failure up to a cap and resets on success.
//! - A peer that stays unreachable costs a bounded number of log lines whatever the number of
//!   groups and retries: one when its link first fails, one summary per
//!   [`GrpcSettings::report_interval`] while it stays down ("unreachable for 30 s, N
//!   retries"), and one when a call gets through again.
//! - Locks are `parking_lot` and never held across `.await`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use jetraft_proto::raft::raft_service_client::RaftServiceClient;
use parking_lot::{Mutex, RwLock};
use tonic::transport::Channel;

use super::security::LinkSecurity;

/// Connection settings of a transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcSettings {
    /// Bound on establishing a TCP + HTTP/2 connection.
    pub connect_timeout: Duration,
    /// First wait after a link failure.
    pub backoff_min: Duration,
    /// Longest wait between reconnect attempts.
    pub backoff_max: Duration,
    /// Largest message sent or accepted (AppendEntries batches, snapshot chunks).
    pub max_message_size: usize,
    /// How often a peer that stays unreachable is reported in the log (with the number of
    /// calls that failed meanwhile).
    pub report_interval: Duration,
    /// HTTP/2 ping interval on the channels, also while no call is in flight: a connection
    /// that went silent (a partition, a peer that hangs) is found dead within
    /// `keepalive_interval + keepalive_timeout` and the next call dials a new one, instead of
    /// waiting on the dead one for TCP's retransmission backoff after the network healed.
    pub keepalive_interval: Duration,
    /// How long a ping may go unanswered before the connection is dropped.
    pub keepalive_timeout: Duration,
}

impl Default for GrpcSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(1),
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(1),
            max_message_size: 64 << 20,
            report_interval: Duration::from_secs(30),
            keepalive_interval: Duration::from_secs(1),
            keepalive_timeout: Duration::from_millis(1500),
        }
    }
}

/// Consecutive failures and when the next attempt is allowed, and what the log was told.
#[derive(Debug, Default)]
struct Backoff {
    failures: u32,
    retry_at: Option<Instant>,
    /// When the current spell of link failures began (`None` while the peer is reachable).
    down_since: Option<Instant>,
    /// Calls that failed or were refused (backing off) since `down_since`.
    retries: u64,
    /// When the spell was last reported in the log.
    reported_at: Option<Instant>,
}

/// One peer node: where it is and the channels to it.
#[derive(Debug)]
pub(crate) struct Peer {
    /// The peer's node id, for the log.
    id: u64,
    /// The address the channels dial.
    pub(crate) addr: String,
    /// Raft RPCs of every group.
    pub(crate) rpc: RaftServiceClient<Channel>,
    /// Snapshot streams, so a large transfer does not delay heartbeats.
    pub(crate) snapshots: RaftServiceClient<Channel>,
    backoff: Mutex<Backoff>,
    /// Log lines written about this peer's reachability, ever (for tests).
    lines: AtomicUsize,
}

impl Peer {
    /// `Err(wait)` while the peer is backing off after a failure; a refused call counts as a
    /// retry of the current spell (and may produce its periodic summary line).
    pub(crate) fn ready(&self, now: Instant, settings: &GrpcSettings) -> Result<(), Duration> {
        let mut b = self.backoff.lock();
        match b.retry_at {
            Some(at) if at > now => {
                b.retries = b.retries.saturating_add(1);
                self.maybe_report(&mut b, now, settings);
                Err(at - now)
            }
            _ => Ok(()),
        }
    }

    /// Records a link failure and pushes the next attempt out. The first failure after a
    /// success is logged with its `error`; later ones are only counted.
    pub(crate) fn failed(
        &self,
        now: Instant,
        settings: &GrpcSettings,
        error: &dyn std::fmt::Display,
    ) {
        let mut b = self.backoff.lock();
        b.failures = b.failures.saturating_add(1);
        let shift = b.failures.saturating_sub(1).min(16);
        let wait = settings
            .backoff_min
            .saturating_mul(1u32 << shift)
            .min(settings.backoff_max);
        b.retry_at = Some(now + wait);
        b.retries = b.retries.saturating_add(1);
        if b.down_since.is_none() {
            b.down_since = Some(now);
            b.reported_at = Some(now);
            self.lines.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                peer = %crate::NodeId(self.id),
                addr = %self.addr,
                %error,
                "raft peer unreachable, backing off"
            );
        } else {
            self.maybe_report(&mut b, now, settings);
        }
    }

    /// Logs the current spell's summary if the last line about it is `report_interval` old.
    fn maybe_report(&self, b: &mut Backoff, now: Instant, settings: &GrpcSettings) {
        let Some(since) = b.down_since else {
            return;
        };
        if b.reported_at
            .is_some_and(|at| now.saturating_duration_since(at) < settings.report_interval)
        {
            return;
        }
        b.reported_at = Some(now);
        self.lines.fetch_add(1, Ordering::Relaxed);
        let down = now.saturating_duration_since(since);
        tracing::warn!(
            peer = %crate::NodeId(self.id),
            addr = %self.addr,
            retries = b.retries,
            "raft peer unreachable for {} s, {} retries",
            down.as_secs(),
            b.retries
        );
    }

    /// The peer's node link (the cluster layer's) just came up: it is listening, so the next
    /// call dials at once instead of waiting out the rest of the backoff. The spell stays
    /// open until a call gets through (and is reported then).
    pub(crate) fn link_up(&self) {
        let mut b = self.backoff.lock();
        b.failures = 0;
        b.retry_at = None;
    }

    /// Records a successful call; logs the end of a spell of failures.
    pub(crate) fn succeeded(&self) {
        let mut b = self.backoff.lock();
        if b.failures == 0 && b.retry_at.is_none() && b.down_since.is_none() {
            return;
        }
        if let Some(since) = b.down_since {
            self.lines.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                peer = %crate::NodeId(self.id),
                addr = %self.addr,
                retries = b.retries,
                "raft peer reachable again after {} s",
                since.elapsed().as_secs()
            );
        }
        *b = Backoff::default();
    }
}

/// Why a peer address cannot be dialed.
#[derive(Debug, thiserror::Error)]
#[error("bad peer address {addr:?}: {reason}")]
pub(crate) struct BadAddress {
    addr: String,
    reason: String,
}

/// Node id -> peer. Clones are not shared; the transport keeps it in an `Arc`.
#[derive(Debug, Default)]
pub(crate) struct Peers {
    map: RwLock<HashMap<u64, Arc<Peer>>>,
    /// How many peer entries (each one pair of channels) were ever created.
    created: AtomicUsize,
}

impl Peers {
    /// The peer `id`, if its address is known.
    pub(crate) fn get(&self, id: u64) -> Option<Arc<Peer>> {
        self.map.read().get(&id).cloned()
    }

    /// Number of peer entries ever created.
    pub(crate) fn created(&self) -> usize {
        self.created.load(Ordering::Relaxed)
    }

    /// Records that `id` is at `addr`, creating lazily connected channels if the address is new
    /// or changed. Must run inside a tokio runtime (channels spawn their worker there).
    pub(crate) fn set(
        &self,
        id: u64,
        addr: &str,
        s: &GrpcSettings,
        security: &LinkSecurity,
    ) -> Result<(), BadAddress> {
        if self.map.read().get(&id).is_some_and(|p| p.addr == addr) {
            return Ok(());
        }
        let peer = Arc::new(Peer {
            id,
            addr: addr.to_string(),
            rpc: client(channel(addr, s, security)?, s),
            snapshots: client(channel(addr, s, security)?, s),
            backoff: Mutex::new(Backoff::default()),
            lines: AtomicUsize::new(0),
        });
        let mut map = self.map.write();
        // Another caller may have raced us to the same address: keep theirs.
        if map.get(&id).is_some_and(|p| p.addr == addr) {
            return Ok(());
        }
        map.insert(id, peer);
        self.created.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

fn channel(addr: &str, s: &GrpcSettings, security: &LinkSecurity) -> Result<Channel, BadAddress> {
    let endpoint = security
        .endpoint(addr, s.connect_timeout)
        .map_err(|reason| BadAddress {
            addr: addr.to_string(),
            reason,
        })?
        .http2_keep_alive_interval(s.keepalive_interval)
        .keep_alive_timeout(s.keepalive_timeout)
        .keep_alive_while_idle(true);
    Ok(security.connect_lazy(&endpoint))
}

fn client(ch: Channel, s: &GrpcSettings) -> RaftServiceClient<Channel> {
    RaftServiceClient::new(ch)
        .max_decoding_message_size(s.max_message_size)
        .max_encoding_message_size(s.max_message_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn same_address_keeps_the_entry_and_a_new_one_replaces_it() {
        let peers = Peers::default();
        let s = GrpcSettings::default();
        peers
            .set(2, "127.0.0.1:1", &s, &LinkSecurity::default())
            .unwrap();
        peers
            .set(2, "127.0.0.1:1", &s, &LinkSecurity::default())
            .unwrap();
        assert_eq!(peers.created(), 1);
        peers
            .set(2, "127.0.0.1:2", &s, &LinkSecurity::default())
            .unwrap();
        assert_eq!(peers.created(), 2);
        assert_eq!(peers.get(2).unwrap().addr, "127.0.0.1:2");
        assert!(peers.get(3).is_none());
    }

    #[tokio::test]
    async fn backoff_doubles_up_to_the_cap_and_resets_on_success() {
        let peers = Peers::default();
        let s = GrpcSettings {
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_millis(35),
            ..GrpcSettings::default()
        };
        peers
            .set(2, "127.0.0.1:1", &s, &LinkSecurity::default())
            .unwrap();
        let p = peers.get(2).unwrap();
        let t0 = Instant::now();
        assert_eq!(p.ready(t0, &s), Ok(()));
        let waits: Vec<Duration> = (0..4)
            .map(|_| {
                p.failed(t0, &s, &"refused");
                p.ready(t0, &s).unwrap_err()
            })
            .collect();
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, vec![10, 20, 35, 35]);
        assert_eq!(p.ready(t0 + Duration::from_millis(36), &s), Ok(()));
        p.succeeded();
        p.failed(t0, &s, &"refused");
        assert_eq!(p.ready(t0, &s).unwrap_err(), Duration::from_millis(10));
    }

    #[tokio::test]
    async fn a_link_up_ends_the_backoff_but_not_the_spell() {
        let peers = Peers::default();
        let s = GrpcSettings::default();
        peers
            .set(2, "127.0.0.1:1", &s, &LinkSecurity::default())
            .unwrap();
        let p = peers.get(2).unwrap();
        let t0 = Instant::now();
        for _ in 0..5 {
            p.failed(t0, &s, &"refused");
        }
        assert!(p.ready(t0, &s).is_err());
        p.link_up();
        assert_eq!(p.ready(t0, &s), Ok(()));
        // The next failure starts again from the shortest wait.
        p.failed(t0, &s, &"refused");
        assert_eq!(p.ready(t0, &s).unwrap_err(), s.backoff_min);
        assert!(
            p.backoff.lock().down_since.is_some(),
            "the spell is still open"
        );
    }

    #[tokio::test]
    async fn a_peer_that_stays_down_is_logged_once_then_once_per_report_interval() {
        let peers = Peers::default();
        let s = GrpcSettings {
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_millis(40),
            report_interval: Duration::from_secs(30),
            ..GrpcSettings::default()
        };
        peers
            .set(2, "127.0.0.1:1", &s, &LinkSecurity::default())
            .unwrap();
        let p = peers.get(2).unwrap();
        let t0 = Instant::now();
        // 29 s of retries from many groups: refused calls and link failures alike.
        for ms in (0..29_000).step_by(5) {
            let t = t0 + Duration::from_millis(ms);
            if p.ready(t, &s).is_ok() {
                p.failed(t, &s, &"connection refused");
            }
        }
        assert_eq!(p.lines.load(Ordering::Relaxed), 1, "only the first failure");
        // Past the interval: one summary, then quiet again.
        for ms in (30_000..59_000).step_by(5) {
            let t = t0 + Duration::from_millis(ms);
            if p.ready(t, &s).is_ok() {
                p.failed(t, &s, &"connection refused");
            }
        }
        assert_eq!(
            p.lines.load(Ordering::Relaxed),
            2,
            "one summary per interval"
        );
        assert!(p.backoff.lock().retries > 5_000, "every call counted");
        p.succeeded();
        assert_eq!(
            p.lines.load(Ordering::Relaxed),
            3,
            "and one line when it is back"
        );
        p.succeeded();
        assert_eq!(p.lines.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn unparsable_address_is_refused() {
        let peers = Peers::default();
        assert!(
            peers
                .set(
                    2,
                    "not a uri",
                    &GrpcSettings::default(),
                    &LinkSecurity::default()
                )
                .is_err()
        );
    }
}
