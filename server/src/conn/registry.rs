//! The node's open connections by cid, the recently closed ones (for `/connz?state=closed`),
//! the connection counters, and the `connect_urls` INFO advertises.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};
use tracing::{debug, warn};

use crate::bus::{Bus, Client, CloseReason};

/// Closed connections remembered for `/connz?state=closed`.
const CLOSED_CONNS_KEPT: usize = 1000;

/// Connection counters (monotonic).
#[derive(Debug, Default)]
pub struct ConnStats {
    /// Connections accepted since start.
    pub total_connections: AtomicU64,
    /// Connections closed as slow consumers.
    pub slow_consumers: AtomicU64,
    /// Connections closed as stale.
    pub stale_connections: AtomicU64,
}

/// A connection that has ended, for `/connz?state=closed`.
#[derive(Debug, Clone)]
pub struct ClosedConn {
    /// The connection's state at close.
    pub client: Arc<Client>,
    /// When it closed.
    pub stop: time::OffsetDateTime,
    /// Why it closed.
    pub reason: CloseReason,
}

/// Open and recently closed connections.
#[derive(Debug)]
pub struct Clients {
    /// Open connections by cid.
    open: RwLock<HashMap<u64, Arc<Client>>>,
    /// Recently closed connections, oldest first.
    closed: Mutex<VecDeque<ClosedConn>>,
    /// Counters.
    pub stats: ConnStats,
    /// The `connect_urls` last advertised.
    connect_urls: Mutex<Vec<String>>,
    /// Next connection id.
    next_cid: AtomicU64,
}

impl Clients {
    /// An empty registry advertising `connect_urls`.
    pub fn new(connect_urls: Vec<String>) -> Self {
        Self {
            open: RwLock::new(HashMap::new()),
            closed: Mutex::new(VecDeque::new()),
            stats: ConnStats::default(),
            connect_urls: Mutex::new(connect_urls),
            next_cid: AtomicU64::new(1),
        }
    }

    /// A new connection id; counts the connection as accepted.
    pub fn next_cid(&self) -> u64 {
        self.stats.total_connections.fetch_add(1, Ordering::Relaxed);
        self.next_cid.fetch_add(1, Ordering::Relaxed)
    }

    /// Registers an accepted connection unless `max` are open already; false when full.
    pub fn register(&self, client: &Arc<Client>, max: usize) -> bool {
        let mut open = self.open.write();
        if open.len() >= max {
            return false;
        }
        open.insert(client.cid, client.clone());
        true
    }

    /// Number of open connections.
    pub fn len(&self) -> usize {
        self.open.read().len()
    }

    /// Whether no connection is open.
    pub fn is_empty(&self) -> bool {
        self.open.read().is_empty()
    }

    /// The open connections.
    pub fn open(&self) -> Vec<Arc<Client>> {
        self.open.read().values().cloned().collect()
    }

    /// The open connections that are not closing, by cid.
    pub fn live(&self) -> Vec<Arc<Client>> {
        let mut clients: Vec<Arc<Client>> = self
            .open
            .read()
            .values()
            .filter(|c| !c.is_closed())
            .cloned()
            .collect();
        clients.sort_by_key(|c| c.cid);
        clients
    }

    /// The recently closed connections, oldest first.
    pub fn closed(&self) -> Vec<ClosedConn> {
        self.closed.lock().iter().cloned().collect()
    }

    /// The `connect_urls` INFO advertises.
    pub fn connect_urls(&self) -> Vec<String> {
        self.connect_urls.lock().clone()
    }

    /// Replaces the advertised `connect_urls`; true when they changed.
    pub fn replace_connect_urls(&self, urls: Vec<String>) -> bool {
        let mut last = self.connect_urls.lock();
        if *last == urls {
            return false;
        }
        *last = urls;
        true
    }

    /// Removes a closed client and its subscriptions, and records it for `/connz`.
    pub fn remove(&self, client: &Arc<Client>, bus: &Bus) {
        bus.remove_client_subscriptions(client);
        if self.open.write().remove(&client.cid).is_none() {
            return;
        }
        let reason = client
            .close_reason
            .lock()
            .unwrap_or(CloseReason::ClientClosed);
        match reason {
            CloseReason::SlowConsumer => {
                self.stats.slow_consumers.fetch_add(1, Ordering::Relaxed);
                if let Some(acc) = client.account_traffic.get() {
                    acc.slow_consumers.fetch_add(1, Ordering::Relaxed);
                }
                warn!(cid = client.cid, addr = %client.addr, "slow consumer detected, connection closed");
            }
            CloseReason::StaleConnection => {
                self.stats.stale_connections.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
        debug!(
            cid = client.cid,
            reason = reason.as_str(),
            "client connection closed"
        );
        let mut closed = self.closed.lock();
        if closed.len() >= CLOSED_CONNS_KEPT {
            closed.pop_front();
        }
        closed.push_back(ClosedConn {
            client: client.clone(),
            stop: time::OffsetDateTime::now_utc(),
            reason,
        });
    }
}
