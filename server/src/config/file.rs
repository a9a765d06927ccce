//! The nats-server config-file format: [`load`] a file (following `include`s) into a [`Config`].
//!
//! Layers, each in its own module:
//! - `syntax`: text → tree of entries; resolves `include` and `$VARIABLES`;
//! - `value`: typed reads (strings, numbers, booleans, sizes, durations) with errors naming the key;
//! - `addr`: ports, `host:port` and route URLs (shared with the command line);
//! - `mapping`: which keys jetraft reads and where they go in [`Config`].
//!
//! Every error is a [`ConfigError`] that names the file, line and column. Loading does no I/O
//! other than reading the file and its includes, and reads environment variables only to resolve
//! `$NAME` references that the file does not define.

mod accounts;
pub(super) mod addr;
mod error;
mod mapping;
mod security;
mod syntax;
mod value;

#[cfg(test)]
mod tests_accounts;
#[cfg(test)]
mod tests_mapping;
#[cfg(test)]
mod tests_security;
#[cfg(test)]
mod tests_syntax;

use std::path::Path;
use std::sync::Arc;

pub use error::{ConfigError, Location};

use super::Config;

/// Reads the config file at `path` (and its includes) over [`Config::default()`].
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let mut cfg = Config::default();
    load_into(path, &mut cfg)?;
    Ok(cfg)
}

/// Reads the config file at `path` (and its includes) and applies it over `cfg`. On error,
/// `cfg` is left unchanged.
pub fn load_into(path: &Path, cfg: &mut Config) -> Result<(), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    apply(&text, path, cfg)
}

/// Applies config text over `cfg`, as if read from the file `origin`: errors name `origin`,
/// and `include` paths are relative to its directory. `$NAME` falls back to the process
/// environment. On error, `cfg` is left unchanged.
pub fn apply(text: &str, origin: &Path, cfg: &mut Config) -> Result<(), ConfigError> {
    apply_with_env(text, origin, cfg, &|name| std::env::var(name).ok())
}

/// [`apply`] with an explicit environment, so tests need not change the process environment.
fn apply_with_env(
    text: &str,
    origin: &Path,
    cfg: &mut Config,
    env: syntax::Env<'_>,
) -> Result<(), ConfigError> {
    let entries = syntax::parse_document(text, Arc::from(origin), env)?;
    let mut next = cfg.clone();
    mapping::apply_entries(&entries, &mut next)?;
    *cfg = next;
    Ok(())
}
