//! [`ResponseMap`]: reply subjects of service-import requests in flight on this node.
//!
//! A request that crosses into the exporting account carries a fresh reply subject
//! `_R_.<node token>.<id>` there; responders answer on it, and the answer is delivered back in
//! the requesting account on the reply subject the requester chose. The token names this node,
//! so peers forward answers here (the bus announces interest in `_R_.<token>.>` in each
//! exporting account it sent a request into). Time is passed in, never read.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::config::ResponseType;

/// Sweep expired entries once the map holds this many.
const SWEEP_ABOVE: usize = 4096;

/// Where an answer goes back to.
#[derive(Debug, Clone)]
struct Pending {
    /// The account the answer must come from (the exporter).
    exporter: Arc<str>,
    /// The requesting account.
    requester: Arc<str>,
    /// The requester's reply subject.
    reply: String,
    /// Singleton answers end the mapping.
    response: ResponseType,
    /// After this, answers are dropped.
    deadline: Instant,
}

/// Reply subjects of service-import requests in flight, by their `_R_` subject.
#[derive(Debug)]
pub struct ResponseMap {
    /// `_R_.<token>.`
    prefix: String,
    /// Id source.
    next: AtomicU64,
    /// Pending answers.
    pending: Mutex<HashMap<String, Pending>>,
}

impl Default for ResponseMap {
    fn default() -> Self {
        Self::new()
    }
}

impl ResponseMap {
    /// An empty map with a fresh random node token.
    pub fn new() -> Self {
        let token: String = (0..8)
            .map(|_| char::from(b'a' + rand::random_range(0..26u8)))
            .collect();
        Self {
            prefix: format!("_R_.{token}."),
            next: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// `_R_.<token>.>`: the pattern every reply subject of this node matches.
    pub fn pattern(&self) -> String {
        format!("{}>", self.prefix)
    }

    /// A new reply subject in `exporter` for a request from `requester` whose own reply
    /// subject is `reply`.
    pub fn track(
        &self,
        exporter: &Arc<str>,
        requester: &Arc<str>,
        reply: &str,
        response: ResponseType,
        threshold: Duration,
        now: Instant,
    ) -> String {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let salt: u32 = rand::random();
        let subject = format!("{}{id:x}{salt:08x}", self.prefix);
        let mut pending = self.pending.lock();
        if pending.len() >= SWEEP_ABOVE {
            pending.retain(|_, p| p.deadline > now);
        }
        pending.insert(
            subject.clone(),
            Pending {
                exporter: exporter.clone(),
                requester: requester.clone(),
                reply: reply.to_string(),
                response,
                deadline: now + threshold,
            },
        );
        subject
    }

    /// Where an answer published on `subject` in `account` goes: the requesting account and
    /// its reply subject. A singleton mapping is used up by its first answer; an expired one
    /// is dropped.
    pub fn answer(&self, account: &str, subject: &str, now: Instant) -> Option<(Arc<str>, String)> {
        if !subject.starts_with(&self.prefix) {
            return None;
        }
        let mut pending = self.pending.lock();
        let p = pending.get(subject)?;
        if &*p.exporter != account {
            return None;
        }
        if p.deadline <= now {
            pending.remove(subject);
            return None;
        }
        let to = (p.requester.clone(), p.reply.clone());
        if p.response == ResponseType::Singleton {
            pending.remove(subject);
        }
        Some(to)
    }

    /// Where an answer on `subject` in `account` would go, without using the mapping up (a
    /// JetStream consumer asks whether a pull request's reply subject still has a listener).
    pub fn peek(&self, account: &str, subject: &str, now: Instant) -> Option<(Arc<str>, String)> {
        if !subject.starts_with(&self.prefix) {
            return None;
        }
        let pending = self.pending.lock();
        let p = pending.get(subject)?;
        (&*p.exporter == account && p.deadline > now)
            .then(|| (p.requester.clone(), p.reply.clone()))
    }

    /// Mappings in flight (tests and monitoring).
    pub fn len(&self) -> usize {
        self.pending.lock().len()
    }

    /// Whether no mapping is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_singleton_answer_goes_back_once() {
        let m = ResponseMap::new();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("A"), Arc::from("B"));
        let now = Instant::now();
        let r = m.track(
            &a,
            &b,
            "_INBOX.x",
            ResponseType::Singleton,
            Duration::from_secs(5),
            now,
        );
        assert!(r.starts_with("_R_.") && r.starts_with(&m.pattern()[..m.pattern().len() - 1]));
        assert!(m.answer("B", &r, now).is_none(), "only from the exporter");
        let (acc, reply) = m.answer("A", &r, now).unwrap();
        assert_eq!((&*acc, reply.as_str()), ("B", "_INBOX.x"));
        assert!(m.answer("A", &r, now).is_none());
        assert!(m.is_empty());
    }

    #[test]
    fn streamed_answers_flow_until_the_threshold() {
        let m = ResponseMap::new();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("A"), Arc::from("B"));
        let now = Instant::now();
        let r = m.track(
            &a,
            &b,
            "in",
            ResponseType::Stream,
            Duration::from_secs(5),
            now,
        );
        assert!(m.answer("A", &r, now).is_some());
        assert!(m.answer("A", &r, now + Duration::from_secs(4)).is_some());
        assert!(m.answer("A", &r, now + Duration::from_secs(5)).is_none());
        assert!(m.is_empty());
    }
}
