//! The store check at start, and the repair of a damaged store by rejoining under a new node id.
//!
//! Before the node loads its id and opens its RocksDB, [`prepare`] reads the whole database back
//! with checksums verified ([`jetraft_storage::verify::check_store`]). A sound store starts as
//! before. A damaged one is never served from: in a cluster, when the damage lies in table files
//! (`*.sst`, always repaired) or is a stream left part-restored by a crash during a snapshot
//! install (`DamageKind::InterruptedRestore`, always repaired) or anywhere with `repair_store` on (`--repair_store`, `jetstream {
//! repair_store: true }`), the database and the `node_id` file are moved aside into
//! `<store_dir>/damaged-<unix seconds>/` (kept for forensics, never read again) and the node
//! starts empty under a new node id. The meta leader then retires the old id (same server name)
//! and every stream replica it held is rebuilt on the new id from the stream's leader: added as a
//! learner, caught up by snapshot and log, and only then swapped in for the old id as a voter
//! (`runtime/membership.rs`, `runtime/server_remove.rs`, `runtime/peer_remove.rs`). The old id
//! never votes or acknowledges again, so no Raft group counts on a log the node no longer has.
//! A repaired node only joins a cluster that exists, it never forms a new one
//! ([`JOIN_ONLY_FILE`]).
//!
//! A file `<store_dir>/repair_store` turns the flag on for one start (and is removed by it).
//!
//! Otherwise (WAL or MANIFEST damage without the flag, or a node without a cluster, whose data
//! exists nowhere else) the start fails with the damage and what to do.

use std::path::{Path, PathBuf};

use jetraft_storage::verify::{DamageKind, StoreCheck, check_store};
use tracing::{info, warn};

use crate::cluster::identity::NODE_ID_FILE;
use crate::jetstream::runtime::JOIN_ONLY_FILE;

/// The database directory inside the store dir.
const DB_DIR: &str = "jetraft";
/// A file in the store dir that turns `repair_store` on for the next start (and is removed by
/// it): how one Kubernetes pod is repaired without changing the other pods' config.
pub(super) const REPAIR_REQUEST_FILE: &str = "repair_store";
/// Prefix of the directories damaged stores are moved into.
pub(super) const DAMAGED_PREFIX: &str = "damaged-";

/// Why the node cannot start on its store.
#[derive(Debug, thiserror::Error)]
pub enum StoreRepairError {
    /// The store is damaged and may not be repaired automatically.
    #[error(
        "the store in {} is damaged ({detail}); {hint}",
        path.display()
    )]
    Damaged {
        /// The database directory.
        path: PathBuf,
        /// What the check found.
        detail: String,
        /// What the operator can do.
        hint: &'static str,
    },
    /// The check itself failed (not damage: permissions, I/O).
    #[error("checking the store in {}", path.display())]
    Check {
        /// The database directory.
        path: PathBuf,
        /// The storage error.
        #[source]
        source: jetraft_storage::StorageError,
    },
    /// The join-only marker could not be written.
    #[error("writing {}", path.display())]
    Mark {
        /// The marker file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Moving the damaged store aside failed.
    #[error("moving the damaged store {} aside to {}", from.display(), to.display())]
    Move {
        /// What was moved.
        from: PathBuf,
        /// Where to.
        to: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// What to do with a damaged store: repair it (`true`) or refuse to start with this hint.
fn decide(kind: DamageKind, repair_flag: bool, clustered: bool) -> Result<(), &'static str> {
    if !clustered {
        return Err(
            "this node has no cluster, so its data exists nowhere else: restore it from a backup \
             (the damaged files are left as they are)",
        );
    }
    // Damaged table files and an interrupted restore lie in data the peers hold.
    if repair_flag || matches!(kind, DamageKind::Tables | DamageKind::InterruptedRestore) {
        return Ok(());
    }
    Err(
        "start the node with --repair_store (or jetstream { repair_store: true }, or create the \
         file repair_store in the store dir) to move the damaged store aside and rejoin the \
         cluster under a new node id; its peers hold the data",
    )
}

/// Checks the store in `store_dir` and, when it is damaged and may be repaired, moves it aside
/// so the node starts empty under a new id. Returns where it went.
pub(super) fn prepare(
    store_dir: &Path,
    repair_flag: bool,
    clustered: bool,
) -> Result<Option<PathBuf>, StoreRepairError> {
    let db = store_dir.join(DB_DIR);
    let request = store_dir.join(REPAIR_REQUEST_FILE);
    let repair_flag = repair_flag || request.exists();
    let started = std::time::Instant::now();
    let check = check_store(&db).map_err(|source| StoreRepairError::Check {
        path: db.clone(),
        source,
    })?;
    // What the check found is handled here: it is no damage found while running.
    jetraft_storage::damage::forget();
    let (kind, detail) = match check {
        StoreCheck::Missing => {
            forget_request(&request);
            return Ok(None);
        }
        StoreCheck::Sound => {
            info!(took_ms = started.elapsed().as_millis(), "store checked");
            forget_request(&request);
            return Ok(None);
        }
        StoreCheck::Damaged { kind, detail } => (kind, detail),
    };
    warn!(?kind, %detail, "the store is damaged");
    decide(kind, repair_flag, clustered).map_err(|hint| StoreRepairError::Damaged {
        path: db.clone(),
        detail: detail.clone(),
        hint,
    })?;
    let aside = move_aside(store_dir)?;
    mark_join_only(store_dir)?;
    forget_request(&request);
    warn!(
        moved_to = %aside.display(),
        "damaged store moved aside: this node starts empty under a new node id and its replicas \
         are rebuilt from the cluster"
    );
    Ok(Some(aside))
}

/// Removes a one-off repair request once a start dealt with the store.
fn forget_request(request: &Path) {
    match std::fs::remove_file(request) {
        Ok(()) => info!(file = %request.display(), "repair request done and removed"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => warn!(file = %request.display(), error = %e, "repair request not removed"),
    }
}

/// Marks the store dir so the node joins the existing cluster only (see [`JOIN_ONLY_FILE`]).
fn mark_join_only(store_dir: &Path) -> Result<(), StoreRepairError> {
    let path = store_dir.join(JOIN_ONLY_FILE);
    std::fs::write(
        &path,
        b"the store was moved aside after damage: join, never form\n",
    )
    .map_err(|source| StoreRepairError::Mark { path, source })
}

/// Moves the database and the node id into a new `damaged-<unix seconds>` directory.
fn move_aside(store_dir: &Path) -> Result<PathBuf, StoreRepairError> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut aside = store_dir.join(format!("{DAMAGED_PREFIX}{secs}"));
    let mut n = 1;
    while aside.exists() {
        aside = store_dir.join(format!("{DAMAGED_PREFIX}{secs}-{n}"));
        n += 1;
    }
    let io = |from: &Path, to: &Path| {
        let (from, to) = (from.to_path_buf(), to.to_path_buf());
        move |source| StoreRepairError::Move { from, to, source }
    };
    std::fs::create_dir(&aside).map_err(io(store_dir, &aside))?;
    // The id goes first: a crash in between leaves the damaged database without an id, which
    // the next start checks (and moves) again. The other order could start the old id on an
    // empty store, a voter that forgot its log.
    for name in [NODE_ID_FILE, DB_DIR] {
        let from = store_dir.join(name);
        let to = aside.join(name);
        match std::fs::rename(&from, &to) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(io(&from, &to)(source)),
        }
    }
    if let Ok(dir) = std::fs::File::open(store_dir) {
        // Best effort: the renames are durable once the directory is.
        let _ = dir.sync_all();
    }
    Ok(aside)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_damage_is_repaired_in_a_cluster_without_the_flag() {
        assert_eq!(decide(DamageKind::Tables, false, true), Ok(()));
        assert_eq!(decide(DamageKind::InterruptedRestore, false, true), Ok(()));
        assert!(decide(DamageKind::InterruptedRestore, true, false).is_err());
        assert_eq!(decide(DamageKind::LogOrManifest, true, true), Ok(()));
    }

    #[test]
    fn log_damage_needs_the_flag_and_a_lone_node_is_never_repaired() {
        let hint = decide(DamageKind::LogOrManifest, false, true).expect_err("refused");
        assert!(hint.contains("--repair_store"), "{hint}");
        assert!(decide(DamageKind::Tables, true, false).is_err());
    }

    #[test]
    fn a_repair_request_is_removed_by_the_start_that_saw_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(REPAIR_REQUEST_FILE), "").expect("request");
        assert_eq!(prepare(dir.path(), false, true).expect("prepared"), None);
        assert!(!dir.path().join(REPAIR_REQUEST_FILE).exists());
    }

    #[test]
    fn moving_aside_keeps_the_database_and_the_id() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join(DB_DIR)).expect("db dir");
        std::fs::write(dir.path().join(DB_DIR).join("CURRENT"), "x").expect("file");
        std::fs::write(dir.path().join(NODE_ID_FILE), "00000000000000aa").expect("id");
        let aside = move_aside(dir.path()).expect("moved");
        assert!(aside.join(DB_DIR).join("CURRENT").exists());
        assert!(aside.join(NODE_ID_FILE).exists());
        assert!(!dir.path().join(DB_DIR).exists());
        assert!(!dir.path().join(NODE_ID_FILE).exists());
        let again = move_aside(dir.path()).expect("a second repair");
        assert_ne!(again, aside, "a second repair gets its own directory");
    }
}
