//! Which settings a config reload may change at runtime, and which it may not: [`changes`]
//! compares the running [`Config`] with a freshly loaded one, as nats-server's reload does.
//!
//! Reloadable: users, passwords, tokens, NKEY users and their permissions, the auth timeout,
//! client TLS (certificates and CA are read again on every reload; `verify`, `timeout`,
//! `handshake_first`), `max_connections`, `max_payload`, `max_control_line`, `ping_interval`,
//! `ping_max`, `write_deadline`, and the `debug`/`trace` log levels. Any other difference
//! refuses the whole reload with nats-server's `config reload not supported for <Field>:
//! old=<old>, new=<new>` (field names are nats-server's `Options` names); nothing is applied.

use std::fmt;
use std::time::Duration;

use super::{AuthConfig, Config, JetStreamConfig, LogConfig, UserConfig};

/// One setting a reload changes, displayed as nats-server logs it (`Reloaded: ...`).
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// `debug`.
    Debug(bool),
    /// `trace`.
    Trace(bool),
    /// Client TLS certificates, CA or verification (read again whenever TLS is on).
    Tls(bool),
    /// `tls { timeout }`.
    TlsTimeout(Duration),
    /// `tls { handshake_first }`.
    TlsHandshakeFirst(bool),
    /// `authorization { user }`.
    AuthUsername,
    /// `authorization { password }`.
    AuthPassword,
    /// `authorization { token }`.
    AuthToken,
    /// `authorization { timeout }`.
    AuthTimeout(Duration),
    /// Users with passwords (or none), and their permissions.
    AuthUsers,
    /// NKEY users and their permissions.
    AuthNkeyUsers,
    /// Any other `authorization` setting (one added to [`AuthConfig`] later, e.g. accounts).
    AuthOther,
    /// `max_connections`.
    MaxConnections(u32),
    /// `max_control_line`.
    MaxControlLine(u32),
    /// `max_payload`.
    MaxPayload(u32),
    /// `ping_interval`.
    PingInterval(Duration),
    /// `ping_max`.
    PingMax(u32),
    /// `write_deadline`.
    WriteDeadline(Duration),
}

impl Change {
    /// Whether connected clients must be authorized again.
    pub fn is_auth(&self) -> bool {
        matches!(
            self,
            Self::AuthUsername
                | Self::AuthPassword
                | Self::AuthToken
                | Self::AuthUsers
                | Self::AuthNkeyUsers
                | Self::AuthOther
        )
    }

    /// Whether the log filter must be rebuilt.
    pub fn is_logging(&self) -> bool {
        matches!(self, Self::Debug(_) | Self::Trace(_))
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Debug(v) => write!(f, "Reloaded: debug = {v}"),
            Self::Trace(v) => write!(f, "Reloaded: trace = {v}"),
            Self::Tls(on) => {
                write!(
                    f,
                    "Reloaded: tls = {}",
                    if *on { "enabled" } else { "disabled" }
                )
            }
            Self::TlsTimeout(d) => write!(f, "Reloaded: tls timeout = {}", d.as_secs_f64()),
            Self::TlsHandshakeFirst(v) => write!(f, "Reloaded: Client TLS handshake first: {v}"),
            Self::AuthUsername => f.write_str("Reloaded: authorization username"),
            Self::AuthPassword => f.write_str("Reloaded: authorization password"),
            Self::AuthToken => f.write_str("Reloaded: authorization token"),
            Self::AuthTimeout(d) => {
                write!(f, "Reloaded: authorization timeout = {}", d.as_secs_f64())
            }
            Self::AuthUsers => f.write_str("Reloaded: authorization users"),
            Self::AuthNkeyUsers => f.write_str("Reloaded: authorization nkey users"),
            Self::AuthOther => f.write_str("Reloaded: authorization"),
            Self::MaxConnections(v) => write!(f, "Reloaded: max_connections = {v}"),
            Self::MaxControlLine(v) => write!(f, "Reloaded: max_control_line = {v}"),
            Self::MaxPayload(v) => write!(f, "Reloaded: max_payload = {v}"),
            Self::PingInterval(d) => write!(f, "Reloaded: ping_interval = {d:?}"),
            Self::PingMax(v) => write!(f, "Reloaded: ping_max = {v}"),
            Self::WriteDeadline(d) => write!(f, "Reloaded: write_deadline = {d:?}"),
        }
    }
}

/// A setting that cannot change at runtime was changed; the reload is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config reload not supported for {field}: old={old}, new={new}")]
pub struct NotReloadable {
    /// nats-server's name for the setting (`Port`, `ServerName`, `MaxPending`, ...).
    pub field: &'static str,
    /// The running value.
    pub old: String,
    /// The value in the file.
    pub new: String,
}

/// Fails when `old` and `new` differ: the setting `field` is fixed at startup.
fn fixed<T: PartialEq + fmt::Debug>(
    field: &'static str,
    old: &T,
    new: &T,
) -> Result<(), NotReloadable> {
    if old == new {
        return Ok(());
    }
    Err(NotReloadable {
        field,
        old: format!("{old:?}"),
        new: format!("{new:?}"),
    })
}

/// Which accounts have JetStream, with their limits (`$G` when no accounts are configured):
/// fixed at startup (the JetStream runtime serves the accounts it started with).
fn jetstream_accounts(auth: &AuthConfig) -> Vec<(String, crate::config::AccountJetStream)> {
    if auth.accounts.is_empty() {
        return vec![(
            crate::config::GLOBAL_ACCOUNT.to_string(),
            crate::config::AccountJetStream::default(),
        )];
    }
    let mut out: Vec<_> = auth
        .accounts
        .iter()
        .filter_map(|a| Some((a.name.clone(), a.jetstream?)))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Pushes `change(new)` when `old` and `new` differ.
fn changed<T: PartialEq + Copy>(out: &mut Vec<Change>, old: T, new: T, change: fn(T) -> Change) {
    if old != new {
        out.push(change(new));
    }
}

/// What reloading from `running` to `loaded` changes, or the first setting that cannot change.
pub fn changes(running: &Config, loaded: &Config) -> Result<Vec<Change>, NotReloadable> {
    // Every field is named, so a new setting cannot be forgotten here.
    let Config {
        host,
        port,
        http_host,
        http_port,
        https_port,
        tls,
        allow_non_tls,
        console,
        server_name,
        server_tags,
        jetstream,
        cluster,
        auth,
        max_payload,
        max_control_line,
        max_pending,
        max_connections,
        max_subscriptions,
        ping_interval,
        ping_max,
        write_deadline,
        log,
        pid_file,
        ports_file_dir,
        lame_duck_duration,
        lame_duck_grace_period,
    } = loaded;
    let old = running;
    fixed("Host", &old.host, host)?;
    // Port 0 asks for a random port: the one bound at startup stays (as nats-server).
    if *port != 0 {
        fixed("Port", &old.port, port)?;
    }
    fixed("HTTPHost", &old.http_host, http_host)?;
    fixed("HTTPPort", &old.http_port, http_port)?;
    fixed("HTTPSPort", &old.https_port, https_port)?;
    fixed("AllowNonTLS", &old.allow_non_tls, allow_non_tls)?;
    fixed("Console", &old.console, console)?;
    fixed("ServerName", &old.server_name, server_name)?;
    fixed("Tags", &old.server_tags, server_tags)?;
    jetstream_fixed(&old.jetstream, jetstream)?;
    fixed(
        "JetStreamAccounts",
        &jetstream_accounts(&old.auth),
        &jetstream_accounts(auth),
    )?;
    fixed("Routes", &old.cluster.routes, &cluster.routes)?;
    fixed("Cluster", &old.cluster, cluster)?;
    fixed("MaxPending", &old.max_pending, max_pending)?;
    fixed("MaxSubs", &old.max_subscriptions, max_subscriptions)?;
    fixed("LogFile", &old.log.file, &log.file)?;
    fixed("PidFile", &old.pid_file, pid_file)?;
    fixed("PortsFileDir", &old.ports_file_dir, ports_file_dir)?;
    fixed(
        "LameDuckDuration",
        &old.lame_duck_duration,
        lame_duck_duration,
    )?;
    fixed(
        "LameDuckGracePeriod",
        &old.lame_duck_grace_period,
        lame_duck_grace_period,
    )?;
    let old_map = old.tls.as_ref().is_some_and(|t| t.verify_and_map);
    let new_map = tls.as_ref().is_some_and(|t| t.verify_and_map);
    fixed("TLSMap", &old_map, &new_map)?;

    let mut out = Vec::new();
    log_changes(&old.log, log, &mut out);
    match (&old.tls, tls) {
        (None, None) => {}
        (Some(_), None) => out.push(Change::Tls(false)),
        (None, Some(_)) => out.push(Change::Tls(true)),
        (Some(o), Some(n)) => {
            // Certificate files may have new contents under the same names: read them again.
            out.push(Change::Tls(true));
            changed(&mut out, o.timeout, n.timeout, Change::TlsTimeout);
            changed(
                &mut out,
                o.handshake_first,
                n.handshake_first,
                Change::TlsHandshakeFirst,
            );
        }
    }
    auth_changes(&old.auth, auth, &mut out);
    changed(
        &mut out,
        old.max_connections,
        *max_connections,
        Change::MaxConnections,
    );
    changed(
        &mut out,
        old.max_control_line,
        *max_control_line,
        Change::MaxControlLine,
    );
    changed(&mut out, old.max_payload, *max_payload, Change::MaxPayload);
    changed(
        &mut out,
        old.ping_interval,
        *ping_interval,
        Change::PingInterval,
    );
    changed(&mut out, old.ping_max, *ping_max, Change::PingMax);
    changed(
        &mut out,
        old.write_deadline,
        *write_deadline,
        Change::WriteDeadline,
    );
    Ok(out)
}

/// JetStream is on or off, in one store, with its limits and domain, for the process's life.
fn jetstream_fixed(old: &JetStreamConfig, new: &JetStreamConfig) -> Result<(), NotReloadable> {
    let JetStreamConfig {
        enabled,
        store_dir,
        max_memory_store,
        max_file_store,
        domain,
        // Acted on at start only (a damaged store moved aside); nothing to apply later.
        repair_store: _,
    } = new;
    fixed("JetStream", &old.enabled, enabled)?;
    fixed("StoreDir", &old.store_dir, store_dir)?;
    fixed(
        "JetStreamMaxMemory",
        &old.max_memory_store,
        max_memory_store,
    )?;
    fixed("JetStreamMaxStore", &old.max_file_store, max_file_store)?;
    fixed("JetStreamDomain", &old.domain, domain)
}

fn log_changes(old: &LogConfig, new: &LogConfig, out: &mut Vec<Change>) {
    changed(out, old.debug, new.debug, Change::Debug);
    changed(out, old.trace, new.trace, Change::Trace);
}

fn auth_changes(old: &AuthConfig, new: &AuthConfig, out: &mut Vec<Change>) {
    if old.user != new.user {
        out.push(Change::AuthUsername);
    }
    if old.password != new.password {
        out.push(Change::AuthPassword);
    }
    if old.token != new.token {
        out.push(Change::AuthToken);
    }
    changed(out, old.timeout, new.timeout, Change::AuthTimeout);
    let by_kind = |users: &[UserConfig], nkey: bool| -> Vec<UserConfig> {
        users
            .iter()
            .filter(|u| u.nkey.is_some() == nkey)
            .cloned()
            .collect()
    };
    if by_kind(&old.users, false) != by_kind(&new.users, false) {
        out.push(Change::AuthUsers);
    }
    if by_kind(&old.users, true) != by_kind(&new.users, true) {
        out.push(Change::AuthNkeyUsers);
    }
    // Whatever else `AuthConfig` holds (or will hold) is compared as a whole, so a setting
    // added to it later still leads to the clients being authorized again.
    let rest = |a: &AuthConfig| {
        let mut r = a.clone();
        r.user = None;
        r.password = None;
        r.token = None;
        r.timeout = Duration::ZERO;
        r.users = Vec::new();
        r
    };
    if rest(old) != rest(new) {
        out.push(Change::AuthOther);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Permissions, SubjectPermission, TlsConfig};

    fn user(name: &str, pass: &str) -> UserConfig {
        UserConfig {
            user: name.into(),
            password: pass.into(),
            ..UserConfig::default()
        }
    }

    #[test]
    fn nothing_changed_is_an_empty_reload() {
        let c = Config::default();
        assert_eq!(changes(&c, &c.clone()), Ok(vec![]));
    }

    #[test]
    fn limits_logging_and_users_reload() {
        let old = Config::default();
        let mut new = old.clone();
        new.max_payload = 2000;
        new.ping_max = 3;
        new.log.debug = true;
        new.auth.users = vec![user("a", "b")];
        new.auth.timeout = Duration::from_secs(3);
        let got = changes(&old, &new).expect("reloadable");
        let lines: Vec<String> = got.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "Reloaded: debug = true",
                "Reloaded: authorization timeout = 3",
                "Reloaded: authorization users",
                "Reloaded: max_payload = 2000",
                "Reloaded: ping_max = 3",
            ]
        );
        assert!(got.iter().any(Change::is_auth));
        assert!(got.iter().any(Change::is_logging));
    }

    #[test]
    fn a_permission_change_is_a_users_change() {
        let mut old = Config::default();
        old.auth.users = vec![user("a", "b")];
        let mut new = old.clone();
        new.auth.users[0].permissions = Some(Permissions {
            publish: Some(SubjectPermission {
                allow: vec!["x".into()],
                deny: vec![],
            }),
            subscribe: None,
            responses: None,
        });
        assert_eq!(changes(&old, &new), Ok(vec![Change::AuthUsers]));
        new.auth.users[0].nkey = Some("UABC".into());
        let got = changes(&old, &new).expect("reloadable");
        assert_eq!(got, [Change::AuthUsers, Change::AuthNkeyUsers]);
    }

    #[test]
    fn accounts_with_jetstream_are_fixed_at_startup() {
        use crate::config::{AccountConfig, AccountJetStream};
        let account = |name: &str, js: Option<AccountJetStream>| AccountConfig {
            name: name.into(),
            jetstream: js,
            ..AccountConfig::default()
        };
        let mut old = Config::default();
        old.auth.accounts = vec![account("A", Some(AccountJetStream::default()))];
        // An account without JetStream may come and go.
        let mut new = old.clone();
        new.auth.accounts.push(account("B", None));
        assert_eq!(changes(&old, &new), Ok(vec![Change::AuthOther]));
        new.auth.accounts[1].jetstream = Some(AccountJetStream::default());
        assert_eq!(changes(&old, &new).unwrap_err().field, "JetStreamAccounts");
        // Configuring the first account takes JetStream from `$G`.
        assert_eq!(
            changes(&Config::default(), &old).unwrap_err().field,
            "JetStreamAccounts"
        );
    }

    #[test]
    fn fixed_settings_refuse_the_reload_in_nats_server_words() {
        let old = Config::default();
        let mut new = old.clone();
        new.max_pending = 20 * 1024 * 1024;
        new.max_payload = 10;
        let err = changes(&old, &new).unwrap_err();
        assert_eq!(
            err.to_string(),
            "config reload not supported for MaxPending: old=67108864, new=20971520"
        );
        let mut new = old.clone();
        new.port = 5000;
        assert_eq!(changes(&old, &new).unwrap_err().field, "Port");
        new.port = 0;
        assert_eq!(
            changes(&old, &new),
            Ok(vec![]),
            "a random port keeps the bound one"
        );
        let mut new = old.clone();
        new.jetstream.enabled = true;
        assert_eq!(changes(&old, &new).unwrap_err().field, "JetStream");
        let mut new = old.clone();
        new.cluster.name = Some("c".into());
        assert_eq!(changes(&old, &new).unwrap_err().field, "Cluster");
    }

    #[test]
    fn tls_is_read_again_but_verify_and_map_is_fixed() {
        let old = Config {
            tls: Some(TlsConfig::new("a.pem".into(), "a.key".into())),
            ..Config::default()
        };
        let mut new = old.clone();
        assert_eq!(changes(&old, &new), Ok(vec![Change::Tls(true)]));
        if let Some(t) = new.tls.as_mut() {
            t.timeout = Duration::from_millis(500);
        }
        assert_eq!(
            changes(&old, &new).expect("reloadable")[1].to_string(),
            "Reloaded: tls timeout = 0.5"
        );
        if let Some(t) = new.tls.as_mut() {
            t.verify_and_map = true;
        }
        assert_eq!(changes(&old, &new).unwrap_err().field, "TLSMap");
        assert_eq!(
            changes(&old, &Config::default()),
            Ok(vec![Change::Tls(false)])
        );
    }
}
