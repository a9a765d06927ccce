//! Seeded random events against a simple model of what a consumer must guarantee:
//! - a message is only delivered while it is not acknowledged, terminated or dropped;
//! - each delivery carries the model's count, and no message goes out more than `max_deliver`
//!   times (NAKs count); one dropped at `max_deliver` had exactly that many deliveries;
//! - a new message goes out only while fewer than `max_ack_pending` are unacknowledged;
//! - the core's pending set and delivery counts are the model's after every step, and the
//!   progress batches it proposed, applied in order, rebuild the same state;
//! - a push consumer with flow control sends nothing once a window's worth of bytes is
//!   unanswered, and nothing at all without interest;
//! - in the end (a client that NAKs everything and keeps pulling) every message is acked,
//!   terminated or dropped after exactly `max_deliver` deliveries.
//!
//! Half the seeds run a pull consumer, half a push consumer with flow control.
//! A failure names its seed; `CONSUMER_MODEL_SEED=<n>` replays one.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use jetraft_proto::stream::ConsumerProgress;
use jetraft_storage::consumer::ConsumerState;

use super::tests::{MS, SEC, Script, at, pull_cfg};
use super::*;
use crate::jetstream::ack::AckKind;

/// xorshift64: small, deterministic, good enough to pick events.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// One of `set`, if any.
    fn pick(&mut self, set: &BTreeSet<u64>) -> Option<u64> {
        if set.is_empty() {
            return None;
        }
        let i = usize::try_from(self.below(set.len() as u64)).expect("small");
        set.iter().nth(i).copied()
    }
}

/// What the model knows.
#[derive(Default)]
struct Model {
    max_deliver: u64,
    max_ack_pending: usize,
    published: u64,
    /// Deliveries seen per stream sequence.
    deliveries: BTreeMap<u64, u64>,
    /// Delivered and not acked, terminated or dropped.
    outstanding: BTreeSet<u64>,
    acked: BTreeSet<u64>,
    terminated: BTreeSet<u64>,
    dropped: BTreeSet<u64>,
    /// The proposed batches applied in order, as the state machine does.
    replica: ConsumerState,
    /// Proposals not reported done.
    in_flight: usize,
    /// Push: whether the deliver subject has interest.
    push_bound: bool,
    /// Push: the flow-control subject waiting for its answer.
    fc_pending: Option<String>,
    /// Push: bytes delivered since the last answered flow-control request.
    fc_outstanding: u64,
    /// Push: the flow-control window.
    fc_window: u64,
}

/// What all seeds did together (so the test cannot pass by doing nothing).
#[derive(Default, Debug)]
struct Totals {
    deliveries: u64,
    redeliveries: u64,
    dropped: u64,
    acked: u64,
    fc_answered: u64,
}

impl Model {
    fn gone(&self, seq: u64) -> bool {
        self.acked.contains(&seq) || self.terminated.contains(&seq) || self.dropped.contains(&seq)
    }

    /// Checks one action against the model and updates it.
    fn on_action(&mut self, a: &Action, seed: u64) {
        match a {
            Action::Deliver {
                stream_seq,
                deliveries,
                msg,
            } => {
                let seq = *stream_seq;
                // A push delivery's size, as flow control counts it.
                let push = (msg.subject == "deliver").then(|| {
                    (msg.shown.as_ref().map_or(0, String::len)
                        + msg.reply.as_ref().map_or(0, String::len)
                        + msg.payload.len()
                        + msg.hdrs.as_ref().map_or(0, Vec::len)) as u64
                });
                assert!(
                    seq >= 1 && seq <= self.published,
                    "seed {seed}: {seq} unknown"
                );
                assert!(
                    !self.gone(seq),
                    "seed {seed}: {seq} delivered after its end"
                );
                if let Some(to) = push {
                    assert!(self.push_bound, "seed {seed}: push without interest");
                    if self.fc_pending.is_some() {
                        assert!(
                            self.fc_outstanding < self.fc_window,
                            "seed {seed}: delivery past the flow-control window"
                        );
                    }
                    self.fc_outstanding += to;
                }
                let n = self.deliveries.entry(seq).or_default();
                *n += 1;
                assert_eq!(*n, *deliveries, "seed {seed}: delivery count of {seq}");
                assert!(
                    *n <= self.max_deliver,
                    "seed {seed}: {seq} delivered {n} times, max_deliver {}",
                    self.max_deliver
                );
                self.outstanding.insert(seq);
                if *n == 1 {
                    assert!(
                        self.outstanding.len() <= self.max_ack_pending,
                        "seed {seed}: new message {seq} with {} unacknowledged",
                        self.outstanding.len()
                    );
                }
            }
            Action::Advisory(Advisory::MaxDeliveries {
                stream_seq,
                deliveries,
            }) => {
                let seq = *stream_seq;
                assert!(self.outstanding.remove(&seq), "seed {seed}: drop of {seq}");
                assert_eq!(self.deliveries.get(&seq), Some(deliveries), "seed {seed}");
                assert_eq!(*deliveries, self.max_deliver, "seed {seed}: {seq} dropped");
                self.dropped.insert(seq);
            }
            Action::FlowControlRequest { reply, .. } => {
                assert!(self.fc_pending.is_none(), "seed {seed}: two FC requests");
                self.fc_pending = Some(reply.clone());
            }
            Action::Propose { progress, .. } => {
                self.apply(progress);
                self.in_flight += 1;
            }
            _ => {}
        }
    }

    /// What `apply_consumer_progress` does for an explicit-ack consumer.
    fn apply(&mut self, p: &ConsumerProgress) {
        for d in &p.delivered {
            if d.stream_seq > self.replica.ack_floor.stream_seq {
                self.replica
                    .record_delivery(d.stream_seq, d.consumer_seq, d.delivered_ns);
            }
        }
        for s in p.acked.iter().chain(&p.dropped) {
            self.replica.ack(*s);
        }
    }
}

/// Drives one core with `seed`'s events.
struct Run {
    script: Script,
    model: Model,
    rng: XorShift,
    seed: u64,
    ms: u64,
    replies: u64,
    /// A push consumer with flow control (else pull).
    push: bool,
}

impl Run {
    fn new(seed: u64) -> Self {
        let mut rng = XorShift::new(seed);
        let max_deliver = 1 + rng.below(4);
        let max_ack_pending = 1 + rng.below(6);
        let backoff = if rng.below(2) == 0 {
            Vec::new()
        } else {
            vec![(300 * MS) as i64, SEC as i64]
        };
        let push = seed.is_multiple_of(2);
        let mut cfg = ConsumerConfig {
            ack_wait: SEC as i64,
            max_deliver: max_deliver as i64,
            max_ack_pending: max_ack_pending as i64,
            backoff,
            ..pull_cfg()
        };
        if push {
            cfg.deliver_subject = "deliver".to_string();
            cfg.flow_control = true;
            cfg.idle_heartbeat = SEC as i64;
            cfg.max_waiting = 0;
        }
        Self {
            script: Script::new(cfg, 0),
            model: Model {
                max_deliver,
                max_ack_pending: usize::try_from(max_ack_pending).expect("small"),
                push_bound: true,
                fc_window: 2 * 1024 * 1024,
                ..Model::default()
            },
            rng,
            seed,
            ms: 0,
            replies: 0,
            push,
        }
    }

    /// Hands `ev` in now, performs the actions, checks the state.
    fn on(&mut self, ev: ConsumerEvent) {
        self.script.core.handle(at(self.ms), ev);
        while let Some(a) = self.script.core.poll_action() {
            self.model.on_action(&a, self.seed);
        }
        self.check_state();
    }

    fn check_state(&self) {
        let seed = self.seed;
        let pending = &self.script.core.state().pending;
        let keys: BTreeSet<u64> = pending.keys().copied().collect();
        assert_eq!(keys, self.model.outstanding, "seed {seed}: pending set");
        for (seq, p) in pending {
            assert_eq!(
                Some(&p.deliveries),
                self.model.deliveries.get(seq),
                "seed {seed}: deliveries of {seq}"
            );
        }
    }

    fn ack(&mut self, seq: u64, kind: AckKind) {
        self.on(ConsumerEvent::Ack {
            stream_seq: seq,
            kind,
            reply: None,
        });
    }

    fn pull(&mut self, body: String) {
        self.replies += 1;
        self.on(ConsumerEvent::Pull {
            reply: format!("_INBOX.{}", self.replies),
            body: Bytes::from(body),
        });
    }

    /// Push: answers the pending flow-control request.
    fn answer_fc(&mut self) {
        if let Some(subject) = self.model.fc_pending.take() {
            self.model.fc_outstanding = 0;
            self.model.fc_window = (self.model.fc_window * 2).min(32 * 1024 * 1024);
            self.on(ConsumerEvent::FlowControl { subject });
        }
    }

    /// Push: interest on the deliver subject comes or goes.
    fn set_interest(&mut self, bound: bool) {
        self.model.push_bound = bound;
        self.script.world.push_bound.set(bound);
    }

    fn commit_all(&mut self) {
        let count = std::mem::take(&mut self.model.in_flight);
        self.on(ConsumerEvent::ProgressDone { count });
    }

    fn random_step(&mut self) {
        match self.rng.below(10) {
            0 | 1 => {
                let len = if self.push { 100 * 1024 } else { 10 };
                for _ in 0..=self.rng.below(3) {
                    self.script.world.publish("orders.new", len);
                    self.model.published += 1;
                }
                self.on(ConsumerEvent::StreamChanged);
            }
            2 | 3 if self.push => match self.rng.below(4) {
                0 => self.set_interest(!self.model.push_bound),
                _ => self.answer_fc(),
            },
            2 | 3 => {
                let batch = 1 + self.rng.below(4);
                let body = match self.rng.below(3) {
                    0 => format!(r#"{{"batch":{batch}}}"#),
                    1 => format!(
                        r#"{{"batch":{batch},"expires":{}}}"#,
                        (1 + self.rng.below(3)) * SEC
                    ),
                    _ => format!(r#"{{"batch":{batch},"no_wait":true}}"#),
                };
                self.pull(body);
            }
            4 => {
                if let Some(seq) = self.rng.pick(&self.model.outstanding) {
                    self.model.outstanding.remove(&seq);
                    self.model.acked.insert(seq);
                    self.ack(seq, AckKind::Ack);
                }
            }
            5 => {
                if let Some(seq) = self.rng.pick(&self.model.outstanding) {
                    let delay_ns = (self.rng.below(2) == 0).then(|| self.rng.below(800) * MS);
                    self.ack(seq, AckKind::Nak { delay_ns });
                }
            }
            6 => {
                if let Some(seq) = self.rng.pick(&self.model.outstanding) {
                    self.ack(seq, AckKind::Progress);
                }
            }
            7 => {
                if self.rng.below(4) == 0
                    && let Some(seq) = self.rng.pick(&self.model.outstanding)
                {
                    self.model.outstanding.remove(&seq);
                    self.model.terminated.insert(seq);
                    self.ack(
                        seq,
                        AckKind::Term {
                            reason: String::new(),
                        },
                    );
                }
            }
            8 => self.commit_all(),
            _ => {
                self.ms += self.rng.below(1500);
                self.on(ConsumerEvent::Timeout);
            }
        }
    }

    /// A client that NAKs everything and keeps pulling: everything must end.
    fn drain(&mut self) {
        let rounds = (self.model.published + 10) * (self.model.max_deliver + 1);
        for _ in 0..rounds {
            if (1..=self.model.published).all(|s| self.model.gone(s)) {
                break;
            }
            if self.push {
                self.set_interest(true);
                self.answer_fc();
            } else {
                self.pull(r#"{"batch":10}"#.to_string());
            }
            let outstanding: Vec<u64> = self.model.outstanding.iter().copied().collect();
            for seq in outstanding {
                self.ack(seq, AckKind::Nak { delay_ns: None });
            }
            self.commit_all();
            self.ms += 1100;
            self.on(ConsumerEvent::Timeout);
        }
        let seed = self.seed;
        for s in 1..=self.model.published {
            assert!(self.model.gone(s), "seed {seed}: {s} never ended");
            if self.model.dropped.contains(&s) {
                assert_eq!(self.model.deliveries.get(&s), Some(&self.model.max_deliver));
            }
        }
        self.commit_all();
        assert!(!self.script.core.gathering(), "seed {seed}");
        let core = self.script.core.state();
        assert_eq!(self.model.replica.pending, core.pending, "seed {seed}");
        assert_eq!(self.model.replica.delivered, core.delivered, "seed {seed}");
    }
}

fn run_seed(seed: u64, totals: &mut Totals) {
    let mut run = Run::new(seed);
    for _ in 0..400 {
        run.random_step();
    }
    run.drain();
    let m = &run.model;
    totals.deliveries += m.deliveries.values().sum::<u64>();
    totals.redeliveries += m.deliveries.values().map(|n| n - 1).sum::<u64>();
    totals.dropped += m.dropped.len() as u64;
    totals.acked += m.acked.len() as u64;
    totals.fc_answered += u64::from(m.fc_window > 2 * 1024 * 1024);
}

#[test]
fn random_events_keep_the_delivery_invariants() {
    if let Some(seed) = std::env::var("CONSUMER_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        run_seed(seed, &mut Totals::default());
        return;
    }
    let mut t = Totals::default();
    for seed in 1..=200 {
        run_seed(seed, &mut t);
    }
    assert!(
        t.deliveries > 10_000
            && t.redeliveries > 1_000
            && t.dropped > 100
            && t.acked > 1_000
            && t.fc_answered > 20,
        "the events did too little: {t:?}"
    );
}
