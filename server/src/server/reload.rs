//! Config reload (SIGHUP, `jetraft --signal reload`), as nats-server does it: the `-c` file is
//! read again with the same command-line flags over it, compared with the running
//! configuration ([`crate::config::reload::changes`]), and either applied whole or refused
//! whole (a syntax error, a certificate that cannot be read, or a setting that cannot change
//! at runtime); a refused reload leaves everything as it was.
//!
//! Applying stores one new [`ConnSettings`] snapshot (new connections and new handshakes use
//! it; open connections pick up new limits at their next read or write), rebuilds the log
//! filter, checks every authenticated client against the new users ([`ConnContext::reauthorize`]),
//! and closes the connections above a lowered `max_connections`.
//!
//! [`ConnContext::reauthorize`]: crate::conn::ConnContext::reauthorize

use std::sync::Arc;

use tracing::{debug, info, warn};

use super::{ServerHandle, authenticator, client_tls};
use crate::config::cli::{self, CliOutcome};
use crate::config::reload::{Change, NotReloadable, changes};
use crate::config::{Config, ConfigError};
use crate::conn::ConnSettings;

/// Why a reload was refused (the running configuration stays).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The server was started without `-c`.
    #[error("can only reload config when a file is provided using -c or --config")]
    NoConfigFile,
    /// The file (or a flag over it) is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A setting that cannot change at runtime differs.
    #[error(transparent)]
    NotReloadable(#[from] NotReloadable),
    /// A certificate, key or CA file cannot be used.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
}

impl ServerHandle {
    /// Reads the configuration again from the command line `args` the server was started
    /// with (the `-c` file, flags over it) and applies it; see [`ServerHandle::reload`].
    pub fn reload_from_args(&self, args: &[String]) -> Result<Vec<Change>, ReloadError> {
        if cli::config_file(args).is_none() {
            return Err(ReloadError::NoConfigFile);
        }
        match cli::parse(args)? {
            CliOutcome::Run(cfg) => self.reload(*cfg),
            // The server runs, so its arguments asked to run.
            _ => Err(ReloadError::NoConfigFile),
        }
    }

    /// Applies `loaded` if everything it changes can change at runtime (the whole reload is
    /// refused otherwise); logs each change and `Reloaded server configuration`.
    pub fn reload(&self, mut loaded: Config) -> Result<Vec<Change>, ReloadError> {
        let current = self.conns.settings.load();
        let found = changes(&current.config, &loaded)?;
        if loaded.port == 0 {
            loaded.port = current.config.port;
        }
        // Certificates are read again whenever TLS is on (same file names, new contents).
        let tls = client_tls(&loaded)?;
        let auth_changed = found.iter().any(Change::is_auth);
        let auth = if auth_changed {
            Arc::new(authenticator(&loaded))
        } else {
            current.auth.clone()
        };
        let lowered_max_conns = loaded.max_connections < current.config.max_connections;
        drop(current);
        let config = Arc::new(loaded);
        for change in &found {
            info!("{change}");
        }
        if auth_changed {
            // Accounts, their exports and imports: routing follows the new definitions.
            self.conns.bus.set_accounts(auth.accounts().clone());
        }
        self.conns
            .settings
            .store(ConnSettings::new(config.clone(), auth, tls));
        if found.iter().any(Change::is_logging)
            && let Err(e) = crate::logging::reload(&config.log)
        {
            warn!(error = %e, "log levels not reloaded");
        }
        if auth_changed {
            let done = self.conns.reauthorize();
            debug!(
                checked = done.checked,
                closed = done.closed,
                subs_removed = done.subs_removed,
                "clients authorized again after reload"
            );
        }
        if lowered_max_conns {
            self.conns.enforce_max_connections(config.max_connections);
        }
        info!("Reloaded server configuration");
        Ok(found)
    }
}
