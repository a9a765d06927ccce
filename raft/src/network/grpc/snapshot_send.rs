//! Reading a snapshot's payload for sending: on a blocking thread (a lazy payload reads the
//! disk), framed into wire chunks a few ahead of the connection, so reading and sending overlap
//! and memory stays bounded by [`READ_AHEAD`] chunks.

use futures_util::Stream;
use jetraft_proto::raft as pb;

use crate::convert::snapshot::Framer;
use crate::types::{GroupSnapshot, GroupVote};

/// Wire chunks read ahead of the connection.
const READ_AHEAD: usize = 4;

/// The wire chunks of `snapshot` from node `from` to `group`'s replica, of at most `chunk_size`
/// data bytes each. If the payload cannot be read the stream ends without its `done` chunk, so
/// the receiver refuses the snapshot and the leader sends it again later.
pub(super) fn wire_chunks(
    group: u64,
    from: u64,
    vote: &GroupVote,
    snapshot: GroupSnapshot,
    chunk_size: usize,
) -> impl Stream<Item = pb::SnapshotChunk> + Send + 'static {
    let (tx, rx) = tokio::sync::mpsc::channel(READ_AHEAD);
    let hint = snapshot.snapshot.size_hint();
    let mut framer = Framer::new(group, from, vote, &snapshot.meta, hint, chunk_size);
    tokio::task::spawn_blocking(move || {
        for piece in snapshot.snapshot.chunks() {
            let piece = match piece {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(group, error = %e, "reading a snapshot to send failed");
                    return;
                }
            };
            for chunk in framer.push(piece) {
                if tx.blocking_send(chunk).is_err() {
                    // The send was abandoned (cancelled, timed out or refused).
                    return;
                }
            }
        }
        let _ = tx.blocking_send(framer.finish());
    });
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) })
}
