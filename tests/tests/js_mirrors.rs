//! Mirrors and sources (spec nats-protocol-and-jetstream.md §9): a mirror keeps the origin's
//! sequences and times, sources merge filtered and transformed origins, STREAM.INFO reports
//! `mirror`/`sources`, bad configs get nats-server's errors, and on a cluster a mirror copies
//! across nodes and catches up after the origin's node was stopped and restarted.
//!
//! Every test first ran against the real nats-server (`JETRAFT_TEST_SERVER=nats-server`).

use std::time::Duration;

use bytes::Bytes;
use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::jsapi::{api, try_api};
use jetraft_tests::harness::{assert_clean_log, wait_for, within};
use jetraft_tests::harness::{connect, start_server};
use serde_json::{Value, json};

const OP: Duration = Duration::from_secs(10);
/// Bound on copying to converge (and on elections after a restart).
const CONVERGE: Duration = Duration::from_secs(30);

async fn create(nc: &async_nats::Client, config: Value) -> Value {
    let name = config["name"].as_str().expect("name").to_string();
    api(nc, &format!("$JS.API.STREAM.CREATE.{name}"), config).await
}

/// Publishes until acknowledged; returns the PubAck.
async fn publish(nc: &async_nats::Client, subject: &str, body: &str) -> Value {
    wait_for("publish ack", CONVERGE, || {
        let nc = nc.clone();
        let subject = subject.to_string();
        let body = Bytes::from(body.to_string());
        async move {
            let req = nc.request(subject, body);
            let msg = tokio::time::timeout(Duration::from_secs(2), req)
                .await
                .ok()?
                .ok()?;
            let ack: Value = serde_json::from_slice(&msg.payload).ok()?;
            ack["seq"].as_u64().is_some().then_some(ack)
        }
    })
    .await
}

/// Waits until `stream`'s info satisfies `done` and returns it.
async fn info_until(
    nc: &async_nats::Client,
    stream: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let subject = format!("$JS.API.STREAM.INFO.{stream}");
    let info = wait_for(what, CONVERGE, || {
        let nc = nc.clone();
        let subject = subject.clone();
        async move {
            let info = try_api(&nc, &subject, &Value::Null).await?;
            info["error"].is_null().then_some(info)
        }
    });
    let mut info = info.await;
    let deadline = tokio::time::Instant::now() + CONVERGE;
    while !done(&info) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}: {info}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Some(i) = try_api(nc, &subject, &Value::Null).await
            && i["error"].is_null()
        {
            info = i;
        }
    }
    info
}

async fn get(nc: &async_nats::Client, stream: &str, seq: u64) -> Value {
    api(
        nc,
        &format!("$JS.API.STREAM.MSG.GET.{stream}"),
        json!({"seq": seq}),
    )
    .await
}

fn header_block(msg: &Value) -> String {
    let b64 = msg["message"]["hdrs"].as_str().unwrap_or_default();
    String::from_utf8(decode_b64(b64)).expect("utf-8 headers")
}

/// Standard base64 decoding (test-local, to avoid a dependency).
fn decode_b64(text: &str) -> Vec<u8> {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let (mut acc, mut bits, mut out) = (0u32, 0u32, Vec::new());
    for c in text.bytes().filter(|c| *c != b'=') {
        let v = A.iter().position(|a| *a == c).expect("base64") as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((acc >> bits) & 0xff) as u8);
        }
    }
    out
}

/// The `sources` entry of a stream info for origin `name` (`Null` when absent).
fn source_info(info: &Value, name: &str) -> Value {
    info["sources"]
        .as_array()
        .and_then(|all| all.iter().find(|s| s["name"] == name))
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn mirror_keeps_origin_sequences_times_and_gaps() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let r = create(
        &nc,
        json!({"name": "ORIG", "subjects": ["orig.>"], "allow_direct": true}),
    )
    .await;
    assert!(r["error"].is_null(), "{r}");
    for (i, s) in ["orig.a", "orig.b", "orig.a"].iter().enumerate() {
        publish(&nc, s, &format!("m{i}")).await;
    }
    let del = api(&nc, "$JS.API.STREAM.MSG.DELETE.ORIG", json!({"seq": 2})).await;
    assert_eq!(del["success"], true, "{del}");

    let m = create(&nc, json!({"name": "M", "mirror": {"name": "ORIG"}})).await;
    assert!(m["error"].is_null(), "{m}");
    // Observed: a mirror of an allow_direct origin gets mirror_direct, and has no subjects.
    assert_eq!(m["config"]["mirror_direct"], true, "{m}");
    assert!(m["config"]["subjects"].is_null(), "{m}");
    assert_eq!(m["mirror"]["name"], "ORIG", "{m}");
    assert_eq!(m["mirror"]["active"], -1, "{m}");

    let info = info_until(&nc, "M", "mirror copied", |i| {
        i["state"]["last_seq"] == 3 && i["mirror"]["active"].as_i64().unwrap_or(-1) >= 0
    })
    .await;
    assert_eq!(info["state"]["messages"], 2, "{info}");
    assert_eq!(info["state"]["first_seq"], 1, "{info}");
    assert_eq!(info["state"]["num_deleted"], 1, "{info}");
    assert_eq!(info["mirror"]["name"], "ORIG", "{info}");
    assert_eq!(info["mirror"]["lag"], 0, "{info}");
    assert!(info["mirror"]["error"].is_null(), "{info}");

    for seq in [1, 3] {
        let o = get(&nc, "ORIG", seq).await;
        let c = get(&nc, "M", seq).await;
        assert_eq!(c["message"]["subject"], o["message"]["subject"], "{c}");
        assert_eq!(c["message"]["data"], o["message"]["data"], "{c}");
        assert_eq!(c["message"]["time"], o["message"]["time"], "{c}");
        assert!(!header_block(&c).contains("Nats-Stream-Source"), "{c}");
    }
    let gap = get(&nc, "M", 2).await;
    assert_eq!(gap["error"]["err_code"], 10037, "{gap}");

    // New origin messages keep flowing; a publish to a mirror-only subject has no stream.
    publish(&nc, "orig.c", "m3").await;
    let info = info_until(&nc, "M", "mirror caught up", |i| {
        i["state"]["last_seq"] == 4
    })
    .await;
    assert_eq!(info["state"]["messages"], 3, "{info}");
    assert_clean_log(&srv);
}

#[tokio::test]
async fn sources_merge_filtered_and_transformed_origins() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    create(&nc, json!({"name": "ORIG", "subjects": ["orig.>"]})).await;
    create(&nc, json!({"name": "ORIG2", "subjects": ["o2.>"]})).await;
    for s in ["orig.a", "orig.b", "o2.b", "o2.c", "orig.a"] {
        publish(&nc, s, s).await;
    }
    let s = create(
        &nc,
        json!({"name": "S", "subjects": ["s.>"], "sources": [
            {"name": "ORIG", "filter_subject": "orig.a"},
            {"name": "ORIG2", "subject_transforms": [{"src": "o2.b", "dest": "tr.b"}]}
        ]}),
    )
    .await;
    assert!(s["error"].is_null(), "{s}");
    // nats-server lists the sources of a response in no fixed order: look them up by name.
    let orig = source_info(&s, "ORIG");
    assert_eq!(orig["filter_subject"], "orig.a", "{s}");
    assert_eq!(orig["active"], -1, "{s}");
    assert_eq!(
        source_info(&s, "ORIG2")["subject_transforms"],
        json!([{"src": "o2.b", "dest": "tr.b"}]),
        "{s}"
    );

    let info = info_until(&nc, "S", "sources copied", |i| {
        // `seq` (origin sequence last copied) can trail the copies briefly on nats-server.
        let (orig, orig2) = (source_info(i, "ORIG"), source_info(i, "ORIG2"));
        i["state"]["messages"] == 3
            && orig["lag"] == 0
            && orig["seq"] == 3
            && orig2["seq"] == 1
            && orig2["active"].as_i64().unwrap_or(-1) >= 0
    })
    .await;
    assert!(source_info(&info, "ORIG")["error"].is_null(), "{info}");
    // Sourced messages get new sequences; the stream still takes its own publishes.
    let own = publish(&nc, "s.x", "mine").await;
    assert_eq!(own["stream"], "S");
    assert_eq!(own["seq"], 4, "{own}");

    let mut subjects = Vec::new();
    for seq in 1..=3 {
        let m = get(&nc, "S", seq).await;
        let subject = m["message"]["subject"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let hdrs = header_block(&m);
        let origin = if subject == "tr.b" {
            "ORIG2 1 "
        } else {
            "ORIG "
        };
        assert!(
            hdrs.contains(&format!("Nats-Stream-Source: {origin}")),
            "{subject}: {hdrs:?}"
        );
        subjects.push(subject);
    }
    subjects.sort();
    assert_eq!(subjects, ["orig.a", "orig.a", "tr.b"]);
    assert_clean_log(&srv);
}

#[tokio::test]
async fn source_of_missing_origin_reports_error_then_catches_up() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let s = create(
        &nc,
        json!({"name": "S", "subjects": ["s.>"], "sources": [{"name": "LATER"}]}),
    )
    .await;
    assert!(s["error"].is_null(), "{s}");
    let info = info_until(&nc, "S", "missing origin error", |i| {
        i["sources"][0]["error"]["err_code"] == 10059
    })
    .await;
    assert_eq!(info["sources"][0]["error"]["code"], 404, "{info}");
    create(&nc, json!({"name": "LATER", "subjects": ["later"]})).await;
    publish(&nc, "later", "x").await;
    let info = info_until(&nc, "S", "source copied", |i| {
        i["state"]["messages"] == 1 && i["sources"][0]["error"].is_null()
    })
    .await;
    assert_eq!(info["sources"][0]["lag"], 0, "{info}");
}

#[tokio::test]
async fn mirror_and_source_config_errors_match_nats_server() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    create(&nc, json!({"name": "ORIG", "subjects": ["orig.>"]})).await;
    let cases = [
        (
            json!({"name": "B1", "subjects": ["x"], "mirror": {"name": "ORIG"}}),
            10034,
        ),
        (
            json!({"name": "B2", "mirror": {"name": "ORIG"}, "sources": [{"name": "ORIG"}]}),
            10031,
        ),
        (
            json!({"name": "B3", "sources": [{"name": "ORIG"}, {"name": "ORIG"}]}),
            10140,
        ),
        (
            json!({"name": "B4", "sources": [{"name": "ORIG", "filter_subject": "orig.a",
                "subject_transforms": [{"src": "orig.b", "dest": "x"}]}]}),
            10144,
        ),
        (json!({"name": "B5", "mirror_direct": true}), 10052),
        (json!({"name": "B6", "mirror": {"name": "B6"}}), 10052),
        (
            json!({"name": "B7", "sources": [{"name": "ORIG", "subject_transforms": [
                {"src": "orig.>", "dest": "a.>"}, {"src": "orig.a", "dest": "b"}]}]}),
            10147,
        ),
        (
            json!({"name": "B8", "sources": [{"name": "ORIG", "subject_transforms": [
                {"src": "orig.*", "dest": "x.$2"}]}]}),
            10146,
        ),
        (json!({"name": "B9", "mirror": {"name": ""}}), 10142),
    ];
    for (cfg, code) in cases {
        let r = create(&nc, cfg.clone()).await;
        assert_eq!(r["error"]["err_code"], code, "{cfg} -> {r}");
    }
    let m = create(&nc, json!({"name": "M", "mirror": {"name": "ORIG"}})).await;
    assert!(m["error"].is_null(), "{m}");
    // Without allow_direct on the origin there is no mirror_direct.
    assert_eq!(m["config"]["mirror_direct"], false, "{m}");
    let u = api(
        &nc,
        "$JS.API.STREAM.UPDATE.M",
        json!({"name": "M", "mirror": {"name": "OTHER"}}),
    )
    .await;
    assert_eq!(u["error"]["err_code"], 10055, "{u}");
    let u = api(
        &nc,
        "$JS.API.STREAM.UPDATE.M",
        json!({"name": "M", "mirror": {"name": "ORIG"}, "subjects": ["zz"]}),
    )
    .await;
    assert_eq!(u["error"]["err_code"], 10034, "{u}");
}

#[tokio::test]
async fn mirror_direct_answers_direct_get_for_the_origin() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    create(
        &nc,
        json!({"name": "ORIG", "subjects": ["orig.>"], "allow_direct": true}),
    )
    .await;
    publish(&nc, "orig.a", "v1").await;
    create(&nc, json!({"name": "M", "mirror": {"name": "ORIG"}})).await;
    info_until(&nc, "M", "mirror copied", |i| i["state"]["last_seq"] == 1).await;
    let msg = within(
        OP,
        "direct get",
        nc.request("$JS.API.DIRECT.GET.ORIG", Bytes::from(r#"{"seq":1}"#)),
    )
    .await
    .expect("direct get answer");
    assert_eq!(msg.payload, Bytes::from_static(b"v1"));
    let h = msg.headers.expect("headers");
    assert_eq!(
        h.get("Nats-Subject").map(|v| v.as_str().to_string()),
        Some("orig.a".to_string())
    );
}

/// The node index whose server name is `name`.
fn index_of(cluster: &Cluster, name: &str) -> usize {
    (0..cluster.len())
        .find(|&i| cluster.node(i).name() == name)
        .unwrap_or_else(|| panic!("no node named {name}"))
}

#[tokio::test]
async fn r3_mirror_copies_an_r1_origin_across_nodes() {
    let cluster = Cluster::start(3, "mir").await.expect("cluster");
    let c0 = connect(cluster.node(0)).await;
    let r = create(&c0, json!({"name": "ORIG", "subjects": ["orig.>"]})).await;
    assert!(r["error"].is_null(), "{r}");
    for i in 0..20 {
        publish(&c0, &format!("orig.{}", i % 3), &format!("m{i}")).await;
    }
    let m = create(
        &c0,
        json!({"name": "M", "mirror": {"name": "ORIG"}, "num_replicas": 3}),
    )
    .await;
    assert!(m["error"].is_null(), "{m}");
    // Every node answers with the same copy, whichever node leads the mirror.
    for i in 0..3 {
        let nc = connect(cluster.node(i)).await;
        let info = info_until(&nc, "M", "mirror copied", |i| {
            i["state"]["messages"] == 20 && i["state"]["last_seq"] == 20
        })
        .await;
        assert_eq!(info["mirror"]["name"], "ORIG", "{info}");
        let got = get(&nc, "M", 7).await;
        assert_eq!(got["message"]["subject"], "orig.0", "{got}");
    }
    // The origin's info lists where it can be read: itself and its mirror, in this cluster.
    let orig = api(&c0, "$JS.API.STREAM.INFO.ORIG", Value::Null).await;
    let alternates = orig["alternates"].as_array().cloned().unwrap_or_default();
    let mut names: Vec<&str> = alternates
        .iter()
        .filter_map(|a| a["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["M", "ORIG"], "{orig}");
    let cluster = &orig["cluster"]["name"];
    assert!(
        alternates.iter().all(|a| &a["cluster"] == cluster),
        "{orig}"
    );
    // A new mirror leader resumes from the replicated position: no duplicates, no holes.
    let stepped = api(&c0, "$JS.API.STREAM.LEADER.STEPDOWN.M", Value::Null).await;
    assert_eq!(stepped["success"], true, "{stepped}");
    for i in 20..30 {
        publish(&c0, &format!("orig.{}", i % 3), &format!("m{i}")).await;
    }
    let info = info_until(&c0, "M", "copies after stepdown", |i| {
        i["state"]["last_seq"] == 30 && i["mirror"]["lag"] == 0
    })
    .await;
    assert_eq!(info["state"]["messages"], 30, "{info}");
}

#[tokio::test]
async fn mirror_catches_up_after_the_origin_node_restarts() {
    let mut cluster = Cluster::start(3, "mir").await.expect("cluster");
    let c0 = connect(cluster.node(0)).await;
    create(&c0, json!({"name": "ORIG", "subjects": ["orig.>"]})).await;
    let origin_info = info_until(&c0, "ORIG", "origin leader", |i| {
        i["cluster"]["leader"]
            .as_str()
            .is_some_and(|l| !l.is_empty())
    })
    .await;
    let origin_node = index_of(
        &cluster,
        origin_info["cluster"]["leader"]
            .as_str()
            .unwrap_or_default(),
    );
    let other = (origin_node + 1) % 3;
    let nc = connect(cluster.node(other)).await;
    create(
        &nc,
        json!({"name": "M", "mirror": {"name": "ORIG"}, "num_replicas": 3}),
    )
    .await;
    for i in 0..10 {
        publish(&nc, "orig.a", &format!("a{i}")).await;
    }
    info_until(&nc, "M", "first copies", |i| i["state"]["last_seq"] == 10).await;
    // Keep the mirror's leader off the origin's node, so the copying side stays up: nats-server
    // retries a mirror whose new leader never reached the origin only after a long backoff.
    let origin_name = cluster.node(origin_node).name().to_string();
    for _ in 0..5 {
        let info = info_until(&nc, "M", "mirror leader", |i| {
            i["cluster"]["leader"]
                .as_str()
                .is_some_and(|l| !l.is_empty())
        })
        .await;
        if info["cluster"]["leader"] != origin_name.as_str() {
            break;
        }
        api(&nc, "$JS.API.STREAM.LEADER.STEPDOWN.M", Value::Null).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    cluster
        .stop_within(origin_node, Duration::from_secs(20))
        .await
        .expect("stop origin node");
    // The mirror (R3) stays available while its origin is gone.
    let info = info_until(&nc, "M", "mirror without origin", |i| {
        i["state"]["messages"] == 10
    })
    .await;
    assert_eq!(info["mirror"]["name"], "ORIG", "{info}");
    // Let the copy task fail against the missing origin for a while (retry with backoff).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let down = api(&nc, "$JS.API.STREAM.INFO.M", Value::Null).await;
    assert_eq!(down["state"]["messages"], 10, "{down}");
    // Both servers: no contact while the origin is gone, and no error for an origin
    // that exists but cannot be reached.
    assert!(
        down["mirror"]["active"].as_i64().unwrap_or(0) >= 1_000_000_000,
        "{down}"
    );
    assert!(down["mirror"]["error"].is_null(), "{down}");

    cluster
        .restart(origin_node)
        .await
        .expect("restart origin node");
    for i in 0..10 {
        publish(&nc, "orig.b", &format!("b{i}")).await;
    }
    let info = info_until(&nc, "M", "mirror caught up", |i| {
        i["state"]["last_seq"] == 20 && i["mirror"]["lag"] == 0
    })
    .await;
    assert_eq!(info["state"]["messages"], 20, "{info}");
    let got = get(&nc, "M", 15).await;
    assert_eq!(got["message"]["subject"], "orig.b", "{got}");
}

#[tokio::test]
async fn mirror_answers_direct_gets_for_its_stopped_origin() {
    let mut cluster = Cluster::start(3, "mdir").await.expect("cluster");
    let c0 = connect(cluster.node(0)).await;
    create(
        &c0,
        json!({"name": "ORIG", "subjects": ["orig.>"], "allow_direct": true}),
    )
    .await;
    let origin_info = info_until(&c0, "ORIG", "origin leader", |i| {
        i["cluster"]["leader"]
            .as_str()
            .is_some_and(|l| !l.is_empty())
    })
    .await;
    let origin_node = index_of(
        &cluster,
        origin_info["cluster"]["leader"]
            .as_str()
            .unwrap_or_default(),
    );
    let other = (origin_node + 1) % 3;
    let nc = connect(cluster.node(other)).await;
    for i in 0..5 {
        publish(&nc, "orig.a", &format!("v{i}")).await;
    }
    let m = create(
        &nc,
        json!({"name": "M", "mirror": {"name": "ORIG"}, "num_replicas": 3}),
    )
    .await;
    assert_eq!(m["config"]["mirror_direct"], true, "{m}");
    info_until(&nc, "M", "mirror copied", |i| i["state"]["last_seq"] == 5).await;
    cluster
        .stop_within(origin_node, Duration::from_secs(20))
        .await
        .expect("stop origin node");
    // Only the mirror can answer now: the origin (R1) is down with its node.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let msg = loop {
        let answer = within(
            OP,
            "direct get",
            nc.request("$JS.API.DIRECT.GET.ORIG", Bytes::from(r#"{"seq":3}"#)),
        )
        .await;
        if let Ok(m) = answer
            && m.status.is_none()
        {
            break m;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no direct get answer from the mirror"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(msg.payload, Bytes::from_static(b"v2"));
    let h = msg.headers.expect("headers");
    let header = |k: &str| h.get(k).map(|v| v.as_str().to_string());
    assert_eq!(header("Nats-Subject").as_deref(), Some("orig.a"));
    assert_eq!(header("Nats-Sequence").as_deref(), Some("3"));
    assert_eq!(header("Nats-Stream").as_deref(), Some("M"));
}

#[tokio::test]
async fn an_update_without_mirror_promotes_the_mirror_to_a_normal_stream() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    create(&nc, json!({"name": "PO", "subjects": ["po.>"]})).await;
    for i in 0..3 {
        publish(&nc, "po.a", &format!("m{i}")).await;
    }
    create(&nc, json!({"name": "PM", "mirror": {"name": "PO"}})).await;
    info_until(&nc, "PM", "mirror copied", |i| i["state"]["messages"] == 3).await;
    // Changing the mirror is refused; dropping it (with subjects of its own) promotes it.
    let r = api(
        &nc,
        "$JS.API.STREAM.UPDATE.PM",
        json!({"name": "PM", "mirror": {"name": "OTHER"}}),
    )
    .await;
    assert_eq!(r["error"]["err_code"], 10055, "{r}");
    let r = api(
        &nc,
        "$JS.API.STREAM.UPDATE.PM",
        json!({"name": "PM", "subjects": ["pm.>"]}),
    )
    .await;
    assert!(r["error"].is_null(), "{r}");
    assert!(r["config"].get("mirror").is_none(), "{r}");
    assert!(r.get("mirror").is_none(), "{r}");
    // It keeps what it copied, takes publishes on its own subjects, and copies no more.
    let ack = publish(&nc, "pm.x", "own").await;
    assert_eq!(ack, json!({"stream": "PM", "seq": 4}));
    publish(&nc, "po.a", "after").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let info = api(&nc, "$JS.API.STREAM.INFO.PM", Value::Null).await;
    assert_eq!(info["state"]["messages"], 4, "{info}");
    assert_eq!(info["state"]["last_seq"], 4, "{info}");
    assert!(info.get("mirror").is_none(), "{info}");
}
