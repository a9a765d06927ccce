//! Message tracing (ADR-41, nats-server 2.11+): a message published with a `Nats-Trace-Dest`
//! header makes each server it passes through publish one trace event to that subject, in the
//! publisher's account, in nats-server's JSON:
//!
//! ```text
//! {"server": {...}, "request": {"header": {...}, "msgsize": N}, "hops": H,
//!  "events": [{"type": "in", ...}, {"type": "eg", ...}, {"type": "js", ...}]}
//! ```
//!
//! - `in`: where it came from: a client (`kind` 0, its `cid` and `name`) or a peer (`kind` 1,
//!   the peer's server name; `cid` is the peer's node id, jetraft's cluster links have no
//!   connection ids), its account and subject;
//! - `eg`: one per delivery: to a local client (`sub`, `queue`, `acc` when the receiver's account
//!   differs) or to a peer (`kind` 1, `hop`: the copy carries `Nats-Trace-Hop` with that id and
//!   the peer publishes its own event, with the hop in its `request.header`); `hops` counts the
//!   peers;
//! - `js`: the stream that captures the subject on the publisher's node (`stream`, `subject`).
//!
//! With `Nats-Trace-Only: true` (or `1`, `on`) nothing is delivered and nothing is stored: the
//! events say what would have happened (peers are still sent the message, marked trace-only,
//! so they report their part).
//!
//! Not done (nats-server does them): `Accept-Encoding` (events are never compressed), the
//! `sm` (subject mapping), `se`/`si` (stream export, service import) events, egress errors
//! (`no echo`, `subscription denies this subject`, ...), the `js` event's store errors and
//! `nointerest` (it is written when the stream captures the message, before it is stored, and
//! names the published subject, not a transformed one), `traceparent` sampling, and
//! `Nats-Trace-Origin-Account`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::bus::traced::{RouteTrace, TRACE_HOP};
use crate::bus::{Bus, Client, Msg};
use crate::monitor::rfc3339;
use crate::node::{NATS_VERSION, NodeInfo};

/// Where trace events go.
pub const TRACE_DEST: &str = "Nats-Trace-Dest";
/// Trace without delivering.
pub const TRACE_ONLY: &str = "Nats-Trace-Only";
/// A `Nats-Trace-Dest` value that turns tracing off (nats-server's marker; not a subject).
const TRACE_DISABLED: &str = "trace disabled";
/// `ServerInfo.flags`: JetStream is enabled (nats-server's `JetStreamEnabled` capability).
const FLAG_JETSTREAM: u64 = 1;
/// Connection kinds as nats-server numbers them.
const KIND_CLIENT: u8 = 0;
/// A route (for jetraft: a cluster link).
const KIND_ROUTER: u8 = 1;

/// The `server` object of a system message: who sends it, numbered, sent now (nats-server's
/// `ServerInfo`).
pub fn server_info(node: &NodeInfo, tags: &[String], jetstream: bool) -> Value {
    let mut info = json!({
        "name": node.server_name,
        "host": node.host,
        "id": node.server_id,
    });
    if let Some(cluster) = node.cluster_name.as_deref().filter(|c| !c.is_empty()) {
        info["cluster"] = cluster.into();
    }
    info["ver"] = NATS_VERSION.into();
    if !tags.is_empty() {
        info["tags"] = json!(tags);
    }
    info["jetstream"] = jetstream.into();
    info["flags"] = if jetstream { FLAG_JETSTREAM } else { 0 }.into();
    info["seq"] = node.next_event_seq().into();
    info["time"] = now().into();
    info
}

fn now() -> String {
    rfc3339(time::OffsetDateTime::now_utc())
}

/// Where a traced message entered this server.
#[derive(Debug, Clone, Copy)]
pub enum Ingress<'a> {
    /// Published by a local client.
    Client(&'a Client),
    /// Forwarded by a peer.
    Peer {
        /// The peer's node id.
        node: u64,
        /// The peer's server name.
        name: &'a str,
    },
}

/// What this server sends trace events with.
#[derive(Debug, Clone, Copy)]
pub struct Tracer<'a> {
    /// Routes the events.
    pub bus: &'a Bus,
    /// Names this server in them.
    pub node: &'a NodeInfo,
    /// `server_tags`.
    pub tags: &'a [String],
    /// Whether JetStream runs here.
    pub jetstream: bool,
}

/// A traced message on its way through this server.
#[derive(Debug)]
pub struct Trace {
    /// Where the event goes.
    dest: String,
    /// Trace only, deliver nothing.
    only: bool,
    /// The message's headers, by name (Go's map: sorted keys, values in order).
    header: BTreeMap<String, Vec<String>>,
    /// Header and payload bytes.
    size: usize,
    /// The hop id it arrived with (from a peer).
    hop: Option<String>,
    /// When it arrived.
    ts: String,
}

impl Trace {
    /// The trace a message with header block `hdrs` and `size` bytes asks for, if any: a
    /// `Nats-Trace-Dest` that is a valid publish subject.
    pub fn from_headers(hdrs: &[u8], size: usize) -> Option<Self> {
        let header = header_map(hdrs)?;
        let first = |k: &str| header.get(k).and_then(|v| v.first()).map(String::as_str);
        let dest = first(TRACE_DEST)?;
        if dest == TRACE_DISABLED || !crate::router::subject::is_valid_literal_subject(dest) {
            return None;
        }
        let only = first(TRACE_ONLY)
            .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "on"));
        Some(Self {
            dest: dest.to_string(),
            only,
            hop: first(TRACE_HOP).map(str::to_string),
            header,
            size,
            ts: now(),
        })
    }

    /// The subject the events go to.
    pub fn dest(&self) -> &str {
        &self.dest
    }

    /// Whether the message is traced only, not delivered.
    pub fn only(&self) -> bool {
        self.only
    }

    /// Whether the message arrived with a hop id (a copy another server's routing forwarded).
    pub fn has_hop(&self) -> bool {
        self.hop.is_some()
    }

    /// The recorder to route the message with.
    pub fn recorder(&self) -> RouteTrace {
        RouteTrace::new(self.only, self.hop.clone())
    }

    /// Publishes this server's event for the message published in `account` on `subject`,
    /// after it was routed with `route`.
    pub fn publish(
        self,
        tracer: Tracer<'_>,
        ingress: Ingress<'_>,
        account: &str,
        subject: &str,
        route: &RouteTrace,
    ) {
        let mut events = vec![ingress_event(&self.ts, ingress, account, subject)];
        for c in &route.clients {
            let mut e = json!({
                "type": "eg",
                "ts": now(),
                "kind": KIND_CLIENT,
                "cid": c.client.cid,
            });
            let name = c.client.meta.lock().name.clone();
            if !name.is_empty() {
                e["name"] = name.into();
            }
            e["sub"] = c.subscription.clone().into();
            if let Some(q) = &c.queue {
                e["queue"] = q.clone().into();
            }
            if c.client.account() != account {
                e["acc"] = c.client.account().into();
            }
            events.push(e);
        }
        for p in &route.peers {
            let mut e = json!({"type": "eg", "ts": now(), "kind": KIND_ROUTER, "cid": p.node.0});
            if let Some(name) = tracer.bus.peer_name(p.node) {
                e["name"] = name.into();
            }
            e["hop"] = p.hop.clone().into();
            events.push(e);
        }
        // Streams capture the publishes made on this node only.
        if matches!(ingress, Ingress::Client(_))
            && let Some(stream) = tracer.bus.stream_capturing(account, subject)
        {
            events.push(json!({"type": "js", "ts": now(), "stream": stream, "subject": subject}));
        }
        let mut event = json!({
            "server": server_info(tracer.node, tracer.tags, tracer.jetstream),
            "request": {"header": self.header, "msgsize": self.size},
        });
        if !route.peers.is_empty() {
            event["hops"] = route.peers.len().into();
        }
        event["events"] = events.into();
        let body = serde_json::to_vec(&event).unwrap_or_default();
        tracer
            .bus
            .publish(&Msg::new(&self.dest, &body).in_account(account));
    }
}

fn ingress_event(ts: &str, ingress: Ingress<'_>, account: &str, subject: &str) -> Value {
    let (kind, cid, name) = match ingress {
        Ingress::Client(c) => (KIND_CLIENT, c.cid, c.meta.lock().name.clone()),
        Ingress::Peer { node, name } => (KIND_ROUTER, node, name.to_string()),
    };
    let mut e = json!({"type": "in", "ts": ts, "kind": kind, "cid": cid});
    if !name.is_empty() {
        e["name"] = name.into();
    }
    e["acc"] = account.into();
    e["subj"] = subject.into();
    e
}

/// The header lines of `hdrs` by name (empty names and values skipped, as nats-server does),
/// or `None` when the block has no `Nats-Trace-Dest` at all (the cheap common case).
fn header_map(hdrs: &[u8]) -> Option<BTreeMap<String, Vec<String>>> {
    if !hdrs.starts_with(b"NATS/1.0") || !contains(hdrs, TRACE_DEST.as_bytes()) {
        return None;
    }
    let text = std::str::from_utf8(hdrs).ok()?;
    let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.split("\r\n").skip(1) {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim_matches(|c| c == ' ' || c == '\t');
        if !k.is_empty() && !v.is_empty() {
            map.entry(k.to_string()).or_default().push(v.to_string());
        }
    }
    Some(map)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_valid_destination_starts_a_trace() {
        let h = b"NATS/1.0\r\nNats-Trace-Dest: t.1\r\nX: a\r\nX: b\r\n\r\n";
        let t = Trace::from_headers(h, 10).expect("traced");
        assert_eq!(t.dest(), "t.1");
        assert!(!t.only());
        assert_eq!(t.header["X"], vec!["a", "b"]);
        let only = b"NATS/1.0\r\nNats-Trace-Dest: t.1\r\nNats-Trace-Only: On\r\n\r\n";
        assert!(Trace::from_headers(only, 0).expect("traced").only());
        for none in [
            &b"NATS/1.0\r\nX: a\r\n\r\n"[..],
            b"NATS/1.0\r\nNats-Trace-Dest: trace disabled\r\n\r\n",
            b"NATS/1.0\r\nNats-Trace-Dest: t.*\r\n\r\n",
            b"NATS/1.0\r\nNats-Trace-Dest-X: t\r\n\r\n",
        ] {
            assert!(Trace::from_headers(none, 0).is_none(), "{none:?}");
        }
        let hop = b"NATS/1.0\r\nNats-Trace-Dest: t\r\nNats-Trace-Hop: 2\r\n\r\n";
        assert_eq!(
            Trace::from_headers(hop, 0).expect("traced").hop.as_deref(),
            Some("2")
        );
    }
}
