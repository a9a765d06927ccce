//! Who is using the console, and the request checks every API call passes.
//!
//! - Without auth configured the console is open (as the monitoring port is): every request acts
//!   as an unrestricted user.
//! - With auth configured, `POST /console/api/login` checks NATS credentials with the node's
//!   [`Authenticator`](crate::auth::Authenticator) (the check a client's CONNECT goes through)
//!   and hands out a session cookie (`HttpOnly`, `SameSite=Strict`); the user's publish and
//!   subscribe permissions then apply to every action, with nats-server's error texts.
//!   Credentials are kept nowhere: the session holds the user name and permissions only.
//! - Cross-site request forgery: a state-changing request must carry the `X-Jetraft-Console`
//!   header (a cross-site form or fetch cannot set it without a CORS preflight, which the
//!   console never allows) and, when the browser sends `Origin`, come from the same host.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};
use parking_lot::Mutex;
use rand::Rng;

use crate::auth::UserPermissions;
use crate::conn::LiveSettings;
use crate::protocol::ConnectOptions;

/// The header a state-changing console request must carry.
pub(crate) const CSRF_HEADER: &str = "x-jetraft-console";
/// The session cookie's name.
pub(crate) const COOKIE: &str = "jetraft_console";
/// How long a session lasts after login.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Most sessions kept at once (the oldest go first).
const MAX_SESSIONS: usize = 1024;

/// One logged-in (or, without auth, anonymous) console user.
#[derive(Debug, Clone, Default)]
pub(crate) struct User {
    /// The user name, when logged in by user.
    pub(crate) name: Option<String>,
    /// Restrictions; `None` allows everything.
    pub(crate) perms: Option<Arc<UserPermissions>>,
}

impl User {
    /// `Ok` when the user may publish to `subject`, else nats-server's violation text.
    pub(crate) fn check_publish(&self, subject: &str) -> Result<(), String> {
        match &self.perms {
            Some(p) if !p.can_publish(subject) => Err(format!(
                "Permissions Violation for Publish to \"{subject}\""
            )),
            _ => Ok(()),
        }
    }

    /// `Ok` when the user may subscribe to `subject`, else nats-server's violation text.
    pub(crate) fn check_subscribe(&self, subject: &str) -> Result<(), String> {
        match &self.perms {
            Some(p) if !p.can_subscribe(subject) => Err(format!(
                "Permissions Violation for Subscription to \"{subject}\""
            )),
            _ => Ok(()),
        }
    }

    /// Whether the user may call the JetStream API at all (the live view's JetStream part).
    pub(crate) fn may_read_jetstream(&self) -> bool {
        self.check_publish("$JS.API.STREAM.LIST").is_ok()
            && self.check_publish("$JS.API.CONSUMER.LIST.X").is_ok()
    }
}

/// The console's sessions.
#[derive(Debug)]
pub(crate) struct Sessions {
    /// The node's reloadable settings: logins are checked against the users in force.
    settings: LiveSettings,
    live: Mutex<HashMap<String, (User, Instant)>>,
}

impl Sessions {
    /// Sessions checked against `auth`.
    pub(crate) fn new(settings: LiveSettings) -> Self {
        Self {
            settings,
            live: Mutex::default(),
        }
    }

    /// Whether the console asks for credentials.
    pub(crate) fn required(&self) -> bool {
        self.settings.load().auth.required()
    }

    /// Checks credentials; on success a new session token.
    pub(crate) fn login(
        &self,
        user: Option<String>,
        pass: Option<String>,
        token: Option<String>,
    ) -> Option<(String, User)> {
        let opts = ConnectOptions {
            user,
            pass,
            auth_token: token,
            ..ConnectOptions::default()
        };
        // The console works in the global account (JetStream's); users of other accounts
        // would see and act outside their namespace, so they cannot log in.
        let authed = self
            .settings
            .load()
            .auth
            .authenticate(&opts)
            .ok()
            .filter(|a| &*a.account == crate::config::GLOBAL_ACCOUNT)?;
        let user = User {
            name: authed.user,
            perms: authed.perms,
        };
        let mut bytes = [0u8; 24];
        rand::rng().fill(&mut bytes);
        let sid: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut live = self.live.lock();
        let now = Instant::now();
        live.retain(|_, (_, at)| now.duration_since(*at) < SESSION_TTL);
        if live.len() >= MAX_SESSIONS
            && let Some(oldest) = live
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone())
        {
            live.remove(&oldest);
        }
        live.insert(sid.clone(), (user.clone(), now));
        Some((sid, user))
    }

    /// Ends the session of these request headers.
    pub(crate) fn logout(&self, headers: &HeaderMap) {
        if let Some(sid) = cookie(headers, COOKIE) {
            self.live.lock().remove(&sid);
        }
    }

    /// The user of a request: anonymous without auth, the session's user with it.
    pub(crate) fn user(&self, headers: &HeaderMap) -> Option<User> {
        if !self.required() {
            return Some(User::default());
        }
        let sid = cookie(headers, COOKIE)?;
        let live = self.live.lock();
        let (user, at) = live.get(&sid)?;
        (at.elapsed() < SESSION_TTL).then(|| user.clone())
    }
}

/// The value of cookie `name` in the request headers.
pub(crate) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// Whether a state-changing request passes the CSRF checks: the custom header is present, and
/// an `Origin` (when sent) names the host the request was sent to.
pub(crate) fn csrf_ok(headers: &HeaderMap) -> bool {
    if headers.get(CSRF_HEADER).is_none() {
        return false;
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or("");
    origin_host == host
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn csrf_needs_the_header_and_a_same_origin() {
        assert!(!csrf_ok(&headers(&[("host", "localhost:8222")])));
        assert!(csrf_ok(&headers(&[("host", "h:1"), (CSRF_HEADER, "1")])));
        assert!(csrf_ok(&headers(&[
            ("host", "h:1"),
            ("origin", "http://h:1"),
            (CSRF_HEADER, "1")
        ])));
        assert!(!csrf_ok(&headers(&[
            ("host", "h:1"),
            ("origin", "http://evil:1"),
            (CSRF_HEADER, "1")
        ])));
    }

    #[test]
    fn cookies_are_found_by_name() {
        let h = headers(&[("cookie", "a=1; jetraft_console=abc; b=2")]);
        assert_eq!(cookie(&h, COOKIE).as_deref(), Some("abc"));
        assert_eq!(cookie(&h, "c"), None);
    }

    #[test]
    fn sessions_check_credentials_and_permissions() {
        use crate::auth::Authenticator;
        use crate::config::{AuthConfig, Permissions, SubjectPermission, UserConfig};
        use crate::conn::ConnSettings;
        let auth = Authenticator::new(&AuthConfig {
            users: vec![UserConfig {
                user: "ro".into(),
                password: "pw".into(),
                nkey: None,
                permissions: Some(Permissions {
                    publish: Some(SubjectPermission {
                        allow: vec!["orders.>".into()],
                        deny: vec![],
                    }),
                    subscribe: None,
                    responses: None,
                }),
            }],
            ..AuthConfig::default()
        });
        let cfg = Arc::new(crate::config::Config::default());
        let s = Sessions::new(LiveSettings::new(ConnSettings::new(
            cfg,
            Arc::new(auth),
            None,
        )));
        assert!(s.required());
        assert!(s.user(&HeaderMap::new()).is_none());
        assert!(
            s.login(Some("ro".into()), Some("no".into()), None)
                .is_none()
        );
        let (sid, user) = s.login(Some("ro".into()), Some("pw".into()), None).unwrap();
        assert!(user.check_publish("orders.1").is_ok());
        assert_eq!(
            user.check_publish("$JS.API.STREAM.LIST").unwrap_err(),
            "Permissions Violation for Publish to \"$JS.API.STREAM.LIST\""
        );
        assert!(!user.may_read_jetstream());
        let mut h = HeaderMap::new();
        h.insert(
            "cookie",
            HeaderValue::from_str(&format!("{COOKIE}={sid}")).unwrap(),
        );
        assert_eq!(s.user(&h).unwrap().name.as_deref(), Some("ro"));
        s.logout(&h);
        assert!(s.user(&h).is_none());
    }
}
