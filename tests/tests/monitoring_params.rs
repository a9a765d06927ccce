//! Monitoring query parameters (issue 23, item 7): values nats-server cannot decode are refused
//! with `400 Bad Request` and a plain-text body naming the parameter and Go's parse error, on
//! every endpoint that reads them; good values still answer 200 with JSON.
//!
//! The expected texts were captured from nats-server 2.15.1; the suite passes with
//! `JETRAFT_TEST_SERVER=nats-server` too.

use jetraft_tests::harness::{ServerProcess, assert_clean_log, start_server};

fn bool_err(param: &str, value: &str) -> String {
    format!(
        "Error decoding boolean for '{param}': strconv.ParseBool: parsing \"{value}\": invalid syntax"
    )
}

fn int_err(param: &str, value: &str, why: &str) -> String {
    format!("Error decoding int for '{param}': strconv.Atoi: parsing \"{value}\": {why}")
}

fn uint_err(param: &str, value: &str, why: &str) -> String {
    format!("Error decoding uint64 for '{param}': strconv.ParseUint: parsing \"{value}\": {why}")
}

/// GETs `path` and asserts a 400 with exactly `text` as a plain-text body.
async fn expect_400(srv: &ServerProcess, path: &str, text: &str) {
    let r = srv.http_get(path).await.expect("GET");
    assert_eq!(
        (r.status, r.body.as_str()),
        (400, text),
        "GET {path}: status and body"
    );
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; charset=utf-8"),
        "GET {path}: content type"
    );
}

/// GETs `path` and asserts a 200 with a JSON object body.
async fn expect_200(srv: &ServerProcess, path: &str) -> serde_json::Value {
    let r = srv.http_get(path).await.expect("GET");
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    assert_eq!(
        r.header("content-type"),
        Some("application/json"),
        "GET {path}"
    );
    let v = r.json().unwrap_or_else(|e| panic!("GET {path}: JSON: {e}"));
    assert!(v.is_object(), "GET {path}: {v}");
    v
}

#[tokio::test]
async fn connz_refuses_bad_parameters_like_nats_server() {
    let srv = start_server().await;
    let big = "99999999999999999999";
    for (path, text) in [
        (
            "/connz?sort=bogus",
            "invalid sorting option: bogus".to_string(),
        ),
        ("/connz?sort=CID", "invalid sorting option: CID".to_string()),
        (
            "/connz?state=bogus",
            "Error decoding state for bogus".to_string(),
        ),
        ("/connz?cid=abc", uint_err("cid", "abc", "invalid syntax")),
        ("/connz?cid=-1", uint_err("cid", "-1", "invalid syntax")),
        ("/connz?cid=%2B5", uint_err("cid", "+5", "invalid syntax")),
        (
            &format!("/connz?cid={big}"),
            uint_err("cid", big, "value out of range"),
        ),
        ("/connz?subs=bogus", bool_err("subs", "bogus")),
        ("/connz?subs=yes", bool_err("subs", "yes")),
        ("/connz?auth=bogus", bool_err("auth", "bogus")),
        (
            "/connz?limit=abc",
            int_err("limit", "abc", "invalid syntax"),
        ),
        (
            "/connz?offset=1e3",
            int_err("offset", "1e3", "invalid syntax"),
        ),
        (
            &format!("/connz?limit={big}"),
            int_err("limit", big, "value out of range"),
        ),
        (
            &format!("/connz?offset={big}"),
            int_err("offset", big, "value out of range"),
        ),
        // The first value of a repeated parameter is the one read.
        ("/connz?subs=x&subs=1", bool_err("subs", "x")),
        (
            "/connz?sort=stop",
            "sort by stop only valid on closed connections".to_string(),
        ),
        (
            "/connz?sort=reason&state=any",
            "sort by reason only valid on closed connections".to_string(),
        ),
    ] {
        expect_400(&srv, path, &text).await;
    }
    for path in [
        "/connz",
        "/connz?sort=cid",
        "/connz?sort=bytes_to",
        "/connz?sort=idle",
        "/connz?sort=uptime",
        "/connz?sort=rtt",
        "/connz?sort=last",
        "/connz?state=closed&sort=stop",
        "/connz?state=Closed&sort=reason",
        "/connz?state=ALL",
        "/connz?state=any",
        "/connz?subs=detail",
        "/connz?subs=t",
        "/connz?subs=TRUE",
        "/connz?subs=",
        "/connz?cid=0",
        "/connz?auth=1",
        "/connz?limit=%2B5",
        "/connz?limit=100000&offset=3",
    ] {
        expect_200(&srv, path).await;
    }
    // Negative paging values are clamped, not refused.
    let v = expect_200(&srv, "/connz?limit=-1&offset=-1").await;
    assert_eq!(
        (v["limit"].as_i64(), v["offset"].as_i64()),
        (Some(1024), Some(0))
    );
    let v = expect_200(&srv, "/connz?limit=7&offset=2").await;
    assert_eq!(
        (v["limit"].as_i64(), v["offset"].as_i64()),
        (Some(7), Some(2))
    );
    assert_clean_log(&srv);
}

#[tokio::test]
async fn subsz_jsz_healthz_and_the_others_refuse_bad_parameters() {
    let srv = start_server().await;
    let mut cases: Vec<(String, String)> = vec![
        (
            "/subsz?test=foo.*".into(),
            "invalid test subject, must be valid publish subject: foo.*".into(),
        ),
        (
            "/subsz?test=foo..bar".into(),
            "invalid test subject, must be valid publish subject: foo..bar".into(),
        ),
        ("/subsz?subs=x".into(), bool_err("subs", "x")),
        (
            "/subsz?limit=x".into(),
            int_err("limit", "x", "invalid syntax"),
        ),
        (
            "/subsz?offset=1e3".into(),
            int_err("offset", "1e3", "invalid syntax"),
        ),
        ("/subscriptionsz?subs=x".into(), bool_err("subs", "x")),
        (
            "/jsz?offset=x".into(),
            int_err("offset", "x", "invalid syntax"),
        ),
        (
            "/jsz?limit=x".into(),
            int_err("limit", "x", "invalid syntax"),
        ),
        ("/routez?subs=x".into(), bool_err("subs", "x")),
        ("/leafz?subs=x".into(), bool_err("subs", "x")),
        ("/gatewayz?subs=x".into(), bool_err("subs", "x")),
        ("/gatewayz?accs=x".into(), bool_err("accs", "x")),
        ("/accstatz?unused=x".into(), bool_err("unused", "x")),
        (
            "/accountz?acc=nope".into(),
            "Account nope does not exist".into(),
        ),
    ];
    for p in [
        "accounts",
        "streams",
        "consumers",
        "direct-consumers",
        "config",
        "leader-only",
        "raft",
        "stream-leader-only",
    ] {
        cases.push((format!("/jsz?{p}=x"), bool_err(p, "x")));
    }
    for p in [
        "js-enabled",
        "js-enabled-only",
        "js-server-only",
        "js-meta-only",
        "details",
    ] {
        cases.push((format!("/healthz?{p}=x"), bool_err(p, "x")));
    }
    for (path, text) in &cases {
        expect_400(&srv, path, text).await;
    }
    for path in [
        "/subsz",
        "/subsz?test=foo",
        "/subsz?subs=1&offset=-1&limit=-1",
        "/subsz?subs=true&limit=5",
        "/jsz",
        "/jsz?accounts=true&streams=1&consumers=t&config=false",
        "/jsz?acc=nope",
        "/jsz?offset=-5&limit=0",
        "/varz",
        "/varz?bogus=bogus",
        "/routez?subs=detail",
        "/routez?subs=1",
        "/leafz?subs=false",
        "/gatewayz?accs=1",
        "/accountz",
        "/accountz?acc=$G",
        "/accstatz?unused=1",
    ] {
        expect_200(&srv, path).await;
    }
    // A good healthz still answers with its JSON.
    let r = srv
        .http_get("/healthz?js-enabled-only=true&details=false")
        .await
        .expect("GET");
    assert_eq!((r.status, r.body.as_str()), (200, "{\"status\":\"ok\"}"));
    assert_clean_log(&srv);
}
