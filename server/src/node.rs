//! What this node is, as clients, monitoring and JetStream see it: fixed once the listeners are
//! bound, read-only afterwards ([`NodeInfo`]).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rand::Rng;

/// The nats-server version whose client-visible behaviour jetraft implements: 2.12's stream
/// features (atomic batches, `@at` schedules, `persist_mode`, mirror promotion, counters) are
/// in (see README Status).
pub const NATS_VERSION: &str = "2.12.0";
/// JetStream API level advertised in INFO and `_nats.level` (nats-server 2.12's: 2).
pub const API_LEVEL: u32 = 2;

/// The node's identity and addresses.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// Unique server id (56 chars starting with `N`, like nats-server's), new at every start.
    pub server_id: String,
    /// Server name (the id when not configured).
    pub server_name: String,
    /// The configured client listen host (INFO's `host`).
    pub host: String,
    /// Bound client address.
    pub client_addr: SocketAddr,
    /// The cluster's name, if configured.
    pub cluster_name: Option<String>,
    /// Wall-clock start time.
    pub start: time::OffsetDateTime,
    /// Monotonic start time (for uptime).
    pub start_instant: Instant,
    /// Numbers the system messages this node sends (`server.seq` of system-account replies
    /// and message trace events), shared by clones.
    pub event_seq: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl NodeInfo {
    /// The facts of a node starting now, with a fresh server id.
    pub fn new(
        server_name: Option<String>,
        host: String,
        client_addr: SocketAddr,
        cluster_name: Option<String>,
    ) -> Self {
        let server_id = new_server_id();
        Self {
            server_name: server_name.unwrap_or_else(|| server_id.clone()),
            server_id,
            host,
            client_addr,
            cluster_name,
            start: time::OffsetDateTime::now_utc(),
            start_instant: Instant::now(),
            event_seq: std::sync::Arc::default(),
        }
    }

    /// The next system message number (the first is 1).
    pub fn next_event_seq(&self) -> u64 {
        self.event_seq
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1
    }

    /// Time since start.
    pub fn uptime(&self) -> Duration {
        self.start_instant.elapsed()
    }
}

/// A random 56-character id in nats-server's style (`N` + base32 alphabet).
fn new_server_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut rng = rand::rng();
    std::iter::once('N')
        .chain((0..55).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_ids_look_like_nats_server_ids() {
        let id = new_server_id();
        assert_eq!(id.len(), 56);
        assert!(id.starts_with('N'));
        assert_ne!(id, new_server_id());
    }

    #[test]
    fn the_name_defaults_to_the_id() {
        let addr: SocketAddr = "127.0.0.1:4222".parse().unwrap();
        let n = NodeInfo::new(None, "0.0.0.0".into(), addr, None);
        assert_eq!(n.server_name, n.server_id);
        let n = NodeInfo::new(Some("n1".into()), "0.0.0.0".into(), addr, None);
        assert_eq!(n.server_name, "n1");
    }
}
