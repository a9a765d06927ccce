//! [`ConfigError`], the one error type of configuration loading (command line and file), and
//! [`Location`], a position in a config file.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A position in a config file: the file as it was named (the `-c` argument, or the including
/// file's directory joined with the `include` argument), a 1-based line and a 1-based column
/// counted in characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file, as named by the user or by an `include`.
    pub file: Arc<Path>,
    /// Line, starting at 1.
    pub line: u32,
    /// Column in characters, starting at 1.
    pub column: u32,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.column)
    }
}

/// Why the configuration could not be built. The server must refuse to start on any of these.
///
/// `Display` gives one line meant for the operator, e.g.
/// `nats.conf:7:3: expected a number for "port", got "abc"`. For [`ConfigError::Read`] and
/// [`ConfigError::Include`] the operating-system reason is the [`std::error::Error::source`], so
/// print the chain (anyhow's `{:#}`) to show it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The `-c` file could not be read.
    #[error("cannot read config file {}", path.display())]
    Read {
        /// The file as given.
        path: PathBuf,
        /// The operating-system error.
        #[source]
        source: io::Error,
    },
    /// A file named by `include` could not be read.
    #[error("{location}: cannot read included file {}", path.display())]
    Include {
        /// Where the `include` statement is.
        location: Location,
        /// The included file, joined to the including file's directory.
        path: PathBuf,
        /// The operating-system error.
        #[source]
        source: io::Error,
    },
    /// A syntax error, an undefined variable, or a known key with a wrong or out-of-range value.
    #[error("{location}: {message}")]
    Invalid {
        /// Where the offending token starts.
        location: Location,
        /// What is wrong, naming the key when there is one.
        message: String,
    },
    /// A command-line flag that jetraft does not know (Go's `flag` wording).
    #[error("flag provided but not defined: {flag}")]
    UnknownFlag {
        /// The flag as typed, without any `=value`.
        flag: String,
    },
    /// A flag that takes a value was last on the command line.
    #[error("flag needs an argument: {flag}")]
    MissingValue {
        /// The flag as typed.
        flag: String,
    },
    /// A flag's value could not be parsed or is out of range.
    #[error("invalid value {value:?} for flag {flag}: {reason}")]
    InvalidFlagValue {
        /// The flag as typed, without any `=value`.
        flag: String,
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An argument that starts with dashes but is no flag, such as `---p` or `-=1`.
    #[error("bad flag syntax: {0}")]
    BadFlagSyntax(String),
    /// A positional argument other than `version` or `help` (nats-server's wording).
    #[error("unrecognized command: {0:?}")]
    UnknownCommand(String),
}

impl ConfigError {
    /// An [`ConfigError::Invalid`] at `location`.
    pub(crate) fn invalid(location: &Location, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            location: location.clone(),
            message: message.into(),
        }
    }
}
