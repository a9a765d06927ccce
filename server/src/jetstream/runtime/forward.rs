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
use crate::internal::{InternalMsg, InternalSub};

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
        self.server.send_to_node(
            node.0,
            &subject,
            msg.reply.as_deref(),
            msg.hdrs.as_deref(),
            &msg.payload,
        )
    }

    /// Handles messages other nodes forwarded here.
    pub(super) async fn forward_loop(self: Arc<Self>, mut sub: InternalSub) {
        loop {
            let Some(msg) = next_msg(&mut sub, &self.cancel).await else {
                break;
            };
            let Some((hops, original)) = parse(&msg.subject) else {
                continue;
            };
            let inner = InternalMsg {
                subject: original.to_string(),
                ..msg
            };
            debug!(subject = %inner.subject, hops, "forwarded message");
            if self.deliver_answer(&inner.subject, inner.payload.clone()) {
                continue;
            }
            if inner.subject.starts_with("$JS.ACK.") || inner.subject.starts_with("$JS.FC.") {
                self.on_ack_msg(inner, hops);
            } else if inner.subject.starts_with(crate::jetstream::op::API_PREFIX) {
                let js = self.clone();
                tokio::spawn(async move { js.handle_api(inner, hops).await });
            } else {
                // In order, like local captures: forwarded publishes keep their sequence.
                self.on_captured(None, inner, hops).await;
            }
        }
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
