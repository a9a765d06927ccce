//! Prometheus metrics through the `metrics` facade, served at `/metrics`.
//!
//! Hot paths count into plain atomics ([`crate::bus::TrafficStats`], [`crate::conn::ConnStats`]); a scrape copies them into
//! the facade's counters and gauges and renders the exporter's text. Names follow
//! `jetraft_<subsystem>_<name>_<unit>`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use metrics::{counter, describe_counter, describe_gauge, gauge};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use super::MonitorView;

/// Open client connections.
pub const CONNECTIONS: &str = "jetraft_connections";
/// Connections accepted since start.
pub const CONNECTIONS_TOTAL: &str = "jetraft_connections_total";
/// Messages received from clients.
pub const MSGS_IN: &str = "jetraft_msgs_in_total";
/// Messages delivered to clients.
pub const MSGS_OUT: &str = "jetraft_msgs_out_total";
/// Bytes received from clients.
pub const BYTES_IN: &str = "jetraft_bytes_in_total";
/// Bytes delivered to clients.
pub const BYTES_OUT: &str = "jetraft_bytes_out_total";
/// Active subscriptions.
pub const SUBSCRIPTIONS: &str = "jetraft_subscriptions";
/// Connections closed as slow consumers.
pub const SLOW_CONSUMERS: &str = "jetraft_slow_consumers_total";
/// Connections closed as stale.
pub const STALE_CONNECTIONS: &str = "jetraft_stale_connections_total";
/// Raft groups (meta and streams) running on this node.
pub const RAFT_GROUPS: &str = "jetraft_raft_groups";
/// Raft groups on this node whose timers are stopped because they are idle (quiescence).
pub const RAFT_GROUPS_QUIET: &str = "jetraft_raft_groups_quiet";

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the Prometheus recorder once per process and describes every metric.
pub fn install() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new().install_recorder().ok()?;
            describe_gauge!(CONNECTIONS, "Open client connections");
            describe_counter!(CONNECTIONS_TOTAL, "Client connections accepted since start");
            describe_counter!(MSGS_IN, "Messages received from clients");
            describe_counter!(MSGS_OUT, "Messages delivered to clients");
            describe_counter!(BYTES_IN, "Payload bytes received from clients");
            describe_counter!(BYTES_OUT, "Payload bytes delivered to clients");
            describe_gauge!(SUBSCRIPTIONS, "Active subscriptions");
            describe_counter!(SLOW_CONSUMERS, "Connections closed as slow consumers");
            describe_counter!(STALE_CONNECTIONS, "Connections closed as stale");
            describe_gauge!(RAFT_GROUPS, "Raft groups running on this node");
            describe_gauge!(
                RAFT_GROUPS_QUIET,
                "Idle Raft groups with their timers stopped"
            );
            Some(handle)
        })
        .as_ref()
}

/// Copies the server's counters into the recorder.
fn sync(s: &MonitorView) {
    let traffic = s.bus.stats();
    let st = &s.conns.clients.stats;
    gauge!(CONNECTIONS).set(s.conns.clients.len() as f64);
    counter!(CONNECTIONS_TOTAL).absolute(st.total_connections.load(Ordering::Relaxed));
    counter!(MSGS_IN).absolute(traffic.in_msgs.load(Ordering::Relaxed));
    counter!(MSGS_OUT).absolute(traffic.out_msgs.load(Ordering::Relaxed));
    counter!(BYTES_IN).absolute(traffic.in_bytes.load(Ordering::Relaxed));
    counter!(BYTES_OUT).absolute(traffic.out_bytes.load(Ordering::Relaxed));
    gauge!(SUBSCRIPTIONS).set(s.bus.subscription_count() as f64);
    counter!(SLOW_CONSUMERS).absolute(st.slow_consumers.load(Ordering::Relaxed));
    counter!(STALE_CONNECTIONS).absolute(st.stale_connections.load(Ordering::Relaxed));
    if let Some(js) = s.jetstream.get() {
        let groups = js.registry().groups();
        gauge!(RAFT_GROUPS).set(groups.ids().len() as f64);
        gauge!(RAFT_GROUPS_QUIET).set(groups.quiet_count() as f64);
    }
}

/// `GET /metrics` in the Prometheus text format.
pub(crate) async fn handler(State(s): State<Arc<MonitorView>>) -> Response {
    let Some(handle) = install() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics recorder unavailable",
        )
            .into_response();
    };
    sync(&s);
    handle.run_upkeep();
    let mut resp = handle.render().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}
