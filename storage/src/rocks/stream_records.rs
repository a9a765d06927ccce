//! The records of a file stream: a message value and the stream's persisted counters.
//!
//! Message body: `ts (u64) | subject (u32 len + bytes) | headers (u32 len + bytes) | payload
//! (u32 len + bytes)`; counters body: six u64 (`msgs, bytes, first_seq, first_ts, last_seq,
//! last_ts`). Both inside the [`crate::record`] envelope. Changing either is a `DataChange:`.

use bytes::Bytes;

use crate::record::{self, BodyReader, BodyWriter};
use crate::stream::StoredMsg;
use crate::{StorageError, keys};

const MSGS: &str = "msgs";
const META: &str = "sm_meta";

/// The persisted counters of one stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub(crate) msgs: u64,
    pub(crate) bytes: u64,
    pub(crate) first_seq: u64,
    pub(crate) first_ts: u64,
    pub(crate) last_seq: u64,
    pub(crate) last_ts: u64,
}

impl Counters {
    pub(crate) fn encode(&self, key: &[u8]) -> Vec<u8> {
        let mut w = BodyWriter::with_capacity(48);
        w.u64(self.msgs)
            .u64(self.bytes)
            .u64(self.first_seq)
            .u64(self.first_ts)
            .u64(self.last_seq)
            .u64(self.last_ts);
        record::seal(key, &w.finish())
    }

    pub(crate) fn decode(key: &[u8], value: &[u8]) -> Result<Self, StorageError> {
        let mut r = BodyReader::new(META, record::open(META, key, value)?);
        let c = Self {
            msgs: r.u64()?,
            bytes: r.u64()?,
            first_seq: r.u64()?,
            first_ts: r.u64()?,
            last_seq: r.u64()?,
            last_ts: r.u64()?,
        };
        r.end()?;
        Ok(c)
    }
}

/// Encodes a message value.
pub(crate) fn encode_msg(key: &[u8], m: &StoredMsg) -> Vec<u8> {
    let mut w = BodyWriter::for_record(24 + m.subject.len() + m.headers.len() + m.payload.len());
    w.u64(m.timestamp_ns)
        .bytes(m.subject.as_bytes())
        .bytes(&m.headers)
        .bytes(&m.payload);
    w.seal(key)
}

/// Decodes a message value stored under `key`.
pub(crate) fn decode_msg(key: &[u8], value: &[u8]) -> Result<StoredMsg, StorageError> {
    let Some((_, seq)) = keys::decode_prefixed_u64(key) else {
        return Err(StorageError::corrupt(MSGS, "bad message key"));
    };
    let mut r = BodyReader::new(MSGS, record::open(MSGS, key, value)?);
    let timestamp_ns = r.u64()?;
    let subject = r.str()?.to_string();
    let headers = Bytes::copy_from_slice(r.bytes()?);
    let payload = Bytes::copy_from_slice(r.bytes()?);
    r.end()?;
    Ok(StoredMsg {
        seq,
        subject,
        headers,
        payload,
        timestamp_ns,
    })
}
