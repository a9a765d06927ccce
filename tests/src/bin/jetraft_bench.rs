//! `jetraft-bench`: a small NATS core load generator built on async-nats, in the spirit of
//! `nats bench`, used by `scripts/bench.sh` to compare jetraft with nats-server.
//!
//! Benchmarks:
//! * `pubsub`: one publisher and one subscriber connection; throughput seen by the subscriber
//!   from its first to its last message.
//! * `reqrep`: one echo responder and one requester doing sequential requests; latency
//!   percentiles and requests per second.
//! * `jspub`: JetStream publishing with PubAcks (async with N in flight, or synchronous).
//! * `jsconsume`: JetStream pull consumption with acks, or ordered replay.
//! * `kv`: sequential Key-Value puts and gets (ops/s, latency percentiles).
//!
//! Each run prints exactly one `RESULT ...` line on stdout (space-separated `key=value` pairs);
//! everything else goes to stderr. Run `jetraft-bench --help` for the options.
//!
//! With `JETRAFT_BENCH_TLS_CA=<CA PEM file>` in the environment, every connection requires TLS
//! and trusts that CA (`scripts/bench-tls.sh`).

// The crate root is a file in `src/bin/`, so its modules are found relative to that directory.
#[path = "jetraft_bench/args.rs"]
mod args;
#[path = "jetraft_bench/jsconsume.rs"]
mod jsconsume;
#[path = "jetraft_bench/jspub.rs"]
mod jspub;
#[path = "jetraft_bench/kv.rs"]
mod kv;
#[path = "jetraft_bench/pubsub.rs"]
mod pubsub;
#[path = "jetraft_bench/reqrep.rs"]
mod reqrep;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::{ConnectOptions, Event};

use crate::args::{Args, Bench, Command};

fn main() -> ExitCode {
    let command = match args::parse(std::env::args().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("jetraft-bench: {e:#}\n\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    let args = match command {
        Command::Help => {
            print!("{}", args::USAGE);
            return ExitCode::SUCCESS;
        }
        Command::Run(args) => *args,
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("jetraft-bench: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Builds the runtime and runs the chosen benchmark under the overall timeout.
fn run(args: Args) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    runtime.block_on(async move {
        // pubsub watches `--timeout` itself to report its progress; this is the backstop.
        let limit = args.timeout + Duration::from_secs(2);
        let work = async {
            match args.bench {
                Bench::PubSub => Box::pin(pubsub::run(&args)).await,
                Bench::ReqRep => Box::pin(reqrep::run(&args)).await,
                Bench::JsPub => Box::pin(jspub::run(&args)).await,
                Bench::JsConsume => Box::pin(jsconsume::run(&args)).await,
                Bench::Kv => Box::pin(kv::run(&args)).await,
            }
        };
        match tokio::time::timeout(limit, work).await {
            Ok(result) => result,
            Err(_) => anyhow::bail!(
                "benchmark did not finish within --timeout {}s (plus 2s grace)",
                args.timeout.as_secs()
            ),
        }
    })
}

/// Connection options shared by every benchmark connection: a name, a bounded connect, and
/// connection events (disconnects, slow consumers, server errors) reported on stderr.
pub(crate) fn connect_options(name: &str) -> ConnectOptions {
    let label = name.to_string();
    let mut opts = ConnectOptions::new();
    if let Some(ca) = std::env::var_os("JETRAFT_BENCH_TLS_CA") {
        opts = opts
            .require_tls(true)
            .add_root_certificates(std::path::PathBuf::from(ca));
    }
    opts.name(name)
        .connection_timeout(Duration::from_secs(5))
        .event_callback(move |event| {
            let label = label.clone();
            async move {
                match event {
                    // Routine: every run connects, and closes when its clients are dropped.
                    Event::Connected | Event::Closed => {}
                    other => eprintln!("jetraft-bench: [{label}] connection event: {other}"),
                }
            }
        })
}

/// Connects `name` to `url` with [`connect_options`] plus `tweak`.
pub(crate) async fn connect(
    url: &str,
    name: &str,
    tweak: impl FnOnce(ConnectOptions) -> ConnectOptions,
) -> Result<async_nats::Client> {
    tweak(connect_options(name))
        .connect(url)
        .await
        .with_context(|| format!("{name}: connecting to {url}"))
}

/// Fails if `size` exceeds what the server accepts.
pub(crate) fn check_payload_size(client: &async_nats::Client, size: usize) -> Result<()> {
    let max = client.server_info().max_payload;
    anyhow::ensure!(
        size <= max,
        "--size {size} exceeds the server's max_payload {max}"
    );
    Ok(())
}

/// A payload of `size` bytes with a recognisable, non-constant pattern.
pub(crate) fn payload(size: usize) -> bytes::Bytes {
    (0..size)
        .map(|i| b'a' + (i % 26) as u8)
        .collect::<Vec<u8>>()
        .into()
}

/// Stream `name` on `subject`, deleted first if it exists, with `--storage` and `--replicas`.
pub(crate) async fn fresh_stream(
    js: &async_nats::jetstream::Context,
    name: &str,
    subject: &str,
    args: &Args,
) -> Result<async_nats::jetstream::stream::Stream> {
    use async_nats::jetstream::stream;
    let _ = js.delete_stream(name).await;
    let storage = match args.storage.as_str() {
        "memory" => stream::StorageType::Memory,
        _ => stream::StorageType::File,
    };
    js.create_stream(stream::Config {
        name: name.to_string(),
        subjects: vec![subject.to_string()],
        storage,
        num_replicas: usize::try_from(args.replicas).unwrap_or(1),
        ..Default::default()
    })
    .await
    .context("creating the benchmark stream")
}

/// A subject unique to this process, so that concurrent runs do not see each other.
pub(crate) fn unique_subject(kind: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("jetraft_bench.{kind}.{}.{nanos}", std::process::id())
}
