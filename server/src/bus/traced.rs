//! What routing records about a traced message (message tracing, ADR-41): the deliveries it
//! made (or, for a trace-only message, would have made), for the trace event the publisher's
//! side assembles (`crate::trace`).
//!
//! A [`RouteTrace`] rides in the [`FlushSet`](super::FlushSet) of the one message being routed;
//! routing fills it and the caller takes it back.

use std::sync::Arc;

use jetraft_raft::NodeId;

use super::Client;
use crate::protocol::headers::set_header;

/// The header that numbers a traced message's hops between servers.
pub const TRACE_HOP: &str = "Nats-Trace-Hop";

/// One local client delivery of a traced message.
#[derive(Debug, Clone)]
pub struct ClientEgress {
    /// The receiving connection.
    pub client: Arc<Client>,
    /// The subscription's subject.
    pub subscription: String,
    /// Its queue group, if any.
    pub queue: Option<String>,
}

/// One forward of a traced message to a peer.
#[derive(Debug, Clone)]
pub struct PeerEgress {
    /// The peer.
    pub node: NodeId,
    /// The hop id given to the forwarded copy (`Nats-Trace-Hop`).
    pub hop: String,
}

/// Deliveries of one traced message, in routing order.
#[derive(Debug, Default)]
pub struct RouteTrace {
    /// Trace only: record the deliveries without making them (forwards still go out, marked
    /// trace-only by the message's own headers, so the peers trace their part).
    pub only: bool,
    /// The hop id this message arrived with (from a peer), prefixing the ones given here.
    pub hop: Option<String>,
    /// Local client deliveries.
    pub clients: Vec<ClientEgress>,
    /// Forwards to peers.
    pub peers: Vec<PeerEgress>,
}

impl RouteTrace {
    /// A recorder for a message routed for real (`only` false) or traced only.
    pub fn new(only: bool, hop: Option<String>) -> Self {
        Self {
            only,
            hop,
            ..Self::default()
        }
    }

    /// Records a forward to `node` and marks the copy with its hop id (`headers` is the
    /// copy's header block).
    pub fn forwarded(&mut self, node: NodeId, hdrs: &mut bytes::Bytes) {
        let n = self.peers.len() + 1;
        let hop = match &self.hop {
            Some(h) => format!("{h}.{n}"),
            None => n.to_string(),
        };
        *hdrs = set_header(hdrs, TRACE_HOP, &hop).into();
        self.peers.push(PeerEgress { node, hop });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwards_are_numbered_and_marked_with_their_hop() {
        let mut t = RouteTrace::new(false, None);
        let mut h = bytes::Bytes::from_static(b"NATS/1.0\r\nNats-Trace-Dest: t\r\n\r\n");
        t.forwarded(NodeId(7), &mut h);
        assert_eq!(
            &h[..],
            b"NATS/1.0\r\nNats-Trace-Dest: t\r\nNats-Trace-Hop: 1\r\n\r\n"
        );
        let mut again = h.clone();
        t.forwarded(NodeId(8), &mut again);
        assert_eq!(
            &again[..],
            b"NATS/1.0\r\nNats-Trace-Dest: t\r\nNats-Trace-Hop: 2\r\n\r\n"
        );
        let mut nested = RouteTrace::new(true, Some("1".into()));
        nested.forwarded(NodeId(9), &mut h);
        assert_eq!(nested.peers[0].hop, "1.1");
    }
}
