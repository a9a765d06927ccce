//! Priority groups of pull consumers (nats-server 2.11 and 2.12), chosen by `priority_policy`:
//! - `overflow`: a request with `min_pending` / `min_ack_pending` is served only while the
//!   consumer has at least that many messages pending (or waiting for their ack); others wait.
//! - `pinned_client`: one client at a time takes the group's messages. The first request
//!   served gets a new pin id, sent as `Nats-Pin-Id` with every message; the client sends it
//!   back in its next requests (`id`). Requests without it wait, requests with another one
//!   get `423`. The pin lapses after `priority_timeout` without a request from the pinned
//!   client, or on `CONSUMER.UNPIN`; each change is advised (`PINNED` / `UNPINNED`).
//! - `prioritized`: requests with a lower `priority` (0-9) are served first, in arrival order
//!   within one priority.
//!
//! The pin is the leader's own, as in nats-server: it is not replicated, and a new leader pins
//! anew.

use super::{Action, Advisory, ConsumerCore, ConsumerView, PullRequest};
use crate::jetstream::api::types::consumer_requests::PriorityRequest;
use crate::jetstream::runtime::consumer::deliver::PullStatus;

/// Length of a pin id (nats-server uses a 22-character NUID).
const PIN_ID_LEN: usize = 22;

/// How requests of a consumer are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Policy {
    /// In arrival order, round robin.
    None,
    /// `overflow`.
    Overflow,
    /// `pinned_client`.
    Pinned,
    /// `prioritized`.
    Prioritized,
}

/// The client a `pinned_client` group is pinned to.
#[derive(Debug, Clone)]
pub(super) struct Pin {
    /// The pin id (`Nats-Pin-Id`).
    pub(super) id: String,
    /// The group it was pinned for.
    pub(super) group: String,
    /// When it was pinned, Unix ns (`pinned_ts` in CONSUMER.INFO).
    pub(super) since_unix_ns: u64,
    /// When it lapses without a request from the pinned client (monotonic ns).
    pub(super) lapses_at: u64,
    /// Given to the request at the front this round: released again if that request cannot
    /// take the message after all (`max_bytes`), as nats-server does.
    fresh: bool,
}

/// What `CONSUMER.INFO` shows of a group (`priority_groups`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PinnedGroup {
    /// The group.
    pub group: String,
    /// Its pin id, if pinned.
    pub pinned_id: String,
    /// When it was pinned, Unix ns (0: not pinned).
    pub pinned_ns: u64,
}

impl<V: ConsumerView> ConsumerCore<V> {
    pub(super) fn policy(&self) -> Policy {
        match self.cfg.priority_policy.as_str() {
            "overflow" => Policy::Overflow,
            "pinned_client" => Policy::Pinned,
            "prioritized" => Policy::Prioritized,
            _ => Policy::None,
        }
    }

    /// Checks a new request's priority fields (nats-server's order and texts); a request with
    /// the current pin id keeps the pin alive.
    pub(super) fn admit_priority(
        &mut self,
        req: Option<&PriorityRequest>,
    ) -> Result<(), PullStatus> {
        let Some(p) = req else {
            return Ok(());
        };
        let policy = self.policy();
        let bad = |text: &str| Err(PullStatus::BadRequest(format!("Bad Request - {text}")));
        if (p.min_pending != 0 || p.min_ack_pending != 0) && policy != Policy::Overflow {
            return bad("Not a Overflow Priority consumer");
        }
        if !p.id.is_empty() && policy != Policy::Pinned {
            return bad("Not a Pinned Client Priority consumer");
        }
        if !(0..=9).contains(&p.priority) {
            return bad("Priority must be between 0 and 9");
        }
        if policy == Policy::None {
            return Ok(());
        }
        if p.group.is_empty() {
            return bad("Priority Group missing");
        }
        if !self.cfg.priority_groups.contains(&p.group) {
            return bad("Invalid Priority Group");
        }
        let ttl = self.pin_ttl();
        let now = self.now.mono_ns;
        if let Some(pin) = &mut self.pin {
            if p.id == pin.id {
                pin.lapses_at = now.saturating_add(ttl);
            } else if !p.id.is_empty() {
                return Err(PullStatus::PinMismatch);
            }
        }
        Ok(())
    }

    /// Queues a request: by priority for `prioritized` (behind those of the same or a lower
    /// number), else at the end.
    pub(super) fn enqueue(&mut self, req: PullRequest) {
        if self.policy() != Policy::Prioritized {
            self.waiting.push_back(req);
            return;
        }
        let rank = request_priority(&req);
        let at = (self.waiting.iter())
            .position(|r| request_priority(r) > rank)
            .unwrap_or(self.waiting.len());
        self.waiting.insert(at, req);
    }

    /// Makes the front of `waiting` the request the next message goes to: under
    /// `pinned_client` the pinned client's (pinning the first one that may be), under
    /// `overflow` the first whose thresholds are reached. Requests carrying a pin id that is
    /// no longer the group's end with `423`. False when no waiting request may take a message
    /// now.
    pub(super) fn select_request(&mut self) -> bool {
        let policy = self.policy();
        if !matches!(policy, Policy::Pinned | Policy::Overflow) {
            return !self.waiting.is_empty();
        }
        let mut cycled = 0;
        while let Some(front) = self.waiting.front() {
            if cycled >= self.waiting.len() {
                return false;
            }
            let eligible = match policy {
                Policy::Pinned => match self.pin_verdict(front) {
                    Verdict::Serve => true,
                    Verdict::Pin => {
                        self.pin_front();
                        true
                    }
                    Verdict::Wait => false,
                    Verdict::Refuse => {
                        if let Some(req) = self.waiting.pop_front() {
                            self.out.push(Action::Status {
                                to: req.reply,
                                status: PullStatus::WrongPinId {
                                    pending_msgs: req.batch,
                                    pending_bytes: req.max_bytes,
                                },
                            });
                        }
                        continue;
                    }
                },
                _ => self.overflow_reached(front),
            };
            if eligible {
                return true;
            }
            self.waiting.rotate_left(1);
            cycled += 1;
        }
        false
    }

    /// The front request could not take the message after all: a pin it was just given goes.
    pub(super) fn release_fresh_pin(&mut self) {
        if self.pin.as_ref().is_some_and(|p| p.fresh) {
            self.pin = None;
        }
    }

    /// The rest of this round's deliveries keep the pin as it is.
    pub(super) fn settle_pin(&mut self) {
        if let Some(pin) = &mut self.pin {
            pin.fresh = false;
        }
    }

    /// The pin id messages carry (`Nats-Pin-Id`), under `pinned_client`.
    pub(super) fn pin_id(&self) -> Option<&str> {
        (self.policy() == Policy::Pinned)
            .then_some(())
            .and(self.pin.as_ref())
            .map(|p| p.id.as_str())
    }

    /// Unpins `group` (`CONSUMER.UNPIN`, or the pin lapsed): the next request without a pin
    /// id gets a new one.
    pub(super) fn unpin(&mut self, group: &str, reason: &'static str) {
        // One pin per consumer, whichever group asks (nats-server).
        self.pin = None;
        self.actions.push_back(Action::Advisory(Advisory::Unpinned {
            group: group.to_string(),
            reason,
        }));
    }

    /// Unpins when the pinned client sent no request for `priority_timeout`.
    pub(super) fn lapse_pin(&mut self) {
        let lapsed = (self.pin.as_ref())
            .filter(|p| p.lapses_at <= self.now.mono_ns)
            .map(|p| p.group.clone());
        if let Some(group) = lapsed {
            self.unpin(&group, "timeout");
        }
    }

    /// When the pin lapses (monotonic ns), if pinned.
    pub(super) fn pin_deadline(&self) -> Option<u64> {
        self.pin.as_ref().map(|p| p.lapses_at)
    }

    /// The groups for `CONSUMER.INFO`: as nats-server, the first configured group with the
    /// consumer's pin (if any).
    pub(super) fn pinned_groups(&self) -> Vec<PinnedGroup> {
        let Some(first) = self.cfg.priority_groups.first() else {
            return Vec::new();
        };
        vec![PinnedGroup {
            group: first.clone(),
            pinned_id: self.pin.as_ref().map(|p| p.id.clone()).unwrap_or_default(),
            pinned_ns: self.pin.as_ref().map_or(0, |p| p.since_unix_ns),
        }]
    }

    fn pin_ttl(&self) -> u64 {
        u64::try_from(self.cfg.priority_timeout).unwrap_or(0)
    }

    fn pin_verdict(&self, req: &PullRequest) -> Verdict {
        let id = req.priority.as_ref().map(|p| p.id.as_str());
        match (&self.pin, id) {
            // A numeric request (no priority fields) is served and pins nothing (nats-server).
            (_, None) => Verdict::Serve,
            (None, Some("")) => Verdict::Pin,
            (None, Some(_)) => Verdict::Refuse,
            (Some(pin), Some(id)) if id == pin.id => Verdict::Serve,
            (Some(_), Some("")) => Verdict::Wait,
            (Some(_), Some(_)) => Verdict::Refuse,
        }
    }

    /// Pins the front request's client: a new id, handed to the request so that the rest of
    /// it is served, and advised.
    fn pin_front(&mut self) {
        let id = self.token(PIN_ID_LEN);
        let ttl = self.pin_ttl();
        let now = self.now;
        let Some(front) = self.waiting.front_mut() else {
            return;
        };
        let Some(p) = front.priority.as_mut() else {
            return;
        };
        p.id.clone_from(&id);
        let group = p.group.clone();
        self.pin = Some(Pin {
            id: id.clone(),
            group: group.clone(),
            since_unix_ns: now.unix_ns,
            lapses_at: now.mono_ns.saturating_add(ttl),
            fresh: true,
        });
        self.actions.push_back(Action::Advisory(Advisory::Pinned {
            group,
            pinned_id: id,
        }));
    }

    fn overflow_reached(&self, req: &PullRequest) -> bool {
        let Some(p) = &req.priority else {
            return true;
        };
        let reached = |min: i64, have: u64| u64::try_from(min).is_ok_and(|m| m > 0 && m <= have);
        (p.min_pending <= 0 && p.min_ack_pending <= 0)
            || reached(p.min_pending, self.num_pending)
            || reached(p.min_ack_pending, self.state.pending.len() as u64)
    }
}

/// What the pin rule says about a request at the front.
enum Verdict {
    /// It may take messages now.
    Serve,
    /// Nobody is pinned and it has no pin id: pin its client.
    Pin,
    /// Another client is pinned: it waits.
    Wait,
    /// It carries a pin id that is not (or no longer) the group's: `423`.
    Refuse,
}

/// A request's rank under `prioritized`: a request without priority fields (a numeric body)
/// goes after all others, as in nats-server.
fn request_priority(req: &PullRequest) -> i64 {
    req.priority.as_ref().map_or(i64::MAX, |p| p.priority)
}
