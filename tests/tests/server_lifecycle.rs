//! The server's life as nats-server's, seen from outside the process: the ports file
//! (`ports_file_dir`), JetStream only when enabled, a store dir that only one server may use,
//! the command-line aliases test launchers use, the log lines launchers parse, and the wildcard
//! host taking IPv6 clients.
//!
//! Every test passes against jetraft and the real nats-server (`JETRAFT_TEST_SERVER=nats-server`).

use std::path::PathBuf;
use std::time::Duration;

use jetraft_tests::harness::{
    RawClient, ServerKind, ServerOptions, ServerProcess, connect, round_trip, server_kind, wait_for,
};
use serde_json::Value;

/// The `*.ports` files in `dir`.
fn ports_files(dir: &std::path::Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .expect("read ports dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "ports"))
        .collect()
}

#[tokio::test]
async fn ports_file_lists_the_urls_and_is_removed_on_shutdown() {
    let ports_dir = tempfile::tempdir().expect("tempdir");
    let dir = ports_dir.path().display().to_string();
    let mut srv = ServerProcess::start(ServerOptions::default().args(["--ports_file_dir", &dir]))
        .await
        .expect("start server");
    let pid = srv.pid().expect("running");
    let exe = srv
        .binary()
        .file_name()
        .expect("binary has a name")
        .to_string_lossy()
        .into_owned();
    let expected = ports_dir.path().join(format!("{exe}_{pid}.ports"));
    let text = wait_for("ports file", Duration::from_secs(10), || {
        let expected = expected.clone();
        async move { std::fs::read_to_string(&expected).ok() }
    })
    .await;
    let ports: Value = serde_json::from_str(&text).expect("ports file is JSON");
    // The harness binds 127.0.0.1: one URL per listener, and no cluster key without a cluster.
    assert_eq!(
        ports,
        serde_json::json!({
            "nats": [srv.client_url()],
            "monitoring": [srv.http_url()],
        }),
        "{text}"
    );
    let nc = connect(&srv).await;
    round_trip(&nc).await;
    drop(nc);
    srv.stop().await.expect("stop");
    assert!(!expected.exists(), "the ports file outlived the server");
    assert!(ports_files(ports_dir.path()).is_empty());
}

#[tokio::test]
async fn ports_file_dir_from_the_config_file_lists_a_cluster_listener() {
    let ports_dir = tempfile::tempdir().expect("tempdir");
    // nats-server refuses a JetStream cluster without routes: one to a port nobody listens on.
    let config = format!(
        "ports_file_dir: \"{}\"\ncluster {{ name: pf, listen: \"127.0.0.1:-1\", routes: [\"nats://127.0.0.1:{}\"] }}\n",
        ports_dir.path().display(),
        jetraft_tests::harness::free_port()
    );
    let mut srv = ServerProcess::start(ServerOptions::with_config(config))
        .await
        .expect("start server");
    let ports = wait_ports_file(ports_dir.path()).await;
    assert_eq!(ports["nats"], serde_json::json!([srv.client_url()]));
    let cluster = ports["cluster"].as_array().expect("cluster URLs");
    assert_eq!(cluster.len(), 1, "{ports}");
    let url = cluster[0].as_str().expect("a URL");
    assert!(url.starts_with("nats://127.0.0.1:"), "{url}");
    let port: u16 = url.rsplit(':').next().unwrap().parse().expect("a port");
    assert_ne!(port, 0);
    std::net::TcpStream::connect(("127.0.0.1", port)).expect("the cluster port listens");
    srv.stop().await.expect("stop");
    assert!(ports_files(ports_dir.path()).is_empty());
}

/// Waits (bounded) for a ports file in `dir` and returns its JSON.
async fn wait_ports_file(dir: &std::path::Path) -> Value {
    wait_for("ports file", Duration::from_secs(10), || {
        let dir = dir.to_path_buf();
        async move {
            let file = ports_files(&dir).pop()?;
            serde_json::from_str(&std::fs::read_to_string(file).ok()?).ok()
        }
    })
    .await
}

/// A raw `$JS.API.INFO` request through async-nats: the JSON answer, or the request error.
async fn js_api_info(nc: &async_nats::Client) -> Result<Value, async_nats::RequestErrorKind> {
    match tokio::time::timeout(
        Duration::from_secs(5),
        nc.request("$JS.API.INFO", bytes::Bytes::new()),
    )
    .await
    {
        Ok(Ok(msg)) => Ok(serde_json::from_slice(&msg.payload).expect("API answers JSON")),
        Ok(Err(e)) => Err(e.kind()),
        Err(_) => Err(async_nats::RequestErrorKind::TimedOut),
    }
}

#[tokio::test]
async fn without_js_the_api_has_no_responders_and_the_store_is_untouched() {
    let srv = ServerProcess::start(ServerOptions::default().without_jetstream())
        .await
        .expect("start server");
    let mut raw = RawClient::connect_to(&srv).await;
    let info = raw.read_info().await;
    assert!(info.get("jetstream").is_none(), "INFO: {info}");
    let nc = connect(&srv).await;
    assert!(!nc.server_info().jetstream);
    assert_eq!(
        js_api_info(&nc).await.map(|_| ()),
        Err(async_nats::RequestErrorKind::NoResponders)
    );
    round_trip(&nc).await;

    let varz = srv.monitor_json("/varz").await.expect("varz");
    assert_eq!(varz["jetstream"], serde_json::json!({}), "{varz}");
    let jsz = srv.monitor_json("/jsz").await.expect("jsz");
    assert_eq!(jsz["disabled"], true, "{jsz}");
    let health = srv.http_get("/healthz").await.expect("healthz");
    assert_eq!(health.status, 200, "{}", health.body);

    // The harness made the store dir (-sd); nothing was written into it.
    let store = srv.dir().join("store");
    let written: Vec<_> = std::fs::read_dir(&store)
        .expect("store dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(written.is_empty(), "store dir holds {written:?}");
}

#[tokio::test]
async fn a_jetstream_block_in_the_config_enables_it_without_the_flag() {
    let srv = ServerProcess::start(
        ServerOptions::with_config("jetstream {\n  max_memory_store: 64MB\n}\n")
            .without_jetstream(),
    )
    .await
    .expect("start server");
    let nc = connect(&srv).await;
    assert!(nc.server_info().jetstream);
    let info = wait_for("JetStream answers", Duration::from_secs(20), || {
        let nc = nc.clone();
        async move { js_api_info(&nc).await.ok() }
    })
    .await;
    assert_eq!(
        info["type"], "io.nats.jetstream.api.v1.account_info_response",
        "{info}"
    );

    let off = ServerProcess::start(
        ServerOptions::with_config("jetstream: disabled\n").without_jetstream(),
    )
    .await
    .expect("start server");
    let nc = connect(&off).await;
    assert!(!nc.server_info().jetstream);
    assert_eq!(
        js_api_info(&nc).await.map(|_| ()),
        Err(async_nats::RequestErrorKind::NoResponders)
    );
}

#[tokio::test]
async fn a_second_server_on_the_same_store_dir_stops_with_a_clear_message() {
    let first = ServerProcess::start(ServerOptions::default())
        .await
        .expect("start server");
    let store = first.dir().join("store").display().to_string();
    let second = ServerProcess::start(ServerOptions {
        startup_timeout: Some(Duration::from_secs(10)),
        ..ServerOptions::default().args(["-sd", &store])
    })
    .await;
    match server_kind() {
        // nats-server shares the dir (it keeps no lock); jetraft's one RocksDB per node cannot.
        ServerKind::NatsServer => {
            let second = second.expect("nats-server starts on a shared store dir");
            round_trip(&connect(&second).await).await;
        }
        ServerKind::Jetraft => {
            let err = format!(
                "{:#}",
                second.err().expect("the second server must not start")
            );
            let pid = first.pid().expect("first runs");
            let wanted = format!("store dir {store} is in use by another server (pid {pid})");
            assert!(err.contains(&wanted), "{err}");
            assert!(!err.contains("panicked"), "{err}");
        }
    }
    // The first server is unharmed.
    let nc = connect(&first).await;
    assert!(js_api_info(&nc).await.is_ok());
}

#[tokio::test]
async fn cluster_listen_is_the_cluster_flag_under_another_name() {
    let ports_dir = tempfile::tempdir().expect("tempdir");
    let route = format!("nats://127.0.0.1:{}", jetraft_tests::harness::free_port());
    let dir = ports_dir.path().display().to_string();
    let srv = ServerProcess::start(ServerOptions::default().args([
        "--ports_file_dir",
        &dir,
        "--cluster_name",
        "cl",
        "--cluster_listen",
        "nats://127.0.0.1:-1",
        "--routes",
        &route,
    ]))
    .await
    .expect("start server");
    let ports = wait_ports_file(ports_dir.path()).await;
    let url = ports["cluster"][0]
        .as_str()
        .expect("a cluster URL")
        .to_string();
    assert!(url.starts_with("nats://127.0.0.1:"), "{url}");
    let port: u16 = url.rsplit(':').next().unwrap().parse().expect("a port");
    std::net::TcpStream::connect(("127.0.0.1", port)).expect("the cluster port listens");
    let varz = srv.monitor_json("/varz").await.expect("varz");
    assert_eq!(varz["cluster"]["name"], "cl", "{varz}");
}

/// `jetstream { domain: hub }`: the API answers on `$JS.hub.API.>` as well as `$JS.API.>`,
/// PubAcks and account info name the domain, another domain has no responders (checked against
/// nats-server 2.15.1).
#[tokio::test]
async fn a_jetstream_domain_answers_its_prefix_and_names_itself_in_pub_acks() {
    let srv = ServerProcess::start(ServerOptions::with_config(
        "jetstream {\n  domain: hub\n}\n",
    ))
    .await
    .expect("start server");
    let nc = connect(&srv).await;
    let info = wait_for("JetStream answers", Duration::from_secs(20), || {
        let nc = nc.clone();
        async move { js_api_info(&nc).await.ok() }
    })
    .await;
    assert_eq!(info["domain"], "hub", "{info}");
    let js = async_nats::jetstream::with_domain(nc.clone(), "hub");
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "D".into(),
        subjects: vec!["d.>".into()],
        ..Default::default()
    })
    .await
    .expect("stream created through $JS.hub.API");
    let ack = js
        .publish("d.x", "1".into())
        .await
        .expect("publish")
        .await
        .expect("PubAck");
    assert_eq!((ack.sequence, ack.domain.as_str()), (1, "hub"));
    let raw = nc.request("d.y", "2".into()).await.expect("raw PubAck");
    assert_eq!(
        std::str::from_utf8(&raw.payload).expect("utf-8"),
        r#"{"stream":"D","domain":"hub","seq":2}"#
    );
    let answer = nc
        .request("$JS.hub.API.STREAM.INFO.D", bytes::Bytes::new())
        .await
        .expect("stream info through the domain");
    let info: Value = serde_json::from_slice(&answer.payload).expect("JSON");
    assert_eq!(info["state"]["messages"], 2, "{info}");
    let other = nc
        .request("$JS.other.API.INFO", bytes::Bytes::new())
        .await
        .map(|_| ());
    assert_eq!(
        other.map_err(|e| e.kind()),
        Err(async_nats::RequestErrorKind::NoResponders)
    );
}

/// The two log lines test launchers parse keep nats-server's wording: nats.py's `nats.server.run`
/// (the launcher of its nats-core, nats-jetstream and nats-key-value suites) takes the client
/// port from `Listening for client connections on <host>:<port>` and waits for `Server is
/// ready`, both at INFO on stderr; jetraft's lowercase lines with fields left it waiting.
#[tokio::test]
async fn the_listening_and_ready_lines_are_worded_as_nats_servers() {
    let srv = ServerProcess::start(ServerOptions::default())
        .await
        .expect("start server");
    let listening = format!(
        "[INF] Listening for client connections on 127.0.0.1:{}",
        srv.port()
    );
    let log = srv.log();
    let at = |needle: &str| {
        log.find(needle)
            .unwrap_or_else(|| panic!("no line {needle:?} in the log:\n{log}"))
    };
    assert!(
        at(&listening) < at("[INF] Server is ready"),
        "the port is announced before ready:\n{log}"
    );
}

/// A server given the wildcard host `0.0.0.0` (nats-server's default) takes IPv6 clients too,
/// as nats-server's Go listener does: nats.py's `test_connect_with_ipv6_localhost` dials
/// `[::1]` a server started without `-a` (and `localhost` resolves to `::1` first on many
/// machines); jetraft listened on IPv4 only and refused the connection.
#[tokio::test]
async fn the_wildcard_host_takes_ipv6_clients_too() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        return; // this machine has no IPv6 loopback to dial
    }
    let srv = ServerProcess::start(ServerOptions::default().args(["-a", "0.0.0.0"]))
        .await
        .expect("start server");
    for addr in [
        format!("[::1]:{}", srv.port()),
        format!("127.0.0.1:{}", srv.port()),
    ] {
        let mut raw = RawClient::connect(&addr).await;
        let info = raw.read_info().await;
        assert_eq!(info["port"].as_u64(), Some(u64::from(srv.port())), "{addr}");
        raw.send("CONNECT {\"verbose\":false}\r\nPING\r\n").await;
        raw.expect_bytes(b"PONG\r\n").await;
    }
    assert!(
        srv.log().contains(&format!(
            "[INF] Listening for client connections on 0.0.0.0:{}",
            srv.port()
        )),
        "the log names the configured host:\n{}",
        srv.log()
    );
}
