//! Cluster membership in one process: `$JS.API.SERVER.REMOVE` of a stopped node moves its
//! stream replicas to a spare node (or drops them when there is none), the meta group shrinks,
//! and the cluster then survives losing one more node as its new size allows; the request's
//! errors are nats-server's.

use std::collections::BTreeSet;

use jetraft_raft::{GroupId, NodeId};
use serde_json::Value;

use super::js_cluster_tests::{assert_ok, must_publish};
use super::{JsCluster, WAIT, eventually};

/// An R3 file stream on `s.>`.
const STREAM_S: &str = r#"{"name":"S","subjects":["s.>"],"num_replicas":3,"storage":"file"}"#;

fn err_code(answer: &Value) -> u64 {
    answer["error"]["err_code"].as_u64().unwrap_or(0)
}

/// The replicas `via` has assigned to stream `S`.
fn assigned(c: &JsCluster, via: NodeId) -> BTreeSet<u64> {
    c.node(via)
        .js
        .meta()
        .read(|m| m.stream("S").map(|s| s.replicas.iter().copied().collect()))
        .unwrap_or_default()
}

/// Publishes `id` to `s.a` through `via` until acknowledged; returns the seq.
async fn publish(c: &JsCluster, via: NodeId, id: &str) -> u64 {
    must_publish(c, via, "s.a", id, id).await
}

/// A stream replica on `gone`, a node that is not the meta leader, stopped before the request.
async fn stopped_replica(c: &mut JsCluster) -> NodeId {
    let meta_leader = c.wait_leader(GroupId::META, &c.ids()).await;
    let gone = assigned(c, meta_leader)
        .into_iter()
        .map(NodeId)
        .find(|r| *r != meta_leader)
        .expect("a replica off the meta leader");
    c.stop(gone).await;
    gone
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_remove_of_a_stopped_node_moves_its_replicas_and_shrinks_the_meta_group() {
    let mut c = JsCluster::start(4).await;
    assert_ok(&c.api(NodeId(1), "STREAM.CREATE.S", STREAM_S).await);
    let group = c.stream_group(NodeId(1), "S").expect("assigned");
    let placed = assigned(&c, NodeId(1));
    let spare = c
        .ids()
        .into_iter()
        .find(|i| !placed.contains(&i.0))
        .expect("spare");
    for i in 1..=5 {
        publish(&c, spare, &format!("m{i}")).await;
    }
    let gone = stopped_replica(&mut c).await;
    let name = c.name(gone).to_string();
    let answer = c
        .api(spare, "SERVER.REMOVE", &format!(r#"{{"peer":"{name}"}}"#))
        .await;
    assert_ok(&answer);
    assert_eq!(
        answer["type"],
        "io.nats.jetstream.api.v1.meta_server_remove_response"
    );
    assert_eq!(answer["success"], true, "{answer}");
    let wanted: BTreeSet<u64> = placed
        .iter()
        .copied()
        .filter(|r| *r != gone.0)
        .chain([spare.0])
        .collect();
    let remaining: BTreeSet<u64> = c.running().iter().map(|n| n.0).collect();
    eventually(
        "the replica moves to the spare and the meta group shrinks",
        || {
            let now = assigned(&c, spare);
            let voters = c.voters(spare, group);
            let meta = c.voters(spare, GroupId::META);
            let on_spare = c.node(spare).js.jsz_stats().messages;
            if now == wanted && voters == wanted && meta == remaining && on_spare == 5 {
                Ok(())
            } else {
                Err(format!(
                    "assigned {now:?}, voters {voters:?}, meta {meta:?}, {on_spare} on the spare"
                ))
            }
        },
    )
    .await;
    // A removed server is no member any more; the errors are nats-server's.
    let again = c
        .api(spare, "SERVER.REMOVE", &format!(r#"{{"peer":"{name}"}}"#))
        .await;
    assert_eq!(err_code(&again), 10044, "{again}");
    assert_eq!(
        again["error"]["description"],
        "server is not a member of the cluster"
    );
    assert_eq!(err_code(&c.api(spare, "SERVER.REMOVE", "").await), 10003);
    assert_eq!(err_code(&c.api(spare, "SERVER.REMOVE", "{}").await), 10003);
    assert_eq!(
        err_code(&c.api(spare, "SERVER.REMOVE", "{nope").await),
        10025
    );
    assert_eq!(
        err_code(&c.api(spare, "SERVER.REMOVE", r#"{"peer":"nobody"}"#).await),
        10044
    );
    assert_eq!(
        err_code(&c.api(spare, "SERVER.REMOVE", r#"{"peer_id":"ffff"}"#).await),
        10044
    );
    // Three voters left: losing one more (not the meta leader's only peer) keeps a quorum.
    assert_eq!(publish(&c, spare, "m6").await, 6);
    let meta_leader = c.wait_leader(GroupId::META, &c.running()).await;
    let next = c
        .running()
        .into_iter()
        .find(|n| *n != meta_leader && *n != spare)
        .expect("a third node");
    c.stop(next).await;
    assert_eq!(publish(&c, spare, "m7").await, 7);
    // Reads too: the leader confirms it leads with the two voters left.
    for seq in 1..=7u64 {
        let answer = c
            .api(spare, "STREAM.MSG.GET.S", &format!(r#"{{"seq":{seq}}}"#))
            .await;
        assert_ok(&answer);
        let data = answer["message"]["data"].as_str().expect("data");
        let payload = crate::jetstream::api::types::base64::decode(data).expect("base64");
        assert_eq!(payload, format!("m{seq}").into_bytes(), "seq {seq}");
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_spare_node_server_remove_drops_the_replica() {
    let mut c = JsCluster::start(3).await;
    assert_ok(&c.api(NodeId(1), "STREAM.CREATE.S", STREAM_S).await);
    let group = c.stream_group(NodeId(1), "S").expect("assigned");
    let via = c.wait_leader(GroupId::META, &c.ids()).await;
    for i in 1..=3 {
        publish(&c, via, &format!("m{i}")).await;
    }
    let gone = stopped_replica(&mut c).await;
    let id = format!("{:x}", gone.0);
    let answer = c
        .api(via, "SERVER.REMOVE", &format!(r#"{{"peer_id":"{id}"}}"#))
        .await;
    assert_eq!(answer["success"], true, "{answer}");
    let left: BTreeSet<u64> = c.running().iter().map(|n| n.0).collect();
    eventually(
        "the stream and the meta group run on the two nodes left",
        || {
            let now = assigned(&c, via);
            let voters = c.voters(via, group);
            let meta = c.voters(via, GroupId::META);
            if now == left && voters == left && meta == left {
                Ok(())
            } else {
                Err(format!(
                    "assigned {now:?}, voters {voters:?}, meta {meta:?}"
                ))
            }
        },
    )
    .await;
    assert_eq!(publish(&c, via, "m4").await, 4);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_meta_leader_can_remove_itself_and_its_r1_stream_moves_with_its_messages() {
    let c = JsCluster::start(4).await;
    // Four R1 streams land on four different nodes (least loaded first).
    for i in 0..4 {
        let body = format!(r#"{{"name":"R{i}","subjects":["r{i}"],"num_replicas":1}}"#);
        assert_ok(
            &c.api(NodeId(1), &format!("STREAM.CREATE.R{i}"), &body)
                .await,
        );
    }
    let leader = c.wait_leader(GroupId::META, &c.ids()).await;
    let mine = (0..4)
        .map(|i| format!("R{i}"))
        .find(|s| {
            c.node(leader)
                .js
                .meta()
                .read(|m| m.stream(s).is_some_and(|a| a.replicas == vec![leader.0]))
        })
        .expect("an R1 stream on the meta leader");
    let subject = mine.to_lowercase();
    let via = c
        .ids()
        .into_iter()
        .find(|n| *n != leader)
        .expect("another node");
    for i in 1..=3 {
        let hdrs = format!("NATS/1.0\r\nNats-Msg-Id: m{i}\r\n\r\n");
        let ack = c
            .client(via)
            .request_with(&subject, Some(hdrs.as_bytes()), b"x", WAIT)
            .await
            .expect("ack")
            .json();
        assert_eq!(ack["seq"], i, "{ack}");
    }
    let answer = c
        .api(
            via,
            "SERVER.REMOVE",
            &format!(r#"{{"peer":"{}"}}"#, c.name(leader)),
        )
        .await;
    assert_eq!(answer["success"], true, "{answer}");
    let rest: Vec<NodeId> = c.ids().into_iter().filter(|n| *n != leader).collect();
    let rest_ids: BTreeSet<u64> = rest.iter().map(|n| n.0).collect();
    let new_leader = c.wait_leader(GroupId::META, &rest).await;
    eventually(
        "the stream moved off and the meta group is the other three",
        || {
            let assigned: Vec<u64> = c
                .node(new_leader)
                .js
                .meta()
                .read(|m| m.stream(&mine).map(|s| s.replicas.clone()))
                .unwrap_or_default();
            let meta = c.voters(new_leader, GroupId::META);
            let Some(group) = c.stream_group(new_leader, &mine) else {
                return Err("no stream".into());
            };
            let voters = c.voters(assigned.first().map_or(new_leader, |a| NodeId(*a)), group);
            let moved = assigned.len() == 1 && assigned[0] != leader.0;
            if moved && meta == rest_ids && voters == assigned.iter().copied().collect() {
                Ok(())
            } else {
                Err(format!(
                    "assigned {assigned:?}, meta {meta:?}, stream voters {voters:?}"
                ))
            }
        },
    )
    .await;
    let info = c.api(via, &format!("STREAM.INFO.{mine}"), "").await;
    assert_eq!(info["state"]["messages"], 3, "{info}");
    let problems = c
        .node(leader)
        .js
        .health(&crate::jetstream::runtime::HealthScope::Meta);
    assert!(
        !problems.is_empty(),
        "the removed node reports itself unhealthy"
    );
    c.shutdown().await;
}
