//! [`Cluster`]: N server processes linked into one cluster on loopback, started with
//! nats-server style flags (`-n nX --cluster_name c --cluster nats://127.0.0.1:CP --routes
//! nats://127.0.0.1:CP1,...`, every node listing every node including itself), so the same
//! tests run against jetraft and against a real nats-server cluster.
//!
//! "Formed" is judged from the outside, the way a client sees it: every running node's INFO
//! `connect_urls` lists the client URL of every other running node.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::io::AsyncReadExt as _;
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout};

use super::ports::free_port;
use super::process::{ServerOptions, ServerProcess};

/// Clusters started (on fresh ports each time) before a lost port race fails the test.
const START_ATTEMPTS: usize = 3;

/// Bound on cluster formation (and re-formation after a restart).
pub const FORM_TIMEOUT: Duration = Duration::from_secs(30);

/// A running cluster of server processes.
pub struct Cluster {
    /// The members, `n1` first; a killed member stays in place (not running).
    nodes: Vec<ServerProcess>,
    /// The cluster name every member was started with.
    name: String,
    /// Each member's cluster port, in member order.
    cluster_ports: Vec<u16>,
    /// The config file body every member was started with, if any.
    config: Option<String>,
}

impl Cluster {
    /// Starts `n` nodes named `n1..nN` in cluster `name` and waits until they are linked.
    pub async fn start(n: usize, name: &str) -> anyhow::Result<Cluster> {
        Self::start_with_configs(n, name, &[]).await
    }

    /// [`Cluster::start`] with a config file body for every member (also for members
    /// [`Cluster::add_node`] adds later).
    pub async fn start_with(n: usize, name: &str, config: Option<&str>) -> anyhow::Result<Cluster> {
        let configs: Vec<String> = config.map(|c| vec![c.to_string(); n]).unwrap_or_default();
        Self::start_with_configs(n, name, &configs).await
    }

    /// [`Cluster::start`] with a config file body for some nodes: node `i` (0-based) gets
    /// `configs[i]` (e.g. `server_tags`), the nodes past its end none. When every member got the
    /// same one, members added later get it too.
    pub async fn start_with_configs(
        n: usize,
        name: &str,
        configs: &[String],
    ) -> anyhow::Result<Cluster> {
        let shared = (configs.len() == n && configs.windows(2).all(|w| w[0] == w[1]))
            .then(|| configs.first().cloned())
            .flatten();
        // A name of its own: nodes of a test still running keep dialing the cluster port of a
        // member they lost, and another test's node may bind that port later; with one name
        // per cluster, such a stray link is refused instead of joining the two clusters.
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "{name}-{}-{}",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        );
        // A cluster port is drawn before the nodes start, one after another; another test may
        // bind it meanwhile (the node then cannot start, whatever client port it tries), so
        // the whole cluster starts again on fresh ports.
        let mut attempt = 1;
        loop {
            match Self::start_on_fresh_ports(n, &name, configs).await {
                Ok((nodes, cluster_ports)) => {
                    let cluster = Cluster {
                        nodes,
                        name,
                        cluster_ports,
                        config: shared,
                    };
                    return Self::formed(cluster).await;
                }
                Err(e) if attempt < START_ATTEMPTS && format!("{e:#}").contains("in use") => {
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn start_on_fresh_ports(
        n: usize,
        name: &str,
        configs: &[String],
    ) -> anyhow::Result<(Vec<ServerProcess>, Vec<u16>)> {
        // Distinct ports: two draws can land on the same free port (seen in CI: the third node
        // could not bind the first one's cluster port).
        let mut cluster_ports: Vec<u16> = Vec::with_capacity(n);
        while cluster_ports.len() < n {
            let p = free_port();
            if !cluster_ports.contains(&p) {
                cluster_ports.push(p);
            }
        }
        let routes = cluster_ports
            .iter()
            .map(|p| format!("nats://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut nodes = Vec::with_capacity(n);
        for (i, cp) in cluster_ports.iter().enumerate() {
            let mut opts = ServerOptions::default();
            if let Some(config) = configs.get(i) {
                opts = opts.config(config.clone());
            }
            let opts = opts.name(format!("n{}", i + 1)).args([
                "--cluster_name".to_string(),
                name.to_string(),
                "--cluster".to_string(),
                format!("nats://127.0.0.1:{cp}"),
                "--routes".to_string(),
                routes.clone(),
            ]);
            let node = ServerProcess::start(opts)
                .await
                .with_context(|| format!("start n{}", i + 1))?;
            nodes.push(node);
        }
        Ok((nodes, cluster_ports))
    }

    /// Starts one more member, `n<len+1>`, whose `--routes` name only the members `seeds`
    /// (0-based; none of the others is restarted or told) and the URLs `extra_routes` (say, of
    /// nodes that do not exist yet), and waits until every running member lists every other.
    /// Returns its index.
    pub async fn add_node(
        &mut self,
        seeds: &[usize],
        extra_routes: &[String],
    ) -> anyhow::Result<usize> {
        let routes = seeds
            .iter()
            .map(|i| format!("nats://127.0.0.1:{}", self.cluster_ports[*i]))
            .chain(extra_routes.iter().cloned())
            .collect::<Vec<_>>()
            .join(",");
        let index = self.nodes.len();
        let mut attempt = 1;
        loop {
            let cp = free_port();
            if self.cluster_ports.contains(&cp) {
                continue;
            }
            let mut opts = ServerOptions::default();
            if let Some(config) = &self.config {
                opts = opts.config(config.clone());
            }
            let opts = opts.name(format!("n{}", index + 1)).args([
                "--cluster_name".to_string(),
                self.name.clone(),
                "--cluster".to_string(),
                format!("nats://127.0.0.1:{cp}"),
                "--routes".to_string(),
                routes.clone(),
            ]);
            match ServerProcess::start(opts).await {
                Ok(node) => {
                    self.nodes.push(node);
                    self.cluster_ports.push(cp);
                    break;
                }
                Err(e) if attempt < START_ATTEMPTS && format!("{e:#}").contains("in use") => {
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
        self.wait_formed().await?;
        Ok(index)
    }

    /// A cluster of nodes the test started itself (with settings of its own), once formed.
    /// [`Cluster::add_node`] cannot add to it (its cluster name and ports are the test's).
    pub async fn from_nodes(nodes: Vec<ServerProcess>) -> anyhow::Result<Cluster> {
        Self::formed(Cluster {
            nodes,
            name: String::new(),
            cluster_ports: Vec::new(),
            config: None,
        })
        .await
    }

    /// Waits until the members formed a cluster, printing their log tails if they did not.
    async fn formed(mut cluster: Cluster) -> anyhow::Result<Cluster> {
        let formed = match cluster.wait_formed().await {
            Ok(()) => cluster.wait_meta_leader().await,
            Err(e) => Err(e),
        };
        if let Err(e) = formed {
            for node in &cluster.nodes {
                let log = node.log();
                let lines: Vec<&str> = log.lines().collect();
                let tail = &lines[lines.len().saturating_sub(40)..];
                eprintln!(
                    "--- log tail of {} ---\n{}\n---",
                    node.name(),
                    tail.join("\n")
                );
            }
            return Err(e);
        }
        Ok(cluster)
    }

    /// Member `i` (0-based).
    pub fn node(&self, i: usize) -> &ServerProcess {
        &self.nodes[i]
    }

    /// Member `i` (0-based), to stop or start it with other arguments.
    pub fn node_mut(&mut self, i: usize) -> &mut ServerProcess {
        &mut self.nodes[i]
    }

    /// Whether member `i` is running (reaps it if it exited).
    pub fn node_running(&mut self, i: usize) -> bool {
        self.nodes[i].is_running()
    }

    /// Number of members (running or not).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no members.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Fails on unexpected `ERROR` or panic lines in any member's log (jetraft only).
    pub fn assert_clean_logs(&self) {
        for n in &self.nodes {
            super::assert_clean_log(n);
        }
    }

    /// Stops member `i` with SIGTERM and waits at most `bound` for it to exit.
    pub async fn stop_within(
        &mut self,
        i: usize,
        bound: Duration,
    ) -> anyhow::Result<std::process::ExitStatus> {
        self.nodes[i].stop_within(bound).await
    }

    /// SIGKILLs member `i`.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Starts member `i` again (same ports and store dir) and waits until the cluster is formed.
    pub async fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.nodes[i].start_again().await?;
        self.wait_formed().await
    }

    /// Waits until every running member with JetStream names a meta leader in `/jsz` (a node
    /// whose monitoring does not answer plain HTTP is not waited for): a test
    /// that stops a node right after the start must not stop the one still forming the meta
    /// group (the others would wait for it for good).
    async fn wait_meta_leader(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + FORM_TIMEOUT;
        for node in &mut self.nodes {
            if !node.is_running() {
                continue;
            }
            loop {
                let jsz = node.monitor_json("/jsz").await.ok();
                let meta = jsz.as_ref().map(|j| &j["meta_cluster"]);
                let waiting = meta.is_some_and(|m| {
                    m.is_object() && m["leader"].as_str().unwrap_or_default().is_empty()
                });
                if !waiting {
                    break;
                }
                if Instant::now() >= deadline {
                    bail!("no meta leader within {FORM_TIMEOUT:?} on {}", node.name());
                }
                sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// Waits until every running member advertises every other running member in INFO
    /// `connect_urls`.
    pub async fn wait_formed(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + FORM_TIMEOUT;
        loop {
            let running: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].is_running())
                .collect();
            let mut missing = None;
            for &i in &running {
                let urls = connect_urls(&self.nodes[i]).await.unwrap_or_default();
                for &j in &running {
                    let want = self.nodes[j].client_addr();
                    if j != i && !urls.contains(&want) {
                        missing = Some(format!("{} does not list {want}: {urls:?}", i + 1));
                    }
                }
            }
            let Some(why) = missing else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                bail!("cluster not formed within {FORM_TIMEOUT:?}: node {why}");
            }
            sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The `connect_urls` of the INFO a fresh connection to `node` gets.
pub async fn connect_urls(node: &ServerProcess) -> anyhow::Result<Vec<String>> {
    let info = read_info(&node.client_addr()).await?;
    Ok(info["connect_urls"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default())
}

/// Connects to `addr` and parses the first `INFO` line's JSON.
pub async fn read_info(addr: &str) -> anyhow::Result<serde_json::Value> {
    let bound = Duration::from_secs(2);
    let mut stream = timeout(bound, TcpStream::connect(addr))
        .await
        .context("connect timed out")??;
    let mut buf = Vec::new();
    let read = async {
        while !buf.windows(2).any(|w| w == b"\r\n") {
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    };
    timeout(bound, read).await.context("INFO timed out")?;
    let line = std::str::from_utf8(&buf).context("INFO is not UTF-8")?;
    let json = line
        .strip_prefix("INFO ")
        .and_then(|l| l.split("\r\n").next())
        .context("no INFO line")?;
    serde_json::from_str(json.trim()).context("parse INFO JSON")
}
