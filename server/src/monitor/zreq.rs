//! The monitoring endpoints as the system account's `$SYS.REQ.SERVER.*.<NAME>` requests see
//! them: the same handlers as over HTTP, with the options a request carries as a JSON body
//! (nats-server's `ConnzEventOptions`, `JszEventOptions`, ...) instead of query parameters.
//!
//! A body is decoded as nats-server's `json.Unmarshal` would decode it into the endpoint's
//! options type ([`decode`]: unknown fields ignored, Go's error texts); the options are then
//! turned into the query parameters the HTTP handler reads ([`answer`]), and the handler's
//! answer is read back as the `data` of the reply. What the HTTP side refuses with a plain-text
//! error is an `error` here (500, as nats-server answers a failing `Connz`/`Jsz` call), and a
//! filtered answer (`/jsz` with `leader_only` on a follower) is no answer at all.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::MonitorView;
use crate::jetstream::api::go_json::{self, GoStruct, Ty};

/// The monitoring endpoints served as system-account requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `VARZ`.
    Varz,
    /// `CONNZ`.
    Connz,
    /// `SUBSZ`.
    Subsz,
    /// `JSZ`.
    Jsz,
    /// `HEALTHZ`.
    Healthz,
    /// `ACCOUNTZ`.
    Accountz,
    /// `ROUTEZ` (jetraft has no NATS routes: empty, as `/routez`).
    Routez,
    /// `GATEWAYZ` (none: empty, as `/gatewayz`).
    Gatewayz,
    /// `LEAFZ` (none: empty, as `/leafz`).
    Leafz,
}

/// Every endpoint with its request name.
pub const ENDPOINTS: [(&str, Endpoint); 9] = [
    ("VARZ", Endpoint::Varz),
    ("CONNZ", Endpoint::Connz),
    ("SUBSZ", Endpoint::Subsz),
    ("JSZ", Endpoint::Jsz),
    ("HEALTHZ", Endpoint::Healthz),
    ("ACCOUNTZ", Endpoint::Accountz),
    ("ROUTEZ", Endpoint::Routez),
    ("GATEWAYZ", Endpoint::Gatewayz),
    ("LEAFZ", Endpoint::Leafz),
];

/// What one request gets.
#[derive(Debug, Clone, PartialEq)]
pub enum ZAnswer {
    /// The endpoint's document (the reply's `data`).
    Data(Value),
    /// The reply's `error` (`code`, `description`).
    Error {
        /// HTTP-style status (400: the options did not decode; 500: the endpoint refused).
        code: u16,
        /// What went wrong, in nats-server's words where they are known.
        description: String,
    },
    /// No reply (a filtered answer, as nats-server's `errSkipZreq`).
    Skip,
}

/// A `GoStruct` for nats-server's `<Name>EventOptions`: the endpoint's own options, then the
/// fields of the `EventFilterOptions` every one embeds (`server_name`, ...).
macro_rules! options_type {
    ($(#[$doc:meta])* $vis:vis $name:ident, $go:literal, [$(($field:literal, $ty:expr)),* $(,)?]) => {
        $(#[$doc])*
        $vis static $name: GoStruct = GoStruct {
            name: $go,
            qualified: concat!("server.", $go),
            fields: &[
                $(($field, $ty),)*
                ("server_name", Ty::Str),
                ("cluster", Ty::Str),
                ("host", Ty::Str),
                ("exact_match", Ty::Bool),
                ("tags", Ty::Slice(&Ty::Str, "[]string")),
                ("domain", Ty::Str),
            ],
        };
    };
}

options_type!(VARZ_OPTIONS, "VarzEventOptions", []);
options_type!(
    CONNZ_OPTIONS,
    "ConnzEventOptions",
    [
        ("sort", Ty::Str),
        ("auth", Ty::Bool),
        ("subscriptions", Ty::Bool),
        ("subscriptions_detail", Ty::Bool),
        ("offset", Ty::Int),
        ("limit", Ty::Int),
        ("cid", Ty::Uint64),
        ("mqtt_client", Ty::Str),
        ("state", Ty::Int),
        ("user", Ty::Str),
        ("acc", Ty::Str),
        ("filter_subject", Ty::Str),
    ]
);
options_type!(
    SUBSZ_OPTIONS,
    "SubszEventOptions",
    [
        ("offset", Ty::Int),
        ("limit", Ty::Int),
        ("subscriptions", Ty::Bool),
        ("account", Ty::Str),
        ("test", Ty::Str),
    ]
);
options_type!(
    JSZ_OPTIONS,
    "JszEventOptions",
    [
        ("account", Ty::Str),
        ("accounts", Ty::Bool),
        ("streams", Ty::Bool),
        ("consumer", Ty::Bool),
        ("direct_consumer", Ty::Bool),
        ("config", Ty::Bool),
        ("leader_only", Ty::Bool),
        ("offset", Ty::Int),
        ("limit", Ty::Int),
        ("raft", Ty::Bool),
        ("stream_leader_only", Ty::Bool),
    ]
);
options_type!(
    HEALTHZ_OPTIONS,
    "HealthzEventOptions",
    [
        ("js-enabled", Ty::Bool),
        ("js-enabled-only", Ty::Bool),
        ("js-server-only", Ty::Bool),
        ("js-meta-only", Ty::Bool),
        ("account", Ty::Str),
        ("stream", Ty::Str),
        ("consumer", Ty::Str),
        ("details", Ty::Bool),
    ]
);
options_type!(
    ACCOUNTZ_OPTIONS,
    "AccountzEventOptions",
    [("account", Ty::Str)]
);
options_type!(
    ROUTEZ_OPTIONS,
    "RoutezEventOptions",
    [
        ("subscriptions", Ty::Bool),
        ("subscriptions_detail", Ty::Bool)
    ]
);
options_type!(
    GATEWAYZ_OPTIONS,
    "GatewayzEventOptions",
    [("name", Ty::Str), ("accounts", Ty::Bool)]
);
options_type!(
    LEAFZ_OPTIONS,
    "LeafzEventOptions",
    [("subscriptions", Ty::Bool), ("account", Ty::Str)]
);

options_type!(
    /// The request options of `STATSZ` (filters only).
    pub STATSZ_OPTIONS, "StatszEventOptions", []);
options_type!(
    /// The request options of an account's `INFO` (filters only).
    pub ACCOUNT_INFO_OPTIONS, "AccInfoEventOptions", []);
options_type!(
    /// The request options of the accounts' `STATZ`.
    pub ACCOUNT_STATZ_OPTIONS,
    "AccountStatzEventOptions",
    [
        ("accounts", Ty::Slice(&Ty::Str, "[]string")),
        ("include_unused", Ty::Bool),
    ]
);

impl Endpoint {
    /// The endpoint a request name (`VARZ`, ...) asks for.
    pub fn from_name(name: &str) -> Option<Self> {
        ENDPOINTS.iter().find(|(n, _)| *n == name).map(|(_, e)| *e)
    }

    /// nats-server's options type for this endpoint.
    pub fn options_type(self) -> &'static GoStruct {
        match self {
            Self::Varz => &VARZ_OPTIONS,
            Self::Connz => &CONNZ_OPTIONS,
            Self::Subsz => &SUBSZ_OPTIONS,
            Self::Jsz => &JSZ_OPTIONS,
            Self::Healthz => &HEALTHZ_OPTIONS,
            Self::Accountz => &ACCOUNTZ_OPTIONS,
            Self::Routez => &ROUTEZ_OPTIONS,
            Self::Gatewayz => &GATEWAYZ_OPTIONS,
            Self::Leafz => &LEAFZ_OPTIONS,
        }
    }

    /// `(option, query parameter)` pairs of the options the HTTP handler reads under another
    /// name or at all (the rest have no HTTP counterpart in jetraft and are ignored).
    fn parameters(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Self::Connz => &[
                ("auth", "auth"),
                ("offset", "offset"),
                ("limit", "limit"),
                ("cid", "cid"),
                ("sort", "sort"),
                ("acc", "acc"),
            ],
            Self::Subsz => &[
                ("account", "acc"),
                ("subscriptions", "subs"),
                ("offset", "offset"),
                ("limit", "limit"),
                ("test", "test"),
            ],
            Self::Jsz => &[
                ("accounts", "accounts"),
                ("streams", "streams"),
                ("consumer", "consumers"),
                ("config", "config"),
                ("offset", "offset"),
                ("limit", "limit"),
                ("leader_only", "leader-only"),
            ],
            Self::Healthz => &[
                ("js-enabled", "js-enabled"),
                ("js-enabled-only", "js-enabled-only"),
                ("js-server-only", "js-server-only"),
                ("js-meta-only", "js-meta-only"),
                ("details", "details"),
                ("account", "account"),
                ("stream", "stream"),
                ("consumer", "consumer"),
            ],
            Self::Accountz => &[("account", "acc")],
            Self::Varz | Self::Routez | Self::Gatewayz | Self::Leafz => &[],
        }
    }

    /// The query parameters `opts` stands for (zero values are left out: Go's zero value is
    /// the default, as an absent parameter is).
    fn query(self, opts: &Value) -> Vec<(String, String)> {
        let mut q: Vec<(String, String)> = self
            .parameters()
            .iter()
            .filter_map(|(option, param)| {
                let text = match opts.get(*option)? {
                    Value::Bool(true) => "true".to_string(),
                    Value::Number(n) if n.as_f64() != Some(0.0) => n.to_string(),
                    Value::String(s) if !s.is_empty() => s.clone(),
                    _ => return None,
                };
                Some(((*param).to_string(), text))
            })
            .collect();
        if self == Self::Connz {
            let on = |k: &str| opts.get(k).and_then(Value::as_bool).unwrap_or(false);
            if on("subscriptions_detail") {
                q.push(("subs".into(), "detail".into()));
            } else if on("subscriptions") {
                q.push(("subs".into(), "true".into()));
            }
            let state = match opts.get("state").and_then(Value::as_i64) {
                Some(1) => "closed",
                Some(2) => "any",
                _ => "open",
            };
            q.push(("state".into(), state.into()));
        }
        q
    }
}

/// Decodes a request body into the options of `endpoint`: an empty body is no options, else
/// it must decode as nats-server's `json.Unmarshal` decodes it (`Err`: Go's error text).
pub fn decode(endpoint: Endpoint, body: &[u8]) -> Result<Value, String> {
    decode_as(endpoint.options_type(), body)
}

/// [`decode`] for an options type of its own (`STATSZ`).
pub fn decode_as(ty: &'static GoStruct, body: &[u8]) -> Result<Value, String> {
    if body.is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    go_json::check_unmarshal(body, ty)?;
    let mut v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if !v.is_object() {
        // `null` decodes into the zero value in Go.
        v = Value::Object(serde_json::Map::new());
    }
    go_json::canonicalize(&mut v, ty);
    Ok(v)
}

/// Answers one request for `endpoint` with the decoded options `opts`.
pub async fn answer(view: &Arc<MonitorView>, endpoint: Endpoint, opts: &Value) -> ZAnswer {
    let q = Query(endpoint.query(opts));
    let s = State(view.clone());
    let resp: Response = match endpoint {
        Endpoint::Varz => super::varz::handler(s, q).await,
        Endpoint::Connz => super::connz::handler(s, q).await.into_response(),
        Endpoint::Subsz => super::subsz::handler(s, q).await.into_response(),
        Endpoint::Jsz => super::jsz::handler(s, q).await.into_response(),
        Endpoint::Healthz => super::healthz::handler(s, q).await.into_response(),
        Endpoint::Accountz => super::accountz::accountz(s, q).await.into_response(),
        Endpoint::Routez => super::routez(s, q).await.into_response(),
        Endpoint::Gatewayz => super::gatewayz(s, q).await.into_response(),
        Endpoint::Leafz => super::leafz(s, q).await.into_response(),
    };
    let status = resp.status();
    let Ok(body) = axum::body::to_bytes(resp.into_body(), usize::MAX).await else {
        return ZAnswer::Error {
            code: 500,
            description: "could not read the answer".into(),
        };
    };
    match serde_json::from_slice::<Value>(&body) {
        Ok(mut data) => {
            if endpoint == Endpoint::Healthz
                && let Value::Object(map) = &mut data
            {
                map.insert("status_code".into(), status.as_u16().into());
            }
            ZAnswer::Data(data)
        }
        Err(_) => {
            let text = String::from_utf8_lossy(&body).trim_end().to_string();
            if status == StatusCode::BAD_REQUEST && text.starts_with("filtered response") {
                ZAnswer::Skip
            } else {
                ZAnswer::Error {
                    code: 500,
                    description: text,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_become_the_query_the_http_handlers_read() {
        let opts =
            serde_json::json!({"consumer": true, "leader_only": true, "limit": 0, "account": ""});
        assert_eq!(
            Endpoint::Jsz.query(&opts),
            vec![
                ("consumers".to_string(), "true".to_string()),
                ("leader-only".to_string(), "true".to_string())
            ]
        );
        let opts = serde_json::json!({"subscriptions_detail": true, "subscriptions": true, "state": 2, "limit": 5});
        let q = Endpoint::Connz.query(&opts);
        assert!(q.contains(&("subs".into(), "detail".into())), "{q:?}");
        assert!(q.contains(&("state".into(), "any".into())), "{q:?}");
        assert!(q.contains(&("limit".into(), "5".into())), "{q:?}");
    }

    #[test]
    fn bodies_decode_with_go_errors() {
        assert_eq!(
            decode(Endpoint::Connz, br#"{"limit":"x"}"#),
            Err("json: cannot unmarshal string into Go struct field ConnzEventOptions.limit of type int".into())
        );
        assert_eq!(
            decode(Endpoint::Connz, b"{bad"),
            Err("invalid character 'b' looking for beginning of object key string".into())
        );
        let v = decode(Endpoint::Jsz, br#"{"Leader_Only":true,"unknown":1}"#).expect("decodes");
        assert_eq!(v["leader_only"], true);
        assert!(decode(Endpoint::Varz, b"").expect("empty").is_object());
    }
}
