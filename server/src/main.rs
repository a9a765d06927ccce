//! The `jetraft` binary: parse nats-server compatible flags and config, start the server, run
//! until SIGINT/SIGTERM, then shut down gracefully.

use anyhow::Context;
use jetraft_server::Server;
use jetraft_server::config::cli::{self, CliOutcome};

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = match cli::parse(&args) {
        Ok(CliOutcome::Run(cfg)) => *cfg,
        Ok(CliOutcome::Version) => {
            println!(
                "jetraft: v{} (nats-server {} compatible)",
                env!("CARGO_PKG_VERSION"),
                jetraft_server::server::NATS_VERSION
            );
            return std::process::ExitCode::SUCCESS;
        }
        Ok(CliOutcome::Help) => {
            println!("{}", cli::USAGE);
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("jetraft: {:#}", anyhow::Error::from(e));
            return std::process::ExitCode::from(1);
        }
    };
    match run(config) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("jetraft: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

fn run(config: jetraft_server::config::Config) -> anyhow::Result<()> {
    jetraft_server::logging::init(&config.log).context("set up logging")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start tokio runtime")?;
    rt.block_on(async move {
        jetraft_server::metrics::install();
        let handle = Server::start(config).await.context("start server")?;
        wait_for_signal().await.context("install signal handlers")?;
        handle.shutdown().await;
        Ok(())
    })
}

async fn wait_for_signal() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => tracing::info!("trapped \"terminated\" signal"),
        _ = int.recv() => tracing::info!("trapped \"interrupt\" signal"),
    }
    Ok(())
}
