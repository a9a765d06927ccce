//! Stream backups through raw `$JS.API.STREAM.SNAPSHOT` / `RESTORE` requests, as the `nats`
//! CLI (jsm.go) makes them, and reading a stream back message by message to compare.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{Value, json};

use super::within;

/// Bound on a whole backup or restore in these tests.
pub const TRANSFER: Duration = Duration::from_secs(60);

/// A backup as a client receives it.
#[derive(Debug, Clone)]
pub struct Backup {
    /// The snapshot response (`config`, `state`) or its error.
    pub response: Value,
    /// The chunks' bytes, in order.
    pub data: Vec<u8>,
    /// Chunks received.
    pub chunks: usize,
    /// The end message's status header (`None` when it had no headers).
    pub status: Option<String>,
    /// The end message's description header.
    pub description: Option<String>,
}

/// How the receiving client acknowledges chunks.
#[derive(Debug, Clone, Copy)]
pub enum Acks {
    /// At once.
    Prompt,
    /// After this delay each.
    Slow(Duration),
    /// Never.
    Never,
}

/// Takes a snapshot of `stream` with the request `body` (its `deliver_subject` is filled in).
/// The receiver subscribes before the request (jsm.go subscribes after the response; the
/// server waits for interest either way).
pub async fn snapshot(nc: &async_nats::Client, stream: &str, body: Value, acks: Acks) -> Backup {
    let inbox = nc.new_inbox();
    let mut sub = within(TRANSFER, "subscribe", nc.subscribe(inbox.clone()))
        .await
        .expect("subscribe");
    let mut body = body;
    body["deliver_subject"] = json!(inbox);
    let subject = format!("$JS.API.STREAM.SNAPSHOT.{stream}");
    let answer = within(
        TRANSFER,
        "snapshot request",
        nc.request(subject, Bytes::from(body.to_string())),
    )
    .await
    .unwrap_or_else(|e| panic!("snapshot of {stream} not answered: {e}"));
    let response: Value = serde_json::from_slice(&answer.payload).expect("JSON answer");
    let mut backup = Backup {
        response,
        data: Vec::new(),
        chunks: 0,
        status: None,
        description: None,
    };
    if !backup.response["error"].is_null() {
        return backup;
    }
    within(TRANSFER, "backup chunks", async {
        while let Some(m) = sub.next().await {
            if m.payload.is_empty() {
                backup.status = m.status.map(|s| s.as_u16().to_string());
                backup.description = m.description.clone();
                break;
            }
            backup.chunks += 1;
            backup.data.extend_from_slice(&m.payload);
            if let Some(reply) = m.reply {
                match acks {
                    Acks::Prompt => {}
                    Acks::Slow(d) => tokio::time::sleep(d).await,
                    Acks::Never => continue,
                }
                nc.publish(reply, Bytes::new()).await.expect("ack");
            }
        }
    })
    .await;
    backup
}

/// Restores `backup` as `stream` (its config and state from the snapshot response), sending
/// `chunk`-byte requests; returns the answer to the restore request and the final answer (or
/// the first error answer to a chunk).
pub async fn restore(
    nc: &async_nats::Client,
    stream: &str,
    backup: &Backup,
    chunk: usize,
) -> (Value, Option<Value>) {
    let req = json!({"config": backup.response["config"], "state": backup.response["state"]});
    let subject = format!("$JS.API.STREAM.RESTORE.{stream}");
    let answer = within(
        TRANSFER,
        "restore request",
        nc.request(subject, Bytes::from(req.to_string())),
    )
    .await
    .expect("restore answered");
    let answer: Value = serde_json::from_slice(&answer.payload).expect("JSON answer");
    let deliver = answer["deliver_subject"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if deliver.is_empty() {
        return (answer, None);
    }
    for piece in backup.data.chunks(chunk) {
        let ack = within(
            TRANSFER,
            "chunk ack",
            nc.request(deliver.clone(), Bytes::copy_from_slice(piece)),
        )
        .await
        .expect("chunk acknowledged");
        if !ack.payload.is_empty() {
            return (answer, serde_json::from_slice(&ack.payload).ok());
        }
    }
    let done = within(TRANSFER, "final answer", nc.request(deliver, Bytes::new()))
        .await
        .expect("final answer");
    (answer, serde_json::from_slice(&done.payload).ok())
}

/// One stored message as `MSG.GET` returns it: seq, subject, headers (base64), data, time.
pub type StoredMessage = (u64, String, String, String, String);

/// Every message of `stream` from `first` to `last` (absent ones skipped), by `MSG.GET`.
pub async fn messages(
    nc: &async_nats::Client,
    stream: &str,
    first: u64,
    last: u64,
) -> Vec<StoredMessage> {
    let subject = format!("$JS.API.STREAM.MSG.GET.{stream}");
    let mut out = Vec::new();
    for seq in first..=last {
        let got = within(
            TRANSFER,
            "msg get",
            nc.request(
                subject.clone(),
                Bytes::from(json!({"seq": seq}).to_string()),
            ),
        )
        .await
        .expect("msg get answered");
        let v: Value = serde_json::from_slice(&got.payload).expect("JSON");
        if v["error"]["err_code"] == 10037 {
            continue;
        }
        let m = &v["message"];
        assert_eq!(m["seq"], seq, "{v}");
        let text = |k: &str| m[k].as_str().unwrap_or_default().to_string();
        out.push((
            seq,
            text("subject"),
            text("hdrs"),
            text("data"),
            text("time"),
        ));
    }
    out
}
