//! Replica counts, placement and leadership operations on process clusters, through async-nats
//! (issue 26 items 2, 4 and 5):
//!
//! - STREAM.UPDATE from R1 to R3 and back to R1 while a publisher sends with `Nats-Msg-Id` and
//!   records every PubAck: afterwards every acknowledged message is stored once at the
//!   sequence its PubAck named; while R3, each replica is checked by moving the leadership to
//!   it (STREAM.LEADER.STEPDOWN with a preferred server) and reading every message through it;
//!   a durable consumer keeps its position;
//! - R3 to R5 on five nodes, the same checks;
//! - `server_tags` and stream `placement`: where streams go, the errors when nothing fits, a
//!   placement change moving a stream, `/varz` `tags`;
//! - META.LEADER.STEPDOWN with a preferred placement, and draining a node (`/drainz`): jetraft
//!   only (nats-server answers META.LEADER.STEPDOWN only to its system account, which these
//!   clusters do not have, and has no drain).
//!
//! Every test also runs against a real nats-server cluster (`JETRAFT_TEST_SERVER=nats-server`)
//! except where it says so.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::jsapi::{api, base64_text, info_with_leader, publish_acked, try_api};
use jetraft_tests::harness::pull::{ack_sync, pull};
use jetraft_tests::harness::{ServerKind, connect, http, server_kind, wait_for};
use serde_json::{Value, json};

/// Bound on a replica change settling (new replicas caught up, old ones gone).
const SETTLE: Duration = Duration::from_secs(60);
/// Publishes the background publisher sends at most.
const MAX_PUBLISHES: usize = 20_000;
/// Pause between two publishes of the background publisher (it runs through the whole test).
const PACE: Duration = Duration::from_millis(5);

/// The stream `REP` on `rep.>` with `replicas` replicas and an optional placement.
fn rep(replicas: u64, placement: Option<Value>) -> Value {
    let mut cfg =
        json!({"name": "REP", "subjects": ["rep.>"], "num_replicas": replicas, "storage": "file"});
    if let Some(p) = placement {
        cfg["placement"] = p;
    }
    cfg
}

/// A background publisher rotating over `clients`, each publish with its own `Nats-Msg-Id`
/// retried until acknowledged; `acked` gets `(sequence, id)` of every PubAck.
struct Publisher {
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
    acked: Arc<Mutex<Vec<(u64, String)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Publisher {
    fn start(clients: Vec<async_nats::Client>) -> Publisher {
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let (s, c, a) = (stop.clone(), count.clone(), acked.clone());
        let task = tokio::spawn(async move {
            for i in 0..MAX_PUBLISHES {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let id = format!("p{i}");
                let nc = &clients[i % clients.len()];
                let ack = publish_acked(nc, "rep.a", &id, &id).await;
                let seq = ack["seq"].as_u64().expect("seq");
                a.lock().expect("acked").push((seq, id));
                c.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(PACE).await;
            }
        });
        Publisher {
            stop,
            count,
            acked,
            task,
        }
    }

    /// Waits until `more` further publishes were acknowledged.
    async fn wait_more(&self, more: u64) {
        let target = self.count.load(Ordering::SeqCst) + more;
        wait_for("acknowledged publishes", SETTLE, || async {
            (self.count.load(Ordering::SeqCst) >= target).then_some(())
        })
        .await;
    }

    /// The acknowledged publishes so far.
    fn acked(&self) -> Vec<(u64, String)> {
        self.acked.lock().expect("acked").clone()
    }

    /// Stops and returns every acknowledged publish.
    async fn finish(self) -> Vec<(u64, String)> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("publisher");
        self.acked.lock().expect("acked").clone()
    }
}

/// Waits until STREAM.INFO reports `replicas` in the config and `replicas - 1` current
/// followers.
async fn wait_replicas(nc: &async_nats::Client, replicas: u64) -> Value {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let info = try_api(nc, "$JS.API.STREAM.INFO.REP", &Value::Null)
            .await
            .unwrap_or_default();
        if let Some(info) = at_replicas(info.clone(), replicas) {
            return info;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "REP not at R{replicas} within {SETTLE:?}: {info}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `info` when it shows `replicas` in the config and `replicas - 1` current followers.
fn at_replicas(info: Value, replicas: u64) -> Option<Value> {
    {
        let followers = info["cluster"]["replicas"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let current = followers.iter().all(|r| r["current"] == true);
        (info["config"]["num_replicas"] == replicas
            && followers.len() as u64 == replicas - 1
            && current
            && info["cluster"]["leader"]
                .as_str()
                .is_some_and(|l| !l.is_empty()))
        .then_some(info)
    }
}

/// The names of the replicas of REP (leader first).
fn replica_names(info: &Value) -> Vec<String> {
    let mut names = vec![
        info["cluster"]["leader"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    ];
    for r in info["cluster"]["replicas"].as_array().into_iter().flatten() {
        names.push(r["name"].as_str().unwrap_or_default().to_string());
    }
    names
}

/// Makes `name` lead REP (STREAM.LEADER.STEPDOWN with it preferred) unless it does already.
async fn move_leader_to(nc: &async_nats::Client, name: &str) {
    let info = info_with_leader(nc, "REP").await;
    if info["cluster"]["leader"] == name {
        return;
    }
    let body = json!({"placement": {"preferred": name}});
    let r = api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.REP", body).await;
    assert_eq!(r["success"], true, "{r}");
    wait_for(&format!("{name} leads REP"), SETTLE, || async {
        let info = try_api(nc, "$JS.API.STREAM.INFO.REP", &Value::Null).await?;
        (info["cluster"]["leader"] == name).then_some(())
    })
    .await;
}

/// Every message of `acked` is stored at its acknowledged sequence, read through the leader.
async fn assert_stored(nc: &async_nats::Client, acked: &[(u64, String)]) {
    for (seq, id) in acked {
        let got = api(nc, "$JS.API.STREAM.MSG.GET.REP", json!({ "seq": seq })).await;
        let data = got["message"]["data"].as_str().unwrap_or_default();
        let payload = base64_text(data);
        assert_eq!(&payload, id, "message {seq}: {got}");
    }
}

/// Each acknowledged publish has its own sequence, and they are 1..=N in order (one
/// publisher, one message at a time: a retry is answered with the first sequence).
fn assert_sequences(acked: &[(u64, String)], first: u64) {
    let seqs: Vec<u64> = acked.iter().map(|(s, _)| *s).collect();
    let want: Vec<u64> = (first..first + acked.len() as u64).collect();
    assert_eq!(seqs, want, "acknowledged sequences");
}

/// Checks every replica: moves the leadership to each in turn and reads `acked` through it.
async fn assert_on_every_replica(nc: &async_nats::Client, acked: &[(u64, String)]) {
    let info = wait_replicas(nc, replica_names_count(nc).await).await;
    for name in replica_names(&info) {
        move_leader_to(nc, &name).await;
        assert_stored(nc, acked).await;
    }
}

async fn replica_names_count(nc: &async_nats::Client) -> u64 {
    let info = info_with_leader(nc, "REP").await;
    info["config"]["num_replicas"].as_u64().unwrap_or(1)
}

#[tokio::test]
async fn r1_to_r3_and_back_to_r1_under_publishes_keeps_every_acknowledged_message() {
    let cluster = Cluster::start(3, "rep").await.expect("cluster");
    let mut clients = Vec::new();
    for i in 0..3 {
        clients.push(connect(cluster.node(i)).await);
    }
    let nc = clients[0].clone();
    let created = api(&nc, "$JS.API.STREAM.CREATE.REP", rep(1, None)).await;
    assert!(created["error"].is_null(), "{created}");
    for i in 0..5 {
        let id = format!("c{i}");
        publish_acked(&nc, "rep.a", &id, &id).await;
    }
    let consumer =
        json!({"stream_name": "REP", "config": {"durable_name": "C", "ack_policy": "explicit"}});
    let r = api(&nc, "$JS.API.CONSUMER.DURABLE.CREATE.REP.C", consumer).await;
    assert!(r["error"].is_null(), "{r}");
    // The first pull may come before the new consumer answers on that node.
    let got = wait_for("three deliveries", SETTLE, || async {
        let got = pull(&clients[1], "REP", "C", 3, Duration::from_secs(3)).await;
        (got.len() == 3).then_some(got)
    })
    .await;
    for d in &got {
        assert!(ack_sync(&clients[1], d, Duration::from_secs(5)).await);
    }

    let publisher = Publisher::start(clients.clone());
    publisher.wait_more(20).await;
    let up = api(&clients[2], "$JS.API.STREAM.UPDATE.REP", rep(3, None)).await;
    assert!(up["error"].is_null(), "{up}");
    assert_eq!(up["config"]["num_replicas"], 3, "{up}");
    let info = wait_replicas(&nc, 3).await;
    assert_eq!(replica_names(&info).len(), 3, "{info}");
    publisher.wait_more(20).await;
    // Every replica holds every message acknowledged so far.
    let so_far = publisher.acked();
    assert_on_every_replica(&nc, &so_far).await;

    publisher.wait_more(20).await;
    let down = api(&clients[1], "$JS.API.STREAM.UPDATE.REP", rep(1, None)).await;
    assert!(down["error"].is_null(), "{down}");
    wait_replicas(&nc, 1).await;
    publisher.wait_more(20).await;
    let acked = publisher.finish().await;
    assert_sequences(&acked, 6);
    assert_stored(&nc, &acked).await;
    let info = info_with_leader(&nc, "REP").await;
    assert_eq!(info["state"]["messages"], acked.len() as u64 + 5, "{info}");
    assert!(
        info["cluster"]["replicas"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{info}"
    );
    // The consumer kept its position through both changes.
    let c = api(&nc, "$JS.API.CONSUMER.INFO.REP.C", Value::Null).await;
    assert_eq!(c["ack_floor"]["stream_seq"], 3, "{c}");
    let next = pull(&clients[0], "REP", "C", 1, Duration::from_secs(3)).await;
    assert_eq!(next.first().map(|d| d.stream_seq), Some(4));
    // More replicas than nodes.
    let err = api(&nc, "$JS.API.STREAM.UPDATE.REP", rep(5, None)).await;
    assert_eq!(err["error"]["err_code"], 10005, "{err}");
    assert_eq!(
        err["error"]["description"], "no suitable peers for placement",
        "{err}"
    );
}

#[tokio::test]
async fn r3_to_r5_on_five_nodes_under_publishes() {
    let cluster = Cluster::start(5, "rep5").await.expect("cluster");
    let mut clients = Vec::new();
    for i in 0..5 {
        clients.push(connect(cluster.node(i)).await);
    }
    let nc = clients[0].clone();
    let created = api(&nc, "$JS.API.STREAM.CREATE.REP", rep(3, None)).await;
    assert!(created["error"].is_null(), "{created}");
    wait_replicas(&nc, 3).await;
    let publisher = Publisher::start(clients.clone());
    publisher.wait_more(20).await;
    let up = api(&clients[3], "$JS.API.STREAM.UPDATE.REP", rep(5, None)).await;
    assert!(up["error"].is_null(), "{up}");
    let info = wait_replicas(&nc, 5).await;
    assert_eq!(replica_names(&info).len(), 5, "{info}");
    publisher.wait_more(20).await;
    let acked = publisher.finish().await;
    assert_sequences(&acked, 1);
    assert_on_every_replica(&nc, &acked).await;
}

#[tokio::test]
async fn placement_tags_place_move_and_refuse_streams_as_nats_server_does() {
    let configs = [
        "server_tags: [\"ssd\", \"AZ:1\"]",
        "server_tags: [\"ssd\", \"az:2\"]",
        "server_tags: \"hdd\"",
    ]
    .map(String::from);
    let cluster = Cluster::start_with_configs(3, "tags", &configs)
        .await
        .expect("cluster");
    let nc = connect(cluster.node(0)).await;
    let varz = cluster.node(0).monitor_json("/varz").await.expect("varz");
    assert_eq!(varz["tags"], json!(["ssd", "az:1"]), "lower-cased");
    let varz = cluster.node(2).monitor_json("/varz").await.expect("varz");
    assert_eq!(varz["tags"], json!(["hdd"]));

    let create = |cfg: Value| {
        let nc = nc.clone();
        async move { api(&nc, "$JS.API.STREAM.CREATE.REP", cfg).await }
    };
    let err = create(rep(1, Some(json!({"tags": ["nvme"]})))).await;
    assert_eq!(err["error"]["err_code"], 10005, "{err}");
    assert_eq!(
        err["error"]["description"],
        "no suitable peers for placement, tags not matched ['nvme']"
    );
    let err = create(rep(3, Some(json!({"tags": ["ssd"]})))).await;
    assert_eq!(
        err["error"]["description"], "no suitable peers for placement, tags not matched ['ssd']",
        "{err}"
    );
    let err = create(rep(1, Some(json!({"cluster": "elsewhere"})))).await;
    assert_eq!(err["error"]["err_code"], 10005, "{err}");
    assert_eq!(
        err["error"]["description"], "no suitable peers for placement",
        "{err}"
    );

    // Only n3 has `hdd`.
    let created = create(rep(1, Some(json!({"tags": ["HDD"]})))).await;
    assert!(created["error"].is_null(), "{created}");
    let info = info_with_leader(&nc, "REP").await;
    assert_eq!(info["cluster"]["leader"], "n3", "{info}");
    for i in 0..5 {
        let id = format!("m{i}");
        publish_acked(&nc, "rep.a", &id, &id).await;
    }
    // A new count and a new placement at once: refused.
    let err = api(
        &nc,
        "$JS.API.STREAM.UPDATE.REP",
        rep(2, Some(json!({"tags": ["ssd"]}))),
    )
    .await;
    assert_eq!(err["error"]["err_code"], 10123, "{err}");
    // A new placement moves the stream to the node that fits, with its messages.
    let moved = update_settled(&nc, rep(1, Some(json!({"tags": ["az:2"]})))).await;
    assert!(moved["error"].is_null(), "{moved}");
    wait_for("REP on n2", SETTLE, || async {
        let info = try_api(&nc, "$JS.API.STREAM.INFO.REP", &Value::Null).await?;
        (info["cluster"]["leader"] == "n2" && info["state"]["messages"] == 5).then_some(())
    })
    .await;
    let acked: Vec<(u64, String)> = (0..5).map(|i| (i + 1, format!("m{i}"))).collect();
    assert_stored(&nc, &acked).await;
    // Two replicas with `ssd`: n1 and n2; a third does not fit.
    let r2 = update_settled(&nc, rep(1, Some(json!({"tags": ["ssd"]})))).await;
    assert!(r2["error"].is_null(), "{r2}");
    let r2 = update_settled(&nc, rep(2, Some(json!({"tags": ["ssd"]})))).await;
    assert!(r2["error"].is_null(), "{r2}");
    let info = wait_replicas(&nc, 2).await;
    let mut names = replica_names(&info);
    names.sort();
    assert_eq!(names, ["n1", "n2"]);
    let err = update_settled(&nc, rep(3, Some(json!({"tags": ["ssd"]})))).await;
    assert_eq!(
        err["error"]["description"], "no suitable peers for placement, tags not matched ['ssd']",
        "{err}"
    );
}

/// STREAM.UPDATE of REP once no move is in progress (nats-server refuses an update with
/// 10124 until the previous move finished; jetraft takes the next change at once).
async fn update_settled(nc: &async_nats::Client, cfg: Value) -> Value {
    wait_for("an update without a move in progress", SETTLE, || async {
        let r = try_api(nc, "$JS.API.STREAM.UPDATE.REP", &cfg).await?;
        (r["error"]["err_code"] != 10124).then_some(r)
    })
    .await
}

/// The meta leader's name, from `/jsz` of node `i`.
async fn meta_leader(cluster: &Cluster) -> String {
    wait_for("meta leader", SETTLE, || async {
        let jsz = cluster.node(0).monitor_json("/jsz").await.ok()?;
        let leader = jsz["meta_cluster"]["leader"].as_str()?.to_string();
        (!leader.is_empty()).then_some(leader)
    })
    .await
}

#[tokio::test]
async fn meta_leader_stepdown_with_a_preferred_placement_and_drain() {
    if server_kind() != ServerKind::Jetraft {
        // nats-server: META.LEADER.STEPDOWN only from the system account; no drain.
        return;
    }
    let configs = ["server_tags: a", "server_tags: a", "server_tags: b"].map(String::from);
    let cluster = Cluster::start_with_configs(3, "drain", &configs)
        .await
        .expect("cluster");
    let nc = connect(cluster.node(0)).await;
    let leader = meta_leader(&cluster).await;
    let step = |body: Value| {
        let nc = nc.clone();
        async move { api(&nc, "$JS.API.META.LEADER.STEPDOWN", body).await }
    };
    let err = step(json!({"placement": {"preferred": leader}})).await;
    assert_eq!(err["error"]["err_code"], 10005, "{err}");
    assert_eq!(
        err["error"]["description"],
        format!("preferred server \"{leader}\" is already leader")
    );
    let err = step(json!({"placement": {"tags": ["zzz"]}})).await;
    assert_eq!(
        err["error"]["description"], "no replacement peer connected",
        "{err}"
    );
    let target = if leader == "n3" { "n1" } else { "n3" };
    let r = step(json!({"placement": {"preferred": target}})).await;
    assert_eq!(r["success"], true, "{r}");
    wait_for("the preferred server leads", SETTLE, || async {
        (meta_leader(&cluster).await == target).then_some(())
    })
    .await;

    // Drain n3 (the meta leader if `target` is n3), which also leads an R3 stream.
    let created = api(&nc, "$JS.API.STREAM.CREATE.REP", rep(3, None)).await;
    assert!(created["error"].is_null(), "{created}");
    wait_replicas(&nc, 3).await;
    move_leader_to(&nc, "n3").await;
    let n3 = cluster.node(2);
    let drained = http::request(n3.http_port(), "POST", "/drainz")
        .await
        .expect("POST /drainz");
    assert_eq!(drained.status, 200, "{}", drained.body);
    let status = wait_for("n3 leads nothing", SETTLE, || async {
        let s = n3.monitor_json("/drainz").await.ok()?;
        (s["drained"] == true
            && s["meta_leader"] == false
            && s["stream_leaders"].as_array().is_some_and(Vec::is_empty))
        .then_some(s)
    })
    .await;
    assert_eq!(status["server_name"], "n3");
    assert_ne!(meta_leader(&cluster).await, "n3");
    let info = info_with_leader(&nc, "REP").await;
    assert_ne!(info["cluster"]["leader"], "n3", "{info}");
    // The stream keeps answering; step-downs never pick n3.
    publish_acked(&nc, "rep.a", "during", "during").await;
    let r = step(Value::Null).await;
    assert_eq!(r["success"], true, "{r}");
    assert_ne!(meta_leader(&cluster).await, "n3");

    let undrained = http::request(n3.http_port(), "DELETE", "/drainz")
        .await
        .expect("DELETE /drainz");
    assert_eq!(undrained.status, 200, "{}", undrained.body);
    assert_eq!(undrained.json().expect("json")["drained"], false);
    let r = step(json!({"placement": {"preferred": "n3"}})).await;
    assert_eq!(r["success"], true, "{r}");
    wait_for("n3 leads again", SETTLE, || async {
        (meta_leader(&cluster).await == "n3").then_some(())
    })
    .await;
}
