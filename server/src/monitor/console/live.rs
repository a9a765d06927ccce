//! The console's live view: one shared sampler per node and a server-sent-events stream per
//! open page.
//!
//! The sampler runs only while at least one page listens; once a second it reads the node's
//! counters (the `/varz` numbers), the JetStream usage (`/jsz`'s numbers and meta group view)
//! and, through the JetStream API, the streams (state, config, Raft group) and their consumers
//! (positions), and publishes one snapshot. Every page gets the latest snapshot at most once per
//! tick, however many pages are open: the cost on the server is one sample per second.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::nats::{BusClient, ClusterSub};
use crate::monitor::MonitorView;

/// Time between two samples.
pub(crate) const TICK: Duration = Duration::from_secs(1);
/// Samples of the message rate chart kept (five minutes).
const HISTORY: usize = 300;
/// Streams whose consumers are listed in a sample (the first ones by name).
const MAX_STREAMS_WITH_CONSUMERS: usize = 64;
/// Most streams a sample lists (`STREAM.LIST` pages of up to 256 each).
const MAX_STREAMS: usize = 1024;
/// Advisories kept for the feed.
const ADVISORIES: usize = 100;

/// One sample, serialized once for every page.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    /// The whole snapshot.
    pub(crate) full: Arc<str>,
    /// Without the JetStream part, for users not allowed to use the JetStream API.
    pub(crate) core_only: Arc<str>,
}

/// The shared sampler.
#[derive(Debug)]
pub(crate) struct Live {
    view: Arc<MonitorView>,
    client: BusClient,
    tx: watch::Sender<Snapshot>,
    running: Mutex<bool>,
}

impl Live {
    /// A sampler of `view`, idle until a page listens.
    pub(crate) fn new(view: Arc<MonitorView>, client: BusClient) -> Arc<Self> {
        Arc::new(Self {
            view,
            client,
            tx: watch::Sender::new(Snapshot::default()),
            running: Mutex::new(false),
        })
    }

    /// Listens to the snapshots, starting the sampler if it is idle.
    pub(crate) fn subscribe(self: &Arc<Self>) -> watch::Receiver<Snapshot> {
        let rx = self.tx.subscribe();
        let mut running = self.running.lock();
        if !*running {
            *running = true;
            let me = self.clone();
            tokio::spawn(async move { me.run().await });
        }
        rx
    }

    async fn run(self: Arc<Self>) {
        let mut state = SamplerState {
            advisories: ClusterSub::new(&self.view.bus, "$JS.EVENT.ADVISORY.>").ok(),
            ..SamplerState::default()
        };
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = self.view.shutdown.cancelled() => break,
            }
            {
                let mut running = self.running.lock();
                if self.tx.receiver_count() == 0 {
                    *running = false;
                    return;
                }
            }
            let snap = self.sample(&mut state).await;
            self.tx.send_replace(snap);
        }
        *self.running.lock() = false;
    }

    async fn sample(&self, st: &mut SamplerState) -> Snapshot {
        let view = &self.view;
        let traffic = view.bus.stats();
        let in_msgs = traffic.in_msgs.load(Ordering::Relaxed);
        let out_msgs = traffic.out_msgs.load(Ordering::Relaxed);
        let now = Instant::now();
        let (in_rate, out_rate) = match st.last {
            Some((at, i, o)) => {
                let secs = now.duration_since(at).as_secs_f64().max(0.001);
                (
                    in_msgs.saturating_sub(i) as f64 / secs,
                    out_msgs.saturating_sub(o) as f64 / secs,
                )
            }
            None => (0.0, 0.0),
        };
        st.last = Some((now, in_msgs, out_msgs));
        let t = time::OffsetDateTime::now_utc().unix_timestamp();
        st.history
            .push_back([t as f64, in_rate.round(), out_rate.round()]);
        while st.history.len() > HISTORY {
            st.history.pop_front();
        }
        if let Some(sub) = st.advisories.as_mut() {
            while let Some(m) = sub.try_recv() {
                let body: Value = serde_json::from_slice(&m.payload).unwrap_or(Value::Null);
                st.advisory_log
                    .push_back(json!({"subject": m.subject, "body": body}));
                while st.advisory_log.len() > ADVISORIES {
                    st.advisory_log.pop_front();
                }
            }
        }
        let varz = crate::monitor::varz::varz(view);
        let mut snap = json!({
            "now": time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000,
            "server": {
                "name": view.node.server_name,
                "id": view.node.server_id,
                "version": env!("CARGO_PKG_VERSION"),
                "cluster": view.node.cluster_name,
                "uptime": varz["uptime"],
                "start": varz["start"],
                "auth_required": view.conns.auth().required(),
            },
            "varz": {
                "connections": varz["connections"],
                "total_connections": varz["total_connections"],
                "subscriptions": varz["subscriptions"],
                "in_msgs": in_msgs,
                "out_msgs": out_msgs,
                "in_bytes": varz["in_bytes"],
                "out_bytes": varz["out_bytes"],
                "mem": varz["mem"],
                "cpu": varz["cpu"],
                "slow_consumers": varz["slow_consumers"],
            },
            "rates": {"in_msgs": in_rate, "out_msgs": out_rate},
            "history": st.history.iter().collect::<Vec<_>>(),
        });
        let core_only = snap.to_string();
        snap["jetstream"] = self.jetstream(st).await;
        Snapshot {
            full: snap.to_string().into(),
            core_only: core_only.into(),
        }
    }

    /// The JetStream part: usage, meta group, streams and consumers.
    async fn jetstream(&self, st: &SamplerState) -> Value {
        let Some(js) = self.view.jetstream.get() else {
            return json!({"enabled": false});
        };
        let stats = js.jsz_stats();
        let c = &self.view.config.jetstream;
        let mut out = json!({
            "enabled": true,
            "local": {
                "streams": stats.streams,
                "consumers": stats.consumers,
                "messages": stats.messages,
                "bytes": stats.bytes,
                "memory": stats.memory,
                "storage": stats.storage,
                "max_memory": c.max_memory_store,
                "max_storage": c.max_file_store,
                "api_total": stats.api_total,
                "api_errors": stats.api_errors,
            },
            "meta_cluster": js.meta_cluster(),
            "meta_leader": js.is_meta_leader(),
            "advisories": st.advisory_log.iter().collect::<Vec<_>>(),
        });
        match self.streams().await {
            Ok((mut streams, error)) => {
                streams.sort_by(|a, b| {
                    a["config"]["name"]
                        .as_str()
                        .cmp(&b["config"]["name"].as_str())
                });
                let mut consumers = serde_json::Map::new();
                for s in streams.iter().take(MAX_STREAMS_WITH_CONSUMERS) {
                    let Some(name) = s["config"]["name"].as_str() else {
                        continue;
                    };
                    if s["state"]["consumer_count"].as_u64() == Some(0) {
                        consumers.insert(name.to_string(), json!([]));
                        continue;
                    }
                    if let Ok(list) = self
                        .client
                        .js_api(&format!("CONSUMER.LIST.{name}"), &json!({}))
                        .await
                    {
                        consumers.insert(name.to_string(), list["consumers"].clone());
                    }
                }
                out["streams"] = streams.into();
                out["consumers"] = consumers.into();
                if let Some(error) = error {
                    out["error"] = error;
                }
            }
            Err(e) => out["error"] = json!({"description": e.to_string()}),
        }
        out
    }
}

impl Live {
    /// Up to [`MAX_STREAMS`] streams, page by page, and the API's error answer if it gave one.
    async fn streams(&self) -> Result<(Vec<Value>, Option<Value>), super::nats::RequestError> {
        let mut streams: Vec<Value> = Vec::new();
        loop {
            let page = self
                .client
                .js_api("STREAM.LIST", &json!({"offset": streams.len()}))
                .await?;
            if !page["error"].is_null() {
                return Ok((streams, Some(page["error"].clone())));
            }
            let got = page["streams"].as_array().cloned().unwrap_or_default();
            let total = page["total"].as_u64().unwrap_or(0);
            let empty = got.is_empty();
            streams.extend(got);
            if empty || streams.len() as u64 >= total || streams.len() >= MAX_STREAMS {
                streams.truncate(MAX_STREAMS);
                return Ok((streams, None));
            }
        }
    }
}

/// What the sampler carries from one tick to the next.
#[derive(Debug, Default)]
struct SamplerState {
    last: Option<(Instant, u64, u64)>,
    history: VecDeque<[f64; 3]>,
    advisories: Option<ClusterSub>,
    advisory_log: VecDeque<Value>,
}
