//! Delivery pacing of one consumer: `replay_policy: original` and `rate_limit_bps`.
//!
//! - Original replay: each new message leaves no sooner after the previous new one than it was
//!   stored after it (the difference of their stored timestamps); the first goes at once.
//!   Redeliveries are not paced by it.
//! - Rate limit (push consumers; the API refuses it on pull consumers): a token bucket of
//!   `rate_limit_bps / 8` bytes a second whose burst is the stream's `max_msg_size`, else the
//!   server's `max_payload`, as nats-server sizes it. A delivery waits until the bucket holds
//!   its size (at most a burst), then takes its size (the bucket may go below zero).
//!
//! The core asks [`Pacer::ready_at`] before a delivery and reports it with [`Pacer::sent`];
//! when a message is not ready the core asks to be woken then (`poll_timeout`). Times are the
//! core's monotonic nanoseconds: no clock is read here.

use crate::jetstream::api::types::consumer::{ConsumerConfig, ReplayPolicy};

/// Pacing state of one consumer's engine.
#[derive(Debug, Default)]
pub(super) struct Pacer {
    original: bool,
    /// Stored timestamp and send time (monotonic ns) of the last new message (original
    /// replay).
    last_new: Option<(u64, u64)>,
    /// The rate limit's token bucket.
    bucket: Option<Bucket>,
}

/// A token bucket counted in bytes.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Bytes per second.
    rate: f64,
    /// Most bytes the bucket holds.
    burst: f64,
    /// Bytes available at `at` (negative after an oversize take).
    tokens: f64,
    /// Monotonic ns.
    at: u64,
}

/// Nanoseconds in a second, as a float.
const NS_PER_SEC: f64 = 1e9;

impl Bucket {
    fn refill(&mut self, now: u64) {
        if now > self.at {
            let earned = (now - self.at) as f64 / NS_PER_SEC * self.rate;
            self.tokens = (self.tokens + earned).min(self.burst);
            self.at = now;
        }
    }

    fn ready_at(&self, bytes: u64, now: u64) -> Option<u64> {
        let mut b = *self;
        b.refill(now);
        let need = (bytes as f64).min(b.burst);
        (b.tokens < need).then(|| {
            let wait = ((need - b.tokens) / b.rate * NS_PER_SEC).ceil();
            // Float to integer casts saturate.
            now.saturating_add(wait as u64)
        })
    }

    fn take(&mut self, bytes: u64, now: u64) {
        self.refill(now);
        self.tokens -= bytes as f64;
    }
}

impl Pacer {
    /// Pacing for `cfg`; `burst` is the rate limit's burst in bytes (the stream's
    /// `max_msg_size`, else the server's `max_payload`); `now` is monotonic ns.
    pub(super) fn new(cfg: &ConsumerConfig, burst: u64, now: u64) -> Self {
        let bps = if cfg.is_push() { cfg.rate_limit_bps } else { 0 };
        let bucket = (bps >= 8).then(|| {
            let burst = burst.max(1) as f64;
            Bucket {
                rate: (bps / 8) as f64,
                burst,
                tokens: burst,
                at: now,
            }
        });
        Self {
            original: cfg.replay_policy == ReplayPolicy::Original,
            last_new: None,
            bucket,
        }
    }

    /// When a message of `bytes` bytes stored at `stored_ns` may be delivered; `None` when it
    /// may go now.
    pub(super) fn ready_at(
        &self,
        stored_ns: u64,
        bytes: u64,
        redelivery: bool,
        now: u64,
    ) -> Option<u64> {
        let mut at = self.bucket.as_ref().and_then(|b| b.ready_at(bytes, now));
        if self.original
            && !redelivery
            && let Some((prev_ns, sent)) = self.last_new
        {
            let due = sent.saturating_add(stored_ns.saturating_sub(prev_ns));
            if due > now {
                at = Some(at.map_or(due, |a| a.max(due)));
            }
        }
        at
    }

    /// Records a delivery of `bytes` bytes of a message stored at `stored_ns`.
    pub(super) fn sent(&mut self, stored_ns: u64, bytes: u64, redelivery: bool, now: u64) {
        if self.original && !redelivery {
            self.last_new = Some((stored_ns, now));
        }
        if let Some(b) = &mut self.bucket {
            b.take(bytes, now);
        }
    }

    /// Whether any pacing applies (the engine skips the bookkeeping otherwise).
    pub(super) fn active(&self) -> bool {
        self.original || self.bucket.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn cfg(original: bool, bps: u64) -> ConsumerConfig {
        ConsumerConfig {
            deliver_subject: "d".to_string(),
            replay_policy: if original {
                ReplayPolicy::Original
            } else {
                ReplayPolicy::Instant
            },
            rate_limit_bps: bps,
            ..ConsumerConfig::default()
        }
    }

    #[test]
    fn instant_unlimited_never_waits() {
        let mut p = Pacer::new(&cfg(false, 0), 1024, 0);
        let now = 5_000;
        assert!(!p.active());
        p.sent(1, 1000, false, now);
        assert_eq!(p.ready_at(10_000_000_000, 1000, false, now), None);
    }

    #[test]
    fn original_replay_keeps_the_stored_spacing_of_new_messages() {
        let mut p = Pacer::new(&cfg(true, 0), 1024, 0);
        let t0: u64 = 1_000;
        assert_eq!(
            p.ready_at(5_000_000_000, 10, false, t0),
            None,
            "first goes at once"
        );
        p.sent(5_000_000_000, 10, false, t0);
        // Stored 300 ms later: due 300 ms after the first was sent.
        let due = p.ready_at(5_300_000_000, 10, false, t0).expect("waits");
        assert_eq!(due, t0 + 300 * MS);
        assert_eq!(p.ready_at(5_300_000_000, 10, false, due), None);
        // Redeliveries are not held back by the replay spacing.
        assert_eq!(p.ready_at(9_000_000_000, 10, true, t0), None);
    }

    #[test]
    fn rate_limit_spaces_deliveries_by_their_size() {
        // 1,000 bytes per second, burst 500 bytes.
        let mut p = Pacer::new(&cfg(false, 8_000), 500, 0);
        let t0: u64 = 1_000;
        assert_eq!(
            p.ready_at(0, 500, false, t0),
            None,
            "a full bucket lets a burst through"
        );
        p.sent(0, 500, false, t0);
        let next = p.ready_at(0, 500, false, t0).expect("empty bucket waits");
        let wait = next - t0;
        assert!(wait > 490 * MS && wait < 510 * MS, "{wait}");
        // An oversize delivery waits for a full burst, then leaves the bucket in debt.
        p.sent(0, 2_000, true, next);
        let after = p.ready_at(0, 100, true, next).expect("in debt");
        let debt = after - next;
        assert!(debt > 1_590 * MS && debt < 1_610 * MS, "{debt}");
    }

    #[test]
    fn pull_consumers_are_not_rate_limited() {
        let pull = ConsumerConfig {
            rate_limit_bps: 8,
            ..ConsumerConfig::default()
        };
        let mut p = Pacer::new(&pull, 1, 0);
        let now = 5_000;
        p.sent(0, 1_000_000, false, now);
        assert_eq!(p.ready_at(0, 1_000_000, false, now), None);
    }
}
