//! Stream capture and publishing: a message on a stream's subject becomes an `Append` entry of
//! the stream's Raft group, proposed by its leader; the PubAck goes out after commit.
//!
//! Every node captures publishes made through it (captures are local internal subscriptions),
//! so each publish is captured exactly once cluster-wide, then proposed locally or forwarded to
//! the stream leader.

use std::sync::Arc;
use std::time::Duration;

use jetraft_raft::{GroupId, NodeId, RaftError};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{Capture, JetStream, next_msg, now_ns};
use crate::internal::{InternalMsg, InternalSub};
use crate::jetstream::api::validate::subjects_overlap;
use crate::jetstream::stream::command;

/// How long a publish waits for a stream group without a known leader.
const LEADER_WAIT: Duration = Duration::from_secs(3);

impl JetStream {
    /// Makes the capture subscriptions match the meta state: one set per stream, recreated when
    /// a stream's uid or subjects change, dropped when the stream is gone.
    pub(super) fn sync_captures(self: &Arc<Self>, streams: &[(String, u64, Vec<String>)]) {
        let mut caps = self.captures.lock();
        caps.retain(|name, cap| {
            let keep = streams.iter().any(|(n, uid, subjects)| {
                n == name && *uid == cap.uid && *subjects == cap.subjects
            });
            if !keep {
                cap.cancel.cancel();
            }
            keep
        });
        for (name, uid, subjects) in streams {
            if caps.contains_key(name) {
                continue;
            }
            let cancel = self.cancel.child_token();
            for subject in subjects {
                match self.server.internal.subscribe(subject) {
                    Ok(sub) => {
                        let js = self.clone();
                        let name = name.clone();
                        let cancel = cancel.clone();
                        self.server
                            .tasks
                            .spawn(async move { js.capture_loop(name, sub, cancel).await });
                    }
                    Err(e) => warn!(stream = %name, subject, error = %e, "capture not set up"),
                }
            }
            caps.insert(
                name.clone(),
                Capture {
                    uid: *uid,
                    subjects: subjects.clone(),
                    cancel,
                },
            );
        }
    }

    async fn capture_loop(
        self: Arc<Self>,
        name: String,
        mut sub: InternalSub,
        cancel: CancellationToken,
    ) {
        loop {
            let Some(msg) = next_msg(&mut sub, &cancel).await else {
                break;
            };
            // One at a time: a connection's publishes are logged in the order they came.
            self.on_captured(Some(name.clone()), msg, 0).await;
        }
    }

    /// The stream capturing `subject`, per the meta state.
    fn stream_for_subject(&self, subject: &str) -> Option<(String, Vec<u64>)> {
        self.meta.read(|m| {
            m.streams()
                .find(|s| s.subjects.iter().any(|f| subjects_overlap(f, subject)))
                .map(|s| (s.name.clone(), s.replicas.clone()))
        })
    }

    /// A publish captured here (`stream` known) or forwarded here (`stream` looked up). Returns
    /// once the append is queued (or forwarded); the PubAck goes out from a task of its own.
    pub(super) async fn on_captured(
        self: &Arc<Self>,
        stream: Option<String>,
        msg: InternalMsg,
        hops: u32,
    ) {
        let Some((name, replicas)) = (match stream {
            Some(name) => self
                .meta
                .read(|m| m.stream(&name).map(|s| s.replicas.clone()))
                .map(|r| (name, r)),
            None => self.stream_for_subject(&msg.subject),
        }) else {
            return;
        };
        let Some(local) = self.local_stream(&name) else {
            // Not a replica here: the first replica knows (or finds) the leader.
            if let Some(first) = replicas.first() {
                self.forward_to(NodeId(*first), hops, &msg);
            }
            return;
        };
        let group = local.group();
        match self.registry.leader(group).ok().and_then(|l| l.leader) {
            Some(l) if l == self.node => self.submit_append(group, msg, hops).await,
            Some(l) => {
                self.forward_to(l, hops, &msg);
            }
            None => {
                // An election is running: wait for it off the capture path.
                let js = self.clone();
                tokio::spawn(async move {
                    match js.wait_group_leader(group, LEADER_WAIT).await {
                        Some(l) if l == js.node => js.submit_append(group, msg, hops).await,
                        Some(l) => {
                            js.forward_to(l, hops, &msg);
                        }
                        None => debug!(stream = %name, "publish dropped: stream has no leader"),
                    }
                });
            }
        }
    }

    async fn submit_append(self: &Arc<Self>, group: GroupId, msg: InternalMsg, hops: u32) {
        let cmd = command::append(
            &msg.subject,
            msg.hdrs.clone().unwrap_or_default(),
            msg.payload.clone(),
            now_ns(),
        );
        let pending = match self.registry.submit(group, cmd).await {
            Ok(p) => p,
            Err(e) => {
                debug!(group = %group, error = %e, "publish not queued");
                return;
            }
        };
        let js = self.clone();
        tokio::spawn(async move {
            match pending.await {
                Ok(ack) => {
                    if let Some(reply) = &msg.reply
                        && !ack.is_empty()
                    {
                        js.server.publish(reply, None, None, &ack);
                    }
                }
                Err(RaftError::NotLeader {
                    leader: Some(l), ..
                }) => {
                    js.forward_to(l, hops, &msg);
                }
                // Outcome unknown (timeout, leadership lost mid-way): no answer; the client
                // retries and dedup (Nats-Msg-Id) makes the retry safe.
                Err(e) => debug!(group = %group, error = %e, "publish not acknowledged"),
            }
        });
    }
}
