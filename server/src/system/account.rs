//! The system account's per-account requests, as nats-server answers them:
//! `$SYS.REQ.ACCOUNT.<account>.<NAME>` with `NAME` one of `CONNZ` (that account's
//! connections), `SUBSZ` (its subscriptions), `JSZ` (its JetStream detail), `INFO` (its
//! `/accountz` detail), `STATZ` (its connections and traffic, no reply while it has no
//! connection here unless `include_unused`) and `CONNS` (the same figures as an
//! `account_connections` advisory, from nodes where it has connections); `$SYS.REQ.ACCOUNT.PING.STATZ` (every account's
//! STATZ); and what nats-server imports into every other account: its own CONNZ
//! (`$SYS.REQ.SERVER.PING.CONNZ`, `$SYS.REQ.ACCOUNT.PING.CONNZ`), its own STATZ
//! (`$SYS.REQ.ACCOUNT.PING.STATZ`) and `$SYS.REQ.USER.INFO` (the requesting user, its account
//! and permissions; answered by the requester's own node only).
//!
//! The requesting user of `USER.INFO` is the client of this node subscribed to the request's
//! reply subject (a request whose reply inbox belongs to a client of another node, or to none,
//! gets the account alone).

use serde_json::{Value, json};

use crate::bus::{InternalMsg, SubRef};

/// What one account request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AccountReq {
    /// `CONNZ`.
    Connz,
    /// `SUBSZ`.
    Subsz,
    /// `JSZ`.
    Jsz,
    /// `INFO`.
    Info,
    /// `STATZ`.
    Statz,
    /// `CONNS`.
    Conns,
}

/// The request names of `$SYS.REQ.ACCOUNT.<account>.<NAME>`.
const NAMES: [(&str, AccountReq); 6] = [
    ("CONNZ", AccountReq::Connz),
    ("SUBSZ", AccountReq::Subsz),
    ("JSZ", AccountReq::Jsz),
    ("INFO", AccountReq::Info),
    ("STATZ", AccountReq::Statz),
    ("CONNS", AccountReq::Conns),
];

/// The token of `$SYS.REQ.ACCOUNT.PING.STATZ`.
const PING: &str = "PING";
/// `$SYS.REQ.USER.INFO`.
pub(super) const USER_INFO: &str = "$SYS.REQ.USER.INFO";
/// `$SYS.REQ.ACCOUNT.PING.STATZ`.
const PING_STATZ: &str = "$SYS.REQ.ACCOUNT.PING.STATZ";
/// What every other account may ask, answered about that account (nats-server's imports):
/// its CONNZ twice and its STATZ.
pub(super) const IMPORTED: [&str; 3] = [
    "$SYS.REQ.SERVER.PING.CONNZ",
    "$SYS.REQ.ACCOUNT.PING.CONNZ",
    PING_STATZ,
];

/// The system account's subscriptions for account requests.
pub(super) fn subjects() -> impl Iterator<Item = String> {
    NAMES
        .iter()
        .map(|(name, _)| format!("$SYS.REQ.ACCOUNT.*.{name}"))
}

/// An account request in the system account: `(account, request)`, the account `None` for
/// every account's STATZ.
pub(super) fn parse(subject: &str) -> Option<(Option<String>, AccountReq)> {
    let rest = subject.strip_prefix("$SYS.REQ.ACCOUNT.")?;
    let (acc, name) = rest.split_once('.')?;
    if acc.is_empty() || name.contains('.') {
        return None;
    }
    let req = NAMES.iter().find(|(n, _)| *n == name).map(|(_, r)| *r)?;
    if acc == PING && req == AccountReq::Statz {
        return Some((None, req));
    }
    Some((Some(acc.to_string()), req))
}

/// An imported request made in `account` (not the system account): the same request about
/// `account`.
pub(super) fn imported(subject: &str, account: &str) -> Option<(Option<String>, AccountReq)> {
    let req = if subject == PING_STATZ {
        AccountReq::Statz
    } else if IMPORTED.contains(&subject) {
        AccountReq::Connz
    } else {
        return None;
    };
    Some((Some(account.to_string()), req))
}

impl super::Service {
    /// The reply to an account request `req` about `account` (every account when `None`)
    /// with the request body of `msg`; `None`: no reply.
    pub(super) async fn account_answer(
        &self,
        account: Option<String>,
        req: AccountReq,
        msg: &InternalMsg,
    ) -> Option<Value> {
        use crate::monitor::zreq::{self, Endpoint};
        if req == AccountReq::Conns {
            return self.account_conns(account?, msg);
        }
        let ty = match req {
            AccountReq::Connz => Endpoint::Connz.options_type(),
            AccountReq::Subsz => Endpoint::Subsz.options_type(),
            AccountReq::Jsz => Endpoint::Jsz.options_type(),
            AccountReq::Info => &zreq::ACCOUNT_INFO_OPTIONS,
            AccountReq::Statz | AccountReq::Conns => &zreq::ACCOUNT_STATZ_OPTIONS,
        };
        let mut opts = match zreq::decode_as(ty, &msg.payload) {
            Ok(opts) if self.filtered_out(&opts) => return None,
            Ok(opts) => opts,
            Err(e) => return Some(self.envelope_error(400, e)),
        };
        let view = &self.view;
        let data = match (req, account) {
            (AccountReq::Statz, only) => {
                let unused = opts.get("include_unused").and_then(Value::as_bool) == Some(true);
                let asked: Option<Vec<String>> = match only {
                    Some(acc) => Some(vec![acc]),
                    None => opts.get("accounts").and_then(Value::as_array).map(|a| {
                        a.iter()
                            .filter_map(|s| s.as_str().map(str::to_string))
                            .collect()
                    }),
                };
                let stz = crate::monitor::account_statz(view, asked.as_deref(), unused);
                let none = stz["account_statz"].as_array().is_none_or(Vec::is_empty);
                if none && !unused {
                    return None;
                }
                Ok(stz)
            }
            (_, None) => return None,
            (AccountReq::Connz | AccountReq::Subsz, Some(acc)) => {
                let endpoint = if req == AccountReq::Connz {
                    opts["acc"] = acc.into();
                    Endpoint::Connz
                } else {
                    opts["account"] = acc.into();
                    opts["subscriptions"] = true.into();
                    Endpoint::Subsz
                };
                return self.z_body(endpoint, &opts).await;
            }
            (AccountReq::Jsz, Some(acc)) => crate::monitor::jsz_account(view, &acc, &opts).await,
            (AccountReq::Info, Some(acc)) => crate::monitor::account_info(view, &acc),
            (AccountReq::Conns, Some(_)) => return None,
        };
        Some(match data {
            Ok(data) => json!({"server": self.server_info(), "data": data}),
            // The endpoint's own refusal: Go sends the nil document along.
            Err(e) => json!({"server": self.server_info(), "data": null,
                "error": {"code": 500, "description": e}}),
        })
    }

    /// `CONNS` about `account`: nats-server's `account_connections` advisory (no envelope)
    /// when the account has connections here; a body that is not JSON or names another
    /// account gets no reply.
    fn account_conns(&self, account: String, msg: &InternalMsg) -> Option<Value> {
        if !msg.payload.is_empty() {
            let body: Value = serde_json::from_slice(&msg.payload).ok()?;
            // nats-server decodes it over `{"acc": <account>}`: only another name refuses.
            if body
                .get("acc")
                .is_some_and(|a| a.as_str() != Some(account.as_str()))
            {
                return None;
            }
        }
        let stz = crate::monitor::account_statz(&self.view, Some(&[account]), false);
        let Value::Object(stat) = stz["account_statz"].get(0)?.clone() else {
            return None;
        };
        let mut out = serde_json::Map::new();
        out.insert(
            "type".into(),
            "io.nats.server.advisory.v1.account_connections".into(),
        );
        out.insert("id".into(), crate::jetstream::runtime::random_id().into());
        out.insert(
            "timestamp".into(),
            crate::monitor::rfc3339(time::OffsetDateTime::now_utc()).into(),
        );
        out.insert("server".into(), self.server_info());
        out.extend(stat);
        Some(Value::Object(out))
    }

    /// `$SYS.REQ.USER.INFO` made in `account`: the user waiting on the reply subject (see the
    /// module docs), its account and its permissions.
    pub(super) fn user_info(&self, account: &str, msg: &InternalMsg) -> Value {
        let mut data = json!({"user": "", "account": account, "account_name": account});
        let found = msg
            .reply
            .as_deref()
            .map(|r| self.view.bus.namespace(account).sublist.match_subject(r));
        let client = found.iter().find_map(|m| {
            m.plain.iter().find_map(|s| match s {
                SubRef::Local(sub) => Some(sub.client.clone()),
                SubRef::Remote(_) => None,
            })
        });
        if let Some(c) = client {
            data["user"] = c.meta.lock().user.clone().into();
            if let Some(perms) = c.permissions() {
                data["permissions"] = perms.public_json();
            }
        }
        json!({"server": self.server_info(), "data": data})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_subjects_name_the_account_and_the_request() {
        assert_eq!(
            parse("$SYS.REQ.ACCOUNT.APP.JSZ"),
            Some((Some("APP".into()), AccountReq::Jsz))
        );
        assert_eq!(
            parse("$SYS.REQ.ACCOUNT.PING.STATZ"),
            Some((None, AccountReq::Statz))
        );
        assert_eq!(
            parse("$SYS.REQ.ACCOUNT.PING.CONNZ"),
            Some((Some("PING".into()), AccountReq::Connz))
        );
        assert_eq!(
            parse("$SYS.REQ.ACCOUNT.APP.CONNS"),
            Some((Some("APP".into()), AccountReq::Conns))
        );
        assert_eq!(parse("$SYS.REQ.ACCOUNT.APP.LEAFZ"), None);
        assert_eq!(parse("$SYS.REQ.ACCOUNT.APP.INFO.X"), None);
        assert_eq!(
            imported("$SYS.REQ.ACCOUNT.PING.STATZ", "APP"),
            Some((Some("APP".into()), AccountReq::Statz))
        );
        assert_eq!(
            imported("$SYS.REQ.SERVER.PING.CONNZ", "APP"),
            Some((Some("APP".into()), AccountReq::Connz))
        );
        assert!(subjects().any(|s| s == "$SYS.REQ.ACCOUNT.*.INFO"));
    }
}
