//! What a config reload may change for client connections, held as one immutable snapshot
//! ([`ConnSettings`]) behind a handle that swaps it whole ([`LiveSettings`]).
//!
//! Readers take the current snapshot (a read lock and an `Arc` clone, never held across an
//! await) when a connection starts, when it authenticates, and when the snapshot's version
//! changed since they last looked (one atomic load per read batch). The publish path never
//! touches it: a connection's permissions live on its [`crate::bus::Client`] and are replaced
//! there when a reload changes them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;

use super::ClientTls;
use crate::auth::Authenticator;
use crate::config::Config;

/// One consistent view of the reloadable settings.
#[derive(Debug)]
pub struct ConnSettings {
    /// The configuration in force (limits, timeouts, log levels; the rest never changes).
    pub config: Arc<Config>,
    /// Credential checks built from `config.auth` (and the client TLS `verify_and_map`).
    pub auth: Arc<Authenticator>,
    /// Client TLS built from `config.tls`, when configured.
    pub tls: Option<ClientTls>,
    /// When this configuration was loaded (`/varz` `config_load_time`).
    pub loaded_at: time::OffsetDateTime,
}

impl ConnSettings {
    /// Settings loaded now.
    pub fn new(config: Arc<Config>, auth: Arc<Authenticator>, tls: Option<ClientTls>) -> Self {
        Self {
            config,
            auth,
            tls,
            loaded_at: time::OffsetDateTime::now_utc(),
        }
    }
}

/// The current [`ConnSettings`], replaced whole by a reload. Cloning shares the same handle.
#[derive(Debug, Clone)]
pub struct LiveSettings {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    current: RwLock<Arc<ConnSettings>>,
    /// Bumped by every [`LiveSettings::store`].
    version: AtomicU64,
}

impl LiveSettings {
    /// A handle holding `settings`.
    pub fn new(settings: ConnSettings) -> Self {
        Self {
            inner: Arc::new(Inner {
                current: RwLock::new(Arc::new(settings)),
                version: AtomicU64::new(0),
            }),
        }
    }

    /// The current snapshot.
    pub fn load(&self) -> Arc<ConnSettings> {
        self.inner.current.read().clone()
    }

    /// The current snapshot and its version (for [`LiveSettings::version`] comparisons).
    pub fn load_versioned(&self) -> (Arc<ConnSettings>, u64) {
        let current = self.inner.current.read();
        (current.clone(), self.inner.version.load(Ordering::Acquire))
    }

    /// The number of snapshots stored since start: a reader whose copy is older reloads it.
    pub fn version(&self) -> u64 {
        self.inner.version.load(Ordering::Acquire)
    }

    /// Replaces the snapshot.
    pub fn store(&self, settings: ConnSettings) {
        let mut current = self.inner.current.write();
        *current = Arc::new(settings);
        self.inner.version.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_replaces_the_snapshot_and_bumps_the_version() {
        let cfg = Arc::new(Config::default());
        let live = LiveSettings::new(ConnSettings::new(
            cfg.clone(),
            Arc::new(Authenticator::new(&cfg.auth)),
            None,
        ));
        let (before, v0) = live.load_versioned();
        assert_eq!(before.config.max_payload, cfg.max_payload);
        let next = Config {
            max_payload: 10,
            ..Config::default()
        };
        let shared = live.clone();
        shared.store(ConnSettings::new(
            Arc::new(next),
            Arc::new(Authenticator::new(&cfg.auth)),
            None,
        ));
        assert_eq!(live.load().config.max_payload, 10);
        assert_eq!(live.version(), v0 + 1);
        assert_eq!(
            before.config.max_payload, cfg.max_payload,
            "old snapshots stay"
        );
    }
}
