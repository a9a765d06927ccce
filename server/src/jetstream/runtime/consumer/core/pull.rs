//! Pull requests: admission (`max_waiting`, limits), expiry (408), lost interest, `no_wait`.

use super::{Action, ConsumerCore, ConsumerView, PullRequest};
use crate::jetstream::api::types::consumer_requests::{
    NextRequest, check_next_request_limits, parse_next_request,
};
use crate::jetstream::runtime::consumer::deliver::PullStatus;

impl<V: ConsumerView> ConsumerCore<V> {
    pub(super) fn on_pull(&mut self, reply: String, body: &[u8]) {
        self.last_active = self.now.mono_ns;
        if self.cfg.is_push() {
            self.out.push(Action::Status {
                to: reply,
                status: PullStatus::PushBased,
            });
            return;
        }
        let req: NextRequest = match parse_next_request(body) {
            Ok(r) => r,
            Err(text) => {
                self.out.push(Action::Status {
                    to: reply,
                    status: PullStatus::BadRequest(text),
                });
                return;
            }
        };
        if let Err(text) = check_next_request_limits(&req, &self.cfg) {
            self.out.push(Action::Status {
                to: reply,
                status: PullStatus::Conflict(text),
            });
            return;
        }
        if let Err(status) = self.admit_priority(req.priority.as_ref()) {
            self.out.push(Action::Status { to: reply, status });
            return;
        }
        let max_waiting = u64::try_from(self.cfg.max_waiting).unwrap_or(0);
        if max_waiting > 0 && self.waiting.len() as u64 >= max_waiting {
            self.out.push(Action::Status {
                to: reply,
                status: PullStatus::Conflict("Exceeded MaxWaiting".to_string()),
            });
            return;
        }
        let now = self.now.mono_ns;
        self.enqueue(PullRequest {
            reply,
            batch: req.batch.max(1),
            max_bytes: req.max_bytes,
            bytes_limited: req.max_bytes > 0,
            no_wait: req.no_wait,
            expires: (req.expires_ns > 0).then(|| now.saturating_add(req.expires_ns)),
            heartbeat: (req.idle_heartbeat_ns > 0).then_some(req.idle_heartbeat_ns),
            last_sent: now,
            delivered: 0,
            priority: req.priority,
        });
    }

    /// Drops requests that expired (408) or whose reply lost interest (silently).
    pub(super) fn drop_dead_requests(&mut self) {
        let now = self.now.mono_ns;
        let view = &self.view;
        let out = &mut self.out;
        self.waiting.retain(|req| {
            if req.expires.is_some_and(|e| e <= now) {
                out.push(Action::Status {
                    to: req.reply.clone(),
                    status: PullStatus::Timeout {
                        pending_msgs: req.batch,
                        pending_bytes: req.max_bytes,
                    },
                });
                return false;
            }
            view.has_interest(&req.reply)
        });
    }

    /// `no_wait` requests that could not be filled now end with 404 (or 408 at expiry when
    /// they got nothing and carry `expires`).
    pub(super) fn finish_no_wait(&mut self) {
        self.drop_dead_requests();
        let out = &mut self.out;
        self.waiting.retain(|req| {
            if !req.no_wait {
                return true;
            }
            if req.delivered > 0 || req.expires.is_none() {
                out.push(Action::Status {
                    to: req.reply.clone(),
                    status: PullStatus::NoMessages,
                });
                return false;
            }
            true
        });
    }
}
