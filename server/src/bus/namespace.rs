//! [`Namespace`]: one account's subject space on the bus: its client sublist (local
//! subscriptions and peers' interest in that account) and its server-internal subscribers.
//! A message published in an account is matched only against that account's namespace;
//! imports (`bus::shared`) are the only way across.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use super::{InternalSubs, SubRef, TrafficStats};
use crate::router::sublist::Sublist;

/// One account's interest index and internal subscribers.
#[derive(Debug)]
pub struct Namespace {
    /// The account's name.
    pub account: Arc<str>,
    /// Local subscriptions and peers' interest in this account.
    pub sublist: Sublist<SubRef>,
    /// Server-internal subscribers in this account.
    pub internal: InternalSubs,
    /// What the account's clients on this node sent and received (`/accstatz`).
    pub traffic: Arc<AccountTraffic>,
}

/// One account's client traffic on this node: messages its clients published (`in_*`) and
/// messages delivered to its clients (`out_*`), and its connections closed as slow consumers.
#[derive(Debug, Default)]
pub struct AccountTraffic {
    /// Messages and bytes in and out.
    pub stats: TrafficStats,
    /// Connections closed as slow consumers.
    pub slow_consumers: AtomicU64,
}

impl Namespace {
    /// An empty namespace for `account`.
    pub fn new(account: Arc<str>) -> Self {
        Self {
            internal: InternalSubs::for_account(account.clone()),
            account,
            sublist: Sublist::new(),
            traffic: Arc::default(),
        }
    }
}
