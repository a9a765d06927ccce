//! `/drainz` (a jetraft extension): drains this node for maintenance or undoes it (see
//! `jetstream::runtime::drain`).
//!
//! - `GET /drainz`: `{"server_name":..,"drained":..,"meta_leader":..,"stream_leaders":[..]}`,
//!   the leaderships this node still holds (empty once a drain finished; an R1 stream stays);
//! - `POST /drainz`: drains this node (through the meta leader), then reports as `GET`;
//! - `DELETE /drainz`: undoes the drain, then reports as `GET`.
//!
//! 503 with `{"error":..}` when JetStream is off or the meta leader could not record it.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use super::{MonitorView, json_response};

/// `GET /drainz`.
pub(super) async fn status(State(s): State<Arc<MonitorView>>) -> Response {
    match s.jetstream.get() {
        Some(js) => json_response(StatusCode::OK, &js.drain_status()),
        None => unavailable("jetstream not enabled"),
    }
}

/// `POST /drainz`.
pub(super) async fn drain(state: State<Arc<MonitorView>>) -> Response {
    set(state, true).await
}

/// `DELETE /drainz`.
pub(super) async fn undrain(state: State<Arc<MonitorView>>) -> Response {
    set(state, false).await
}

async fn set(State(s): State<Arc<MonitorView>>, drain: bool) -> Response {
    let Some(js) = s.jetstream.get() else {
        return unavailable("jetstream not enabled");
    };
    match js.request_drain(drain).await {
        Ok(answer) if answer.get("error").is_none() => {
            json_response(StatusCode::OK, &js.drain_status())
        }
        Ok(answer) => json_response(StatusCode::SERVICE_UNAVAILABLE, &answer),
        Err(e) => unavailable(&e.description),
    }
}

fn unavailable(why: &str) -> Response {
    json_response(StatusCode::SERVICE_UNAVAILABLE, &json!({"error": why}))
}
