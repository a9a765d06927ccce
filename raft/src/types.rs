//! The openraft type configuration shared by every jetraft Raft group (meta and streams).
//!
//! One configuration serves all groups: a command is opaque bytes ([`Command`]) and so is its
//! response ([`Response`]); what the bytes mean is the business of the group's
//! [`ReplicatedStateMachine`](crate::ReplicatedStateMachine). Keeping the log payload opaque lets a
//! single log store, a single transport and a single registry carry every group.
//!
//! Invariants:
//! - openraft's node id is the raw `u64` of [`NodeId`](crate::NodeId); conversions happen at this
//!   crate's public API, never inside openraft.
//! - A [`PeerNode`] carries only the peer's cluster (gRPC) address; it is stored in membership
//!   entries, so changing its shape is an on-disk change.

use std::fmt;

use bytes::Bytes;

openraft::declare_raft_types!(
    /// openraft type configuration for every jetraft group.
    pub JetraftConfig:
        D = Command,
        R = Response,
        NodeId = u64,
        Node = PeerNode,
        AsyncRuntime = crate::rt::JetraftRuntime,
);

/// A [`openraft::Raft`] handle for one jetraft group, with the bytes state machine adapter.
pub type GroupRaft = openraft::Raft<JetraftConfig, crate::sm::StateMachineAdapter>;

/// Snapshot payload moved between replicas: the state machine's own encoding, opaque here,
/// in memory or produced lazily (see [`crate::snapshot_data`]).
pub use crate::snapshot_data::SnapshotData;

/// A snapshot of a group as openraft sees it (meta + opaque bytes).
pub type GroupSnapshot = openraft::type_config::alias::SnapshotOf<JetraftConfig, SnapshotData>;

/// A log entry of a jetraft group.
pub type GroupEntry = openraft::type_config::alias::EntryOf<JetraftConfig>;

/// A log id (leader id + index) of a jetraft group.
pub type GroupLogId = openraft::type_config::alias::LogIdOf<JetraftConfig>;

/// A vote of a jetraft group.
pub type GroupVote = openraft::type_config::alias::VoteOf<JetraftConfig>;

/// A group's membership as of the log id that set it.
pub type GroupMembership = openraft::type_config::alias::StoredMembershipOf<JetraftConfig>;

/// A peer as recorded in group membership: where its cluster listener is.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct PeerNode {
    /// Cluster (node-to-node gRPC) address, e.g. `10.0.0.2:6222`; the transport dials it.
    pub addr: String,
}

impl PeerNode {
    /// A peer reachable at `addr`.
    pub fn new(addr: impl Into<String>) -> Self {
        Self { addr: addr.into() }
    }
}

impl fmt::Display for PeerNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.addr)
    }
}

/// An opaque command proposed to a group; only its state machine interprets it.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Command(pub Bytes);

impl fmt::Display for Command {
    /// Commands are logged by size only: payloads may be large or sensitive.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Command({} bytes)", self.0.len())
    }
}

/// The state machine's answer to one applied command, opaque here.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Response(pub Bytes);

impl fmt::Display for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Response({} bytes)", self.0.len())
    }
}

/// What one group's Raft reports about itself.
pub type GroupMetrics = openraft::RaftMetrics<JetraftConfig>;
