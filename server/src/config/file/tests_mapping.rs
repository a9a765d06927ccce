//! Tests of the mapping from config text to [`Config`]: every key, aliases, types, sizes,
//! durations, permissions, and errors with file and line.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{ConfigError, apply, apply_with_env, load};
use crate::config::{Config, DEFAULT_PORT, Permissions, SubjectPermission, UserConfig};

/// No environment variables (shared by the config test modules).
pub(super) fn no_env(_: &str) -> Option<String> {
    None
}

/// `text` applied to a default config; panics on an error.
pub(super) fn conf(text: &str) -> Config {
    let mut cfg = Config::default();
    apply_with_env(text, Path::new("test.conf"), &mut cfg, &no_env)
        .unwrap_or_else(|e| panic!("config failed: {e}\n{text}"));
    cfg
}

/// The error `text` is refused with; panics if it is accepted.
pub(super) fn conf_err(text: &str) -> String {
    let mut cfg = Config::default();
    match apply_with_env(text, Path::new("test.conf"), &mut cfg, &no_env) {
        Ok(()) => panic!("expected an error for {text:?}, got {cfg:?}"),
        Err(e) => e.to_string(),
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn listen_sets_host_and_port_in_every_form() {
    let cfg = conf("listen: 127.0.0.1:4333");
    assert_eq!((cfg.host.as_str(), cfg.port), ("127.0.0.1", 4333));
    let cfg = conf("listen = \":4334\"");
    assert_eq!(
        (cfg.host.as_str(), cfg.port),
        ("0.0.0.0", 4334),
        "no host keeps the default"
    );
    let cfg = conf("listen 4335");
    assert_eq!((cfg.host.as_str(), cfg.port), ("0.0.0.0", 4335));
    let cfg = conf("listen: \"[::1]:4336\"");
    assert_eq!((cfg.host.as_str(), cfg.port), ("::1", 4336));
    let cfg = conf("listen: localhost:-1");
    assert_eq!(
        (cfg.host.as_str(), cfg.port),
        ("localhost", 0),
        "-1 asks for a random port"
    );
}

#[test]
fn host_net_and_port_keys() {
    let cfg = conf("host: 10.0.0.1\nport: 4999");
    assert_eq!((cfg.host.as_str(), cfg.port), ("10.0.0.1", 4999));
    assert_eq!(conf("net: 10.0.0.2").host, "10.0.0.2");
    assert_eq!(
        conf("port: 0").port,
        DEFAULT_PORT,
        "0 means the default, as in nats-server"
    );
    assert_eq!(conf("port: -1").port, 0);
}

#[test]
fn bad_ports_are_errors_naming_the_key() {
    assert_eq!(
        conf_err("port: abc"),
        "test.conf:1:7: expected a number for \"port\", got \"abc\""
    );
    assert_eq!(
        conf_err("\n\n  port: 70000"),
        "test.conf:3:9: port 70000 is out of range (-1 to 65535)"
    );
    assert_eq!(
        conf_err("port: \"4222\""),
        "test.conf:1:7: expected a number for \"port\", got the quoted string \"4222\""
    );
    assert_eq!(
        conf_err("port: [1]"),
        "test.conf:1:7: expected a number for \"port\", got an array"
    );
    assert_eq!(
        conf_err("listen: localhost"),
        "test.conf:1:9: \"listen\": missing port in address \"localhost\""
    );
    assert_eq!(
        conf_err("listen: h:x"),
        "test.conf:1:9: \"listen\": port \"x\" is not a number"
    );
}

#[test]
fn monitoring_port_from_http_http_port_or_monitor_port() {
    let cfg = conf("http: 8222");
    assert_eq!((cfg.http_host, cfg.http_port), (None, Some(8222)));
    let cfg = conf("http: 127.0.0.1:8223");
    assert_eq!(
        (cfg.http_host.as_deref(), cfg.http_port),
        (Some("127.0.0.1"), Some(8223))
    );
    assert_eq!(conf("http_port: 8224").http_port, Some(8224));
    assert_eq!(conf("monitor_port: 8225").http_port, Some(8225));
    assert_eq!(
        conf("http_port: 8224\nhttp_port: 0").http_port,
        None,
        "0 turns monitoring off"
    );
    assert_eq!(conf("http_port: -1").http_port, Some(0));
}

#[test]
fn server_name_is_set_and_may_not_contain_spaces() {
    assert_eq!(conf("server_name: n1").server_name.as_deref(), Some("n1"));
    assert_eq!(
        conf("server_name: \"node-2\"").server_name.as_deref(),
        Some("node-2")
    );
    assert_eq!(
        conf_err("server_name: \"a b\""),
        "test.conf:1:14: \"server_name\" can not contain spaces, got \"a b\""
    );
}

#[test]
fn server_tags_are_a_string_or_a_list_lower_cased_without_duplicates() {
    assert_eq!(conf("server_tags: Az:1").server_tags, ["az:1"]);
    assert_eq!(
        conf("server_tags: [\"ssd\", \" Az:1 \", \"SSD\", \"\"]").server_tags,
        ["ssd", "az:1"]
    );
    assert!(conf("port: 4222").server_tags.is_empty());
}

#[test]
fn keys_are_case_insensitive() {
    let cfg = conf("PORT: 1234\nServer_Name: x\nJetStream { Store_Dir: /d }\nCLUSTER { NAME: c }");
    assert_eq!(cfg.port, 1234);
    assert_eq!(cfg.server_name.as_deref(), Some("x"));
    assert_eq!(cfg.jetstream.store_dir, PathBuf::from("/d"));
    assert_eq!(cfg.cluster.name.as_deref(), Some("c"));
}

#[test]
fn jetstream_block_sets_store_dir_and_limits_with_aliases() {
    let cfg = conf(
        "jetstream {\n  store_dir: \"/var/js\"\n  max_memory_store: 1GB\n  max_file_store: 10G\n}",
    );
    assert_eq!(cfg.jetstream.store_dir, PathBuf::from("/var/js"));
    assert_eq!(cfg.jetstream.max_memory_store, Some(1 << 30));
    assert_eq!(cfg.jetstream.max_file_store, Some(10_000_000_000));
    let cfg = conf("jetstream { store: /a, max_mem: \"1G\", max_file: 64MB }");
    assert_eq!(cfg.jetstream.store_dir, PathBuf::from("/a"));
    assert_eq!(
        cfg.jetstream.max_memory_store,
        Some(1 << 30),
        "quoted sizes are binary"
    );
    assert_eq!(cfg.jetstream.max_file_store, Some(64 << 20));
    let cfg = conf("jetstream { max_mem_store: -1, storedir: /b }");
    assert_eq!(cfg.jetstream.max_memory_store, None, "-1 means unset");
    assert_eq!(cfg.jetstream.store_dir, PathBuf::from("/b"));
    assert_eq!(
        conf("store_dir: /top").jetstream.store_dir,
        PathBuf::from("/top")
    );
}

#[test]
fn jetstream_switch_forms_turn_it_on_and_off() {
    for (text, on) in [
        ("jetstream: enabled", true),
        ("jetstream: true", true),
        ("jetstream = on", true),
        ("jetstream: \"enabled\"", true),
        ("jetstream: disabled", false),
        ("jetstream: false", false),
        ("jetstream {}", true),
        ("jetstream { enabled: true }", true),
        ("jetstream { enabled: false, store_dir: /x }", false),
        ("store_dir: /top", false),
        ("port: 4222", false),
    ] {
        assert_eq!(conf(text).jetstream.enabled, on, "{text}");
    }
    assert_eq!(
        Config::default().jetstream.store_dir,
        std::env::temp_dir().join("nats/jetstream")
    );
}

#[test]
fn jetstream_wrong_types_are_errors() {
    assert_eq!(
        conf_err("jetstream: maybe"),
        "test.conf:1:12: expected true, \"enabled\" or a block { ... } for \"jetstream\", got \"maybe\""
    );
    assert_eq!(
        conf_err("jetstream { enabled: 3 }"),
        "test.conf:1:22: expected true or false for \"enabled\", got \"3\""
    );
    assert_eq!(
        conf_err("jetstream {\n  max_file_store: lots\n}"),
        "test.conf:2:19: expected a size such as 1024, 64KB, 1MB or 2GB for \"max_file_store\", got \"lots\""
    );
    assert_eq!(
        conf_err("jetstream { store_dir: [a] }"),
        "test.conf:1:24: expected a string for \"store_dir\", got an array"
    );
}

#[test]
fn cluster_block_sets_name_listen_and_routes() {
    let text = "cluster {\n  name: c1\n  listen: 0.0.0.0:6222\n  routes = [\n    nats://n1:6222\n    nats-route://n2:6223\n    \"n3:6224\"\n  ]\n}";
    let cfg = conf(text);
    assert_eq!(cfg.cluster.name.as_deref(), Some("c1"));
    assert_eq!(cfg.cluster.host.as_deref(), Some("0.0.0.0"));
    assert_eq!(cfg.cluster.port, Some(6222));
    assert_eq!(
        cfg.cluster.routes,
        strings(&["n1:6222", "n2:6223", "n3:6224"])
    );
    let cfg = conf("cluster { host: 10.1.1.1, port: 7222 }");
    assert_eq!(
        (cfg.cluster.host.as_deref(), cfg.cluster.port),
        (Some("10.1.1.1"), Some(7222))
    );
    assert_eq!(conf("cluster { listen: 7000 }").cluster.port, Some(7000));
}

#[test]
fn cluster_errors_point_at_the_bad_item() {
    assert_eq!(
        conf_err("cluster {\n  routes = [\n    nats://ok:1\n    nats://noport\n  ]\n}"),
        "test.conf:4:5: route URL \"nats://noport\" has no port"
    );
    assert_eq!(
        conf_err("cluster: yes"),
        "test.conf:1:10: expected a block { ... } for \"cluster\", got \"yes\""
    );
    assert_eq!(
        conf_err("cluster { routes: nats://a:1 }"),
        "test.conf:1:19: expected an array [ ... ] for \"routes\", got \"nats://a:1\""
    );
    assert_eq!(
        conf_err("cluster { name: \"a b\" }"),
        "test.conf:1:17: \"name\" can not contain spaces, got \"a b\""
    );
    assert!(
        conf_err("cluster { authorization { user: a } }")
            .contains("\"authorization\" in \"cluster\" needs a user and a password")
    );
}

#[test]
fn authorization_single_user_token_and_timeout() {
    let cfg = conf("authorization {\n  user: alice\n  password: s3cret\n  timeout: 0.5\n}");
    assert_eq!(cfg.auth.user.as_deref(), Some("alice"));
    assert_eq!(cfg.auth.password.as_deref(), Some("s3cret"));
    assert_eq!(cfg.auth.timeout, Duration::from_millis(500));
    assert!(cfg.auth.required());
    let cfg = conf("authorization { token: \"t0k\", timeout: \"3s\" }");
    assert_eq!(cfg.auth.token.as_deref(), Some("t0k"));
    assert_eq!(cfg.auth.timeout, Duration::from_secs(3));
    let cfg = conf("authorization { username: bob, pass: pw, timeout: 5 }");
    assert_eq!(
        (cfg.auth.user.as_deref(), cfg.auth.password.as_deref()),
        (Some("bob"), Some("pw"))
    );
    assert_eq!(cfg.auth.timeout, Duration::from_secs(5));
}

#[test]
fn bcrypt_passwords_need_no_quotes() {
    let hash = "$2a$11$W2zko751KUvVy59mUTWmpOdWjpEm5qhcCZRd05GjI/sSOT.xtiHyG";
    let cfg = conf(&format!("authorization {{ user: a, password: {hash} }}"));
    assert_eq!(cfg.auth.password.as_deref(), Some(hash));
}

#[test]
fn users_with_every_permission_form() {
    let text = r#"
authorization {
  users = [
    { user: a, password: pa }
    { user: b, password: pb, permissions: { publish: "orders.>", subscribe: ["x", "y.*"] } }
    { user: c, password: pc, permissions: {
        publish: { allow: ["p.>"], deny: "p.secret" }
        subscribe: { deny: [z] }
    } }
    { user: d, password: pd, permissions { pub: one, sub: "work.* workers" } }
  ]
}"#;
    let cfg = conf(text);
    let allow = |a: &[&str]| {
        Some(SubjectPermission {
            allow: strings(a),
            deny: vec![],
        })
    };
    let expected = vec![
        UserConfig {
            user: "a".into(),
            password: "pa".into(),
            nkey: None,
            permissions: None,
        },
        UserConfig {
            user: "b".into(),
            password: "pb".into(),
            nkey: None,
            permissions: Some(Permissions {
                publish: allow(&["orders.>"]),
                subscribe: allow(&["x", "y.*"]),
                responses: None,
            }),
        },
        UserConfig {
            user: "c".into(),
            password: "pc".into(),
            nkey: None,
            permissions: Some(Permissions {
                publish: Some(SubjectPermission {
                    allow: strings(&["p.>"]),
                    deny: strings(&["p.secret"]),
                }),
                subscribe: Some(SubjectPermission {
                    allow: vec![],
                    deny: strings(&["z"]),
                }),
                responses: None,
            }),
        },
        UserConfig {
            user: "d".into(),
            password: "pd".into(),
            nkey: None,
            permissions: Some(Permissions {
                publish: allow(&["one"]),
                subscribe: allow(&["work.* workers"]),
                responses: None,
            }),
        },
    ];
    assert_eq!(cfg.auth.users, expected);
    assert!(cfg.auth.required());
}

#[test]
fn variables_feed_users_and_permissions() {
    let text = "PASS = s3\nPUB = { allow: [\"a.>\"] }\nauthorization {\n  ADMIN = admin\n  users [ { user: $ADMIN, password: $PASS, permissions { publish: $PUB } } ]\n}";
    let cfg = conf(text);
    assert_eq!(cfg.auth.users[0].user, "admin");
    assert_eq!(cfg.auth.users[0].password, "s3");
    let publish = cfg.auth.users[0]
        .permissions
        .as_ref()
        .and_then(|p| p.publish.clone());
    assert_eq!(
        publish,
        Some(SubjectPermission {
            allow: strings(&["a.>"]),
            deny: vec![]
        })
    );
}

#[test]
fn authorization_errors() {
    let cases = [
        (
            "authorization { users: [ { password: x } ] }",
            "test.conf:1:26: user entry requires a \"user\" or an \"nkey\"",
        ),
        (
            "authorization { users: [ a ] }",
            "test.conf:1:26: expected a block { ... } for \"users\", got \"a\"",
        ),
        (
            "authorization {\n  user: a\n  users: [ {user: b} ]\n}",
            "test.conf:1:15: can not have a single user/pass and a users array in \"authorization\"",
        ),
        (
            "authorization { token: t, users: [ {user: b} ] }",
            "test.conf:1:15: can not have a token and a users array in \"authorization\"",
        ),
        (
            "authorization { user: [a] }",
            "test.conf:1:23: expected a string for \"user\", got an array",
        ),
        (
            "authorization { timeout: soon }",
            "test.conf:1:26: expected a duration such as \"10s\" or \"2m\" for \"timeout\", got \"soon\": expected a number before the unit",
        ),
        (
            "authorization { users: [ { user: a, permissions: { publish: { allow: [\"a..b\"] } } } ] }",
            "test.conf:1:71: \"a..b\" in \"allow\" is not a valid subject",
        ),
        (
            "authorization { users: [ { user: a, permissions: { publish: \"q g\" } } ] }",
            "test.conf:1:61: \"q g\" in \"publish\" is not a valid subject",
        ),
        (
            "authorization { users: [ { user: a, permissions: { publish: { only: x } } } ] }",
            "test.conf:1:69: unknown key \"only\" in subject permissions; only \"allow\" and \"deny\" are permitted",
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(conf_err(text), expected, "for {text}");
    }
}

#[test]
fn auth_settings_jetraft_lacks_are_refused_not_ignored() {
    for (text, key) in [
        (
            "authorization { auth_callout: { issuer: x } }",
            "auth_callout",
        ),
        (
            "accounts { A { jetstream: { cluster_traffic: owner } } }",
            "cluster_traffic",
        ),
        ("accounts { A { mappings: { a: b } } }", "mappings"),
        ("accounts { A { limits: { max_conn: 1 } } }", "limits"),
        ("operator: /op.jwt", "operator"),
    ] {
        let err = conf_err(text);
        assert!(
            err.contains(&format!("{key:?} is not supported by jetraft")),
            "{text}: {err}"
        );
    }
}

#[test]
fn limits_accept_sizes() {
    let cfg =
        conf("max_payload: 2MB\nmax_control_line: 8KB\nmax_pending: 128MB\nmax_connections: 1K");
    assert_eq!(cfg.max_payload, 2 << 20);
    assert_eq!(cfg.max_control_line, 8 << 10);
    assert_eq!(cfg.max_pending, 128 << 20);
    assert_eq!(cfg.max_connections, 1000, "K is 1000, as in nats-server");
    let cfg = conf("max_payload = 65536\nmax_conn: 10");
    assert_eq!((cfg.max_payload, cfg.max_connections), (65536, 10));
}

#[test]
fn limits_out_of_range_are_errors() {
    assert_eq!(
        conf_err("max_payload: 4GB"),
        "test.conf:1:14: \"max_payload\" value 4294967296 is too big (at most 2147483647)"
    );
    assert_eq!(
        conf_err("max_payload: -5"),
        "test.conf:1:14: \"max_payload\" can not be negative, got -5"
    );
    assert_eq!(
        conf_err("max_connections: 5G"),
        "test.conf:1:18: \"max_connections\" value 5000000000 is too big (at most 4294967295)"
    );
    assert_eq!(
        conf_err("max_pending: many"),
        "test.conf:1:14: expected a size such as 1024, 64KB, 1MB or 2GB for \"max_pending\", got \"many\""
    );
    assert_eq!(
        conf_err("max_pending: 99999999999999999999"),
        "test.conf:1:14: size \"99999999999999999999\" for \"max_pending\" is too big"
    );
}

#[test]
fn durations_accept_go_strings_bare_units_and_seconds() {
    let cfg = conf("ping_interval: \"2m\"\nwrite_deadline: \"500ms\"");
    assert_eq!(cfg.ping_interval, Duration::from_secs(120));
    assert_eq!(cfg.write_deadline, Duration::from_millis(500));
    assert_eq!(
        conf("ping_interval: 30").ping_interval,
        Duration::from_secs(30)
    );
    assert_eq!(
        conf("ping_interval: 1h30m").ping_interval,
        Duration::from_secs(5400)
    );
    assert_eq!(
        conf("ping_interval: 2m").ping_interval,
        Duration::from_secs(120)
    );
    assert_eq!(
        conf("write_deadline: 2.5").write_deadline,
        Duration::from_millis(2500)
    );
    assert_eq!(
        conf("ping_interval: 0").ping_interval,
        Config::default().ping_interval,
        "0 means the default"
    );
    assert_eq!(
        conf_err("ping_interval: \"10\""),
        "test.conf:1:16: expected a duration such as \"10s\" or \"2m\" for \"ping_interval\", got the quoted string \"10\": missing unit (ns, us, ms, s, m or h)"
    );
    assert!(conf_err("write_deadline: -1").contains("can not be negative"));
}

#[test]
fn ping_max_debug_trace_and_log_file() {
    let cfg = conf("ping_max: 5\ndebug: true\ntrace: yes\nlog_file: \"/tmp/j.log\"");
    assert_eq!(cfg.ping_max, 5);
    assert!(cfg.log.debug && cfg.log.trace);
    assert_eq!(cfg.log.file, Some(PathBuf::from("/tmp/j.log")));
    let cfg = conf("debug: on\ntrace: off\nlogfile: x.log");
    assert!(cfg.log.debug && !cfg.log.trace);
    assert_eq!(cfg.log.file, Some(PathBuf::from("x.log")));
    assert_eq!(
        conf_err("debug: \"true\""),
        "test.conf:1:8: expected true or false for \"debug\", got the quoted string \"true\""
    );
    assert_eq!(
        conf_err("ping_max: 2.5"),
        "test.conf:1:11: expected a number for \"ping_max\", got \"2.5\""
    );
}

#[test]
fn unknown_keys_are_ignored_even_with_nested_values() {
    let text = r#"
tls { cert_file: "./c.pem", key_file: "./k.pem", timeout: 2 }
leafnodes { listen: 0.0.0.0:7422, remotes = [ { url: "nats://x:7422" } ] }
mqtt { port: 1883 }
lame_duck_duration: "30s"
accounts { SYS: {} }
system_account: SYS
jetstream { domain: hub, sync_interval: "2m" }
cluster { pool_size: 3, compression: s2_auto }
port: 4444
"#;
    let cfg = conf(text);
    assert_eq!(cfg.port, 4444);
    let enabled = crate::config::JetStreamConfig {
        enabled: true,
        domain: Some("hub".to_string()),
        ..Config::default().jetstream
    };
    assert_eq!(cfg.jetstream, enabled);
}

#[test]
fn later_keys_win() {
    let cfg = conf("port: 1\nlisten: h:2\nport: 3");
    assert_eq!((cfg.host.as_str(), cfg.port), ("h", 3));
}

#[test]
fn a_failed_apply_leaves_the_config_unchanged() {
    let mut cfg = Config::default();
    let err = apply_with_env(
        "port: 1111\nmax_payload: lots",
        Path::new("t.conf"),
        &mut cfg,
        &no_env,
    );
    assert!(err.is_err());
    assert_eq!(cfg, Config::default());
}

#[test]
fn apply_reads_the_process_environment() {
    let Ok(path) = std::env::var("PATH") else {
        return;
    };
    let mut cfg = Config::default();
    apply("log_file: $PATH", Path::new("t.conf"), &mut cfg).expect("applies");
    assert_eq!(cfg.log.file, Some(PathBuf::from(path)));
}

#[test]
fn environment_values_are_typed_by_the_key() {
    let env = |name: &str| match name {
        "JR_PORT" => Some("4555".to_string()),
        "JR_SIZE" => Some("2MB".to_string()),
        _ => None,
    };
    let mut cfg = Config::default();
    apply_with_env(
        "port: $JR_PORT\nmax_payload: $JR_SIZE",
        Path::new("t.conf"),
        &mut cfg,
        &env,
    )
    .expect("applies");
    assert_eq!((cfg.port, cfg.max_payload), (4555, 2 << 20));
}

#[test]
fn load_reads_a_file_with_includes_over_defaults() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(dir.path().join("auth.conf"), "authorization { token: abc }").expect("write");
    fs::write(
        dir.path().join("main.conf"),
        "port: 4800\ninclude auth.conf\n",
    )
    .expect("write");
    let cfg = load(&dir.path().join("main.conf")).expect("loads");
    assert_eq!(cfg.port, 4800);
    assert_eq!(cfg.auth.token.as_deref(), Some("abc"));
    assert_eq!(cfg.max_payload, Config::default().max_payload);
}

#[test]
fn load_errors_name_the_file_and_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.conf");
    fs::write(&path, "# header\nport: 4222\n\n  max_payload: huge\n").expect("write");
    let err = load(&path).expect_err("fails").to_string();
    assert_eq!(
        err,
        format!(
            "{}:4:16: expected a size such as 1024, 64KB, 1MB or 2GB for \"max_payload\", got \"huge\"",
            path.display()
        )
    );
}

#[test]
fn a_missing_file_is_a_read_error_with_the_os_reason_as_source() {
    let path = Path::new("/nonexistent/jetraft/x.conf");
    let err = load(path).expect_err("fails");
    assert_eq!(
        err.to_string(),
        "cannot read config file /nonexistent/jetraft/x.conf"
    );
    assert!(
        matches!(&err, ConfigError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    );
    assert!(std::error::Error::source(&err).is_some());
}

#[test]
fn a_realistic_nats_server_config_maps_completely() {
    let text = r#"
# jetraft node 1
server_name: n1
listen: 0.0.0.0:4222
http: 8222
max_payload: 1MB
ping_interval: "20s"
jetstream {
  store_dir: /data/n1
  max_mem: 256MB
}
cluster {
  name: jr
  listen: 0.0.0.0:6222
  routes: [
    nats-route://n1:6222
    nats-route://n2:6222
    nats-route://n3:6222
  ]
}
"#;
    let cfg = conf(text);
    assert_eq!(cfg.server_name.as_deref(), Some("n1"));
    assert_eq!(cfg.http_port, Some(8222));
    assert_eq!(cfg.ping_interval, Duration::from_secs(20));
    assert_eq!(cfg.jetstream.max_memory_store, Some(256 << 20));
    assert_eq!(
        cfg.cluster.routes,
        strings(&["n1:6222", "n2:6222", "n3:6222"])
    );
    assert_eq!(cfg.cluster.port, Some(6222));
}
