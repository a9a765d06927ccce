//! Hostile input on the cluster port: forged Raft messages are refused by the gRPC service
//! before they reach openraft, and the node keeps serving; a group whose openraft core dies
//! anyway is reported, not silently lost.
//!
//! The groups run in-process over `MemTransport`; the forged messages go straight to the
//! gRPC service handler of one node (`RaftGrpcService`, no sockets), as a peer's would.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use jetraft_proto::raft as pb;
use jetraft_proto::raft::raft_service_server::RaftService;
use jetraft_raft::Currency;
use jetraft_raft::network::grpc::RaftGrpcService;
use jetraft_raft::{GroupId, NodeId};
use openraft::async_runtime::WatchReceiver;
use support::TestCluster;
use tonic::{Code, Request};

const G: GroupId = GroupId(1);
const OTHER: GroupId = GroupId(2);

fn vote_req(group: GroupId, from: u64, term: u64, last: Option<pb::LogId>) -> pb::VoteRequest {
    pb::VoteRequest {
        group_id: group.0,
        from,
        vote: Some(pb::Vote {
            term,
            node_id: from,
            committed: false,
        }),
        last_log_id: last,
        leadership_transfer: true,
    }
}

fn log_id(term: u64, leader_node: u64, index: u64) -> Option<pb::LogId> {
    Some(pb::LogId {
        term,
        leader_node,
        index,
    })
}

/// Panics unless `r` is an error with `code`.
fn refused<T>(r: Result<T, tonic::Status>, code: Code, what: &str) {
    let err = r.err().unwrap_or_else(|| panic!("{what}: accepted"));
    assert_eq!(err.code(), code, "{what}: {err:?}");
}

fn term_of(c: &TestCluster, node: NodeId, group: GroupId) -> u64 {
    c.node(node)
        .registry
        .raft(group)
        .unwrap()
        .metrics()
        .borrow_watched()
        .current_term
}

/// The forged message (a Vote for the group with term 2^64-1) and its relatives are
/// refused with the right status; the group keeps its leader and term, and keeps committing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_raft_messages_are_refused_and_the_node_keeps_serving() {
    let c = TestCluster::new(3);
    let ids = c.ids();
    c.must_create_group(G, &ids).await;
    let leader = c.wait_for_leader(G, &ids).await;
    c.must_propose(G, &ids, "before").await;
    let target = *ids.iter().find(|n| **n != leader).unwrap();
    let member = *ids.iter().find(|n| **n != leader && **n != target).unwrap();
    let svc = RaftGrpcService::new(target, c.node(target).registry.groups().clone());
    let term = term_of(&c, target, G);

    // Term 2^64-1 from a member, with a log that would win the vote.
    let max = vote_req(G, member.0, u64::MAX, log_id(u64::MAX, member.0, u64::MAX));
    refused(
        svc.vote(Request::new(max)).await,
        Code::InvalidArgument,
        "vote term 2^64-1",
    );
    refused(
        svc.pre_vote(Request::new(max)).await,
        Code::InvalidArgument,
        "pre-vote term 2^64-1",
    );
    // A plausible vote from a node that is not a member, and one campaigning for another node.
    refused(
        svc.vote(Request::new(vote_req(
            G,
            99,
            term + 1,
            log_id(term, leader.0, 1 << 20),
        )))
        .await,
        Code::PermissionDenied,
        "vote from a stranger",
    );
    let mut impostor = vote_req(G, member.0, term + 1, None);
    impostor.vote = Some(pb::Vote {
        term: term + 1,
        node_id: leader.0,
        committed: true,
    });
    refused(
        svc.vote(Request::new(impostor)).await,
        Code::InvalidArgument,
        "vote for another node",
    );
    // AppendEntries claiming to come from the leader: index near overflow, entries with a gap.
    let append = |prev: Option<pb::LogId>, entries: Vec<pb::Entry>| pb::AppendEntriesRequest {
        group_id: G.0,
        from: leader.0,
        vote: Some(pb::Vote {
            term,
            node_id: leader.0,
            committed: true,
        }),
        prev_log_id: prev,
        entries,
        leader_commit: None,
    };
    refused(
        svc.append_entries(Request::new(append(
            log_id(term, leader.0, u64::MAX - 1),
            vec![],
        )))
        .await,
        Code::InvalidArgument,
        "append at index 2^64-2",
    );
    let entry = |index| pb::Entry {
        log_id: log_id(term, leader.0, index),
        payload: Some(pb::entry::Payload::Blank(pb::Blank {})),
    };
    refused(
        svc.append_entries(Request::new(append(
            log_id(term, leader.0, 1),
            vec![entry(2), entry(5)],
        )))
        .await,
        Code::InvalidArgument,
        "append with a gap",
    );
    // A leadership transfer to a node that is not a voter, a quiesce with a huge term.
    refused(
        svc.transfer_leader(Request::new(pb::TransferLeaderRequest {
            group_id: G.0,
            from: leader.0,
            from_leader: Some(pb::Vote {
                term,
                node_id: leader.0,
                committed: true,
            }),
            to: 42,
            last_log_id: None,
        }))
        .await,
        Code::InvalidArgument,
        "transfer to a non-voter",
    );
    refused(
        svc.quiesce(Request::new(pb::QuiesceRequest {
            group_id: G.0,
            from: leader.0,
            term: u64::MAX,
            last_log: None,
        }))
        .await,
        Code::InvalidArgument,
        "quiesce term 2^64-1",
    );
    // A group that does not exist here.
    refused(
        svc.vote(Request::new(vote_req(GroupId(77), member.0, 1, None)))
            .await,
        Code::NotFound,
        "unknown group",
    );

    // Nothing reached openraft: same leader, same term, and the group still commits, also
    // after a few election timeouts (a forged term would have made the target campaign).
    assert_eq!(term_of(&c, target, G), term);
    c.must_propose(G, &ids, "after").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    c.must_propose(G, &ids, "later").await;
    assert_eq!(c.wait_for_leader(G, &ids).await, leader);
    assert_eq!(term_of(&c, target, G), term);
    // Current once it applied what it just received (it may be one entry behind for a moment).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut currency = c.node(target).registry.currency(G).unwrap();
    while !currency.is_current() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        currency = c.node(target).registry.currency(G).unwrap();
    }
    assert!(currency.is_current(), "{currency:?}");
    c.shutdown().await;
}

/// If openraft's core of one group dies anyway (here: the forged vote handed to openraft
/// directly, past the screening, as before the fix), the replica is reported `Stopped`
/// (unhealthy) instead of failing silently, and the node's other groups keep serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_whose_core_panicked_is_reported_stopped_and_the_others_keep_serving() {
    let c = TestCluster::new(3);
    let ids = c.ids();
    c.must_create_group(G, &ids).await;
    c.must_create_group(OTHER, &ids).await;
    let leader = c.wait_for_leader(G, &ids).await;
    c.wait_for_leader(OTHER, &ids).await;
    c.must_propose(G, &ids, "a").await;
    let victim = *ids.iter().find(|n| **n != leader).unwrap();
    let raft = c.node(victim).registry.raft(G).unwrap();
    // Granted (the candidate's log is "longer"): the replica adopts term 2^64-1, and its next
    // election overflows the term inside openraft.
    let forged = jetraft_raft::convert::vote::request_from_pb(vote_req(
        G,
        leader.0,
        u64::MAX,
        log_id(u64::MAX, leader.0, u64::MAX),
    ))
    .unwrap();
    let _ = raft.vote(forged).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if c.node(victim).registry.currency(G).unwrap() == Currency::Stopped {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the replica was never reported stopped: {:?}",
            c.node(victim).registry.currency(G)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The victim node's other group still commits.
    c.must_propose(OTHER, &ids, "other").await;
    c.shutdown().await;
}
