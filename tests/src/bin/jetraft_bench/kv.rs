//! `kv`: sequential Key-Value puts and gets through the async-nats KV API. Creates a fresh
//! bucket (deleting any bucket of the same name) with `--replicas` replicas and history 1, does
//! a short untimed warm-up, then times `--count` sequential puts (each waits for its PubAck)
//! over `--keys` keys, then `--count` sequential gets of those keys (DIRECT.GET, the way
//! async-nats reads a bucket). Reports operations per second and latency percentiles of each.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use async_nats::jetstream::{self, kv};

use crate::args::Args;

/// Untimed operations of each kind before the timed ones (connections, leader, caches).
const WARM_UP: u64 = 200;

/// Runs the benchmark and prints its `RESULT` line.
pub(crate) async fn run(args: &Args) -> Result<()> {
    let client = crate::connect(&args.url, "kv", |o| o).await?;
    crate::check_payload_size(&client, args.size)?;
    let js = jetstream::new(client);
    let bucket = "JETRAFT_BENCH_KV";
    let _ = js.delete_key_value(bucket).await;
    let store = js
        .create_key_value(kv::Config {
            bucket: bucket.to_string(),
            history: 1,
            num_replicas: usize::try_from(args.replicas).unwrap_or(1),
            ..Default::default()
        })
        .await
        .context("creating the benchmark bucket")?;
    let keys: Vec<String> = (0..args.keys.max(1)).map(|i| format!("key.{i}")).collect();
    let key = |i: u64| &keys[usize::try_from(i % args.keys.max(1)).unwrap_or(0)];
    let value = crate::payload(args.size);

    for i in 0..WARM_UP.max(args.keys) {
        store
            .put(key(i), value.clone())
            .await
            .context("warm-up put")?;
    }
    let mut put_lat = Vec::with_capacity(usize::try_from(args.count).unwrap_or(0));
    let start = Instant::now();
    for i in 0..args.count {
        let t = Instant::now();
        store.put(key(i), value.clone()).await.context("put")?;
        put_lat.push(t.elapsed());
    }
    let put_elapsed = start.elapsed();

    for i in 0..WARM_UP {
        store.get(key(i)).await.context("warm-up get")?;
    }
    let mut get_lat = Vec::with_capacity(put_lat.len());
    let start = Instant::now();
    for i in 0..args.count {
        let t = Instant::now();
        let got = store.get(key(i)).await.context("get")?;
        get_lat.push(t.elapsed());
        ensure!(
            got.as_ref().is_some_and(|v| v.len() == args.size),
            "get {}: unexpected value",
            key(i)
        );
    }
    let get_elapsed = start.elapsed();

    let (put_p50, put_p99) = percentiles(&mut put_lat);
    let (get_p50, get_p99) = percentiles(&mut get_lat);
    let rate = |d: Duration| args.count as f64 / d.as_secs_f64();
    println!(
        "RESULT kv count={} size={} replicas={} keys={} put_ops_per_sec={:.0} put_p50_us={put_p50} put_p99_us={put_p99} get_ops_per_sec={:.0} get_p50_us={get_p50} get_p99_us={get_p99}",
        args.count,
        args.size,
        args.replicas,
        args.keys,
        rate(put_elapsed),
        rate(get_elapsed),
    );
    let _ = js.delete_key_value(bucket).await;
    Ok(())
}

/// p50 and p99 in microseconds.
fn percentiles(lat: &mut [Duration]) -> (u128, u128) {
    lat.sort_unstable();
    let pct = |p: f64| {
        let i = ((lat.len() as f64 - 1.0) * p).round() as usize;
        lat.get(i).map_or(0, |d| d.as_micros())
    };
    (pct(0.50), pct(0.99))
}
