//! Encoding stream commands for proposal (the leader side of [`super::StreamStateMachine`]).

use bytes::Bytes;
use jetraft_proto::stream::{
    Append, AppendBatch, DeleteMsg, Expire, Purge, StreamCommand, UpdateConfig, stream_command::Cmd,
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

/// One publish of an [`append_batch`]: subject, header block (empty when none), payload.
pub type Publish<'a> = (&'a str, Bytes, Bytes);

/// An `AppendBatch` of publishes received together, all stamped with the leader's receive time.
pub fn append_batch<'a>(
    publishes: impl IntoIterator<Item = Publish<'a>>,
    timestamp_ns: u64,
) -> Bytes {
    batch_of(publishes, timestamp_ns, String::new())
}

/// An `AppendBatch` holding one atomic batch (`Nats-Batch-Id` `batch_id`): its publishes are
/// checked together at apply and stored all or none.
pub fn atomic_batch<'a>(
    publishes: impl IntoIterator<Item = Publish<'a>>,
    timestamp_ns: u64,
    batch_id: &str,
) -> Bytes {
    batch_of(publishes, timestamp_ns, batch_id.to_string())
}

fn batch_of<'a>(
    publishes: impl IntoIterator<Item = Publish<'a>>,
    timestamp_ns: u64,
    atomic_batch_id: String,
) -> Bytes {
    let appends = publishes
        .into_iter()
        .map(|(subject, headers, payload)| Append {
            subject: subject.to_string(),
            headers,
            payload,
            timestamp_ns,
            ..Append::default()
        })
        .collect();
    encode(Cmd::AppendBatch(AppendBatch {
        appends,
        atomic_batch_id,
    }))
}

/// Appends one publish's answer (PubAck JSON, or empty when it has none) to the answer of an
/// `AppendBatch`, prefixed with its length as a big-endian `u32`.
pub fn push_answer(out: &mut Vec<u8>, answer: &[u8]) {
    push_answer_with(out, |out| out.extend_from_slice(answer));
}

/// [`push_answer`] for an answer written into `out` by `write` (no copy in between).
pub fn push_answer_with(out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    write(out);
    let len = u32::try_from(out.len() - at - 4).unwrap_or(u32::MAX);
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

/// Splits an `AppendBatch` answer made by [`push_answer`]; stops at a truncated frame.
pub fn split_answers(framed: &Bytes) -> Vec<Bytes> {
    let mut answers = Vec::new();
    let mut at = 0;
    while let Some(len) = framed.get(at..at + 4) {
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let Some(end) = (at + 4).checked_add(len).filter(|e| *e <= framed.len()) else {
            break;
        };
        answers.push(framed.slice(at + 4..end));
        at = end;
    }
    answers
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_answers_split_back_into_the_framed_answers() {
        let answers = vec![
            r#"{"stream":"S","seq":1}"#.to_string(),
            String::new(),
            r#"{"stream":"S","seq":2}"#.to_string(),
        ];
        let mut framed = Vec::new();
        for a in &answers[..2] {
            push_answer(&mut framed, a.as_bytes());
        }
        push_answer_with(&mut framed, |out| {
            out.extend_from_slice(answers[2].as_bytes())
        });
        let framed = Bytes::from(framed);
        let split: Vec<String> = split_answers(&framed)
            .iter()
            .map(|b| String::from_utf8(b.to_vec()).unwrap())
            .collect();
        assert_eq!(split, answers);
        assert!(split_answers(&Bytes::new()).is_empty());
        // A truncated frame ends the list instead of reading past the end.
        let cut = framed.slice(..framed.len() - 3);
        assert_eq!(split_answers(&cut).len(), 2);
    }

    #[test]
    fn an_append_batch_written_before_atomic_batches_decodes_as_an_ordinary_batch() {
        // StreamCommand { append_batch: AppendBatch { appends: [Append { subject: "a" }] } } as
        // written before `atomic_batch_id` existed.
        let old = [0x32, 0x05, 0x0a, 0x03, 0x0a, 0x01, b'a'];
        let Some(Cmd::AppendBatch(b)) = StreamCommand::decode(&old[..]).unwrap().cmd else {
            panic!("not a batch");
        };
        assert_eq!(b.appends[0].subject, "a");
        assert!(b.atomic_batch_id.is_empty());
        let Some(Cmd::AppendBatch(b)) =
            StreamCommand::decode(atomic_batch([("a", Bytes::new(), Bytes::new())], 1, "id"))
                .unwrap()
                .cmd
        else {
            panic!("not a batch");
        };
        assert_eq!(b.atomic_batch_id, "id");
    }

    #[test]
    fn a_batch_decodes_into_appends_in_order_with_one_timestamp() {
        let bytes = append_batch(
            [
                ("a", Bytes::new(), Bytes::from_static(b"1")),
                (
                    "b",
                    Bytes::from_static(b"NATS/1.0\r\n\r\n"),
                    Bytes::from_static(b"2"),
                ),
            ],
            7,
        );
        let Some(Cmd::AppendBatch(b)) = StreamCommand::decode(bytes).unwrap().cmd else {
            panic!("not a batch");
        };
        let subjects: Vec<_> = b.appends.iter().map(|a| a.subject.as_str()).collect();
        assert_eq!(subjects, ["a", "b"]);
        assert!(
            b.appends
                .iter()
                .all(|a| a.timestamp_ns == 7 && a.origin_seq == 0)
        );
        assert_eq!(&b.appends[1].payload[..], b"2");
    }
}
