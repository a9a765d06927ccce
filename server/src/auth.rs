//! Authentication (token, user/password, users list with plain or bcrypt secrets, NKEY users
//! signing the INFO nonce, client certificates mapped to users) and the publish/subscribe
//! permission checks of an authenticated user.
//!
//! Permission rules follow nats-server: an empty allow list allows everything that is not
//! denied; deny always wins. A wildcard subscription is allowed when its whole subject space
//! lies inside an allow entry; messages on denied subjects are then filtered at delivery.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::config::{AuthConfig, Permissions, SubjectPermission};
use crate::protocol::ConnectOptions;
use crate::router::subject;

/// Largest number of cached publish decisions per user.
const PUB_CACHE_MAX: usize = 1024;

/// Users by name: password and permissions.
type Users = HashMap<String, (String, Option<Arc<UserPermissions>>)>;

/// Checks credentials from CONNECT against the configuration.
#[derive(Clone)]
pub struct Authenticator {
    config: AuthConfig,
    users: Users,
    /// NKEY users by public key.
    nkeys: HashMap<String, Option<Arc<UserPermissions>>>,
    /// `verify_and_map`: client certificates name the user (no password).
    map_certs: bool,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets stay out of debug output.
        f.debug_struct("Authenticator")
            .field("users", &self.users.len())
            .field("nkeys", &self.nkeys.len())
            .field("map_certs", &self.map_certs)
            .finish_non_exhaustive()
    }
}

/// What the connection itself proves, next to CONNECT's fields.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConnProof<'a> {
    /// The nonce sent in this connection's INFO, which NKEY users sign.
    pub nonce: Option<&'a str>,
    /// Names of the verified client certificate ([`crate::tls::identity::cert_identities`]).
    pub cert_identities: Option<&'a [String]>,
}

/// A failed authentication. nats-server always answers `Authorization Violation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("authorization violation")]
pub struct AuthError;

/// The result of a successful authentication.
#[derive(Debug, Clone, Default)]
pub struct Authenticated {
    /// User name, when authenticated by user.
    pub user: Option<String>,
    /// Permissions, when restricted.
    pub perms: Option<Arc<UserPermissions>>,
}

impl Authenticator {
    /// Builds the authenticator from the configuration; `map_certs` is the client TLS
    /// `verify_and_map` setting.
    pub fn new(config: &AuthConfig) -> Self {
        Self::with_cert_mapping(config, false)
    }

    /// [`Authenticator::new`] with client certificates naming the user (`verify_and_map`).
    pub fn with_cert_mapping(config: &AuthConfig, map_certs: bool) -> Self {
        let mut users = Users::new();
        let mut nkeys = HashMap::new();
        for u in &config.users {
            let perms = u
                .permissions
                .as_ref()
                .map(|p| Arc::new(UserPermissions::new(p)));
            match &u.nkey {
                Some(nkey) => {
                    nkeys.insert(nkey.clone(), perms);
                }
                None => {
                    users.insert(u.user.clone(), (u.password.clone(), perms));
                }
            }
        }
        Self {
            config: config.clone(),
            map_certs: map_certs && !users.is_empty(),
            users,
            nkeys,
        }
    }

    /// Whether INFO must carry a nonce (NKEY users are configured).
    pub fn wants_nonce(&self) -> bool {
        !self.nkeys.is_empty()
    }

    /// Whether clients must authenticate.
    pub fn required(&self) -> bool {
        self.config.required()
    }

    /// Checks the credentials of a CONNECT on a connection that proves nothing else.
    pub fn authenticate(&self, opts: &ConnectOptions) -> Result<Authenticated, AuthError> {
        self.authenticate_conn(opts, ConnProof::default())
    }

    /// Checks the credentials of a CONNECT, with the nonce and client certificate of its
    /// connection. Order as in nats-server: a mapped client certificate (only way in when
    /// `verify_and_map` is on), an NKEY signature, a token, then user and password.
    pub fn authenticate_conn(
        &self,
        opts: &ConnectOptions,
        proof: ConnProof<'_>,
    ) -> Result<Authenticated, AuthError> {
        if !self.required() {
            return Ok(Authenticated::default());
        }
        if self.map_certs {
            let names = proof.cert_identities.ok_or(AuthError)?;
            let user = names
                .iter()
                .find(|n| self.users.contains_key(n.as_str()))
                .ok_or(AuthError)?;
            if opts.user.as_deref().is_some_and(|u| u != user) {
                return Err(AuthError);
            }
            return Ok(Authenticated {
                user: Some(user.clone()),
                perms: self.users.get(user).and_then(|(_, p)| p.clone()),
            });
        }
        if let Some(nkey) = &opts.nkey
            && !self.nkeys.is_empty()
        {
            let perms = self.nkeys.get(nkey).ok_or(AuthError)?;
            let nonce = proof.nonce.ok_or(AuthError)?;
            let sig = opts.sig.as_deref().ok_or(AuthError)?;
            return if nkey_signed(nkey, nonce, sig) {
                Ok(Authenticated {
                    user: Some(nkey.clone()),
                    perms: perms.clone(),
                })
            } else {
                Err(AuthError)
            };
        }
        if let Some(token) = &self.config.token {
            let given = opts.auth_token.as_deref().ok_or(AuthError)?;
            return if secret_matches(token, given) {
                Ok(Authenticated::default())
            } else {
                Err(AuthError)
            };
        }
        let user = opts.user.as_deref().ok_or(AuthError)?;
        let pass = opts.pass.as_deref().unwrap_or("");
        if let (Some(u), Some(p)) = (&self.config.user, &self.config.password)
            && u == user
            && secret_matches(p, pass)
        {
            return Ok(Authenticated {
                user: Some(user.to_string()),
                perms: None,
            });
        }
        match self.users.get(user) {
            Some((p, perms)) if secret_matches(p, pass) => Ok(Authenticated {
                user: Some(user.to_string()),
                perms: perms.clone(),
            }),
            _ => Err(AuthError),
        }
    }
}

/// What a connection proved at CONNECT, kept on the connection so a config reload can check
/// it against the new users (nats-server re-authorizes every client on reload).
#[derive(Clone)]
pub struct ConnCredentials {
    /// CONNECT's credential fields only (user, pass, auth_token, nkey, sig).
    opts: ConnectOptions,
    /// Names of the verified client certificate, if any.
    cert_identities: Option<Vec<String>>,
}

impl std::fmt::Debug for ConnCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets stay out of debug output.
        f.debug_struct("ConnCredentials")
            .field("user", &self.opts.user)
            .field("nkey", &self.opts.nkey)
            .finish_non_exhaustive()
    }
}

impl ConnCredentials {
    /// Keeps the credential fields of `opts` and the certificate names.
    pub fn new(opts: &ConnectOptions, cert_identities: Option<Vec<String>>) -> Self {
        Self {
            opts: ConnectOptions {
                user: opts.user.clone(),
                pass: opts.pass.clone(),
                auth_token: opts.auth_token.clone(),
                nkey: opts.nkey.clone(),
                sig: opts.sig.clone(),
                ..ConnectOptions::default()
            },
            cert_identities,
        }
    }
}

impl Authenticator {
    /// Whether the user or NKEY `creds` name is no longer configured (nats-server closes
    /// such clients on reload without an `-ERR`). Credentials naming nobody (a token, a
    /// mapped certificate, none) are never gone.
    pub fn user_removed(&self, creds: &ConnCredentials) -> bool {
        if let Some(nkey) = &creds.opts.nkey {
            return !self.nkeys.contains_key(nkey);
        }
        match &creds.opts.user {
            Some(user) => {
                !self.users.contains_key(user) && self.config.user.as_deref() != Some(user)
            }
            None => false,
        }
    }

    /// Checks credentials kept from an earlier CONNECT (after a reload), with the nonce of
    /// their connection's INFO.
    pub fn recheck(
        &self,
        creds: &ConnCredentials,
        nonce: Option<&str>,
    ) -> Result<Authenticated, AuthError> {
        self.authenticate_conn(
            &creds.opts,
            ConnProof {
                nonce,
                cert_identities: creds.cert_identities.as_deref(),
            },
        )
    }
}

/// Whether `sig` (base64url without padding, or standard base64) is `nkey`'s signature of
/// `nonce`.
fn nkey_signed(nkey: &str, nonce: &str, sig: &str) -> bool {
    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    let Ok(sig) = URL_SAFE_NO_PAD
        .decode(sig)
        .or_else(|_| STANDARD.decode(sig))
    else {
        return false;
    };
    nkeys::KeyPair::from_public_key(nkey)
        .and_then(|k| k.verify(nonce.as_bytes(), &sig))
        .is_ok()
}

/// A fresh INFO nonce: 11 random bytes, base64url without padding (as nats-server).
pub fn new_nonce() -> String {
    use base64::Engine;
    let bytes: [u8; 11] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Compares a configured secret (plain or bcrypt) with what the client sent.
pub(crate) fn secret_matches(configured: &str, given: &str) -> bool {
    if is_bcrypt(configured) {
        bcrypt::verify(given, configured).unwrap_or(false)
    } else {
        constant_time_eq(configured.as_bytes(), given.as_bytes())
    }
}

fn is_bcrypt(s: &str) -> bool {
    ["$2a$", "$2b$", "$2x$", "$2y$"]
        .iter()
        .any(|p| s.starts_with(p))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Publish/subscribe permissions of one user, with a cache of publish decisions.
#[derive(Debug)]
pub struct UserPermissions {
    publish: Option<SubjectPermission>,
    subscribe: Option<SubjectPermission>,
    pub_cache: Mutex<HashMap<String, bool>>,
}

impl UserPermissions {
    /// Builds the checker from the configured permissions.
    pub fn new(p: &Permissions) -> Self {
        Self {
            publish: p.publish.clone(),
            subscribe: p.subscribe.clone(),
            pub_cache: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the user may publish to the literal `subject`.
    pub fn can_publish(&self, subject_: &str) -> bool {
        let Some(perm) = &self.publish else {
            return true;
        };
        if let Some(v) = self.pub_cache.lock().get(subject_) {
            return *v;
        }
        let allowed = (perm.allow.is_empty()
            || perm.allow.iter().any(|a| subject::matches(a, subject_)))
            && !perm.deny.iter().any(|d| subject::matches(d, subject_));
        let mut cache = self.pub_cache.lock();
        if cache.len() >= PUB_CACHE_MAX {
            cache.clear();
        }
        cache.insert(subject_.to_string(), allowed);
        allowed
    }

    /// Whether the user may subscribe to `subject_` (possibly a wildcard).
    pub fn can_subscribe(&self, subject_: &str) -> bool {
        let Some(perm) = &self.subscribe else {
            return true;
        };
        let allowed =
            perm.allow.is_empty() || perm.allow.iter().any(|a| subject::is_subset(subject_, a));
        allowed && !perm.deny.iter().any(|d| subject::is_subset(subject_, d))
    }

    /// Whether a message on the literal `subject_` must not be delivered to this user's
    /// subscriptions (a wildcard subscription overlapping a denied subject).
    pub fn deliver_denied(&self, subject_: &str) -> bool {
        self.subscribe
            .as_ref()
            .is_some_and(|p| p.deny.iter().any(|d| subject::matches(d, subject_)))
    }

    /// Whether any subscribe deny rule exists (so delivery must be filtered).
    pub fn has_subscribe_deny(&self) -> bool {
        self.subscribe.as_ref().is_some_and(|p| !p.deny.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UserConfig;

    fn connect(user: Option<&str>, pass: Option<&str>, token: Option<&str>) -> ConnectOptions {
        ConnectOptions {
            user: user.map(str::to_string),
            pass: pass.map(str::to_string),
            auth_token: token.map(str::to_string),
            ..ConnectOptions::default()
        }
    }

    #[test]
    fn no_auth_configured_accepts_anyone() {
        let a = Authenticator::new(&AuthConfig::default());
        assert!(!a.required());
        assert!(a.authenticate(&connect(None, None, None)).is_ok());
    }

    #[test]
    fn token_must_match() {
        let a = Authenticator::new(&AuthConfig {
            token: Some("s3cr3t".into()),
            ..Default::default()
        });
        assert!(a.authenticate(&connect(None, None, Some("s3cr3t"))).is_ok());
        assert_eq!(
            a.authenticate(&connect(None, None, Some("nope")))
                .unwrap_err(),
            AuthError
        );
        assert!(a.authenticate(&connect(None, None, None)).is_err());
    }

    #[test]
    fn bcrypt_password_is_verified() {
        let hash = bcrypt::hash("pw", 4).unwrap();
        let a = Authenticator::new(&AuthConfig {
            user: Some("u".into()),
            password: Some(hash),
            ..Default::default()
        });
        assert!(
            a.authenticate(&connect(Some("u"), Some("pw"), None))
                .is_ok()
        );
        assert!(
            a.authenticate(&connect(Some("u"), Some("bad"), None))
                .is_err()
        );
        assert!(
            a.authenticate(&connect(Some("x"), Some("pw"), None))
                .is_err()
        );
    }

    #[test]
    fn users_list_carries_permissions() {
        let perms = Permissions {
            publish: Some(SubjectPermission {
                allow: vec!["a.>".into()],
                deny: vec!["a.secret".into()],
            }),
            subscribe: Some(SubjectPermission {
                allow: vec![],
                deny: vec!["private.>".into()],
            }),
        };
        let a = Authenticator::new(&AuthConfig {
            users: vec![UserConfig {
                user: "bob".into(),
                password: "pw".into(),
                nkey: None,
                permissions: Some(perms),
            }],
            ..Default::default()
        });
        let ok = a
            .authenticate(&connect(Some("bob"), Some("pw"), None))
            .unwrap();
        let p = ok.perms.unwrap();
        assert!(p.can_publish("a.b"));
        assert!(p.can_publish("a.b")); // cached
        assert!(!p.can_publish("a.secret"));
        assert!(!p.can_publish("b"));
        assert!(p.can_subscribe("public.x"));
        assert!(!p.can_subscribe("private.x"));
        assert!(!p.can_subscribe("private.>"));
        assert!(p.can_subscribe(">"));
        assert!(p.deliver_denied("private.x"));
        assert!(!p.deliver_denied("public.x"));
    }

    #[test]
    fn wildcard_subscription_must_lie_inside_allow() {
        let p = UserPermissions::new(&Permissions {
            publish: None,
            subscribe: Some(SubjectPermission {
                allow: vec!["foo.*".into()],
                deny: vec![],
            }),
        });
        assert!(p.can_subscribe("foo.bar"));
        assert!(p.can_subscribe("foo.*"));
        assert!(!p.can_subscribe("foo.>"));
        assert!(!p.can_subscribe("bar"));
    }
}
