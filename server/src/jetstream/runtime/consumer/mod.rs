//! Consumers at run time: one delivery [`engine`] per consumer on the stream leader, started
//! and stopped by the replica's owner task (`owner`) as leadership and the consumer set change
//! ([`JetStream::sync_consumers`]), and the routing of acks and flow-control replies (published on any node) to the engine.
//!
//! - `core`: the sans-IO consumer core: every delivery decision, driven with explicit time.
//! - `engine`: the delivery engine task around the core (mailbox, clock, publishing, proposals).
//! - `deliver`: the bytes a consumer sends.
//! - `api`: the `$JS.API.CONSUMER.*` handlers.
//!
//! Invariants:
//! - Engines run only where the stream group's leader is; the owner task stops them (pull
//!   requests get `409 Leadership Change`) as soon as this node stops leading.
//! - Acks and FC replies are captured on the node where they are published and forwarded to the
//!   stream leader over the cluster link, like API requests.

pub(crate) mod api;
mod core;
mod deadlines;
pub(crate) mod deliver;
pub(crate) mod engine;
mod pacing;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use jetraft_raft::NodeId;
use tokio::sync::mpsc;
use tracing::debug;

use self::core::ConsumerEvent;
use super::replica::LocalStream;
use super::{JetStream, next_msg};
use crate::bus::internal::{InternalMsg, InternalSub};
use crate::jetstream::ack::{AckSubject, parse_ack};
use crate::jetstream::op::ApiOp;
use engine::{Engine, Event};

/// Subject prefix of pull requests (`$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`).
pub(crate) const NEXT_PREFIX: &str = "$JS.API.CONSUMER.MSG.NEXT.";

/// A running engine.
pub(crate) struct EngineHandle {
    /// The engine's mailbox. Not bounded (yet): its senders are the node's one ack/pull routing
    /// loop and the API handlers, which must not wait behind one slow consumer, and dropping an
    /// ack, pull, stop or reconfigure when full would change what clients see. The engine takes
    /// up to 256 events per round, so it only grows while events arrive faster than it delivers.
    tx: mpsc::UnboundedSender<Event>,
}

/// The engines of one stream replica.
#[derive(Default)]
pub(crate) struct Engines {
    running: parking_lot::Mutex<HashMap<String, EngineHandle>>,
}

impl std::fmt::Debug for Engines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engines")
            .field("running", &self.running.lock().len())
            .finish()
    }
}

impl Engines {
    /// Sends `ev` to consumer `name`'s engine; false if none runs here.
    pub(crate) fn send(&self, name: &str, ev: Event) -> bool {
        self.running
            .lock()
            .get(name)
            .is_some_and(|h| h.tx.send(ev).is_ok())
    }

    /// Asks every engine to tell when the acks it received so far are applied
    /// ([`Event::Settled`]); one receiver per engine asked.
    pub(crate) fn settled_all(&self) -> Vec<tokio::sync::oneshot::Receiver<()>> {
        let running = self.running.lock();
        running
            .values()
            .filter_map(|h| {
                let (tx, rx) = tokio::sync::oneshot::channel();
                h.tx.send(Event::Settled(tx)).ok().map(|()| rx)
            })
            .collect()
    }

    /// Stops every engine.
    pub(crate) fn stop_all(&self, deleted: bool) {
        for (_, h) in self.running.lock().drain() {
            let _ = h.tx.send(Event::stop(deleted));
        }
    }
}

impl JetStream {
    /// Starts the engines of consumers this node should run and stops the others.
    pub(crate) fn sync_consumers(self: &Arc<Self>, ls: &Arc<LocalStream>) {
        let leading = self.registry.leader(ls.group()).is_ok_and(|l| l.is_self);
        if !leading || ls.cancel.is_cancelled() {
            ls.engines.stop_all(false);
            return;
        }
        // A set: the retain below looks every running engine up in it (a Vec made each call
        // O(consumers^2): 40% of a core on the leader with 10,000 idle consumers).
        let names: HashSet<String> = ls.sm.lock().consumers().keys().cloned().collect();
        let mut running = ls.engines.running.lock();
        running.retain(|name, h| {
            let keep = names.contains(name) && !h.tx.is_closed();
            if !keep {
                let _ = h.tx.send(Event::stop(true));
            }
            keep
        });
        for name in names {
            if running.contains_key(&name) {
                continue;
            }
            let (tx, rx) = mpsc::unbounded_channel();
            let Some(engine) = Engine::new(
                self.clone(),
                ls.name.clone(),
                name.clone(),
                ls.group(),
                ls.sm.clone(),
                rx,
                ls.changes.subscribe(),
            ) else {
                continue;
            };
            let cancel = ls.cancel.child_token();
            self.tasks.spawn(async move { engine.run(cancel).await });
            running.insert(name, EngineHandle { tx });
        }
    }

    /// Handles acks and flow-control replies published on this node.
    pub(crate) async fn consumer_ack_loop(
        self: Arc<Self>,
        mut sub: InternalSub,
        handoff: Arc<super::settle::Handoff>,
    ) {
        loop {
            let Some(msg) = next_msg(&mut sub, &self.cancel).await else {
                break;
            };
            self.on_ack_loop_msg(msg);
            // Handed to the engine (or forwarded): a CONSUMER.INFO after it sees it (`settle`).
            handoff.taken.finish(1);
        }
    }

    /// One message of [`Self::consumer_ack_loop`]: a pull request, an ack or an FC reply.
    fn on_ack_loop_msg(self: &Arc<Self>, msg: InternalMsg) {
        if msg.subject.starts_with(NEXT_PREFIX) {
            if self.pull_to_local_engine(&msg) {
                self.api_total.fetch_add(1, Ordering::Relaxed);
            } else {
                let js = self.clone();
                self.tasks.spawn(async move { js.handle_api(msg, 0).await });
            }
        } else {
            self.on_ack_msg(msg, 0);
        }
    }

    /// Hands a pull request (`CONSUMER.MSG.NEXT`) to its consumer's engine when that runs on
    /// this node, at once, so that it comes after the acks received before it; false when it
    /// must take the API path (another node leads, the engine is starting, ...).
    pub(crate) fn pull_to_local_engine(&self, msg: &InternalMsg) -> bool {
        let Some(ApiOp::ConsumerNext(stream, name)) =
            ApiOp::parse(&msg.subject).map(|op| op.keyed(&msg.account))
        else {
            return false;
        };
        let Some(reply) = &msg.reply else {
            // Nothing to answer, as on the API path.
            return true;
        };
        self.local_stream(&stream).is_some_and(|ls| {
            ls.engines.send(
                &name,
                Event::Core(ConsumerEvent::Pull {
                    reply: reply.clone(),
                    body: msg.payload.clone(),
                }),
            )
        })
    }

    /// Routes an ack (`$JS.ACK...`) or FC reply (`$JS.FC...`) to the consumer's engine here,
    /// or forwards it to the stream leader.
    pub(crate) fn on_ack_msg(&self, msg: InternalMsg, hops: u32) {
        let (stream, consumer, event) = if msg.subject.starts_with("$JS.FC.") {
            let mut t = msg.subject.split('.');
            let (Some(s), Some(c)) = (t.nth(2), t.next()) else {
                return;
            };
            (
                s.to_string(),
                c.to_string(),
                Event::Core(ConsumerEvent::FlowControl {
                    subject: msg.subject.clone(),
                }),
            )
        } else {
            let Some(ack) = AckSubject::parse(&msg.subject) else {
                return;
            };
            let event = Event::Core(ConsumerEvent::Ack {
                stream_seq: ack.stream_seq,
                kind: parse_ack(&msg.payload),
                reply: msg.reply.clone(),
            });
            (ack.stream, ack.consumer, event)
        };
        // Ack subjects name the stream; the account they were published in picks it.
        let stream = crate::jetstream::account::stream_key(&msg.account, &stream);
        let Some(ls) = self.local_stream(&stream) else {
            let first = self
                .meta
                .read(|m| m.stream(&stream).and_then(|s| s.replicas.first().copied()));
            if let Some(node) = first {
                self.forward_to(NodeId(node), hops, &msg);
            }
            return;
        };
        if ls.engines.send(&consumer, event) {
            return;
        }
        match self.registry.leader(ls.group()).ok().and_then(|l| l.leader) {
            Some(l) if l != self.node => {
                self.forward_to(l, hops, &msg);
            }
            _ => {
                debug!(stream = %stream, consumer = %consumer, "ack for a consumer not running here")
            }
        }
    }
}
