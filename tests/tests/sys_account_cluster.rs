//! The system account's services on a 3-node cluster: a `PING` request published on one node
//! is answered by every node (as `nats server list` and `nats server request jetstream` expect),
//! and a request for one server id is answered by that node wherever the requester is
//! connected. Runs against nats-server too (`JETRAFT_TEST_SERVER=nats-server ...`).

use std::collections::BTreeSet;
use std::time::Duration;

use jetraft_tests::harness::Cluster;
use jetraft_tests::harness::login;
use jetraft_tests::harness::sysreq::{SYS_CONFIG, collect};
use jetraft_tests::harness::wait_for;
use serde_json::Value;

/// Bound on waiting for all replies of one request.
const REPLIES: Duration = Duration::from_secs(5);
/// How long a request that must get exactly one reply is watched for a second one.
const EXTRA: Duration = Duration::from_secs(2);
/// Bound for interest and the meta group to settle after the cluster started.
const SETTLE: Duration = Duration::from_secs(30);

async fn server_ids(cluster: &Cluster) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for i in 0..cluster.len() {
        let varz = cluster.node(i).monitor_json("/varz").await.expect("varz");
        ids.insert(varz["server_id"].as_str().expect("server_id").to_string());
    }
    ids
}

fn ids_of(replies: &[Value]) -> BTreeSet<String> {
    replies
        .iter()
        .filter_map(|r| r["server"]["id"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn every_node_answers_a_ping_and_one_node_its_own_id() {
    let mut cluster = Cluster::start_with(3, "sysacc", Some(SYS_CONFIG))
        .await
        .expect("start cluster");
    cluster.wait_formed().await.expect("cluster formed");
    let ids = server_ids(&cluster).await;
    assert_eq!(ids.len(), 3);
    let varz = cluster.node(0).monitor_json("/varz").await.expect("varz");
    let cluster_name = varz["cluster"]["name"].clone();
    let sys = login(cluster.node(0), "sys").await;

    // `nats server list`: the plain PING, one STATSZ per node.
    let replies = wait_for("every node answers PING", SETTLE, || {
        let sys = sys.clone();
        let ids = ids.clone();
        async move {
            let r = collect(&sys, "$SYS.REQ.SERVER.PING", "", 3, REPLIES).await;
            // nats-server counts the servers it heard from, which takes a moment.
            let all =
                ids_of(&r.json) == ids && r.json.iter().all(|j| j["statsz"]["active_servers"] == 3);
            all.then_some(r.json)
        }
    })
    .await;
    assert_eq!(replies.len(), 3, "{replies:?}");
    for r in &replies {
        assert!(r["statsz"]["connections"].is_u64(), "{r}");
        assert_eq!(r["statsz"]["jetstream"]["meta"]["cluster_size"], 3, "{r}");
    }

    // `nats server request jetstream`: PING.JSZ, each node with the meta group of three.
    let replies = wait_for("every node reports the meta group", SETTLE, || {
        let sys = sys.clone();
        async move {
            let r = collect(&sys, "$SYS.REQ.SERVER.PING.JSZ", "", 3, REPLIES).await;
            let all = r.json.len() == 3
                && r.json
                    .iter()
                    .all(|j| j["data"]["meta_cluster"]["cluster_size"] == 3);
            all.then_some(r.json)
        }
    })
    .await;
    assert_eq!(ids_of(&replies), ids);
    for r in &replies {
        assert_eq!(r["data"]["server_id"], r["server"]["id"], "{r}");
        assert_eq!(r["server"]["cluster"], cluster_name, "{r}");
    }
    // With `leader_only` only the meta leader answers.
    // (nats-server may report the group before it elected a leader: wait for one.)
    let only = wait_for("the meta leader answers leader_only", SETTLE, || {
        let sys = sys.clone();
        async move {
            let body = r#"{"leader_only":true}"#;
            let r = collect(&sys, "$SYS.REQ.SERVER.PING.JSZ", body, 2, EXTRA).await;
            (r.json.len() == 1).then(|| r.json[0].clone())
        }
    })
    .await;
    let leader = only["data"]["meta_cluster"]["leader"].clone();
    assert_eq!(only["server"]["name"], leader, "{only}");

    // A request for one server id, sent from node 0, is answered by that node alone.
    for id in &ids {
        let r = collect(&sys, &format!("$SYS.REQ.SERVER.{id}.VARZ"), "", 2, EXTRA).await;
        assert_eq!(r.json.len(), 1, "{id}: {:?}", r.json);
        assert_eq!(r.json[0]["data"]["server_id"], id.as_str());
    }
    // A filter picks one node by name.
    let name = cluster.node(2).name().to_string();
    let body = format!(r#"{{"server_name":"{name}","exact_match":true}}"#);
    let r = collect(&sys, "$SYS.REQ.SERVER.PING.HEALTHZ", &body, 2, EXTRA).await;
    assert_eq!(r.json.len(), 1, "{:?}", r.json);
    assert_eq!(r.json[0]["server"]["name"], name.as_str());
    assert_eq!(r.json[0]["data"]["status"], "ok");

    // An ordinary account's user reaches none of it, on any node.
    let app = login(cluster.node(1), "app").await;
    let r = collect(&app, "$SYS.REQ.SERVER.PING.JSZ", "", 1, REPLIES).await;
    assert_eq!(r.statuses, vec![503], "{r:?}");
}
