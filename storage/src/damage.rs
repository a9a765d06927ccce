//! The first damage found in the node's store while it runs: a RocksDB read that failed a block
//! checksum (an error of kind `Corruption`). A record of jetraft's own whose CRC does not match
//! ([`crate::StorageError::Corrupt`]) is not noted here: RocksDB's checksums passed, so the
//! damage happened before the data reached the disk (or the record came from a peer, in a
//! snapshot chunk), and the store check at start would not find it.
//!
//! Process-wide (a server process holds one store): the server's `/healthz` reports it, the
//! liveness check included, so a supervisor (the Kubernetes kubelet) restarts the node, and the
//! store check at start moves the damaged store aside and rebuilds the node from its peers.

use std::sync::Mutex;

static FOUND: Mutex<Option<String>> = Mutex::new(None);

/// Records damage (the first one found is kept).
pub fn note(detail: &str) {
    let mut found = FOUND
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if found.is_none() {
        *found = Some(detail.chars().take(300).collect());
    }
}

/// The first damage found since the process started (or since [`forget`]), if any.
pub fn found() -> Option<String> {
    FOUND
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// Forgets what was found: for the store check at start, which deals with the damage it finds
/// itself (the store is moved aside, or the node does not start).
pub fn forget() {
    *FOUND
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
}
