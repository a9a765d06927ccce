//! The accounts' monitoring endpoints on one node: `/accountz` (names, and `?acc=` one
//! account's details: JetStream, connections, the configured exports and imports),
//! `/accstatz` (the accounts with connections, or all with `unused`, their connections and
//! client traffic) and `/jsz?acc=` (one account's details). Runs against nats-server too
//! (`JETRAFT_TEST_SERVER=nats-server NATS_SERVER_BIN=...`), which also lists the system
//! account's service imports in every account: those are left out of the comparison.

use std::time::Duration;

use futures_util::StreamExt as _;
use jetraft_tests::harness::{ServerOptions, ServerProcess, login, within};
use serde_json::{Value, json};

const OP: Duration = Duration::from_secs(5);

const CONFIG: &str = r#"
accounts {
  A: {
    users: [ { user: a, password: a } ]
    jetstream: enabled
    exports: [ { stream: "ev.>" }, { service: "svc.*", accounts: [B], response_type: stream } ]
  }
  B: {
    users: [ { user: b, password: b } ]
    jetstream: enabled
    imports: [
      { service: { account: A, subject: "svc.*" }, to: "ask.*" }
      { stream: { account: A, subject: "ev.>" }, prefix: fromA }
    ]
  }
  C: { users: [ { user: c, password: c } ] }
}
"#;

async fn get(srv: &ServerProcess, path: &str) -> Value {
    srv.monitor_json(path)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// The sorted strings of a JSON array.
fn sorted(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .into_iter()
        .flatten()
        .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn accountz_lists_accounts_and_details_as_nats_server() {
    let srv = ServerProcess::start(ServerOptions::with_config(CONFIG))
        .await
        .expect("start server");
    let _a = login(&srv, "a").await;
    let list = get(&srv, "/accountz").await;
    assert_eq!(list["system_account"], "$SYS", "{list}");
    assert_eq!(
        sorted(&list["accounts"]),
        ["$G", "$SYS", "A", "B", "C"],
        "{list}"
    );
    assert!(list["account_detail"].is_null(), "{list}");

    let a = get(&srv, "/accountz?acc=A").await;
    assert!(a["accounts"].is_null(), "{a}");
    let d = &a["account_detail"];
    assert_eq!(
        (
            &d["account_name"],
            &d["jetstream_enabled"],
            &d["client_connections"],
            &d["leafnode_connections"],
            &d["expired"],
            &d["complete"],
            &d["name_tag"],
        ),
        (
            &json!("A"),
            &json!(true),
            &json!(1),
            &json!(0),
            &json!(false),
            &json!(true),
            &json!("A")
        ),
        "{a}"
    );
    assert!(d["is_system"].is_null(), "{a}");
    assert!(d["update_time"].is_string(), "{a}");
    assert!(d["sublist_stats"]["num_subscriptions"].is_u64(), "{a}");
    assert_eq!(
        d["exports"],
        json!([
            {"subject": "svc.*", "type": "service", "response_type": "Streamed",
                "approved_accounts": ["B"]},
            {"subject": "ev.>", "type": "stream"},
        ]),
        "{a}"
    );

    let b = get(&srv, "/accountz?acc=B").await;
    let own: Vec<&Value> = b["account_detail"]["imports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["account"] != "$SYS")
        .collect();
    assert_eq!(
        own,
        [
            &json!({"subject": "ev.>", "account": "A", "local_subject": "fromA.ev.>",
                "type": "stream", "invalid": false, "share": false, "tracking": false}),
            &json!({"subject": "svc.*", "account": "A", "to": "ask.*", "local_subject": "ask.*",
                "type": "service", "invalid": false, "share": false, "tracking": false}),
        ],
        "{b}"
    );
    assert!(b["account_detail"]["exports"].is_null(), "{b}");
    let c = get(&srv, "/accountz?acc=C").await;
    assert_eq!(c["account_detail"]["jetstream_enabled"], false, "{c}");
    let sys = get(&srv, "/accountz?acc=$SYS").await;
    assert_eq!(sys["account_detail"]["is_system"], true, "{sys}");
    let missing = srv.http_get("/accountz?acc=nope").await.expect("GET");
    assert_eq!(
        (missing.status, missing.body.as_str()),
        (400, "Account nope does not exist")
    );
}

#[tokio::test]
async fn accstatz_counts_each_accounts_connections_and_traffic() {
    let srv = ServerProcess::start(ServerOptions::with_config(CONFIG))
        .await
        .expect("start server");
    let (a, _b) = (login(&srv, "a").await, login(&srv, "b").await);
    let mut sub = a.subscribe("x").await.expect("subscribe");
    a.flush().await.expect("flush");
    for _ in 0..3 {
        a.publish("x", "12345".into()).await.expect("publish");
    }
    a.flush().await.expect("flush");
    for _ in 0..3 {
        let m = within(OP, "delivery", sub.next()).await.expect("message");
        assert_eq!(m.payload.as_ref(), b"12345");
    }
    let statz = get(&srv, "/accstatz").await;
    let by_name = |statz: &Value| -> Vec<String> {
        sorted(&json!(
            statz["account_statz"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| s["acc"].clone())
                .collect::<Vec<_>>()
        ))
    };
    assert_eq!(by_name(&statz), ["A", "B"], "{statz}");
    let of_a = statz["account_statz"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["acc"] == "A")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (
            &of_a["name"],
            &of_a["conns"],
            &of_a["total_conns"],
            &of_a["leafnodes"]
        ),
        (&json!("A"), &json!(1), &json!(1), &json!(0)),
        "{statz}"
    );
    let zero = json!({"msgs": 0, "bytes": 0});
    assert_eq!(
        of_a["received"],
        json!({"msgs": 3, "bytes": 15, "gateways": zero, "routes": zero, "leafs": zero}),
        "{statz}"
    );
    assert_eq!(
        of_a["sent"],
        json!({"msgs": 3, "bytes": 15, "gateways": zero, "routes": zero, "leafs": zero}),
        "{statz}"
    );
    assert_eq!(of_a["slow_consumers"], 0, "{statz}");
    let all = get(&srv, "/accstatz?unused=true").await;
    assert_eq!(by_name(&all), ["$G", "$SYS", "A", "B", "C"], "{all}");

    // `/jsz?acc=` details one account with JetStream.
    let jsz = get(&srv, "/jsz?acc=B").await;
    let details = jsz["account_details"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(details.len(), 1, "{jsz}");
    assert_eq!(details[0]["name"], "B", "{jsz}");
    let none = get(&srv, "/jsz?acc=C").await;
    assert!(none["account_details"].is_null(), "{none}");
}
