//! `jetraft-raft` is the Raft layer: one openraft instance per stream group plus the meta group,
//! all on one node sharing a transport. It knows nothing about NATS.
//!
//! Map:
//! - [`types`]: the openraft type configuration ([`JetraftConfig`]): `u64` node ids, a
//!   [`PeerNode`] with the cluster address, opaque command/response bytes.
//! - [`sm`]: [`ReplicatedStateMachine`], what meta and stream state machines implement, and its
//!   openraft adapter.
//! - [`snapshot_data`]: [`SnapshotData`], a snapshot's bytes in memory or read lazily from a
//!   point-in-time view of a state machine as the transport sends them; [`snapshot_spool`]:
//!   received snapshots spooled to disk.
//! - [`registry`]: [`GroupRegistry`], the node's groups: create/remove at runtime, propose with a
//!   deadline, membership, leader info.
//! - [`network`]: the [`Transport`](network::Transport) a node shares among its groups:
//!   [`GrpcTransport`](network::grpc::GrpcTransport) with its
//!   [`RaftGrpcService`](network::grpc::RaftGrpcService) between nodes, and
//!   [`MemTransport`](network::mem::MemTransport) with fault knobs for tests.
//! - [`convert`]: openraft types <-> `jetraft.raft` protobuf messages (wire and disk).
//! - [`codec`]: [`ProstCodec`](codec::ProstCodec), the Raft log's on-disk encoding.
//! - [`rocks_log`]: [`RocksLogs`](rocks_log::RocksLogs), each group's RocksDB log over the node's
//!   one database, and deleting it when a group leaves.
//! - [`mem_log`]: an in-memory log store, test support only.
//!
//! # Log stores
//! [`GroupRegistry::create_group`] takes any `openraft::storage::RaftLogStorage<JetraftConfig>`.
//! Nodes use `jetraft_storage::rocks::RaftLogStore<JetraftConfig, ProstCodec>`
//! ([`rocks_log::GroupLogStore`]), which passes openraft's conformance suite with
//! [`sm::StateMachineAdapter`] (`tests/store_suite.rs`, next to [`mem_log::MemLogStore`]) and
//! completes `IOFlushed` only after the WAL sync.
//!
//! Invariants: ids are newtypes at this crate's API ([`NodeId`], [`GroupId`], [`LogIndex`]);
//! every wait on Raft or the network has a deadline; a state machine or storage error stops the
//! group (fail-stop).

use std::fmt;
use std::time::Duration;

pub mod codec;
pub mod convert;
pub mod error;
mod failover;
pub mod health;
pub mod in_flight;
pub mod mem_log;
pub mod network;
pub mod quiesce;
pub mod registry;
pub mod rocks_log;
pub mod rt;
pub mod sm;
pub mod snapshot_data;
mod snapshot_hold;
pub mod snapshot_spool;
mod stopping;
pub mod types;
mod watchdog;

pub use error::RaftError;
pub use health::Currency;
pub use registry::{
    FollowerProgress, GroupRegistry, Groups, LeaderInfo, LeaderWatch, RemovedVoters,
};
pub use sm::{AppliedState, DurabilityBarrier, ReplicatedStateMachine, StateMachineError};
pub use snapshot_data::{SnapshotChunks, SnapshotData, SnapshotSource};
pub use snapshot_spool::SnapshotSpool;
pub use types::{GroupRaft, JetraftConfig, PeerNode};

/// A node's Raft id: random, 64-bit, never reused after data loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u64);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A Raft group on the node. Group 0 is the meta group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupId(pub u64);

impl GroupId {
    /// The cluster-wide metadata group.
    pub const META: GroupId = GroupId(0);
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A position in a group's Raft log (not a stream sequence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogIndex(pub u64);

impl fmt::Display for LogIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Why a timing configuration was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TimingError {
    /// The election timeout range is empty or inverted.
    #[error("election timeout min {min:?} must be below max {max:?}")]
    ElectionRange {
        /// Lower bound given.
        min: Duration,
        /// Upper bound given.
        max: Duration,
    },
    /// Heartbeats would not arrive before followers start elections.
    #[error("heartbeat {heartbeat:?} must be well below the election timeout min {min:?}")]
    HeartbeatTooSlow {
        /// Heartbeat interval given.
        heartbeat: Duration,
        /// Election timeout lower bound given.
        min: Duration,
    },
    /// Proposals would time out immediately.
    #[error("propose timeout must be positive")]
    ZeroProposeTimeout,
}

/// Heartbeat and election timing, sized for busy 2-core machines by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftTiming {
    /// Interval between leader heartbeats.
    pub heartbeat: Duration,
    /// Lower bound of the randomised election timeout.
    pub election_min: Duration,
    /// Upper bound of the randomised election timeout.
    pub election_max: Duration,
    /// Deadline for a proposal, membership change or initialisation to complete.
    pub propose_timeout: Duration,
    /// A group whose leader logged nothing for this long stops its timers on every replica
    /// until something happens ([`quiesce`]); `None` keeps every group ticking. Off by
    /// default: a quiet group relies on the node's link state
    /// ([`GroupRegistry::set_peer_reachable`]) to notice a lost leader, which only a node with
    /// a cluster layer reports.
    pub quiesce_after: Option<Duration>,
}

impl Default for RaftTiming {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_millis(250),
            election_min: Duration::from_millis(1500),
            election_max: Duration::from_millis(3000),
            propose_timeout: Duration::from_secs(5),
            quiesce_after: None,
        }
    }
}

impl RaftTiming {
    /// Timing for in-process test clusters: elections in well under a second, yet slow enough
    /// that a busy 2-core debug build sees no spurious elections. Shared by the raft crate's
    /// tests and the server's in-process JetStream clusters.
    pub fn for_tests() -> Self {
        Self {
            heartbeat: Duration::from_millis(60),
            election_min: Duration::from_millis(400),
            election_max: Duration::from_millis(800),
            propose_timeout: Duration::from_secs(3),
            quiesce_after: None,
        }
    }

    /// Checks that followers hear at least three heartbeats before their earliest election.
    pub fn validate(&self) -> Result<(), TimingError> {
        if self.election_min >= self.election_max {
            return Err(TimingError::ElectionRange {
                min: self.election_min,
                max: self.election_max,
            });
        }
        if self.heartbeat * 3 > self.election_min {
            return Err(TimingError::HeartbeatTooSlow {
                heartbeat: self.heartbeat,
                min: self.election_min,
            });
        }
        if self.propose_timeout.is_zero() {
            return Err(TimingError::ZeroProposeTimeout);
        }
        Ok(())
    }

    /// Validates and converts to the openraft configuration every group on a node shares.
    pub fn to_openraft_config(&self) -> Result<openraft::Config, RaftError> {
        self.validate()?;
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let config = openraft::Config {
            cluster_name: "jetraft".to_string(),
            heartbeat_interval: ms(self.heartbeat),
            election_timeout_min: ms(self.election_min),
            election_timeout_max: ms(self.election_max),
            // A restarted node must not resume as leader from its persisted vote: until a
            // higher vote reaches it, it would answer reads (stream and consumer info) from a
            // state that misses what the others committed meanwhile. It wins an election
            // instead (one election timeout for a single-voter group).
            enable_leader_restore: Some(false),
            // A node cut off from its majority asks before it campaigns (Pre-Vote), so its term
            // does not climb while it is away and it rejoins without deposing the leader.
            enable_pre_vote: Some(true),
            // openraft keeps a ring of per-entry stage timestamps per group for its runtime
            // stats (1,024 entries x 6 stages by default, allocated up front); jetraft never
            // reads them, and a node may host thousands of groups.
            log_stage_capacity: Some(8),
            ..openraft::Config::default()
        };
        config.validate().map_err(|e| RaftError::Config {
            reason: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_timing_is_valid() {
        assert_eq!(RaftTiming::default().validate(), Ok(()));
    }

    #[test]
    fn slow_heartbeat_is_refused() {
        let t = RaftTiming {
            heartbeat: Duration::from_millis(600),
            ..RaftTiming::default()
        };
        assert!(matches!(
            t.validate(),
            Err(TimingError::HeartbeatTooSlow { .. })
        ));
    }

    #[test]
    fn inverted_election_range_is_refused() {
        let t = RaftTiming {
            election_min: Duration::from_secs(3),
            election_max: Duration::from_secs(2),
            ..RaftTiming::default()
        };
        assert!(matches!(
            t.validate(),
            Err(TimingError::ElectionRange { .. })
        ));
    }

    #[test]
    fn default_timing_converts_to_openraft_config() {
        let c = RaftTiming::default().to_openraft_config().unwrap();
        assert_eq!(c.heartbeat_interval, 250);
        assert_eq!(c.election_timeout_min, 1500);
        assert_eq!(c.election_timeout_max, 3000);
    }

    #[test]
    fn zero_propose_timeout_is_refused() {
        let t = RaftTiming {
            propose_timeout: Duration::ZERO,
            ..RaftTiming::default()
        };
        assert_eq!(t.validate(), Err(TimingError::ZeroProposeTimeout));
    }

    #[test]
    fn node_id_displays_as_fixed_width_hex() {
        assert_eq!(NodeId(255).to_string(), "00000000000000ff");
    }
}
