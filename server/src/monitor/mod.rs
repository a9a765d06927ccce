//! The monitoring HTTP server (`-m`): `/healthz`, `/varz`, `/jsz`, `/connz`, `/subsz`, `/metrics`,
//! `/accountz`, `/accstatz`, jetraft's `/drainz` and
//! the stub endpoints exporters probe. JSON keys and shapes follow nats-server
//! (spec/nats-protocol-and-jetstream.md §2):
//! pretty-printed with two-space indent, `Content-Type: application/json` and
//! `Access-Control-Allow-Origin: *`.
//!
//! `/` is the web console ([`console`]) unless the configuration turns it off
//! (`console: false`, `--no_console`); the plain index of the endpoints is at `/monitor` (and at
//! `/` without the console).

mod accountz;
mod connz;
mod console;
mod drainz;
mod format;
mod healthz;
mod https;
mod jsz;
pub mod metrics;
mod query;
mod subsz;
mod varz;
pub mod zreq;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::bus::Bus;
use crate::config::Config;
use crate::conn::ConnContext;
use crate::jetstream::runtime::JetStream;
use crate::node::NodeInfo;

pub(crate) use accountz::{account_info, account_statz};
pub use format::{go_duration, rfc3339, uptime_string};
pub(crate) use jsz::jsz_account;
pub(crate) use varz::varz as varz_document;

/// Query parameters, in the order given (nats-server reads the first of repeated ones).
type Params = Query<Vec<(String, String)>>;

pub(crate) use query::{QueryParams, Refused, bad_request};

/// What the monitoring endpoints read: read-only views of the node's parts (the console also
/// publishes through `bus` on a browser's behalf, as a client would).
#[derive(Debug)]
pub struct MonitorView {
    /// The node's identity and addresses.
    pub node: Arc<NodeInfo>,
    /// The node's configuration.
    pub config: Arc<Config>,
    /// Subscriptions and traffic counters.
    pub bus: Bus,
    /// Connections, their counters, auth and lame duck state.
    pub conns: Arc<ConnContext>,
    /// The JetStream runtime, once started (monitoring starts before it).
    pub jetstream: Arc<OnceLock<Arc<JetStream>>>,
    /// The bound monitoring address.
    pub http_addr: SocketAddr,
    /// Cancelled on shutdown.
    pub shutdown: CancellationToken,
}

/// Serves the monitoring endpoints on `listener` until shutdown.
pub async fn serve(view: Arc<MonitorView>, listener: TcpListener) {
    let shutdown = view.shutdown.clone();
    let _ = axum::serve(listener, router(view))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await;
}

/// Serves the monitoring endpoints over HTTPS on `listener` until shutdown.
pub async fn serve_tls(
    view: Arc<MonitorView>,
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    handshake_timeout: std::time::Duration,
) {
    let shutdown = view.shutdown.clone();
    let Ok(listener) =
        https::TlsListener::new(listener, acceptor, handshake_timeout, shutdown.clone())
    else {
        return;
    };
    let _ = axum::serve(listener, router(view))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await;
}

/// Every monitoring route.
fn router(view: Arc<MonitorView>) -> Router {
    let mut app = Router::new().route("/monitor", get(index));
    if !view.config.console {
        app = app.route("/", get(index));
    }
    let app = app
        .route("/healthz", get(healthz::handler))
        .route("/varz", get(varz::handler))
        .route("/jsz", get(jsz::handler))
        .route(
            "/drainz",
            get(drainz::status)
                .post(drainz::drain)
                .delete(drainz::undrain),
        )
        .route("/connz", get(connz::handler))
        .route("/subsz", get(subsz::handler))
        .route("/subscriptionsz", get(subsz::handler))
        .route("/metrics", get(metrics::handler))
        .route("/routez", get(routez))
        .route("/leafz", get(leafz))
        .route("/gatewayz", get(gatewayz))
        .route("/accountz", get(accountz::accountz))
        .route("/accstatz", get(accountz::accstatz))
        .with_state(view.clone());
    if view.config.console {
        app.merge(console::router(view))
    } else {
        app
    }
}

/// A pretty-printed JSON response with nats-server's headers.
pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    let text = serde_json::to_string_pretty(body).unwrap_or_else(|_| "{}".to_string());
    text_json_response(status, text)
}

/// A compact JSON response (nats-server does not indent `/healthz`).
pub(crate) fn compact_json_response(status: StatusCode, body: &Value) -> Response {
    text_json_response(
        status,
        serde_json::to_string(body).unwrap_or_else(|_| "{}".to_string()),
    )
}

fn text_json_response(status: StatusCode, text: String) -> Response {
    let mut resp = (status, text).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    resp
}

async fn index(State(s): State<Arc<MonitorView>>) -> Html<String> {
    let links = [
        "varz", "connz", "subsz", "healthz", "metrics", "routez", "leafz", "gatewayz", "accountz",
    ];
    let items: String = links
        .iter()
        .map(|l| format!("<li><a href=\"/{l}\">/{l}</a></li>"))
        .collect();
    Html(format!(
        "<html><head><title>jetraft</title></head><body><h1>jetraft {}</h1>\
         <p>server {} ({})</p><ul>{items}</ul></body></html>",
        env!("CARGO_PKG_VERSION"),
        s.node.server_name,
        s.node.server_id
    ))
}

fn now() -> String {
    rfc3339(time::OffsetDateTime::now_utc())
}

async fn routez(State(s): State<Arc<MonitorView>>, Query(q): Params) -> Result<Response, Refused> {
    QueryParams(q).subs()?;
    let body = json!({"server_id": s.node.server_id, "server_name": s.node.server_name, "now": now(), "num_routes": 0, "routes": []});
    Ok(json_response(StatusCode::OK, &body))
}

async fn leafz(State(s): State<Arc<MonitorView>>, Query(q): Params) -> Result<Response, Refused> {
    QueryParams(q).bool("subs")?;
    Ok(json_response(
        StatusCode::OK,
        &json!({"server_id": s.node.server_id, "now": now(), "leafnodes": 0, "leafs": []}),
    ))
}

async fn gatewayz(
    State(s): State<Arc<MonitorView>>,
    Query(q): Params,
) -> Result<Response, Refused> {
    let q = QueryParams(q);
    q.subs()?;
    q.bool("accs")?;
    let body = json!({"server_id": s.node.server_id, "now": now(), "outbound_gateways": {}, "inbound_gateways": {}});
    Ok(json_response(StatusCode::OK, &body))
}
