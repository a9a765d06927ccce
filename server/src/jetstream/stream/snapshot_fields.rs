//! The top-level fields of one protobuf message whose bytes come in chunks ([`SnapshotChunks`]),
//! one field at a time: a stream snapshot is restored from a spooled or lazy payload without
//! holding it whole in memory.
//!
//! A field inside one chunk is a slice of it (no copy); only a field that straddles chunks is
//! copied together, so the memory held is about one chunk plus the largest field. A field
//! claiming more than [`MAX_FIELD_BYTES`] is refused as corrupt rather than buffered.

use bytes::{Bytes, BytesMut};
use jetraft_raft::{SnapshotChunks, StateMachineError};
use prost::encoding::decode_varint;

/// Longest field header: a key (at most 5 bytes for a `u32` field number and wire type) and a
/// length or varint value (at most 10).
const MAX_HEADER: usize = 15;

/// Largest field accepted: above any message a stream may hold (nats-server's `max_payload` is
/// at most 64 MB) and any consumer's or dedup entry's record.
pub(super) const MAX_FIELD_BYTES: usize = 256 << 20;

/// One top-level field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Field {
    /// Its field number.
    pub number: u32,
    /// The whole field as encoded, key included (concatenated, such fields decode as the
    /// message they came from).
    pub raw: Bytes,
    /// The value's bytes: a length-delimited field's contents, or the varint or fixed bytes.
    pub value: Bytes,
}

/// Iterates the top-level fields of the message in `chunks`.
pub(super) struct Fields {
    chunks: SnapshotChunks,
    /// Bytes read and not yet returned as fields.
    buf: Bytes,
    /// The rest of a chunk of which only a part was copied into `buf`.
    carry: Option<Bytes>,
}

impl Fields {
    /// The fields of the message whose bytes `chunks` yields in order.
    pub(super) fn new(chunks: SnapshotChunks) -> Self {
        Self {
            chunks,
            buf: Bytes::new(),
            carry: None,
        }
    }

    fn next_chunk(&mut self) -> Result<Option<Bytes>, StateMachineError> {
        if let Some(c) = self.carry.take() {
            return Ok(Some(c));
        }
        self.chunks.next().transpose()
    }

    /// Makes `buf` hold at least `want` bytes, or everything left when there is less (then
    /// `false`). Copies only across a chunk boundary, and then only up to `want`.
    fn fill(&mut self, want: usize) -> Result<bool, StateMachineError> {
        while self.buf.len() < want {
            let Some(chunk) = self.next_chunk()? else {
                return Ok(false);
            };
            if self.buf.is_empty() {
                self.buf = chunk;
                continue;
            }
            let take = (want - self.buf.len()).min(chunk.len());
            let mut joined = BytesMut::with_capacity(self.buf.len() + take);
            joined.extend_from_slice(&self.buf);
            joined.extend_from_slice(&chunk[..take]);
            self.buf = joined.freeze();
            if take < chunk.len() {
                self.carry = Some(chunk.slice(take..));
            }
        }
        Ok(true)
    }

    fn next_field(&mut self) -> Result<Option<Field>, StateMachineError> {
        self.fill(MAX_HEADER)?;
        if self.buf.is_empty() {
            return Ok(None);
        }
        let mut rest = &self.buf[..];
        let key = decode_varint(&mut rest).map_err(|e| corrupt(format!("field key: {e}")))?;
        let number = u32::try_from(key >> 3)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| corrupt(format!("field number {}", key >> 3)))?;
        let after_key = self.buf.len() - rest.len();
        let (value_at, value_len) = match key & 7 {
            0 => {
                decode_varint(&mut rest).map_err(|e| corrupt(format!("varint: {e}")))?;
                (after_key, self.buf.len() - rest.len() - after_key)
            }
            1 => (after_key, 8),
            2 => {
                let len = decode_varint(&mut rest).map_err(|e| corrupt(format!("length: {e}")))?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|l| *l <= MAX_FIELD_BYTES)
                    .ok_or_else(|| corrupt(format!("field {number} of {len} bytes")))?;
                (self.buf.len() - rest.len(), len)
            }
            5 => (after_key, 4),
            wire => return Err(corrupt(format!("field {number}: wire type {wire}"))),
        };
        let end = value_at + value_len;
        if !self.fill(end)? {
            return Err(corrupt(format!("field {number} cut short")));
        }
        let raw = self.buf.split_to(end);
        let value = raw.slice(value_at..);
        Ok(Some(Field { number, raw, value }))
    }
}

impl Iterator for Fields {
    type Item = Result<Field, StateMachineError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_field() {
            Ok(f) => f.map(Ok),
            Err(e) => {
                // Nothing after an error: drop what is left.
                self.buf = Bytes::new();
                self.carry = None;
                self.chunks = Box::new(std::iter::empty());
                Some(Err(e))
            }
        }
    }
}

fn corrupt(reason: String) -> StateMachineError {
    StateMachineError::CorruptSnapshot { reason }
}

/// Test support: `bytes` as a payload read back in chunks of `size` bytes on every pass (as a
/// spooled snapshot is, in larger ones).
#[cfg(test)]
pub(super) fn chunked_payload(bytes: &Bytes, size: usize) -> jetraft_raft::SnapshotData {
    struct Chunked(Bytes, usize);

    impl jetraft_raft::SnapshotSource for Chunked {
        fn chunks(self: std::sync::Arc<Self>) -> SnapshotChunks {
            let chunks: Vec<Bytes> = self.0.chunks(self.1).map(Bytes::copy_from_slice).collect();
            Box::new(chunks.into_iter().map(Ok))
        }

        fn size_hint(&self) -> u64 {
            self.0.len() as u64
        }
    }

    jetraft_raft::SnapshotData::Lazy(std::sync::Arc::new(Chunked(bytes.clone(), size)))
}

#[cfg(test)]
mod tests {
    use jetraft_proto::stream::{DedupEntry, SnapshotMsg, StreamSnapshot};
    use prost::Message;

    use super::*;

    fn sample() -> StreamSnapshot {
        StreamSnapshot {
            config_json: Bytes::from_static(b"{\"name\":\"S\"}"),
            created_ns: 7,
            last_seq: 300,
            last_ts: u64::MAX,
            msgs: (1..=40)
                .map(|seq| SnapshotMsg {
                    seq,
                    subject: format!("s.{seq}"),
                    headers: Bytes::new(),
                    payload: Bytes::from(vec![seq as u8; seq as usize * 3]),
                    timestamp_ns: seq * 1000,
                })
                .collect(),
            dedup: vec![DedupEntry {
                msg_id: "m".into(),
                seq: 3,
                timestamp_ns: 9,
            }],
            clock_ns: 1 << 40,
            last_msg_id: "id".into(),
            first_seq: 1,
            consumers: Vec::new(),
            source_positions: Vec::new(),
        }
    }

    fn chunked(bytes: &Bytes, size: usize) -> SnapshotChunks {
        chunked_payload(bytes, size).chunks()
    }

    #[test]
    fn fields_in_any_chunking_concatenate_back_to_the_message() {
        let snap = sample();
        let bytes = Bytes::from(snap.encode_to_vec());
        for size in [1, 2, 3, 7, 15, 16, 64, 1000, bytes.len()] {
            let fields: Vec<Field> = Fields::new(chunked(&bytes, size))
                .collect::<Result<_, _>>()
                .unwrap();
            let raw: Vec<u8> = fields.iter().flat_map(|f| f.raw.to_vec()).collect();
            assert_eq!(raw, bytes, "chunk size {size}");
            let msgs: Vec<SnapshotMsg> = fields
                .iter()
                .filter(|f| f.number == 5)
                .map(|f| SnapshotMsg::decode(f.value.clone()).unwrap())
                .collect();
            assert_eq!(msgs, snap.msgs, "chunk size {size}");
            let last_seq = fields.iter().find(|f| f.number == 3).unwrap();
            assert_eq!(decode_varint(&mut &last_seq.value[..]).unwrap(), 300);
        }
    }

    #[test]
    fn a_truncated_or_garbled_message_is_corrupt_and_ends_the_fields() {
        let bytes = Bytes::from(sample().encode_to_vec());
        let cut = bytes.slice(..bytes.len() - 1);
        let results: Vec<_> = Fields::new(chunked(&cut, 10)).collect();
        assert!(matches!(
            results.last(),
            Some(Err(StateMachineError::CorruptSnapshot { .. }))
        ));
        // Wire type 3 (groups) is not used by jetraft's messages.
        let garbled = Bytes::from_static(&[0x0b, 0x01]);
        let mut fields = Fields::new(chunked(&garbled, 1));
        assert!(matches!(
            fields.next(),
            Some(Err(StateMachineError::CorruptSnapshot { .. }))
        ));
        assert!(fields.next().is_none());
    }

    #[test]
    fn a_field_claiming_more_than_the_bound_is_refused_before_reading_it() {
        let mut huge = BytesMut::new();
        prost::encoding::encode_key(5, prost::encoding::WireType::LengthDelimited, &mut huge);
        prost::encoding::encode_varint(MAX_FIELD_BYTES as u64 + 1, &mut huge);
        let mut fields = Fields::new(chunked(&huge.freeze(), 4));
        let err = fields.next().unwrap().unwrap_err();
        assert!(err.to_string().contains("bytes"), "{err}");
    }

    #[test]
    fn an_error_reading_a_chunk_is_returned() {
        let chunks: SnapshotChunks = Box::new(
            vec![
                Ok(Bytes::from_static(&[0x18])),
                Err(StateMachineError::Storage(std::io::Error::other("disk"))),
            ]
            .into_iter(),
        );
        let err = Fields::new(chunks).next().unwrap().unwrap_err();
        assert!(matches!(err, StateMachineError::Storage(_)));
    }
}
