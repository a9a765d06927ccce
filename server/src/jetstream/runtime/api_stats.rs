//! Each account's `$JS.API` counters (account info `api.total` / `api.errors`, `/jsz` account
//! details), counted as nats-server counts them: once per answer sent to a client, after the
//! answer was written (account info does not count itself), an error answer also in `errors`.
//!
//! A request is counted by the node that sends its answer to the client: the owner of a
//! forwarded request, or the node that relays an answer it asked another node for (answers
//! between nodes, to a forward inbox, are not counted). Account info adds up every node's
//! counters for the account, as nats-server adds up its servers': the meta leader asks each
//! other voter (`$JSC.API.COUNTS`, in the account, through the forward inboxes) and adds what
//! comes back within [`PEER_WAIT`] (a node that is down adds nothing).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use parking_lot::Mutex;
use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::bus::Msg;
use crate::bus::internal::InternalMsg;

/// The question one node asks another for its counters of the account it is sent in.
pub(super) const COUNTS_SUBJECT: &str = "$JSC.API.COUNTS";
/// How long account info waits for another node's counters.
const PEER_WAIT: Duration = Duration::from_millis(500);

/// Requests answered and error answers of one account.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApiCounts {
    /// Answers sent.
    pub total: u64,
    /// Of which errors.
    pub errors: u64,
}

/// The counters of every account that sent a request here.
#[derive(Debug, Default)]
pub(super) struct ApiCounters {
    by_account: Mutex<HashMap<String, ApiCounts>>,
}

impl ApiCounters {
    /// Counts an answer `json` sent in `account`.
    pub(super) fn count(&self, account: &str, json: &str) {
        let error = is_error(json);
        let mut map = self.by_account.lock();
        let counts = match map.get_mut(account) {
            Some(c) => c,
            None => map.entry(account.to_string()).or_default(),
        };
        counts.total += 1;
        counts.errors += u64::from(error);
    }

    /// `account`'s counters.
    pub(super) fn get(&self, account: &str) -> ApiCounts {
        self.by_account
            .lock()
            .get(account)
            .copied()
            .unwrap_or_default()
    }
}

impl super::JetStream {
    /// The API counters of `account` on this node.
    pub fn api_counts(&self, account: &str) -> ApiCounts {
        self.api_counts.get(account)
    }

    /// `account`'s counters over the cluster: this node's and every other voter's.
    pub(super) async fn cluster_api_counts(&self, account: &str) -> ApiCounts {
        let mut sum = self.api_counts.get(account);
        if !self.clustered() {
            return sum;
        }
        let ask = InternalMsg {
            subject: COUNTS_SUBJECT.to_string(),
            reply: None,
            hdrs: None,
            payload: Bytes::new(),
            account: Arc::from(account),
        };
        let peers = self.voters().into_iter().filter(|n| *n != self.node.0);
        let answers =
            futures_util::future::join_all(peers.map(|n| self.ask_msg(n, &ask, PEER_WAIT))).await;
        for answer in answers.into_iter().flatten().flatten() {
            if let Some((total, errors)) = std::str::from_utf8(&answer)
                .ok()
                .and_then(|a| a.split_once(' '))
                .and_then(|(t, e)| Some((t.parse::<u64>().ok()?, e.parse::<u64>().ok()?)))
            {
                sum.total += total;
                sum.errors += errors;
            }
        }
        sum
    }

    /// Answers another node's [`COUNTS_SUBJECT`] question with this node's counters of the
    /// account it came in (`<total> <errors>`), straight to that node's forward inbox.
    pub(super) fn answer_api_counts(&self, msg: &InternalMsg) {
        let Some(reply) = msg.reply.as_deref() else {
            return;
        };
        let Some(node) = super::remote::inbox_node(reply) else {
            return;
        };
        let c = self.api_counts.get(&msg.account);
        let text = format!("{} {}", c.total, c.errors);
        self.bus.send_to_node(
            jetraft_raft::NodeId(node),
            &Msg::new(reply, text.as_bytes()).in_account(&msg.account),
        );
    }
}

/// Whether an API answer is an error (has a top-level `error`).
fn is_error(json: &str) -> bool {
    #[derive(Deserialize)]
    struct Probe {
        error: Option<IgnoredAny>,
    }
    serde_json::from_str::<Probe>(json).is_ok_and(|p| p.error.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_answers_and_errors_per_account() {
        let c = ApiCounters::default();
        c.count("A", r#"{"type":"x","error":{"code":400,"err_code":10113}}"#);
        c.count("A", r#"{"type":"x","config":{"description":"\"error\":"}}"#);
        c.count("B", r#"{"type":"x"}"#);
        assert_eq!(
            c.get("A"),
            ApiCounts {
                total: 2,
                errors: 1
            }
        );
        assert_eq!(
            c.get("B"),
            ApiCounts {
                total: 1,
                errors: 0
            }
        );
        assert_eq!(c.get("C"), ApiCounts::default());
    }
}
