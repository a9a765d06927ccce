//! One node of a three-node cluster hosting many idle Raft groups over gRPC, to measure what
//! idle groups cost (heartbeats only). `scripts/bench-idle.sh` runs three of these.
//!
//! Usage: `idle_groups <index 0..3> <port0,port1,port2> <data dir> [groups, default 100]`
//!
//! Node `index` (id `index + 1`) listens on `127.0.0.1:<port[index]>`, starts groups `1..=groups`
//! with RocksDB logs in `<data dir>` and default `RaftTiming`; node 0 initialises every group
//! with all three nodes as voters. Once every group has a leader it prints `ready`, then a
//! status line every 5 s, until SIGTERM or Ctrl-C.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use jetraft_raft::network::grpc::{self, GrpcTransport};
use jetraft_raft::rocks_log::RocksLogs;
use jetraft_raft::{
    GroupId, GroupRegistry, LogIndex, NodeId, PeerNode, RaftTiming, ReplicatedStateMachine,
    StateMachineError,
};
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

/// Counts applied commands; the smallest deterministic state machine.
#[derive(Default)]
struct Counter(u64);

impl ReplicatedStateMachine for Counter {
    fn apply(&mut self, _index: LogIndex, _command: &[u8]) -> Result<Bytes, StateMachineError> {
        self.0 += 1;
        Ok(Bytes::copy_from_slice(&self.0.to_be_bytes()))
    }

    fn snapshot(&self) -> Result<Bytes, StateMachineError> {
        Ok(Bytes::copy_from_slice(&self.0.to_be_bytes()))
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), StateMachineError> {
        let bytes: [u8; 8] =
            snapshot
                .try_into()
                .map_err(|_| StateMachineError::CorruptSnapshot {
                    reason: format!("{} bytes, want 8", snapshot.len()),
                })?;
        self.0 = u64::from_be_bytes(bytes);
        Ok(())
    }
}

struct Args {
    index: usize,
    ports: Vec<u16>,
    dir: PathBuf,
    groups: u64,
}

fn parse_args() -> Result<Args, String> {
    let usage = "usage: idle_groups <index 0..3> <port0,port1,port2> <data dir> [groups]";
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        return Err(usage.into());
    }
    let index: usize = args[0].parse().map_err(|e| format!("index: {e}"))?;
    let ports = args[1]
        .split(',')
        .map(|p| p.parse::<u16>().map_err(|e| format!("port {p:?}: {e}")))
        .collect::<Result<Vec<u16>, String>>()?;
    if ports.len() != 3 || index >= 3 {
        return Err(usage.into());
    }
    let groups = match args.get(3) {
        Some(g) => g.parse().map_err(|e| format!("groups: {e}"))?,
        None => 100,
    };
    Ok(Args {
        index,
        ports,
        dir: PathBuf::from(&args[2]),
        groups,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let me = NodeId(args.index as u64 + 1);
    let peers: BTreeMap<NodeId, PeerNode> = args
        .ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                NodeId(i as u64 + 1),
                PeerNode::new(format!("127.0.0.1:{p}")),
            )
        })
        .collect();

    let logs = RocksLogs::open(&args.dir)?;
    let transport = GrpcTransport::new(me);
    for (id, peer) in &peers {
        if *id != me {
            transport.add_peer(*id, &peer.addr);
        }
    }
    let registry = GroupRegistry::new(me, transport, RaftTiming::default())?;
    let listener = TcpListener::bind(("127.0.0.1", args.ports[args.index])).await?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(grpc::serve(
        listener,
        registry.node_id(),
        registry.groups().clone(),
        async {
            let _ = stop_rx.await;
        },
    ));

    let groups: Vec<GroupId> = (1..=args.groups).map(GroupId).collect();
    for &g in &groups {
        logs.create_group(&registry, g, Box::new(Counter::default()))
            .await?;
    }
    if args.index == 0 {
        for &g in &groups {
            registry.initialize(g, peers.clone()).await?;
        }
    }

    let mut term = signal(SignalKind::terminate())?;
    let mut ready = false;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut last_status = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
        let views: Vec<_> = groups
            .iter()
            .filter_map(|&g| registry.leader(g).ok())
            .collect();
        let led = views.iter().filter(|v| v.leader.is_some()).count();
        let mine = views.iter().filter(|v| v.is_self).count();
        if !ready && led == groups.len() {
            ready = true;
            println!("ready node={me} groups={} leading={mine}", groups.len());
        }
        if last_status.elapsed() >= Duration::from_secs(5) {
            last_status = tokio::time::Instant::now();
            println!("status node={me} with_leader={led} leading={mine}");
        }
    }
    registry.shutdown().await;
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    Ok(())
}
