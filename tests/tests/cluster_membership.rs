//! Cluster membership with real processes: a node started with `--routes` naming one seed is
//! learned by every member (route gossip) and admitted to the meta group, and new streams are
//! placed on it; `$JS.API.SERVER.REMOVE` of a stopped node moves its stream replicas to the
//! others and shrinks the meta group, after which one more node can be lost as three voters
//! allow, with no acknowledged message lost or duplicated; SERVER.REMOVE's errors.
//!
//! Every test also runs against a real nats-server cluster (`JETRAFT_TEST_SERVER=nats-server`).
//! nats-server answers SERVER.REMOVE only to its system account, so its members get a config
//! with a system account user (`sys`) and a JetStream account user (`app`); jetraft has one
//! account and answers any client.

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::jsapi::{ELECTION, api, index_of, info_with_leader, publish_acked};
use jetraft_tests::harness::{ServerKind, ServerProcess, free_port, server_kind, wait_for, within};
use serde_json::{Value, json};

/// nats-server's accounts (see the module doc).
const NATS_ACCOUNTS: &str = "accounts {\n  SYS { users = [{user: sys, password: sys}] }\n  \
     APP { jetstream: enabled, users = [{user: app, password: app}] }\n}\nsystem_account: SYS\n";

fn config() -> Option<&'static str> {
    Some(NATS_ACCOUNTS)
}

/// A client of `node` as `user` (`app` for JetStream, `sys` for SERVER.REMOVE); a server
/// without users takes any.
async fn client(node: &ServerProcess, user: &str) -> async_nats::Client {
    let opts = async_nats::ConnectOptions::with_user_and_password(user.into(), user.into());
    within(
        Duration::from_secs(10),
        "connect",
        Box::pin(opts.connect(node.client_url())),
    )
    .await
    .expect("connect")
}

/// One raw request; the answer as JSON, or `None` when none came.
async fn request(nc: &async_nats::Client, subject: &str, body: &[u8]) -> Option<Value> {
    let req = nc.request(subject.to_string(), Bytes::copy_from_slice(body));
    let msg = tokio::time::timeout(Duration::from_secs(5), req)
        .await
        .ok()?
        .ok()?;
    serde_json::from_slice(&msg.payload).ok()
}

/// The meta group's size as `node`'s `/jsz` reports it.
async fn meta_size(node: &ServerProcess) -> Option<u64> {
    let jsz = node.monitor_json("/jsz").await.ok()?;
    jsz["meta_cluster"]["cluster_size"].as_u64()
}

/// Waits until each of the members `nodes` reports a meta group of `size`.
async fn wait_meta_size(cluster: &Cluster, nodes: &[usize], size: u64) {
    for &i in nodes {
        let node = cluster.node(i);
        wait_for(
            &format!("a meta group of {size}"),
            ELECTION,
            || async move { (meta_size(node).await == Some(size)).then_some(()) },
        )
        .await;
    }
}

/// Names of the stream's replicas (leader included) and whether all are current.
fn replica_names(info: &Value) -> (BTreeSet<String>, bool) {
    let mut names = BTreeSet::new();
    let mut current = true;
    if let Some(l) = info["cluster"]["leader"].as_str() {
        names.insert(l.to_string());
    }
    for r in info["cluster"]["replicas"].as_array().into_iter().flatten() {
        names.insert(r["name"].as_str().unwrap_or_default().to_string());
        current &= r["current"] == true && r["offline"] != true;
    }
    (names, current)
}

/// Every message `1..=count` of `stream` holds payload `m<seq>`: none lost, none twice.
async fn assert_exactly(nc: &async_nats::Client, stream: &str, count: u64) {
    let info = info_with_leader(nc, stream).await;
    assert_eq!(info["state"]["messages"], count, "{info}");
    for seq in 1..=count {
        let got = api(
            nc,
            &format!("$JS.API.STREAM.MSG.GET.{stream}"),
            json!({ "seq": seq }),
        )
        .await;
        let data = got["message"]["data"].as_str().unwrap_or_default();
        let want = base64_of(&format!("m{seq}"));
        assert_eq!(data, want, "seq {seq}: {got}");
    }
}

fn base64_of(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[tokio::test]
async fn a_node_routed_to_one_seed_is_learned_by_all_admitted_and_gets_streams() {
    let mut cluster = Cluster::start_with(3, "members", config())
        .await
        .expect("cluster");
    // Nodes join a cluster that exists (has a meta group), not one still forming.
    wait_meta_size(&cluster, &[0, 1, 2], 3).await;
    // n4 names only n1 and a node that does not exist (yet); n2 and n3 are not told and not
    // restarted: `add_node` waits until every member lists every other in INFO connect_urls.
    let nobody = format!("nats://127.0.0.1:{}", free_port());
    let new = cluster.add_node(&[0], &[nobody]).await.expect("n4 joins");
    wait_meta_size(&cluster, &[0, 1, 2, 3], 4).await;
    // New streams are placed on the new node too: R3 streams until one has a replica there
    // (both servers prefer the nodes with the fewest replicated streams, so the second at the
    // latest; nats-server places on a new server once its first statistics arrived).
    let nc = client(cluster.node(1), "app").await;
    let mut on_new = false;
    for i in 0..20 {
        if i >= 2 {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let created = api(
            &nc,
            &format!("$JS.API.STREAM.CREATE.P{i}"),
            json!({"name": format!("P{i}"), "subjects": [format!("p{i}")], "num_replicas": 3}),
        )
        .await;
        assert!(created["error"].is_null(), "{created}");
        let info = info_with_leader(&nc, &format!("P{i}")).await;
        if replica_names(&info).0.contains(cluster.node(new).name()) {
            on_new = true;
            break;
        }
    }
    assert!(on_new, "no R3 stream was placed on the new node");
    // An R3 stream can use it, and it answers through it.
    let via_new = client(cluster.node(new), "app").await;
    let created = api(
        &via_new,
        "$JS.API.STREAM.CREATE.R3",
        json!({"name": "R3", "subjects": ["r3"], "num_replicas": 3}),
    )
    .await;
    assert!(created["error"].is_null(), "{created}");
    let ack = publish_acked(&via_new, "r3", "m1", "m1").await;
    assert_eq!(ack["seq"], 1, "{ack}");
    cluster.assert_clean_logs();
}

#[tokio::test]
async fn server_remove_of_a_stopped_node_moves_its_replicas_and_the_cluster_survives_one_more_loss()
{
    let mut cluster = Cluster::start_with(4, "members", config())
        .await
        .expect("cluster");
    let nc = client(cluster.node(0), "app").await;
    let created = api(
        &nc,
        "$JS.API.STREAM.CREATE.S",
        json!({"name": "S", "subjects": ["s.>"], "num_replicas": 3}),
    )
    .await;
    assert!(created["error"].is_null(), "{created}");
    // From here on the clients use the node without a replica of S (four nodes, R3).
    let info = info_with_leader(&nc, "S").await;
    let (placed, _) = replica_names(&info);
    let spare = (0..cluster.len())
        .find(|i| !placed.contains(cluster.node(*i).name()))
        .expect("a node without a replica");
    let nc = client(cluster.node(spare), "app").await;
    for i in 1..=20 {
        publish_acked(&nc, "s.a", &format!("m{i}"), &format!("m{i}")).await;
    }
    // Stop a follower replica of S that is not the meta leader.
    let jsz = cluster.node(spare).monitor_json("/jsz").await.expect("jsz");
    let meta_leader = jsz["meta_cluster"]["leader"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let gone_name = placed
        .iter()
        .find(|n| **n != info["cluster"]["leader"] && **n != meta_leader)
        .expect("a follower replica to stop")
        .clone();
    let gone = index_of(&cluster, &gone_name);
    cluster
        .stop_within(gone, Duration::from_secs(15))
        .await
        .expect("stop");
    let sys = client(cluster.node(spare), "sys").await;
    let removed = wait_for("SERVER.REMOVE answered", ELECTION, || {
        let sys = sys.clone();
        let body = json!({ "peer": gone_name }).to_string();
        async move { request(&sys, "$JS.API.SERVER.REMOVE", body.as_bytes()).await }
    })
    .await;
    assert_eq!(removed["success"], true, "{removed}");
    assert_eq!(
        removed["type"],
        "io.nats.jetstream.api.v1.meta_server_remove_response"
    );
    // The replica moves to the spare node and the meta group is three.
    let moved = wait_for(
        "S on three current replicas without the removed node",
        ELECTION,
        || {
            let nc = nc.clone();
            let gone_name = gone_name.clone();
            async move {
                let info = request(&nc, "$JS.API.STREAM.INFO.S", b"").await?;
                let (names, current) = replica_names(&info);
                (names.len() == 3 && !names.contains(&gone_name) && current).then_some(names)
            }
        },
    )
    .await;
    assert_eq!(moved.len(), 3);
    let running: Vec<usize> = (0..cluster.len()).filter(|i| *i != gone).collect();
    wait_meta_size(&cluster, &running, 3).await;
    for i in 21..=30 {
        publish_acked(&nc, "s.a", &format!("m{i}"), &format!("m{i}")).await;
    }
    // One more node down: 2 of 3 is a quorum of the meta group and of S.
    let second = *running.iter().find(|i| **i != spare).expect("another node");
    cluster
        .stop_within(second, Duration::from_secs(15))
        .await
        .expect("stop");
    for i in 31..=40 {
        publish_acked(&nc, "s.a", &format!("m{i}"), &format!("m{i}")).await;
    }
    assert_exactly(&nc, "S", 40).await;
    cluster.assert_clean_logs();
}

/// With accounts configured, only the system account's users run the cluster operations;
/// nats-server leaves them unanswered in other accounts, JetStream or not.
#[tokio::test]
async fn only_the_system_account_runs_the_cluster_operations() {
    let cluster = Cluster::start_with(3, "members", config())
        .await
        .expect("cluster");
    let app = client(cluster.node(1), "app").await;
    let sys = client(cluster.node(1), "sys").await;
    let body = br#"{"peer":"nobody"}"#;
    let answer = wait_for("SERVER.REMOVE answered", ELECTION, || {
        let sys = sys.clone();
        async move { request(&sys, "$JS.API.SERVER.REMOVE", body).await }
    })
    .await;
    assert_eq!(answer["error"]["err_code"], 10044, "{answer}");
    for subject in ["$JS.API.SERVER.REMOVE", "$JS.API.META.LEADER.STEPDOWN"] {
        let got = request(&app, subject, body).await;
        assert!(got.is_none(), "{subject} answered in an account: {got:?}");
    }
    // The JetStream account still has the rest of the API.
    let info = request(&app, "$JS.API.INFO", b"").await;
    assert!(info.is_some_and(|i| i["error"].is_null()));
    cluster.assert_clean_logs();
}

#[tokio::test]
async fn server_remove_errors_match_nats_server() {
    let cluster = Cluster::start_with(3, "members", config())
        .await
        .expect("cluster");
    let sys = client(cluster.node(1), "sys").await;
    let subject = "$JS.API.SERVER.REMOVE";
    let answer = |body: &'static [u8]| {
        let sys = sys.clone();
        async move {
            wait_for("SERVER.REMOVE answered", ELECTION, || {
                let sys = sys.clone();
                async move { request(&sys, subject, body).await }
            })
            .await
        }
    };
    for (body, code, description) in [
        (&b""[..], 10003, Some("bad request")),
        (&b"{}"[..], 10003, Some("bad request")),
        (&b"{nope"[..], 10025, None),
        (
            &br#"{"peer":"nobody"}"#[..],
            10044,
            Some("server is not a member of the cluster"),
        ),
        (
            &br#"{"peer":"n1","peer_id":"nobody"}"#[..],
            10044,
            Some("server is not a member of the cluster"),
        ),
    ] {
        let got = answer(body).await;
        let shown = String::from_utf8_lossy(body);
        assert_eq!(got["error"]["err_code"], code, "{shown}: {got}");
        assert_eq!(got["error"]["code"], 400, "{shown}: {got}");
        if let Some(d) = description {
            assert_eq!(got["error"]["description"], d, "{shown}: {got}");
        }
        assert_eq!(
            got["type"], "io.nats.jetstream.api.v1.meta_server_remove_response",
            "{shown}: {got}"
        );
    }
    cluster.assert_clean_logs();
}

/// jetraft only: a removed node id is never admitted again (nats-server lets a removed server
/// that restarts rejoin under its name-derived peer id). Its links come back, but it stays out
/// of the meta group, gets no streams and is not healthy.
#[tokio::test]
async fn a_removed_node_that_comes_back_with_its_data_stays_outside_the_cluster() {
    if server_kind() == ServerKind::NatsServer {
        return;
    }
    let mut cluster = Cluster::start(4, "members").await.expect("cluster");
    let gone = 3;
    // The cluster must have formed first: the node with the smallest id initialises the meta
    // group, and if that is the one stopped now, the others wait for it for good.
    wait_meta_size(&cluster, &[0, 1, 2, 3], 4).await;
    cluster
        .stop_within(gone, Duration::from_secs(15))
        .await
        .expect("stop");
    let nc = client(cluster.node(0), "app").await;
    let removed = api(&nc, "$JS.API.SERVER.REMOVE", json!({"peer": "n4"})).await;
    assert_eq!(removed["success"], true, "{removed}");
    wait_meta_size(&cluster, &[0, 1, 2], 3).await;
    // Back with its old store: the links come up (INFO connect_urls lists it everywhere).
    cluster.restart(gone).await.expect("n4 links again");
    // Two membership ticks of the meta leader (1 s each) pass with n4 linked.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for i in 0..3 {
        assert_eq!(meta_size(cluster.node(i)).await, Some(3), "node {}", i + 1);
    }
    let health = cluster
        .node(gone)
        .http_get("/healthz")
        .await
        .expect("healthz");
    assert_ne!(health.status, 200, "a removed node is not healthy");
    for i in 0..3 {
        let created = api(
            &nc,
            &format!("$JS.API.STREAM.CREATE.A{i}"),
            json!({"name": format!("A{i}"), "subjects": [format!("a{i}")], "num_replicas": 3}),
        )
        .await;
        assert!(created["error"].is_null(), "{created}");
        let (names, _) = replica_names(&info_with_leader(&nc, &format!("A{i}")).await);
        assert!(
            !names.contains("n4"),
            "A{i} placed on the removed node: {names:?}"
        );
    }
    for i in 0..3 {
        jetraft_tests::harness::assert_clean_log(cluster.node(i));
    }
}
