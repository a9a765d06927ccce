//! Repository hygiene checks that compile-time tools cannot express.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("server/ has a parent")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable source dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn protocol_module_is_sans_io() {
    let mut files = Vec::new();
    rust_files(&workspace().join("server/src/protocol"), &mut files);
    assert!(!files.is_empty());
    for f in files {
        let text = std::fs::read_to_string(&f).expect("readable file");
        for banned in [
            "tokio::",
            "use tokio",
            "std::net",
            "Instant::now",
            "SystemTime",
        ] {
            assert!(
                !text.contains(banned),
                "{} uses {banned}: the protocol module is sans-IO",
                f.display()
            );
        }
    }
}

/// The consumer core (and the pacing and deadline helpers it uses) is driven with explicit
/// time by its engine task: no runtime, clock, randomness or server handle of its own.
#[test]
fn consumer_core_is_sans_io() {
    let consumer = workspace().join("server/src/jetstream/runtime/consumer");
    let mut files = vec![consumer.join("pacing.rs"), consumer.join("deadlines.rs")];
    rust_files(&consumer.join("core"), &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).expect("readable file");
        for banned in [
            "tokio",
            "Instant::",
            "std::time::Instant",
            "SystemTime",
            "now_ns()",
            "rand::",
            "JetStream",
        ] {
            assert!(
                !text.contains(banned),
                "{} uses {banned}: the consumer core is sans-IO",
                f.display()
            );
        }
    }
}

#[test]
fn no_placeholders_in_shipped_code() {
    for krate in ["server", "storage", "raft", "proto", "tests"] {
        let mut files = Vec::new();
        rust_files(&workspace().join(krate).join("src"), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).expect("readable file");
            for banned in ["todo!(", "unimplemented!(", "dbg!("] {
                assert!(!text.contains(banned), "{} contains {banned}", f.display());
            }
        }
    }
}

#[test]
fn every_crate_has_crate_docs() {
    for lib in [
        "server/src/lib.rs",
        "storage/src/lib.rs",
        "raft/src/lib.rs",
        "proto/src/lib.rs",
        "tests/src/lib.rs",
    ] {
        let text = std::fs::read_to_string(workspace().join(lib)).expect("readable lib.rs");
        assert!(
            text.trim_start().starts_with("//!"),
            "{lib} must open with //! crate docs"
        );
    }
}

#[test]
fn cached_rocksdb_library_matches_the_locked_crate() {
    let lock = std::fs::read_to_string(workspace().join("Cargo.lock")).expect("Cargo.lock");
    let version = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"librocksdb-sys\""))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
        .and_then(|v| v.strip_suffix('"'))
        .expect("librocksdb-sys is locked");
    let rocksdb = version
        .split('+')
        .nth(1)
        .expect("version carries the RocksDB version");
    let dir = format!("rocksdb-{rocksdb}");
    let config = std::fs::read_to_string(workspace().join(".cargo/config.toml")).expect("config");
    assert!(
        config.contains(&dir),
        ".cargo/config.toml must point ROCKSDB_LIB_DIR at {dir}"
    );
    let script =
        std::fs::read_to_string(workspace().join("scripts/rocksdb-lib.sh")).expect("script");
    assert!(
        script.contains(&format!("version={rocksdb}")),
        "scripts/rocksdb-lib.sh must build {rocksdb}"
    );
}

/// The server crate's layers import one way (see `server/src/lib.rs`): `protocol`, `router`,
/// `config`, `auth`, `node` <- `bus` <- `conn`, `cluster`, `jetstream` <- `monitor` <- `server`.
/// Each entry: a source folder, and the top-level modules no file in it may use. A `use` of
/// `crate::x` (or a path through it) counts; mentions in comments do not.
#[test]
fn server_modules_import_one_way() {
    let rules: [(&str, &[&str]); 5] = [
        (
            "bus",
            &["conn", "cluster", "jetstream", "monitor", "server"],
        ),
        ("conn", &["cluster", "jetstream", "monitor", "server"]),
        ("cluster", &["conn", "jetstream", "monitor", "server"]),
        ("jetstream", &["conn", "monitor", "server"]),
        ("monitor", &["server"]),
    ];
    let mut broken = Vec::new();
    for (dir, banned) in rules {
        let mut files = Vec::new();
        rust_files(&workspace().join("server/src").join(dir), &mut files);
        assert!(!files.is_empty(), "server/src/{dir} has no sources");
        for f in files {
            let text = std::fs::read_to_string(&f).expect("readable file");
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                for module in banned {
                    let path = format!("crate::{module}");
                    let uses = code.match_indices(&path).any(|(at, _)| {
                        !code[at + path.len()..]
                            .starts_with(|c: char| c.is_alphanumeric() || c == '_')
                    });
                    if uses {
                        broken.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
                    }
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "imports against the layering:\n{}",
        broken.join("\n")
    );
}

/// Nothing holds the whole server: parts get a `Bus` and views (no `Arc<Server>` anywhere).
#[test]
fn no_part_holds_the_server() {
    let mut files = Vec::new();
    rust_files(&workspace().join("server/src"), &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).expect("readable file");
        assert!(
            !text.contains("Arc<Server>"),
            "{} holds an Arc<Server>",
            f.display()
        );
    }
}
