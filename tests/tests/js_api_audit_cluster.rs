//! The API audit advisory on a 3-node cluster: a request sent through one node and answered by
//! another (the meta leader, the stream leader) is audited exactly once, by the node that
//! answers it, naming the requester's account. Runs against nats-server too.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt as _;
use jetraft_tests::harness::{Cluster, jsapi, round_trip, within};
use serde_json::Value;

const OP: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_request_is_audited_once_in_the_cluster() {
    let mut cluster = Cluster::start(3, "audit").await.expect("start cluster");
    cluster.wait_formed().await.expect("formed");
    let watcher = async_nats::connect(cluster.node(2).client_url())
        .await
        .expect("connect");
    let requester = async_nats::connect(cluster.node(0).client_url())
        .await
        .expect("connect");
    let mut events = watcher
        .subscribe("$JS.EVENT.ADVISORY.API")
        .await
        .expect("sub");
    round_trip(&watcher).await;
    // Until the watcher's interest reached every node, audits may be missed: settle on a
    // request that is seen.
    let created = jsapi::api(
        &requester,
        "$JS.API.STREAM.CREATE.A",
        serde_json::json!({"name": "A", "subjects": ["a.>"], "num_replicas": 3}),
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");
    jsapi::info_with_leader(&requester, "A").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no audit reached the watcher"
        );
        jsapi::api(&requester, "$JS.API.STREAM.NAMES", Value::Null).await;
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(300), events.next()).await {
            break;
        }
    }
    // Drain what the settling produced: a marker request ends it.
    let marker = |n: u32| format!("$JS.API.STREAM.INFO.MARKER{n}");
    within(OP, "marker", requester.request(marker(0), "".into()))
        .await
        .expect("marker");
    loop {
        let m = within(OP, "audit", events.next()).await.expect("audit");
        let e: Value = serde_json::from_slice(&m.payload).expect("JSON");
        if e["subject"] == marker(0).as_str() {
            break;
        }
    }

    let requests = [
        "$JS.API.STREAM.INFO.A",
        "$JS.API.STREAM.NAMES",
        "$JS.API.INFO",
        "$JS.API.STREAM.INFO.NOPE",
    ];
    for subject in requests {
        within(OP, subject, requester.request(subject, "".into()))
            .await
            .unwrap_or_else(|e| panic!("{subject}: {e}"));
    }
    within(OP, "marker", requester.request(marker(1), "".into()))
        .await
        .expect("marker");
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    loop {
        let m = within(OP, "audit", events.next()).await.expect("audit");
        let e: Value = serde_json::from_slice(&m.payload).expect("JSON");
        let subject = e["subject"].as_str().expect("subject").to_string();
        if subject == marker(1) {
            break;
        }
        assert_eq!(e["client"]["acc"], "$G", "{e}");
        assert!(e["server"].is_string(), "{e}");
        *seen.entry(subject).or_default() += 1;
    }
    for subject in requests {
        assert_eq!(
            seen.get(subject),
            Some(&1),
            "{subject} audited once: {seen:?}"
        );
    }
    assert_eq!(seen.len(), requests.len(), "{seen:?}");
}
