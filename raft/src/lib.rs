//! `jetraft-raft` is the Raft layer: it will host one openraft instance per stream group plus the
//! meta group. It knows nothing about NATS.
//!
//! What exists today: the identifiers every layer shares ([`NodeId`], [`GroupId`]) and the
//! validated timing configuration ([`RaftTiming`]). The openraft integration, the multi-raft
//! registry and the transports come with the replication issue.

use std::fmt;
use std::time::Duration;

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
}

impl Default for RaftTiming {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_millis(250),
            election_min: Duration::from_millis(1500),
            election_max: Duration::from_millis(3000),
        }
    }
}

impl RaftTiming {
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
        Ok(())
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
    fn node_id_displays_as_fixed_width_hex() {
        assert_eq!(NodeId(255).to_string(), "00000000000000ff");
    }
}
