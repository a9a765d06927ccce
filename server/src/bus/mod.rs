//! The node's message bus: who is interested in which subject, and getting a message to them.
//!
//! [`Bus`] is a cheap cloneable handle. It owns the client interest index (the sublist of local
//! subscriptions and of peers' interest), the server-internal subscriptions JetStream listens on
//! ([`internal`]), the traffic counters, and the outbound side of the cluster links
//! ([`PeerLinks`]). Connections publish through it, cluster links hand it what peers forwarded,
//! and JetStream answers, delivers and forwards through it; none of them needs the server object.
//!
//! - [`client`]: the router-side state of a client connection ([`Client`], [`Subscription`]).
//! - [`internal`]: server-internal subscribers ([`InternalSubs`]).
//! - `route`: routing one message ([`Bus::route`]) and the publish helpers.
//! - [`namespace`]: one account's sublist and internal subscribers ([`Namespace`]).
//! - `shared`: what crosses accounts (service and stream imports, service responses), applied
//!   to a message published in an account by the [`Accounts`] rules.
//!
//! Accounts: every message is routed in one account ([`Msg::account`], `$G` unless set), and
//! only that account's namespace is matched. JetStream and every other server-internal user
//! publish and subscribe in `$G` ([`Bus::sublist`], [`Bus::internal`]); a later per-account
//! JetStream subscribes in [`Bus::namespace`] of its account. The cluster links carry the
//! account with each message and each interest change.
//!
//! Invariants:
//! - A message published by a client or by the server goes to every matching local
//!   subscription (one member per queue group cluster-wide, preferring a local one) and is
//!   forwarded once to each peer with interest. A message a peer forwarded is delivered locally
//!   only (one hop, as nats-server routes).
//! - Routing never blocks: deliveries are encoded into the receivers' buffers, internal
//!   subscribers get a channel send, forwards go to the peer's bounded queue (dropped and
//!   counted when it is full or the link is down).

pub mod client;
pub mod cluster_sub;
pub mod internal;
pub mod namespace;
mod route;
mod shared;
pub mod traced;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use bytes::Bytes;
use jetraft_raft::NodeId;
use parking_lot::{Mutex, RwLock};

pub use client::{Client, CloseReason, SubRef, Subscription};
pub use internal::{InternalMsg, InternalRx, InternalSub, InternalSubs, QueueGauge};
pub use namespace::Namespace;

use crate::accounts::{Accounts, ResponseMap};
use crate::config::GLOBAL_ACCOUNT;
use crate::router::sublist::Sublist;

/// The outbound side of the cluster links, as the bus needs it (implemented by the cluster
/// layer; a node without a cluster port has none).
pub trait PeerLinks: Send + Sync + std::fmt::Debug {
    /// Queues `msg` for `node`; a link that is down or full drops it (and counts the drop).
    fn forward(&self, node: NodeId, msg: jetraft_proto::cluster::Msg);
    /// Whether an outbound link to `node` is up.
    fn has_outbound(&self, node: NodeId) -> bool;
    /// A local client subscribed in `account`: peers learn of a pattern new on this node.
    fn local_subscribed(&self, account: &str, subject: &str, queue: Option<&str>);
    /// A local subscription in `account` went away: peers learn when it was the last on its
    /// pattern.
    fn local_unsubscribed(&self, account: &str, subject: &str, queue: Option<&str>);
    /// The server name of `node`, if known (message trace events name the peers).
    fn peer_name(&self, _node: NodeId) -> Option<String> {
        None
    }
}

/// Message traffic through the bus (monotonic).
#[derive(Debug, Default)]
pub struct TrafficStats {
    /// Messages received from clients.
    pub in_msgs: AtomicU64,
    /// Payload bytes received from clients.
    pub in_bytes: AtomicU64,
    /// Messages delivered to clients.
    pub out_msgs: AtomicU64,
    /// Payload bytes delivered to clients.
    pub out_bytes: AtomicU64,
}

/// One message to route, borrowed from whoever holds it.
#[derive(Debug, Clone, Copy)]
pub struct Msg<'a> {
    /// The account it is published in (`$G` unless set with [`Msg::in_account`]).
    pub account: &'a str,
    /// The subject it is routed by.
    pub subject: &'a str,
    /// The subject receivers see (JetStream deliveries are routed by the deliver or inbox
    /// subject and show the stored subject); usually `subject`.
    pub shown: &'a str,
    /// Reply subject.
    pub reply: Option<&'a [u8]>,
    /// Header block (`NATS/1.0\r\n...`).
    pub hdrs: Option<&'a [u8]>,
    /// Payload.
    pub payload: &'a [u8],
}

impl<'a> Msg<'a> {
    /// A message on `subject` with `payload`, no reply and no headers.
    pub fn new(subject: &'a str, payload: &'a [u8]) -> Self {
        Self {
            account: GLOBAL_ACCOUNT,
            subject,
            shown: subject,
            reply: None,
            hdrs: None,
            payload,
        }
    }

    /// Published in `account`.
    #[must_use]
    pub fn in_account(mut self, account: &'a str) -> Self {
        self.account = account;
        self
    }

    /// With reply subject `reply`.
    #[must_use]
    pub fn reply(mut self, reply: Option<&'a [u8]>) -> Self {
        self.reply = reply;
        self
    }

    /// With reply subject `reply` (text form).
    #[must_use]
    pub fn reply_str(self, reply: Option<&'a str>) -> Self {
        self.reply(reply.map(str::as_bytes))
    }

    /// With header block `hdrs`.
    #[must_use]
    pub fn headers(mut self, hdrs: Option<&'a [u8]>) -> Self {
        self.hdrs = hdrs;
        self
    }

    /// Shown to receivers under `shown` instead of the subject it is routed by.
    #[must_use]
    pub fn shown_as(mut self, shown: &'a str) -> Self {
        self.shown = shown;
        self
    }

    /// Header and payload bytes.
    pub fn size(&self) -> usize {
        self.payload.len() + self.hdrs.map_or(0, <[u8]>::len)
    }

    /// The message in its node-to-node wire form, for the queue groups `queues` the receiving
    /// node must serve.
    pub fn to_wire(self, queues: Vec<String>) -> jetraft_proto::cluster::Msg {
        jetraft_proto::cluster::Msg {
            subject: self.subject.to_string(),
            reply: self.reply.map_or_else(Bytes::new, Bytes::copy_from_slice),
            headers: self.hdrs.map_or_else(Bytes::new, Bytes::copy_from_slice),
            payload: Bytes::copy_from_slice(self.payload),
            queues,
            shown_subject: if self.shown == self.subject {
                String::new()
            } else {
                self.shown.to_string()
            },
            account: wire_account(self.account).to_string(),
        }
    }
}

/// An account as the cluster links name it: empty for `$G` (what nodes without accounts
/// send), the name otherwise.
pub fn wire_account(account: &str) -> &str {
    if account == GLOBAL_ACCOUNT {
        ""
    } else {
        account
    }
}

/// The account a cluster link names (see [`wire_account`]).
pub fn account_from_wire(account: &str) -> &str {
    if account.is_empty() {
        GLOBAL_ACCOUNT
    } else {
        account
    }
}

/// Where a routed message comes from.
#[derive(Debug, Clone, Copy)]
pub enum Origin<'a> {
    /// A client of this node published it; with `echo` off its own subscriptions are skipped.
    /// It goes to local subscribers and is forwarded once to each peer with interest.
    Client {
        /// The publisher.
        client: &'a Arc<Client>,
        /// Whether the publisher receives its own messages.
        echo: bool,
    },
    /// A peer forwarded it: local subscribers only (one hop), and of the queue groups only the
    /// ones the peer picked this node for.
    Peer {
        /// Queue groups this node must serve.
        queues: &'a [String],
    },
    /// The server itself (JetStream answers and deliveries): like a client publish, with no
    /// echo rule.
    Server,
}

/// Receivers touched by one read batch of a producer: writers to wake once at the end of the
/// batch, and receivers so far behind that the producer should pause for them.
#[derive(Debug, Default)]
pub struct FlushSet {
    /// Writers to wake.
    pub wake: Vec<Arc<Client>>,
    /// Receivers above their stall threshold.
    pub stalled: Vec<Arc<Client>>,
    /// Internal queues holding more than [`internal::PACE_ABOVE`] messages.
    pub paced: Vec<Arc<QueueGauge>>,
    /// Set while a traced message is routed: its deliveries are recorded here (message
    /// tracing, [`traced`]).
    pub trace: Option<traced::RouteTrace>,
}

impl FlushSet {
    /// Wakes every collected writer and empties the set, so it can collect the next batch.
    pub fn wake_all(&mut self) {
        for client in self.wake.drain(..) {
            client.wake_writer();
        }
        self.stalled.clear();
        self.paced.clear();
    }

    fn record(&mut self, client: &Arc<Client>, pending: usize) {
        if client.schedule_flush() {
            self.wake.push(client.clone());
        }
        if pending > client.stall_threshold()
            && !self.stalled.iter().any(|c| Arc::ptr_eq(c, client))
        {
            self.stalled.push(client.clone());
        }
    }
}

/// The node's message bus; clones share it.
#[derive(Debug, Clone)]
pub struct Bus {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The global account `$G`: local subscriptions, peers' interest and server-internal
    /// subscribers (JetStream's).
    global: Arc<Namespace>,
    /// The other accounts' namespaces, created on first use and kept.
    others: RwLock<HashMap<Arc<str>, Arc<Namespace>>>,
    /// What accounts share (replaced as a whole, e.g. on reload).
    accounts: RwLock<Arc<Accounts>>,
    /// Service-import requests in flight from this node, waiting for answers.
    responses: ResponseMap,
    /// Exporting accounts where peers were told of this node's reply pattern.
    reply_interest: Mutex<HashSet<Arc<str>>>,
    /// Traffic counters.
    stats: TrafficStats,
    /// The cluster links' send side; `None` without a cluster port.
    peers: Option<Arc<dyn PeerLinks>>,
    /// Which stream captures a subject in an account (set once JetStream runs; message
    /// tracing's `js` event).
    stream_lookup: LookupSlot,
}

/// Names the stream that captures `subject` in `account`, if any.
pub type StreamLookup = Arc<dyn Fn(&str, &str) -> Option<String> + Send + Sync>;

/// Where the [`StreamLookup`] is kept (a closure has no debug output).
#[derive(Default)]
struct LookupSlot(std::sync::OnceLock<StreamLookup>);

impl std::fmt::Debug for LookupSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamLookup")
    }
}

impl Bus {
    /// A bus that forwards to peers through `peers` (none on a node without a cluster port).
    pub fn new(peers: Option<Arc<dyn PeerLinks>>) -> Self {
        Self {
            inner: Arc::new(Inner {
                global: Arc::new(Namespace::new(Arc::from(GLOBAL_ACCOUNT))),
                others: RwLock::new(HashMap::new()),
                accounts: RwLock::new(Arc::new(Accounts::default())),
                responses: ResponseMap::new(),
                reply_interest: Mutex::new(HashSet::new()),
                stats: TrafficStats::default(),
                peers,
                stream_lookup: LookupSlot::default(),
            }),
        }
    }

    /// The interest index of the global account `$G` (local subscriptions and peers'
    /// interest).
    pub fn sublist(&self) -> &Sublist<SubRef> {
        &self.inner.global.sublist
    }

    /// The server-internal subscriptions of the global account `$G`.
    pub fn internal(&self) -> &InternalSubs {
        &self.inner.global.internal
    }

    /// The namespace of `account` (created on first use; `$G` is [`Bus::sublist`] and
    /// [`Bus::internal`]).
    pub fn namespace(&self, account: &str) -> Arc<Namespace> {
        if account == GLOBAL_ACCOUNT {
            return self.inner.global.clone();
        }
        if let Some(ns) = self.inner.others.read().get(account) {
            return ns.clone();
        }
        self.inner
            .others
            .write()
            .entry(Arc::from(account))
            .or_insert_with_key(|name| Arc::new(Namespace::new(name.clone())))
            .clone()
    }

    /// Every account's namespace on this node, the global account's first.
    pub fn namespaces(&self) -> Vec<Arc<Namespace>> {
        let mut out = vec![self.inner.global.clone()];
        out.extend(self.inner.others.read().values().cloned());
        out
    }

    /// Entries of every account's sublist (local subscriptions and peers' interest), for
    /// `/varz` and `/metrics`.
    pub fn subscription_count(&self) -> usize {
        let others: usize = self
            .inner
            .others
            .read()
            .values()
            .map(|ns| ns.sublist.count())
            .sum();
        self.inner.global.sublist.count() + others
    }

    /// Installs what accounts share (at start, and when the configuration is reloaded).
    pub fn set_accounts(&self, accounts: Arc<Accounts>) {
        *self.inner.accounts.write() = accounts;
    }

    /// What accounts share now.
    pub fn accounts(&self) -> Arc<Accounts> {
        self.inner.accounts.read().clone()
    }

    /// Traffic counters.
    pub fn stats(&self) -> &TrafficStats {
        &self.inner.stats
    }

    /// Tells peers that a server-internal subscriber of this node takes messages on `subject`
    /// (one subscribed with [`InternalSubs::subscribe_inbox`]), so they forward what is
    /// published there, as they do for a client subscription. Counted per pattern: pair every
    /// call with [`Bus::withdraw_interest`].
    pub fn announce_interest(&self, subject: &str) {
        self.announce_interest_in(GLOBAL_ACCOUNT, subject);
    }

    /// [`Bus::announce_interest`] for an internal subscriber in `account`'s namespace.
    pub fn announce_interest_in(&self, account: &str, subject: &str) {
        if let Some(peers) = &self.inner.peers {
            peers.local_subscribed(account, subject, None);
        }
    }

    /// Undoes one [`Bus::announce_interest`] of `subject`.
    pub fn withdraw_interest(&self, subject: &str) {
        self.withdraw_interest_in(GLOBAL_ACCOUNT, subject);
    }

    /// Undoes one [`Bus::announce_interest_in`] of `subject` in `account`.
    pub fn withdraw_interest_in(&self, account: &str, subject: &str) {
        if let Some(peers) = &self.inner.peers {
            peers.local_unsubscribed(account, subject, None);
        }
    }

    /// Installs the stream lookup (once, when JetStream starts).
    pub fn set_stream_lookup(&self, lookup: StreamLookup) {
        let _ = self.inner.stream_lookup.0.set(lookup);
    }

    /// The stream that captures `subject` in `account`, if JetStream runs and one does.
    pub fn stream_capturing(&self, account: &str, subject: &str) -> Option<String> {
        self.inner
            .stream_lookup
            .0
            .get()
            .and_then(|f| f(account, subject))
    }

    /// The server name of peer `node`, if known.
    pub fn peer_name(&self, node: NodeId) -> Option<String> {
        self.inner.peers.as_ref().and_then(|p| p.peer_name(node))
    }

    /// Whether a client of this node or a peer listens on `subject` (internal subscribers
    /// do not count).
    pub fn has_interest(&self, subject: &str) -> bool {
        self.inner.global.sublist.has_interest(subject)
    }

    /// [`Bus::has_interest`] in `account`.
    pub fn has_interest_in(&self, account: &str, subject: &str) -> bool {
        self.namespace(account).sublist.has_interest(subject)
    }
}
