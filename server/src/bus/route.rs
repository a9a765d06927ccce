//! Routing one message: local subscribers, queue groups, internal subscribers and peers.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use jetraft_raft::NodeId;
use rand::Rng;

use super::{Bus, Client, FlushSet, Msg, Namespace, Origin, SubRef, Subscription};
use crate::config::GLOBAL_ACCOUNT;
use crate::protocol::headers;
use crate::router::sublist::SublistError;

impl Bus {
    /// Routes `msg` to every matching subscription (one member per queue group cluster-wide,
    /// preferring a local one) and forwards it once to each peer with interest. Writers to wake
    /// are collected in `flush`. Returns the number of local deliveries plus forwards, so a
    /// request answered only by a remote responder does not get no-responders.
    ///
    /// The message is matched in its account's namespace only; in an account other than `$G`,
    /// what that account shares (imports, service answers) is routed too (`bus::shared`).
    pub fn route(&self, origin: Origin<'_>, msg: &Msg<'_>, flush: &mut FlushSet) -> usize {
        self.route_at(origin, msg, flush, 0)
    }

    /// [`Self::route`] at `depth` crossings between accounts.
    pub(super) fn route_at(
        &self,
        origin: Origin<'_>,
        msg: &Msg<'_>,
        flush: &mut FlushSet,
        depth: u8,
    ) -> usize {
        if msg.account == GLOBAL_ACCOUNT {
            return self.route_in(&self.inner.global, origin, msg, flush);
        }
        let ns = self.namespace(msg.account);
        self.route_in(&ns, origin, msg, flush) + self.route_shared(origin, msg, flush, depth)
    }

    /// Routes `msg` within one namespace.
    fn route_in(
        &self,
        ns: &Namespace,
        origin: Origin<'_>,
        msg: &Msg<'_>,
        flush: &mut FlushSet,
    ) -> usize {
        let result = ns.sublist.match_subject(msg.subject);
        let (from, peer_queues) = match origin {
            Origin::Client { client, echo } => (Some((client, echo)), None),
            Origin::Peer { queues } => (None, Some(queues)),
            Origin::Server => (None, None),
        };
        let skip = |sub: &Subscription| match from {
            Some((c, echo)) => !echo && Arc::ptr_eq(&sub.client, c),
            None => false,
        };
        let mut delivered = 0;
        let mut forwards: Vec<(NodeId, Vec<String>)> = Vec::new();
        for sub in &result.plain {
            match sub {
                SubRef::Local(sub) => {
                    if !skip(sub) && self.deliver(sub, msg, flush) {
                        delivered += 1;
                    }
                }
                SubRef::Remote(node) => {
                    if peer_queues.is_none() {
                        add_forward(&mut forwards, *node, None);
                    }
                }
            }
        }
        for group in &result.queues {
            if let Some(qs) = peer_queues
                && !qs.iter().any(|q| *q == *group.name)
            {
                continue;
            }
            let members = &group.members;
            let n = members.len();
            if n == 0 {
                continue;
            }
            let start = rand::rng().random_range(0..n);
            let mut served = false;
            for i in 0..n {
                let SubRef::Local(sub) = &members[(start + i) % n] else {
                    continue;
                };
                if skip(sub) || sub.client.is_closed() {
                    continue;
                }
                if self.deliver(sub, msg, flush) {
                    delivered += 1;
                    served = true;
                    break;
                }
            }
            if served || peer_queues.is_some() {
                continue;
            }
            let remote = (0..n)
                .map(|i| &members[(start + i) % n])
                .find_map(|m| match m {
                    SubRef::Remote(node) => Some(*node),
                    SubRef::Local(_) => None,
                });
            if let Some(node) = remote {
                add_forward(&mut forwards, node, Some(&group.name));
            }
        }
        let from_peer = peer_queues.is_some();
        // A trace-only message reaches no internal subscriber (tracing reports the stream that
        // would store it without storing it).
        let trace_only = flush.trace.as_ref().is_some_and(|t| t.only);
        delivered += if trace_only {
            0
        } else {
            ns.internal.deliver(
                msg.subject,
                msg.reply,
                msg.hdrs,
                msg.payload,
                from_peer,
                (!from_peer).then_some(&mut flush.paced),
            )
        };
        if delivered > 0 {
            let stats = &self.inner.stats;
            stats
                .out_msgs
                .fetch_add(delivered as u64, Ordering::Relaxed);
            stats
                .out_bytes
                .fetch_add((msg.size() * delivered) as u64, Ordering::Relaxed);
        }
        if let Some(peers) = &self.inner.peers {
            for (node, queues) in forwards {
                let mut wire = msg.to_wire(queues);
                if let Some(trace) = flush.trace.as_mut() {
                    trace.forwarded(node, &mut wire.headers);
                }
                peers.forward(node, wire);
                delivered += 1;
            }
        }
        delivered
    }

    /// Queues `msg` for one local subscription; false when it was not delivered (denied, past
    /// the subscription's max, or the receiver is closed or a slow consumer).
    fn deliver(&self, sub: &Arc<Subscription>, msg: &Msg<'_>, flush: &mut FlushSet) -> bool {
        let client = &sub.client;
        let perms = client.permissions();
        if let Some(p) = &perms
            && p.has_subscribe_deny()
            && p.deliver_denied(msg.shown)
        {
            return false;
        }
        if let Some(trace) = flush.trace.as_mut() {
            trace.clients.push(super::traced::ClientEgress {
                client: client.clone(),
                subscription: sub.subject.to_string(),
                queue: sub.queue.as_deref().map(str::to_string),
            });
            if trace.only {
                return true;
            }
        }
        let max = sub.max.load(Ordering::Relaxed);
        let n = sub.delivered.fetch_add(1, Ordering::Relaxed) + 1;
        if max > 0 && n > max {
            return false;
        }
        let queued = client.queue_msg(
            msg.shown.as_bytes(),
            &sub.sid,
            msg.reply,
            msg.hdrs,
            msg.payload,
        );
        if let Some(pending) = queued {
            flush.record(client, pending);
            if let (Some(reply), Some(p)) = (msg.reply, &perms)
                && p.tracks_responses()
            {
                p.allow_response(&String::from_utf8_lossy(reply), std::time::Instant::now());
            }
        }
        if max > 0 && n == max {
            self.unsubscribe(client, &sub.sid);
        }
        queued.is_some()
    }

    /// Publishes `msg` on behalf of the server (JetStream answers, advisories, deliveries):
    /// routes it like a client publish and wakes the receivers' writers. Returns the number of
    /// deliveries.
    pub fn publish(&self, msg: &Msg<'_>) -> usize {
        let mut flush = FlushSet::default();
        let n = self.publish_into(msg, &mut flush);
        flush.wake_all();
        n
    }

    /// [`Self::publish`] without waking the receivers' writers: they are collected in `flush`,
    /// so a batch of messages (consumer deliveries) wakes each writer once, after the last one,
    /// with [`FlushSet::wake_all`].
    pub fn publish_into(&self, msg: &Msg<'_>, flush: &mut FlushSet) -> usize {
        self.route(Origin::Server, msg, flush)
    }

    /// Sends `msg` straight to `node` over its cluster link (JetStream forwarding); the
    /// receiver routes it to its local subscribers. Returns false without a link.
    pub fn send_to_node(&self, node: NodeId, msg: &Msg<'_>) -> bool {
        let Some(peers) = &self.inner.peers else {
            return false;
        };
        if !peers.has_outbound(node) {
            return false;
        }
        peers.forward(node, msg.to_wire(Vec::new()));
        true
    }

    /// Removes one subscription of `client`.
    pub fn unsubscribe(&self, client: &Client, sid: &Bytes) -> bool {
        let Some(sub) = client.subs.lock().remove(sid) else {
            return false;
        };
        self.remove_subscription(&sub);
        true
    }

    /// Adds a client subscription to the sublist and announces it to peers.
    pub fn add_subscription(&self, sub: &Arc<Subscription>) -> Result<(), SublistError> {
        let queue = sub.queue.as_deref();
        let account = sub.client.account();
        self.namespace(account)
            .sublist
            .insert(&sub.subject, queue, SubRef::Local(sub.clone()))?;
        if let Some(peers) = &self.inner.peers {
            peers.local_subscribed(account, &sub.subject, queue);
        }
        Ok(())
    }

    /// Removes a client subscription from the sublist and announces it to peers.
    pub fn remove_subscription(&self, sub: &Arc<Subscription>) {
        let queue = sub.queue.as_deref();
        let account = sub.client.account();
        if self
            .namespace(account)
            .sublist
            .remove(&sub.subject, queue, &SubRef::Local(sub.clone()))
            && let Some(peers) = &self.inner.peers
        {
            peers.local_unsubscribed(account, &sub.subject, queue);
        }
    }

    /// Removes every subscription of a closed client.
    pub fn remove_client_subscriptions(&self, client: &Client) {
        let subs: Vec<Arc<Subscription>> = client.subs.lock().drain().map(|(_, s)| s).collect();
        for sub in subs {
            self.remove_subscription(&sub);
        }
    }

    /// Sends the no-responders status (503) to the publisher's own subscription matching
    /// `reply`, as nats-server does.
    pub fn send_no_responders(&self, client: &Arc<Client>, subject: &str, reply: &str) {
        let result = self
            .namespace(client.account())
            .sublist
            .match_subject(reply);
        let own = result
            .plain
            .iter()
            .chain(result.queues.iter().flat_map(|g| g.members.iter()))
            .find_map(|s| match s {
                SubRef::Local(s) if Arc::ptr_eq(&s.client, client) => Some(s),
                _ => None,
            });
        if let Some(sub) = own {
            let hdr = headers::status_block(503, None, &[("Nats-Subject", subject)]);
            if client
                .queue_msg(reply.as_bytes(), &sub.sid, None, Some(&hdr), b"")
                .is_some()
            {
                client.wake_writer();
            }
        }
    }
}

/// Adds `queue` (if any) to the forward for `node`, creating it on first use.
fn add_forward(forwards: &mut Vec<(NodeId, Vec<String>)>, node: NodeId, queue: Option<&str>) {
    let idx = match forwards.iter().position(|(n, _)| *n == node) {
        Some(i) => i,
        None => {
            forwards.push((node, Vec::new()));
            forwards.len() - 1
        }
    };
    if let Some(q) = queue {
        forwards[idx].1.push(q.to_string());
    }
}
