//! The stream state machine under a real one-node openraft group (in-memory log and transport):
//! proposals come back with the state machine's exact answers.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use jetraft_raft::mem_log::MemLogStore;
use jetraft_raft::network::mem::MemNetwork;
use jetraft_raft::{GroupId, GroupRegistry, NodeId, PeerNode, RaftTiming};
use jetraft_storage::mem::MemStreamStore;
use jetraft_storage::stream::StreamUid;

use super::headers::block;
use super::{ServerIdentity, StreamStateMachine, command};
use crate::jetstream::api::types::{StreamConfig, decode};
use crate::jetstream::api::validate::normalize;

#[tokio::test]
async fn proposals_to_a_stream_group_answer_pub_acks() {
    let node = NodeId(1);
    let group = GroupId(7);
    let net = MemNetwork::new(3);
    let timing = RaftTiming {
        heartbeat: Duration::from_millis(60),
        election_min: Duration::from_millis(400),
        election_max: Duration::from_millis(800),
        propose_timeout: Duration::from_secs(5),
        quiesce_after: None,
    };
    let registry = GroupRegistry::new(node, net.transport(node), timing).unwrap();
    net.register(node, registry.groups().clone());

    let mut cfg: StreamConfig = decode(br#"{"name":"KV","subjects":["kv.>"]}"#).unwrap();
    normalize(&mut cfg);
    let server = ServerIdentity {
        version: "2.15.1".into(),
        api_level: 5,
        domain: None,
    };
    let store = Box::new(MemStreamStore::new(StreamUid(1)));
    let sm = StreamStateMachine::open(store, cfg, 1, server).unwrap();
    registry
        .create_group(group, MemLogStore::new(), Box::new(sm))
        .await
        .unwrap();
    let members = BTreeMap::from([(node, PeerNode::new("mem://node-1"))]);
    registry.initialize(group, members).await.unwrap();
    let mut leader = false;
    for _ in 0..400 {
        if registry.leader(group).unwrap().is_self {
            leader = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(leader, "no leader within 8 s");

    let create = |ts: u64| {
        command::append(
            "kv.k",
            Bytes::from(block(&[("Nats-Expected-Last-Subject-Sequence", "0")])),
            Bytes::from_static(b"v"),
            ts,
        )
    };
    let (a, b) = tokio::join!(
        registry.propose(group, create(10)),
        registry.propose(group, create(11))
    );
    let mut answers = [a.unwrap(), b.unwrap()].map(|r| String::from_utf8(r.to_vec()).unwrap());
    answers.sort();
    assert_eq!(answers[1], r#"{"stream":"KV","seq":1}"#);
    assert!(
        answers[0].contains("wrong last sequence: 1"),
        "{}",
        answers[0]
    );

    let purge = registry
        .propose(group, command::purge("", 0, 0))
        .await
        .unwrap();
    assert_eq!(
        &purge[..],
        br#"{"type":"io.nats.jetstream.api.v1.stream_purge_response","success":true,"purged":1}"#
    );
    registry.shutdown().await;
}
