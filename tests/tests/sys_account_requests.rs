//! The system account's per-account requests on one node, run on the server under test and on
//! the reference nats-server beside it, each checked for the same values:
//! `$SYS.REQ.ACCOUNT.<account>.<INFO|JSZ|SUBSZ|STATZ|CONNS>`, `$SYS.REQ.ACCOUNT.PING.STATZ` (from the
//! system account: every account with connections; from another account: its own) and
//! `$SYS.REQ.USER.INFO` (the requesting user). nats-server also counts and lists its own
//! internal subscriptions (the system imports of every account): only the client
//! subscriptions are compared.

use std::time::Duration;

use jetraft_tests::harness::jsapi::api;
use jetraft_tests::harness::login;
use jetraft_tests::harness::sysreq::{collect, one};
use jetraft_tests::harness::{ServerKind, ServerOptions, ServerProcess, round_trip};
use serde_json::{Value, json};

/// Bound on waiting for one node's reply.
const REPLY: Duration = Duration::from_secs(5);
/// How long a request that must get no reply is watched.
const SILENCE: Duration = Duration::from_secs(1);

/// SYS is the system account; APP has JetStream and a user with permissions; OTHER has
/// neither.
const CONFIG: &str = r#"
accounts {
  SYS: { users: [ { user: sys, password: sys } ] }
  APP: {
    users: [
      { user: app, password: app }
      { user: limited, password: limited,
        permissions: { publish: { allow: ["x.>", "$SYS.REQ.USER.INFO", "_INBOX.>"] },
                       subscribe: { deny: ["secret"] }, allow_responses: true } }
    ]
    jetstream: enabled
  }
  OTHER: { users: [ { user: other, password: other } ] }
}
system_account: SYS
"#;

async fn start(kind: Option<ServerKind>) -> ServerProcess {
    let opts = ServerOptions {
        kind,
        ..ServerOptions::with_config(CONFIG)
    };
    ServerProcess::start(opts).await.expect("start server")
}

/// The sorted `acc` of a STATZ reply's accounts.
fn statz_accounts(reply: &Value) -> Vec<String> {
    let mut out: Vec<String> = reply["data"]["account_statz"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["acc"].as_str().map(str::to_string))
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn account_requests_answer_as_nats_server_does() {
    let srv = start(None).await;
    let reference = start(Some(ServerKind::NatsServer)).await;
    for s in [&srv, &reference] {
        let (sys, app) = (login(s, "sys").await, login(s, "app").await);
        let _sub = app.subscribe("x.y").await.expect("subscribe");
        round_trip(&app).await;
        let created = api(
            &app,
            "$JS.API.STREAM.CREATE.S",
            json!({"name": "S", "subjects": ["s"]}),
        );
        assert_eq!(created.await["config"]["name"], "S");
        let name = s.name();

        let info = one(&sys, "$SYS.REQ.ACCOUNT.APP.INFO", "", REPLY).await;
        let d = &info["data"];
        assert_eq!(
            (
                &d["account_name"],
                &d["jetstream_enabled"],
                &d["client_connections"]
            ),
            (&json!("APP"), &json!(true), &json!(1)),
            "{name}: {info}"
        );
        let missing = one(&sys, "$SYS.REQ.ACCOUNT.NOPE.INFO", "", REPLY).await;
        assert_eq!(
            (&missing["data"], &missing["error"]),
            (
                &Value::Null,
                &json!({"code": 500, "description": "Account NOPE does not exist"})
            ),
            "{name}: {missing}"
        );

        let jsz = one(
            &sys,
            "$SYS.REQ.ACCOUNT.APP.JSZ",
            r#"{"streams":true}"#,
            REPLY,
        )
        .await;
        let d = &jsz["data"];
        assert_eq!(
            (
                &d["name"],
                &d["api"]["total"],
                &d["stream_detail"][0]["name"]
            ),
            (&json!("APP"), &json!(1), &json!("S")),
            "{name}: {jsz}"
        );
        for (acc, description) in [
            ("OTHER", r#"account "OTHER" not jetstream enabled"#),
            ("NOPE", r#"account "NOPE" not found"#),
        ] {
            let got = one(&sys, &format!("$SYS.REQ.ACCOUNT.{acc}.JSZ"), "", REPLY).await;
            assert_eq!(
                got["error"],
                json!({"code": 500, "description": description}),
                "{name}: {got}"
            );
        }

        let subsz = one(&sys, "$SYS.REQ.ACCOUNT.APP.SUBSZ", "", REPLY).await;
        let listed: Vec<&Value> = subsz["data"]["subscriptions_list"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|sub| sub["subject"] == "x.y")
            .collect();
        assert_eq!(listed.len(), 1, "{name}: {subsz}");
        assert_eq!(listed[0]["account"], "APP", "{name}: {subsz}");

        let statz = one(&sys, "$SYS.REQ.ACCOUNT.APP.STATZ", "", REPLY).await;
        assert_eq!(statz_accounts(&statz), ["APP"], "{name}: {statz}");
        assert_eq!(
            statz["data"]["account_statz"][0]["conns"], 1,
            "{name}: {statz}"
        );
        // No connection of OTHER: no reply, unless unused accounts are asked for.
        let silent = collect(&sys, "$SYS.REQ.ACCOUNT.OTHER.STATZ", "", 0, SILENCE).await;
        assert!(silent.json.is_empty(), "{name}: {:?}", silent.json);
        let unused = one(
            &sys,
            "$SYS.REQ.ACCOUNT.OTHER.STATZ",
            r#"{"include_unused":true}"#,
            REPLY,
        )
        .await;
        assert_eq!(statz_accounts(&unused), ["OTHER"], "{name}: {unused}");
        assert_eq!(
            unused["data"]["account_statz"][0]["conns"], 0,
            "{name}: {unused}"
        );
        // CONNS: the same figures as an advisory, from nodes where the account has
        // connections.
        let conns = one(&sys, "$SYS.REQ.ACCOUNT.APP.CONNS", "", REPLY).await;
        assert_eq!(
            (
                &conns["type"],
                &conns["acc"],
                &conns["conns"],
                &conns["total_conns"]
            ),
            (
                &json!("io.nats.server.advisory.v1.account_connections"),
                &json!("APP"),
                &json!(1),
                &json!(1)
            ),
            "{name}: {conns}"
        );
        assert!(
            conns["server"]["id"].is_string() && conns["id"].is_string(),
            "{conns}"
        );
        for (subject, body) in [
            ("$SYS.REQ.ACCOUNT.OTHER.CONNS", ""),
            ("$SYS.REQ.ACCOUNT.APP.CONNS", r#"{"acc":"OTHER"}"#),
        ] {
            let silent = collect(&sys, subject, body, 0, SILENCE).await;
            assert!(
                silent.json.is_empty(),
                "{name} {subject}: {:?}",
                silent.json
            );
        }
        let all = one(&sys, "$SYS.REQ.ACCOUNT.PING.STATZ", "", REPLY).await;
        assert_eq!(statz_accounts(&all), ["APP", "SYS"], "{name}: {all}");
        // Another account's PING.STATZ is about itself.
        let own = one(&app, "$SYS.REQ.ACCOUNT.PING.STATZ", "", REPLY).await;
        assert_eq!(statz_accounts(&own), ["APP"], "{name}: {own}");

        let me = one(&app, "$SYS.REQ.USER.INFO", "", REPLY).await;
        assert_eq!(
            me["data"],
            json!({"user": "app", "account": "APP", "account_name": "APP"}),
            "{name}: {me}"
        );
        let limited = login(s, "limited").await;
        let mut me = one(&limited, "$SYS.REQ.USER.INFO", "", REPLY).await;
        // nats-server lists a permission's subjects in its sublist's order.
        if let Some(allow) = me["data"]["permissions"]["publish"]["allow"].as_array_mut() {
            allow.sort_by_key(Value::to_string);
        }
        assert_eq!(
            me["data"],
            json!({"user": "limited", "account": "APP", "account_name": "APP",
                "permissions": {
                    "publish": {"allow": ["$SYS.REQ.USER.INFO", "_INBOX.>", "x.>"]},
                    "subscribe": {"deny": ["secret"]},
                    "responses": {"max": 1, "ttl": 120_000_000_000_u64}}}),
            "{name}: {me}"
        );
        let other = login(s, "other").await;
        let me = one(&other, "$SYS.REQ.USER.INFO", "", REPLY).await;
        assert_eq!(me["data"]["account"], "OTHER", "{name}: {me}");
    }
}
