//! Security of the cluster port: mutual TLS (`cluster { tls { } }`) and route credentials
//! (`cluster { authorization { user, password } }`).
//!
//! With TLS, every connection in either direction is TLS, the listener demands a client
//! certificate chained to the cluster CA, and the dialer verifies the listener's certificate
//! (chain and host name) against the same CA: a node without a valid certificate can neither
//! join, vote, nor receive data. With credentials, every call on the cluster port (node links
//! and Raft) must carry them, and this node presents its own on every call it makes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use jetraft_raft::network::grpc::{LinkSecurity, ROUTE_AUTH_HEADER};
use parking_lot::Mutex;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic::{Request, Status};

use crate::config::{ClusterConfig, RouteAuth, TlsConfig};
use crate::tls::TlsError;

/// Shortest interval between two log lines about refused route credentials.
const REFUSAL_REPORT: Duration = Duration::from_secs(10);

/// The PEM files of a cluster `tls { }` block, checked (cert, key and CA must parse, the key
/// must match the certificate).
struct Pem {
    cert: Vec<u8>,
    key: Vec<u8>,
    ca: Vec<u8>,
}

fn read_pem(tls: &TlsConfig) -> Result<Pem, TlsError> {
    let Some(ca_file) = &tls.ca_file else {
        return Err(TlsError::Config(
            "cluster tls needs a \"ca_file\": both ends of a route verify the other's certificate"
                .into(),
        ));
    };
    // Parses everything (and matches key to certificate) with rustls first, for clear errors.
    let mut check = tls.clone();
    check.verify = true;
    crate::tls::server_config(&check)?;
    let read = |what: &'static str, path: &std::path::Path| {
        std::fs::read(path).map_err(|e| TlsError::File {
            what,
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
    };
    Ok(Pem {
        cert: read("cert_file", &tls.cert_file)?,
        key: read("key_file", &tls.key_file)?,
        ca: read("ca_file", ca_file)?,
    })
}

/// The listener side of cluster TLS, if configured.
pub fn server_tls(cfg: &ClusterConfig) -> Result<Option<ServerTlsConfig>, TlsError> {
    let Some(tls) = &cfg.tls else {
        return Ok(None);
    };
    let pem = read_pem(tls)?;
    Ok(Some(
        ServerTlsConfig::new()
            .identity(Identity::from_pem(pem.cert, pem.key))
            .client_ca_root(Certificate::from_pem(pem.ca))
            .timeout(tls.timeout),
    ))
}

/// The dialing side: TLS and the credentials this node presents.
pub fn link_security(cfg: &ClusterConfig) -> Result<LinkSecurity, TlsError> {
    let tls = match &cfg.tls {
        Some(tls) => {
            read_pem(tls)?;
            let ca = tls.ca_file.as_deref().unwrap_or(std::path::Path::new(""));
            Some(
                LinkSecurity::client_config(
                    crate::tls::provider(),
                    crate::tls::load_roots(ca)?,
                    crate::tls::load_certs("cert_file", &tls.cert_file)?,
                    crate::tls::load_key(&tls.key_file)?,
                )
                .map_err(TlsError::Config)?,
            )
        }
        None => None,
    };
    let credentials = cfg
        .auth
        .as_ref()
        .and_then(|a| encode_credentials(&a.user, &a.password).parse().ok());
    Ok(LinkSecurity { tls, credentials })
}

/// `user:password`, base64.
fn encode_credentials(user: &str, password: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

/// Checks the route credentials of every call on the cluster port (passes everything when no
/// `cluster { authorization }` is configured).
#[derive(Clone, Default)]
pub struct RouteGate {
    inner: Option<Arc<Gate>>,
}

struct Gate {
    auth: RouteAuth,
    /// The last header value that verified (a bcrypt check per Raft call would be too slow).
    accepted: Mutex<Option<String>>,
    /// When a refusal was last logged.
    reported: Mutex<Option<Instant>>,
}

impl RouteGate {
    /// A gate for the configured credentials.
    pub fn new(auth: Option<&RouteAuth>) -> Self {
        Self {
            inner: auth.map(|auth| {
                Arc::new(Gate {
                    auth: auth.clone(),
                    accepted: Mutex::new(None),
                    reported: Mutex::new(None),
                })
            }),
        }
    }
}

impl Gate {
    fn allows(&self, header: Option<&str>) -> bool {
        let Some(value) = header else {
            return false;
        };
        if self.accepted.lock().as_deref() == Some(value) {
            return true;
        }
        let Some((user, pass)) = base64::engine::general_purpose::STANDARD
            .decode(value)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|s| {
                s.split_once(':')
                    .map(|(u, p)| (u.to_string(), p.to_string()))
            })
        else {
            return false;
        };
        let ok = user == self.auth.user && crate::auth::secret_matches(&self.auth.password, &pass);
        if ok {
            *self.accepted.lock() = Some(value.to_string());
        }
        ok
    }

    fn report(&self, from: Option<std::net::SocketAddr>) {
        let now = Instant::now();
        let mut last = self.reported.lock();
        if last.is_some_and(|at| now.duration_since(at) < REFUSAL_REPORT) {
            return;
        }
        *last = Some(now);
        drop(last);
        let from = from.map(|a| a.to_string()).unwrap_or_default();
        tracing::warn!(%from, "route authorization failed: refused a call on the cluster port");
    }
}

impl tonic::service::Interceptor for RouteGate {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(gate) = &self.inner else {
            return Ok(request);
        };
        let header = request
            .metadata()
            .get(ROUTE_AUTH_HEADER)
            .and_then(|v| v.to_str().ok());
        if gate.allows(header) {
            Ok(request)
        } else {
            gate.report(request.remote_addr());
            Err(Status::unauthenticated("Authorization Violation"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(password: &str) -> Gate {
        Gate {
            auth: RouteAuth {
                user: "ruser".into(),
                password: password.into(),
            },
            accepted: Mutex::new(None),
            reported: Mutex::new(None),
        }
    }

    #[test]
    fn only_the_configured_credentials_pass() {
        let g = gate("rpass");
        assert!(g.allows(Some(&encode_credentials("ruser", "rpass"))));
        assert!(g.allows(Some(&encode_credentials("ruser", "rpass"))));
        assert!(!g.allows(Some(&encode_credentials("ruser", "wrong"))));
        assert!(!g.allows(Some(&encode_credentials("other", "rpass"))));
        assert!(!g.allows(Some("not base64!")));
        assert!(!g.allows(None));
    }
}
