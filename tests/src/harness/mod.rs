//! Process harness for black-box tests.
//!
//! - [`ServerProcess`]: spawn a server with nats-server style flags on free loopback ports, wait
//!   until it sends `INFO`, capture its log, stop it with SIGTERM or SIGKILL, kill it on drop.
//! - [`RawClient`]: a byte-exact protocol client where every read is bounded in time.
//! - [`cluster::Cluster`]: N linked server processes, with kill -9 and restart of a member.
//! - [`http`]: a minimal HTTP/1.1 GET for the monitoring endpoints.
//! - [`assert_clean_log`]: fail a test on unexpected `ERROR` or panic lines in a jetraft log.
//!
//! Which server runs is chosen by the environment (see [`server_kind`]), so the same test code
//! runs against jetraft and against the reference nats-server.
//!
//! Invariants: the harness only ever signals processes it spawned itself (by their pid), binds
//! only `127.0.0.1`, and every wait is bounded.

pub mod apidiff;
pub mod backup;
pub mod batch;
pub mod certs;
pub mod cluster;
pub mod http;
pub mod jsapi;
mod log;
mod ports;
mod process;
pub mod pull;
mod raw;
pub mod schedule;
pub mod sysreq;

pub use cluster::Cluster;
pub use log::{assert_clean_log, assert_clean_log_allowing};
pub use ports::free_port;
pub use process::{ServerKind, ServerOptions, ServerProcess, server_kind};
pub use raw::{DEFAULT_CONNECT, RawClient, RawMsg};

use std::time::Duration;

/// Default bound for a single read in [`RawClient`] and for small waits in tests.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Bound on connecting a client in [`connect`].
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One server (jetraft or the reference, see [`server_kind`]) with default options.
pub async fn start_server() -> ServerProcess {
    ServerProcess::start(ServerOptions::default())
        .await
        .expect("start server")
}

/// An async-nats client connected to `srv`, within a bounded time.
pub async fn connect(srv: &ServerProcess) -> async_nats::Client {
    within(
        CONNECT_TIMEOUT,
        "connect",
        Box::pin(async_nats::connect(srv.client_url())),
    )
    .await
    .expect("connect")
}

/// An async-nats client of user `user` whose password is the user name (the accounts tests'
/// convention), connected to `srv` within a bounded time.
pub async fn login(srv: &ServerProcess, user: &str) -> async_nats::Client {
    let opts = async_nats::ConnectOptions::with_user_and_password(user.into(), user.into())
        .connection_timeout(READ_TIMEOUT);
    within(
        CONNECT_TIMEOUT,
        "connect",
        Box::pin(opts.connect(srv.client_url())),
    )
    .await
    .unwrap_or_else(|e| panic!("connect as {user}: {e}"))
}

/// Runs `check` every 20 ms until it returns `Some`, or panics after `timeout` with `what`.
///
/// Used for conditions that become true asynchronously on the server (a connection counted in
/// `/varz`, a slow consumer detected, ...).
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Awaits `fut` for at most `bound`; panics with `what` on timeout. Wrap every await on a client
/// library call that could hang (a lost message, a missing PONG) in it.
pub async fn within<F: Future>(bound: Duration, what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(bound, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {bound:?}: {what}"),
    }
}

/// A real server round trip for an async-nats client.
///
/// async-nats 0.51 `Client::flush` only writes the client's buffer to the socket (no PING/PONG),
/// so it proves nothing about the server. This subscribes to a fresh inbox, publishes to it and
/// waits for the echo: a server processes one connection's ops in order and writes to it in
/// order, so afterwards every op sent before was processed, and every message routed to this
/// connection before was received. Needs echo on and permission to use `_INBOX.>`.
pub async fn round_trip(client: &async_nats::Client) {
    let inbox = client.new_inbox();
    let mut sub = within(
        READ_TIMEOUT,
        "round-trip subscribe",
        client.subscribe(inbox.clone()),
    )
    .await
    .expect("round-trip subscribe");
    within(
        READ_TIMEOUT,
        "round-trip publish",
        client.publish(inbox, bytes::Bytes::new()),
    )
    .await
    .expect("round-trip publish");
    let echoed = within(
        READ_TIMEOUT,
        "round-trip echo",
        futures_util::StreamExt::next(&mut sub),
    )
    .await;
    assert!(echoed.is_some(), "round-trip subscription ended");
}

/// Renders bytes for assertion messages: printable ASCII as is, `\r`, `\n`, `\t` escaped and
/// everything else as `\xNN`, so that a mismatch in framing is visible.
pub fn escape_bytes(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s
}
