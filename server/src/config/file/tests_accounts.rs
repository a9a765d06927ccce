//! Tests of `accounts { }`, `no_auth_user`, `system_account`, `default_permissions` and
//! `allow_responses`, with nats-server's start-time errors.

use std::time::Duration;

use super::tests_mapping::{conf, conf_err};
use crate::config::{ResponsePermission, ResponseType, ShareKind};

#[test]
fn accounts_hold_users_exports_and_imports() {
    let cfg = conf(
        r#"
accounts {
  A: {
    users: [ { user: a, password: pa } ]
    exports: [
      { service: "svc.>", response_type: stream, threshold: "5s" }
      { stream: "ev.>", accounts: [B] }
    ]
  }
  B: {
    users: [ { user: b, password: pb, permissions: { publish: "x" } }, { user: b2, password: p } ]
    default_permissions: { subscribe: { deny: "secret.>" } }
    imports: [
      { service: { account: A, subject: "svc.time" }, to: "time" }
      { stream: { account: A, subject: "ev.>" }, prefix: "a" }
    ]
  }
}
authorization { users: [ { user: g, password: pg } ] }
no_auth_user: b2
system_account: A
"#,
    );
    let auth = &cfg.auth;
    assert!(auth.required());
    assert_eq!(auth.users.len(), 1, "authorization users are $G's");
    assert_eq!(auth.no_auth_user.as_deref(), Some("b2"));
    assert_eq!(auth.system_account.as_deref(), Some("A"));
    let a = &auth.accounts[0];
    assert_eq!(a.name, "A");
    assert_eq!(a.exports[0].kind, ShareKind::Service);
    assert_eq!(a.exports[0].response, ResponseType::Stream);
    assert_eq!(a.exports[0].threshold, Duration::from_secs(5));
    assert_eq!(a.exports[1].accounts, vec!["B".to_string()]);
    let b = &auth.accounts[1];
    assert_eq!(b.imports[0].local_subject(), "time");
    assert_eq!(b.imports[1].local_subject(), "a.ev.>");
    // Account default permissions go to users without their own.
    let own = b.users[0].permissions.as_ref().unwrap();
    assert!(own.subscribe.is_none() && own.publish.is_some());
    let defaulted = b.users[1].permissions.as_ref().unwrap();
    assert_eq!(defaulted.subscribe.as_ref().unwrap().deny, vec!["secret.>"]);
    let users: Vec<(&str, Option<&str>)> = auth
        .all_users()
        .map(|(u, acc)| (u.user.as_str(), acc))
        .collect();
    assert_eq!(
        users,
        vec![
            ("g", None),
            ("a", Some("A")),
            ("b", Some("B")),
            ("b2", Some("B"))
        ]
    );
}

#[test]
fn imports_of_what_is_not_exported_are_refused_as_nats_server() {
    let err = conf_err(
        "accounts {\n A: { exports: [ {service: \"svc.>\"} ] }\n B: { imports: [ {service: {account: A, subject: \"other.>\"}} ] }\n}",
    );
    assert!(
        err.starts_with("test.conf:1:1: ")
            && err.ends_with(
                "Error adding service import \"other.>\": service import not authorized"
            ),
        "{err}"
    );
    let err = conf_err(
        "accounts { A: { exports: [ {stream: \"ev.>\", accounts: [C]} ] }, B: { imports: [ {stream: {account: A, subject: \"ev.>\"}} ] }, C: {} }",
    );
    assert!(
        err.ends_with("Error adding stream import \"ev.>\": stream import not authorized"),
        "{err}"
    );
    // A stream export is no service export.
    let err = conf_err(
        "accounts { A: { exports: [ {stream: \"x\"} ] }, B: { imports: [ {service: {account: A, subject: x}} ] } }",
    );
    assert!(err.ends_with("service import not authorized"), "{err}");
    let err =
        conf_err("accounts { B: { imports: [ {stream: {account: X, subject: \"ev.>\"}} ] } }");
    assert!(
        err.ends_with("\"X\" account not defined for stream import"),
        "{err}"
    );
    let err = conf_err("accounts { A: { exports: [ {service: s, accounts: [Z]} ] } }");
    assert!(
        err.ends_with("\"Z\" account not defined for service export"),
        "{err}"
    );
    // Narrower imports of a wider export are fine; the export's accounts list is honoured.
    conf(
        "accounts { A: { exports: [ {stream: \"ev.>\", accounts: [B]} ] }, B: { imports: [ {stream: {account: A, subject: \"ev.a.*\"}, to: \"mine.*\"} ] } }",
    );
}

#[test]
fn account_checks_use_nats_server_messages() {
    for (text, message) in [
        ("accounts { $G: {} }", "Reserved Account"),
        ("accounts: [A, A]", "Duplicate Account Entry: A"),
        (
            "accounts { A: { users: [{user: a, password: x}] }, B: { users: [{user: a, password: y}] } }",
            "Duplicate user \"a\" detected",
        ),
        (
            "authorization { user: u, password: p }\naccounts { A: { users: [{user: a, password: x}] } }",
            "Can not have a single user/pass and accounts",
        ),
        (
            "no_auth_user: zz\naccounts { A: { users: [{user: a, password: a}] } }",
            "no_auth_user: \"zz\" not present as user or nkey in authorization block or account configuration",
        ),
        (
            "no_auth_user: zz",
            "no_auth_user: \"zz\" present, but users/nkeys are not defined",
        ),
        (
            "system_account: NOPE\naccounts { A: {} }",
            "error resolving system account: account missing",
        ),
        (
            "accounts { A: { imports: [ {stream: {account: A, subject: x}, prefix: p, to: q} ] } }",
            "Stream import can not have a 'prefix' and a 'to' property",
        ),
        (
            "accounts { A: { imports: [ {stream: {account: A}} ] } }",
            "Expect an account name and a subject",
        ),
        (
            "accounts { A: { exports: [ {stream: x, response_type: stream} ] } }",
            "Detected response directive on non-service",
        ),
    ] {
        let err = conf_err(text);
        assert!(err.contains(message), "{text}: {err}");
    }
}

#[test]
fn what_accounts_cannot_do_yet_is_refused() {
    for (text, key) in [
        (
            "accounts { A: { jetstream: { max_payload: 1 } } }",
            "max_payload",
        ),
        ("accounts { A: { mappings: { a: b } } }", "mappings"),
        ("accounts { A: { nkey: ABC } }", "nkey"),
        (
            "accounts { A: { exports: [ {service: s, latency: lat.s} ] } }",
            "latency",
        ),
        ("no_system_account: true", "no_system_account"),
    ] {
        let err = conf_err(text);
        assert!(
            err.contains(&format!("{key:?} is not supported by jetraft")),
            "{text}: {err}"
        );
    }
    // Turning JetStream off in an account asks for nothing jetraft lacks.
    conf("accounts { A: { jetstream: disabled } }");
}

#[test]
fn account_jetstream_is_a_switch_or_limits() {
    let cfg = conf(
        "accounts { A: { jetstream: enabled }, B: { jetstream: disabled }, C: { jetstream: \
         { max_mem: 1M, max_file: 2GB, max_streams: 3, max_consumers: 4, max_ack_pending: 5 } }, \
         D: {} }",
    );
    let js = |name: &str| {
        cfg.auth
            .accounts
            .iter()
            .find(|a| a.name == name)
            .and_then(|a| a.jetstream)
    };
    assert_eq!(js("A"), Some(crate::config::AccountJetStream::default()));
    assert_eq!(js("B"), None);
    assert_eq!(js("D"), None);
    assert_eq!(
        js("C"),
        Some(crate::config::AccountJetStream {
            max_memory: 1_000_000,
            max_storage: 2 << 30,
            max_streams: 3,
            max_consumers: 4,
            max_ack_pending: 5,
            ..crate::config::AccountJetStream::default()
        })
    );
    // nats-server's other keys and aliases: `max_stream_bytes` is the boolean
    // `max_bytes_required`.
    let cfg = conf(
        "accounts { E: { jetstream: { mem: 1KB, disk: 2K, max_stream_bytes: true, \
         mem_max_stream_bytes: 2048, store_max_stream_bytes: 4KB } } }",
    );
    let e = cfg.auth.accounts.iter().find(|a| a.name == "E");
    assert_eq!(
        e.and_then(|a| a.jetstream),
        Some(crate::config::AccountJetStream {
            max_memory: 1024,
            max_storage: 2000,
            memory_max_stream_bytes: 2048,
            storage_max_stream_bytes: 4096,
            max_bytes_required: true,
            ..crate::config::AccountJetStream::default()
        })
    );
    assert!(conf_err("accounts { A: { jetstream: { max_bytes: 10 } } }").contains("true or false"));
    assert!(conf_err("accounts { A: { jetstream: maybe } }").contains("enabled, disabled"));
    assert!(conf_err("accounts { \"a/b\": { jetstream: enabled } }").contains("'/'"));
}

#[test]
fn default_permissions_and_allow_responses() {
    let cfg = conf(
        r#"
authorization {
  default_permissions: { publish: { deny: "admin.>" } }
  users: [
    { user: a, password: a }
    { user: r, password: r, permissions: { subscribe: "svc", allow_responses: true } }
    { user: m, password: m, permissions: { allow_responses: { max: 3, expires: "1s" } } }
    { user: q, password: q, permissions: { subscribe: { allow: ["work workers", "jobs.*"] } } }
  ]
}
"#,
    );
    let users = &cfg.auth.users;
    let a = users[0].permissions.as_ref().unwrap();
    assert_eq!(a.publish.as_ref().unwrap().deny, vec!["admin.>"]);
    let r = users[1].permissions.as_ref().unwrap();
    assert_eq!(r.responses, Some(ResponsePermission::default()));
    assert!(
        r.publish.is_none(),
        "a user's own permissions replace the defaults"
    );
    let m = users[2].permissions.as_ref().unwrap();
    assert_eq!(
        m.responses,
        Some(ResponsePermission {
            max_msgs: 3,
            expires: Duration::from_secs(1)
        })
    );
    let q = users[3].permissions.as_ref().unwrap();
    assert_eq!(
        q.subscribe.as_ref().unwrap().allow,
        vec!["work workers", "jobs.*"]
    );
    assert!(
        conf("authorization { users: [ { user: x, password: y, permissions: { allow_responses: false } } ] }")
            .auth
            .users[0]
            .permissions
            .as_ref()
            .unwrap()
            .responses
            .is_none()
    );
}
