//! Security blocks of the config file: `tls { }` (clients and routes), `cluster { authorization
//! { } }`, and the refusal of security settings jetraft does not implement.
//!
//! Rule: a security-relevant setting jetraft cannot honour makes loading fail with a message
//! naming it; nothing security-related is ignored.

use std::path::PathBuf;

use super::error::ConfigError;
use super::mapping::{or_default, unsupported};
use super::syntax::{Entry, Node, Value};
use crate::config::{DEFAULT_TLS_TIMEOUT, RouteAuth, TlsConfig, TlsVersion};

/// Top-level blocks of protocols jetraft does not serve: their TLS and authentication settings
/// are refused (a copied config must not look secured when it is not).
const FOREIGN_LISTENERS: [&str; 6] = ["websocket", "ws", "leafnodes", "leaf", "gateway", "mqtt"];

/// Keys inside those blocks that are security settings.
const FOREIGN_SECURITY_KEYS: [&str; 8] = [
    "tls",
    "authorization",
    "users",
    "no_auth_user",
    "username",
    "user",
    "password",
    "token",
];

/// Top-level keys refused outright: OCSP stapling and peer checks.
const REFUSED_TOP_LEVEL: [&str; 3] = ["ocsp", "ocsp_cache", "ocsp_peer"];

/// Checks a top-level key jetraft does not read: refuses it if it is security-relevant.
pub(super) fn refused_top_level(node: &Node, key: &str) -> Result<(), ConfigError> {
    let lower = key.to_ascii_lowercase();
    if REFUSED_TOP_LEVEL.contains(&lower.as_str()) {
        return Err(unsupported(node, key, "OCSP is not implemented"));
    }
    if FOREIGN_LISTENERS.contains(&lower.as_str())
        && let Value::Map(entries) = &node.value
        && let Some(e) = entries
            .iter()
            .find(|e| FOREIGN_SECURITY_KEYS.contains(&e.key.to_ascii_lowercase().as_str()))
    {
        return Err(e.node.invalid(format!(
            "{:?} in {key:?} is not supported by jetraft; jetraft does not serve {key} connections, \
             remove the block",
            e.key
        )));
    }
    Ok(())
}

/// A `tls { cert_file, key_file, ca_file, verify, verify_and_map, timeout, handshake_first,
/// min_version }` block. Every other key (`cipher_suites`, `curve_preferences`,
/// `pinned_certs`, `cert_store`, `insecure`, `ocsp_peer`, ...) is refused.
pub(super) fn tls_block(node: &Node, key: &str) -> Result<TlsConfig, ConfigError> {
    let mut cert_file = None;
    let mut key_file = None;
    let mut tls = TlsConfig::new(PathBuf::new(), PathBuf::new());
    for Entry {
        key,
        node,
        used_as_variable,
        ..
    } in node.entries(key)?
    {
        let key = key.as_str();
        match key.to_ascii_lowercase().as_str() {
            "cert_file" => cert_file = Some(PathBuf::from(node.string(key)?)),
            "key_file" => key_file = Some(PathBuf::from(node.string(key)?)),
            "ca_file" => tls.ca_file = Some(PathBuf::from(node.string(key)?)),
            "verify" => tls.verify = node.boolean(key)?,
            "verify_and_map" => tls.verify_and_map = node.boolean(key)?,
            "timeout" => tls.timeout = or_default(node.duration(key)?, DEFAULT_TLS_TIMEOUT),
            "handshake_first" | "first" | "immediate" => {
                tls.handshake_first = node.boolean(key).map_err(|_| {
                    unsupported(
                        node,
                        key,
                        "only true or false is supported (no fallback delay or \"auto\")",
                    )
                })?;
            }
            "min_version" => {
                tls.min_version = match node.string(key)?.as_str() {
                    "1.2" => TlsVersion::V1_2,
                    "1.3" => TlsVersion::V1_3,
                    other => {
                        return Err(node.invalid(format!(
                            "{key:?} {other:?} is not supported; use \"1.2\" or \"1.3\""
                        )));
                    }
                };
            }
            _ if *used_as_variable => {}
            _ => return Err(unsupported(node, key, "refusing to ignore a tls setting")),
        }
    }
    let (Some(cert), Some(private_key)) = (cert_file, key_file) else {
        return Err(node.invalid(format!("{key:?} needs both \"cert_file\" and \"key_file\"")));
    };
    tls.cert_file = cert;
    tls.key_file = private_key;
    if tls.requires_client_cert() && tls.ca_file.is_none() {
        return Err(node.invalid(format!(
            "{key:?}: \"verify\" and \"verify_and_map\" need a \"ca_file\" to verify \
             certificates against"
        )));
    }
    Ok(tls)
}

/// `cluster { authorization { user, password, timeout } }`; other keys are refused.
pub(super) fn route_authorization(node: &Node, key: &str) -> Result<RouteAuth, ConfigError> {
    let mut user = None;
    let mut password = None;
    for Entry {
        key,
        node,
        used_as_variable,
        ..
    } in node.entries(key)?
    {
        let key = key.as_str();
        match key.to_ascii_lowercase().as_str() {
            "user" | "username" => user = Some(node.string(key)?),
            "pass" | "password" => password = Some(node.string(key)?),
            "timeout" => {
                node.duration(key)?;
            }
            _ if *used_as_variable => {}
            _ => {
                return Err(unsupported(
                    node,
                    key,
                    "routes authenticate with user and password only",
                ));
            }
        }
    }
    match (user, password) {
        (Some(_), Some(password)) if password.starts_with("$2") => Err(node.invalid(format!(
            "{key:?} in \"cluster\": the route password is presented to peers, so it must be \
             plain text, not a bcrypt hash"
        ))),
        (Some(user), Some(password)) => Ok(RouteAuth { user, password }),
        _ => Err(node.invalid(format!(
            "{key:?} in \"cluster\" needs a user and a password"
        ))),
    }
}

/// Whether `s` is a public user NKEY (`U...`, with a valid checksum).
pub(crate) fn is_user_nkey(s: &str) -> bool {
    s.starts_with('U') && nkeys::KeyPair::from_public_key(s).is_ok()
}
