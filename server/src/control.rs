//! Process control from outside: the pid file a running server writes (`-P`, `pid_file`) and
//! `jetraft --signal <command>[=<pid or pid file>]`, which signals a running server the way
//! `nats-server --signal` does (Kubernetes preStop hooks use `--signal ldm=<pid file>`).
//!
//! | command  | signal  | the server...                                          |
//! |----------|---------|--------------------------------------------------------|
//! | `ldm`    | SIGUSR2 | enters lame duck mode, then exits                       |
//! | `term`   | SIGTERM | shuts down gracefully                                   |
//! | `quit`   | SIGINT  | shuts down gracefully                                   |
//! | `stop`   | SIGKILL | is killed                                               |
//! | `reopen` | SIGUSR1 | (log reopening; logged and ignored by jetraft)          |
//! | `reload` | SIGHUP  | reloads its configuration (`-c` file, same flags)       |

use std::path::{Path, PathBuf};

use rustix::process::{Pid, Signal, kill_process};

/// Why `--signal` or the pid file failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The command is not one of the known ones.
    #[error("unknown signal {0:?} (expected ldm, stop, quit, term, reopen or reload)")]
    UnknownCommand(String),
    /// No `=<pid>` and no pid file configured.
    #[error("no process given: use --signal {0}=<pid or pid file>, or -P/pid_file")]
    NoTarget(String),
    /// The target is neither a positive pid nor a readable pid file holding one.
    #[error("invalid pid {target:?}: {reason}")]
    BadTarget {
        /// What was given.
        target: String,
        /// Why it is unusable.
        reason: String,
    },
    /// The signal could not be delivered.
    #[error("signal {command} to pid {pid}: {source}")]
    Send {
        /// The command.
        command: String,
        /// The process.
        pid: i32,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The pid file could not be written.
    #[error("write pid file {path}: {source}")]
    PidFile {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// The signal behind a `--signal` command.
fn signal_for(command: &str) -> Result<Signal, ControlError> {
    Ok(match command {
        "ldm" => Signal::USR2,
        "term" => Signal::TERM,
        "quit" => Signal::INT,
        "stop" => Signal::KILL,
        "reopen" => Signal::USR1,
        "reload" => Signal::HUP,
        other => return Err(ControlError::UnknownCommand(other.to_string())),
    })
}

/// The process a `--signal` target names: a pid, or a file holding one.
pub fn resolve_pid(target: &str) -> Result<i32, ControlError> {
    let bad = |reason: String| ControlError::BadTarget {
        target: target.to_string(),
        reason,
    };
    let text = match target.parse::<i64>() {
        Ok(_) => target.to_string(),
        Err(_) => std::fs::read_to_string(target).map_err(|e| bad(e.to_string()))?,
    };
    let pid: i32 = text
        .trim()
        .parse()
        .map_err(|_| bad(format!("{:?} is not a process id", text.trim())))?;
    if pid <= 0 {
        return Err(bad("a process id must be positive".to_string()));
    }
    Ok(pid)
}

/// Sends `command`'s signal to the process `target` names (see the module table).
pub fn send(command: &str, target: Option<&str>) -> Result<i32, ControlError> {
    let signal = signal_for(command)?;
    let target = target.ok_or_else(|| ControlError::NoTarget(command.to_string()))?;
    let pid = resolve_pid(target)?;
    let os_pid = Pid::from_raw(pid).ok_or_else(|| ControlError::BadTarget {
        target: target.to_string(),
        reason: "a process id must be positive".to_string(),
    })?;
    kill_process(os_pid, signal).map_err(|e| ControlError::Send {
        command: command.to_string(),
        pid,
        source: e.into(),
    })?;
    Ok(pid)
}

/// Writes this process's id to `path` (atomically: a temporary file renamed into place).
pub fn write_pid_file(path: &Path) -> Result<(), ControlError> {
    let err = |source| ControlError::PidFile {
        path: path.to_path_buf(),
        source,
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, std::process::id().to_string()).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

/// Removes the pid file written by [`write_pid_file`] if it still names this process.
pub fn remove_pid_file(path: &Path) {
    let ours = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
        == Some(std::process::id());
    if ours {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_map_to_nats_server_signals() {
        assert_eq!(signal_for("ldm").ok(), Some(Signal::USR2));
        assert_eq!(signal_for("term").ok(), Some(Signal::TERM));
        assert_eq!(signal_for("quit").ok(), Some(Signal::INT));
        assert_eq!(signal_for("stop").ok(), Some(Signal::KILL));
        assert!(matches!(
            signal_for("boom"),
            Err(ControlError::UnknownCommand(c)) if c == "boom"
        ));
    }

    #[test]
    fn target_is_a_pid_or_a_pid_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("j.pid");
        std::fs::write(&file, "4242\n").expect("write");
        assert_eq!(resolve_pid("17").ok(), Some(17));
        assert_eq!(resolve_pid(&file.display().to_string()).ok(), Some(4242));
        assert!(resolve_pid("0").is_err());
        assert!(resolve_pid("-3").is_err());
        assert!(resolve_pid(&dir.path().join("missing").display().to_string()).is_err());
        std::fs::write(&file, "not a pid").expect("write");
        assert!(resolve_pid(&file.display().to_string()).is_err());
    }

    #[test]
    fn pid_file_round_trip_and_removal_only_when_ours() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("j.pid");
        write_pid_file(&file).expect("write pid file");
        let pid = resolve_pid(&file.display().to_string()).expect("pid");
        assert_eq!(u32::try_from(pid).ok(), Some(std::process::id()));
        remove_pid_file(&file);
        assert!(!file.exists());
        std::fs::write(&file, "1").expect("write");
        remove_pid_file(&file);
        assert!(file.exists(), "another process's pid file is left alone");
    }

    #[test]
    fn signalling_needs_a_target() {
        assert!(matches!(send("ldm", None), Err(ControlError::NoTarget(_))));
        assert!(matches!(
            send("nope", Some("1")),
            Err(ControlError::UnknownCommand(_))
        ));
    }
}
