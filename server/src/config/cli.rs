//! The nats-server compatible command line: [`parse`] turns arguments into a [`Config`] (or a
//! request for help or the version).
//!
//! Flags follow Go's `flag` package, as nats-server does: every long name works with one or two
//! dashes (`-port`, `--port`); values follow as the next argument or after `=` (`-p 4222`,
//! `-p=4222`); boolean flags take no value but accept `=true`/`=false` (`-js=true`); `--` ends
//! the flags. Flags are case-sensitive (`-D` is debug, `-d` is unknown).
//!
//! Precedence is defaults < config file (`-c`) < flags, whatever the argument order: all flags
//! are parsed first, then the file is loaded, then the flags are applied over it.

#[cfg(test)]
mod tests;

use std::path::PathBuf;

use super::file::{self, ConfigError, addr};
use super::{Config, TlsConfig};

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum CliOutcome {
    /// Start the server with this configuration.
    Run(Box<Config>),
    /// Print the version and exit successfully (`-v`, `--version`, `version`).
    Version,
    /// Print [`USAGE`] and exit successfully (`-h`, `--help`, `help`).
    Help,
    /// Send a signal to a running server and exit (`--signal ldm[=<pid or pid file>]`).
    Signal {
        /// The command, as typed before `=` (`ldm`, `stop`, `quit`, `term`, `reopen`, `reload`).
        command: String,
        /// The process: what followed `=`, else the pid file of `-P`/`pid_file`.
        target: Option<String>,
    },
}

/// The `--help` text, laid out like `nats-server --help`.
pub const USAGE: &str = "\
Usage: jetraft [options]

Server Options:
    -a, --addr, --net <host>         Bind to host address (default: 0.0.0.0)
    -p, --port <port>                Use port for clients (default: 4222, -1 for random)
    -n, --name
        --server_name <server_name>  Server name (default: auto)
    -m, --http_port <port>           Use port for http monitoring
    -ms,--https_port <port>          Use port for https monitoring
    -c, --config <file>              Configuration file
        --no_console                 Do not serve the web console on the monitoring port

Logging Options:
    -l, --log <file>                 File to redirect log output
    -D, --debug                      Enable debugging output
    -V, --trace                      Trace the raw protocol
    -DV                              Debug and trace

JetStream Options:
    -js, --jetstream                 Enable JetStream functionality
    -sd, --store_dir <dir>           Set the storage directory (default: /tmp/nats/jetstream)
        --repair_store               Move a damaged store aside and rejoin under a new node id

Authorization Options:
        --user <user>                User required for connections
        --pass <password>            Password required for connections
        --auth <token>               Authorization token required for connections

TLS Options:
        --tls                        Enable TLS, do not verify clients (default: false)
        --tlscert <file>             Server certificate file
        --tlskey <file>              Private key for server certificate
        --tlsverify                  Enable TLS, verify client certificates
        --tlscacert <file>           Client certificate CA for verification

Cluster Options:
        --routes <rurl-1, rurl-2>    Routes to solicit and connect
        --cluster <cluster-url>      Cluster URL for solicited routes
        --cluster_listen <url>       Cluster URL from which members can solicit routes (same as --cluster)
        --cluster_name <string>      Cluster Name, nodes only link with peers of the same name

Common Options:
    -h, --help                       Show this message
    -v, --version                    Show version

Process Options:
    -P, --pid <file>                 File to store PID
        --ports_file_dir <dir>       Creates a ports file in the specified directory (<executable_name>_<pid>.ports).
    -sl, --signal <signal>[=<pid>]   Send signal to jetraft process (ldm, stop, quit, term, reopen, reload)
                                     pid can be either a PID (e.g. 1) or the path to a PID file
";

/// Which setting a flag controls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flag {
    Addr,
    Port,
    HttpPort,
    HttpsPort,
    Tls,
    TlsCert,
    TlsKey,
    TlsVerify,
    TlsCaCert,
    NoConsole,
    Name,
    JetStream,
    RepairStore,
    StoreDir,
    ConfigFile,
    ClusterName,
    Cluster,
    Routes,
    User,
    Pass,
    Auth,
    Debug,
    Trace,
    DebugAndTrace,
    Log,
    Version,
    Help,
    Pid,
    PortsFileDir,
    Signal,
}

/// Flags as Go's `flag` package knows them: a name, whether it is boolean, and its setting.
const FLAGS: &[(&str, bool, Flag)] = &[
    ("a", false, Flag::Addr),
    ("addr", false, Flag::Addr),
    ("net", false, Flag::Addr),
    ("p", false, Flag::Port),
    ("port", false, Flag::Port),
    ("m", false, Flag::HttpPort),
    ("http_port", false, Flag::HttpPort),
    ("ms", false, Flag::HttpsPort),
    ("https_port", false, Flag::HttpsPort),
    ("tls", true, Flag::Tls),
    ("tlscert", false, Flag::TlsCert),
    ("tlskey", false, Flag::TlsKey),
    ("tlsverify", true, Flag::TlsVerify),
    ("tlscacert", false, Flag::TlsCaCert),
    ("no_console", true, Flag::NoConsole),
    ("n", false, Flag::Name),
    ("name", false, Flag::Name),
    ("server_name", false, Flag::Name),
    ("js", true, Flag::JetStream),
    ("jetstream", true, Flag::JetStream),
    ("repair_store", true, Flag::RepairStore),
    ("sd", false, Flag::StoreDir),
    ("store_dir", false, Flag::StoreDir),
    ("c", false, Flag::ConfigFile),
    ("config", false, Flag::ConfigFile),
    ("cluster_name", false, Flag::ClusterName),
    ("cluster", false, Flag::Cluster),
    ("cluster_listen", false, Flag::Cluster),
    ("routes", false, Flag::Routes),
    ("user", false, Flag::User),
    ("pass", false, Flag::Pass),
    ("auth", false, Flag::Auth),
    ("D", true, Flag::Debug),
    ("debug", true, Flag::Debug),
    ("V", true, Flag::Trace),
    ("trace", true, Flag::Trace),
    ("DV", true, Flag::DebugAndTrace),
    ("l", false, Flag::Log),
    ("log", false, Flag::Log),
    ("v", true, Flag::Version),
    ("version", true, Flag::Version),
    ("h", true, Flag::Help),
    ("help", true, Flag::Help),
    ("P", false, Flag::Pid),
    ("pid", false, Flag::Pid),
    ("ports_file_dir", false, Flag::PortsFileDir),
    ("sl", false, Flag::Signal),
    ("signal", false, Flag::Signal),
];

/// One flag occurrence: which flag, as typed (for errors), and its value.
#[derive(Debug)]
struct Given {
    flag: Flag,
    typed: String,
    value: Setting,
}

/// A flag's value once parsed: booleans are checked while parsing, like Go's `flag` does.
#[derive(Debug)]
enum Setting {
    Bool(bool),
    Text(String),
}

/// Parses the command line (`args` without the program name), loads the `-c` file if any, and
/// applies the flags over it.
///
/// Errors use Go's `flag` wording (`flag provided but not defined: -x`, `flag needs an argument:
/// -p`, `invalid value "abc" for flag -p: ...`) or come from the config file.
pub fn parse(args: &[String]) -> Result<CliOutcome, ConfigError> {
    let (given, positional) = scan(args)?;
    if let Some(command) = positional.first() {
        return match command.as_str() {
            "version" => Ok(CliOutcome::Version),
            "help" => Ok(CliOutcome::Help),
            _ => Err(ConfigError::UnknownCommand(command.clone())),
        };
    }
    let wants = |flag: Flag| {
        given
            .iter()
            .any(|g| g.flag == flag && matches!(g.value, Setting::Bool(true)))
    };
    if wants(Flag::Version) {
        return Ok(CliOutcome::Version);
    }
    if wants(Flag::Help) {
        return Ok(CliOutcome::Help);
    }

    let mut cfg = Config::default();
    if let Some(path) = config_file(args) {
        file::load_into(&path, &mut cfg)?;
    }
    for g in &given {
        apply(g, &mut cfg)?;
    }
    check_tls_flags(&given, &cfg)?;
    let signal = given.iter().rev().find_map(|g| match (&g.flag, &g.value) {
        (Flag::Signal, Setting::Text(s)) => Some(s.clone()),
        _ => None,
    });
    if let Some(signal) = signal {
        let (command, target) = match signal.split_once('=') {
            Some((c, t)) => (c.to_string(), Some(t.to_string())),
            None => (signal, None),
        };
        let target = target.or_else(|| cfg.pid_file.as_ref().map(|p| p.display().to_string()));
        return Ok(CliOutcome::Signal { command, target });
    }
    Ok(CliOutcome::Run(Box::new(cfg)))
}

/// The config file (`-c`) `args` name, if any (a config reload needs one).
pub fn config_file(args: &[String]) -> Option<PathBuf> {
    let (given, _) = scan(args).ok()?;
    given.iter().rev().find_map(|g| match (&g.flag, &g.value) {
        (Flag::ConfigFile, Setting::Text(path)) => Some(PathBuf::from(path)),
        _ => None,
    })
}

/// Splits `args` into flags (with values, checked for syntax) and positional arguments, the way
/// Go's `flag.Parse` does: scanning stops at the first non-flag argument or after `--`.
fn scan(args: &[String]) -> Result<(Vec<Given>, Vec<String>), ConfigError> {
    let mut given = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            break;
        }
        if arg.len() < 2 || !arg.starts_with('-') {
            return Ok((given, std::iter::once(arg).chain(rest).cloned().collect()));
        }
        let body = arg.strip_prefix("--").unwrap_or(&arg[1..]);
        if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
            return Err(ConfigError::BadFlagSyntax(arg.clone()));
        }
        let (name, inline) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (body, None),
        };
        let typed = arg[..arg.len() - body.len() + name.len()].to_string();
        let Some(&(_, is_bool, flag)) = FLAGS.iter().find(|(n, _, _)| *n == name) else {
            return Err(ConfigError::UnknownFlag { flag: typed });
        };
        let value = if is_bool {
            match inline {
                None => Setting::Bool(true),
                Some(v) => {
                    Setting::Bool(go_bool(v).ok_or_else(|| invalid(&typed, v, "parse error"))?)
                }
            }
        } else {
            match inline {
                Some(v) => Setting::Text(v.to_string()),
                None => match rest.next() {
                    Some(v) => Setting::Text(v.clone()),
                    None => return Err(ConfigError::MissingValue { flag: typed }),
                },
            }
        };
        let g = Given { flag, typed, value };
        // Check the value now, as Go's flag package does, so errors come in argument order.
        apply(&g, &mut Config::default())?;
        given.push(g);
    }
    Ok((given, rest.cloned().collect()))
}

/// Go's `strconv.ParseBool`.
fn go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// An [`ConfigError::InvalidFlagValue`].
fn invalid(flag: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::InvalidFlagValue {
        flag: flag.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// Applies one flag to `cfg`.
fn apply(g: &Given, cfg: &mut Config) -> Result<(), ConfigError> {
    let text = match &g.value {
        Setting::Text(s) => s.as_str(),
        Setting::Bool(_) => "",
    };
    let on = matches!(g.value, Setting::Bool(true));
    let bad = |why: String| invalid(&g.typed, text, why);
    match g.flag {
        Flag::Addr => cfg.host = text.to_string(),
        Flag::Port => {
            cfg.port = addr::port_number(text)
                .and_then(addr::client_port)
                .map_err(bad)?
        }
        Flag::HttpPort => {
            cfg.http_port = addr::port_number(text)
                .and_then(addr::optional_port)
                .map_err(bad)?
        }
        Flag::HttpsPort => {
            cfg.https_port = addr::port_number(text)
                .and_then(addr::optional_port)
                .map_err(bad)?
        }
        Flag::Tls | Flag::TlsVerify if !on => {}
        Flag::Tls => {
            tls_of(cfg);
        }
        Flag::TlsVerify => tls_of(cfg).verify = true,
        Flag::TlsCert => tls_of(cfg).cert_file = PathBuf::from(text),
        Flag::TlsKey => tls_of(cfg).key_file = PathBuf::from(text),
        Flag::TlsCaCert => tls_of(cfg).ca_file = Some(PathBuf::from(text)),
        Flag::NoConsole => cfg.console = !on,
        Flag::Name => cfg.server_name = Some(without_spaces(text).map_err(bad)?),
        Flag::ClusterName => cfg.cluster.name = Some(without_spaces(text).map_err(bad)?),
        Flag::StoreDir => cfg.jetstream.store_dir = PathBuf::from(text),
        Flag::Cluster => {
            let (host, port) = addr::cluster_listen(text).map_err(bad)?;
            if !host.is_empty() {
                cfg.cluster.host = Some(host);
            }
            cfg.cluster.port = port;
        }
        Flag::Routes => cfg.cluster.routes = addr::routes(text).map_err(bad)?,
        Flag::User => cfg.auth.user = Some(text.to_string()),
        Flag::Pass => cfg.auth.password = Some(text.to_string()),
        Flag::Auth => cfg.auth.token = Some(text.to_string()),
        Flag::JetStream => cfg.jetstream.enabled = on,
        Flag::RepairStore => cfg.jetstream.repair_store = on,
        Flag::Debug => cfg.log.debug = on,
        Flag::Trace => cfg.log.trace = on,
        Flag::DebugAndTrace if on => {
            cfg.log.debug = true;
            cfg.log.trace = true;
        }
        Flag::Log => cfg.log.file = Some(PathBuf::from(text)),
        Flag::Pid => cfg.pid_file = Some(PathBuf::from(text)),
        Flag::PortsFileDir => cfg.ports_file_dir = Some(PathBuf::from(text)),
        Flag::DebugAndTrace | Flag::Signal | Flag::ConfigFile | Flag::Version | Flag::Help => {}
    }
    Ok(())
}

/// The client TLS settings the `--tls*` flags change, created (nats-server's defaults) by the
/// first of them.
fn tls_of(cfg: &mut Config) -> &mut TlsConfig {
    cfg.tls
        .get_or_insert_with(|| TlsConfig::new(PathBuf::new(), PathBuf::new()))
}

/// After the flags: TLS turned on by a flag needs a certificate and a key, and `--tlsverify` a CA.
fn check_tls_flags(given: &[Given], cfg: &Config) -> Result<(), ConfigError> {
    let Some(g) = given.iter().find(|g| {
        matches!(
            g.flag,
            Flag::Tls | Flag::TlsVerify | Flag::TlsCert | Flag::TlsKey | Flag::TlsCaCert
        )
    }) else {
        return Ok(());
    };
    let Some(tls) = &cfg.tls else {
        return Ok(());
    };
    let missing = if tls.cert_file.as_os_str().is_empty() {
        Some("--tlscert")
    } else if tls.key_file.as_os_str().is_empty() {
        Some("--tlskey")
    } else if tls.requires_client_cert() && tls.ca_file.is_none() {
        Some("--tlscacert")
    } else {
        None
    };
    match missing {
        Some(flag) => Err(invalid(&g.typed, "", format!("TLS needs {flag} as well"))),
        None => Ok(()),
    }
}

/// Server and cluster names may not contain spaces (nats-server's rule).
fn without_spaces(name: &str) -> Result<String, String> {
    if name.contains(' ') {
        return Err("can not contain spaces".to_string());
    }
    Ok(name.to_string())
}
