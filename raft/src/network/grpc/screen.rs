//! Screening of what arrives on the cluster port before it reaches openraft.
//!
//! openraft trusts its peers: a vote with term 2^64-1 is accepted, and the next election
//! overflows the term and panics the group's core (`engine_impl.rs`, `term.next()`); entries
//! that are not consecutive trip its assertions. Anyone who can reach the cluster port can send
//! such a message, so every inbound Raft message is checked here first, against what this
//! replica knows of its group ([`Local`]):
//! - the sender (`from`) is a member of the group (voter or learner) in the membership this
//!   replica has, and is not this node; a replica that has no membership yet (a brand-new group
//!   waiting for its leader), or one that is not in its own membership (a new learner replaying
//!   a history whose members changed), cannot tell, and accepts any sender;
//! - the vote's node is the sender (a node speaks for itself only);
//! - terms are below [`MAX_TERM`] and at most [`MAX_TERM_JUMP`] above the local term; indexes
//!   below [`MAX_INDEX`]; no log id is after the sender's vote (a higher term, or the same term
//!   but another leader);
//! - a snapshot beyond what this replica committed is at a greater index (openraft panics on
//!   one at the same or a lower index: it contradicts committed entries);
//! - AppendEntries carry at most [`MAX_ENTRIES`] entries, at consecutive indexes right after
//!   `prev_log_id`, with terms that never go down;
//! - a leadership transfer names a voter.
//!
//! A refused message gets `InvalidArgument` (or `PermissionDenied` for a sender that is not a
//! member); the service logs refusals rate-limited. Message sizes are bounded by tonic's
//! decoding limit ([`super::GrpcSettings::max_message_size`]) and snapshots by
//! [`super::MAX_SNAPSHOT_BYTES`].

use std::collections::BTreeSet;

use jetraft_proto::raft as pb;
use openraft::async_runtime::WatchReceiver;

use crate::types::{GroupRaft, GroupSnapshot, GroupVote};

/// Terms at or above this are refused: openraft adds to terms (`term + 1` on every election),
/// and no real cluster gets anywhere near 2^63 elections.
pub const MAX_TERM: u64 = 1 << 63;
/// How far a sender's term may be above this replica's: a node cut off for years campaigning
/// once per election timeout gains about 10^8 terms; 2^32 leaves ample room and still refuses
/// a jump that would bring the term near overflow.
pub const MAX_TERM_JUMP: u64 = 1 << 32;
/// Log indexes at or above this are refused (openraft adds to indexes too).
pub const MAX_INDEX: u64 = 1 << 63;
/// Most entries one AppendEntries may carry (openraft sends a few hundred at most).
pub const MAX_ENTRIES: usize = 1 << 16;

/// Why an inbound message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The sender is not a member of the group here, or is this node.
    #[error("node {from} is not a member of group {group}")]
    NotMember {
        /// The group the message is for.
        group: u64,
        /// Who claims to have sent it.
        from: u64,
    },
    /// A field is out of range or inconsistent.
    #[error("{0}")]
    Invalid(String),
}

impl From<Refusal> for tonic::Status {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::NotMember { .. } => tonic::Status::permission_denied(r.to_string()),
            Refusal::Invalid(_) => tonic::Status::invalid_argument(r.to_string()),
        }
    }
}

fn invalid(what: impl Into<String>) -> Refusal {
    Refusal::Invalid(what.into())
}

/// What this replica knows of its group: enough to judge a message.
#[derive(Debug, Clone)]
pub struct Local {
    /// The group.
    pub group: u64,
    /// This node.
    pub node: u64,
    /// The replica's current term.
    pub term: u64,
    /// Voters and learners of the membership the replica has; empty when it has none yet.
    pub members: BTreeSet<u64>,
    /// Voters of that membership.
    pub voters: BTreeSet<u64>,
    /// The replica's committed log id as (term, leader node, index), if any.
    pub committed: Option<(u64, u64, u64)>,
}

impl Local {
    /// What `raft` (this node's replica of `group`) knows now.
    pub fn of(group: u64, node: u64, raft: &GroupRaft) -> Self {
        let rx = raft.metrics();
        let m = rx.borrow_watched();
        let membership = m.membership_config.membership();
        Self {
            group,
            node,
            term: m.current_term,
            members: membership.nodes().map(|(id, _)| *id).collect(),
            voters: membership.voter_ids().collect(),
            committed: m
                .local_committed
                .as_ref()
                .map(|l| (l.leader_id.term, l.leader_id.node_id, l.index)),
        }
    }

    /// The sender is a member (when membership is known) and not this node. A replica that is
    /// not a member of the membership it has is still replaying the group's history (a node
    /// added to a group whose members changed since: its log starts with an older membership
    /// that names neither it nor the current leader), and cannot tell either.
    pub fn check_sender(&self, from: u64) -> Result<(), Refusal> {
        let replaying = !self.members.contains(&self.node);
        let known = self.members.is_empty() || replaying || self.members.contains(&from);
        if from == self.node || !known {
            return Err(Refusal::NotMember {
                group: self.group,
                from,
            });
        }
        Ok(())
    }

    /// A term is in range and not too far above ours.
    pub fn check_term(&self, what: &str, term: u64) -> Result<(), Refusal> {
        if term >= MAX_TERM {
            return Err(invalid(format!("{what} term {term} is out of range")));
        }
        if term > self.term.saturating_add(MAX_TERM_JUMP) {
            return Err(invalid(format!(
                "{what} term {term} is too far above the local term {}",
                self.term
            )));
        }
        Ok(())
    }

    /// The sender's vote: in range, and the sender's own; returns its (term, node).
    fn check_vote(&self, from: u64, vote: Option<&pb::Vote>) -> Result<(u64, u64), Refusal> {
        let vote = vote.ok_or_else(|| invalid("missing vote"))?;
        self.check_term("vote", vote.term)?;
        if vote.node_id != from {
            return Err(invalid(format!(
                "vote of node {} sent by node {from}",
                vote.node_id
            )));
        }
        Ok((vote.term, vote.node_id))
    }

    /// A log id is in range and not after the sender's vote `(term, node)`: not from a later
    /// term, nor from the vote's term under another leader (`node` `None`: not checked).
    fn check_log_id(
        &self,
        what: &str,
        id: Option<&pb::LogId>,
        (vote_term, vote_node): (u64, Option<u64>),
    ) -> Result<(), Refusal> {
        let Some(id) = id else {
            return Ok(());
        };
        if id.index >= MAX_INDEX {
            return Err(invalid(format!(
                "{what} index {} is out of range",
                id.index
            )));
        }
        if id.term > vote_term {
            return Err(invalid(format!(
                "{what} term {} is above the sender's vote term {vote_term}",
                id.term
            )));
        }
        if let Some(node) = vote_node
            && id.term == vote_term
            && id.leader_node != node
        {
            return Err(invalid(format!(
                "{what} of leader {} in term {vote_term}, which node {node} leads",
                id.leader_node
            )));
        }
        Ok(())
    }

    /// A vote or pre-vote request.
    pub fn check_vote_request(&self, r: &pb::VoteRequest) -> Result<(), Refusal> {
        self.check_sender(r.from)?;
        let (term, node) = self.check_vote(r.from, r.vote.as_ref())?;
        self.check_log_id("last_log_id", r.last_log_id.as_ref(), (term, Some(node)))
    }

    /// An AppendEntries request (single or one of a stream).
    pub fn check_append(&self, r: &pb::AppendEntriesRequest) -> Result<(), Refusal> {
        self.check_sender(r.from)?;
        let (term, node) = self.check_vote(r.from, r.vote.as_ref())?;
        let vote = (term, Some(node));
        self.check_log_id("prev_log_id", r.prev_log_id.as_ref(), vote)?;
        self.check_log_id("leader_commit", r.leader_commit.as_ref(), vote)?;
        if r.entries.len() > MAX_ENTRIES {
            return Err(invalid(format!(
                "{} entries in one request (at most {MAX_ENTRIES})",
                r.entries.len()
            )));
        }
        let (mut index, mut last_term) = match &r.prev_log_id {
            Some(p) => (p.index.saturating_add(1), p.term),
            None => (0, 0),
        };
        for e in &r.entries {
            let id = e
                .log_id
                .as_ref()
                .ok_or_else(|| invalid("entry without log id"))?;
            self.check_log_id("entry", Some(id), vote)?;
            if id.index != index {
                return Err(invalid(format!(
                    "entry at index {} where {index} was expected",
                    id.index
                )));
            }
            if id.term < last_term {
                return Err(invalid(format!(
                    "entry term {} below the previous term {last_term}",
                    id.term
                )));
            }
            index = index.saturating_add(1);
            last_term = id.term;
        }
        Ok(())
    }

    /// A leadership transfer request.
    pub fn check_transfer(&self, r: &pb::TransferLeaderRequest) -> Result<(), Refusal> {
        self.check_sender(r.from)?;
        let (term, node) = self.check_vote(r.from, r.from_leader.as_ref())?;
        self.check_log_id("last_log_id", r.last_log_id.as_ref(), (term, Some(node)))?;
        if !self.voters.is_empty() && !self.voters.contains(&r.to) {
            return Err(invalid(format!("transfer to node {}, not a voter", r.to)));
        }
        Ok(())
    }

    /// A quiesce request.
    pub fn check_quiesce(&self, r: &pb::QuiesceRequest) -> Result<(), Refusal> {
        self.check_sender(r.from)?;
        self.check_term("quiesce", r.term)?;
        self.check_log_id("last_log", r.last_log.as_ref(), (r.term, None))
    }

    /// A whole snapshot, once assembled.
    pub fn check_snapshot(
        &self,
        from: u64,
        vote: &GroupVote,
        snap: &GroupSnapshot,
    ) -> Result<(), Refusal> {
        self.check_sender(from)?;
        let pb_vote = crate::convert::vote::to_pb(vote);
        let (term, node) = self.check_vote(from, Some(&pb_vote))?;
        let Some(last) = snap.meta.last_log_id.as_ref() else {
            return Ok(());
        };
        let last = (last.leader_id.term, last.leader_id.node_id, last.index);
        let pb_last = pb::LogId {
            term: last.0,
            leader_node: last.1,
            index: last.2,
        };
        self.check_log_id("snapshot last_log_id", Some(&pb_last), (term, Some(node)))?;
        if let Some(committed) = self.committed
            && last > committed
            && last.2 <= committed.2
        {
            return Err(invalid(format!(
                "snapshot up to {last:?} contradicts the committed log id {committed:?}"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> Local {
        Local {
            group: 7,
            node: 1,
            term: 5,
            members: [1, 2, 3, 4].into(),
            voters: [1, 2, 3].into(),
            committed: Some((5, 2, 9)),
        }
    }

    fn log_id(term: u64, index: u64) -> Option<pb::LogId> {
        Some(pb::LogId {
            term,
            leader_node: 2,
            index,
        })
    }

    fn vote(term: u64, node_id: u64) -> Option<pb::Vote> {
        Some(pb::Vote {
            term,
            node_id,
            committed: false,
        })
    }

    fn vote_req(from: u64, term: u64) -> pb::VoteRequest {
        pb::VoteRequest {
            group_id: 7,
            from,
            vote: vote(term, from),
            last_log_id: log_id(term, 10),
            leadership_transfer: false,
        }
    }

    fn entry(term: u64, index: u64) -> pb::Entry {
        pb::Entry {
            log_id: log_id(term, index),
            payload: Some(pb::entry::Payload::Normal(b"x".to_vec().into())),
        }
    }

    fn append(entries: Vec<pb::Entry>) -> pb::AppendEntriesRequest {
        pb::AppendEntriesRequest {
            group_id: 7,
            from: 2,
            vote: vote(6, 2),
            prev_log_id: log_id(5, 9),
            entries,
            leader_commit: log_id(5, 9),
        }
    }

    #[test]
    fn an_ordinary_vote_and_append_pass() {
        let l = local();
        assert_eq!(l.check_vote_request(&vote_req(2, 6)), Ok(()));
        assert_eq!(
            l.check_append(&append(vec![entry(5, 10), entry(6, 11)])),
            Ok(())
        );
        // A learner may be sent to and may answer; a heartbeat has no entries.
        assert_eq!(l.check_append(&append(vec![])), Ok(()));
    }

    #[test]
    fn a_replica_outside_its_own_membership_accepts_any_sender() {
        let mut l = local();
        assert!(matches!(l.check_sender(9), Err(Refusal::NotMember { .. })));
        // Node 1 joined after the members changed: its log so far names only node 3.
        l.members = [3].into();
        l.voters = [3].into();
        assert_eq!(l.check_sender(9), Ok(()));
        assert!(matches!(l.check_sender(1), Err(Refusal::NotMember { .. })));
    }

    #[test]
    fn terms_near_overflow_or_far_ahead_are_refused() {
        let l = local();
        for term in [u64::MAX, MAX_TERM, 5 + MAX_TERM_JUMP + 1] {
            let r = l.check_vote_request(&vote_req(2, term));
            assert!(matches!(r, Err(Refusal::Invalid(_))), "term {term}: {r:?}");
        }
        assert_eq!(
            l.check_vote_request(&vote_req(2, 5 + MAX_TERM_JUMP)),
            Ok(())
        );
    }

    #[test]
    fn strangers_and_impostors_are_refused() {
        let l = local();
        assert!(matches!(
            l.check_vote_request(&vote_req(9, 6)),
            Err(Refusal::NotMember { from: 9, .. })
        ));
        // Our own id from outside.
        assert!(matches!(
            l.check_vote_request(&vote_req(1, 6)),
            Err(Refusal::NotMember { .. })
        ));
        // Node 2 campaigning for node 3.
        let mut r = vote_req(2, 6);
        r.vote = vote(6, 3);
        assert!(matches!(l.check_vote_request(&r), Err(Refusal::Invalid(_))));
        // No membership yet: anyone may speak.
        let fresh = Local {
            members: BTreeSet::new(),
            voters: BTreeSet::new(),
            ..local()
        };
        let mut stranger = vote_req(9, 6);
        stranger.last_log_id = log_id(5, 10);
        assert_eq!(fresh.check_vote_request(&stranger), Ok(()));
    }

    #[test]
    fn log_ids_out_of_range_or_out_of_order_are_refused() {
        let l = local();
        let mut r = vote_req(2, 6);
        r.last_log_id = log_id(6, u64::MAX);
        assert!(l.check_vote_request(&r).is_err());
        r.last_log_id = log_id(7, 3);
        assert!(l.check_vote_request(&r).is_err(), "log term above the vote");
        r.last_log_id = Some(pb::LogId {
            term: 6,
            leader_node: 3,
            index: 3,
        });
        assert!(
            l.check_vote_request(&r).is_err(),
            "log of the vote's term by another leader"
        );
        // A gap, a repeat, a term going down, an index near overflow, no log id.
        for entries in [
            vec![entry(5, 11)],
            vec![entry(5, 10), entry(5, 10)],
            vec![entry(6, 10), entry(5, 11)],
            vec![entry(4, 10)],
            vec![pb::Entry {
                log_id: None,
                payload: None,
            }],
        ] {
            assert!(
                l.check_append(&append(entries.clone())).is_err(),
                "{entries:?}"
            );
        }
        let mut far = append(vec![]);
        far.prev_log_id = log_id(5, MAX_INDEX);
        assert!(l.check_append(&far).is_err());
        let mut many = append((0..=MAX_ENTRIES as u64).map(|i| entry(6, 10 + i)).collect());
        assert!(l.check_append(&many).is_err());
        many.entries.truncate(MAX_ENTRIES);
        assert_eq!(l.check_append(&many), Ok(()));
    }

    fn snapshot(term: u64, leader_node: u64, index: u64) -> GroupSnapshot {
        let meta = crate::convert::snapshot::meta_from_pb(pb::SnapshotMeta {
            last_log_id: Some(pb::LogId {
                term,
                leader_node,
                index,
            }),
            last_membership: Some(pb::StoredMembership {
                log_id: None,
                membership: Some(pb::Membership {
                    configs: vec![pb::VoterSet { ids: vec![1, 2, 3] }],
                    nodes: (1..=3)
                        .map(|id| pb::Member {
                            id,
                            addr: format!("n{id}:7"),
                        })
                        .collect(),
                }),
            }),
        })
        .unwrap();
        GroupSnapshot {
            meta,
            snapshot: crate::types::SnapshotData::new(),
        }
    }

    #[test]
    fn snapshots_after_the_vote_or_contradicting_the_commit_are_refused() {
        let l = local(); // committed (5, 2, 9)
        let vote = crate::convert::vote::from_pb(pb::Vote {
            term: 6,
            node_id: 2,
            committed: true,
        });
        assert_eq!(l.check_snapshot(2, &vote, &snapshot(6, 2, 20)), Ok(()));
        assert_eq!(
            l.check_snapshot(2, &vote, &snapshot(5, 2, 9)),
            Ok(()),
            "the commit itself"
        );
        assert!(
            l.check_snapshot(2, &vote, &snapshot(7, 2, 20)).is_err(),
            "later term"
        );
        assert!(
            l.check_snapshot(2, &vote, &snapshot(6, 3, 20)).is_err(),
            "other leader"
        );
        // Beyond the commit (a later leader) but not beyond its index: contradicts it.
        assert!(
            l.check_snapshot(2, &vote, &snapshot(6, 2, 9)).is_err(),
            "same index"
        );
        assert!(
            l.check_snapshot(2, &vote, &snapshot(6, 2, 4)).is_err(),
            "lower index"
        );
        assert!(
            l.check_snapshot(9, &vote, &snapshot(6, 2, 20)).is_err(),
            "stranger"
        );
    }

    #[test]
    fn transfers_to_non_voters_and_bad_quiesce_terms_are_refused() {
        let l = local();
        let t = |to| pb::TransferLeaderRequest {
            group_id: 7,
            from: 2,
            from_leader: vote(6, 2),
            to,
            last_log_id: log_id(6, 10),
        };
        assert_eq!(l.check_transfer(&t(1)), Ok(()));
        assert!(l.check_transfer(&t(4)).is_err(), "learner");
        assert!(l.check_transfer(&t(9)).is_err(), "stranger");
        let q = |term| pb::QuiesceRequest {
            group_id: 7,
            from: 2,
            term,
            last_log: log_id(term.min(5), 3),
        };
        assert_eq!(l.check_quiesce(&q(5)), Ok(()));
        assert!(l.check_quiesce(&q(u64::MAX)).is_err());
    }
}
