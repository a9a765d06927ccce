//! Tests of the security keys: `tls { }`, `allow_non_tls`, `https_port`, NKEY users,
//! `cluster { tls, authorization }`, and the refusal of every security setting jetraft does
//! not implement.

use std::path::PathBuf;
use std::time::Duration;

use super::tests_mapping::{conf, conf_err};
use crate::config::{RouteAuth, TlsVersion};

/// A valid public user NKEY.
const NKEY: &str = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4";

#[test]
fn tls_block_reads_every_supported_key() {
    let cfg = conf(
        "tls { cert_file: s.pem, key_file: \"k.pem\", ca_file: ca.pem, verify: true, \
         timeout: 0.5, handshake_first: true, min_version: \"1.3\" }\nallow_non_tls: true\n\
         https_port: 8443",
    );
    let tls = cfg.tls.expect("tls");
    assert_eq!(tls.cert_file, PathBuf::from("s.pem"));
    assert_eq!(tls.key_file, PathBuf::from("k.pem"));
    assert_eq!(tls.ca_file, Some(PathBuf::from("ca.pem")));
    assert!(tls.verify && !tls.verify_and_map && tls.handshake_first);
    assert_eq!(tls.timeout, Duration::from_millis(500));
    assert_eq!(tls.min_version, TlsVersion::V1_3);
    assert!(cfg.allow_non_tls);
    assert_eq!(cfg.https_port, Some(8443));
    let tls = conf("tls { cert_file: a, key_file: b, ca_file: c, verify_and_map: true }")
        .tls
        .expect("tls");
    assert!(tls.verify_and_map && tls.requires_client_cert());
    assert_eq!(tls.timeout, crate::config::DEFAULT_TLS_TIMEOUT);
}

#[test]
fn tls_block_needs_cert_key_and_a_ca_to_verify() {
    assert!(conf_err("tls { cert_file: a }").contains("needs both \"cert_file\" and \"key_file\""));
    assert!(
        conf_err("tls { cert_file: a, key_file: b, verify: true }").contains("need a \"ca_file\"")
    );
}

#[test]
fn unimplemented_tls_settings_are_refused_by_name() {
    for key in [
        "cipher_suites: [TLS_AES_128_GCM_SHA256]",
        "curve_preferences: [X25519]",
        "pinned_certs: [abc]",
        "cert_store: WindowsCurrentUser",
        "cert_match_by: Subject",
        "insecure: true",
        "ocsp_peer: true",
        "verify_cert_and_check_known_urls: true",
        "handshake_first: 300ms",
    ] {
        let name = key.split(':').next().unwrap_or_default();
        let err = conf_err(&format!("tls {{ cert_file: a, key_file: b, {key} }}"));
        assert!(
            err.contains(&format!("\"{name}\" is not supported by jetraft")),
            "{key}: {err}"
        );
        let err = conf_err(&format!(
            "cluster {{ port: 6222, tls {{ cert_file: a, key_file: b, ca_file: c, {key} }} }}"
        ));
        assert!(err.contains(&format!("\"{name}\"")), "cluster {key}: {err}");
    }
    assert!(
        conf_err("tls { cert_file: a, key_file: b, min_version: \"1.1\" }")
            .contains("use \"1.2\" or \"1.3\"")
    );
}

#[test]
fn security_of_unserved_protocols_and_ocsp_is_refused() {
    for (block, key) in [
        ("websocket", "tls { cert_file: a, key_file: b }"),
        ("websocket", "no_auth_user: bob"),
        ("leafnodes", "authorization { user: a, password: b }"),
        ("gateway", "tls { cert_file: a, key_file: b }"),
        ("mqtt", "tls { cert_file: a, key_file: b }"),
        ("mqtt", "authorization { token: t }"),
    ] {
        let err = conf_err(&format!("{block} {{ port: 1, {key} }}"));
        assert!(
            err.contains("is not supported by jetraft") && err.contains(block),
            "{block}: {err}"
        );
    }
    // The blocks themselves, without security settings, stay ignored (jetraft serves none).
    conf("websocket { port: 8080, no_tls: true }\nleafnodes { port: 7422 }");
    for key in ["ocsp { mode: always }", "ocsp_cache { type: local }"] {
        assert!(conf_err(key).contains("OCSP is not implemented"), "{key}");
    }
    for key in [
        "operator: /x.jwt",
        "resolver: MEMORY",
        "trusted_keys: [abc]",
        "accounts { A { jetstream: { cluster_traffic: owner } } }",
    ] {
        assert!(
            conf_err(key).contains("is not supported by jetraft"),
            "{key}"
        );
    }
    for key in [
        "auth_callout { issuer: abc }",
        "nkeys: []",
        "no_auth_user: bob",
    ] {
        assert!(
            conf_err(&format!("authorization {{ {key} }}")).contains("is not supported"),
            "{key}"
        );
    }
}

#[test]
fn nkey_users_are_read_and_checked() {
    let cfg = conf(&format!(
        "authorization {{ users: [ {{ nkey: {NKEY}, permissions: {{ publish: \"a.>\" }} }}, \
         {{ user: bob, password: pw }} ] }}"
    ));
    let users = &cfg.auth.users;
    assert_eq!(users[0].nkey.as_deref(), Some(NKEY));
    assert!(users[0].permissions.is_some());
    assert!(users[1].nkey.is_none());
    assert!(cfg.auth.required());
    let bad = &NKEY[..NKEY.len() - 1];
    assert!(
        conf_err(&format!(
            "authorization {{ users: [ {{ nkey: {bad}A }} ] }}"
        ))
        .contains("not a valid public user nkey")
    );
    // A seed or an account key is not a user's public key.
    assert!(
        conf_err("authorization { users: [ { nkey: SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTC4 } ] }")
            .contains("not a valid public user nkey")
    );
}

#[test]
fn cluster_tls_and_route_authorization() {
    let cfg = conf(
        "cluster { port: 6222, tls { cert_file: r.pem, key_file: rk.pem, ca_file: ca.pem, \
         verify: true, timeout: 3 }, authorization { user: ruser, password: rpass, timeout: 2 } }",
    );
    let tls = cfg.cluster.tls.expect("cluster tls");
    assert_eq!(tls.ca_file, Some(PathBuf::from("ca.pem")));
    assert_eq!(tls.timeout, Duration::from_secs(3));
    assert_eq!(
        cfg.cluster.auth,
        Some(RouteAuth {
            user: "ruser".into(),
            password: "rpass".into()
        })
    );
    assert!(
        conf_err("cluster { authorization { user: a, password: b, users: [] } }")
            .contains("\"users\" is not supported")
    );
    assert!(
        conf_err("cluster { authorization { user: a, password: \"$2a$11$abc\" } }")
            .contains("must be plain text")
    );
}

#[test]
fn secrets_never_appear_in_debug_output() {
    let cfg = conf(
        "authorization { users: [ { user: bob, password: hunter2secret } ] }\n\
         cluster { authorization { user: r, password: routesecret } }",
    );
    let auth = crate::auth::Authenticator::new(&cfg.auth);
    let token = conf("authorization { user: u, password: singlesecret }\n");
    let shown = format!("{auth:?} {cfg:?} {token:?}");
    assert!(!shown.contains("singlesecret"), "{shown}");
    assert!(
        !shown.contains("hunter2secret") && !shown.contains("routesecret"),
        "{shown}"
    );
}
