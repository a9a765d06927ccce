//! Encoding stream commands for proposal (the leader side of [`super::StreamStateMachine`]).

use bytes::Bytes;
use jetraft_proto::stream::{
    Append, DeleteMsg, Expire, Purge, StreamCommand, UpdateConfig, stream_command::Cmd,
};
use prost::Message;

use crate::jetstream::api::types::{StreamConfig, to_go_json};

fn encode(cmd: Cmd) -> Bytes {
    Bytes::from(StreamCommand { cmd: Some(cmd) }.encode_to_vec())
}

/// An `Append` of a publish, stamped with the leader's receive time.
pub fn append(subject: &str, headers: Bytes, payload: Bytes, timestamp_ns: u64) -> Bytes {
    encode(Cmd::Append(Append {
        subject: subject.to_string(),
        headers,
        payload,
        timestamp_ns,
        ..Append::default()
    }))
}

/// An `Append` copying origin message `origin_seq` into a mirror (`source_key` empty: stored
/// at that sequence with the origin's time) or a source (the source's key).
pub fn copy(
    subject: &str,
    headers: Bytes,
    payload: Bytes,
    timestamp_ns: u64,
    origin_seq: u64,
    source_key: &str,
) -> Bytes {
    encode(Cmd::Append(Append {
        subject: subject.to_string(),
        headers,
        payload,
        timestamp_ns,
        origin_seq,
        source_key: source_key.to_string(),
    }))
}

/// A `Purge` (`filter` empty = all, `seq`/`keep` 0 = unset).
pub fn purge(filter: &str, seq: u64, keep: u64) -> Bytes {
    encode(Cmd::Purge(Purge {
        filter: filter.to_string(),
        seq,
        keep,
    }))
}

/// A `DeleteMsg`.
pub fn delete_msg(seq: u64, no_erase: bool) -> Bytes {
    encode(Cmd::DeleteMsg(DeleteMsg { seq, no_erase }))
}

/// An `UpdateConfig` with an already validated, normalised config.
pub fn update_config(config: &StreamConfig, timestamp_ns: u64) -> Bytes {
    encode(Cmd::UpdateConfig(UpdateConfig {
        config_json: Bytes::from(to_go_json(config)),
        timestamp_ns,
    }))
}

/// An `Expire` as of the leader's clock.
pub fn expire(now_ns: u64) -> Bytes {
    encode(Cmd::Expire(Expire { now_ns }))
}

/// A `ConsumerCreate` (create or update) with a validated, normalised config.
pub fn consumer_create(
    name: &str,
    config: &crate::jetstream::api::types::consumer::ConsumerConfig,
    created_ns: u64,
) -> Bytes {
    encode(Cmd::ConsumerCreate(jetraft_proto::stream::ConsumerCreate {
        name: name.to_string(),
        config_json: Bytes::from(to_go_json(config)),
        created_ns,
    }))
}

/// A `ConsumerDelete`.
pub fn consumer_delete(name: &str) -> Bytes {
    encode(Cmd::ConsumerDelete(jetraft_proto::stream::ConsumerDelete {
        name: name.to_string(),
    }))
}

/// A `ConsumerProgress` batch.
pub fn consumer_progress(batch: jetraft_proto::stream::ConsumerProgress) -> Bytes {
    encode(Cmd::ConsumerProgress(batch))
}
