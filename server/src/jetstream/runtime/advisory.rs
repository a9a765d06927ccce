//! JetStream advisories: the JSON events nats-server publishes under `$JS.EVENT.ADVISORY.>` when
//! streams and consumers are created, updated or deleted, when a stream backup or restore
//! starts and completes (the node that does it: the stream leader, the meta leader), when a stream gets a new leader, when
//! a consumer is paused, and when a delivery is NAKed, terminated or exceeds `max_deliver`.
//!
//! Subjects, `type` names and fields follow nats-server's `jetstream_events.go`. Who sends what,
//! so that every event is published once in a cluster:
//! - stream created/updated/deleted: the node that answers the API request (the meta leader);
//! - consumer created/deleted/paused and the delivery events: the stream leader, which runs the
//!   consumer;
//! - leader elected: the new stream leader, once its barrier committed (clustered only, as
//!   nats-server sends it only for replicated groups), for the stream and each of its
//!   consumers (a consumer's leader is its stream's leader here).

use rand::Rng;
use serde::Serialize;

use super::{JetStream, now_ns};
use crate::bus::Msg;
use crate::jetstream::api::types::{PeerInfo, go_time, to_go_json};

/// The subject prefix of every advisory.
const PREFIX: &str = "$JS.EVENT.ADVISORY.";

/// A stream or consumer action (`action` of the `*_action` advisories).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Created.
    Create,
    /// Configuration changed.
    Modify,
    /// Deleted.
    Delete,
}

impl Action {
    fn name(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Modify => "modify",
            Self::Delete => "delete",
        }
    }

    fn subject_token(self) -> &'static str {
        match self {
            Self::Create => "CREATED",
            Self::Modify => "UPDATED",
            Self::Delete => "DELETED",
        }
    }
}

/// One advisory; fields not set are left out of the JSON (as nats-server's `omitempty` or
/// because the advisory type has no such field).
#[derive(Debug, Serialize)]
pub(crate) struct Advisory<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    id: String,
    timestamp: String,
    /// The account the stream is in (the advisory is published there).
    #[serde(skip)]
    account: &'a str,
    stream: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    consumer: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    consumer_seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deliveries: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    leader: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replicas: Option<Vec<PeerInfo>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    paused: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pause_until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    domain: Option<String>,
    /// Stream backups: the state backed up (`snapshot_create`).
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<serde_json::Value>,
    /// Stream backups: when the transfer started and ended (`*_complete`).
    #[serde(skip_serializing_if = "Option::is_none")]
    start: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    end: Option<String>,
    /// Stream backups: bytes received (`restore_complete`).
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
    /// Stream backups: why a snapshot failed (`snapshot_complete`).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// Priority groups: the group pinned or unpinned.
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<&'a str>,
    /// Priority groups: the new pin id (`consumer_group_pinned`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pinned_id: Option<&'a str>,
    /// Atomic batches: the batch id (`stream_batch_abandoned`).
    #[serde(skip_serializing_if = "Option::is_none")]
    batch: Option<&'a str>,
}

impl<'a> Advisory<'a> {
    /// An advisory about the stream with key `stream` (named, and published, in its account).
    fn new(kind: &'static str, stream: &'a str) -> Self {
        Self {
            kind,
            id: random_id(),
            timestamp: go_time::format(now_ns()),
            account: crate::jetstream::account::stream_account(stream),
            stream: crate::jetstream::account::stream_name(stream),
            consumer: None,
            consumer_seq: None,
            stream_seq: None,
            deliveries: None,
            reason: None,
            action: None,
            leader: None,
            replicas: None,
            paused: None,
            pause_until: None,
            domain: None,
            state: None,
            start: None,
            end: None,
            bytes: None,
            error: None,
            group: None,
            pinned_id: None,
            batch: None,
        }
    }

    fn consumer(kind: &'static str, stream: &'a str, consumer: &'a str) -> Self {
        Self {
            consumer: Some(consumer),
            ..Self::new(kind, stream)
        }
    }

    /// Publishes the advisory on `$JS.EVENT.ADVISORY.<event>.<stream>[.<consumer>]`.
    fn send(mut self, js: &JetStream, event: &str) {
        self.domain = js.identity.domain.clone();
        let subject = match self.consumer {
            Some(c) => format!("{PREFIX}{event}.{}.{c}", self.stream),
            None => format!("{PREFIX}{event}.{}", self.stream),
        };
        let json = to_go_json(&self);
        js.bus
            .publish(&Msg::new(&subject, json.as_bytes()).in_account(self.account));
    }
}

/// An advisory id: 22 random alphanumerics, as nats-server's NUIDs (also the unique token of a
/// backup's ack and restore subjects).
pub(crate) fn random_id() -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut rng = rand::rng();
    (0..22)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

impl JetStream {
    /// `STREAM.SNAPSHOT_CREATE.<stream>` (`snapshot_create`): a backup started, of `state`.
    pub(crate) fn advise_snapshot_create(&self, stream: &str, state: serde_json::Value) {
        let mut a = Advisory::new("io.nats.jetstream.advisory.v1.snapshot_create", stream);
        a.state = Some(state);
        a.send(self, "STREAM.SNAPSHOT_CREATE");
    }

    /// `STREAM.SNAPSHOT_COMPLETE.<stream>` (`snapshot_complete`), with the failure if any.
    pub(crate) fn advise_snapshot_complete(
        &self,
        stream: &str,
        start_ns: u64,
        error: Option<&str>,
    ) {
        let mut a = Advisory::new("io.nats.jetstream.advisory.v1.snapshot_complete", stream);
        a.start = Some(go_time::format(start_ns));
        a.end = Some(go_time::format(now_ns()));
        a.error = error.map(str::to_string);
        a.send(self, "STREAM.SNAPSHOT_COMPLETE");
    }

    /// `STREAM.RESTORE_CREATE.<stream>` (`restore_create`): a restore started.
    pub(crate) fn advise_restore_create(&self, stream: &str) {
        Advisory::new("io.nats.jetstream.advisory.v1.restore_create", stream)
            .send(self, "STREAM.RESTORE_CREATE");
    }

    /// `STREAM.RESTORE_COMPLETE.<stream>` (`restore_complete`) after `bytes` were received.
    pub(crate) fn advise_restore_complete(&self, stream: &str, start_ns: u64, bytes: u64) {
        let mut a = Advisory::new("io.nats.jetstream.advisory.v1.restore_complete", stream);
        a.start = Some(go_time::format(start_ns));
        a.end = Some(go_time::format(now_ns()));
        a.bytes = Some(bytes);
        a.send(self, "STREAM.RESTORE_COMPLETE");
    }

    /// `STREAM.CREATED|UPDATED|DELETED.<stream>` (`stream_action`).
    pub(crate) fn advise_stream(&self, stream: &str, action: Action) {
        let mut a = Advisory::new("io.nats.jetstream.advisory.v1.stream_action", stream);
        a.action = Some(action.name());
        a.send(self, &format!("STREAM.{}", action.subject_token()));
    }

    /// `CONSUMER.CREATED|DELETED.<stream>.<consumer>` (`consumer_action`; nats-server sends
    /// no advisory for a consumer update).
    pub(crate) fn advise_consumer(&self, stream: &str, consumer: &str, action: Action) {
        let mut a = Advisory::consumer(
            "io.nats.jetstream.advisory.v1.consumer_action",
            stream,
            consumer,
        );
        a.action = Some(action.name());
        a.send(self, &format!("CONSUMER.{}", action.subject_token()));
    }

    /// `CONSUMER.PAUSE.<stream>.<consumer>`: paused until `until_ns`, or resumed (0).
    pub(crate) fn advise_consumer_pause(&self, stream: &str, consumer: &str, until_ns: u64) {
        let mut a = Advisory::consumer(
            "io.nats.jetstream.advisory.v1.consumer_pause",
            stream,
            consumer,
        );
        a.paused = Some(until_ns > 0);
        a.pause_until = (until_ns > 0).then(|| go_time::format(until_ns));
        a.send(self, "CONSUMER.PAUSE");
    }

    /// `STREAM.LEADER_ELECTED.<stream>` and `CONSUMER.LEADER_ELECTED.<stream>.<c>` for each of
    /// `consumers`: this node now leads the stream's group.
    pub(crate) fn advise_leader_elected(
        &self,
        stream: &str,
        consumers: &[String],
        replicas: Vec<PeerInfo>,
    ) {
        let leader = self.info.server_name.clone();
        for c in consumers {
            let mut a = Advisory::consumer(
                "io.nats.jetstream.advisory.v1.consumer_leader_elected",
                stream,
                c,
            );
            a.leader = Some(leader.clone());
            a.replicas = Some(replicas.clone());
            a.send(self, "CONSUMER.LEADER_ELECTED");
        }
        let mut a = Advisory::new(
            "io.nats.jetstream.advisory.v1.stream_leader_elected",
            stream,
        );
        a.leader = Some(leader);
        a.replicas = Some(replicas);
        a.send(self, "STREAM.LEADER_ELECTED");
    }

    /// `STREAM.QUORUM_LOST.<stream>` (`stream_quorum_lost`) and, for each consumer,
    /// `CONSUMER.QUORUM_LOST.<stream>.<consumer>` (`consumer_quorum_lost`): the group stalled
    /// without a quorum (see `quorum`).
    pub(crate) fn advise_quorum_lost(
        &self,
        stream: &str,
        consumers: &[String],
        replicas: Vec<PeerInfo>,
    ) {
        for c in consumers {
            let mut a = Advisory::consumer(
                "io.nats.jetstream.advisory.v1.consumer_quorum_lost",
                stream,
                c,
            );
            a.replicas = Some(replicas.clone());
            a.send(self, "CONSUMER.QUORUM_LOST");
        }
        let mut a = Advisory::new("io.nats.jetstream.advisory.v1.stream_quorum_lost", stream);
        a.replicas = Some(replicas);
        a.send(self, "STREAM.QUORUM_LOST");
    }

    /// `CONSUMER.MAX_DELIVERIES.<stream>.<consumer>` (`max_deliver`).
    pub(crate) fn advise_max_deliveries(
        &self,
        stream: &str,
        consumer: &str,
        stream_seq: u64,
        deliveries: u64,
    ) {
        let mut a = Advisory::consumer(
            "io.nats.jetstream.advisory.v1.max_deliver",
            stream,
            consumer,
        );
        a.stream_seq = Some(stream_seq);
        a.deliveries = Some(deliveries);
        a.send(self, "CONSUMER.MAX_DELIVERIES");
    }

    /// `CONSUMER.MSG_TERMINATED.<stream>.<consumer>` (`terminated`).
    pub(crate) fn advise_terminated(
        &self,
        stream: &str,
        consumer: &str,
        seqs: (u64, u64),
        deliveries: u64,
        reason: &str,
    ) {
        let mut a =
            Advisory::consumer("io.nats.jetstream.advisory.v1.terminated", stream, consumer);
        (a.stream_seq, a.consumer_seq) = (Some(seqs.0), Some(seqs.1));
        a.deliveries = Some(deliveries);
        a.reason = Some(reason);
        a.send(self, "CONSUMER.MSG_TERMINATED");
    }

    /// `CONSUMER.PINNED.<stream>.<consumer>` (`consumer_group_pinned`): `group` was pinned to
    /// a new client.
    pub(crate) fn advise_pinned(&self, stream: &str, consumer: &str, group: &str, id: &str) {
        let mut a = Advisory::consumer(
            "io.nats.jetstream.advisory.v1.consumer_group_pinned",
            stream,
            consumer,
        );
        a.group = Some(group);
        a.pinned_id = Some(id);
        a.send(self, "CONSUMER.PINNED");
    }

    /// `CONSUMER.UNPINNED.<stream>.<consumer>` (`consumer_group_unpinned`): `group` lost its
    /// pin (`admin`: CONSUMER.UNPIN, `timeout`: no request for `priority_timeout`).
    pub(crate) fn advise_unpinned(&self, stream: &str, consumer: &str, group: &str, why: &str) {
        let mut a = Advisory::consumer(
            "io.nats.jetstream.advisory.v1.consumer_group_unpinned",
            stream,
            consumer,
        );
        a.group = Some(group);
        a.reason = Some(why);
        a.send(self, "CONSUMER.UNPINNED");
    }

    /// `STREAM.BATCH_ABANDONED.<stream>` (`stream_batch_abandoned`): the stream leader gave up
    /// an atomic batch (`timeout`, `incomplete`, `large`).
    pub(crate) fn advise_batch_abandoned(&self, stream: &str, batch: &str, reason: &str) {
        let mut a = Advisory::new(
            "io.nats.jetstream.advisory.v1.stream_batch_abandoned",
            stream,
        );
        a.batch = Some(batch);
        a.reason = Some(reason);
        a.send(self, "STREAM.BATCH_ABANDONED");
    }

    /// `CONSUMER.MSG_NAKED.<stream>.<consumer>` (`nak`).
    pub(crate) fn advise_nak(&self, stream: &str, consumer: &str, seqs: (u64, u64), n: u64) {
        let mut a = Advisory::consumer("io.nats.jetstream.advisory.v1.nak", stream, consumer);
        (a.stream_seq, a.consumer_seq) = (Some(seqs.0), Some(seqs.1));
        a.deliveries = Some(n);
        a.send(self, "CONSUMER.MSG_NAKED");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_action_has_nats_servers_fields_only() {
        let mut a = Advisory::new("io.nats.jetstream.advisory.v1.stream_action", "ORDERS");
        a.action = Some(Action::Create.name());
        let v: serde_json::Value = serde_json::from_str(&to_go_json(&a)).unwrap();
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["action", "id", "stream", "timestamp", "type"]); // sorted by serde_json
        assert_eq!(v["action"], "create");
        assert_eq!(v["id"].as_str().unwrap().len(), 22);
    }

    #[test]
    fn pause_and_resume_carry_paused() {
        let mut a = Advisory::consumer("t", "S", "C");
        a.paused = Some(false);
        let v: serde_json::Value = serde_json::from_str(&to_go_json(&a)).unwrap();
        assert_eq!(v["paused"], false);
        assert!(v.get("pause_until").is_none());
        assert_eq!(v["consumer"], "C");
    }
}
