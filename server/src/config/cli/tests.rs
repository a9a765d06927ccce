//! Tests of the command line: every flag in every form, precedence over the config file, and
//! errors in Go's `flag` wording.

use std::fs;
use std::path::{Path, PathBuf};

use super::{CliOutcome, USAGE, parse};
use crate::config::file::ConfigError;
use crate::config::{Config, DEFAULT_PORT};

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn run(list: &[&str]) -> Config {
    match parse(&args(list)) {
        Ok(CliOutcome::Run(cfg)) => *cfg,
        other => panic!("expected Run for {list:?}, got {other:?}"),
    }
}

fn fail(list: &[&str]) -> ConfigError {
    match parse(&args(list)) {
        Err(e) => e,
        Ok(other) => panic!("expected an error for {list:?}, got {other:?}"),
    }
}

/// Every spelling of a flag: `-name v`, `--name v`, `-name=v`, `--name=v`.
fn spellings(name: &str, value: &str) -> Vec<Vec<String>> {
    vec![
        args(&[&format!("-{name}"), value]),
        args(&[&format!("--{name}"), value]),
        args(&[&format!("-{name}={value}")]),
        args(&[&format!("--{name}={value}")]),
    ]
}

/// Runs `check` on the config from every spelling of every name.
fn each_spelling(names: &[&str], value: &str, check: impl Fn(&Config)) {
    for name in names {
        for argv in spellings(name, value) {
            match parse(&argv) {
                Ok(CliOutcome::Run(cfg)) => check(&cfg),
                other => panic!("{argv:?}: {other:?}"),
            }
        }
    }
}

#[test]
fn no_arguments_give_the_defaults() {
    assert_eq!(run(&[]), Config::default());
}

#[test]
fn value_flags_in_every_form() {
    each_spelling(&["a", "addr", "net"], "127.0.0.1", |c| {
        assert_eq!(c.host, "127.0.0.1")
    });
    each_spelling(&["p", "port"], "4333", |c| assert_eq!(c.port, 4333));
    each_spelling(&["m", "http_port"], "8222", |c| {
        assert_eq!(c.http_port, Some(8222))
    });
    each_spelling(&["n", "name", "server_name"], "n1", |c| {
        assert_eq!(c.server_name.as_deref(), Some("n1"))
    });
    each_spelling(&["sd", "store_dir"], "/tmp/js", |c| {
        assert_eq!(c.jetstream.store_dir, PathBuf::from("/tmp/js"))
    });
    each_spelling(&["cluster_name"], "c1", |c| {
        assert_eq!(c.cluster.name.as_deref(), Some("c1"))
    });
    each_spelling(&["user"], "alice", |c| {
        assert_eq!(c.auth.user.as_deref(), Some("alice"))
    });
    each_spelling(&["pass"], "pw", |c| {
        assert_eq!(c.auth.password.as_deref(), Some("pw"))
    });
    each_spelling(&["auth"], "tok", |c| {
        assert_eq!(c.auth.token.as_deref(), Some("tok"))
    });
    each_spelling(&["l", "log"], "/tmp/j.log", |c| {
        assert_eq!(c.log.file, Some(PathBuf::from("/tmp/j.log")))
    });
}

#[test]
fn cluster_url_sets_cluster_host_and_port() {
    each_spelling(&["cluster", "cluster_listen"], "nats://0.0.0.0:6222", |c| {
        assert_eq!(
            (c.cluster.host.as_deref(), c.cluster.port),
            (Some("0.0.0.0"), Some(6222))
        );
    });
    let cfg = run(&["--cluster", "nats://127.0.0.1:-1"]);
    assert_eq!(cfg.cluster.port, Some(0), "-1 asks for a random port");
}

#[test]
fn routes_are_split_and_stripped_of_schemes() {
    each_spelling(
        &["routes"],
        "nats://a:6222,nats-route://b:6223, c:6224",
        |c| {
            assert_eq!(c.cluster.routes, ["a:6222", "b:6223", "c:6224"]);
        },
    );
}

#[test]
fn a_route_without_a_port_is_an_error() {
    let err = fail(&["--routes", "nats://a:6222,nats://b"]);
    assert_eq!(
        err.to_string(),
        "invalid value \"nats://a:6222,nats://b\" for flag --routes: route URL \"nats://b\" has no port"
    );
}

#[test]
fn bool_flags_take_no_value_but_accept_equals() {
    each_bool(&["D", "debug"], |c, on| assert_eq!(c.log.debug, on));
    each_bool(&["V", "trace"], |c, on| assert_eq!(c.log.trace, on));
    each_bool(&["js", "jetstream"], |c, on| {
        assert_eq!(c.jetstream.enabled, on);
        assert_eq!(c.jetstream.store_dir, Config::default().jetstream.store_dir);
    });
    assert!(
        !Config::default().jetstream.enabled,
        "JetStream is off unless enabled"
    );
}

/// `-name`, `--name`, `-name=true` set the flag; `-name=false` and `--name=0` clear it.
fn each_bool(names: &[&str], check: impl Fn(&Config, bool)) {
    for name in names {
        for (arg, on) in [
            (format!("-{name}"), true),
            (format!("--{name}"), true),
            (format!("-{name}=true"), true),
            (format!("--{name}=1"), true),
            (format!("-{name}=false"), false),
            (format!("--{name}=0"), false),
        ] {
            check(&run(&[&arg]), on);
        }
    }
}

#[test]
fn debug_and_trace_together() {
    for flag in ["-DV", "--DV", "-DV=true"] {
        let cfg = run(&[flag]);
        assert!(cfg.log.debug && cfg.log.trace, "{flag}");
    }
    let cfg = run(&["-D", "-V"]);
    assert!(cfg.log.debug && cfg.log.trace);
}

#[test]
fn a_bool_flag_does_not_take_the_next_argument() {
    let err = fail(&["-D", "false"]);
    assert_eq!(err.to_string(), "unrecognized command: \"false\"");
}

#[test]
fn a_bad_bool_value_is_an_error() {
    assert_eq!(
        fail(&["-js=maybe"]).to_string(),
        "invalid value \"maybe\" for flag -js: parse error"
    );
}

#[test]
fn version_and_help_in_every_form() {
    for flag in ["-v", "--v", "-version", "--version", "version"] {
        assert_eq!(
            parse(&args(&[flag])).ok(),
            Some(CliOutcome::Version),
            "{flag}"
        );
    }
    for flag in ["-h", "--h", "-help", "--help", "help"] {
        assert_eq!(parse(&args(&[flag])).ok(), Some(CliOutcome::Help), "{flag}");
    }
    assert_eq!(
        parse(&args(&["-p", "1", "--version"])).ok(),
        Some(CliOutcome::Version)
    );
    assert_eq!(
        parse(&args(&["-c", "/nonexistent.conf", "-h"])).ok(),
        Some(CliOutcome::Help),
        "help loads no file"
    );
}

#[test]
fn special_port_values_follow_nats_server() {
    assert_eq!(run(&["-p", "-1"]).port, 0, "-1 asks for a random port");
    assert_eq!(run(&["-p", "0"]).port, DEFAULT_PORT);
    assert_eq!(run(&["-m", "0"]).http_port, None);
    assert_eq!(run(&["-m=-1"]).http_port, Some(0));
}

#[test]
fn bad_ports_are_errors() {
    assert_eq!(
        fail(&["-p", "abc"]).to_string(),
        "invalid value \"abc\" for flag -p: port \"abc\" is not a number"
    );
    assert_eq!(
        fail(&["--port=70000"]).to_string(),
        "invalid value \"70000\" for flag --port: port 70000 is out of range (-1 to 65535)"
    );
    assert_eq!(
        fail(&["-m", "-5"]).to_string(),
        "invalid value \"-5\" for flag -m: port -5 is out of range (-1 to 65535)"
    );
    assert!(matches!(
        fail(&["-p", ""]),
        ConfigError::InvalidFlagValue { .. }
    ));
}

#[test]
fn unknown_flags_name_the_flag() {
    assert_eq!(
        fail(&["--max_payload", "1"]).to_string(),
        "flag provided but not defined: --max_payload"
    );
    assert_eq!(
        fail(&["-x=1"]).to_string(),
        "flag provided but not defined: -x"
    );
    assert_eq!(
        fail(&["-d"]).to_string(),
        "flag provided but not defined: -d",
        "flags are case-sensitive"
    );
    assert!(
        matches!(fail(&["-p", "1", "--nope"]), ConfigError::UnknownFlag { flag } if flag == "--nope")
    );
}

#[test]
fn missing_values_and_bad_syntax() {
    assert_eq!(fail(&["-p"]).to_string(), "flag needs an argument: -p");
    assert_eq!(
        fail(&["--config"]).to_string(),
        "flag needs an argument: --config"
    );
    assert_eq!(fail(&["---p", "1"]).to_string(), "bad flag syntax: ---p");
    assert_eq!(fail(&["-=1"]).to_string(), "bad flag syntax: -=1");
}

#[test]
fn a_value_flag_takes_the_next_argument_even_if_it_starts_with_a_dash() {
    assert_eq!(
        run(&["--pass", "-secret-"]).auth.password.as_deref(),
        Some("-secret-")
    );
}

#[test]
fn flags_end_at_double_dash_or_the_first_positional_argument() {
    assert_eq!(
        fail(&["-p", "1", "serve"]).to_string(),
        "unrecognized command: \"serve\""
    );
    assert_eq!(
        fail(&["--", "-p"]).to_string(),
        "unrecognized command: \"-p\""
    );
    assert_eq!(
        parse(&args(&["-D", "--", "version"])).ok(),
        Some(CliOutcome::Version)
    );
}

#[test]
fn names_with_spaces_are_rejected() {
    assert_eq!(
        fail(&["-n", "a b"]).to_string(),
        "invalid value \"a b\" for flag -n: can not contain spaces"
    );
    assert!(matches!(
        fail(&["--cluster_name", "x y"]),
        ConfigError::InvalidFlagValue { .. }
    ));
}

#[test]
fn the_last_occurrence_of_a_flag_wins() {
    assert_eq!(run(&["-p", "1", "--port=2", "-p", "3"]).port, 3);
}

fn config_file(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("j.conf");
    fs::write(&path, text).expect("write");
    let path = path.to_string_lossy().into_owned();
    (dir, path)
}

#[test]
fn the_config_file_beats_defaults() {
    let (_dir, path) = config_file("port: 1111\nserver_name: from-file\nmax_payload: 2MB");
    for flag in ["-c", "--config", "-config"] {
        let cfg = run(&[flag, &path]);
        assert_eq!(cfg.port, 1111);
        assert_eq!(cfg.server_name.as_deref(), Some("from-file"));
        assert_eq!(cfg.max_payload, 2 << 20);
    }
    assert_eq!(run(&[&format!("--config={path}")]).port, 1111);
}

#[test]
fn flags_beat_the_config_file_in_any_order() {
    let (_dir, path) = config_file(
        "port: 1111\nserver_name: from-file\ndebug: false\ncluster { routes: [nats://f:1] }\njetstream { store_dir: /file }",
    );
    let before = run(&[
        "-p",
        "2222",
        "-n",
        "flag",
        "-D",
        "--routes",
        "nats://r:2",
        "-sd",
        "/flag",
        "-c",
        &path,
    ]);
    let after = run(&[
        "-c",
        &path,
        "-p",
        "2222",
        "-n",
        "flag",
        "-D",
        "--routes",
        "nats://r:2",
        "-sd",
        "/flag",
    ]);
    assert_eq!(before, after);
    assert_eq!(after.port, 2222);
    assert_eq!(after.server_name.as_deref(), Some("flag"));
    assert!(after.log.debug);
    assert_eq!(
        after.cluster.routes,
        ["r:2"],
        "--routes replaces the file's routes"
    );
    assert_eq!(after.jetstream.store_dir, PathBuf::from("/flag"));
}

#[test]
fn settings_only_in_the_file_survive_flag_overrides() {
    let (_dir, path) = config_file("http_port: 8222\nauthorization { user: a, password: b }");
    let cfg = run(&["-c", &path, "-p", "5000"]);
    assert_eq!((cfg.port, cfg.http_port), (5000, Some(8222)));
    assert_eq!(cfg.auth.user.as_deref(), Some("a"));
}

#[test]
fn config_file_errors_pass_through() {
    let (_dir, path) = config_file("port: nope");
    assert_eq!(
        fail(&["-c", &path]).to_string(),
        format!("{path}:1:7: expected a number for \"port\", got \"nope\"")
    );
    let err = fail(&["-c", "/nonexistent/j.conf"]);
    assert!(
        matches!(&err, ConfigError::Read { path, .. } if path == Path::new("/nonexistent/j.conf"))
    );
}

#[test]
fn a_bad_flag_value_is_reported_before_the_file_is_read() {
    let err = fail(&["-c", "/nonexistent/j.conf", "-p", "x"]);
    assert!(matches!(err, ConfigError::InvalidFlagValue { .. }), "{err}");
}

#[test]
fn usage_lists_every_section_and_flag() {
    for section in [
        "Server Options:",
        "Logging Options:",
        "JetStream Options:",
        "Authorization Options:",
        "Cluster Options:",
        "Common Options:",
    ] {
        assert!(USAGE.contains(section), "{section}");
    }
    for flag in [
        "-a, --addr, --net <host>",
        "-p, --port <port>",
        "-m, --http_port <port>",
        "-n, --name",
        "--server_name <server_name>",
        "-js, --jetstream",
        "-sd, --store_dir <dir>",
        "-c, --config <file>",
        "--cluster_name <string>",
        "--cluster <cluster-url>",
        "--cluster_listen <url>",
        "--ports_file_dir <dir>",
        "--routes <rurl-1, rurl-2>",
        "--user <user>",
        "--pass <password>",
        "--auth <token>",
        "-D, --debug",
        "-V, --trace",
        "-DV ",
        "-l, --log <file>",
        "-v, --version",
        "-h, --help",
    ] {
        assert!(USAGE.contains(flag), "{flag}");
    }
}

#[test]
fn ports_file_dir_from_the_flag_or_the_file() {
    each_spelling(&["ports_file_dir"], "/tmp/p", |c| {
        assert_eq!(c.ports_file_dir.as_deref(), Some(Path::new("/tmp/p")))
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("j.conf");
    fs::write(&conf, "ports_file_dir: \"/tmp/q\"\n").expect("write");
    let c = run(&["-c", conf.to_str().expect("utf-8 path")]);
    assert_eq!(c.ports_file_dir.as_deref(), Some(Path::new("/tmp/q")));
    assert_eq!(Config::default().ports_file_dir, None);
}

#[test]
fn pid_flag_and_lame_duck_settings() {
    each_spelling(&["P", "pid"], "/run/j.pid", |c| {
        assert_eq!(c.pid_file.as_deref(), Some(Path::new("/run/j.pid")))
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("j.conf");
    fs::write(
        &conf,
        "pid_file: \"/run/x.pid\"\nlame_duck_duration: \"30s\"\nlame_duck_grace_period: \"10s\"\n",
    )
    .expect("write");
    let c = run(&["-c", conf.to_str().expect("utf-8 path")]);
    assert_eq!(c.pid_file.as_deref(), Some(Path::new("/run/x.pid")));
    assert_eq!(c.lame_duck_duration, std::time::Duration::from_secs(30));
    assert_eq!(c.lame_duck_grace_period, std::time::Duration::from_secs(10));
    assert_eq!(
        Config::default().lame_duck_duration,
        std::time::Duration::from_secs(120)
    );
}

#[test]
fn signal_flag_names_the_process_or_falls_back_to_the_pid_file() {
    let outcome = |list: &[&str]| parse(&args(list)).expect("parses");
    assert_eq!(
        outcome(&["--signal", "ldm=/var/run/j.pid"]),
        CliOutcome::Signal {
            command: "ldm".to_string(),
            target: Some("/var/run/j.pid".to_string()),
        }
    );
    assert_eq!(
        outcome(&["-sl=term=42"]),
        CliOutcome::Signal {
            command: "term".to_string(),
            target: Some("42".to_string()),
        }
    );
    assert_eq!(
        outcome(&["-P", "/run/k.pid", "-sl", "ldm"]),
        CliOutcome::Signal {
            command: "ldm".to_string(),
            target: Some("/run/k.pid".to_string()),
        }
    );
    assert_eq!(
        outcome(&["--signal", "quit"]),
        CliOutcome::Signal {
            command: "quit".to_string(),
            target: None,
        }
    );
}

#[test]
fn the_console_is_on_unless_the_flag_or_the_file_turns_it_off() {
    assert!(run(&[]).console);
    assert!(!run(&["--no_console"]).console);
    assert!(!run(&["-no_console=true"]).console);
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("j.conf");
    fs::write(&conf, "console: false\n").expect("write");
    let path = conf.to_str().expect("utf-8 path");
    assert!(!run(&["-c", path]).console);
    fs::write(&conf, "console: true\n").expect("write");
    assert!(!run(&["-c", path, "--no_console"]).console);
    assert!(USAGE.contains("--no_console"));
}
