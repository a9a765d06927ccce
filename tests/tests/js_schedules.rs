//! Message schedules (ADR-51, nats-server 2.12, `allow_msg_schedules`) through async-nats on
//! one node: a message with `Nats-Schedule: @at <time>` and `Nats-Schedule-Target` is stored
//! as a schedule and, at its time, the stream stores its payload on the target subject (with
//! `Nats-Scheduler` and `Nats-Schedule-Next: purge`) and removes the schedule; nats-server's
//! error codes for bad schedules and configs.
//!
//! Runs against the real nats-server too (`JETRAFT_TEST_SERVER=nats-server`).

use std::time::Duration;

use async_nats::HeaderMap;
use jetraft_tests::harness::jsapi::api;
use jetraft_tests::harness::schedule::{at_in, fired, msg_headers, publish};
use jetraft_tests::harness::{connect, start_server};
use serde_json::{Value, json};

#[tokio::test]
async fn a_schedule_fires_once_at_its_time_onto_its_target() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let r = api(
        &nc,
        "$JS.API.STREAM.CREATE.SCH",
        json!({"name": "SCH", "subjects": ["sch.>"], "allow_msg_schedules": true,
               "allow_msg_ttl": true}),
    )
    .await;
    assert!(r["error"].is_null(), "{r}");
    // Schedules force roll-ups on (a schedule replaces the previous one on its subject).
    assert_eq!(r["config"]["allow_rollup_hdrs"], true, "{r}");
    let (at, at_ns) = at_in(Duration::from_secs(2));
    let mut h = HeaderMap::new();
    h.insert("Nats-Schedule", format!("@at {at}").as_str());
    h.insert("Nats-Schedule-Target", "sch.target");
    h.insert("Nats-Schedule-TTL", "60s");
    h.insert("Custom", "kept");
    let ack = publish(&nc, "sch.plan.1", h, "hello").await;
    assert_eq!(ack["seq"], 1, "{ack}");
    let stored = msg_headers(&api(&nc, "$JS.API.STREAM.MSG.GET.SCH", json!({"seq": 1})).await);
    assert!(stored.contains("Nats-Rollup: sub"), "{stored}");

    let msg = fired(&nc, "SCH", "sch.target").await;
    assert_eq!(msg["message"]["seq"], 2, "{msg}");
    let data = msg["message"]["data"].as_str().unwrap_or_default();
    assert_eq!(data, "aGVsbG8=", "payload hello");
    let hdrs = msg_headers(&msg);
    for want in [
        "Custom: kept",
        "Nats-Scheduler: sch.plan.1",
        "Nats-Schedule-Next: purge",
        "Nats-TTL: 60s",
    ] {
        assert!(hdrs.contains(want), "{want} missing in {hdrs}");
    }
    assert!(!hdrs.contains("Nats-Schedule:"), "{hdrs}");
    assert!(!hdrs.contains("Nats-Schedule-Target"), "{hdrs}");
    // Stored no earlier than its time.
    let time = msg["message"]["time"].as_str().expect("time");
    assert!(
        jetraft_tests::harness::schedule::parse_ns(time) >= at_ns,
        "{time} < {at}"
    );
    // The schedule is gone and nothing else fires.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let info = api(&nc, "$JS.API.STREAM.INFO.SCH", Value::Null).await;
    assert_eq!(info["state"]["messages"], 1, "{info}");
    assert_eq!(info["state"]["last_seq"], 2, "{info}");
}

#[tokio::test]
async fn a_newer_schedule_on_the_same_subject_replaces_the_older_one() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    api(
        &nc,
        "$JS.API.STREAM.CREATE.REP",
        json!({"name": "REP", "subjects": ["rep.>"], "allow_msg_schedules": true}),
    )
    .await;
    for body in ["first", "second"] {
        let mut h = HeaderMap::new();
        h.insert(
            "Nats-Schedule",
            format!("@at {}", at_in(Duration::from_secs(1)).0).as_str(),
        );
        h.insert("Nats-Schedule-Target", "rep.out");
        publish(&nc, "rep.plan", h, body).await;
    }
    let msg = fired(&nc, "REP", "rep.out").await;
    assert_eq!(
        msg["message"]["data"], "c2Vjb25k",
        "the second schedule fired: {msg}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let info = api(&nc, "$JS.API.STREAM.INFO.REP", Value::Null).await;
    assert_eq!(info["state"]["messages"], 1, "only one fired: {info}");
}

#[tokio::test]
async fn bad_schedules_and_configs_get_nats_server_codes() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    api(
        &nc,
        "$JS.API.STREAM.CREATE.OFF",
        json!({"name": "OFF", "subjects": ["off.>"]}),
    )
    .await;
    api(
        &nc,
        "$JS.API.STREAM.CREATE.ON",
        json!({"name": "ON", "subjects": ["on.>"], "allow_msg_schedules": true}),
    )
    .await;
    let at = format!("@at {}", at_in(Duration::from_secs(60)).0);
    let try_schedule = |subject: &'static str, pairs: Vec<(&'static str, String)>| {
        let nc = nc.clone();
        async move {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(k, v.as_str());
            }
            publish(&nc, subject, h, "x").await["error"]["err_code"].clone()
        }
    };
    let target = |t: &str| ("Nats-Schedule-Target", t.to_string());
    let pattern = |p: &str| ("Nats-Schedule", p.to_string());
    let cases = vec![
        ("off.a", vec![pattern(&at), target("off.b")], 10188),
        ("on.a", vec![pattern("@at soon"), target("on.b")], 10189),
        ("on.a", vec![pattern(&at), target("on.a")], 10190),
        ("on.a", vec![pattern(&at), target("elsewhere")], 10190),
        ("on.a", vec![pattern(&at)], 10190),
        (
            "on.a",
            vec![
                pattern(&at),
                target("on.b"),
                ("Nats-Schedule-TTL", "x".into()),
            ],
            10191,
        ),
        (
            "on.a",
            vec![
                pattern(&at),
                target("on.b"),
                ("Nats-Schedule-TTL", "5s".into()),
            ],
            10166,
        ),
        (
            "on.a",
            vec![
                pattern(&at),
                target("on.b"),
                ("Nats-Schedule-Rollup", "all".into()),
            ],
            10192,
        ),
        (
            "on.a",
            vec![pattern(&at), target("on.b"), ("Nats-Rollup", "all".into())],
            10192,
        ),
        ("on.a", vec![("Nats-Scheduler", "on.b".into())], 10212),
    ];
    for (subject, pairs, code) in cases {
        let got = try_schedule(subject, pairs.clone()).await;
        assert_eq!(got, code, "{subject} {pairs:?}");
    }
    let create = |cfg: Value| {
        let nc = nc.clone();
        async move {
            let name = cfg["name"].as_str().expect("name").to_string();
            api(&nc, &format!("$JS.API.STREAM.CREATE.{name}"), cfg).await
        }
    };
    let r =
        create(json!({"name": "M", "mirror": {"name": "ON"}, "allow_msg_schedules": true})).await;
    assert_eq!(r["error"]["err_code"], 10186, "{r}");
    let r = create(json!({"name": "S", "sources": [{"name": "ON"}], "allow_msg_schedules": true}))
        .await;
    assert_eq!(r["error"]["err_code"], 10187, "{r}");
    let r = create(
        json!({"name": "D", "subjects": ["d"], "allow_msg_schedules": true, "discard": "new"}),
    )
    .await;
    assert_eq!(r["error"]["err_code"], 10052, "{r}");
    assert_eq!(
        r["error"]["description"],
        "message scheduling cannot use discard new"
    );
    let r = api(
        &nc,
        "$JS.API.STREAM.UPDATE.ON",
        json!({"name": "ON", "subjects": ["on.>"], "allow_msg_schedules": false}),
    )
    .await;
    assert_eq!(r["error"]["err_code"], 10052, "{r}");
    assert_eq!(
        r["error"]["description"],
        "message schedules can not be disabled"
    );
}

#[tokio::test]
async fn a_pending_schedule_survives_a_restart() {
    let mut srv = start_server().await;
    let nc = connect(&srv).await;
    api(
        &nc,
        "$JS.API.STREAM.CREATE.RS",
        json!({"name": "RS", "subjects": ["rs.>"], "allow_msg_schedules": true}),
    )
    .await;
    let mut h = HeaderMap::new();
    h.insert(
        "Nats-Schedule",
        format!("@at {}", at_in(Duration::from_secs(3)).0).as_str(),
    );
    h.insert("Nats-Schedule-Target", "rs.out");
    publish(&nc, "rs.plan", h, "later").await;
    drop(nc);
    srv.restart().await.expect("restart");
    let nc = connect(&srv).await;
    let msg = fired(&nc, "RS", "rs.out").await;
    assert_eq!(msg["message"]["seq"], 2, "{msg}");
    let info = api(&nc, "$JS.API.STREAM.INFO.RS", Value::Null).await;
    assert_eq!(info["state"]["messages"], 1, "{info}");
}
