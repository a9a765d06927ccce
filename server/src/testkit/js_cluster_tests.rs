//! JetStream clusters in one process ([`JsCluster`]): placement, forwarding from any node,
//! stepdown, leader loss without losing acknowledged messages, consumer failover, node restart,
//! meta leader loss, Raft calls lost at random (three nodes) and a replica moved by
//! STREAM.PEER.REMOVE (four nodes).

use std::collections::BTreeSet;
use std::time::Duration;

use jetraft_raft::{GroupId, NodeId};
use serde_json::Value;

use super::{JsCluster, TestClient, TestMsg, WAIT, eventually};
use crate::jetstream::ack::AckSubject;
use crate::jetstream::api::types::base64;

/// An R3 file stream on `s.>`.
const STREAM_S: &str = r#"{"name":"S","subjects":["s.>"],"num_replicas":3,"storage":"file"}"#;

pub(super) fn n(id: u64) -> NodeId {
    NodeId(id)
}

/// The nodes of `c` other than `but`.
pub(super) fn others(c: &JsCluster, but: &[NodeId]) -> Vec<NodeId> {
    c.ids().into_iter().filter(|i| !but.contains(i)).collect()
}

pub(super) fn assert_ok(answer: &Value) {
    assert!(answer.get("error").is_none(), "API error: {answer}");
}

/// A cluster of three with stream `S` created through node 1; returns its group and leader.
async fn cluster_with_stream() -> (JsCluster, GroupId, NodeId) {
    let c = JsCluster::start(3).await;
    assert_ok(&c.api(n(1), "STREAM.CREATE.S", STREAM_S).await);
    let group = c.stream_group(n(1), "S").expect("stream in the meta state");
    let leader = c.wait_leader(group, &c.ids()).await;
    (c, group, leader)
}

/// Publishes `payload` to `subject` through `via` with `Nats-Msg-Id: id` until it is
/// acknowledged (a retry after a lost answer is deduplicated, so the message is stored once);
/// returns the PubAck's sequence.
pub(super) async fn must_publish(
    c: &JsCluster,
    via: NodeId,
    subject: &str,
    id: &str,
    payload: &str,
) -> u64 {
    let hdrs = format!("NATS/1.0\r\nNats-Msg-Id: {id}\r\n\r\n");
    let client = c.client(via);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let answer = client
            .request_with(
                subject,
                Some(hdrs.as_bytes()),
                payload.as_bytes(),
                Duration::from_secs(2),
            )
            .await;
        let last = match answer.map(|m| m.json()) {
            Some(ack) if ack.get("error").is_none() => {
                assert_eq!(ack["stream"], "S", "{ack}");
                return ack["seq"].as_u64().expect("seq");
            }
            Some(err) => err.to_string(),
            None => "no answer".to_string(),
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "publish {id} through {via} not acknowledged within {WAIT:?}: {last}"
        );
        // An error comes back at once (no leader yet): poll, do not spin.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Messages stored in node `id`'s replicas (one stream per test).
pub(super) fn stored_on(c: &JsCluster, id: NodeId) -> u64 {
    c.node(id).js.jsz_stats().messages
}

/// Waits until every running node's replica holds `count` messages.
async fn wait_stored_everywhere(c: &JsCluster, count: u64) {
    eventually(&format!("{count} messages on every replica"), || {
        let held: Vec<(NodeId, u64)> = c
            .running()
            .into_iter()
            .map(|id| (id, stored_on(c, id)))
            .collect();
        if held.iter().all(|(_, m)| *m == count) {
            Ok(())
        } else {
            Err(format!("{held:?}"))
        }
    })
    .await;
}

/// Reads message `seq` of `S` through `via` and returns its payload.
pub(super) async fn get_payload(c: &JsCluster, via: NodeId, seq: u64) -> String {
    let answer = c
        .api(via, "STREAM.MSG.GET.S", &format!(r#"{{"seq":{seq}}}"#))
        .await;
    assert_ok(&answer);
    let data = answer["message"]["data"].as_str().expect("data");
    String::from_utf8(base64::decode(data).expect("base64")).expect("utf-8")
}

/// Waits until a leader of `group` other than `old` is agreed on by every node in `among`.
async fn wait_new_leader(c: &JsCluster, group: GroupId, among: &[NodeId], old: NodeId) -> NodeId {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let leader = c.wait_leader(group, among).await;
        if leader != old {
            return leader;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "group {group}: {old} still leads"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends one pull request for `batch` messages of `S`/`C` through `client` and collects what
/// comes back until `batch` messages arrived or a status message (or `within`) ends it; the
/// second item says what ended it early.
pub(super) async fn fetch(
    client: &TestClient,
    batch: usize,
    within: Duration,
) -> (Vec<TestMsg>, String) {
    let (inbox, sid) = client.subscribe_new_inbox();
    let expires = u64::try_from(within.as_nanos()).unwrap_or(u64::MAX);
    let body = format!(r#"{{"batch":{batch},"expires":{expires}}}"#);
    client.publish(
        "$JS.API.CONSUMER.MSG.NEXT.S.C",
        Some(&inbox),
        body.as_bytes(),
    );
    let deadline = tokio::time::Instant::now() + within + Duration::from_millis(500);
    let mut got = Vec::new();
    while got.len() < batch {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match client.next_for(&sid, left).await {
            Some(m) if m.status().is_some() => {
                let status = String::from_utf8_lossy(m.headers.as_deref().unwrap_or_default());
                return (got, status.trim().to_string());
            }
            Some(m) => got.push(m),
            None => return (got, "nothing more before the deadline".to_string()),
        }
    }
    (got, String::new())
}

/// The delivery's ack subject, parsed.
pub(super) fn ack_of(m: &TestMsg) -> AckSubject {
    AckSubject::parse(m.reply.as_deref().expect("ack reply")).expect("ack subject")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_create_through_a_follower_places_an_r3_stream_on_every_node() {
    let c = JsCluster::start(3).await;
    let all = c.ids();
    let meta_leader = c.wait_leader(GroupId::META, &all).await;
    for id in &all {
        assert_eq!(
            c.voters(*id, GroupId::META),
            BTreeSet::from([1, 2, 3]),
            "meta voters seen by {id}"
        );
    }
    // Through a node that does not lead the meta group: the create is forwarded to it.
    let via = others(&c, &[meta_leader])[0];
    let answer = c.api(via, "STREAM.CREATE.S", STREAM_S).await;
    assert_ok(&answer);
    assert_eq!(
        answer["type"], "io.nats.jetstream.api.v1.stream_create_response",
        "{answer}"
    );
    assert_eq!(answer["config"]["name"], "S");
    assert_eq!(answer["config"]["num_replicas"], 3);
    let group = c.stream_group(via, "S").expect("assigned");
    for id in &all {
        let replicas = c
            .node(*id)
            .js
            .meta()
            .read(|m| m.stream("S").map(|s| s.replicas.clone()))
            .expect("every node knows the assignment");
        assert_eq!(
            replicas.iter().copied().collect::<BTreeSet<u64>>(),
            BTreeSet::from([1, 2, 3])
        );
    }
    eventually("the stream group runs on every node with 3 voters", || {
        for id in &all {
            let voters = c.voters(*id, group);
            if voters != BTreeSet::from([1, 2, 3]) {
                return Err(format!("{id} sees voters {voters:?}"));
            }
        }
        Ok(())
    })
    .await;
    let leader = c.wait_leader(group, &all).await;
    assert!(all.contains(&leader));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_through_a_follower_is_forwarded_and_acknowledged() {
    let (c, _group, leader) = cluster_with_stream().await;
    let via = others(&c, &[leader])[0];
    let client = c.client(via);
    for i in 1..=5u64 {
        let ack = client
            .request("s.a", format!("m{i}").as_bytes(), WAIT)
            .await
            .unwrap_or_else(|| panic!("no PubAck for message {i}"))
            .json();
        assert_eq!(ack, serde_json::json!({"stream": "S", "seq": i}));
    }
    wait_stored_everywhere(&c, 5).await;
    assert_eq!(get_payload(&c, via, 3).await, "m3");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_info_answers_the_same_through_every_node() {
    let (c, _group, leader) = cluster_with_stream().await;
    for i in 1..=3 {
        must_publish(&c, leader, "s.x", &format!("x{i}"), "x").await;
    }
    let followers: BTreeSet<String> = others(&c, &[leader])
        .into_iter()
        .map(|id| c.name(id).to_string())
        .collect();
    for id in c.ids() {
        let info = c.api(id, "STREAM.INFO.S", "").await;
        assert_ok(&info);
        assert_eq!(info["config"]["name"], "S", "through {id}: {info}");
        assert_eq!(info["state"]["messages"], 3, "through {id}: {info}");
        assert_eq!(info["state"]["last_seq"], 3, "through {id}: {info}");
        assert_eq!(
            info["cluster"]["leader"],
            c.name(leader),
            "through {id}: {info}"
        );
        let replicas: BTreeSet<String> = info["cluster"]["replicas"]
            .as_array()
            .expect("replicas")
            .iter()
            .map(|r| r["name"].as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(replicas, followers, "through {id}: {info}");
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_leader_stepdown_moves_leadership() {
    let (c, group, old) = cluster_with_stream().await;
    let via = others(&c, &[old])[0];
    let answer = c.api(via, "STREAM.LEADER.STEPDOWN.S", "").await;
    assert_ok(&answer);
    assert_eq!(answer["success"], true, "{answer}");
    let new = wait_new_leader(&c, group, &c.ids(), old).await;
    assert_ne!(new, old);
    // The old leader now forwards publishes to the new one.
    assert_eq!(must_publish(&c, old, "s.a", "after", "after").await, 1);
    wait_stored_everywhere(&c, 1).await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_stream_leader_is_replaced_and_no_acknowledged_message_is_lost() {
    let (c, group, old) = cluster_with_stream().await;
    let majority = others(&c, &[old]);
    for i in 1..=5u64 {
        let seq = must_publish(&c, majority[0], "s.a", &format!("a{i}"), &format!("a{i}")).await;
        assert_eq!(seq, i);
    }
    c.isolate(old);
    let new = wait_new_leader(&c, group, &majority, old).await;
    assert!(majority.contains(&new));
    for i in 6..=10u64 {
        let via = majority[usize::from(i % 2 == 0)];
        let seq = must_publish(&c, via, "s.b", &format!("b{i}"), &format!("b{i}")).await;
        assert_eq!(seq, i, "acknowledged sequence of b{i}");
    }
    c.heal();
    c.wait_leader(group, &c.ids()).await;
    wait_stored_everywhere(&c, 10).await;
    let info = c.api(old, "STREAM.INFO.S", "").await;
    assert_eq!(info["state"]["messages"], 10, "{info}");
    for seq in 1..=10u64 {
        let want = if seq <= 5 {
            format!("a{seq}")
        } else {
            format!("b{seq}")
        };
        assert_eq!(get_payload(&c, old, seq).await, want, "message {seq}");
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_pull_consumer_continues_on_the_new_leader_without_redelivering_acked_messages() {
    let (c, group, old) = cluster_with_stream().await;
    let majority = others(&c, &[old]);
    for i in 1..=10u64 {
        must_publish(&c, old, "s.a", &format!("m{i}"), &format!("m{i}")).await;
    }
    let consumer = r#"{"stream_name":"S","config":{"durable_name":"C","ack_policy":"explicit"}}"#;
    assert_ok(
        &c.api(majority[0], "CONSUMER.DURABLE.CREATE.S.C", consumer)
            .await,
    );

    // Through a follower: take the first five and acknowledge them (synchronously).
    let client = c.client(majority[0]);
    let (first, ended) = fetch(&client, 5, Duration::from_secs(3)).await;
    let seqs: Vec<u64> = first.iter().map(|m| ack_of(m).stream_seq).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5], "{ended}");
    // AckSync: each ack is answered once the batch holding it is committed, so it can no
    // longer be undone by a leader change (a plain ack may be lost with the leader, as in
    // nats-server, and the message then comes back after its ack wait).
    for m in &first {
        let ack = m.reply.as_deref().expect("reply");
        assert!(
            client.request(ack, b"+ACK", WAIT).await.is_some(),
            "no AckSync reply for {ack}"
        );
    }
    let info = c.api(majority[0], "CONSUMER.INFO.S.C", "").await;
    assert_eq!(info["ack_floor"]["stream_seq"], 5, "{info}");
    assert_eq!(info["num_ack_pending"], 0, "{info}");

    // Cut the leader off link by link (the same as isolating it, through `partition`).
    for other in &majority {
        c.partition(old, *other);
    }
    let new = wait_new_leader(&c, group, &majority, old).await;
    assert!(majority.contains(&new));
    let client = c.client(majority[1]);
    let mut rest = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while rest.len() < 5 {
        for m in fetch(&client, 5, Duration::from_secs(1)).await.0 {
            let ack = ack_of(&m);
            assert!(
                ack.stream_seq > 5,
                "acknowledged message {} delivered again",
                ack.stream_seq
            );
            rest.insert(ack.stream_seq);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new leader delivered only {rest:?}"
        );
    }
    assert_eq!(rest, BTreeSet::from([6, 7, 8, 9, 10]));
    c.heal();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_catches_up_after_a_restart() {
    let (mut c, group, leader) = cluster_with_stream().await;
    let meta_leader = c.wait_leader(GroupId::META, &c.ids()).await;
    for i in 1..=3u64 {
        must_publish(&c, leader, "s.a", &format!("m{i}"), &format!("m{i}")).await;
    }
    wait_stored_everywhere(&c, 3).await;
    // A follower of the stream, and of the meta group when there is a choice.
    let candidates = others(&c, &[leader]);
    let down = candidates
        .iter()
        .copied()
        .find(|id| *id != meta_leader)
        .unwrap_or(candidates[0]);
    c.stop(down).await;
    let up = others(&c, &[down]);
    for i in 4..=8u64 {
        let seq = must_publish(&c, up[0], "s.a", &format!("m{i}"), &format!("m{i}")).await;
        assert_eq!(seq, i);
    }
    wait_stored_everywhere(&c, 8).await;
    c.restart(down).await;
    wait_stored_everywhere(&c, 8).await;
    c.wait_leader(group, &c.ids()).await;
    assert_eq!(get_payload(&c, down, 8).await, "m8");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_meta_leader_elects_another_and_the_api_keeps_working() {
    let mut c = JsCluster::start(3).await;
    let old = c.wait_leader(GroupId::META, &c.ids()).await;
    c.stop(old).await;
    let up = others(&c, &[old]);
    let new = wait_new_leader(&c, GroupId::META, &up, old).await;
    assert!(up.contains(&new));
    // Stream creation needs the meta leader: through the node that does not lead.
    let via = others(&c, &[old, new])[0];
    assert_ok(&c.api(via, "STREAM.CREATE.S", STREAM_S).await);
    let group = c.stream_group(via, "S").expect("assigned");
    c.wait_leader(group, &up).await;
    for i in 1..=2u64 {
        let seq = must_publish(&c, via, "s.a", &format!("m{i}"), &format!("m{i}")).await;
        assert_eq!(seq, i);
    }
    // The old meta leader comes back as a follower and learns what happened without it.
    c.restart(old).await;
    c.wait_leader(GroupId::META, &c.ids()).await;
    eventually("the restarted node learns of the stream", || {
        c.stream_group(old, "S")
            .ok_or_else(|| "no stream yet".to_string())
    })
    .await;
    wait_stored_everywhere(&c, 2).await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_peer_is_replaced_by_the_spare_node_which_catches_up() {
    let c = JsCluster::start(4).await;
    assert_ok(&c.api(n(1), "STREAM.CREATE.S", STREAM_S).await);
    let group = c.stream_group(n(1), "S").expect("assigned");
    let replicas: BTreeSet<u64> = c
        .node(n(1))
        .js
        .meta()
        .read(|m| m.stream("S").map(|s| s.replicas.iter().copied().collect()))
        .expect("assignment");
    assert_eq!(replicas.len(), 3);
    let placed: Vec<NodeId> = replicas.iter().map(|r| NodeId(*r)).collect();
    let spare = others(&c, &placed)[0];
    let leader = c.wait_leader(group, &placed).await;
    for i in 1..=5u64 {
        must_publish(&c, spare, "s.a", &format!("m{i}"), &format!("m{i}")).await;
    }
    // Move a follower's replica away, through the spare node.
    let removed = others(&c, &[leader, spare])[0];
    let answer = c
        .api(
            spare,
            "STREAM.PEER.REMOVE.S",
            &format!(r#"{{"peer":"{}"}}"#, c.name(removed)),
        )
        .await;
    assert_ok(&answer);
    assert_eq!(answer["success"], true, "{answer}");
    let wanted: BTreeSet<u64> = replicas
        .iter()
        .copied()
        .filter(|r| *r != removed.0)
        .chain([spare.0])
        .collect();
    eventually("the spare node replaces the removed one", || {
        let assigned: BTreeSet<u64> = c
            .node(leader)
            .js
            .meta()
            .read(|m| m.stream("S").map(|s| s.replicas.iter().copied().collect()))
            .unwrap_or_default();
        let voters = c.voters(leader, group);
        let on_spare = stored_on(&c, spare);
        let removed_streams = c.node(removed).js.jsz_stats().streams;
        if assigned == wanted && voters == wanted && on_spare == 5 && removed_streams == 0 {
            Ok(())
        } else {
            Err(format!(
                "assigned {assigned:?}, voters {voters:?}, {on_spare} messages on the spare, \
                 {removed_streams} streams left on the removed node"
            ))
        }
    })
    .await;
    let leader = c.wait_leader(group, &[leader, spare]).await;
    assert_eq!(
        must_publish(&c, removed, "s.a", "after", "after").await,
        6,
        "a publish through the removed node still reaches the stream"
    );
    assert_eq!(get_payload(&c, spare, 6).await, "after");
    assert!(wanted.contains(&leader.0));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_lossy_raft_network_every_acknowledged_message_is_stored_once_in_order() {
    let (c, _group, leader) = cluster_with_stream().await;
    let via = others(&c, &[leader])[0];
    // One Raft call in ten is lost (from a seeded RNG, but the order of the calls varies from
    // run to run); the message links stay reliable, and a publish whose answer was lost is
    // retried under the same Nats-Msg-Id.
    c.net().set_drop_probability(0.1);
    let mut acked = Vec::new();
    for i in 1..=20u64 {
        let id = format!("m{i}");
        acked.push((must_publish(&c, via, "s.a", &id, &id).await, id));
    }
    c.net().set_drop_probability(0.0);
    let seqs: Vec<u64> = acked.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (1..=20).collect::<Vec<u64>>(), "acked sequences");
    wait_stored_everywhere(&c, 20).await;
    for (seq, id) in &acked {
        assert_eq!(&get_payload(&c, via, *seq).await, id);
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_age_expiry_continues_on_the_new_leader_after_a_stepdown() {
    let c = JsCluster::start(3).await;
    let cfg =
        r#"{"name":"S","subjects":["s.>"],"num_replicas":3,"storage":"file","max_age":500000000}"#;
    assert_ok(&c.api(n(1), "STREAM.CREATE.S", cfg).await);
    let group = c.stream_group(n(1), "S").expect("stream in the meta state");
    let old = c.wait_leader(group, &c.ids()).await;
    for i in 1..=3u64 {
        must_publish(&c, n(1), "s.a", &format!("a{i}"), "x").await;
    }
    // The leader's owner task expires them (half a second old) on every replica.
    wait_stored_everywhere(&c, 0).await;
    assert_ok(&c.api(old, "STREAM.LEADER.STEPDOWN.S", "").await);
    let new = wait_new_leader(&c, group, &c.ids(), old).await;
    for i in 4..=6u64 {
        must_publish(&c, new, "s.a", &format!("a{i}"), "x").await;
    }
    // The new leader's owner task took over expiry; the old one's stopped proposing.
    wait_stored_everywhere(&c, 0).await;
    let info = c.api(new, "STREAM.INFO.S", "").await;
    assert_eq!(info["state"]["last_seq"], 6, "{info}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_keeps_copying_after_its_leader_moves() {
    let (c, _, _) = cluster_with_stream().await;
    let mirror = r#"{"name":"M","mirror":{"name":"S"},"num_replicas":3,"storage":"file"}"#;
    assert_ok(&c.api(n(2), "STREAM.CREATE.M", mirror).await);
    let group = c.stream_group(n(1), "M").expect("mirror in the meta state");
    let old = c.wait_leader(group, &c.ids()).await;
    for i in 1..=3u64 {
        must_publish(&c, n(3), "s.a", &format!("a{i}"), "x").await;
    }
    // Every node holds S's 3 messages and the mirror's 3 copies.
    wait_stored_everywhere(&c, 6).await;
    assert_ok(&c.api(old, "STREAM.LEADER.STEPDOWN.M", "").await);
    let new = wait_new_leader(&c, group, &c.ids(), old).await;
    for i in 4..=6u64 {
        must_publish(&c, n(1), "s.a", &format!("a{i}"), "x").await;
    }
    wait_stored_everywhere(&c, 12).await;
    let info = c.api(new, "STREAM.INFO.M", "").await;
    assert_eq!(info["state"]["last_seq"], 6, "{info}");
    assert_eq!(info["mirror"]["name"], "S", "{info}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_stream_ends_every_task_its_replicas_started() {
    let c = JsCluster::start(3).await;
    // What runs before the stream exists: the node's own tasks.
    let baseline: Vec<usize> = c.ids().iter().map(|id| c.node(*id).tasks.len()).collect();
    assert_ok(&c.api(n(1), "STREAM.CREATE.S", STREAM_S).await);
    let group = c.stream_group(n(1), "S").expect("stream in the meta state");
    c.wait_leader(group, &c.ids()).await;
    let consumer = r#"{"stream_name":"S","config":{"durable_name":"C","ack_policy":"explicit"}}"#;
    assert_ok(&c.api(n(2), "CONSUMER.CREATE.S.C", consumer).await);
    must_publish(&c, n(3), "s.a", "a1", "x").await;
    let running: Vec<usize> = c.ids().iter().map(|id| c.node(*id).tasks.len()).collect();
    assert!(
        running.iter().zip(&baseline).all(|(r, b)| r > b),
        "replica tasks run: {running:?} vs {baseline:?}"
    );
    let answer = c.api(n(2), "STREAM.DELETE.S", "").await;
    assert_eq!(answer["success"], true, "{answer}");
    // Captures, ack and owner tasks, the consumer engine: all end with the replicas.
    eventually("the stream's tasks ended on every node", || {
        let now: Vec<usize> = c.ids().iter().map(|id| c.node(*id).tasks.len()).collect();
        if now == baseline {
            Ok(())
        } else {
            Err(format!("{now:?} vs {baseline:?}"))
        }
    })
    .await;
    c.shutdown().await;
}

/// What a direct get of the last message on `subject` of `S` returns through `via`: its
/// payload, `Err(status)` for a status answer, or `Err("no answer")`.
async fn direct_last(
    c: &JsCluster,
    via: NodeId,
    subject: &str,
    within: Duration,
) -> Result<String, String> {
    let answer = c
        .client(via)
        .request(&format!("$JS.API.DIRECT.GET.S.{subject}"), b"", within)
        .await;
    match answer {
        Some(m) if m.status().is_some() => Err(format!("status {:?}", m.status())),
        Some(m) => Ok(String::from_utf8_lossy(&m.payload).into_owned()),
        None => Err("no answer".to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_its_majority_never_answers_a_read_with_an_overwritten_value() {
    cut_off_leader_reads(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_silently_stops_answering_reads_when_its_lease_runs_out() {
    // Raft traffic lost while every node still believes its links are up: no fast failover,
    // the followers elect after their election timeout, and the old leader's read lease
    // (capped at half the shortest election timeout) has run out by then.
    cut_off_leader_reads(false).await;
}

/// Cuts the stream leader off (`links_reported`: as the node links' loss detection reports
/// it, else silently at the Raft level only), writes a new value through the majority and
/// checks that no read through the old leader returns the overwritten one.
async fn cut_off_leader_reads(links_reported: bool) {
    let c = JsCluster::start(3).await;
    let cfg =
        r#"{"name":"S","subjects":["s.>"],"num_replicas":3,"storage":"file","allow_direct":true}"#;
    assert_ok(&c.api(n(1), "STREAM.CREATE.S", cfg).await);
    let group = c.stream_group(n(1), "S").expect("stream in the meta state");
    let old = c.wait_leader(group, &c.ids()).await;
    let majority = others(&c, &[old]);
    must_publish(&c, old, "s.k", "v1", "v1").await;
    assert_eq!(
        direct_last(&c, old, "s.k", WAIT).await,
        Ok("v1".to_string())
    );
    if links_reported {
        c.isolate(old);
    } else {
        c.net().isolate(old);
    }
    wait_new_leader(&c, group, &majority, old).await;
    must_publish(&c, majority[0], "s.k", "v2", "v2").await;
    // Through every majority node (followers pass direct gets to the leader): the new value.
    for via in &majority {
        assert_eq!(
            direct_last(&c, *via, "s.k", WAIT).await,
            Ok("v2".to_string()),
            "via {via}"
        );
    }
    // The old leader cannot confirm it leads: no answer rather than the overwritten v1.
    let stale = direct_last(&c, old, "s.k", Duration::from_secs(3)).await;
    assert_ne!(
        stale,
        Ok("v1".to_string()),
        "direct get through the cut-off leader"
    );
    let get = c
        .client(old)
        .request(
            "$JS.API.STREAM.MSG.GET.S",
            br#"{"last_by_subj":"s.k"}"#,
            Duration::from_secs(3),
        )
        .await
        .map(|m| m.json());
    if let Some(answer) = &get
        && answer.get("error").is_none()
    {
        let data = answer["message"]["data"].as_str().expect("data");
        let payload = base64::decode(data).expect("base64");
        assert_eq!(
            payload, b"v2",
            "message get through the cut-off leader: {answer}"
        );
    }
    c.heal();
    eventually_direct(&c, old, "v2").await;
    c.shutdown().await;
}

/// Waits until a direct get of `s.k` through `via` returns `want`.
async fn eventually_direct(c: &JsCluster, via: NodeId, want: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let got = direct_last(c, via, "s.k", Duration::from_secs(1)).await;
        if got.as_deref() == Ok(want) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "direct get through {via}: {got:?}, want {want}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_on_a_stream_without_leader_gets_a_status_never_a_message_without_ack_reply() {
    let (mut c, _, leader) = cluster_with_stream().await;
    let consumer = r#"{"stream_name":"S","config":{"durable_name":"C","ack_policy":"explicit"}}"#;
    assert_ok(&c.api(n(1), "CONSUMER.DURABLE.CREATE.S.C", consumer).await);
    must_publish(&c, n(1), "s.a", "m1", "m1").await;
    // The leader and one follower down: the survivor cannot elect anyone. Its first pull goes
    // while it still believes in the lost leader (the forward fails), the second once it knows
    // there is none.
    let survivor = others(&c, &[leader])[0];
    for id in others(&c, &[survivor]) {
        c.stop(id).await;
    }
    let client = c.client(survivor);
    for round in 0..2 {
        let (inbox, sid) = client.subscribe_new_inbox();
        client.publish(
            "$JS.API.CONSUMER.MSG.NEXT.S.C",
            Some(&inbox),
            br#"{"batch":1,"expires":2000000000}"#,
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(4);
        while let Some(m) = client
            .next_for(
                &sid,
                deadline.saturating_duration_since(tokio::time::Instant::now()),
            )
            .await
        {
            assert!(
                m.status().is_some()
                    || m.reply
                        .as_deref()
                        .is_some_and(|r| r.starts_with("$JS.ACK.")),
                "pull {round} answered with neither a status nor a delivery: {:?}",
                String::from_utf8_lossy(&m.payload)
            );
        }
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_cut_off_for_a_while_rejoins_without_deposing_the_leader() {
    let (c, group, leader) = cluster_with_stream().await;
    let term = c
        .node(leader)
        .js
        .registry()
        .leader(group)
        .expect("group")
        .term;
    let follower = others(&c, &[leader])[0];
    must_publish(&c, leader, "s.a", "before", "x").await;
    // Several election timeouts away (test timing: 400-800 ms): with Pre-Vote, and no fast
    // failover from a node that reaches no majority, its term does not climb meanwhile.
    c.isolate(follower);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let away = c
        .node(follower)
        .js
        .registry()
        .leader(group)
        .expect("group")
        .term;
    assert_eq!(away, term, "the cut-off follower raised its term");
    c.heal();
    wait_stored_everywhere(&c, 1).await;
    must_publish(&c, follower, "s.a", "after", "y").await;
    wait_stored_everywhere(&c, 2).await;
    let now = c.node(leader).js.registry().leader(group).expect("group");
    assert_eq!(
        (now.leader, now.term),
        (Some(leader), term),
        "the leader was deposed"
    );
    c.shutdown().await;
}
