//! Answering a stream create, update or delete only once the client's node routes by it.
//!
//! Every node binds a stream's subjects (its capture subscriptions) when its own meta replica
//! applies the stream's assignment. A create answered by the meta leader could reach the client
//! before the client's node had applied it, and a publish the client sent right after the answer
//! then found no stream there: "no responders" (or, after a delete, a publish captured for a
//! stream that is gone). nats-server has no such window: its servers propagate interest over the
//! route before the answer travels the same route.
//!
//! So the client's node (the one the request arrived at, `hops == 0`) asks the meta leader
//! itself, with a reply in its own forward inbox, and relays the answer once its captures match
//! it: the stream captured with the answered subjects, or no longer captured after a delete.
//! The wait is bounded ([`IN_FORCE_WAIT`]); after it the answer goes out as it is.

use std::time::Duration;

use jetraft_raft::NodeId;
use tracing::debug;

use super::JetStream;
use crate::bus::internal::InternalMsg;
use crate::jetstream::op::ApiOp;

/// How long the client's node waits for the meta leader's answer to a relayed request (the
/// leader itself waits up to 5 s for a new stream's leader).
const RELAY_WAIT: Duration = Duration::from_secs(10);
/// How long an answer is held back while this node's captures catch up with it.
const IN_FORCE_WAIT: Duration = Duration::from_secs(2);

/// What the client's node must capture before it relays a successful answer.
#[derive(Debug, PartialEq, Eq)]
enum Expect {
    /// The stream, with exactly these subjects.
    Captured(String, Vec<String>),
    /// Nothing for the stream.
    Gone(String),
}

/// Whether the client's node holds the answer to `op` back (stream create, update, delete).
pub(super) fn holds_answer(op: &ApiOp) -> bool {
    matches!(
        op,
        ApiOp::StreamCreate(_) | ApiOp::StreamUpdate(_) | ApiOp::StreamDelete(_)
    )
}

/// What a successful answer to `op` requires; `None` for an error answer (nothing changed) or
/// another operation.
fn expectation(op: &ApiOp, answer: &[u8]) -> Option<Expect> {
    let json: serde_json::Value = serde_json::from_slice(answer).ok()?;
    if !json["error"].is_null() {
        return None;
    }
    match op {
        ApiOp::StreamCreate(name) | ApiOp::StreamUpdate(name) => {
            let subjects = json["config"]["subjects"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            Some(Expect::Captured(name.clone(), subjects))
        }
        ApiOp::StreamDelete(name) => json["success"]
            .as_bool()
            .filter(|ok| *ok)
            .map(|_| Expect::Gone(name.clone())),
        _ => None,
    }
}

impl JetStream {
    /// Whether this node's captures are as `expect` says.
    fn captures_match(routing: &super::reconcile::StreamRouting, expect: &Expect) -> bool {
        let caps = &routing.captured;
        match expect {
            Expect::Captured(name, subjects) => caps.get(name).is_some_and(|c| c == subjects),
            Expect::Gone(name) => !caps.contains_key(name),
        }
    }

    /// Waits (bounded) until this node's captures reflect a successful answer to `op`.
    pub(super) async fn wait_in_force(&self, op: &ApiOp, answer: &[u8]) {
        let Some(expect) = expectation(op, answer) else {
            return;
        };
        let mut routing = self.routing.subscribe();
        let deadline = tokio::time::Instant::now() + IN_FORCE_WAIT;
        // Captures follow the meta state a moment after it changes (the meta task publishes
        // them): look again on every change.
        while !Self::captures_match(&routing.borrow_and_update(), &expect) {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {
                    debug!(?expect, "answer relayed before this node's captures matched it");
                    return;
                }
                changed = routing.changed() => if changed.is_err() { return },
            }
        }
    }

    /// Sends `msg` (a create, update or delete) to the meta leader `leader` and relays its
    /// answer to the client once it is in force here. Returns false when it could not be sent.
    pub(super) async fn relay_in_force(
        &self,
        leader: NodeId,
        op: &ApiOp,
        msg: &InternalMsg,
    ) -> bool {
        let Some(answer) = self.ask_msg(leader.0, msg, RELAY_WAIT).await else {
            return false;
        };
        if let Some(answer) = answer {
            self.wait_in_force(op, &answer).await;
            self.reply(msg, &String::from_utf8_lossy(&answer));
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_successful_create_expects_its_subjects_captured() {
        let op = ApiOp::StreamCreate("S".into());
        let ok = br#"{"type":"io.nats.jetstream.api.v1.stream_create_response","config":{"name":"S","subjects":["a","b.>"]}}"#;
        assert_eq!(
            expectation(&op, ok),
            Some(Expect::Captured("S".into(), vec!["a".into(), "b.>".into()]))
        );
        let mirror = br#"{"config":{"name":"S"}}"#;
        assert_eq!(
            expectation(&op, mirror),
            Some(Expect::Captured("S".into(), vec![]))
        );
    }

    #[test]
    fn an_error_answer_expects_nothing() {
        let op = ApiOp::StreamUpdate("S".into());
        let err = br#"{"error":{"code":404,"err_code":10059,"description":"stream not found"}}"#;
        assert_eq!(expectation(&op, err), None);
        assert_eq!(expectation(&op, b"not json"), None);
    }

    #[test]
    fn a_successful_delete_expects_the_stream_gone() {
        let op = ApiOp::StreamDelete("S".into());
        assert_eq!(
            expectation(&op, br#"{"success":true}"#),
            Some(Expect::Gone("S".into()))
        );
        assert_eq!(expectation(&op, br#"{"success":false}"#), None);
        assert!(holds_answer(&op));
        assert!(!holds_answer(&ApiOp::StreamInfo("S".into())));
    }
}
