//! Each account's `$JS.API` counters (account info `api.total` / `api.errors`, `/jsz` account
//! details), counted as nats-server counts them: once per answer sent to a client, after the
//! answer was written (account info does not count itself), an error answer also in `errors`.
//!
//! A request is counted by the node that sends its answer to the client: the owner of a
//! forwarded request, or the node that relays an answer it asked another node for (answers
//! between nodes, to a forward inbox, are not counted). Account info shows the answering
//! node's counters for the account: on a cluster, the requests the meta leader answered.

use std::collections::HashMap;

use parking_lot::Mutex;
use serde::Deserialize;
use serde::de::IgnoredAny;

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
