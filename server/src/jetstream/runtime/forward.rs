//! Forwarding a request or publish to the node that owns it.
//!
//! A forwarded message keeps its reply subject, headers and payload; its subject becomes
//! `$JSC.F.<node>.<hops>.<original subject>`. The owner answers the original reply subject
//! directly (the answer reaches the client through normal cross-node routing). `hops` bounds
//! re-forwarding while leadership moves.

use std::sync::Arc;

use jetraft_raft::NodeId;
use tracing::debug;

use super::{JetStream, next_msg};
use crate::bus::Msg;
use crate::bus::internal::{InternalMsg, InternalSub};

/// Prefix of forwarded subjects.
const PREFIX: &str = "$JSC.F.";
/// A message is forwarded at most this many times.
const MAX_HOPS: u32 = 3;

/// The internal subscription pattern for messages forwarded to `node`.
pub(super) fn inbox_pattern(node: NodeId) -> String {
    format!("{PREFIX}{}.>", node.0)
}

/// Splits a forwarded subject into (hops, original subject).
fn parse(subject: &str) -> Option<(u32, &str)> {
    let rest = subject.strip_prefix(PREFIX)?;
    let (_node, rest) = rest.split_once('.')?;
    let (hops, original) = rest.split_once('.')?;
    Some((hops.parse().ok()?, original))
}

impl JetStream {
    /// Sends `msg` (whose subject is the original one) to `node`; `hops` is how often it was
    /// forwarded already. Returns false when it cannot be sent (the caller answers or drops).
    pub(super) fn forward_to(&self, node: NodeId, hops: u32, msg: &InternalMsg) -> bool {
        if node == self.node || hops >= MAX_HOPS {
            return false;
        }
        let subject = format!("{PREFIX}{}.{}.{}", node.0, hops + 1, msg.subject);
        // Sent in the request's account: the owner takes it from that account's inbox.
        let out = Msg::new(&subject, &msg.payload)
            .reply_str(msg.reply.as_deref())
            .headers(msg.hdrs.as_deref())
            .in_account(&msg.account);
        self.bus.send_to_node(node, &out)
    }

    /// Handles messages other nodes forwarded here. Publishes waiting one after another for the
    /// same stream (with the same hop count) are proposed as one batch, in order, like local
    /// captures: forwarded publishes keep their sequence.
    pub(super) async fn forward_loop(self: Arc<Self>, mut sub: InternalSub) {
        let mut batch = PublishBatch::default();
        loop {
            let msg = match sub.rx.try_recv() {
                Ok(msg) if batch.len() < super::publish::BATCH_MAX_PUBLISHES => msg,
                Ok(msg) => {
                    self.propose(&mut batch).await;
                    msg
                }
                Err(_) => {
                    self.propose(&mut batch).await;
                    let Some(msg) = next_msg(&mut sub, &self.cancel).await else {
                        break;
                    };
                    msg
                }
            };
            let Some((hops, original)) = parse(&msg.subject) else {
                continue;
            };
            let inner = InternalMsg {
                subject: original.to_string(),
                ..msg
            };
            debug!(subject = %inner.subject, hops, "forwarded message");
            let publish = !(super::remote::is_answer(&inner.subject)
                || inner.subject == super::api_stats::COUNTS_SUBJECT
                || inner.subject.starts_with("$JS.ACK.")
                || inner.subject.starts_with("$JS.FC.")
                || inner.subject.starts_with(crate::jetstream::op::API_PREFIX));
            if publish {
                let Some((stream, _)) = self.stream_for_subject(&inner.account, &inner.subject)
                else {
                    continue;
                };
                if !batch.fits(&stream, hops) {
                    self.propose(&mut batch).await;
                }
                batch.push(stream, hops, inner);
                continue;
            }
            // Anything else keeps its place after the publishes before it.
            self.propose(&mut batch).await;
            if self.deliver_answer(&inner.subject, inner.payload.clone()) {
                continue;
            }
            if inner.subject.starts_with("$JS.ACK.") || inner.subject.starts_with("$JS.FC.") {
                self.on_ack_msg(inner, hops);
            } else if inner.subject == super::api_stats::COUNTS_SUBJECT {
                self.answer_api_counts(&inner);
            } else if self.pull_to_local_engine(&inner) {
                // A pull request taken in order behind the acks forwarded before it.
            } else {
                let js = self.clone();
                self.tasks
                    .spawn(async move { js.handle_api(inner, hops).await });
            }
        }
    }

    /// Proposes the forwarded publishes gathered so far (if any) and empties `batch`.
    async fn propose(self: &Arc<Self>, batch: &mut PublishBatch) {
        if let Some((stream, hops, msgs)) = batch.take() {
            self.on_captured(Some(stream), msgs, hops).await;
        }
    }
}

/// Forwarded publishes to one stream with one hop count, in arrival order.
#[derive(Default)]
struct PublishBatch {
    /// Stream and hop count of `msgs`.
    key: Option<(String, u32)>,
    /// The publishes.
    msgs: Vec<InternalMsg>,
    /// Subject, header and payload bytes in `msgs`.
    bytes: usize,
}

impl PublishBatch {
    fn len(&self) -> usize {
        self.msgs.len()
    }

    /// Whether a publish to `stream` with `hops` may join (an empty batch takes anything).
    fn fits(&self, stream: &str, hops: u32) -> bool {
        match &self.key {
            None => true,
            Some((s, h)) => {
                s == stream && *h == hops && self.bytes < super::publish::BATCH_MAX_BYTES
            }
        }
    }

    fn push(&mut self, stream: String, hops: u32, msg: InternalMsg) {
        self.bytes += super::publish::msg_bytes(&msg);
        self.key.get_or_insert((stream, hops));
        self.msgs.push(msg);
    }

    fn take(&mut self) -> Option<(String, u32, Vec<InternalMsg>)> {
        let (stream, hops) = self.key.take()?;
        self.bytes = 0;
        Some((stream, hops, std::mem::take(&mut self.msgs)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_subjects_round_trip() {
        assert_eq!(
            parse("$JSC.F.42.1.$JS.API.STREAM.INFO.S"),
            Some((1, "$JS.API.STREAM.INFO.S"))
        );
        assert_eq!(parse("$JSC.F.42.2.orders.eu"), Some((2, "orders.eu")));
        assert_eq!(parse("$JSC.F.42"), None);
        assert_eq!(parse("$JSC.F.42.x.orders"), None);
        assert_eq!(inbox_pattern(NodeId(7)), "$JSC.F.7.>");
    }
}
