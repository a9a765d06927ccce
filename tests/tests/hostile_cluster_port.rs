//! Hostile input on a running node's cluster port: forged Raft messages (the one: a
//! `Vote` for the meta group with term 2^64-1, which made openraft panic and left the node
//! unhealthy) are refused, and the node stays healthy and keeps serving JetStream.
//!
//! jetraft only: the messages are jetraft's Raft gRPC protocol.

use std::time::Duration;

use jetraft_proto::raft as pb;
use jetraft_proto::raft::raft_service_client::RaftServiceClient;
use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::jsapi::{api, publish_acked};
use jetraft_tests::harness::{ServerKind, ServerProcess, connect, server_kind, wait_for};
use serde_json::json;
use tonic::Code;

/// The meta group's id.
const META: u64 = 0;

/// The cluster address and Raft node id `srv` logged when it started listening for routes.
fn cluster_identity(srv: &ServerProcess) -> (String, u64) {
    let log = srv.log();
    let line = log
        .lines()
        .find(|l| l.contains("listening for route connections"))
        .expect("route listener line in the log");
    let field = |key: &str| {
        line.split_whitespace()
            .find_map(|t| t.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {line}"))
            .to_string()
    };
    let id = u64::from_str_radix(&field("node_id="), 16).expect("hex node id");
    (field("addr="), id)
}

fn vote(group: u64, from: u64, term: u64, last: Option<pb::LogId>) -> pb::VoteRequest {
    pb::VoteRequest {
        group_id: group,
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

fn expect_refused<T: std::fmt::Debug>(r: Result<T, tonic::Status>, code: Code, what: &str) {
    match r {
        Ok(v) => panic!("{what}: answered {v:?}"),
        Err(s) => assert_eq!(s.code(), code, "{what}: {s:?}"),
    }
}

#[tokio::test]
async fn forged_raft_messages_on_the_cluster_port_are_refused_and_the_node_keeps_serving() {
    if server_kind() != ServerKind::Jetraft {
        return;
    }
    let cluster = Cluster::start(3, "hostile").await.expect("cluster");
    let nc = connect(cluster.node(0)).await;
    let r = api(
        &nc,
        "$JS.API.STREAM.CREATE.HOSTILE",
        json!({"name": "HOSTILE", "subjects": ["hostile.>"], "num_replicas": 3}),
    )
    .await;
    assert!(r["error"].is_null(), "{r}");
    publish_acked(&nc, "hostile.a", "before", "x").await;

    let (addr, _target) = cluster_identity(cluster.node(0));
    let (_, member) = cluster_identity(cluster.node(1));
    let mut client = tokio::time::timeout(
        Duration::from_secs(10),
        RaftServiceClient::connect(format!("http://{addr}")),
    )
    .await
    .expect("connect in time")
    .expect("connect to the cluster port");
    let max_log = Some(pb::LogId {
        term: u64::MAX,
        leader_node: member,
        index: u64::MAX,
    });
    // The message, claiming to come from a member, and the same as a pre-vote.
    expect_refused(
        client.vote(vote(META, member, u64::MAX, max_log)).await,
        Code::InvalidArgument,
        "meta vote with term 2^64-1",
    );
    expect_refused(
        client.pre_vote(vote(META, member, u64::MAX, max_log)).await,
        Code::InvalidArgument,
        "meta pre-vote with term 2^64-1",
    );
    // A plausible vote from a node that is not a member.
    expect_refused(
        client.vote(vote(META, 12_345, 2, None)).await,
        Code::PermissionDenied,
        "meta vote from a stranger",
    );
    // AppendEntries near the end of the index space, claiming the member leads.
    expect_refused(
        client
            .append_entries(pb::AppendEntriesRequest {
                group_id: META,
                from: member,
                vote: Some(pb::Vote {
                    term: 1,
                    node_id: member,
                    committed: true,
                }),
                prev_log_id: Some(pb::LogId {
                    term: 1,
                    leader_node: member,
                    index: u64::MAX - 1,
                }),
                entries: vec![],
                leader_commit: None,
            })
            .await,
        Code::InvalidArgument,
        "append at index 2^64-2",
    );

    // Longer than the largest election timeout (3 s): a forged term that got through would
    // have made the node campaign by now (and panic).
    tokio::time::sleep(Duration::from_secs(4)).await;
    let node = cluster.node(0);
    wait_for("n1 healthy", Duration::from_secs(30), || async {
        let resp = node.http_get("/healthz").await.ok()?;
        (resp.status == 200).then_some(())
    })
    .await;
    publish_acked(&nc, "hostile.a", "after", "x").await;
    let info = api(&nc, "$JS.API.STREAM.INFO.HOSTILE", serde_json::Value::Null).await;
    assert_eq!(info["state"]["messages"], 2, "{info}");
    cluster.assert_clean_logs();
}
