//! The system account's services (`system_account`, `$SYS` unless configured): the requests
//! nats-server answers for its system account's users, in its subjects and JSON.
//!
//! - `$SYS.REQ.SERVER.PING` and `$SYS.REQ.SERVER.PING.<NAME>`: every node of the cluster
//!   answers (the requester collects the replies, as `nats server list` does);
//! - `$SYS.REQ.SERVER.<server id>.<NAME>`: only that node answers;
//! - `$SYS.REQ.ACCOUNT.<account>.<CONNZ|SUBSZ|JSZ|INFO|STATZ>`, `$SYS.REQ.ACCOUNT.PING.STATZ`:
//!   every node answers about the account (see [`account`]);
//! - in every other account, `$SYS.REQ.SERVER.PING.CONNZ`, `$SYS.REQ.ACCOUNT.PING.CONNZ` and
//!   `$SYS.REQ.ACCOUNT.PING.STATZ` answer about that account (nats-server imports them into
//!   each account), and in every account `$SYS.REQ.USER.INFO` about the requesting user;
//!
//! with `NAME` one of `STATSZ`, `IDZ` and the monitoring endpoints of [`zreq`] (`VARZ`,
//! `CONNZ`, `SUBSZ`, `JSZ`, `HEALTHZ`, `ACCOUNTZ`, `ROUTEZ`, `GATEWAYZ`, `LEAFZ`). A reply is
//! `{"server": {...}, "data": {...}}` (or `"error": {"code", "description"}`), `STATSZ` is
//! `{"server", "statsz"}` and `IDZ` is the bare `{"name", "host", "id"}`, as in nats-server. A
//! request body carries the endpoint's options as JSON plus nats-server's filters
//! (`server_name`, `cluster`, `host`, `exact_match`, `tags`, `domain`): a node the filters
//! leave out does not answer.
//!
//! The subscriptions live in the system account's namespace, so only its users can send these
//! requests. Each node subscribes locally and as a node inbox, and announces its interest to
//! its peers, so a request published on any node reaches every node that answers it; replies
//! go back through the bus to the requester's inbox, wherever it is connected. Unlike
//! nats-server, replies are never compressed (`Accept-Encoding` is ignored) and no periodic
//! events (`$SYS.SERVER.<id>.STATSZ`, connect/disconnect) are published.

mod account;
mod statsz;

use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::bus::internal::InternalSub;
use crate::bus::{InternalMsg, Msg};
use crate::config::accounts::DEFAULT_SYSTEM_ACCOUNT;
use crate::monitor::MonitorView;
use crate::monitor::zreq::{self, ENDPOINTS, Endpoint, ZAnswer};
use crate::router::SublistError;

/// The prefix of every server request.
const SERVER_REQ: &str = "$SYS.REQ.SERVER.";
/// The token that addresses every node instead of one server id.
const PING: &str = "PING";

/// What one request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Request {
    /// `STATSZ`, also the plain `$SYS.REQ.SERVER.PING`.
    Statsz,
    /// `IDZ`.
    Idz,
    /// A monitoring endpoint.
    Z(Endpoint),
    /// An account request: about that account, or every account when `None`.
    Account(Option<String>, account::AccountReq),
}

impl Request {
    fn from_name(name: &str) -> Option<Self> {
        match name {
            "STATSZ" => Some(Self::Statsz),
            "IDZ" => Some(Self::Idz),
            _ => Endpoint::from_name(name).map(Self::Z),
        }
    }
}

/// The request names served.
fn names() -> impl Iterator<Item = &'static str> {
    ["STATSZ", "IDZ"]
        .into_iter()
        .chain(ENDPOINTS.iter().map(|(n, _)| *n))
}

/// The subjects this node answers on: the `PING` forms and its own server id's.
fn subjects(server_id: &str) -> Vec<String> {
    let mut out = vec![format!("{SERVER_REQ}{PING}")];
    out.extend(account::subjects());
    for name in names() {
        out.push(format!("{SERVER_REQ}{PING}.{name}"));
        out.push(format!("{SERVER_REQ}{server_id}.{name}"));
    }
    out
}

/// The request a subject names, if this node serves it.
fn parse(subject: &str, server_id: &str) -> Option<Request> {
    if subject.starts_with("$SYS.REQ.ACCOUNT.") {
        return account::parse(subject).map(|(acc, req)| Request::Account(acc, req));
    }
    let rest = subject.strip_prefix(SERVER_REQ)?;
    if rest == PING {
        return Some(Request::Statsz);
    }
    let (target, name) = rest.split_once('.')?;
    if target != PING && target != server_id {
        return None;
    }
    Request::from_name(name)
}

/// The system account's name in `view`'s configuration.
pub fn system_account(view: &MonitorView) -> String {
    view.config
        .auth
        .system_account
        .clone()
        .unwrap_or_else(|| DEFAULT_SYSTEM_ACCOUNT.to_string())
}

/// Starts answering the system account's requests on this node until `shutdown`.
pub fn serve(
    view: Arc<MonitorView>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> Result<(), SublistError> {
    let system = system_account(&view);
    let mut accounts: Vec<String> = vec![crate::config::GLOBAL_ACCOUNT.to_string()];
    accounts.extend(view.config.auth.accounts.iter().map(|a| a.name.clone()));
    accounts.retain(|a| *a != system);
    accounts.dedup();
    let own = subjects(&view.node.server_id);
    let service = Arc::new(Service {
        view: view.clone(),
        system: system.clone(),
    });
    let mut namespaces = vec![(system, own)];
    for a in accounts {
        namespaces.push((
            a,
            account::IMPORTED.iter().map(|s| (*s).to_string()).collect(),
        ));
    }
    for (account, _) in &namespaces {
        // Only the requester's own node answers who it is: no interest announced to peers.
        let sub = view
            .bus
            .namespace(account)
            .internal
            .subscribe(account::USER_INFO)?;
        let (service, shutdown, account) = (service.clone(), shutdown.clone(), account.clone());
        tasks.spawn(async move { service.run(&account, sub, shutdown).await });
    }
    for (account, subjects) in namespaces {
        let patterns: Vec<&str> = subjects.iter().map(String::as_str).collect();
        let ns = view.bus.namespace(&account);
        let local = ns.internal.subscribe_many(&patterns)?;
        let from_peers = ns.internal.subscribe_many_inbox(&patterns)?;
        for s in &subjects {
            view.bus.announce_interest_in(&account, s);
        }
        for sub in [local, from_peers] {
            let service = service.clone();
            let shutdown = shutdown.clone();
            let account = account.clone();
            tasks.spawn(async move { service.run(&account, sub, shutdown).await });
        }
    }
    Ok(())
}

/// One node's system services.
#[derive(Debug)]
struct Service {
    view: Arc<MonitorView>,
    /// The system account.
    system: String,
}

impl Service {
    /// Answers the requests of `sub`, a subscription in `account`'s namespace.
    async fn run(&self, account: &str, mut sub: InternalSub, shutdown: CancellationToken) {
        loop {
            let msg = tokio::select! {
                () = shutdown.cancelled() => return,
                m = sub.rx.recv() => match m {
                    Some(m) => m,
                    None => return,
                },
            };
            self.on_request(account, &msg).await;
        }
    }

    async fn on_request(&self, account: &str, msg: &InternalMsg) {
        let Some(reply) = msg.reply.as_deref().filter(|r| !r.is_empty()) else {
            return;
        };
        let Some(body) = self.answer(account, msg).await else {
            return;
        };
        let text = serde_json::to_vec(&body).unwrap_or_default();
        self.view
            .bus
            .publish(&Msg::new(reply, &text).in_account(account));
    }

    /// The reply to `msg`, a request in `account`; `None`: no reply (not for this node).
    async fn answer(&self, account: &str, msg: &InternalMsg) -> Option<Value> {
        if msg.subject == account::USER_INFO {
            return Some(self.user_info(account, msg));
        }
        // Outside the system account only the imports are subscribed: about that account.
        let req = if account == self.system {
            parse(&msg.subject, &self.view.node.server_id)?
        } else {
            let (acc, req) = account::imported(&msg.subject, account)?;
            Request::Account(acc, req)
        };
        let endpoint = match req {
            Request::Idz => return Some(statsz::idz(&self.view)),
            Request::Statsz => {
                return Some(match zreq::decode_as(&zreq::STATSZ_OPTIONS, &msg.payload) {
                    Ok(opts) if self.filtered_out(&opts) => return None,
                    Ok(_) => {
                        let mut body = statsz::statsz(&self.view);
                        body["server"] = self.server_info();
                        reorder_server_first(body)
                    }
                    Err(e) => self.envelope_error(400, e),
                });
            }
            Request::Z(endpoint) => endpoint,
            Request::Account(acc, req) => return self.account_answer(acc, req, msg).await,
        };
        match zreq::decode(endpoint, &msg.payload) {
            Ok(opts) if self.filtered_out(&opts) => None,
            Ok(opts) => self.z_body(endpoint, &opts).await,
            Err(e) => Some(self.envelope_error(400, e)),
        }
    }

    /// The reply to a monitoring endpoint's request with options `opts`; `None`: no reply.
    async fn z_body(&self, endpoint: Endpoint, opts: &Value) -> Option<Value> {
        Some(match zreq::answer(&self.view, endpoint, opts).await {
            ZAnswer::Data(data) => json!({"server": self.server_info(), "data": data}),
            ZAnswer::Error { code, description } => self.envelope_error(code, description),
            ZAnswer::Skip => return None,
        })
    }

    fn server_info(&self) -> Value {
        statsz::server_info(&self.view)
    }

    fn envelope_error(&self, code: u16, description: String) -> Value {
        json!({"server": self.server_info(), "error": {"code": code, "description": description}})
    }

    /// Whether nats-server's `EventFilterOptions` in `opts` leave this node out.
    fn filtered_out(&self, opts: &Value) -> bool {
        let node = &self.view.node;
        let cluster = node.cluster_name.as_deref().unwrap_or_default();
        let exact = opts.get("exact_match").and_then(Value::as_bool) == Some(true);
        let text = |k: &str| {
            opts.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let fits = |want: Option<&str>, have: &str| {
            want.is_none_or(|w| if exact { w == have } else { have.contains(w) })
        };
        if !fits(text("server_name"), &node.server_name)
            || !fits(text("host"), &node.host)
            || !fits(text("cluster"), cluster)
        {
            return true;
        }
        if let Some(tags) = opts.get("tags").and_then(Value::as_array) {
            let own = &self.view.config.server_tags;
            if tags
                .iter()
                .filter_map(Value::as_str)
                .any(|t| !own.iter().any(|o| o.eq_ignore_ascii_case(t)))
            {
                return true;
            }
        }
        // jetraft has no JetStream domains: a request for one is not for this node.
        text("domain").is_some()
    }
}

/// `{"server", "statsz"}` in nats-server's field order.
fn reorder_server_first(body: Value) -> Value {
    let Value::Object(mut map) = body else {
        return body;
    };
    let mut out = serde_json::Map::new();
    if let Some(s) = map.remove("server") {
        out.insert("server".into(), s);
    }
    out.extend(map);
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_name_ping_and_own_id_requests() {
        assert_eq!(parse("$SYS.REQ.SERVER.PING", "NABC"), Some(Request::Statsz));
        assert_eq!(
            parse("$SYS.REQ.SERVER.PING.JSZ", "NABC"),
            Some(Request::Z(Endpoint::Jsz))
        );
        assert_eq!(
            parse("$SYS.REQ.SERVER.NABC.IDZ", "NABC"),
            Some(Request::Idz)
        );
        assert_eq!(parse("$SYS.REQ.SERVER.NOTME.VARZ", "NABC"), None);
        assert_eq!(parse("$SYS.REQ.SERVER.PING.FOO", "NABC"), None);
        let subjects = subjects("NABC");
        assert!(subjects.contains(&"$SYS.REQ.SERVER.PING.HEALTHZ".to_string()));
        assert!(subjects.contains(&"$SYS.REQ.SERVER.NABC.STATSZ".to_string()));
        assert!(subjects.contains(&"$SYS.REQ.ACCOUNT.*.CONNZ".to_string()));
        assert_eq!(
            parse("$SYS.REQ.ACCOUNT.APP.CONNZ", "NABC"),
            Some(Request::Account(
                Some("APP".into()),
                account::AccountReq::Connz
            ))
        );
        assert_eq!(parse("$SYS.REQ.ACCOUNT.APP.LEAFZ", "NABC"), None);
    }
}
