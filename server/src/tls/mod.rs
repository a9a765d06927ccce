//! TLS with rustls (ring provider, no OpenSSL): loading certificates and keys from PEM files
//! into server configurations for clients ([`server_config`]) and the monitoring port, and the
//! identities a client certificate maps to ([`identity`]).
//!
//! Files are read once at start; a missing or unreadable file, a file without a certificate or
//! key, or a key that does not match the certificate stops the server with an error naming the
//! file. Error messages never contain key material.

pub mod identity;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::{TlsConfig, TlsVersion};

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("tls: {what} {path}: {reason}")]
    File {
        /// Which file (`cert_file`, `key_file`, `ca_file`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What went wrong (no key material).
        reason: String,
    },
    /// rustls refused the combination (e.g. the key does not match the certificate).
    #[error("tls: {0}")]
    Config(String),
}

/// The crypto provider every TLS configuration uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificate chain in `path`.
pub fn load_certs(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let err = |reason: String| TlsError::File {
        what,
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(pem_reason(&e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(pem_reason(&e)))?;
    if certs.is_empty() {
        return Err(err("no PEM certificate found".into()));
    }
    Ok(certs)
}

/// The private key in `path` (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::File {
        what: "key_file",
        path: path.to_path_buf(),
        reason: pem_reason(&e),
    })
}

/// The CA certificates in `path` as a root store.
pub fn load_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs("ca_file", path)? {
        roots.add(cert).map_err(|e| TlsError::File {
            what: "ca_file",
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    }
    Ok(roots)
}

/// A PEM error without echoing file contents.
fn pem_reason(e: &rustls_pki_types::pem::Error) -> String {
    match e {
        rustls_pki_types::pem::Error::Io(io) => io.to_string(),
        rustls_pki_types::pem::Error::NoItemsFound => {
            "no PEM item of the expected kind found".into()
        }
        _ => "malformed PEM".into(),
    }
}

/// TLS 1.3 only.
static TLS13_ONLY: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// The protocol versions allowed from `min`.
fn versions(min: TlsVersion) -> &'static [&'static rustls::SupportedProtocolVersion] {
    match min {
        TlsVersion::V1_2 => rustls::DEFAULT_VERSIONS,
        TlsVersion::V1_3 => TLS13_ONLY,
    }
}

/// A rustls server configuration for `cfg`: this server's certificate, and, when `verify` or
/// `verify_and_map` is set, mandatory client certificates chained to `ca_file`.
pub fn server_config(cfg: &TlsConfig) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = provider();
    let certs = load_certs("cert_file", &cfg.cert_file)?;
    let key = load_key(&cfg.key_file)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions(cfg.min_version))
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match (&cfg.ca_file, cfg.requires_client_cert()) {
        (Some(ca), true) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(load_roots(ca)?), provider)
                    .build()
                    .map_err(|e| TlsError::Config(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(format!("cert_file and key_file: {e}")))?;
    Ok(Arc::new(config))
}

/// The TLS record type of a handshake: the first byte a TLS client sends.
pub const HANDSHAKE_RECORD: u8 = 0x16;

/// The TLS version and cipher suite of an established connection, as nats-server names them
/// in `/connz` (`1.3`, `TLS_AES_128_GCM_SHA256`).
pub fn describe(conn: &rustls::ServerConnection) -> (String, String) {
    let version = match conn.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_3) => "1.3".to_string(),
        Some(rustls::ProtocolVersion::TLSv1_2) => "1.2".to_string(),
        Some(v) => format!("{v:?}"),
        None => String::new(),
    };
    // rustls names the TLS 1.3 suites `TLS13_...`; Go (and so nats-server) `TLS_...`.
    let suite = conn
        .negotiated_cipher_suite()
        .and_then(|s| s.suite().as_str())
        .map(|s| match s.strip_prefix("TLS13_") {
            Some(rest) => format!("TLS_{rest}"),
            None => s.to_string(),
        })
        .unwrap_or_default();
    (version, suite)
}
