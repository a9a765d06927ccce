//! What a config reload does to the connections already open, as nats-server does it:
//! every authenticated client is checked again against the new users; a client whose user
//! was removed is closed (without an `-ERR`, as nats-server); one whose credentials no longer
//! pass (password changed, auth newly required) gets `-ERR 'Authorization Violation'` and is
//! closed; the others get their user's new
//! permissions, and lose (with `-ERR 'Permissions Violation for Subscription to ...'`) the
//! subscriptions those no longer allow. A lowered `max_connections` closes the newest
//! connections above it with `-ERR 'maximum connections exceeded'`.

use std::sync::Arc;

use tracing::{info, warn};

use super::ConnContext;
use crate::bus::{Client, CloseReason, Subscription};

/// What [`ConnContext::reauthorize`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reauthorized {
    /// Clients checked (authenticated ones).
    pub checked: usize,
    /// Clients closed because their credentials no longer pass.
    pub closed: usize,
    /// Subscriptions removed because their user may no longer hold them.
    pub subs_removed: usize,
}

impl ConnContext {
    /// Checks every authenticated client against the current credential checks (call after a
    /// reload stored new settings).
    pub fn reauthorize(&self) -> Reauthorized {
        let mut done = Reauthorized::default();
        for client in self.clients.live() {
            // The credentials lock orders this against a CONNECT in flight: whichever takes
            // it last authenticates with the newest users.
            let held = client.credentials.lock();
            let Some(creds) = held.as_ref() else {
                continue; // not yet authenticated: its CONNECT will use the new users
            };
            done.checked += 1;
            let auth = self.auth();
            if auth.user_removed(creds) {
                drop(held);
                info!(
                    cid = client.cid,
                    "closing connection: its user was removed by a config reload"
                );
                client.close(CloseReason::ClientClosed);
                done.closed += 1;
                continue;
            }
            let nonce = client.nonce.get().map(String::as_str);
            match auth.recheck(creds, nonce) {
                Ok(authed) if client.account() != &*authed.account => {
                    // Moved to another account: closed without -ERR, as nats-server does.
                    drop(held);
                    info!(
                        cid = client.cid,
                        account = %authed.account,
                        "closing connection: its account was changed by a config reload"
                    );
                    client.close(CloseReason::ClientClosed);
                    done.closed += 1;
                }
                Ok(authed) => {
                    client.set_permissions(authed.perms);
                    drop(held);
                    done.subs_removed += self.drop_denied_subscriptions(&client);
                }
                Err(_) => {
                    drop(held);
                    let user = client.meta.lock().user.clone();
                    warn!(cid = client.cid, user = %user, "authentication error: credentials no longer valid after config reload");
                    client.send_err("Authorization Violation");
                    client.close(CloseReason::AuthViolation);
                    done.closed += 1;
                }
            }
        }
        done
    }

    /// Removes the subscriptions `client`'s permissions no longer allow, telling the client
    /// about each; returns how many.
    fn drop_denied_subscriptions(&self, client: &Arc<Client>) -> usize {
        let Some(perms) = client.permissions() else {
            return 0;
        };
        let removed: Vec<Arc<Subscription>> = {
            let mut subs = client.subs.lock();
            let denied: Vec<_> = subs
                .iter()
                .filter(|(_, s)| !perms.can_subscribe(&s.subject))
                .map(|(sid, _)| sid.clone())
                .collect();
            denied.iter().filter_map(|sid| subs.remove(sid)).collect()
        };
        let user = client.meta.lock().user.clone();
        for sub in &removed {
            self.bus.remove_subscription(sub);
            let sid = String::from_utf8_lossy(&sub.sid);
            let subject = &sub.subject;
            match &sub.queue {
                Some(q) => {
                    client.send_err(&format!(
                        "Permissions Violation for Subscription to \"{subject}\" using queue \"{q}\" (sid \"{sid}\")"
                    ));
                    info!(
                        cid = client.cid,
                        "Removed sub \"{subject}\" using queue \"{q}\" (sid \"{sid}\") for user \"{user}\" - not authorized"
                    );
                }
                None => {
                    client.send_err(&format!(
                        "Permissions Violation for Subscription to \"{subject}\" (sid \"{sid}\")"
                    ));
                    info!(
                        cid = client.cid,
                        "Removed sub \"{subject}\" (sid \"{sid}\") for user \"{user}\" - not authorized"
                    );
                }
            }
        }
        removed.len()
    }

    /// Closes the newest connections above `max` (a reload lowered `max_connections`);
    /// returns how many.
    pub fn enforce_max_connections(&self, max: u32) -> usize {
        let live = self.clients.live();
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        let excess = live.len().saturating_sub(max);
        // `live` is sorted by cid: the newest are last.
        for client in live.iter().rev().take(excess) {
            client.send_err("maximum connections exceeded");
            client.close(CloseReason::MaxConnections);
        }
        if excess > 0 {
            info!("Closed {excess} connections to fall within max_connections");
        }
        excess
    }
}
