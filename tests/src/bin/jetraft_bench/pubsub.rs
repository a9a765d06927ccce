//! `pubsub`: one publisher connection and one subscriber connection on the same subject.
//!
//! The subscriber subscribes (and flushes, so the server knows the interest) before the
//! publisher starts. The publisher hands messages to async-nats without waiting for the server
//! (the client batches them into large writes) and flushes once at the end. Throughput is what
//! the subscriber receives between its first and its last (`--msgs`-th) message.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use async_nats::Subject;
use futures_util::StreamExt;

use crate::args::Args;
use crate::{check_payload_size, connect, payload, unique_subject};

/// Messages async-nats may buffer for the subscriber before it counts as a slow consumer.
const SUB_CAPACITY: usize = 256 * 1024;
/// Commands the publisher may queue inside async-nats before `publish` waits.
const PUB_CAPACITY: usize = 64 * 1024;

/// What the subscriber saw.
struct Received {
    first: Instant,
    last: Instant,
    bytes: u64,
}

/// Runs the benchmark and prints its `RESULT` line.
pub(crate) async fn run(args: &Args) -> Result<()> {
    let deadline = tokio::time::Instant::now() + args.timeout;
    let subject = unique_subject("pubsub");
    let expected = args.msgs;

    let sub_url = args.sub_url.as_deref().unwrap_or(&args.url);
    let sub_client = connect(sub_url, "jetraft-bench-sub", |o| {
        o.subscription_capacity(SUB_CAPACITY)
    })
    .await?;
    check_payload_size(&sub_client, args.size)?;
    let mut sub = sub_client
        .subscribe(subject.clone())
        .await
        .context("subscribing")?;
    sub_client
        .flush()
        .await
        .context("flushing the subscription")?;

    let progress = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&progress);
    let mut receiver = tokio::spawn(async move {
        let mut first = None;
        let mut count = 0u64;
        let mut bytes = 0u64;
        while let Some(msg) = sub.next().await {
            if first.is_none() {
                first = Some(Instant::now());
            }
            count += 1;
            bytes += msg.payload.len() as u64;
            counter.store(count, Ordering::Relaxed);
            if count == expected {
                let last = Instant::now();
                return Ok(Received {
                    first: first.unwrap_or(last),
                    last,
                    bytes,
                });
            }
        }
        bail!("subscription ended after {count} of {expected} messages")
    });

    let pub_client = connect(&args.url, "jetraft-bench-pub", |o| {
        o.client_capacity(PUB_CAPACITY)
            .skip_subject_validation(true)
    })
    .await?;
    if sub_url != args.url {
        tokio::time::timeout_at(deadline, wait_for_interest(&pub_client, &sub_client))
            .await
            .context("interest did not reach the publisher's node")??;
    }
    let body = payload(args.size);
    let subject = Subject::from(subject);
    eprintln!(
        "jetraft-bench: pubsub {} msgs of {} B to {}",
        expected, args.size, args.url
    );
    let published = AtomicU64::new(0);
    let pub_elapsed = Cell::new(None);
    let outcome = tokio::time::timeout_at(deadline, async {
        let pub_start = Instant::now();
        for i in 1..=expected {
            pub_client
                .publish(subject.clone(), body.clone())
                .await
                .context("publishing")?;
            published.store(i, Ordering::Relaxed);
        }
        pub_client.flush().await.context("flushing the publisher")?;
        pub_elapsed.set(Some(pub_start.elapsed()));
        (&mut receiver).await.context("subscriber task failed")?
    })
    .await;
    let received = match outcome {
        Ok(result) => result?,
        Err(_) => {
            receiver.abort();
            let stage = if pub_elapsed.get().is_some() {
                "all published and flushed; messages lost to a slow consumer or a disconnect? \
                 see the connection events above"
            } else {
                "still publishing"
            };
            bail!(
                "timed out after --timeout {}s: published {}, received {} of {} messages ({stage})",
                args.timeout.as_secs(),
                published.load(Ordering::Relaxed),
                progress.load(Ordering::Relaxed),
                expected
            );
        }
    };
    let pub_elapsed = pub_elapsed.get().unwrap_or_default();

    let elapsed = (received.last - received.first).max(Duration::from_micros(1));
    let secs = elapsed.as_secs_f64();
    let msgs_per_sec = expected as f64 / secs;
    let mb_per_sec = received.bytes as f64 / secs / 1e6;
    let pub_msgs_per_sec = expected as f64 / pub_elapsed.as_secs_f64().max(1e-6);
    eprintln!(
        "jetraft-bench: subscriber: {expected} msgs in {secs:.3}s = {msgs_per_sec:.0} msgs/s, \
         {mb_per_sec:.2} MB/s; publisher: {pub_msgs_per_sec:.0} msgs/s"
    );
    println!(
        "RESULT pubsub msgs={expected} size={} elapsed_s={secs:.6} msgs_per_sec={msgs_per_sec:.0} \
         mb_per_sec={mb_per_sec:.2} pub_msgs_per_sec={pub_msgs_per_sec:.0}",
        args.size
    );
    Ok(())
}

/// Cross-node runs: returns once the subscriber's interest is visible on the publisher's node.
/// A probe subscription made after the measured one is only visible after it, so publishing to
/// the probe until it arrives proves the measured subscription has propagated.
async fn wait_for_interest(
    pub_client: &async_nats::Client,
    sub_client: &async_nats::Client,
) -> Result<()> {
    let probe = unique_subject("probe");
    let mut probe_sub = sub_client.subscribe(probe.clone()).await?;
    sub_client.flush().await?;
    loop {
        pub_client
            .publish(probe.clone(), bytes::Bytes::new())
            .await?;
        pub_client.flush().await?;
        if tokio::time::timeout(std::time::Duration::from_millis(100), probe_sub.next())
            .await
            .is_ok()
        {
            return Ok(());
        }
    }
}
