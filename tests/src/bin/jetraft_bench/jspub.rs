//! `jspub`: JetStream publishing with acknowledgements. Creates a fresh stream (deleting any
//! stream of the same name), then publishes `--msgs` messages keeping up to `--inflight` PubAcks
//! outstanding (`--inflight 1` is synchronous publishing) and reports acknowledged messages per
//! second and ack latency percentiles.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use async_nats::jetstream::{self, stream};

use crate::args::Args;

/// Runs the benchmark and prints its `RESULT` line.
pub(crate) async fn run(args: &Args) -> Result<()> {
    let client = crate::connect(&args.url, "jspub", |o| o).await?;
    crate::check_payload_size(&client, args.size)?;
    let connected_to = client.server_info().server_name;
    let js = jetstream::new(client);
    let name = "JETRAFT_BENCH";
    let subject = crate::unique_subject("jspub");
    let mut stream = crate::fresh_stream(&js, name, &subject, args).await?;
    // Whether the stream leader is the node the client talks to (a forwarding hop otherwise):
    // R3 figures differ by placement, so the RESULT line says which it was.
    let leader = stream_leader(&mut stream, args.replicas > 1).await;
    let (js, leader_local) = match args.via.as_deref() {
        Some(via) => (
            jetstream::new(via_node(args, via == "leader", &leader).await?),
            u8::from(via == "leader"),
        ),
        None => (js, u8::from(leader.is_empty() || leader == connected_to)),
    };
    let payload = crate::payload(args.size);
    let inflight = usize::try_from(args.inflight.max(1)).unwrap_or(1);
    let mut pending: VecDeque<(Instant, jetstream::context::PublishAckFuture)> =
        VecDeque::with_capacity(inflight);
    let mut latencies: Vec<Duration> = Vec::with_capacity(usize::try_from(args.msgs).unwrap_or(0));
    let start = Instant::now();
    let mut last_seq = 0;
    for _ in 0..args.msgs {
        if pending.len() >= inflight
            && let Some((sent, ack)) = pending.pop_front()
        {
            let ack = ack.await.context("PubAck")?;
            latencies.push(sent.elapsed());
            last_seq = last_seq.max(ack.sequence);
        }
        let ack = js
            .publish(subject.clone(), payload.clone())
            .await
            .context("publish")?;
        pending.push_back((Instant::now(), ack));
    }
    while let Some((sent, ack)) = pending.pop_front() {
        let ack = ack.await.context("PubAck")?;
        latencies.push(sent.elapsed());
        last_seq = last_seq.max(ack.sequence);
    }
    let elapsed = start.elapsed();
    ensure!(
        last_seq == args.msgs,
        "expected the last PubAck to carry sequence {}, got {last_seq}",
        args.msgs
    );
    latencies.sort_unstable();
    let pct = |p: f64| {
        let i = ((latencies.len() as f64 - 1.0) * p).round() as usize;
        latencies.get(i).map_or(0, |d| d.as_micros())
    };
    let rate = args.msgs as f64 / elapsed.as_secs_f64();
    println!(
        "RESULT jspub msgs={} size={} storage={} replicas={} inflight={} elapsed_s={:.3} msgs_per_sec={:.0} p50_us={} p99_us={} leader_local={}",
        args.msgs,
        args.size,
        args.storage,
        args.replicas,
        inflight,
        elapsed.as_secs_f64(),
        rate,
        pct(0.50),
        pct(0.99),
        leader_local
    );
    let _ = js.delete_stream(name).await;
    Ok(())
}

/// The stream leader's server name (empty if none is reported). With `wait`, waits up to 5 s for
/// a replicated stream's first election.
pub(crate) async fn stream_leader(stream: &mut stream::Stream, wait: bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let leader = stream
            .info()
            .await
            .ok()
            .and_then(|i| i.cluster.as_ref().and_then(|c| c.leader.clone()))
            .unwrap_or_default();
        if !leader.is_empty() || !wait || Instant::now() >= deadline {
            return leader;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A connection to the stream leader's node (`to_leader`) or to a follower's, found among
/// `--peer-urls` by the server name each node reports.
pub(crate) async fn via_node(
    args: &Args,
    to_leader: bool,
    leader: &str,
) -> Result<async_nats::Client> {
    anyhow::ensure!(!leader.is_empty(), "--via: the stream reports no leader");
    for url in &args.peer_urls {
        let client = crate::connect(url, "jspub", |o| o).await?;
        if (client.server_info().server_name == leader) == to_leader {
            return Ok(client);
        }
    }
    anyhow::bail!("--via: no node among --peer-urls fits (leader {leader})")
}
