//! Replica counts, placement and leadership operations on in-process clusters: STREAM.UPDATE
//! from R1 to R3 and back under publishes, R3 to R5 on five nodes, a placement move handing the
//! leadership off, placement tags and their errors, META.LEADER.STEPDOWN with a preferred
//! placement, and draining a node.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use jetraft_raft::{GroupId, NodeId};
use serde_json::Value;

use super::js_cluster_tests::{
    ack_of, assert_ok, fetch, get_payload, must_publish, n, others, stored_on,
};
use super::{JsCluster, WAIT, eventually};

/// A file stream on `s.>` with `replicas` replicas and an optional placement (JSON).
fn stream(replicas: u32, placement: &str) -> String {
    let placement = if placement.is_empty() {
        String::new()
    } else {
        format!(r#","placement":{placement}"#)
    };
    format!(
        r#"{{"name":"S","subjects":["s.>"],"num_replicas":{replicas},"storage":"file"{placement}}}"#
    )
}

/// The replicas the meta state assigns `S`, as node `via` sees it.
fn assigned(c: &JsCluster, via: NodeId) -> BTreeSet<u64> {
    c.node(via)
        .js
        .meta()
        .read(|m| m.stream("S").map(|s| s.replicas.iter().copied().collect()))
        .unwrap_or_default()
}

/// Waits until every running node agrees that `S` is on exactly `count` nodes, its group's
/// voters are those nodes, and no other node keeps a replica; returns the nodes.
async fn wait_replicas(c: &JsCluster, group: GroupId, count: usize) -> BTreeSet<u64> {
    eventually(&format!("S on {count} replicas"), || {
        let running = c.running();
        let views: Vec<BTreeSet<u64>> = running.iter().map(|id| assigned(c, *id)).collect();
        let placed = views[0].clone();
        if placed.len() != count || views.iter().any(|v| *v != placed) {
            return Err(format!("assignments {views:?}"));
        }
        for id in &running {
            let hosts = c.node(*id).js.jsz_stats().streams;
            let want = u64::from(placed.contains(&id.0));
            if hosts != want {
                let (voters, leader) = (
                    c.voters(*id, group),
                    c.node(*id)
                        .js
                        .registry()
                        .leader(group)
                        .ok()
                        .map(|l| l.leader),
                );
                return Err(format!(
                    "{id} hosts {hosts} streams (voters {voters:?}, leader {leader:?})"
                ));
            }
            if placed.contains(&id.0) && c.voters(*id, group) != placed {
                return Err(format!("{id} sees voters {:?}", c.voters(*id, group)));
            }
        }
        Ok(placed)
    })
    .await
}

/// STREAM.INFO of `S` through `via` once it reports `replicas` replicas in its config and
/// `replicas - 1` followers in its cluster section.
async fn wait_info(c: &JsCluster, via: NodeId, replicas: u64) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let info = c.api(via, "STREAM.INFO.S", "").await;
        let followers = info["cluster"]["replicas"].as_array().map_or(0, Vec::len);
        if info["config"]["num_replicas"] == replicas
            && followers as u64 == replicas - 1
            && info["cluster"]["leader"].is_string()
        {
            return info;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "STREAM.INFO never showed {replicas} replicas: {info}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Most publishes one test publisher makes, and how long it publishes at most: bounds far
/// above what the replica changes take (a removed follower drops its replica only after its
/// leader fell silent for `LEAVE_GRACE`, so shrinking takes seconds): a publisher that ends
/// early would read as stalled publishes.
const PUBLISH_MAX: usize = 100_000;
const PUBLISH_FOR: Duration = Duration::from_secs(120);
/// Pause between two publishes, so the messages checked afterwards stay a few thousand.
const PUBLISH_PACE: Duration = Duration::from_millis(1);

/// Publishes through the nodes in turn until `stop` is set, counting acknowledgements in
/// `count`; ids start at `m{first}`. Returns `(sequence, id)` of every acknowledged publish.
async fn publish_until(
    c: &JsCluster,
    stop: &AtomicBool,
    count: &AtomicU64,
    first: usize,
) -> Vec<(u64, String)> {
    let ids = c.ids();
    let deadline = tokio::time::Instant::now() + PUBLISH_FOR;
    let mut acked = Vec::new();
    for i in first..PUBLISH_MAX {
        if stop.load(Ordering::SeqCst) || tokio::time::Instant::now() >= deadline {
            break;
        }
        let id = format!("m{i}");
        let via = ids[i % ids.len()];
        acked.push((must_publish(c, via, "s.a", &id, &id).await, id));
        count.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(PUBLISH_PACE).await;
    }
    acked
}

/// Waits until `count` grew by `more` from now.
async fn wait_more(count: &AtomicU64, more: u64) {
    let target = count.load(Ordering::SeqCst) + more;
    let deadline = tokio::time::Instant::now() + WAIT;
    while count.load(Ordering::SeqCst) < target {
        assert!(tokio::time::Instant::now() < deadline, "publishes stalled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every acknowledged publish has its own sequence, they run 1..=N in order, and each stored
/// message through `via` is the one acknowledged under its sequence.
async fn assert_every_ack_stored_once(c: &JsCluster, via: NodeId, acked: &[(u64, String)]) {
    let seqs: Vec<u64> = acked.iter().map(|(s, _)| *s).collect();
    let n = acked.len() as u64;
    assert_eq!(
        seqs,
        (1..=n).collect::<Vec<u64>>(),
        "acknowledged sequences"
    );
    for (seq, id) in acked {
        assert_eq!(&get_payload(c, via, *seq).await, id, "message {seq}");
    }
    let info = c.api(via, "STREAM.INFO.S", "").await;
    assert_eq!(info["state"]["messages"], n, "{info}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_to_r3_and_back_to_r1_under_publishes_keeps_every_acknowledged_message() {
    let c = JsCluster::start(3).await;
    assert_ok(&c.api(n(2), "STREAM.CREATE.S", &stream(1, "")).await);
    let group = c.stream_group(n(1), "S").expect("assigned");
    let first = wait_replicas(&c, group, 1).await;
    for i in 0..3 {
        must_publish(&c, n(1), "s.a", &format!("m{i}"), &format!("m{i}")).await;
    }
    // A consumer with three messages acknowledged: its position lives in the stream's group.
    let consumer = r#"{"stream_name":"S","config":{"durable_name":"C","ack_policy":"explicit"}}"#;
    assert_ok(&c.api(n(1), "CONSUMER.DURABLE.CREATE.S.C", consumer).await);
    let client = c.client(n(3));
    let (got, ended) = fetch(&client, 3, Duration::from_secs(3)).await;
    assert_eq!(got.len(), 3, "{ended}");
    for m in &got {
        assert!(
            client
                .request(m.reply.as_deref().expect("reply"), b"+ACK", WAIT)
                .await
                .is_some()
        );
    }

    let stop = AtomicBool::new(false);
    // The publisher's ids continue after the three above (`m3`, ...).
    let count = AtomicU64::new(3);
    let publisher = async {
        let mut acked: Vec<(u64, String)> = (0..3).map(|i| (i + 1, format!("m{i}"))).collect();
        acked.extend(publish_until(&c, &stop, &count, 3).await);
        acked
    };
    let changes = async {
        wait_more(&count, 10).await;
        let up = c.api(n(3), "STREAM.UPDATE.S", &stream(3, "")).await;
        assert_ok(&up);
        assert_eq!(up["config"]["num_replicas"], 3, "{up}");
        let all = wait_replicas(&c, group, 3).await;
        assert_eq!(all.len(), 3);
        wait_info(&c, n(1), 3).await;
        wait_more(&count, 20).await;
        let leader = c.wait_leader(group, &c.ids()).await;
        let down = c.api(n(1), "STREAM.UPDATE.S", &stream(1, "")).await;
        assert_ok(&down);
        let last = wait_replicas(&c, group, 1).await;
        assert_eq!(last, BTreeSet::from([leader.0]), "the leader stays");
        wait_info(&c, n(2), 1).await;
        wait_more(&count, 10).await;
        stop.store(true, Ordering::SeqCst);
    };
    let (acked, ()) = tokio::join!(publisher, changes);
    assert!(acked.len() > 40, "{} publishes", acked.len());
    // More replicas than nodes.
    let err = c.api(n(1), "STREAM.UPDATE.S", &stream(5, "")).await;
    assert_eq!(err["error"]["err_code"], 10005, "{err}");
    assert_eq!(
        err["error"]["description"], "no suitable peers for placement",
        "{err}"
    );
    assert!(!first.is_empty());
    assert_every_ack_stored_once(&c, n(1), &acked).await;
    let host = NodeId(*wait_replicas(&c, group, 1).await.first().expect("one"));
    assert_eq!(stored_on(&c, host), acked.len() as u64);
    // The consumer kept its position through both changes.
    let info = c.api(n(2), "CONSUMER.INFO.S.C", "").await;
    assert_eq!(info["ack_floor"]["stream_seq"], 3, "{info}");
    assert_eq!(info["num_pending"], acked.len() as u64 - 3, "{info}");
    let (next, ended) = fetch(&c.client(n(2)), 1, Duration::from_secs(3)).await;
    assert_eq!(next.len(), 1, "{ended}");
    assert_eq!(ack_of(&next[0]).stream_seq, 4);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r3_to_r5_on_five_nodes_under_publishes() {
    let c = JsCluster::start(5).await;
    assert_ok(&c.api(n(1), "STREAM.CREATE.S", &stream(3, "")).await);
    let group = c.stream_group(n(1), "S").expect("assigned");
    wait_replicas(&c, group, 3).await;
    let stop = AtomicBool::new(false);
    let count = AtomicU64::new(0);
    let changes = async {
        wait_more(&count, 5).await;
        assert_ok(&c.api(n(4), "STREAM.UPDATE.S", &stream(5, "")).await);
        wait_replicas(&c, group, 5).await;
        let info = wait_info(&c, n(5), 5).await;
        assert_eq!(
            info["cluster"]["replicas"].as_array().map(Vec::len),
            Some(4)
        );
        wait_more(&count, 5).await;
        stop.store(true, Ordering::SeqCst);
    };
    let (acked, ()) = tokio::join!(publish_until(&c, &stop, &count, 0), changes);
    assert_every_ack_stored_once(&c, n(2), &acked).await;
    eventually("every replica holds every message", || {
        let held: Vec<u64> = c.ids().into_iter().map(|id| stored_on(&c, id)).collect();
        if held.iter().all(|h| *h == acked.len() as u64) {
            Ok(())
        } else {
            Err(format!("{held:?}"))
        }
    })
    .await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_tags_place_streams_and_a_new_placement_moves_the_leader_off() {
    let tags: &[&[&str]] = &[&["ssd", "az:1"], &["ssd", "az:2"], &["hdd", "az:3"]];
    let c = JsCluster::start_tagged(3, tags).await;
    // Nothing fits: nats-server's reasons.
    let err = c
        .api(n(1), "STREAM.CREATE.S", &stream(1, r#"{"tags":["nvme"]}"#))
        .await;
    assert_eq!(err["error"]["err_code"], 10005, "{err}");
    assert_eq!(
        err["error"]["description"],
        "no suitable peers for placement, tags not matched ['nvme']"
    );
    let err = c
        .api(
            n(1),
            "STREAM.CREATE.S",
            &stream(1, r#"{"cluster":"elsewhere"}"#),
        )
        .await;
    assert_eq!(
        err["error"]["description"], "no suitable peers for placement",
        "{err}"
    );
    let err = c
        .api(n(1), "STREAM.CREATE.S", &stream(3, r#"{"tags":["SSD"]}"#))
        .await;
    assert_eq!(
        err["error"]["description"],
        "no suitable peers for placement, tags not matched ['ssd']"
    );
    // One node fits: the stream lives there.
    let created = c
        .api(n(1), "STREAM.CREATE.S", &stream(1, r#"{"tags":["hdd"]}"#))
        .await;
    assert_ok(&created);
    let group = c.stream_group(n(1), "S").expect("assigned");
    assert_eq!(wait_replicas(&c, group, 1).await, BTreeSet::from([3]));
    for i in 1..=5u64 {
        must_publish(&c, n(1), "s.a", &format!("m{i}"), &format!("m{i}")).await;
    }
    // A new replica count and a new placement in one update: refused.
    let err = c
        .api(n(2), "STREAM.UPDATE.S", &stream(2, r#"{"tags":["ssd"]}"#))
        .await;
    assert_eq!(err["error"]["err_code"], 10123, "{err}");
    // A new placement: the stream moves to a fitting node, its only replica (the leader)
    // handing off to it, and keeps every message.
    assert_ok(
        &c.api(n(2), "STREAM.UPDATE.S", &stream(1, r#"{"tags":["az:2"]}"#))
            .await,
    );
    assert_eq!(wait_replicas(&c, group, 1).await, BTreeSet::from([2]));
    for seq in 1..=5u64 {
        assert_eq!(get_payload(&c, n(1), seq).await, format!("m{seq}"));
    }
    assert_eq!(must_publish(&c, n(3), "s.a", "m6", "m6").await, 6);
    // Growing keeps to the tags: only two nodes have `ssd`.
    assert_ok(
        &c.api(n(1), "STREAM.UPDATE.S", &stream(1, r#"{"tags":["ssd"]}"#))
            .await,
    );
    assert_eq!(wait_replicas(&c, group, 1).await, BTreeSet::from([2]));
    assert_ok(
        &c.api(n(1), "STREAM.UPDATE.S", &stream(2, r#"{"tags":["ssd"]}"#))
            .await,
    );
    assert_eq!(wait_replicas(&c, group, 2).await, BTreeSet::from([1, 2]));
    let err = c
        .api(n(1), "STREAM.UPDATE.S", &stream(3, r#"{"tags":["ssd"]}"#))
        .await;
    assert_eq!(
        err["error"]["description"], "no suitable peers for placement, tags not matched ['ssd']",
        "{err}"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meta_leader_stepdown_honours_a_preferred_placement() {
    let tags: &[&[&str]] = &[&["a"], &["a"], &["b"]];
    let c = JsCluster::start_tagged(3, tags).await;
    let all = c.ids();
    let leader = c.wait_leader(GroupId::META, &all).await;
    let step = |body: String| {
        let c = &c;
        async move { c.api(n(1), "META.LEADER.STEPDOWN", &body).await }
    };
    let preferred = |name: &str| format!(r#"{{"placement":{{"preferred":"{name}"}}}}"#);
    let err = step(preferred(c.name(leader))).await;
    assert_eq!(err["error"]["err_code"], 10005, "{err}");
    assert_eq!(
        err["error"]["description"],
        format!("preferred server \"{}\" is already leader", c.name(leader))
    );
    let err = step(preferred("nobody")).await;
    assert_eq!(
        err["error"]["description"], "preferred server \"nobody\" not known",
        "{err}"
    );
    let err = step(r#"{"placement":{"tags":["zzz"]}}"#.to_string()).await;
    assert_eq!(
        err["error"]["description"], "no replacement peer connected",
        "{err}"
    );
    // To a named server.
    let target = others(&c, &[leader])[0];
    let answer = step(preferred(c.name(target))).await;
    assert_eq!(answer["success"], true, "{answer}");
    let now = c.wait_leader(GroupId::META, &all).await;
    assert_eq!(now, target);
    // To the only other node with tag `b` (or `a`, when `b` leads).
    let (tag, fitting): (&str, Vec<NodeId>) = if now == n(3) {
        ("a", vec![n(1), n(2)])
    } else {
        ("b", vec![n(3)])
    };
    let answer = step(format!(r#"{{"placement":{{"tags":["{tag}"]}}}}"#)).await;
    assert_eq!(answer["success"], true, "{answer}");
    let next = c.wait_leader(GroupId::META, &all).await;
    assert!(fitting.contains(&next), "{next} leads");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_node_hands_off_every_leadership_and_leads_again_once_undrained() {
    let c = JsCluster::start(3).await;
    let all = c.ids();
    assert_ok(&c.api(n(1), "STREAM.CREATE.S", &stream(3, "")).await);
    let group = c.stream_group(n(1), "S").expect("assigned");
    wait_replicas(&c, group, 3).await;
    // The node to drain leads both the meta group and the stream (a stream step-down with a
    // preferred server moves it there).
    let drained = c.wait_leader(GroupId::META, &all).await;
    let stream_leader = c.wait_leader(group, &all).await;
    if stream_leader != drained {
        let body = format!(r#"{{"placement":{{"preferred":"{}"}}}}"#, c.name(drained));
        let answer = c.api(n(1), "STREAM.LEADER.STEPDOWN.S", &body).await;
        assert_eq!(answer["success"], true, "{answer}");
    }
    assert_eq!(c.wait_leader(group, &all).await, drained);
    must_publish(&c, drained, "s.a", "before", "before").await;

    let answer = c.node(drained).js.request_drain(true).await.expect("drain");
    assert_eq!(answer["success"], true, "{answer}");
    eventually("the drained node leads nothing", || {
        let status = c.node(drained).js.drain_status();
        if status["drained"] == true
            && status["meta_leader"] == false
            && status["stream_leaders"]
                .as_array()
                .is_some_and(Vec::is_empty)
        {
            Ok(())
        } else {
            Err(status.to_string())
        }
    })
    .await;
    // Step-downs never pick it while it is drained; the stream keeps answering.
    for _ in 0..2 {
        let answer = c.api(n(1), "META.LEADER.STEPDOWN", "").await;
        assert_eq!(answer["success"], true, "{answer}");
        assert_ne!(c.wait_leader(GroupId::META, &all).await, drained);
    }
    assert_eq!(
        must_publish(&c, drained, "s.a", "during", "during").await,
        2
    );
    assert_ne!(c.wait_leader(group, &all).await, drained);

    let answer = c
        .node(drained)
        .js
        .request_drain(false)
        .await
        .expect("undrain");
    assert_eq!(answer["success"], true, "{answer}");
    eventually("every node sees the drain undone", || {
        let still: Vec<NodeId> = (all.iter().copied())
            .filter(|id| c.node(*id).js.meta().read(|m| m.is_drained(drained.0)))
            .collect();
        if still.is_empty() {
            Ok(())
        } else {
            Err(format!("{still:?}"))
        }
    })
    .await;
    let body = format!(r#"{{"placement":{{"preferred":"{}"}}}}"#, c.name(drained));
    let answer = c.api(n(2), "META.LEADER.STEPDOWN", &body).await;
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(c.wait_leader(GroupId::META, &all).await, drained);
    c.shutdown().await;
}
