//! The `jetraft` binary: parse nats-server compatible flags and config, start the server, run
//! until SIGINT/SIGTERM (graceful shutdown) or SIGUSR2 (lame duck mode, then exit); SIGHUP
//! reloads the configuration (the `-c` file again, the same flags over it).
//! `jetraft --signal <command>[=<pid>]` signals a running server instead.

use anyhow::Context;
use jetraft_server::config::cli::{self, CliOutcome};

/// mimalloc instead of the system allocator: the delivery and publish paths allocate and free
/// many small buffers per message, and glibc's malloc spent about a quarter of the server's CPU
/// on them in a replay profile (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // No transparent huge pages for this process. mimalloc maps its arenas committed up front,
    // and where THP is `always` (many distributions' default) the first touch of a fresh 2 MiB
    // region makes all of it resident: each stream's Raft group then cost ~2.1 MB of RSS
    // instead of ~0.2 MB (BENCHMARKS.md). The flag holds for the whole process, threads
    // started later included; where the kernel refuses it, nothing changes.
    // `JETRAFT_ALLOW_THP=1` keeps the system's setting (a few streams, throughput first).
    #[cfg(target_os = "linux")]
    if std::env::var_os("JETRAFT_ALLOW_THP").is_none_or(|v| v != "1") {
        let _ = rustix::thread::disable_transparent_huge_pages(true);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = match cli::parse(&args) {
        Ok(CliOutcome::Run(cfg)) => *cfg,
        Ok(CliOutcome::Version) => {
            println!(
                "jetraft: v{} (nats-server {} compatible)",
                env!("CARGO_PKG_VERSION"),
                jetraft_server::node::NATS_VERSION
            );
            return std::process::ExitCode::SUCCESS;
        }
        Ok(CliOutcome::Help) => {
            println!("{}", cli::USAGE);
            return std::process::ExitCode::SUCCESS;
        }
        Ok(CliOutcome::Signal { command, target }) => {
            return match jetraft_server::control::send(&command, target.as_deref()) {
                Ok(_) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("jetraft: {e}");
                    std::process::ExitCode::from(1)
                }
            };
        }
        Err(e) => {
            eprintln!("jetraft: {:#}", anyhow::Error::from(e));
            return std::process::ExitCode::from(1);
        }
    };
    match run(config, args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("jetraft: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

fn run(config: jetraft_server::config::Config, args: Vec<String>) -> anyhow::Result<()> {
    jetraft_server::logging::init(&config.log).context("set up logging")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start tokio runtime")?;
    rt.block_on(async move {
        jetraft_server::monitor::metrics::install();
        let pid_file = config.pid_file.clone();
        if let Some(path) = &pid_file {
            jetraft_server::control::write_pid_file(path)?;
        }
        let handle = jetraft_server::start(config)
            .await
            .context("start server")?;
        let mut signals = Signals::install().context("install signal handlers")?;
        let reload = |handle: &jetraft_server::ServerHandle| {
            if let Err(e) = handle.reload_from_args(&args) {
                let e = anyhow::Error::from(e);
                tracing::error!("Failed to reload server configuration: {e:#}");
            }
        };
        let stop = loop {
            match signals.next().await {
                Event::Stop(stop) => break stop,
                Event::Reload => reload(&handle),
            }
        };
        match stop {
            Stop::Shutdown => handle.shutdown().await,
            Stop::LameDuck => {
                // Kubernetes sends SIGTERM right after the preStop hook (`--signal ldm`)
                // returns: lame duck mode runs to its end regardless (SIGKILL still stops it).
                let ldm = handle.lame_duck();
                tokio::pin!(ldm);
                loop {
                    tokio::select! {
                        () = &mut ldm => break,
                        event = signals.next() => match event {
                            Event::Reload => reload(&handle),
                            Event::Stop(_) => {
                                tracing::info!("in lame duck mode: signal ignored, draining continues");
                            }
                        }
                    }
                }
            }
        }
        if let Some(path) = &pid_file {
            jetraft_server::control::remove_pid_file(path);
        }
        Ok(())
    })
}

/// How the process was asked to end.
enum Stop {
    /// SIGTERM or SIGINT: graceful shutdown.
    Shutdown,
    /// SIGUSR2 (`--signal ldm`): lame duck mode, then shutdown.
    LameDuck,
}

/// What a signal asks of the process.
enum Event {
    /// End (gracefully, or after lame duck mode).
    Stop(Stop),
    /// SIGHUP (`--signal reload`): reload the configuration.
    Reload,
}

/// The signals the server reacts to.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            usr2: signal(SignalKind::user_defined2())?,
            usr1: signal(SignalKind::user_defined1())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// Waits for the next signal that asks the process to end or to reload (others are
    /// logged).
    async fn next(&mut self) -> Event {
        loop {
            tokio::select! {
                _ = self.term.recv() => {
                    tracing::info!("trapped \"terminated\" signal");
                    return Event::Stop(Stop::Shutdown);
                }
                _ = self.int.recv() => {
                    tracing::info!("trapped \"interrupt\" signal");
                    return Event::Stop(Stop::Shutdown);
                }
                _ = self.usr2.recv() => {
                    tracing::info!("trapped \"user defined signal 2\" signal: entering lame duck mode");
                    return Event::Stop(Stop::LameDuck);
                }
                _ = self.usr1.recv() => tracing::info!("trapped \"user defined signal 1\" signal: log reopening is not supported, ignored"),
                _ = self.hup.recv() => {
                    tracing::info!("Trapped \"hangup\" signal");
                    return Event::Reload;
                }
            }
        }
    }
}
