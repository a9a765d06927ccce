//! Full snapshots: metadata, framing the bytes (as they are produced) into bounded
//! [`pb::SnapshotChunk`]s, and reassembling them on the receiving side.
//!
//! Invariants: the first chunk alone carries group, sender, vote and meta; chunks arrive in
//! order with contiguous offsets; the last one has `done`; the reassembled size is bounded.

use bytes::{Bytes, BytesMut};
use jetraft_proto::raft as pb;
use openraft::raft::SnapshotResponse;
use openraft::type_config::alias::SnapshotMetaOf;

use super::{DecodeError, log_id, membership, required, vote};
use crate::types::{GroupSnapshot, GroupVote, JetraftConfig, SnapshotData};

/// Size of the data in each snapshot chunk sent over the wire.
pub const CHUNK_SIZE: usize = 1 << 20;

/// Encodes snapshot metadata.
pub fn meta_to_pb(m: &SnapshotMetaOf<JetraftConfig>) -> pb::SnapshotMeta {
    pb::SnapshotMeta {
        last_log_id: log_id::opt_to_pb(m.last_log_id.as_ref()),
        last_membership: Some(membership::stored_to_pb(&m.last_membership)),
    }
}

/// Decodes snapshot metadata.
pub fn meta_from_pb(m: pb::SnapshotMeta) -> Result<SnapshotMetaOf<JetraftConfig>, DecodeError> {
    Ok(SnapshotMetaOf::<JetraftConfig> {
        last_log_id: log_id::opt_from_pb(m.last_log_id),
        last_membership: membership::stored_from_pb(required(
            m.last_membership,
            "SnapshotMeta.last_membership",
        )?)?,
    })
}

/// Frames a snapshot's payload, given piece by piece as it is produced, as wire chunks of at
/// most `chunk_size` data bytes (the data is shared, not copied). One chunk is held back until
/// the next piece or [`Framer::finish`], so the last data chunk is the one marked `done`; an
/// empty payload is one chunk.
#[derive(Debug)]
pub struct Framer {
    /// `(vote, meta, size hint)` for the first chunk, until it is framed.
    header: Option<(pb::Vote, pb::SnapshotMeta, u64)>,
    group: u64,
    from: u64,
    /// Payload bytes framed so far.
    offset: u64,
    chunk_size: usize,
    /// The last chunk framed, not yet handed out.
    held: Option<pb::SnapshotChunk>,
}

impl Framer {
    /// A framer for a payload of about `size_hint` bytes (0 = unknown) with `meta`, sent by
    /// node `from` to `group`'s replica.
    pub fn new(
        group: u64,
        from: u64,
        vote: &GroupVote,
        meta: &SnapshotMetaOf<JetraftConfig>,
        size_hint: u64,
        chunk_size: usize,
    ) -> Self {
        Self {
            header: Some((vote::to_pb(vote), meta_to_pb(meta), size_hint)),
            group,
            from,
            offset: 0,
            chunk_size: chunk_size.max(1),
            held: None,
        }
    }

    fn frame(&mut self, data: Bytes) -> pb::SnapshotChunk {
        let (vote, meta, size_hint) = match self.header.take() {
            Some((vote, meta, hint)) => (Some(vote), Some(meta), hint),
            None => (None, None, 0),
        };
        let chunk = pb::SnapshotChunk {
            group_id: self.group,
            from: self.from,
            vote,
            meta,
            offset: self.offset,
            done: false,
            data,
            size_hint,
        };
        self.offset += chunk.data.len() as u64;
        chunk
    }

    /// The chunks ready to send after the next `piece` of payload.
    pub fn push(&mut self, piece: Bytes) -> Vec<pb::SnapshotChunk> {
        let mut ready = Vec::with_capacity(piece.len() / self.chunk_size + 1);
        let mut at = 0;
        while at < piece.len() {
            let end = (at + self.chunk_size).min(piece.len());
            let chunk = self.frame(piece.slice(at..end));
            ready.extend(self.held.replace(chunk));
            at = end;
        }
        ready
    }

    /// The last chunk, marked `done`.
    pub fn finish(mut self) -> pb::SnapshotChunk {
        let mut last = match self.held.take() {
            Some(c) => c,
            None => self.frame(Bytes::new()),
        };
        last.done = true;
        last
    }
}

/// Splits an in-memory payload into chunks of at most `chunk_size` data bytes (see [`Framer`]).
pub fn to_chunks(
    group: u64,
    from: u64,
    vote: &GroupVote,
    meta: &SnapshotMetaOf<JetraftConfig>,
    data: &Bytes,
    chunk_size: usize,
) -> Vec<pb::SnapshotChunk> {
    let mut framer = Framer::new(group, from, vote, meta, data.len() as u64, chunk_size);
    let mut chunks = framer.push(data.clone());
    chunks.push(framer.finish());
    chunks
}

/// Why a chunk sequence was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// The first chunk lacked a header field, or a field did not decode.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A chunk's offset is not where the previous one ended.
    #[error("chunk at offset {got}, expected {expected}")]
    OutOfOrder {
        /// Where the data received so far ends.
        expected: u64,
        /// The chunk's offset.
        got: u64,
    },
    /// The snapshot grew past the receiver's bound.
    #[error("snapshot larger than {limit} bytes")]
    TooLarge {
        /// The bound.
        limit: usize,
    },
    /// The stream ended (or the sequence continued) without exactly one final chunk.
    #[error("snapshot stream ended before its last chunk")]
    Incomplete,
}

/// Reassembles one snapshot from its chunks.
#[derive(Debug)]
pub struct Assembler {
    /// `(group, from, vote, meta)` from the first chunk.
    header: Option<(u64, u64, GroupVote, SnapshotMetaOf<JetraftConfig>)>,
    /// Data received and not yet taken ([`Self::take_buffered`]).
    data: BytesMut,
    /// Bytes received so far, taken or not.
    received: u64,
    /// Set once the `done` chunk arrived.
    done: bool,
    /// Largest snapshot accepted.
    limit: usize,
    /// The first chunk's size hint (the sender's word).
    hint: usize,
}

impl Assembler {
    /// An assembler that refuses snapshots larger than `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            header: None,
            data: BytesMut::new(),
            received: 0,
            done: false,
            limit,
            hint: 0,
        }
    }

    /// Reserves room for the whole snapshot as the first chunk's size hint gives it, capped by
    /// the limit and by `cap` (what the caller buffers before taking the bytes): one allocation
    /// instead of doubling copies. Call it once the sender passed the receiver's checks, as the
    /// hint is only the sender's word.
    pub fn reserve_hinted(&mut self, cap: usize) {
        let more = self
            .hint
            .min(self.limit)
            .min(cap)
            .saturating_sub(self.data.len());
        self.data.reserve(more);
    }

    /// Bytes received and not yet taken.
    pub fn buffered(&self) -> usize {
        self.data.len()
    }

    /// Takes the bytes received since the last take (e.g. to write them to a spool file); the
    /// snapshot [`Self::finish`] returns then holds only what came after.
    pub fn take_buffered(&mut self) -> Bytes {
        self.data.split().freeze()
    }

    /// The group named by the first chunk, once it arrived.
    pub fn group(&self) -> Option<u64> {
        self.header.as_ref().map(|h| h.0)
    }

    /// Adds the next chunk.
    pub fn push(&mut self, chunk: pb::SnapshotChunk) -> Result<(), ChunkError> {
        if self.done {
            return Err(ChunkError::Incomplete);
        }
        if self.header.is_none() {
            let vote = vote::required_from_pb(chunk.vote, "SnapshotChunk.vote")?;
            let meta = meta_from_pb(required(chunk.meta, "SnapshotChunk.meta")?)?;
            self.header = Some((chunk.group_id, chunk.from, vote, meta));
            self.hint = usize::try_from(chunk.size_hint).unwrap_or(usize::MAX);
        }
        let expected = self.received;
        if chunk.offset != expected {
            return Err(ChunkError::OutOfOrder {
                expected,
                got: chunk.offset,
            });
        }
        let received = self.received.saturating_add(chunk.data.len() as u64);
        if received > self.limit as u64 {
            return Err(ChunkError::TooLarge { limit: self.limit });
        }
        self.received = received;
        self.data.extend_from_slice(&chunk.data);
        self.done = chunk.done;
        Ok(())
    }

    /// The group, sender, vote and snapshot, once the last chunk arrived; the snapshot's data is
    /// what was not taken ([`Self::take_buffered`]).
    pub fn finish(self) -> Result<(u64, u64, GroupVote, GroupSnapshot), ChunkError> {
        match (self.header, self.done) {
            (Some((group, from, vote, meta)), true) => Ok((
                group,
                from,
                vote,
                GroupSnapshot {
                    meta,
                    snapshot: SnapshotData::from(Bytes::from(self.data)),
                },
            )),
            _ => Err(ChunkError::Incomplete),
        }
    }
}

/// Encodes the receiver's answer.
pub fn response_to_pb(r: &SnapshotResponse<JetraftConfig>) -> pb::SnapshotResponse {
    pb::SnapshotResponse {
        vote: Some(vote::to_pb(&r.vote)),
    }
}

/// Decodes the receiver's answer.
pub fn response_from_pb(
    r: pb::SnapshotResponse,
) -> Result<SnapshotResponse<JetraftConfig>, DecodeError> {
    Ok(SnapshotResponse::new(vote::required_from_pb(
        r.vote,
        "SnapshotResponse.vote",
    )?))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::convert::strategies;

    fn snapshot() -> impl Strategy<Value = (SnapshotMetaOf<JetraftConfig>, Bytes)> {
        (
            strategies::opt_log_id(),
            strategies::stored_membership(),
            proptest::collection::vec(any::<u8>(), 0..300),
        )
            .prop_map(|(last_log_id, last_membership, data)| {
                let meta = SnapshotMetaOf::<JetraftConfig> {
                    last_log_id,
                    last_membership,
                };
                (meta, Bytes::from(data))
            })
    }

    proptest! {
        #[test]
        fn chunks_reassemble_to_the_same_snapshot(
            (meta, data) in snapshot(),
            v in strategies::vote(),
            size in 1usize..64,
        ) {
            let chunks = to_chunks(7, 3, &v, &meta, &data, size);
            prop_assert_eq!(chunks.len(), data.len().div_ceil(size).max(1));
            prop_assert!(chunks.iter().all(|c| c.data.len() <= size));
            let mut asm = Assembler::new(1 << 20);
            for c in chunks {
                asm.push(c).unwrap();
            }
            let (group, from, vote, back) = asm.finish().unwrap();
            prop_assert_eq!((group, from, vote), (7, 3, v));
            prop_assert_eq!(back.meta, meta);
            prop_assert_eq!(back.snapshot.into_bytes().unwrap(), data);
        }

        #[test]
        fn response_round_trips(v in strategies::vote()) {
            let r = SnapshotResponse::<JetraftConfig>::new(v);
            prop_assert_eq!(response_from_pb(response_to_pb(&r)).unwrap(), r);
        }
    }

    /// Chunks of at most 4 bytes of a `len`-byte payload.
    fn sample(len: usize) -> Vec<pb::SnapshotChunk> {
        let meta = SnapshotMetaOf::<JetraftConfig>::default();
        let data = Bytes::from(vec![7u8; len]);
        to_chunks(1, 1, &GroupVote::new_committed(2, 1), &meta, &data, 4)
    }

    #[test]
    fn pieces_are_split_and_only_the_last_chunk_is_done() {
        let meta = SnapshotMetaOf::<JetraftConfig>::default();
        let mut framer = Framer::new(1, 1, &GroupVote::new_committed(2, 1), &meta, 8, 4);
        let mut chunks = framer.push(Bytes::from_static(b"abcdef"));
        chunks.extend(framer.push(Bytes::new()));
        chunks.extend(framer.push(Bytes::from_static(b"gh")));
        chunks.push(framer.finish());
        let data: Vec<&[u8]> = chunks.iter().map(|c| &c.data[..]).collect();
        assert_eq!(data, [&b"abcd"[..], b"ef", b"gh"]);
        let done: Vec<bool> = chunks.iter().map(|c| c.done).collect();
        assert_eq!(done, [false, false, true]);
        assert!(chunks[0].meta.is_some() && chunks[1].meta.is_none());
        let mut asm = Assembler::new(100);
        for c in chunks {
            asm.push(c).unwrap();
        }
        let back = asm.finish().unwrap().3.snapshot.into_bytes().unwrap();
        assert_eq!(back, Bytes::from_static(b"abcdefgh"));
    }

    #[test]
    fn taken_bytes_still_count_for_offsets_and_the_limit() {
        let mut chunks = sample(10).into_iter();
        let mut asm = Assembler::new(9);
        asm.push(chunks.next().unwrap()).unwrap();
        assert_eq!(asm.buffered(), 4);
        assert_eq!(asm.take_buffered(), Bytes::from(vec![7u8; 4]));
        assert_eq!(asm.buffered(), 0);
        asm.push(chunks.next().unwrap()).unwrap();
        let err = asm.push(chunks.next().unwrap()).unwrap_err();
        assert_eq!(err, ChunkError::TooLarge { limit: 9 });
        let mut asm = Assembler::new(100);
        let mut chunks = sample(10).into_iter();
        asm.push(chunks.next().unwrap()).unwrap();
        asm.take_buffered();
        asm.push(chunks.next().unwrap()).unwrap();
        asm.push(chunks.next().unwrap()).unwrap();
        let rest = asm.finish().unwrap().3.snapshot.into_bytes().unwrap();
        assert_eq!(rest, Bytes::from(vec![7u8; 6]));
    }

    #[test]
    fn out_of_order_chunk_is_refused() {
        let mut chunks = sample(10);
        let mut asm = Assembler::new(100);
        asm.push(chunks.remove(0)).unwrap();
        let err = asm.push(chunks.remove(1)).unwrap_err();
        assert_eq!(
            err,
            ChunkError::OutOfOrder {
                expected: 4,
                got: 8
            }
        );
    }

    #[test]
    fn oversized_snapshot_is_refused() {
        let mut asm = Assembler::new(6);
        let mut chunks = sample(10).into_iter();
        asm.push(chunks.next().unwrap()).unwrap();
        let err = asm.push(chunks.next().unwrap()).unwrap_err();
        assert_eq!(err, ChunkError::TooLarge { limit: 6 });
    }

    #[test]
    fn stream_cut_before_last_chunk_is_incomplete() {
        let mut asm = Assembler::new(100);
        asm.push(sample(10).remove(0)).unwrap();
        assert_eq!(asm.finish().unwrap_err(), ChunkError::Incomplete);
    }

    #[test]
    fn first_chunk_without_meta_is_refused() {
        let mut chunk = sample(3).remove(0);
        chunk.meta = None;
        let err = Assembler::new(100).push(chunk).unwrap_err();
        assert_eq!(
            err,
            ChunkError::Decode(DecodeError::Missing("SnapshotChunk.meta"))
        );
    }
}
