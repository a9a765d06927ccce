//! System account requests (`$SYS.REQ.SERVER.*`) as `nats server list` makes them: publish one
//! request with a reply inbox and collect every node's reply.

use std::time::Duration;

use futures_util::StreamExt as _;
use serde_json::Value;

use super::round_trip;

/// Accounts with a system account `SYS` (user `sys`) and an ordinary account `APP` (user
/// `app`); passwords are the user names.
pub const SYS_CONFIG: &str = r#"
accounts {
  SYS: { users: [ { user: sys, password: sys } ] }
  APP: { users: [ { user: app, password: app } ] }
}
system_account: SYS
"#;

/// The one reply of a single server to `body` on `subject` (within `bound`); panics on a
/// status reply or none.
pub async fn one(client: &async_nats::Client, subject: &str, body: &str, bound: Duration) -> Value {
    let r = collect(client, subject, body, 1, bound).await;
    assert!(r.statuses.is_empty(), "{subject}: status {:?}", r.statuses);
    r.json
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{subject}: no reply"))
}

/// What one request got back.
#[derive(Debug, Default)]
pub struct Replies {
    /// The JSON replies, in arrival order.
    pub json: Vec<Value>,
    /// Status codes of status replies (503: no responders).
    pub statuses: Vec<u16>,
}

/// Sends `body` to `subject` with a fresh inbox as reply subject and collects replies until
/// `want` arrived or `bound` passed (with `want` 0, everything within `bound`).
pub async fn collect(
    client: &async_nats::Client,
    subject: &str,
    body: &str,
    want: usize,
    bound: Duration,
) -> Replies {
    let inbox = client.new_inbox();
    let mut sub = client
        .subscribe(inbox.clone())
        .await
        .expect("subscribe inbox");
    round_trip(client).await;
    client
        .publish_with_reply(subject.to_string(), inbox, body.to_string().into())
        .await
        .expect("publish request");
    let deadline = tokio::time::Instant::now() + bound;
    let mut out = Replies::default();
    while want == 0 || out.json.len() + out.statuses.len() < want {
        let Ok(Some(msg)) = tokio::time::timeout_at(deadline, sub.next()).await else {
            break;
        };
        if let Some(status) = msg.status {
            out.statuses.push(status.as_u16());
            continue;
        }
        let v: Value = serde_json::from_slice(&msg.payload)
            .unwrap_or_else(|e| panic!("reply to {subject} is not JSON ({e}): {:?}", msg.payload));
        out.json.push(v);
    }
    out
}
