//! `reqrep`: an echo responder connection and a requester doing sequential requests.
//!
//! A warm-up (10% of `--count`, between 10 and 1000 requests, not timed) sets up the
//! requester's reply subscription and warms both connections; then `--count` requests are timed
//! one by one. Each reply must echo the request payload.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use async_nats::Subject;
use futures_util::StreamExt;

use crate::args::Args;
use crate::{check_payload_size, connect, payload, unique_subject};

/// Per-request bound (a lost reply fails the run instead of stalling it).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs the benchmark and prints its `RESULT` line.
pub(crate) async fn run(args: &Args) -> Result<()> {
    let deadline = tokio::time::Instant::now() + args.timeout;
    let subject = Subject::from(unique_subject("reqrep"));

    let responder = connect(&args.url, "jetraft-bench-responder", |o| o).await?;
    check_payload_size(&responder, args.size)?;
    let mut requests = responder
        .subscribe(subject.clone())
        .await
        .context("responder: subscribing")?;
    responder
        .flush()
        .await
        .context("responder: flushing the subscription")?;
    let echo = tokio::spawn(async move {
        while let Some(msg) = requests.next().await {
            if let Some(reply) = msg.reply {
                responder
                    .publish(reply, msg.payload)
                    .await
                    .context("responder: publishing a reply")?;
            }
        }
        anyhow::Ok(())
    });

    let requester = connect(&args.url, "jetraft-bench-requester", |o| {
        o.request_timeout(Some(REQUEST_TIMEOUT))
    })
    .await?;
    let body = payload(args.size);
    let warmup = (args.count / 10).clamp(10, 1000);
    eprintln!(
        "jetraft-bench: reqrep {} requests of {} B to {} (+{warmup} warm-up)",
        args.count, args.size, args.url
    );
    let one = |requester: &async_nats::Client| {
        let subject = subject.clone();
        let body = body.clone();
        let requester = requester.clone();
        async move {
            let reply = requester
                .request(subject, body.clone())
                .await
                .context("request")?;
            ensure!(
                reply.payload == body,
                "reply does not echo the request payload"
            );
            anyhow::Ok(())
        }
    };
    let done = AtomicU64::new(0);
    let mut latencies = Vec::with_capacity(usize::try_from(args.count).unwrap_or(0).min(1 << 24));
    let timed = tokio::time::timeout_at(deadline, async {
        for _ in 0..warmup {
            one(&requester).await.context("warm-up")?;
        }
        let start = Instant::now();
        for i in 1..=args.count {
            let t = Instant::now();
            one(&requester).await?;
            latencies.push(t.elapsed());
            done.store(i, Ordering::Relaxed);
        }
        anyhow::Ok(start.elapsed())
    })
    .await;
    let total = match timed {
        Ok(result) => result?,
        Err(_) => {
            echo.abort();
            bail!(
                "timed out after --timeout {}s: {} of {} timed requests done",
                args.timeout.as_secs(),
                done.load(Ordering::Relaxed),
                args.count
            );
        }
    };
    let count = latencies.len();
    echo.abort();

    latencies.sort_unstable();
    let p50 = micros(percentile(&latencies, 50.0));
    let p90 = micros(percentile(&latencies, 90.0));
    let p99 = micros(percentile(&latencies, 99.0));
    let max = micros(latencies.last().copied().unwrap_or_default());
    let rps = count as f64 / total.as_secs_f64().max(1e-6);
    eprintln!(
        "jetraft-bench: {count} requests in {:.3}s: p50 {p50:.1} us, p90 {p90:.1} us, \
         p99 {p99:.1} us, max {max:.1} us, {rps:.0} req/s",
        total.as_secs_f64()
    );
    println!(
        "RESULT reqrep count={count} size={} p50_us={p50:.1} p90_us={p90:.1} p99_us={p99:.1} \
         max_us={max:.1} rps={rps:.0}",
        args.size
    );
    Ok(())
}

/// Nearest-rank percentile of an ascending slice (zero for an empty one).
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A duration in microseconds.
fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile(&v, 50.0), Duration::from_micros(50));
        assert_eq!(percentile(&v, 99.0), Duration::from_micros(99));
        assert_eq!(percentile(&v, 100.0), Duration::from_micros(100));
        assert_eq!(percentile(&v[..1], 90.0), Duration::from_micros(1));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }
}
