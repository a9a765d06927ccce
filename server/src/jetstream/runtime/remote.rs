//! Asking another node for an API answer this node needs (STREAM.LIST of streams hosted
//! elsewhere).
//!
//! The request is forwarded like a client's (to a replica, which hands it to the stream leader),
//! with a reply subject in this node's forward inbox: `$JSC.F.<node>.0.$JSC.R.<token>`. The owner
//! sends answers to such a subject straight to that node over the cluster link (the subject has no
//! routed interest), and the forward loop hands them to the waiting request by token.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use jetraft_raft::NodeId;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::JetStream;
use crate::bus::internal::InternalMsg;

/// Prefix of the original subject of an answer to [`JetStream::ask`].
const ANSWER_PREFIX: &str = "$JSC.R.";

/// The node whose forward inbox `reply` is, when it is one (`$JSC.F.<node>.<hops>.<subject>`).
pub(super) fn inbox_node(reply: &str) -> Option<u64> {
    reply
        .strip_prefix("$JSC.F.")?
        .split('.')
        .next()?
        .parse()
        .ok()
}

impl JetStream {
    /// Sends the API request `<op>.<stream>` about the stream with `key` (in its account, under
    /// the name its clients know it by) towards `node` and waits at most `bound` for the answer.
    pub(super) async fn ask_stream(
        &self,
        node: u64,
        op: &str,
        key: &str,
        payload: Bytes,
        bound: Duration,
    ) -> Option<Bytes> {
        let msg = InternalMsg {
            subject: format!(
                "{}{op}.{}",
                crate::jetstream::op::API_PREFIX,
                crate::jetstream::account::stream_name(key)
            ),
            reply: None,
            hdrs: None,
            payload,
            account: std::sync::Arc::from(crate::jetstream::account::stream_account(key)),
        };
        self.ask_msg(node, &msg, bound).await.flatten()
    }

    /// [`Self::ask_stream`] for a request of the global account (`subject`, with a body).
    pub(super) async fn ask_with(
        &self,
        node: u64,
        subject: &str,
        payload: Bytes,
        bound: Duration,
    ) -> Option<Bytes> {
        let msg = InternalMsg::global(subject.to_string(), None, None, payload);
        self.ask_msg(node, &msg, bound).await.flatten()
    }

    /// Sends `msg` (its subject, headers and payload; its reply is replaced by one in this
    /// node's inbox) towards `node` and waits at most `bound` for the answer. `None` when it
    /// could not be sent, `Some(None)` when no answer came in time.
    pub(super) async fn ask_msg(
        &self,
        node: u64,
        msg: &InternalMsg,
        bound: Duration,
    ) -> Option<Option<Bytes>> {
        let (token, rx) = self.pending.register();
        let ask = InternalMsg {
            subject: msg.subject.clone(),
            reply: Some(format!("$JSC.F.{}.0.{ANSWER_PREFIX}{token}", self.node.0)),
            hdrs: msg.hdrs.clone(),
            payload: msg.payload.clone(),
            account: msg.account.clone(),
        };
        let answer = if self.forward_to(NodeId(node), 0, &ask) {
            Some(
                tokio::time::timeout(bound, rx)
                    .await
                    .ok()
                    .and_then(Result::ok),
            )
        } else {
            None
        };
        self.pending.forget(token);
        answer
    }
}

/// Whether `subject` is an answer to a request this node forwarded (see `deliver_answer`).
pub(super) fn is_answer(subject: &str) -> bool {
    subject.starts_with(ANSWER_PREFIX)
}

impl JetStream {
    /// Hands an answer that came back to this node's inbox to its waiting request; false if
    /// `subject` is not such an answer.
    pub(super) fn deliver_answer(&self, subject: &str, payload: Bytes) -> bool {
        let Some(token) = subject.strip_prefix(ANSWER_PREFIX) else {
            return false;
        };
        if let Ok(token) = token.parse::<u64>() {
            self.pending.resolve(token, payload);
        }
        true
    }
}

/// Requests this node sent to other nodes and is waiting on, by token (the token is the last
/// field of the reply subject the answer comes back on).
#[derive(Debug, Default)]
pub(super) struct Pending {
    /// Next token.
    next: AtomicU64,
    /// The waiting requests' answer channels.
    waiting: Mutex<HashMap<u64, oneshot::Sender<Bytes>>>,
}

impl Pending {
    /// A new token and the receiver its answer arrives on.
    fn register(&self) -> (u64, oneshot::Receiver<Bytes>) {
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().insert(token, tx);
        (token, rx)
    }

    /// Stops waiting for `token` (answered or timed out).
    fn forget(&self, token: u64) {
        self.waiting.lock().remove(&token);
    }

    /// Hands `payload` to the request waiting on `token`, if any.
    fn resolve(&self, token: u64, payload: Bytes) {
        if let Some(tx) = self.waiting.lock().remove(&token) {
            let _ = tx.send(payload);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inbox_replies_name_their_node() {
        assert_eq!(inbox_node("$JSC.F.42.0.$JSC.R.7"), Some(42));
        assert_eq!(inbox_node("_INBOX.abc"), None);
        assert_eq!(inbox_node("$JSC.F.x.0.y"), None);
    }
}
