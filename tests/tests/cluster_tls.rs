//! Cluster links with mutual TLS and route credentials: three nodes whose certificates come
//! from the cluster CA form a cluster and replicate an R3 stream; a fourth node whose
//! certificate comes from another CA, and a fifth with the right certificate but the wrong
//! route password, never join: they are not advertised and receive no data.
//! Runs against nats-server too (`JETRAFT_TEST_SERVER=nats-server`).

use std::time::Duration;

use futures_util::StreamExt as _;
use jetraft_tests::harness::certs::{CertFiles, CertSpec, TestCa};
use jetraft_tests::harness::cluster::connect_urls;
use jetraft_tests::harness::jsapi::{api, info_with_leader, publish_acked};
use jetraft_tests::harness::{
    Cluster, ServerKind, ServerOptions, ServerProcess, connect, free_port, server_kind,
};
use serde_json::json;

/// How long the rejected nodes get to (fail to) join before the checks.
const JOIN_WINDOW: Duration = Duration::from_secs(3);

/// The config of a node: its cluster port, routes, TLS files and route credentials.
fn node_config(
    name: &str,
    port: u16,
    routes: &[u16],
    cert: &CertFiles,
    ca: &TestCa,
    password: &str,
) -> String {
    let routes = routes
        .iter()
        .map(|p| format!("\"nats-route://ruser:{password}@127.0.0.1:{p}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "cluster {{\n  name: {name}\n  listen: \"127.0.0.1:{port}\"\n  routes: [{routes}]\n  \
         tls {{ cert_file: \"{}\", key_file: \"{}\", ca_file: \"{}\", verify: true, timeout: 2 }}\n  \
         authorization {{ user: ruser, password: {password} }}\n}}\n",
        cert.cert.display(),
        cert.key.display(),
        ca.ca_file.display()
    )
}

/// Attempts before a lost port race (another test bound a drawn port first) fails the test.
const START_ATTEMPTS: usize = 3;

/// `n` distinct free ports.
fn distinct_ports(n: usize) -> Vec<u16> {
    let mut ports: Vec<u16> = Vec::new();
    while ports.len() < n {
        let p = free_port();
        if !ports.contains(&p) {
            ports.push(p);
        }
    }
    ports
}

async fn try_start_node(i: usize, config: String) -> anyhow::Result<ServerProcess> {
    ServerProcess::start(ServerOptions::with_config(config).name(format!("n{i}"))).await
}

/// Starts nodes `n1..` on fresh cluster ports, each with the certificate `cert_for(i)` and the
/// route password, retrying on fresh ports when a port was taken meanwhile; waits until formed.
async fn start_cluster(
    name: &str,
    ca: &TestCa,
    certs: &[CertFiles],
    password: &str,
) -> (Cluster, Vec<u16>) {
    for attempt in 1..=START_ATTEMPTS {
        let ports = distinct_ports(certs.len());
        let mut nodes = Vec::new();
        let mut failed = None;
        for (i, (port, cert)) in ports.iter().zip(certs).enumerate() {
            match try_start_node(i + 1, node_config(name, *port, &ports, cert, ca, password)).await
            {
                Ok(n) => nodes.push(n),
                Err(e) => {
                    failed = Some(format!("{e:#}"));
                    break;
                }
            }
        }
        match failed {
            None => {
                return (
                    Cluster::from_nodes(nodes).await.expect("cluster forms"),
                    ports,
                );
            }
            Some(e) if attempt < START_ATTEMPTS && e.contains("in use") => continue,
            Some(e) => panic!("start cluster: {e}"),
        }
    }
    unreachable!("the last attempt returns or panics")
}

/// Starts node `i` on a fresh cluster port, dialing `good` (retried on a lost port race).
async fn start_outsider(
    i: usize,
    name: &str,
    good: &[u16],
    cert: &CertFiles,
    ca: &TestCa,
    password: &str,
) -> ServerProcess {
    for attempt in 1..=START_ATTEMPTS {
        let port = distinct_ports(1)[0];
        let mut routes = good.to_vec();
        routes.push(port);
        match try_start_node(i, node_config(name, port, &routes, cert, ca, password)).await {
            Ok(n) => return n,
            Err(e) if attempt < START_ATTEMPTS && format!("{e:#}").contains("in use") => {}
            Err(e) => panic!("start n{i}: {e:#}"),
        }
    }
    unreachable!("the last attempt returns or panics")
}

#[tokio::test]
async fn only_nodes_with_a_valid_certificate_and_credentials_join() {
    let name = format!("tls-{}", std::process::id());
    let mut ca = TestCa::new("cluster").expect("ca");
    let mut rogue_ca = TestCa::new("rogue").expect("rogue ca");
    let certs: Vec<CertFiles> = (0..3)
        .map(|_| ca.issue(&CertSpec::localhost()).expect("cert"))
        .collect();
    let (cluster, good) = start_cluster(&name, &ca, &certs, "rpass").await;

    // Raft over mTLS: an R3 stream takes acknowledged writes.
    let nc = connect(cluster.node(0)).await;
    let created = api(
        &nc,
        "$JS.API.STREAM.CREATE.SECURE",
        json!({"name": "SECURE", "subjects": ["secure.>"], "num_replicas": 3}),
    )
    .await;
    assert!(created["error"].is_null(), "{created}");
    for i in 0..5 {
        let ack = publish_acked(&nc, "secure.x", &format!("m{i}"), "v").await;
        assert_eq!(ack["seq"], i + 1);
    }

    // A node with a certificate from another CA, and one with the wrong route password.
    let rogue_cert = rogue_ca.issue(&CertSpec::localhost()).expect("rogue cert");
    let rogue = start_outsider(4, &name, &good, &rogue_cert, &rogue_ca, "rpass").await;
    let cert5 = ca.issue(&CertSpec::localhost()).expect("cert");
    let wrong_pw = start_outsider(5, &name, &good, &cert5, &ca, "wrong").await;

    let mut probes = Vec::new();
    for outsider in [&rogue, &wrong_pw] {
        let onc = connect(outsider).await;
        let sub = onc.subscribe("probe.>").await.expect("subscribe");
        onc.flush().await.expect("flush");
        probes.push((onc, sub));
    }
    // Publish for the whole window: a joined outsider would receive some of it.
    let deadline = tokio::time::Instant::now() + JOIN_WINDOW;
    while tokio::time::Instant::now() < deadline {
        nc.publish("probe.x", "secret data".into())
            .await
            .expect("publish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    nc.flush().await.expect("flush");
    for (i, (_, sub)) in probes.iter_mut().enumerate() {
        let got = tokio::time::timeout(Duration::from_millis(500), sub.next()).await;
        assert!(got.is_err(), "outsider {} received cluster data", i + 4);
    }
    for i in 0..3 {
        let urls = connect_urls(cluster.node(i)).await.expect("connect_urls");
        for outsider in [&rogue, &wrong_pw] {
            assert!(
                !urls.contains(&outsider.client_addr()),
                "node {} advertises outsider {}: {urls:?}",
                i + 1,
                outsider.name()
            );
        }
    }
    if server_kind() == ServerKind::Jetraft {
        // The wrong password reached the route gate (and was not merely unreachable).
        let refused = (0..3).any(|i| cluster.node(i).log().contains("route authorization failed"));
        assert!(refused, "no node logged the refused route credentials");
    }
    // The good nodes still serve the stream, and no outsider holds a replica.
    let info = info_with_leader(&nc, "SECURE").await;
    assert_eq!(info["state"]["messages"], 5, "{info}");
    let mut holders = vec![info["cluster"]["leader"].to_string()];
    if let Some(replicas) = info["cluster"]["replicas"].as_array() {
        holders.extend(replicas.iter().map(|r| r["name"].to_string()));
    }
    assert!(
        holders
            .iter()
            .all(|h| !h.contains("n4") && !h.contains("n5")),
        "an outsider holds a replica: {holders:?}"
    );
}

/// jetraft only: peers are also dialed at the address they were seen at (a pod IP in
/// Kubernetes), so route certificates need not name it; the cluster CA is what admits a node.
/// (nats-server checks the route's host name, so it is not run against nats-server.)
#[tokio::test]
async fn route_certificates_need_not_name_the_address_dialed() {
    if server_kind() != ServerKind::Jetraft {
        return;
    }
    let name = format!("tls-names-{}", std::process::id());
    let mut ca = TestCa::new("names").expect("ca");
    let certs: Vec<CertFiles> = (0..3)
        .map(|i| {
            ca.issue(&CertSpec {
                hosts: vec![format!("jetraft-{i}.jetraft")],
                ..CertSpec::localhost()
            })
            .expect("cert")
        })
        .collect();
    let (cluster, _) = start_cluster(&name, &ca, &certs, "rpass").await;
    let nc = connect(cluster.node(1)).await;
    let created = api(
        &nc,
        "$JS.API.STREAM.CREATE.NAMES",
        json!({"name": "NAMES", "subjects": ["names.>"], "num_replicas": 3}),
    )
    .await;
    assert!(created["error"].is_null(), "{created}");
    let ack = publish_acked(&nc, "names.x", "one", "v").await;
    assert_eq!(ack["seq"], 1);
}
