//! Authentication (token, user/password, users list with plain or bcrypt secrets, NKEY users
//! signing the INFO nonce, client certificates mapped to users, `no_auth_user`), the account
//! each user belongs to, and the publish/subscribe permission checks of an authenticated user.
//!
//! Permission rules follow nats-server: an empty allow list allows everything that is not
//! denied; deny always wins. A wildcard subscription is allowed when its whole subject space
//! lies inside an allow entry; messages on denied subjects are then filtered at delivery.
//! Subscribe entries of the form `"subject queue"` concern that queue group only (a queue
//! subscription matching such an allow entry is allowed only for a matching group, and one
//! matching such a deny entry is refused). `allow_responses` lets a user publish to the reply
//! subject of each request delivered to it (up to `max` times within `expires`), even where
//! its publish permissions deny it; with `allow_responses` and no publish allow list, nothing
//! else may be published.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::accounts::Accounts;
use crate::config::{
    AuthConfig, GLOBAL_ACCOUNT, Permissions, ResponsePermission, SubjectPermission,
};
use crate::protocol::ConnectOptions;
use crate::router::subject;

/// Largest number of cached publish decisions per user.
const PUB_CACHE_MAX: usize = 1024;

/// Most reply subjects an `allow_responses` user keeps open before expired ones are swept.
const REPLIES_SWEEP_ABOVE: usize = 1024;

/// What a configured user is: permissions and account.
#[derive(Debug, Clone)]
struct UserEntry {
    /// Publish/subscribe permissions, if restricted.
    perms: Option<Arc<UserPermissions>>,
    /// The account the user is in.
    account: Arc<str>,
}

/// Users by name: password, permissions and account.
type Users = HashMap<String, (String, UserEntry)>;

/// Checks credentials from CONNECT against the configuration.
#[derive(Clone)]
pub struct Authenticator {
    config: AuthConfig,
    users: Users,
    /// NKEY users by public key.
    nkeys: HashMap<String, UserEntry>,
    /// `verify_and_map`: client certificates name the user (no password).
    map_certs: bool,
    /// What the configured accounts share.
    accounts: Arc<Accounts>,
    /// The global account's name, shared.
    global: Arc<str>,
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
#[derive(Debug, Clone)]
pub struct Authenticated {
    /// User name, when authenticated by user.
    pub user: Option<String>,
    /// Permissions, when restricted.
    pub perms: Option<Arc<UserPermissions>>,
    /// The account the client is in (`$G` for users outside `accounts { }`).
    pub account: Arc<str>,
}

impl Authenticated {
    fn global(global: &Arc<str>) -> Self {
        Self {
            user: None,
            perms: None,
            account: global.clone(),
        }
    }

    fn user(name: &str, entry: &UserEntry) -> Self {
        Self {
            user: Some(name.to_string()),
            perms: entry.perms.clone(),
            account: entry.account.clone(),
        }
    }
}

impl Authenticator {
    /// Builds the authenticator from the configuration; `map_certs` is the client TLS
    /// `verify_and_map` setting.
    pub fn new(config: &AuthConfig) -> Self {
        Self::with_cert_mapping(config, false)
    }

    /// [`Authenticator::new`] with client certificates naming the user (`verify_and_map`).
    pub fn with_cert_mapping(config: &AuthConfig, map_certs: bool) -> Self {
        let global: Arc<str> = Arc::from(GLOBAL_ACCOUNT);
        let accounts = Arc::new(Accounts::from_config(config));
        let mut users = Users::new();
        let mut nkeys = HashMap::new();
        for (u, account) in config.all_users() {
            let entry = UserEntry {
                perms: u
                    .permissions
                    .as_ref()
                    .map(|p| Arc::new(UserPermissions::new(p))),
                account: account
                    .and_then(|a| accounts.name(a))
                    .unwrap_or_else(|| global.clone()),
            };
            match &u.nkey {
                Some(nkey) => {
                    nkeys.insert(nkey.clone(), entry);
                }
                None => {
                    users.insert(u.user.clone(), (u.password.clone(), entry));
                }
            }
        }
        Self {
            config: config.clone(),
            map_certs: map_certs && !users.is_empty(),
            users,
            nkeys,
            accounts,
            global,
        }
    }

    /// What the configured accounts share (the bus applies it).
    pub fn accounts(&self) -> &Arc<Accounts> {
        &self.accounts
    }

    /// INFO's `auth_required`: false with a `no_auth_user`, as nats-server (a client without
    /// credentials gets in as that user).
    pub fn info_auth_required(&self) -> bool {
        self.required() && self.config.no_auth_user.is_none()
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
            return Ok(Authenticated::global(&self.global));
        }
        if let Some(name) = &self.config.no_auth_user
            && !self.map_certs
            && opts.user.is_none()
            && opts.pass.is_none()
            && opts.auth_token.is_none()
            && opts.nkey.is_none()
        {
            if let Some((_, entry)) = self.users.get(name) {
                return Ok(Authenticated::user(name, entry));
            }
            if let Some(entry) = self.nkeys.get(name) {
                return Ok(Authenticated::user(name, entry));
            }
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
            return match self.users.get(user) {
                Some((_, entry)) => Ok(Authenticated::user(user, entry)),
                None => Err(AuthError),
            };
        }
        if let Some(nkey) = &opts.nkey
            && !self.nkeys.is_empty()
        {
            let entry = self.nkeys.get(nkey).ok_or(AuthError)?;
            let nonce = proof.nonce.ok_or(AuthError)?;
            let sig = opts.sig.as_deref().ok_or(AuthError)?;
            return if nkey_signed(nkey, nonce, sig) {
                Ok(Authenticated::user(nkey, entry))
            } else {
                Err(AuthError)
            };
        }
        if let Some(token) = &self.config.token {
            let given = opts.auth_token.as_deref().ok_or(AuthError)?;
            return if secret_matches(token, given) {
                Ok(Authenticated::global(&self.global))
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
                ..Authenticated::global(&self.global)
            });
        }
        match self.users.get(user) {
            Some((p, entry)) if secret_matches(p, pass) => Ok(Authenticated::user(user, entry)),
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

/// Publish/subscribe permissions of one user, with a cache of publish decisions and the reply
/// subjects `allow_responses` opened.
#[derive(Debug)]
pub struct UserPermissions {
    publish: Option<SubjectPermission>,
    subscribe: Option<SubjectPermission>,
    /// `allow_responses`.
    responses: Option<ResponsePermission>,
    /// Reply subjects of delivered requests: when delivered, answers so far.
    replies: Mutex<HashMap<String, (Instant, i64)>>,
    pub_cache: Mutex<HashMap<String, bool>>,
}

/// A subscribe permission entry: a pattern and, for `"subject queue"`, a queue group.
fn split_queue(entry: &str) -> (&str, Option<&str>) {
    match entry.split_once(' ') {
        Some((subject_, queue)) => (subject_, Some(queue.trim())),
        None => (entry, None),
    }
}

/// Of the subscribe permission `entries` whose pattern covers `subject_`: whether a plain one
/// is among them, and the queue groups of the `"subject queue"` ones.
fn matching_entries<'a>(entries: &'a [String], subject_: &str) -> (bool, Vec<&'a str>) {
    let mut plain = false;
    let mut groups = Vec::new();
    for (pattern, group) in entries.iter().map(|e| split_queue(e)) {
        if subject::is_subset(subject_, pattern) {
            match group {
                Some(g) => groups.push(g),
                None => plain = true,
            }
        }
    }
    (plain, groups)
}

/// Whether `queue` is one of the queue groups of the matching entries (nats-server's
/// `queueMatches`: a literal name, or a wildcard group name covering it).
fn queue_matches(queue: &str, groups: &[&str]) -> bool {
    groups
        .iter()
        .any(|g| *g == queue || (!subject::is_literal(g) && subject::is_subset(queue, g)))
}

impl UserPermissions {
    /// Builds the checker from the configured permissions.
    pub fn new(p: &Permissions) -> Self {
        Self {
            publish: p.publish.clone(),
            subscribe: p.subscribe.clone(),
            responses: p.responses,
            replies: Mutex::new(HashMap::new()),
            pub_cache: Mutex::new(HashMap::new()),
        }
    }

    /// The permissions as nats-server shows a user's (`$SYS.REQ.USER.INFO`): `publish` and
    /// `subscribe` with their `allow`/`deny` lists (empty ones left out), and `responses`
    /// (`max`, `ttl` in nanoseconds) with `allow_responses`.
    pub fn public_json(&self) -> serde_json::Value {
        let list = |p: &Option<SubjectPermission>| {
            let mut m = serde_json::Map::new();
            if let Some(p) = p {
                for (key, entries) in [("allow", &p.allow), ("deny", &p.deny)] {
                    if !entries.is_empty() {
                        m.insert(key.into(), entries.clone().into());
                    }
                }
            }
            serde_json::Value::Object(m)
        };
        let mut out = serde_json::json!({
            "publish": list(&self.publish),
            "subscribe": list(&self.subscribe),
        });
        if let Some(r) = &self.responses {
            out["responses"] = serde_json::json!({
                "max": r.max_msgs,
                "ttl": u64::try_from(r.expires.as_nanos()).unwrap_or(u64::MAX),
            });
        }
        out
    }

    /// Whether the user may publish to the literal `subject`: its publish permissions, or a
    /// reply subject `allow_responses` opened.
    pub fn can_publish(&self, subject_: &str) -> bool {
        self.static_publish(subject_) || self.response_allowed(subject_, Instant::now())
    }

    /// The publish permissions alone (cached).
    fn static_publish(&self, subject_: &str) -> bool {
        if self.publish.is_none() && self.responses.is_none() {
            return true;
        }
        if let Some(v) = self.pub_cache.lock().get(subject_) {
            return *v;
        }
        let (allow, deny): (&[String], &[String]) = match &self.publish {
            Some(p) => (&p.allow, &p.deny),
            None => (&[], &[]),
        };
        // With allow_responses, an empty allow list allows nothing (nats-server).
        let allow_all = allow.is_empty() && self.responses.is_none();
        let allowed = (allow_all || allow.iter().any(|a| subject::matches(a, subject_)))
            && !deny.iter().any(|d| subject::matches(d, subject_));
        let mut cache = self.pub_cache.lock();
        if cache.len() >= PUB_CACHE_MAX {
            cache.clear();
        }
        cache.insert(subject_.to_string(), allowed);
        allowed
    }

    /// Whether deliveries to this user open reply subjects (`allow_responses`).
    pub fn tracks_responses(&self) -> bool {
        self.responses.is_some()
    }

    /// A request with reply subject `reply` was delivered to this user at `now`: answers to it
    /// are allowed (when the publish permissions do not allow them anyway).
    pub fn allow_response(&self, reply: &str, now: Instant) {
        let Some(rp) = self.responses else {
            return;
        };
        if self.static_publish(reply) {
            return;
        }
        let mut replies = self.replies.lock();
        if replies.len() >= REPLIES_SWEEP_ABOVE {
            let used_up = |n: i64| rp.max_msgs > 0 && n >= rp.max_msgs;
            let expired =
                |at: Instant| !rp.expires.is_zero() && now.duration_since(at) > rp.expires;
            replies.retain(|_, (at, n)| !used_up(*n) && !expired(*at));
        }
        replies.insert(reply.to_string(), (now, 0));
    }

    /// Whether an answer on `subject_` is allowed at `now` (counted against `max`).
    fn response_allowed(&self, subject_: &str, now: Instant) -> bool {
        let Some(rp) = self.responses else {
            return false;
        };
        let mut replies = self.replies.lock();
        let Some((at, n)) = replies.get_mut(subject_) else {
            return false;
        };
        *n += 1;
        let over = rp.max_msgs > 0 && *n > rp.max_msgs;
        let expired = !rp.expires.is_zero() && now.duration_since(*at) > rp.expires;
        if over || expired {
            replies.remove(subject_);
            return false;
        }
        true
    }

    /// Whether the user may subscribe to `subject_` (possibly a wildcard) without a queue
    /// group.
    pub fn can_subscribe(&self, subject_: &str) -> bool {
        self.can_subscribe_queue(subject_, None)
    }

    /// Whether the user may subscribe to `subject_` in queue group `queue` (nats-server's
    /// rules for `"subject queue"` entries).
    pub fn can_subscribe_queue(&self, subject_: &str, queue: Option<&str>) -> bool {
        let Some(perm) = &self.subscribe else {
            return true;
        };
        let mut allowed = true;
        if !perm.allow.is_empty() {
            let (plain, groups) = matching_entries(&perm.allow, subject_);
            allowed = plain;
            if let Some(q) = queue
                && !groups.is_empty()
            {
                allowed = queue_matches(q, &groups);
            }
        }
        if allowed && !perm.deny.is_empty() {
            let (plain, groups) = matching_entries(&perm.deny, subject_);
            allowed = !plain;
            if allowed
                && let Some(q) = queue
                && !groups.is_empty()
            {
                allowed = !queue_matches(q, &groups);
            }
        }
        allowed
    }

    /// Whether a message on the literal `subject_` must not be delivered to this user's
    /// subscriptions (a wildcard subscription overlapping a denied subject).
    pub fn deliver_denied(&self, subject_: &str) -> bool {
        self.subscribe.as_ref().is_some_and(|p| {
            p.deny
                .iter()
                .map(|d| split_queue(d))
                .any(|(d, group)| group.is_none() && subject::matches(d, subject_))
        })
    }

    /// Whether any subscribe deny rule exists (so delivery must be filtered).
    pub fn has_subscribe_deny(&self) -> bool {
        self.subscribe
            .as_ref()
            .is_some_and(|p| p.deny.iter().any(|d| split_queue(d).1.is_none()))
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
            responses: None,
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
            responses: None,
        });
        assert!(p.can_subscribe("foo.bar"));
        assert!(p.can_subscribe("foo.*"));
        assert!(!p.can_subscribe("foo.>"));
        assert!(!p.can_subscribe("bar"));
    }

    fn sub_perms(allow: &[&str], deny: &[&str]) -> UserPermissions {
        UserPermissions::new(&Permissions {
            publish: None,
            subscribe: Some(SubjectPermission {
                allow: allow.iter().map(|s| s.to_string()).collect(),
                deny: deny.iter().map(|s| s.to_string()).collect(),
            }),
            responses: None,
        })
    }

    #[test]
    fn queue_entries_restrict_queue_subscriptions_as_nats_server() {
        let p = sub_perms(&["foo workers", "bar"], &[]);
        assert!(p.can_subscribe_queue("foo", Some("workers")));
        assert!(!p.can_subscribe_queue("foo", Some("others")));
        assert!(!p.can_subscribe("foo"), "only the queue group is allowed");
        assert!(p.can_subscribe("bar"));
        assert!(p.can_subscribe_queue("bar", Some("any")));
        let p = sub_perms(&["foo v1.*"], &[]);
        assert!(p.can_subscribe_queue("foo", Some("v1.a")));
        assert!(!p.can_subscribe_queue("foo", Some("v2.a")));
        let p = sub_perms(&[], &["foo bad"]);
        assert!(p.can_subscribe("foo"));
        assert!(p.can_subscribe_queue("foo", Some("good")));
        assert!(!p.can_subscribe_queue("foo", Some("bad")));
        assert!(
            !p.has_subscribe_deny(),
            "queue denies filter nothing at delivery"
        );
        // Deny wins over allow.
        let p = sub_perms(&["a.>"], &["a.secret"]);
        assert!(p.can_subscribe("a.b"));
        assert!(!p.can_subscribe("a.secret"));
        assert!(!p.can_subscribe_queue("a.secret", Some("q")));
    }

    #[test]
    fn allow_responses_opens_reply_subjects_of_delivered_requests() {
        let p = UserPermissions::new(&Permissions {
            publish: None,
            subscribe: None,
            responses: Some(ResponsePermission {
                max_msgs: 2,
                expires: std::time::Duration::from_secs(10),
            }),
        });
        assert!(
            !p.can_publish("anything"),
            "allow_responses alone allows no publish"
        );
        let now = Instant::now();
        p.allow_response("_INBOX.1", now);
        assert!(p.response_allowed("_INBOX.1", now));
        assert!(p.response_allowed("_INBOX.1", now));
        assert!(!p.response_allowed("_INBOX.1", now), "max 2 answers");
        p.allow_response("_INBOX.2", now);
        let later = now + std::time::Duration::from_secs(11);
        assert!(!p.response_allowed("_INBOX.2", later), "expired");
        assert!(!p.can_publish("_INBOX.3"));
    }

    #[test]
    fn users_are_in_their_accounts_and_no_auth_user_needs_no_credentials() {
        let mut cfg = crate::config::Config::default();
        crate::config::file::apply(
            "accounts { A: { users: [ {user: a, password: a} ] } }\n\
             authorization { users: [ {user: g, password: g} ] }\nno_auth_user: a",
            std::path::Path::new("t.conf"),
            &mut cfg,
        )
        .unwrap();
        let auth = Authenticator::new(&cfg.auth);
        assert!(auth.required() && !auth.info_auth_required());
        let a = auth
            .authenticate(&connect(Some("a"), Some("a"), None))
            .unwrap();
        assert_eq!(&*a.account, "A");
        let g = auth
            .authenticate(&connect(Some("g"), Some("g"), None))
            .unwrap();
        assert_eq!(&*g.account, GLOBAL_ACCOUNT);
        let anon = auth.authenticate(&connect(None, None, None)).unwrap();
        assert_eq!((anon.user.as_deref(), &*anon.account), (Some("a"), "A"));
        assert!(
            auth.authenticate(&connect(Some("g"), Some("x"), None))
                .is_err()
        );
        assert!(auth.accounts().get("A").is_some());
    }
}
