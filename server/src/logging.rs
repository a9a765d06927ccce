//! Log output in nats-server's text format:
//! `[<pid>] 2026/12/02 10:49:09.123456 [INF] message key=value`.
//!
//! `-D` enables debug, `-V` trace (protocol operations), `-DV` both; `RUST_LOG` overrides.

use std::fmt;
use std::fs::OpenOptions;
use std::path::Path;
use std::sync::Mutex;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
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

/// Installs the global subscriber. Call once, from `main`.
pub fn init(cfg: &LogConfig) -> Result<(), LogError> {
    let level = match (cfg.debug, cfg.trace) {
        (_, true) => "trace",
        (true, false) => "debug",
        _ => "info",
    };
    let default = format!("{level},openraft=warn,h2=warn,hyper=warn,tower=warn");
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let fmt = NatsFormat {
        pid: std::process::id(),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .event_format(fmt);
    match &cfg.file {
        Some(path) => {
            let file = open_log(path)?;
            let _ = builder.with_writer(Mutex::new(file)).try_init();
        }
        None => {
            let _ = builder.with_writer(std::io::stderr).try_init();
        }
    }
    Ok(())
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
