//! The router-side state of a client connection ([`Client`]): its outbound buffer, its
//! subscriptions and its permissions. The connection's reader and writer tasks (`conn`) own the
//! socket; everyone who delivers to the client (the [`Bus`](super::Bus), JetStream through the
//! bus) only touches this state.
//!
//! Outbound path: any task that delivers to a client encodes the message straight into the
//! client's outbound buffer under a short mutex, then schedules one wake-up of the client's
//! writer (`flush_scheduled` makes repeated schedules free). The writer swaps the buffer out and
//! writes it with one syscall, so a burst of messages costs one write. A buffer that would grow
//! past `max_pending` marks the client a slow consumer and closes it; nobody else waits for it.
//!
//! Lock order: `Client::subs` may be held while calling into the sublist and into the cluster's
//! interest table (through [`PeerLinks`](super::PeerLinks)); neither calls back into a client.
//! `Client::out` is a leaf lock.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::auth::{ConnCredentials, UserPermissions};
use crate::protocol::{encode, subject_text};
use jetraft_raft::NodeId;

/// A subscription of one client.
#[derive(Debug)]
pub struct Subscription {
    /// The owning client.
    pub client: Arc<Client>,
    /// Subject or pattern.
    pub subject: String,
    /// Queue group.
    pub queue: Option<String>,
    /// Client-chosen id.
    pub sid: Bytes,
    /// Messages delivered so far.
    pub delivered: AtomicU64,
    /// Auto-unsubscribe limit (0: none).
    pub max: AtomicU64,
}

/// An entry of the server's sublist: who is interested in a pattern.
#[derive(Debug, Clone)]
pub enum SubRef {
    /// A subscription of a client connected to this node; compared by identity.
    Local(Arc<Subscription>),
    /// A peer node has at least one subscription on the pattern (queue group); the message is
    /// forwarded to it once and it delivers to its own clients.
    Remote(NodeId),
}

impl PartialEq for SubRef {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Local(a), Self::Local(b)) => Arc::ptr_eq(a, b),
            (Self::Remote(a), Self::Remote(b)) => a == b,
            _ => false,
        }
    }
}

/// Why a connection ended, as shown in `/connz?state=closed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The client closed the socket.
    ClientClosed,
    /// A protocol error.
    ProtocolViolation,
    /// Bad credentials.
    AuthViolation,
    /// No CONNECT within the auth timeout.
    AuthTimeout,
    /// Outbound buffer or write deadline exceeded.
    SlowConsumer,
    /// Too many outstanding PINGs.
    StaleConnection,
    /// Message larger than max_payload.
    MaxPayload,
    /// Control line longer than max_control_line.
    MaxControlLine,
    /// Too many connections.
    MaxConnections,
    /// The server is shutting down.
    ServerShutdown,
    /// A read or write failed.
    IoError,
    /// The TLS handshake failed or timed out.
    TlsHandshakeError,
}

impl CloseReason {
    /// nats-server's text for the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClientClosed => "Client Closed",
            Self::ProtocolViolation => "Protocol Violation",
            Self::AuthViolation => "Authentication Failure",
            Self::AuthTimeout => "Authentication Timeout",
            Self::SlowConsumer => "Slow Consumer (Pending Bytes)",
            Self::StaleConnection => "Stale Connection",
            Self::MaxPayload => "Maximum Message Payload Exceeded",
            Self::MaxControlLine => "Maximum Control Line Exceeded",
            Self::MaxConnections => "Maximum Connections Exceeded",
            Self::ServerShutdown => "Server Shutdown",
            Self::IoError => "Read Error",
            Self::TlsHandshakeError => "TLS Handshake Failure",
        }
    }
}

/// Counters of one connection.
#[derive(Debug, Default)]
pub struct ClientStats {
    /// Messages received from the client.
    pub in_msgs: AtomicU64,
    /// Payload bytes received from the client.
    pub in_bytes: AtomicU64,
    /// Messages sent to the client.
    pub out_msgs: AtomicU64,
    /// Payload bytes sent to the client.
    pub out_bytes: AtomicU64,
}

/// What the client told us in CONNECT, for monitoring.
#[derive(Debug, Clone, Default)]
pub struct ClientMeta {
    /// Connection name.
    pub name: String,
    /// Client language.
    pub lang: String,
    /// Client library version.
    pub version: String,
    /// Authenticated user, if any.
    pub user: String,
    /// Negotiated TLS version (`1.3`), empty in plaintext.
    pub tls_version: String,
    /// Negotiated TLS cipher suite, empty in plaintext.
    pub tls_cipher: String,
}

/// Outbound buffer state guarded by [`Client::out`].
#[derive(Debug, Default)]
pub struct OutBuf {
    /// Bytes queued for the writer.
    pub buf: BytesMut,
    /// Bytes the writer is writing right now (still pending for slow-consumer accounting).
    pub inflight: usize,
}

/// State shared by a connection's tasks and by everyone delivering to it.
#[derive(Debug)]
pub struct Client {
    /// Connection id (`cid`).
    pub cid: u64,
    /// Peer address.
    pub addr: SocketAddr,
    /// When the connection was accepted.
    pub start: time::OffsetDateTime,
    /// Outbound buffer.
    pub out: Mutex<OutBuf>,
    /// Wakes the writer.
    pub notify: Notify,
    /// Signalled by the writer after each flush, for producers stalled on this client.
    pub drained: Notify,
    /// Set while a writer wake-up is scheduled.
    pub flush_scheduled: AtomicBool,
    /// Cancelled when the connection must close.
    pub closing: CancellationToken,
    /// First close reason wins.
    pub close_reason: Mutex<Option<CloseReason>>,
    /// Subscriptions by sid.
    pub subs: Mutex<HashMap<Bytes, Arc<Subscription>>>,
    /// Counters.
    pub stats: ClientStats,
    /// CONNECT metadata.
    pub meta: Mutex<ClientMeta>,
    /// The client negotiated headers (HMSG).
    pub headers: AtomicBool,
    /// CONNECT said `protocol >= 1` and the PONG to the first PING was sent: the client takes
    /// async INFO (cluster `connect_urls` changes, lame duck mode).
    pub async_info: AtomicBool,
    /// CONNECT was accepted (server PINGs start only then).
    pub connected: AtomicBool,
    /// Permissions of the authenticated user (`None`: everything allowed).
    pub perms: Mutex<Option<Arc<UserPermissions>>>,
    /// Fast-path flag: `perms` is set (checked before taking the lock on every message).
    pub restricted: AtomicBool,
    /// Server PINGs without a PONG.
    pub pings_out: AtomicU32,
    /// When the last server PING was sent (for RTT).
    pub ping_sent: Mutex<Option<Instant>>,
    /// Last measured round-trip time.
    pub rtt: Mutex<Option<Duration>>,
    /// Last time anything was read from the client.
    pub last_activity: Mutex<time::OffsetDateTime>,
    /// Outbound limit before slow-consumer close.
    pub max_pending: usize,
    /// The nonce of this connection's INFO (set at accept when NKEY users are configured).
    pub nonce: std::sync::OnceLock<String>,
    /// What the client proved at CONNECT (`None` before), checked again on config reload.
    /// Authentication and the permissions it yields are set under this lock, so a reload
    /// and a CONNECT racing each other end with the newer users.
    pub credentials: Mutex<Option<ConnCredentials>>,
    /// The account the client publishes and subscribes in, set by CONNECT (`$G` until then).
    pub account: std::sync::OnceLock<Arc<str>>,
    /// Its account's traffic counters, set with `account`.
    pub account_traffic: std::sync::OnceLock<Arc<super::namespace::AccountTraffic>>,
}

impl Client {
    /// Creates the shared state of a newly accepted connection.
    pub fn new(cid: u64, addr: SocketAddr, max_pending: u64, parent: &CancellationToken) -> Self {
        let now = time::OffsetDateTime::now_utc();
        Self {
            cid,
            addr,
            start: now,
            out: Mutex::new(OutBuf::default()),
            notify: Notify::new(),
            drained: Notify::new(),
            flush_scheduled: AtomicBool::new(false),
            closing: parent.child_token(),
            close_reason: Mutex::new(None),
            subs: Mutex::new(HashMap::new()),
            stats: ClientStats::default(),
            meta: Mutex::new(ClientMeta::default()),
            headers: AtomicBool::new(false),
            async_info: AtomicBool::new(false),
            connected: AtomicBool::new(false),
            perms: Mutex::new(None),
            restricted: AtomicBool::new(false),
            pings_out: AtomicU32::new(0),
            ping_sent: Mutex::new(None),
            rtt: Mutex::new(None),
            last_activity: Mutex::new(now),
            max_pending: usize::try_from(max_pending).unwrap_or(usize::MAX),
            nonce: std::sync::OnceLock::new(),
            credentials: Mutex::new(None),
            account: std::sync::OnceLock::new(),
            account_traffic: std::sync::OnceLock::new(),
        }
    }

    /// The account the client is in (`$G` when none was set).
    pub fn account(&self) -> &str {
        self.account
            .get()
            .map_or(crate::config::GLOBAL_ACCOUNT, |a| a)
    }

    /// Marks the connection for closing; the first reason is kept.
    pub fn close(&self, reason: CloseReason) {
        let mut r = self.close_reason.lock();
        if r.is_none() {
            *r = Some(reason);
        }
        drop(r);
        self.closing.cancel();
    }

    /// Whether the connection is closing or closed.
    pub fn is_closed(&self) -> bool {
        self.closing.is_cancelled()
    }

    /// Queues raw protocol bytes and wakes the writer now.
    pub fn send_proto(&self, bytes: &[u8]) {
        self.out.lock().buf.extend_from_slice(bytes);
        self.wake_writer();
    }

    /// Queues `-ERR '<text>'` and wakes the writer now.
    pub fn send_err(&self, text: &str) {
        let mut out = self.out.lock();
        encode::err(&mut out.buf, text);
        drop(out);
        self.wake_writer();
    }

    /// Encodes a message for `sid` into the outbound buffer. Returns the bytes now pending, or
    /// `None` when the client is (or just became) a slow consumer and the message was dropped.
    /// The caller wakes the writer, usually once per batch via [`Client::schedule_flush`].
    pub fn queue_msg(
        &self,
        subject: &[u8],
        sid: &[u8],
        reply: Option<&[u8]>,
        headers: Option<&[u8]>,
        payload: &[u8],
    ) -> Option<usize> {
        if self.is_closed() {
            return None;
        }
        let headers = if self.headers.load(Ordering::Relaxed) {
            headers
        } else {
            None
        };
        // Subjects that came in as bytes that are not UTF-8 leave as those bytes.
        let subject = subject_text::to_wire(subject);
        let reply = reply.map(subject_text::to_wire);
        let mut out = self.out.lock();
        if out.buf.len() + out.inflight > self.max_pending {
            drop(out);
            self.close(CloseReason::SlowConsumer);
            return None;
        }
        encode::msg(
            &mut out.buf,
            &subject,
            sid,
            reply.as_deref(),
            headers,
            payload,
        );
        let pending = out.buf.len() + out.inflight;
        drop(out);
        let size = (payload.len() + headers.map_or(0, <[u8]>::len)) as u64;
        self.stats.out_msgs.fetch_add(1, Ordering::Relaxed);
        self.stats.out_bytes.fetch_add(size, Ordering::Relaxed);
        if let Some(acc) = self.account_traffic.get() {
            acc.stats.out_msgs.fetch_add(1, Ordering::Relaxed);
            acc.stats.out_bytes.fetch_add(size, Ordering::Relaxed);
        }
        Some(pending)
    }

    /// Pending bytes above which producers pause for this client to drain (back-pressure
    /// before the hard `max_pending` limit, as nats-server stalls producers).
    pub fn stall_threshold(&self) -> usize {
        self.max_pending / 2
    }

    /// Marks a writer wake-up as scheduled; returns `true` if the caller must call
    /// [`Client::wake_writer`] (no wake-up was pending).
    pub fn schedule_flush(&self) -> bool {
        !self.flush_scheduled.swap(true, Ordering::AcqRel)
    }

    /// Wakes the writer task.
    pub fn wake_writer(&self) {
        self.flush_scheduled.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    /// Installs the user's permissions (or none).
    pub fn set_permissions(&self, perms: Option<Arc<UserPermissions>>) {
        self.restricted.store(perms.is_some(), Ordering::Release);
        *self.perms.lock() = perms;
    }

    /// The user's permissions, if restricted.
    pub fn permissions(&self) -> Option<Arc<UserPermissions>> {
        if !self.restricted.load(Ordering::Acquire) {
            return None;
        }
        self.perms.lock().clone()
    }

    /// Bytes queued and in flight.
    pub fn pending_bytes(&self) -> usize {
        let out = self.out.lock();
        out.buf.len() + out.inflight
    }
}
