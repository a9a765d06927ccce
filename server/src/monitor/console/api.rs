//! `/console/api/...`: the JSON API the page uses.
//!
//! - `GET session`: who is using the console and whether it asks for credentials.
//! - `POST login` / `POST logout`: a session cookie for NATS credentials (auth configured).
//! - `POST js` `{"api": "STREAM.CREATE.ORDERS", "body": {...}}`: one JetStream API request,
//!   answered with the API's own JSON (errors carry nats-server's `code`, `err_code` and text).
//! - `POST publish` `{"subject", "headers": [[k, v]], "payload", "request"}`: a core publish,
//!   or a request (and always one when a stream captures the subject, so the PubAck is shown).
//! - `GET events`: server-sent events with the live snapshot, at most once per sampler tick.
//! - `GET subscribe?subject=`: server-sent events with the messages published on this node
//!   to `subject` (wildcards allowed), at a bounded rate.
//!
//! Every request is checked: a session when auth is configured, the CSRF checks for `POST`s,
//! and the user's permissions for each subject it publishes or subscribes to.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Console;
use super::nats::{ClusterSub, REQUEST_TIMEOUT, RequestError, base64, header_block, parse_headers};
use super::session::{COOKIE, User, csrf_ok};
use crate::router::subject;

/// Most messages a subscribe stream sends per [`SUB_BATCH`]; the rest are counted as dropped.
const SUB_MAX_PER_BATCH: usize = 25;
/// How often a subscribe stream sends what it collected.
const SUB_BATCH: Duration = Duration::from_millis(250);

/// An error answer in the JetStream API's shape, so the page shows every error the same way.
fn error(status: StatusCode, description: impl Into<String>) -> Response {
    let body = json!({"error": {"code": status.as_u16(), "description": description.into()}});
    (status, Json(body)).into_response()
}

fn not_logged_in() -> Response {
    error(
        StatusCode::UNAUTHORIZED,
        "Authorization Violation: log in first",
    )
}

fn forbidden(text: String) -> Response {
    error(StatusCode::FORBIDDEN, text)
}

/// Why a request was refused: a status and nats-server-style text.
#[derive(Debug)]
struct Refusal(StatusCode, &'static str);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        error(self.0, self.1)
    }
}

/// The user of a state-changing request, after the CSRF checks.
fn writer(c: &Console, headers: &HeaderMap) -> Result<User, Refusal> {
    if !csrf_ok(headers) {
        return Err(Refusal(
            StatusCode::FORBIDDEN,
            "cross-site request refused (missing X-Jetraft-Console header or foreign Origin)",
        ));
    }
    c.sessions.user(headers).ok_or(Refusal(
        StatusCode::UNAUTHORIZED,
        "Authorization Violation: log in first",
    ))
}

fn request_error(e: &RequestError) -> Response {
    let status = match e {
        RequestError::NoResponders => StatusCode::SERVICE_UNAVAILABLE,
        RequestError::Timeout => StatusCode::GATEWAY_TIMEOUT,
        RequestError::Invalid(_) => StatusCode::BAD_REQUEST,
    };
    error(status, e.to_string())
}

/// `GET /console/api/session`.
pub(super) async fn session(State(c): State<Arc<Console>>, headers: HeaderMap) -> Response {
    let user = c.sessions.user(&headers);
    Json(json!({
        "auth_required": c.sessions.required(),
        "logged_in": user.is_some(),
        "user": user.as_ref().and_then(|u| u.name.clone()),
        "jetstream": user.as_ref().is_some_and(User::may_read_jetstream),
        "server_name": c.view.node.server_name,
        "server_id": c.view.node.server_id,
        "version": env!("CARGO_PKG_VERSION"),
    }))
    .into_response()
}

/// Credentials for `POST /console/api/login`.
#[derive(Debug, Deserialize)]
pub(super) struct Login {
    user: Option<String>,
    password: Option<String>,
    token: Option<String>,
}

/// `POST /console/api/login`: credentials in, session cookie out.
pub(super) async fn login(
    State(c): State<Arc<Console>>,
    headers: HeaderMap,
    Json(body): Json<Login>,
) -> Response {
    if !csrf_ok(&headers) {
        return error(StatusCode::FORBIDDEN, "cross-site request refused");
    }
    let blank = |s: Option<String>| s.filter(|s| !s.is_empty());
    let Some((sid, user)) =
        c.sessions
            .login(blank(body.user), blank(body.password), blank(body.token))
    else {
        return error(StatusCode::UNAUTHORIZED, "Authorization Violation");
    };
    let mut resp = Json(json!({"logged_in": true, "user": user.name})).into_response();
    let cookie = format!("{COOKIE}={sid}; Path=/; HttpOnly; SameSite=Strict");
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

/// `POST /console/api/logout`.
pub(super) async fn logout(State(c): State<Arc<Console>>, headers: HeaderMap) -> Response {
    if !csrf_ok(&headers) {
        return error(StatusCode::FORBIDDEN, "cross-site request refused");
    }
    c.sessions.logout(&headers);
    let mut resp = Json(json!({"logged_in": false})).into_response();
    let cookie = format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

/// One JetStream API call.
#[derive(Debug, Deserialize)]
pub(super) struct JsCall {
    api: String,
    #[serde(default)]
    body: Value,
}

/// Whether `api` is a literal subject tail (`STREAM.INFO.ORDERS`): no wildcards or spaces.
fn valid_api(api: &str) -> bool {
    !api.is_empty()
        && api.split('.').all(|t| {
            !t.is_empty() && t != "*" && t != ">" && !t.contains(|c: char| c.is_whitespace())
        })
}

/// `POST /console/api/js`.
pub(super) async fn js(
    State(c): State<Arc<Console>>,
    headers: HeaderMap,
    Json(call): Json<JsCall>,
) -> Response {
    let user = match writer(&c, &headers) {
        Ok(u) => u,
        Err(refused) => return refused.into_response(),
    };
    if !valid_api(&call.api) {
        return error(
            StatusCode::BAD_REQUEST,
            format!("invalid API {:?}", call.api),
        );
    }
    if let Err(text) = user.check_publish(&format!("$JS.API.{}", call.api)) {
        return forbidden(text);
    }
    match c.client.js_api(&call.api, &call.body).await {
        Ok(answer) => Json(answer).into_response(),
        Err(e) => request_error(&e),
    }
}

/// A message to publish.
#[derive(Debug, Deserialize)]
pub(super) struct Publish {
    subject: String,
    #[serde(default)]
    headers: Vec<(String, String)>,
    #[serde(default)]
    payload: String,
    #[serde(default)]
    request: bool,
}

/// `POST /console/api/publish`.
pub(super) async fn publish(
    State(c): State<Arc<Console>>,
    headers: HeaderMap,
    Json(p): Json<Publish>,
) -> Response {
    let user = match writer(&c, &headers) {
        Ok(u) => u,
        Err(refused) => return refused.into_response(),
    };
    if !subject::is_valid_literal_subject(&p.subject) {
        return error(StatusCode::BAD_REQUEST, "Invalid Publish Subject");
    }
    if let Err(text) = user.check_publish(&p.subject) {
        return forbidden(text);
    }
    let hdrs = match header_block(&p.headers) {
        Ok(h) => h,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    // Which streams capture the subject (unknown to a user without JetStream API rights).
    let streams: Option<Vec<Value>> = if user.check_publish("$JS.API.STREAM.NAMES").is_ok() {
        c.client
            .js_api("STREAM.NAMES", &json!({"subject": p.subject}))
            .await
            .ok()
            .map(|v| v["streams"].as_array().cloned().unwrap_or_default())
    } else {
        None
    };
    let captured = streams.as_ref().is_some_and(|s| !s.is_empty());
    let mut out = json!({"subject": p.subject, "streams": streams, "captured": captured});
    if p.request || captured {
        match c
            .client
            .request(
                &p.subject,
                hdrs.as_deref(),
                p.payload.as_bytes(),
                REQUEST_TIMEOUT,
            )
            .await
        {
            Ok(reply) => {
                let text = String::from_utf8_lossy(&reply.payload).into_owned();
                out["reply"] = json!({
                    "subject": reply.subject,
                    "headers": reply.hdrs.as_deref().map(parse_headers),
                    "data": text,
                    "json": serde_json::from_str::<Value>(&text).ok(),
                });
            }
            Err(e) => out["reply_error"] = e.to_string().into(),
        }
    } else {
        out["delivered"] = c
            .client
            .publish(&p.subject, hdrs.as_deref(), p.payload.as_bytes())
            .into();
    }
    Json(out).into_response()
}

/// `GET /console/api/events`: the live snapshots.
pub(super) async fn events(State(c): State<Arc<Console>>, headers: HeaderMap) -> Response {
    let Some(user) = c.sessions.user(&headers) else {
        return not_logged_in();
    };
    let with_js = user.may_read_jetstream();
    let rx = c.live.subscribe();
    let stream = futures_util::stream::unfold((rx, true), move |(mut rx, first)| async move {
        // The first event is the latest snapshot, unless the sampler has not taken one yet.
        if (!first || rx.borrow().full.is_empty()) && rx.changed().await.is_err() {
            return None;
        }
        let snap = rx.borrow_and_update().clone();
        let data = if with_js { snap.full } else { snap.core_only };
        let ev = Event::default().event("snapshot").data(&*data);
        Some((Ok::<_, Infallible>(ev), (rx, false)))
    });
    sse(stream)
}

/// The subject of `GET /console/api/subscribe`.
#[derive(Debug, Deserialize)]
pub(super) struct SubscribeQuery {
    subject: String,
}

/// `GET /console/api/subscribe?subject=`: messages on `subject` as they are published here.
pub(super) async fn subscribe(
    State(c): State<Arc<Console>>,
    headers: HeaderMap,
    Query(q): Query<SubscribeQuery>,
) -> Response {
    let Some(user) = c.sessions.user(&headers) else {
        return not_logged_in();
    };
    if !subject::is_valid_subject(&q.subject) {
        return error(StatusCode::BAD_REQUEST, "Invalid Subject");
    }
    if let Err(text) = user.check_subscribe(&q.subject) {
        return forbidden(text);
    }
    let sub = match ClusterSub::new(&c.view.bus, &q.subject) {
        Ok(s) => s,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let shutdown = c.view.shutdown.clone();
    let user = Arc::new(user);
    let stream = futures_util::stream::unfold(sub, move |mut sub| {
        let shutdown = shutdown.clone();
        let user = user.clone();
        async move {
            let first = tokio::select! {
                m = sub.recv() => m?,
                () = shutdown.cancelled() => return None,
            };
            tokio::time::sleep(SUB_BATCH).await;
            let mut batch = vec![first];
            let mut dropped = 0u64;
            while let Some(m) = sub.try_recv() {
                if batch.len() < SUB_MAX_PER_BATCH {
                    batch.push(m);
                } else {
                    dropped += 1;
                }
            }
            // A subject denied inside an allowed wildcard is not delivered, as nats-server
            // filters it for a client's wildcard subscription.
            let msgs: Vec<Value> = batch
                .iter()
                .filter(|m| user.check_subscribe(&m.subject).is_ok())
                .map(|m| {
                    json!({
                        "subject": m.subject,
                        "reply": m.reply,
                        "headers": m.hdrs.as_deref().map(parse_headers),
                        "data": base64(&m.payload),
                        "size": m.payload.len(),
                    })
                })
                .collect();
            let data = json!({"msgs": msgs, "dropped": dropped}).to_string();
            let ev = Event::default().event("msgs").data(data);
            Some((Ok::<_, Infallible>(ev), sub))
        }
    });
    sse(stream)
}

fn sse(stream: impl Stream<Item = Result<Event, Infallible>> + Send + 'static) -> Response {
    let mut resp = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

#[cfg(test)]
mod tests {
    #[test]
    fn api_names_are_literal_subject_tails() {
        assert!(super::valid_api("STREAM.INFO.ORDERS"));
        assert!(super::valid_api("INFO"));
        assert!(!super::valid_api("STREAM.>"));
        assert!(!super::valid_api("STREAM..X"));
        assert!(!super::valid_api("STREAM.INFO.A B"));
        assert!(!super::valid_api(""));
    }
}
