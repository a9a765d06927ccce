//! The jetraft console: a single-page web UI on the monitoring port (`/`), built from plain
//! JavaScript modules and CSS embedded in the binary ([`assets`]; no build step, nothing
//! fetched from elsewhere).
//!
//! The page talks to the node through a small JSON API under `/console/api/` ([`api`]): it
//! proxies JetStream API requests and core publishes through the node's bus ([`nats`]) for the
//! browser, with the logged-in user's permissions ([`session`]), and streams live state from one
//! shared sampler ([`live`]) as server-sent events. `console: false` or `--no_console` turns
//! it off: `/` is then the plain monitoring index, as before.

mod api;
mod assets;
mod live;
mod nats;
mod session;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

use super::MonitorView;

/// What the console's handlers share.
#[derive(Debug)]
pub(crate) struct Console {
    /// The node's monitoring view.
    pub(crate) view: Arc<MonitorView>,
    /// Publishes and requests through the node's bus.
    pub(crate) client: nats::BusClient,
    /// Logged-in users.
    pub(crate) sessions: session::Sessions,
    /// The shared live sampler.
    pub(crate) live: Arc<live::Live>,
}

/// The console's routes: the page at `/`, its assets and its API.
pub(crate) fn router(view: Arc<MonitorView>) -> Router {
    let client = nats::BusClient::new(
        view.bus.clone(),
        &view.node.server_id,
        view.shutdown.clone(),
    );
    let console = Arc::new(Console {
        sessions: session::Sessions::new(view.conns.settings.clone()),
        live: live::Live::new(view.clone(), client.clone()),
        client,
        view,
    });
    Router::new()
        .route("/", get(assets::index))
        .route("/console/assets/{file}", get(assets::asset))
        .route("/console/api/session", get(api::session))
        .route("/console/api/login", post(api::login))
        .route("/console/api/logout", post(api::logout))
        .route("/console/api/js", post(api::js))
        .route("/console/api/publish", post(api::publish))
        .route("/console/api/events", get(api::events))
        .route("/console/api/subscribe", get(api::subscribe))
        .with_state(console)
}
