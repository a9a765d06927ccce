//! The node's permanent identity: a random 64-bit [`NodeId`] created on first start and kept in
//! `<store_dir>/node_id`, so a restarted node is recognised by its peers (and, later, keeps its
//! Raft identity).
//!
//! Invariants: the file is written atomically (temp file, fsync, rename, fsync of the directory),
//! so a crash leaves either no id or a complete one. An unreadable or malformed file is an error,
//! never silently replaced: a new id would make the node a stranger to its own cluster. Id 0 is
//! never issued (it reads as "unset" in protobuf).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use rand::Rng;

/// File name of the node id inside the store dir.
pub const NODE_ID_FILE: &str = "node_id";

/// A node's permanent identity in the cluster: the same id is its Raft id.
pub use jetraft_raft::NodeId;

/// Why the node id could not be loaded or created.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// Reading or writing the id file failed.
    #[error("node id file {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file exists but does not hold a node id.
    #[error("node id file {path} is malformed: {content:?}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What it holds (truncated).
        content: String,
    },
}

/// Returns the node id stored in `store_dir`, creating and persisting a new random one if there
/// is none yet.
pub fn load_or_create(store_dir: &Path) -> Result<NodeId, IdentityError> {
    let path = store_dir.join(NODE_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => parse(&text).ok_or_else(|| IdentityError::Malformed {
            content: text.chars().take(64).collect(),
            path,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = NodeId(rand::rng().random_range(1..=u64::MAX));
            write_atomically(store_dir, &path, id)?;
            Ok(id)
        }
        Err(source) => Err(IdentityError::Io { path, source }),
    }
}

/// A random node id kept nowhere: for a node without JetStream, which has no store.
pub fn ephemeral() -> NodeId {
    NodeId(rand::rng().random_range(1..=u64::MAX))
}

fn parse(text: &str) -> Option<NodeId> {
    let hex = text.trim();
    if hex.len() != 16 {
        return None;
    }
    match u64::from_str_radix(hex, 16) {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(NodeId(n)),
    }
}

fn write_atomically(dir: &Path, path: &Path, id: NodeId) -> Result<(), IdentityError> {
    let io = |source| IdentityError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = dir.join(format!("{NODE_ID_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    writeln!(f, "{id}").map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_start_creates_an_id_and_restart_reads_the_same_one() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create(dir.path()).unwrap();
        assert_ne!(first.0, 0);
        assert_eq!(load_or_create(dir.path()).unwrap(), first);
        let text = std::fs::read_to_string(dir.path().join(NODE_ID_FILE)).unwrap();
        assert_eq!(text, format!("{first}\n"));
        assert!(!dir.path().join("node_id.tmp").exists());
    }

    #[test]
    fn different_store_dirs_get_different_ids() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        assert_ne!(
            load_or_create(a.path()).unwrap(),
            load_or_create(b.path()).unwrap()
        );
    }

    #[test]
    fn malformed_file_is_an_error_and_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(NODE_ID_FILE);
        for bad in ["", "xyz", "0000000000000000\n", "12345"] {
            std::fs::write(&path, bad).unwrap();
            let err = load_or_create(dir.path()).unwrap_err();
            assert!(matches!(err, IdentityError::Malformed { .. }), "{bad:?}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), bad);
        }
    }

    #[test]
    fn leftover_temp_file_from_a_crash_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("node_id.tmp"), "garbage").unwrap();
        let id = load_or_create(dir.path()).unwrap();
        assert_eq!(load_or_create(dir.path()).unwrap(), id);
    }

    #[test]
    fn display_is_fixed_width_hex() {
        assert_eq!(NodeId(0xab).to_string(), "00000000000000ab");
    }
}
