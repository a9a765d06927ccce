//! Accounts: isolated subject namespaces and what they share (nats-server's `accounts { }`).
//!
//! [`Accounts`] is the rule book built from the configuration: for each account, the service
//! imports its requests may reach and the stream imports its messages feed. It is pure data;
//! the [`Bus`](crate::bus::Bus) applies it when it routes a message published in an account
//! (`bus::shared`). Each account's subscriptions live in the bus's namespace of that account,
//! so a subscriber in one account never sees another account's messages except through an
//! import.
//!
//! - [`mapping`]: rewriting subjects between accounts ([`SubjectMap`]).
//! - [`responses`]: the reply subjects of service imports in flight ([`ResponseMap`]).
//! - [`request_info`]: the `Nats-Request-Info` stamp on requests that cross a service import.
//!
//! Which account a user belongs to is the [`Authenticator`](crate::auth::Authenticator)'s
//! answer; users outside `accounts { }` are in the global account `$G`. Which accounts have
//! JetStream is `jetstream::account`'s answer.

pub mod mapping;
pub mod request_info;
pub mod responses;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub use mapping::SubjectMap;
pub use responses::ResponseMap;

use crate::config::{AuthConfig, GLOBAL_ACCOUNT, ResponseType, ShareKind};

/// A request subject of the importing account that reaches another account's service.
#[derive(Debug, Clone)]
pub struct ServiceImport {
    /// Importer subject -> exporter subject.
    pub map: SubjectMap,
    /// The exporting account, where the responders are.
    pub exporter: Arc<str>,
    /// How many responses a request gets back.
    pub response: ResponseType,
    /// How long responses are delivered back.
    pub threshold: Duration,
}

/// A subject of the exporting account whose messages another account sees.
#[derive(Debug, Clone)]
pub struct StreamImport {
    /// Exporter subject -> importer subject.
    pub map: SubjectMap,
    /// The importing account.
    pub importer: Arc<str>,
}

/// What one account shares.
#[derive(Debug, Clone, Default)]
pub struct AccountRules {
    /// Requests published in this account that go to another account's service.
    pub service_imports: Vec<ServiceImport>,
    /// Messages published in this account that other accounts import.
    pub stream_exports: Vec<StreamImport>,
}

impl AccountRules {
    /// Whether nothing published in this account leaves it.
    pub fn is_closed(&self) -> bool {
        self.service_imports.is_empty() && self.stream_exports.is_empty()
    }
}

/// The accounts of the configuration and what they share; the global account `$G` shares
/// nothing (nats-server's `$G` cannot be configured).
#[derive(Debug, Clone, Default)]
pub struct Accounts {
    /// Rules by account name; every configured account has an entry.
    rules: HashMap<Arc<str>, AccountRules>,
}

impl Accounts {
    /// Builds the rules from the configuration (already checked by the config loader: every
    /// import names a defined account and an export open to the importer).
    pub fn from_config(auth: &AuthConfig) -> Self {
        let mut rules: HashMap<Arc<str>, AccountRules> = auth
            .accounts
            .iter()
            .map(|a| (Arc::from(a.name.as_str()), AccountRules::default()))
            .collect();
        for acc in &auth.accounts {
            let importer: Arc<str> = Arc::from(acc.name.as_str());
            for imp in &acc.imports {
                let Some(exporter) = auth.accounts.iter().find(|a| a.name == imp.account) else {
                    continue;
                };
                let exporter_name: Arc<str> = Arc::from(exporter.name.as_str());
                let local = imp.local_subject();
                match imp.kind {
                    ShareKind::Service => {
                        let export = exporter.exports.iter().find(|e| {
                            e.kind == ShareKind::Service
                                && crate::router::subject::is_subset(&imp.subject, &e.subject)
                        });
                        let service = ServiceImport {
                            map: SubjectMap::new(local, imp.subject.clone()),
                            exporter: exporter_name,
                            response: export.map(|e| e.response).unwrap_or_default(),
                            threshold: export
                                .map_or(crate::config::accounts::DEFAULT_RESPONSE_THRESHOLD, |e| {
                                    e.threshold
                                }),
                        };
                        if let Some(r) = rules.get_mut(&importer) {
                            r.service_imports.push(service);
                        }
                    }
                    ShareKind::Stream => {
                        let stream = StreamImport {
                            map: SubjectMap::new(imp.subject.clone(), local),
                            importer: importer.clone(),
                        };
                        if let Some(r) = rules.get_mut(&exporter_name) {
                            r.stream_exports.push(stream);
                        }
                    }
                }
            }
        }
        Self { rules }
    }

    /// The rules of `account`, if it is a configured account.
    pub fn get(&self, account: &str) -> Option<&AccountRules> {
        self.rules.get(account)
    }

    /// The configured account named `name` (its shared name), or `None`.
    pub fn name(&self, name: &str) -> Option<Arc<str>> {
        self.rules.get_key_value(name).map(|(k, _)| k.clone())
    }

    /// Every configured account's name (not `$G`).
    pub fn names(&self) -> impl Iterator<Item = &Arc<str>> {
        self.rules.keys()
    }

    /// Whether `account` is the global account.
    pub fn is_global(account: &str) -> bool {
        account == GLOBAL_ACCOUNT
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AccountConfig, ExportConfig, ImportConfig};

    fn export(kind: ShareKind, subject: &str) -> ExportConfig {
        ExportConfig {
            kind,
            subject: subject.into(),
            accounts: vec![],
            response: ResponseType::Stream,
            threshold: Duration::from_secs(5),
        }
    }

    #[test]
    fn imports_become_rules_of_the_account_where_messages_are_published() {
        let auth = AuthConfig {
            accounts: vec![
                AccountConfig {
                    name: "A".into(),
                    exports: vec![
                        export(ShareKind::Service, "svc.>"),
                        export(ShareKind::Stream, "ev.>"),
                    ],
                    ..AccountConfig::default()
                },
                AccountConfig {
                    name: "B".into(),
                    imports: vec![
                        ImportConfig {
                            kind: ShareKind::Service,
                            account: "A".into(),
                            subject: "svc.time".into(),
                            prefix: None,
                            to: Some("time".into()),
                        },
                        ImportConfig {
                            kind: ShareKind::Stream,
                            account: "A".into(),
                            subject: "ev.>".into(),
                            prefix: Some("a".into()),
                            to: None,
                        },
                    ],
                    ..AccountConfig::default()
                },
            ],
            ..AuthConfig::default()
        };
        let accounts = Accounts::from_config(&auth);
        let b = accounts.get("B").unwrap();
        assert_eq!(b.service_imports.len(), 1);
        let svc = &b.service_imports[0];
        assert!(svc.map.matches("time"));
        assert_eq!(svc.map.apply("time"), "svc.time");
        assert_eq!(&*svc.exporter, "A");
        assert_eq!(svc.response, ResponseType::Stream);
        assert_eq!(svc.threshold, Duration::from_secs(5));
        let a = accounts.get("A").unwrap();
        assert_eq!(a.stream_exports.len(), 1);
        assert_eq!(a.stream_exports[0].map.apply("ev.x"), "a.ev.x");
        assert_eq!(&*a.stream_exports[0].importer, "B");
        assert!(accounts.get("$G").is_none());
        assert!(b.stream_exports.is_empty() && a.service_imports.is_empty());
    }
}
