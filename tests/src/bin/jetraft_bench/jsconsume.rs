//! `jsconsume`: JetStream consumption. Fills a fresh stream with `--msgs` messages (not timed),
//! then times either
//! * `--consumer pull`: a durable pull consumer with explicit acks, fetching `--batch` messages
//!   per request and acking each; the clock stops once every message was received and the
//!   consumer's ack floor reached the last one (acks applied, on jetraft replicated and fsynced);
//! * `--consumer ordered`: an ordered consumer replaying the whole stream.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use async_nats::jetstream::{self, stream};
use futures_util::StreamExt;

use crate::args::Args;

/// Runs the benchmark and prints its `RESULT` line.
pub(crate) async fn run(args: &Args) -> Result<()> {
    let client = crate::connect(&args.url, "jsconsume", |o| o).await?;
    crate::check_payload_size(&client, args.size)?;
    let connected_to = client.server_info().server_name;
    let js = jetstream::new(client);
    let name = "JETRAFT_BENCH_CONSUME";
    let subject = crate::unique_subject("jsconsume");
    let mut stream = crate::fresh_stream(&js, name, &subject, args).await?;
    // R3 figures differ by whether the stream leader is the node the client talks to (every
    // message and ack crosses a node otherwise), so the RESULT line says which it was.
    let leader = crate::jspub::stream_leader(&mut stream, args.replicas > 1).await;
    let mut leader_local = u8::from(leader.is_empty() || leader == connected_to);
    let filling = Instant::now();
    fill(&js, &subject, args).await?;
    // So that a profiler can start on the consuming phase alone (scripts read RESULT lines).
    println!(
        "filled {} messages in {:.3} s",
        args.msgs,
        filling.elapsed().as_secs_f64()
    );
    // With --via, the consuming client talks to the stream leader's node or to a follower's.
    if let Some(via) = args.via.as_deref() {
        let client = crate::jspub::via_node(args, via == "leader", &leader).await?;
        stream = jetstream::new(client)
            .get_stream(name)
            .await
            .context("the stream through --via")?;
        leader_local = u8::from(via == "leader");
    }
    let start = Instant::now();
    let received = match args.consumer.as_str() {
        "ordered" => ordered(&stream, args.msgs).await?,
        _ => pull_acked(&stream, args).await?,
    };
    let elapsed = start.elapsed();
    ensure!(
        received == args.msgs,
        "received {received} of {} messages",
        args.msgs
    );
    let rate = args.msgs as f64 / elapsed.as_secs_f64();
    println!(
        "RESULT jsconsume consumer={} msgs={} size={} storage={} replicas={} batch={} elapsed_s={:.3} msgs_per_sec={:.0} leader_local={}",
        args.consumer,
        args.msgs,
        args.size,
        args.storage,
        args.replicas,
        args.batch,
        elapsed.as_secs_f64(),
        rate,
        leader_local
    );
    let _ = js.delete_stream(name).await;
    Ok(())
}

/// Publishes `--msgs` messages with 256 PubAcks in flight.
async fn fill(js: &jetstream::Context, subject: &str, args: &Args) -> Result<()> {
    let payload = crate::payload(args.size);
    let mut pending = std::collections::VecDeque::new();
    for _ in 0..args.msgs {
        if pending.len() >= 256
            && let Some(ack) = pending.pop_front()
        {
            let _: jetstream::publish::PublishAck = ack_result(ack).await?;
        }
        pending.push_back(
            js.publish(subject.to_string(), payload.clone())
                .await
                .context("publish")?,
        );
    }
    while let Some(ack) = pending.pop_front() {
        ack_result(ack).await?;
    }
    Ok(())
}

async fn ack_result(
    ack: jetstream::context::PublishAckFuture,
) -> Result<jetstream::publish::PublishAck> {
    ack.await.context("PubAck")
}

/// Durable pull consumer, explicit acks, `--batch` per fetch.
async fn pull_acked(stream: &stream::Stream, args: &Args) -> Result<u64> {
    let consumer: jetstream::consumer::Consumer<pull::Config> = stream
        .create_consumer(pull::Config {
            durable_name: Some("bench".into()),
            ack_policy: AckPolicy::Explicit,
            max_ack_pending: 100_000,
            ..Default::default()
        })
        .await
        .context("creating the pull consumer")?;
    let batch = usize::try_from(args.batch.max(1)).unwrap_or(100);
    let mut received = 0u64;
    while received < args.msgs {
        let mut msgs = consumer
            .fetch()
            .max_messages(batch)
            .expires(Duration::from_secs(5))
            .messages()
            .await
            .context("fetch")?;
        let mut got = 0;
        while let Some(m) = msgs.next().await {
            let m = m.map_err(|e| anyhow::anyhow!("fetch message: {e}"))?;
            m.ack().await.map_err(|e| anyhow::anyhow!("ack: {e}"))?;
            got += 1;
        }
        ensure!(
            got > 0,
            "a fetch returned nothing after {received} messages"
        );
        received += got;
    }
    // The run ends when the server has applied every ack.
    let mut consumer = consumer;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info = consumer.info().await.context("consumer info")?;
        if info.ack_floor.stream_sequence >= args.msgs {
            break;
        }
        ensure!(Instant::now() < deadline, "acks not applied within 60 s");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(received)
}

/// An ordered consumer replaying everything.
async fn ordered(stream: &stream::Stream, msgs: u64) -> Result<u64> {
    let consumer = stream
        .create_consumer(pull::OrderedConfig {
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .context("creating the ordered consumer")?;
    let mut messages = consumer.messages().await.context("ordered messages")?;
    let mut received = 0u64;
    while received < msgs {
        match messages.next().await {
            Some(Ok(_)) => received += 1,
            Some(Err(e)) => anyhow::bail!("ordered consumer: {e}"),
            None => break,
        }
    }
    Ok(received)
}
