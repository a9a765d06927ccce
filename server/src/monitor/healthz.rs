//! `/healthz`: liveness and readiness in nats-server's shape.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use super::MonitorView;
use super::{Params, QueryParams, Refused, compact_json_response};
use crate::jetstream::runtime::{HealthProblem, HealthScope};

/// `GET /healthz[?js-enabled-only|js-server-only|js-meta-only|account&stream&consumer|details]`.
///
/// 200 `{"status":"ok"}` when healthy. The default check (the Kubernetes startup probe's) also
/// requires JetStream to be current: a meta leader heard from, and every stream replica
/// assigned here caught up with its leader. 503 while shutting down or in lame duck mode, and
/// (every check) once damage was found in the store.
pub(super) async fn handler(
    State(s): State<Arc<MonitorView>>,
    Query(q): Params,
) -> Result<Response, Refused> {
    // Decoded in nats-server's order; a bad boolean is a plain-text 400.
    let q = QueryParams(q);
    q.bool("js-enabled")?;
    let js_enabled_only = q.bool("js-enabled-only")?;
    let js_server_only = q.bool("js-server-only")?;
    let js_meta_only = q.bool("js-meta-only")?;
    let details = q.bool("details")?;
    Ok(check(
        &s,
        &q,
        details,
        js_enabled_only || js_server_only,
        js_meta_only,
    ))
}

/// The health check proper, once the parameters are decoded.
fn check(
    s: &MonitorView,
    q: &QueryParams,
    details: bool,
    server_only: bool,
    meta_only: bool,
) -> Response {
    let error = |status: StatusCode, text: &str| {
        let body = if details {
            json!({"status": "error", "errors": [{"type": "BAD_REQUEST", "error": text}]})
        } else {
            json!({"status": "error", "error": text})
        };
        compact_json_response(status, &body)
    };
    let has = |k: &str| q.get(k).is_some();
    if (has("stream") || has("consumer")) && !has("account") {
        let what = if has("stream") { "stream" } else { "consumer" };
        return error(
            StatusCode::BAD_REQUEST,
            &format!("\"account\" must not be empty when checking {what} health"),
        );
    }
    if has("consumer") && !has("stream") {
        return error(
            StatusCode::BAD_REQUEST,
            "\"stream\" must not be empty when checking consumer health",
        );
    }
    if s.shutdown.is_cancelled() || s.conns.lame_duck.is_cancelled() {
        let why = if s.shutdown.is_cancelled() {
            "server is shutting down"
        } else {
            "server is in lame duck mode"
        };
        return unavailable(details, &[HealthProblem::server(why)]);
    }
    // Damage found in the store while running fails every check, liveness included: the
    // restart it leads to moves the store aside and rebuilds the node from its peers
    // (`server::store_repair`).
    if s.config.jetstream.enabled
        && let Some(damage) = jetraft_storage::damage::found()
    {
        let why = format!("store damaged ({damage}): restart the server to repair it");
        return unavailable(details, &[HealthProblem::server(&why)]);
    }
    // jetraft always runs JetStream: `js-enabled-only` only needs the server up.
    if server_only {
        return ok();
    }
    let scope = if has("stream") {
        HealthScope::Stream {
            stream: q.get("stream").unwrap_or_default().to_string(),
            consumer: q.get("consumer").map(str::to_string),
        }
    } else if meta_only {
        HealthScope::Meta
    } else {
        HealthScope::All
    };
    let Some(js) = s.jetstream.get() else {
        // Without JetStream there is nothing to wait for (nats-server answers ok).
        if !s.config.jetstream.enabled {
            return ok();
        }
        return unavailable(details, &[HealthProblem::starting()]);
    };
    let problems = js.health(&scope);
    if problems.is_empty() {
        return ok();
    }
    let status = if problems.iter().any(|p| p.not_found) {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    respond(status, details, &problems)
}

fn ok() -> Response {
    compact_json_response(StatusCode::OK, &json!({"status": "ok"}))
}

/// 503 for a server that is not serving (shutting down, lame duck).
fn unavailable(details: bool, problems: &[HealthProblem]) -> Response {
    respond(StatusCode::SERVICE_UNAVAILABLE, details, problems)
}

/// nats-server's failure body: the first error, or with `details` every error with its asset.
fn respond(status: StatusCode, details: bool, problems: &[HealthProblem]) -> Response {
    let body = if details {
        let list: Vec<_> = problems
            .iter()
            .map(|p| {
                let mut e = json!({"type": p.kind, "error": p.error});
                if let Some(stream) = &p.stream {
                    e["account"] = json!("$G");
                    e["stream"] = json!(stream);
                }
                if let Some(consumer) = &p.consumer {
                    e["consumer"] = json!(consumer);
                }
                e
            })
            .collect();
        json!({"status": "error", "errors": list})
    } else {
        let first = problems
            .first()
            .map(|p| p.error.as_str())
            .unwrap_or_default();
        json!({"status": "unavailable", "error": first})
    };
    compact_json_response(status, &body)
}
