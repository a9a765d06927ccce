//! Log output in nats-server's text format:
//! `[<pid>] 2026/12/02 10:49:09.123456 [INF] message key=value`.
//!
//! `-D` enables debug, `-V` trace (protocol operations), `-DV` both; `RUST_LOG` overrides.
//! openraft logs at WARN and above, except the per-retry lines of its replication and
//! heartbeat tasks (see [`QUIET_OPENRAFT`]).

use std::fmt;
use std::fs::OpenOptions;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::config::LogConfig;

/// Formats events like nats-server does.
struct NatsFormat {
    pid: u32,
}

impl<S, N> FormatEvent<S, N> for NatsFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let now = time::OffsetDateTime::now_utc();
        let level = match *event.metadata().level() {
            Level::ERROR => "ERR",
            Level::WARN => "WRN",
            Level::INFO => "INF",
            Level::DEBUG => "DBG",
            Level::TRACE => "TRC",
        };
        write!(
            w,
            "[{}] {:04}/{:02}/{:02} {:02}:{:02}:{:02}.{:06} [{level}] ",
            self.pid,
            now.year(),
            u8::from(now.month()),
            now.day(),
            now.hour(),
            now.minute(),
            now.second(),
            now.microsecond()
        )?;
        ctx.format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("open log file {path}")]
pub struct LogError {
    /// The file given with `-l`.
    pub path: String,
    /// The OS error.
    #[source]
    pub source: std::io::Error,
}

/// openraft's own levels in the default filter. openraft warns once per failed replication
/// session (`ReplicationCore recv RPCError: Unreachable node ...` in the replication task, and
/// `update progress error` when the leader's engine hears of it) and once per failed
/// heartbeat, for every group and every retry: with one peer down that is a few lines per
/// group per backoff step and per heartbeat, which no operator reads. The transport logs a
/// peer that stays unreachable itself, rate-limited and summarised
/// (`jetraft_raft::network::grpc`: "raft peer unreachable for 30 s, N retries"), so those
/// three modules only log errors. Everything else of openraft's logs from WARN up.
pub const QUIET_OPENRAFT: &str = "openraft=warn,openraft::replication=error,\
     openraft::core::heartbeat=error,openraft::engine::handler::replication_handler=error";

/// Replaces the installed subscriber's filter (set by [`init`]).
type FilterReload = Box<dyn Fn(EnvFilter) -> Result<(), String> + Send + Sync>;

/// How [`reload`] reaches the filter of the subscriber [`init`] installed.
static FILTER: OnceLock<FilterReload> = OnceLock::new();

/// The default filter for `cfg`'s levels (`RUST_LOG` replaces it).
fn default_filter(cfg: &LogConfig) -> EnvFilter {
    let level = match (cfg.debug, cfg.trace) {
        (_, true) => "trace",
        (true, false) => "debug",
        _ => "info",
    };
    EnvFilter::new(format!(
        "{level},{QUIET_OPENRAFT},h2=warn,hyper=warn,tower=warn"
    ))
}

/// Installs the global subscriber. Call once, from `main`.
pub fn init(cfg: &LogConfig) -> Result<(), LogError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter(cfg));
    let fmt = NatsFormat {
        pid: std::process::id(),
    };
    let writer = match &cfg.file {
        Some(path) => BoxMakeWriter::new(Mutex::new(open_log(path)?)),
        None => BoxMakeWriter::new(std::io::stderr),
    };
    let builder = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_ansi(false)
        .event_format(fmt)
        .with_env_filter(filter)
        .with_filter_reloading();
    let handle = builder.reload_handle();
    if builder.try_init().is_ok() {
        let _ = FILTER.set(Box::new(move |f| {
            handle.reload(f).map_err(|e| e.to_string())
        }));
    }
    Ok(())
}

/// Applies new `debug`/`trace` levels (a config reload). A `RUST_LOG` filter stays as it is.
pub fn reload(cfg: &LogConfig) -> Result<(), String> {
    if std::env::var_os("RUST_LOG").is_some() {
        return Ok(());
    }
    match FILTER.get() {
        Some(set) => set(default_filter(cfg)),
        None => Ok(()),
    }
}

fn open_log(path: &Path) -> Result<std::fs::File, LogError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| LogError {
            path: path.display().to_string(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_filter_parses_and_keeps_openraft_retry_lines_out() {
        let filter = EnvFilter::try_new(format!("info,{QUIET_OPENRAFT}")).expect("valid filter");
        let shown = filter.to_string();
        for target in [
            "openraft::replication=error",
            "openraft::core::heartbeat=error",
            "openraft::engine::handler::replication_handler=error",
        ] {
            assert!(shown.contains(target), "{target} missing from {shown}");
        }
    }
}
