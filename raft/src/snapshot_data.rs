//! [`SnapshotData`]: the bytes of a group snapshot, either held in memory or produced lazily,
//! chunk by chunk, from a point-in-time view of the state machine.
//!
//! A lazy snapshot ([`SnapshotSource`]) lets a leader hand openraft a snapshot of a large stream
//! without exporting it first: taking the view is cheap (done under the state machine's lock),
//! and the bytes are read from the view only as the transport sends them, off the state machine
//! worker, with memory bounded by a few chunks.
//!
//! Invariants: every pass over a source ([`SnapshotSource::chunks`]) yields the same bytes, the
//! state as of the view; the concatenation of the chunks is what
//! [`ReplicatedStateMachine::restore`](crate::ReplicatedStateMachine::restore) takes.

use std::fmt;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::sm::StateMachineError;

/// The chunks of one pass over a lazy snapshot, in order.
pub type SnapshotChunks = Box<dyn Iterator<Item = Result<Bytes, StateMachineError>> + Send>;

/// A point-in-time view of a state machine that produces its snapshot bytes on demand.
///
/// Reading may block (disk reads): call [`SnapshotSource::chunks`] and iterate off the async
/// runtime's worker threads.
pub trait SnapshotSource: Send + Sync + 'static {
    /// Starts a new pass over the snapshot's bytes from the beginning.
    fn chunks(self: Arc<Self>) -> SnapshotChunks;

    /// About how many bytes a pass yields (to size timeouts); need not be exact.
    fn size_hint(&self) -> u64;
}

/// A group snapshot's payload: bytes in memory, or a lazy [`SnapshotSource`].
#[derive(Clone)]
pub enum SnapshotData {
    /// The whole snapshot, e.g. as received over the wire.
    Bytes(Bytes),
    /// Produced from a view as it is read.
    Lazy(Arc<dyn SnapshotSource>),
}

impl SnapshotData {
    /// An empty in-memory snapshot.
    pub fn new() -> Self {
        Self::Bytes(Bytes::new())
    }

    /// A pass over the payload: one chunk for in-memory bytes (none when empty), the source's
    /// chunks for a lazy one.
    pub fn chunks(&self) -> SnapshotChunks {
        match self {
            Self::Bytes(b) if b.is_empty() => Box::new(std::iter::empty()),
            Self::Bytes(b) => Box::new(std::iter::once(Ok(b.clone()))),
            Self::Lazy(source) => source.clone().chunks(),
        }
    }

    /// About how many bytes [`Self::chunks`] yields.
    pub fn size_hint(&self) -> u64 {
        match self {
            Self::Bytes(b) => b.len() as u64,
            Self::Lazy(source) => source.size_hint(),
        }
    }

    /// The whole payload in memory (reads a lazy source through; blocking).
    pub fn into_bytes(self) -> Result<Bytes, StateMachineError> {
        match self {
            Self::Bytes(b) => Ok(b),
            Self::Lazy(source) => {
                let mut out = BytesMut::new();
                for chunk in source.chunks() {
                    out.extend_from_slice(&chunk?);
                }
                Ok(out.freeze())
            }
        }
    }
}

impl Default for SnapshotData {
    fn default() -> Self {
        Self::new()
    }
}

impl From<Bytes> for SnapshotData {
    fn from(b: Bytes) -> Self {
        Self::Bytes(b)
    }
}

impl fmt::Debug for SnapshotData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bytes(b) => write!(f, "SnapshotData::Bytes({} bytes)", b.len()),
            Self::Lazy(s) => write!(f, "SnapshotData::Lazy(~{} bytes)", s.size_hint()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Yields `n` chunks of one byte each, the byte being the chunk's number.
    struct Counting(u8);

    impl SnapshotSource for Counting {
        fn chunks(self: Arc<Self>) -> SnapshotChunks {
            Box::new((0..self.0).map(|i| Ok(Bytes::from(vec![i]))))
        }
        fn size_hint(&self) -> u64 {
            u64::from(self.0)
        }
    }

    #[test]
    fn every_pass_over_a_lazy_source_yields_the_same_bytes() {
        let data = SnapshotData::Lazy(Arc::new(Counting(3)));
        assert_eq!(data.chunks().count(), 3);
        assert_eq!(data.chunks().count(), 3);
        assert_eq!(data.into_bytes().unwrap(), Bytes::from_static(&[0, 1, 2]));
    }

    #[test]
    fn in_memory_bytes_are_one_chunk_and_empty_ones_none() {
        let data = SnapshotData::from(Bytes::from_static(b"abc"));
        let chunks: Vec<_> = data.chunks().map(Result::unwrap).collect();
        assert_eq!(chunks, [Bytes::from_static(b"abc")]);
        assert_eq!(SnapshotData::new().chunks().count(), 0);
        assert_eq!(data.size_hint(), 3);
    }
}
