//! The API audit advisory (`$JS.EVENT.ADVISORY.API`, type
//! `io.nats.jetstream.advisory.v1.api_audit`): one per `$JS.API` request answered, with the
//! request and the response as sent, published by the node that answers it (so once per
//! request in a cluster), in the request's account, as nats-server's
//! `sendJetStreamAPIAuditAdvisory` does.
//!
//! The `client` object describes the requester as far as this node knows it: the connection
//! that subscribed to the reply subject when it is a client of this node (`id`, `host`,
//! `start`, `name`, `lang`, `ver`, `user`, `rtt`, `kind`, `client_type`); for a requester on
//! another node only its account and that node's name; without a reply subject only the
//! account. nats-server carries the full client info with forwarded requests.

use serde::Serialize;
use serde_json::{Value, json};

use super::advisory::random_id;
use super::{JetStream, now_ns};
use crate::bus::{InternalMsg, Msg, SubRef};
use crate::jetstream::api::types::{go_time, to_go_json};

/// The audit advisory's subject.
const SUBJECT: &str = "$JS.EVENT.ADVISORY.API";
/// Its `type`.
const TYPE: &str = "io.nats.jetstream.advisory.v1.api_audit";

/// nats-server's `JSAPIAudit`.
#[derive(Debug, Serialize)]
struct Audit<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    id: String,
    timestamp: String,
    server: &'a str,
    client: Value,
    subject: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    request: &'a str,
    response: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    domain: Option<&'a str>,
}

impl JetStream {
    /// Publishes the audit advisory of the request `msg` answered with `response`. Requests
    /// one node sends another (node inboxes) are internal and not audited.
    pub(super) fn advise_api_audit(&self, msg: &InternalMsg, response: &str) {
        // Nobody listens (on this node or a peer): nothing to build.
        if !self
            .bus
            .namespace(&msg.account)
            .sublist
            .has_interest(SUBJECT)
        {
            return;
        }
        if msg
            .reply
            .as_deref()
            .is_some_and(|r| super::remote::inbox_node(r).is_some())
        {
            return;
        }
        let request = String::from_utf8_lossy(&msg.payload);
        let audit = Audit {
            kind: TYPE,
            id: random_id(),
            timestamp: go_time::format(now_ns()),
            server: &self.info.server_name,
            client: self.requester(&msg.account, msg.reply.as_deref()),
            subject: &msg.subject,
            request: &request,
            response,
            domain: self.identity.domain.as_deref(),
        };
        let json = to_go_json(&audit);
        self.bus
            .publish(&Msg::new(SUBJECT, json.as_bytes()).in_account(&msg.account));
    }

    /// nats-server's `ClientInfo` of whoever waits on `reply` in `account` (see the module
    /// docs).
    fn requester(&self, account: &str, reply: Option<&str>) -> Value {
        let mut info = json!({"acc": account});
        let Some(reply) = reply else {
            return info;
        };
        let found = self.bus.namespace(account).sublist.match_subject(reply);
        let subs = found
            .plain
            .iter()
            .chain(found.queues.iter().flat_map(|g| g.members.iter()));
        let mut remote = None;
        for s in subs {
            match s {
                SubRef::Local(sub) => {
                    let c = &sub.client;
                    let meta = c.meta.lock().clone();
                    let rtt = c.rtt.lock().map_or(0, |d| d.as_nanos());
                    let mut v = json!({
                        "start": go_time::format(
                            u64::try_from(c.start.unix_timestamp_nanos()).unwrap_or(0)
                        ),
                        "host": c.addr.ip().to_string(),
                        "id": c.cid,
                        "acc": c.account(),
                    });
                    for (k, val) in [
                        ("user", meta.user),
                        ("name", meta.name),
                        ("lang", meta.lang),
                        ("ver", meta.version),
                    ] {
                        if !val.is_empty() {
                            v[k] = val.into();
                        }
                    }
                    if rtt > 0 {
                        v["rtt"] = json!(rtt);
                    }
                    v["server"] = self.info.server_name.clone().into();
                    v["kind"] = "Client".into();
                    v["client_type"] = "nats".into();
                    return v;
                }
                SubRef::Remote(node) => remote = Some(*node),
            }
        }
        if let Some(name) = remote.and_then(|n| self.bus.peer_name(n)) {
            info["server"] = name.into();
        }
        info
    }
}
