//! The system account's services on one node: `$SYS.REQ.SERVER.PING[.<NAME>]` and
//! `$SYS.REQ.SERVER.<id>.<NAME>`, compared field by field with the reference nats-server run
//! beside the server under test (jetraft, or nats-server itself with
//! `JETRAFT_TEST_SERVER=nats-server`).
//!
//! Allowed differences (each with its reason):
//! - `server.ver`: jetraft reports the nats-server version it implements (2.12), not 2.15.1;
//! - `server.feature_flags`: nats-server's internal feature toggles (`js_ack_fc_v2`, ...), which
//!   say nothing about the protocol;
//! - `server.flags`: only the JetStream bit (1) is compared; nats-server also sets its
//!   binary-snapshot and account-NRG capabilities (its own cluster internals);
//! - ids, times, sequence numbers and counters (checked by type, not value);
//! - the keys of `/varz`, `/jsz` and `statsz` that either server lacks are listed below
//!   (`VARZ_ONLY_NATS`, ...) with the reason.

use std::collections::BTreeSet;
use std::time::Duration;

use jetraft_tests::harness::login;
use jetraft_tests::harness::sysreq::{SYS_CONFIG, collect, one};
use jetraft_tests::harness::{ServerKind, ServerOptions, ServerProcess};
use serde_json::Value;

/// Bound on waiting for one node's reply.
const REPLY: Duration = Duration::from_secs(5);
/// How long a request that must get no reply is watched.
const SILENCE: Duration = Duration::from_secs(1);

/// `server` keys only nats-server sends (see the module docs).
const SERVER_ONLY_NATS: [&str; 1] = ["feature_flags"];
/// `statsz` keys only nats-server sends: `routes` (jetraft has no NATS routes; its cluster
/// links are gRPC and not counted as routes anywhere).
const STATSZ_ONLY_NATS: [&str; 1] = ["routes"];
/// `/jsz` keys only nats-server sends: none expected.
const JSZ_ONLY_NATS: [&str; 0] = [];

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// `a`'s keys less `b`'s, less `allowed`.
fn missing(a: &Value, b: &Value, allowed: &[&str]) -> Vec<String> {
    keys(a)
        .difference(&keys(b))
        .filter(|k| !allowed.contains(&k.as_str()))
        .cloned()
        .collect()
}

async fn start(kind: Option<ServerKind>) -> ServerProcess {
    let opts = ServerOptions {
        kind,
        ..ServerOptions::with_config(SYS_CONFIG)
    };
    ServerProcess::start(opts).await.expect("start server")
}

/// Checks the `server` envelope of `got` against nats-server's `want`.
fn check_server_info(what: &str, got: &Value, want: &Value, srv: &ServerProcess) {
    let (g, w) = (&got["server"], &want["server"]);
    assert_eq!(
        missing(w, g, &SERVER_ONLY_NATS),
        Vec::<String>::new(),
        "{what}: server keys nats-server has: {g}"
    );
    assert_eq!(
        missing(g, w, &[]),
        Vec::<String>::new(),
        "{what}: server keys nats-server lacks: {g}"
    );
    assert_eq!(g["name"], srv.name(), "{what}: {g}");
    assert_eq!(g["host"], w["host"], "{what}");
    assert_eq!(g["jetstream"], true, "{what}");
    assert_eq!(g["flags"].as_u64().map(|f| f & 1), Some(1), "{what}: {g}");
    assert!(g["seq"].is_u64() && g["time"].is_string(), "{what}: {g}");
    assert!(
        g["id"].as_str().is_some_and(|id| id.len() == 56),
        "{what}: {g}"
    );
}

#[tokio::test]
async fn ping_requests_answer_as_nats_server_does() {
    let srv = start(None).await;
    let reference = start(Some(ServerKind::NatsServer)).await;
    let client = login(&srv, "sys").await;
    let ref_client = login(&reference, "sys").await;

    // Every request name answers with the same envelope.
    for (subject, top) in [
        ("$SYS.REQ.SERVER.PING", "statsz"),
        ("$SYS.REQ.SERVER.PING.STATSZ", "statsz"),
        ("$SYS.REQ.SERVER.PING.VARZ", "data"),
        ("$SYS.REQ.SERVER.PING.CONNZ", "data"),
        ("$SYS.REQ.SERVER.PING.SUBSZ", "data"),
        ("$SYS.REQ.SERVER.PING.JSZ", "data"),
        ("$SYS.REQ.SERVER.PING.HEALTHZ", "data"),
        ("$SYS.REQ.SERVER.PING.ACCOUNTZ", "data"),
        ("$SYS.REQ.SERVER.PING.ROUTEZ", "data"),
        ("$SYS.REQ.SERVER.PING.GATEWAYZ", "data"),
        ("$SYS.REQ.SERVER.PING.LEAFZ", "data"),
    ] {
        let got = one(&client, subject, "", REPLY).await;
        let want = one(&ref_client, subject, "", REPLY).await;
        assert_eq!(keys(&got), keys(&want), "{subject}: {got}");
        assert!(got[top].is_object(), "{subject}: {got}");
        check_server_info(subject, &got, &want, &srv);
    }

    // HEALTHZ's document is the same, status code included.
    let got = one(&client, "$SYS.REQ.SERVER.PING.HEALTHZ", "", REPLY).await;
    assert_eq!(
        got["data"],
        serde_json::json!({"status": "ok", "status_code": 200})
    );

    // STATSZ and JSZ carry nats-server's fields.
    let got = one(&client, "$SYS.REQ.SERVER.PING", "", REPLY).await;
    let want = one(&ref_client, "$SYS.REQ.SERVER.PING", "", REPLY).await;
    assert_eq!(
        missing(&want["statsz"], &got["statsz"], &STATSZ_ONLY_NATS),
        Vec::<String>::new(),
        "statsz: {got}"
    );
    assert_eq!(got["statsz"]["connections"], 1, "{got}");
    assert_eq!(got["statsz"]["active_servers"], 1, "{got}");
    let js = &got["statsz"]["jetstream"];
    assert_eq!(keys(js), keys(&want["statsz"]["jetstream"]), "{got}");
    let got = one(&client, "$SYS.REQ.SERVER.PING.JSZ", "", REPLY).await;
    let want = one(&ref_client, "$SYS.REQ.SERVER.PING.JSZ", "", REPLY).await;
    assert_eq!(
        missing(&want["data"], &got["data"], &JSZ_ONLY_NATS),
        Vec::<String>::new(),
        "jsz: {got}"
    );
    assert_eq!(got["data"]["server_id"], got["server"]["id"]);

    // ACCOUNTZ names the configured system account and every account.
    for c in [&client, &ref_client] {
        let got = one(c, "$SYS.REQ.SERVER.PING.ACCOUNTZ", "", REPLY).await;
        assert_eq!(got["data"]["system_account"], "SYS", "{got}");
        let names = got["data"]["accounts"].as_array().expect("accounts");
        for want in ["SYS", "APP", "$G"] {
            assert!(names.iter().any(|n| n == want), "{want}: {got}");
        }
    }

    // IDZ is bare.
    let got = one(&client, "$SYS.REQ.SERVER.PING.IDZ", "", REPLY).await;
    let want = one(&ref_client, "$SYS.REQ.SERVER.PING.IDZ", "", REPLY).await;
    assert_eq!(keys(&got), keys(&want), "{got}");
    assert_eq!(got["name"], srv.name());
}

#[tokio::test]
async fn request_options_and_their_errors_match_nats_server() {
    let srv = start(None).await;
    let reference = start(Some(ServerKind::NatsServer)).await;
    let client = login(&srv, "sys").await;
    let ref_client = login(&reference, "sys").await;

    // Bodies that do not decode get nats-server's Go error, code 400.
    for (subject, body) in [
        ("$SYS.REQ.SERVER.PING.CONNZ", r#"{"limit":"x"}"#),
        ("$SYS.REQ.SERVER.PING.CONNZ", "{bad"),
        ("$SYS.REQ.SERVER.PING.JSZ", r#"{"accounts":1}"#),
        ("$SYS.REQ.SERVER.PING.VARZ", r#"{"server_name":5}"#),
        ("$SYS.REQ.SERVER.PING.STATSZ", r#"{"tags":"x"}"#),
    ] {
        let got = one(&client, subject, body, REPLY).await;
        let want = one(&ref_client, subject, body, REPLY).await;
        assert_eq!(got["error"], want["error"], "{subject} {body}");
        assert_eq!(got["error"]["code"], 400, "{subject} {body}: {got}");
        assert!(got.get("data").is_none(), "{got}");
    }

    // Options are the HTTP endpoint's parameters.
    let got = one(
        &client,
        "$SYS.REQ.SERVER.PING.CONNZ",
        r#"{"subscriptions":true}"#,
        REPLY,
    )
    .await;
    let conns = got["data"]["connections"].as_array().expect("connections");
    assert_eq!(conns.len(), 1, "{got}");
    assert_eq!(
        conns[0]["subscriptions_list"].as_array().map(Vec::len),
        Some(1),
        "{got}"
    );
    let got = one(
        &client,
        "$SYS.REQ.SERVER.PING.HEALTHZ",
        r#"{"js-server-only":true}"#,
        REPLY,
    )
    .await;
    assert_eq!(got["data"]["status"], "ok", "{got}");

    // A filter that leaves the server out: no reply (and no no-responders either).
    for body in [
        r#"{"server_name":"not-this-one"}"#,
        r#"{"server_name":"harness","exact_match":true}"#,
        r#"{"tags":["absent"]}"#,
    ] {
        for c in [&client, &ref_client] {
            let r = collect(c, "$SYS.REQ.SERVER.PING.VARZ", body, 0, SILENCE).await;
            assert!(r.json.is_empty() && r.statuses.is_empty(), "{body}: {r:?}");
        }
    }
    // A filter that fits answers.
    let part = &srv.name()[..4];
    let got = one(
        &client,
        "$SYS.REQ.SERVER.PING.VARZ",
        &format!(r#"{{"server_name":"{part}"}}"#),
        REPLY,
    )
    .await;
    assert_eq!(got["data"]["server_name"], srv.name());
}

#[tokio::test]
async fn only_the_system_account_reaches_the_services() {
    let srv = start(None).await;
    let reference = start(Some(ServerKind::NatsServer)).await;
    for s in [&srv, &reference] {
        let app = login(s, "app").await;
        for subject in [
            "$SYS.REQ.SERVER.PING",
            "$SYS.REQ.SERVER.PING.VARZ",
            "$SYS.REQ.SERVER.PING.JSZ",
        ] {
            let r = collect(&app, subject, "", 1, REPLY).await;
            assert_eq!(r.statuses, vec![503], "{subject} from APP: {r:?}");
        }
        // An unknown request name has no responders in the system account either.
        let sys = login(s, "sys").await;
        let r = collect(&sys, "$SYS.REQ.SERVER.PING.NOSUCHZ", "", 1, REPLY).await;
        assert_eq!(r.statuses, vec![503], "{r:?}");
    }
}

#[tokio::test]
async fn connz_of_one_account_answers_as_nats_server_does() {
    let srv = start(None).await;
    let reference = start(Some(ServerKind::NatsServer)).await;
    for s in [&srv, &reference] {
        let app = login(s, "app").await;
        let sys = login(s, "sys").await;
        // Any account may ask for its own connections (imported from the system account).
        for subject in ["$SYS.REQ.SERVER.PING.CONNZ", "$SYS.REQ.ACCOUNT.PING.CONNZ"] {
            let got = one(&app, subject, "", REPLY).await;
            assert_eq!(got["data"]["num_connections"], 1, "{subject}: {got}");
            assert_eq!(got["server"]["name"], s.name(), "{got}");
        }
        // The system account asks for any account's.
        let got = one(&sys, "$SYS.REQ.ACCOUNT.APP.CONNZ", "", REPLY).await;
        assert_eq!(got["data"]["num_connections"], 1, "{got}");
        let got = one(
            &sys,
            "$SYS.REQ.ACCOUNT.SYS.CONNZ",
            r#"{"subscriptions":true}"#,
            REPLY,
        )
        .await;
        assert_eq!(got["data"]["num_connections"], 1, "{got}");
        let got = one(
            &sys,
            "$SYS.REQ.ACCOUNT.APP.CONNZ",
            r#"{"limit":"x"}"#,
            REPLY,
        )
        .await;
        assert_eq!(got["error"]["code"], 400, "{got}");
    }
}

#[tokio::test]
async fn a_server_id_request_is_answered_by_that_server() {
    let srv = start(None).await;
    let sys = login(&srv, "sys").await;
    let id = sys.server_info().server_id;
    let got = one(&sys, &format!("$SYS.REQ.SERVER.{id}.VARZ"), "", REPLY).await;
    assert_eq!(got["data"]["server_id"], id.as_str());
    assert_eq!(got["server"]["id"], id.as_str());
    let got = one(&sys, &format!("$SYS.REQ.SERVER.{id}.IDZ"), "", REPLY).await;
    assert_eq!(got["id"], id.as_str());
    let r = collect(&sys, "$SYS.REQ.SERVER.NOTASERVER.VARZ", "", 1, REPLY).await;
    assert_eq!(r.statuses, vec![503], "{r:?}");
}
