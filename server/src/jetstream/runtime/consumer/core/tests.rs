//! Table tests of the consumer core with explicit times: each step hands the core one event at
//! a time in milliseconds and lists what it must do then, rendered as short strings
//! (`deliver 1 x2 -> r1` is stream sequence 1, second delivery, to `r1`).

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::rc::Rc;

use bytes::Bytes;
use jetraft_storage::consumer::{ConsumerState, Pending};
use jetraft_storage::mem::MemStreamStore;
use jetraft_storage::stream::{StoredMsg, StreamStore, StreamUid};

use super::*;
use crate::jetstream::ack::parse_ack;
use crate::jetstream::runtime::consumer::deliver;

pub(super) const MS: u64 = 1_000_000;
pub(super) const SEC: u64 = 1_000 * MS;
/// The wall clock when the monotonic clock is 0.
pub(super) const EPOCH: u64 = 1_800_000_000 * SEC;

/// The time `ms` milliseconds after the start.
pub(super) fn at(ms: u64) -> Now {
    Now {
        mono_ns: ms * MS,
        unix_ns: EPOCH + ms * MS,
    }
}

/// A stream in memory and the interest on a pretend bus.
#[derive(Clone)]
pub(super) struct World {
    store: Rc<RefCell<MemStreamStore>>,
    removals: Rc<Cell<u64>>,
    /// Reply subjects nobody listens on any more.
    gone: Rc<RefCell<HashSet<String>>>,
    /// Whether the push consumer's deliver subject has a subscriber.
    pub(super) push_bound: Rc<Cell<bool>>,
}

impl ConsumerView for World {
    fn read<T>(&self, f: impl FnOnce(&dyn StreamStore, u64) -> T) -> T {
        f(&*self.store.borrow(), self.removals.get())
    }

    fn has_interest(&self, subject: &str) -> bool {
        !self.gone.borrow().contains(subject)
    }

    fn push_interest(&self, _subject: &str, _group: Option<&str>) -> bool {
        self.push_bound.get()
    }

    fn rate_burst(&self) -> u64 {
        1024 * 1024
    }
}

impl World {
    pub(super) fn new() -> Self {
        Self {
            store: Rc::new(RefCell::new(MemStreamStore::new(StreamUid(1)))),
            removals: Rc::new(Cell::new(0)),
            gone: Rc::default(),
            push_bound: Rc::new(Cell::new(true)),
        }
    }

    /// Appends a message on `subject` with `payload_len` bytes; returns its sequence.
    pub(super) fn publish(&self, subject: &str, payload_len: usize) -> u64 {
        let mut store = self.store.borrow_mut();
        let seq = store.state().last_seq + 1;
        store
            .store_msg(&StoredMsg {
                seq,
                subject: subject.to_string(),
                headers: Bytes::new(),
                payload: Bytes::from(vec![b'x'; payload_len]),
                timestamp_ns: EPOCH + seq,
            })
            .expect("memory store append");
        seq
    }
}

/// A core and its world, driven one event at a time.
pub(super) struct Script {
    pub(super) core: ConsumerCore<World>,
    pub(super) world: World,
    /// Report proposals as done at once (a one-node group that commits instantly).
    auto_commit: bool,
    /// Show proposals among the rendered actions.
    show_proposals: bool,
}

impl Script {
    pub(super) fn new(cfg: ConsumerConfig, msgs: u64) -> Self {
        Self::from_state(cfg, msgs, ConsumerState::default())
    }

    pub(super) fn from_state(cfg: ConsumerConfig, msgs: u64, state: ConsumerState) -> Self {
        let world = World::new();
        for _ in 0..msgs {
            world.publish("orders.new", 10);
        }
        let start = ConsumerStart {
            config: cfg,
            state,
            ..ConsumerStart::default()
        };
        let core = ConsumerCore::new(
            world.clone(),
            "S".to_string(),
            "C".to_string(),
            start,
            at(0),
            7,
        );
        Self {
            core,
            world,
            auto_commit: true,
            show_proposals: false,
        }
    }

    /// Hands `ev` in at `ms` and returns what the core asks for, rendered.
    pub(super) fn on(&mut self, ms: u64, ev: ConsumerEvent) -> Vec<String> {
        self.core.handle(at(ms), ev);
        self.drain(ms)
    }

    /// Returns the pending actions, rendered.
    pub(super) fn drain(&mut self, ms: u64) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(a) = self.core.poll_action() {
            if let Action::Propose { .. } = &a {
                if self.auto_commit {
                    self.core
                        .handle(at(ms), ConsumerEvent::ProgressDone { count: 1 });
                }
                if !self.show_proposals {
                    continue;
                }
            }
            out.push(render(&a));
        }
        out
    }

    pub(super) fn tick(&mut self, ms: u64) -> Vec<String> {
        self.on(ms, ConsumerEvent::Timeout)
    }

    pub(super) fn pull(&mut self, ms: u64, reply: &str, body: &str) -> Vec<String> {
        self.on(
            ms,
            ConsumerEvent::Pull {
                reply: reply.to_string(),
                body: Bytes::copy_from_slice(body.as_bytes()),
            },
        )
    }

    /// An ack with payload `payload` (`+ACK`, `-NAK`, `+TERM`, ...) and an optional AckSync
    /// reply subject.
    pub(super) fn ack(
        &mut self,
        ms: u64,
        seq: u64,
        payload: &str,
        reply: Option<&str>,
    ) -> Vec<String> {
        self.on(
            ms,
            ConsumerEvent::Ack {
                stream_seq: seq,
                kind: parse_ack(payload.as_bytes()),
                reply: reply.map(str::to_string),
            },
        )
    }

    /// The wake-up the core asks for, in ms after the start.
    pub(super) fn timeout_ms(&self) -> u64 {
        self.core.poll_timeout() / MS
    }
}

/// One action as a short string.
pub(super) fn render(a: &Action) -> String {
    match a {
        Action::Deliver {
            stream_seq,
            deliveries,
            msg,
        } => format!("deliver {stream_seq} x{deliveries} -> {}", msg.subject),
        Action::Status { to, status } => match status {
            PullStatus::NoMessages => format!("404 -> {to}"),
            PullStatus::Timeout {
                pending_msgs,
                pending_bytes,
            } => format!("408 {pending_msgs}/{pending_bytes} -> {to}"),
            PullStatus::MaxBytesExceeded {
                pending_msgs,
                pending_bytes,
            } => format!("409 max_bytes {pending_msgs}/{pending_bytes} -> {to}"),
            PullStatus::Conflict(t) => format!("409 {t} -> {to}"),
            PullStatus::BadRequest(t) => format!("400 {t} -> {to}"),
            PullStatus::PushBased => format!("409 push -> {to}"),
            PullStatus::ConsumerDeleted => format!("409 deleted -> {to}"),
            PullStatus::LeadershipChange => format!("409 leadership -> {to}"),
            PullStatus::PinMismatch => format!("423 pin mismatch -> {to}"),
            PullStatus::WrongPinId {
                pending_msgs,
                pending_bytes,
            } => format!("423 wrong pin {pending_msgs}/{pending_bytes} -> {to}"),
        },
        Action::Heartbeat {
            to,
            last_consumer,
            last_stream,
            stalled,
        } => match stalled {
            Some(fc) => format!("heartbeat {last_consumer}/{last_stream} stalled {fc} -> {to}"),
            None => format!("heartbeat {last_consumer}/{last_stream} -> {to}"),
        },
        Action::FlowControlRequest { to, reply } => format!("fc {reply} -> {to}"),
        Action::Reply { to } => format!("reply -> {to}"),
        Action::NoResponders { to } => format!("503 -> {to}"),
        Action::Propose { progress, replies } => format!(
            "propose d{:?} a{:?} x{:?} r{:?}",
            (progress.delivered.iter())
                .map(|d| d.stream_seq)
                .collect::<Vec<_>>(),
            progress.acked,
            progress.dropped,
            replies
        ),
        Action::RepliesAfterCommits(r) => format!("replies after commits {r:?}"),
        Action::Advisory(Advisory::MaxDeliveries {
            stream_seq,
            deliveries,
        }) => format!("advisory max_deliveries {stream_seq} x{deliveries}"),
        Action::Advisory(Advisory::Nak {
            stream_seq,
            deliveries,
            ..
        }) => format!("advisory nak {stream_seq} x{deliveries}"),
        Action::Advisory(Advisory::Terminated {
            stream_seq,
            deliveries,
            reason,
            ..
        }) => format!("advisory terminated {stream_seq} x{deliveries} {reason}"),
        Action::Advisory(Advisory::Pinned { group, .. }) => format!("advisory pinned {group}"),
        Action::Advisory(Advisory::Unpinned { group, reason }) => {
            format!("advisory unpinned {group} {reason}")
        }
        Action::DeadLetter {
            subject,
            msg,
            deliveries,
            reason,
        } => format!(
            "dead_letter {} x{deliveries} {reason} -> {subject}",
            msg.seq
        ),
        Action::DeleteInactive => "delete".to_string(),
    }
}

/// A pull consumer with explicit acks.
pub(super) fn pull_cfg() -> ConsumerConfig {
    ConsumerConfig {
        durable_name: "C".to_string(),
        ack_policy: AckPolicy::Explicit,
        ack_wait: 30 * SEC as i64,
        max_deliver: -1,
        max_waiting: 512,
        max_ack_pending: 1000,
        ..ConsumerConfig::default()
    }
}

/// A push consumer with explicit acks delivering to `deliver`.
fn push_cfg() -> ConsumerConfig {
    ConsumerConfig {
        deliver_subject: "deliver".to_string(),
        ..pull_cfg()
    }
}

/// One step of a table: at `ms`, do `input`, expect exactly `expect`.
struct Step {
    ms: u64,
    input: In,
    expect: &'static [&'static str],
}

/// What a table step hands in.
enum In {
    Tick,
    Pull(&'static str, &'static str),
    Ack(u64, &'static str),
    AckSync(u64, &'static str, &'static str),
    Publish(usize),
}

fn run_table(script: &mut Script, steps: &[Step]) {
    for (i, s) in steps.iter().enumerate() {
        let got = match s.input {
            In::Tick => script.tick(s.ms),
            In::Pull(reply, body) => script.pull(s.ms, reply, body),
            In::Ack(seq, payload) => script.ack(s.ms, seq, payload, None),
            In::AckSync(seq, payload, reply) => script.ack(s.ms, seq, payload, Some(reply)),
            In::Publish(len) => {
                script.world.publish("orders.new", len);
                script.on(s.ms, ConsumerEvent::StreamChanged)
            }
        };
        assert_eq!(got, s.expect, "step {i} at {} ms", s.ms);
    }
}

const fn step(ms: u64, input: In, expect: &'static [&'static str]) -> Step {
    Step { ms, input, expect }
}

#[test]
fn ack_wait_expiry_redelivers_at_exactly_ack_wait() {
    let mut s = Script::new(
        ConsumerConfig {
            ack_wait: SEC as i64,
            ..pull_cfg()
        },
        1,
    );
    run_table(
        &mut s,
        &[
            step(0, In::Pull("r1", r#"{"batch":1}"#), &["deliver 1 x1 -> r1"]),
            step(10, In::Pull("r2", r#"{"batch":1}"#), &[]),
            step(999, In::Tick, &[]),
            step(1000, In::Tick, &["deliver 1 x2 -> r2"]),
            step(1500, In::Ack(1, "+ACK"), &[]),
            step(1500, In::Pull("r3", r#"{"batch":1}"#), &[]),
            step(5000, In::Tick, &[]),
        ],
    );
}

#[test]
fn poll_timeout_is_the_next_ack_deadline() {
    let mut s = Script::new(
        ConsumerConfig {
            ack_wait: SEC as i64,
            ..pull_cfg()
        },
        1,
    );
    assert_eq!(
        s.timeout_ms(),
        IDLE_NS / MS,
        "nothing due and no interest watched: the idle wake"
    );
    s.pull(100, "r1", "");
    assert_eq!(
        s.timeout_ms(),
        1100,
        "the request got its message: only the ack deadline (100 ms + 1 s) is due"
    );
    s.pull(200, "r2", r#"{"batch":1,"expires":5000000000}"#);
    assert_eq!(s.timeout_ms(), 450, "a waiting request: the interest tick");
    s.tick(900);
    assert_eq!(s.timeout_ms(), 1100, "ack deadline: 100 ms + 1 s");
}

#[test]
fn backoff_sets_the_wait_before_each_redelivery_and_repeats_its_last() {
    let mut s = Script::new(
        ConsumerConfig {
            ack_wait: 10 * SEC as i64,
            backoff: vec![SEC as i64, 3 * SEC as i64],
            max_deliver: 5,
            ..pull_cfg()
        },
        1,
    );
    let pull = || In::Pull("r", r#"{"batch":10}"#);
    run_table(
        &mut s,
        &[
            step(0, pull(), &["deliver 1 x1 -> r"]),
            step(999, In::Tick, &[]),
            step(1000, In::Tick, &["deliver 1 x2 -> r"]),
            step(3999, In::Tick, &[]),
            step(4000, In::Tick, &["deliver 1 x3 -> r"]),
            step(6999, In::Tick, &[]),
            step(7000, In::Tick, &["deliver 1 x4 -> r"]),
            step(10000, In::Tick, &["deliver 1 x5 -> r"]),
            step(13000, In::Tick, &["advisory max_deliveries 1 x5"]),
            step(60000, In::Tick, &[]),
        ],
    );
}

#[test]
fn max_deliver_counts_naks_as_deliveries() {
    // nats-server: a pull consumer with max_deliver 3 whose client NAKs every delivery gets
    // the message exactly 3 times, then the max-deliveries advisory and dead letter.
    let mut cfg = ConsumerConfig {
        max_deliver: 3,
        ..pull_cfg()
    };
    cfg.metadata
        .insert(deliver::DEAD_LETTER_KEY.to_string(), "dlq".to_string());
    let mut s = Script::new(cfg, 1);
    s.show_proposals = true;
    let pull = |r| In::Pull(r, r#"{"batch":1}"#);
    run_table(
        &mut s,
        &[
            step(
                0,
                pull("r1"),
                &["deliver 1 x1 -> r1", "propose d[1] a[] x[] r[]"],
            ),
            step(10, pull("r2"), &[]),
            step(
                20,
                In::Ack(1, "-NAK"),
                &[
                    "advisory nak 1 x1",
                    "deliver 1 x2 -> r2",
                    "propose d[1] a[] x[] r[]",
                ],
            ),
            step(30, pull("r3"), &[]),
            step(
                40,
                In::Ack(1, "-NAK"),
                &[
                    "advisory nak 1 x2",
                    "deliver 1 x3 -> r3",
                    "propose d[1] a[] x[] r[]",
                ],
            ),
            step(50, pull("r4"), &[]),
            step(
                60,
                In::AckSync(1, "-NAK", "sync"),
                &[
                    "advisory nak 1 x3",
                    "advisory max_deliveries 1 x3",
                    "dead_letter 1 x3 max_deliver -> dlq",
                    "reply -> sync",
                    "propose d[] a[] x[1] r[]",
                ],
            ),
            step(120_000, In::Tick, &[]),
        ],
    );
    assert!(s.core.state().pending.is_empty());
    assert_eq!(s.core.info().num_waiting, 1, "r4 still waits");
}

#[test]
fn nak_with_delay_waits_the_delay_and_counts_at_max_deliver() {
    let mut s = Script::new(
        ConsumerConfig {
            max_deliver: 2,
            ..pull_cfg()
        },
        1,
    );
    let pull = || In::Pull("r", r#"{"batch":10}"#);
    run_table(
        &mut s,
        &[
            step(0, pull(), &["deliver 1 x1 -> r"]),
            step(
                100,
                In::Ack(1, r#"-NAK {"delay":500000000}"#),
                &["advisory nak 1 x1"],
            ),
            step(599, In::Tick, &[]),
            step(600, In::Tick, &["deliver 1 x2 -> r"]),
            step(700, In::Ack(1, "-NAK 1s"), &["advisory nak 1 x2"]),
            step(1699, In::Tick, &[]),
            step(1700, In::Tick, &["advisory max_deliveries 1 x2"]),
        ],
    );
}

#[test]
fn acks_of_a_consumer_without_acks_get_no_responders_and_change_nothing() {
    let mut cfg = pull_cfg();
    cfg.ack_policy = AckPolicy::None;
    cfg.max_ack_pending = -1;
    let mut s = Script::new(cfg, 2);
    run_table(
        &mut s,
        &[
            step(0, In::Pull("r", r#"{"batch":1}"#), &["deliver 1 x1 -> r"]),
            step(5, In::AckSync(1, "+ACK", "sync"), &["503 -> sync"]),
            step(6, In::AckSync(1, "+NXT", "nxt"), &["503 -> nxt"]),
            step(7, In::Ack(1, "+NAK"), &[]),
            step(8, In::Pull("r2", r#"{"batch":1}"#), &["deliver 2 x1 -> r2"]),
        ],
    );
}

#[test]
fn term_drops_with_advisory_and_waits_for_the_commit_to_answer() {
    let mut cfg = pull_cfg();
    cfg.metadata
        .insert(deliver::DEAD_LETTER_KEY.to_string(), "dlq".to_string());
    let mut s = Script::new(cfg, 1);
    s.show_proposals = true;
    run_table(
        &mut s,
        &[
            step(
                0,
                In::Pull("r", r#"{"batch":5}"#),
                &["deliver 1 x1 -> r", "propose d[1] a[] x[] r[]"],
            ),
            step(
                5,
                In::AckSync(1, "+TERM bad", "sync"),
                &[
                    "dead_letter 1 x1 terminated -> dlq",
                    "advisory terminated 1 x1 bad",
                    "propose d[] a[] x[1] r[\"sync\"]",
                ],
            ),
        ],
    );
}

#[test]
fn pull_expiry_answers_408_with_what_was_left() {
    let mut s = Script::new(pull_cfg(), 1);
    run_table(
        &mut s,
        &[
            step(
                0,
                In::Pull("r", r#"{"batch":3,"expires":2000000000}"#),
                &["deliver 1 x1 -> r"],
            ),
            step(1999, In::Tick, &[]),
            step(2000, In::Tick, &["408 2/0 -> r"]),
        ],
    );
    assert_eq!(s.core.info().num_waiting, 0);
}

#[test]
fn no_wait_answers_404_when_empty_or_after_a_partial_batch() {
    let mut s = Script::new(pull_cfg(), 2);
    run_table(
        &mut s,
        &[
            step(
                0,
                In::Pull("a", r#"{"batch":5,"no_wait":true}"#),
                &["deliver 1 x1 -> a", "deliver 2 x1 -> a", "404 -> a"],
            ),
            step(
                1,
                In::Pull("b", r#"{"batch":5,"no_wait":true}"#),
                &["404 -> b"],
            ),
            // With expires, an empty no_wait request waits for its expiry.
            step(
                2,
                In::Pull("c", r#"{"batch":5,"no_wait":true,"expires":1000000000}"#),
                &[],
            ),
            step(1002, In::Tick, &["408 5/0 -> c"]),
        ],
    );
}

#[test]
fn max_bytes_ends_a_request_with_409_when_the_next_message_does_not_fit() {
    // Each message counts as nats-server counts it: 10 (subject) + 10 (payload) + its ack
    // reply subject (39 bytes here: `$JS.ACK.` with this script's names and numbers).
    let size = 10 + 10 + 39;
    let mut s = Script::new(pull_cfg(), 3);
    let body: &'static str =
        Box::leak(format!(r#"{{"batch":10,"max_bytes":{}}}"#, 2 * size + 5).into_boxed_str());
    let tiny: &'static str =
        Box::leak(format!(r#"{{"batch":10,"max_bytes":{}}}"#, size - 1).into_boxed_str());
    run_table(
        &mut s,
        &[
            step(
                0,
                In::Pull("r", body),
                &[
                    "deliver 1 x1 -> r",
                    "deliver 2 x1 -> r",
                    "409 max_bytes 8/5 -> r",
                ],
            ),
            step(1, In::Pull("t", tiny), &["409 max_bytes 10/58 -> t"]),
            step(2, In::Pull("u", r#"{"batch":1}"#), &["deliver 3 x1 -> u"]),
        ],
    );
}

#[test]
fn max_waiting_refuses_requests_beyond_it() {
    let mut s = Script::new(
        ConsumerConfig {
            max_waiting: 2,
            ..pull_cfg()
        },
        0,
    );
    run_table(
        &mut s,
        &[
            step(0, In::Pull("a", ""), &[]),
            step(0, In::Pull("b", ""), &[]),
            step(0, In::Pull("c", ""), &["409 Exceeded MaxWaiting -> c"]),
            // Requests take turns.
            step(5, In::Publish(1), &["deliver 1 x1 -> a"]),
            step(6, In::Publish(1), &["deliver 2 x1 -> b"]),
        ],
    );
}

#[test]
fn requests_whose_reply_lost_interest_are_dropped_silently() {
    let mut s = Script::new(pull_cfg(), 0);
    s.pull(0, "gone", r#"{"batch":5}"#);
    s.world.gone.borrow_mut().insert("gone".to_string());
    s.pull(1, "here", r#"{"batch":5}"#);
    s.world.publish("orders.new", 1);
    assert_eq!(
        s.on(2, ConsumerEvent::StreamChanged),
        ["deliver 1 x1 -> here"]
    );
    assert_eq!(s.core.info().num_waiting, 1);
}

#[test]
fn max_ack_pending_holds_back_new_messages_but_not_redeliveries() {
    let mut s = Script::new(
        ConsumerConfig {
            max_ack_pending: 2,
            ack_wait: SEC as i64,
            ..pull_cfg()
        },
        4,
    );
    run_table(
        &mut s,
        &[
            step(
                0,
                In::Pull("r", r#"{"batch":10}"#),
                &["deliver 1 x1 -> r", "deliver 2 x1 -> r"],
            ),
            step(10, In::Ack(1, "+ACK"), &["deliver 3 x1 -> r"]),
            step(1000, In::Tick, &["deliver 2 x2 -> r"]),
            step(1010, In::Tick, &["deliver 3 x2 -> r"]),
        ],
    );
}

#[test]
fn pull_heartbeats_while_idle_then_408() {
    let mut s = Script::new(pull_cfg(), 0);
    run_table(
        &mut s,
        &[
            step(
                0,
                In::Pull(
                    "r",
                    r#"{"batch":1,"expires":2000000000,"idle_heartbeat":500000000}"#,
                ),
                &[],
            ),
            step(499, In::Tick, &[]),
            step(500, In::Tick, &["heartbeat 0/0 -> r"]),
            step(999, In::Tick, &[]),
            step(1000, In::Tick, &["heartbeat 0/0 -> r"]),
            step(1200, In::Publish(1), &["deliver 1 x1 -> r"]),
            step(2000, In::Tick, &[]),
        ],
    );
}

#[test]
fn push_flow_control_stalls_at_the_window_until_answered() {
    // 600 KiB messages: the FC request goes once 1 MiB is outstanding (half the 2 MiB window),
    // deliveries stop at 2 MiB until the reply, which doubles the window.
    let mut s = Script::new(
        ConsumerConfig {
            flow_control: true,
            idle_heartbeat: SEC as i64,
            ..push_cfg()
        },
        0,
    );
    for _ in 0..6 {
        s.world.publish("orders.new", 600 * 1024);
    }
    let got = s.on(0, ConsumerEvent::StreamChanged);
    let token = got[2].split(' ').nth(1).expect("fc subject").to_string();
    assert!(
        token.starts_with("$JS.FC.S.C.") && token.len() == 15,
        "{token}"
    );
    assert_eq!(
        got,
        [
            "deliver 1 x1 -> deliver".to_string(),
            "deliver 2 x1 -> deliver".to_string(),
            format!("fc {token} -> deliver"),
            "deliver 3 x1 -> deliver".to_string(),
            "deliver 4 x1 -> deliver".to_string(),
        ]
    );
    assert!(s.tick(500).is_empty(), "stalled");
    assert_eq!(
        s.tick(1000),
        [format!("heartbeat 4/4 stalled {token} -> deliver")],
        "the idle heartbeat names the FC subject it waits on"
    );
    assert!(
        s.on(
            1001,
            ConsumerEvent::FlowControl {
                subject: "$JS.FC.S.C.other".to_string()
            }
        )
        .is_empty(),
        "a reply to another FC subject changes nothing"
    );
    assert_eq!(
        s.on(1002, ConsumerEvent::FlowControl { subject: token }),
        ["deliver 5 x1 -> deliver", "deliver 6 x1 -> deliver"]
    );
}

#[test]
fn push_idle_heartbeat_only_with_interest() {
    let mut s = Script::new(
        ConsumerConfig {
            idle_heartbeat: SEC as i64,
            ..push_cfg()
        },
        0,
    );
    assert_eq!(s.timeout_ms(), 250);
    s.world.push_bound.set(false);
    assert!(s.tick(1000).is_empty());
    s.world.push_bound.set(true);
    assert_eq!(s.tick(1100), ["heartbeat 0/0 -> deliver"]);
    assert!(s.tick(2099).is_empty());
    assert_eq!(s.tick(2100), ["heartbeat 0/0 -> deliver"]);
}

#[test]
fn new_leader_redelivers_pending_from_recorded_times_and_catches_up_on_acks_above() {
    // The old leader's replicated state: 1 and 2 delivered at 0 ms; it also sent 3..=5 without
    // getting that committed. The new leader starts at 400 ms.
    let mut state = ConsumerState::default();
    state.record_delivery(1, 1, EPOCH);
    state.record_delivery(2, 2, EPOCH);
    let mut s = Script::from_state(
        ConsumerConfig {
            ack_wait: SEC as i64,
            ..pull_cfg()
        },
        6,
        state,
    );
    s.show_proposals = true;
    s.core.handle(at(400), ConsumerEvent::Timeout);
    assert!(s.drain(400).is_empty());
    assert_eq!(s.core.info().num_pending, 4, "3..=6 not delivered yet");
    run_table(
        &mut s,
        &[
            // A client acks 5: 3..=5 are recorded as delivered now, then 5 is acked.
            step(
                500,
                In::AckSync(5, "+ACK", "sync"),
                &["propose d[3, 4, 5] a[5] x[] r[\"sync\"]"],
            ),
            step(
                600,
                In::Pull("r", r#"{"batch":10}"#),
                &["deliver 6 x1 -> r", "propose d[6] a[] x[] r[]"],
            ),
            // 1 and 2 come back at their recorded delivery time + ack wait.
            step(
                1000,
                In::Tick,
                &[
                    "deliver 1 x2 -> r",
                    "deliver 2 x2 -> r",
                    "propose d[1, 2] a[] x[] r[]",
                ],
            ),
            // 3 and 4 a full ack wait after the catch-up, never 5.
            step(
                1500,
                In::Tick,
                &[
                    "deliver 3 x2 -> r",
                    "deliver 4 x2 -> r",
                    "propose d[3, 4] a[] x[] r[]",
                ],
            ),
        ],
    );
    // An ack far beyond the stream's end is ignored.
    assert!(s.ack(1550, 99, "+ACK", None).is_empty());
}

#[test]
fn a_batch_gathers_behind_the_one_in_flight_and_acksync_waits_with_it() {
    let mut s = Script::new(pull_cfg(), 3);
    s.auto_commit = false;
    s.show_proposals = true;
    run_table(
        &mut s,
        &[
            step(
                0,
                In::Pull("r", r#"{"batch":3}"#),
                &[
                    "deliver 1 x1 -> r",
                    "deliver 2 x1 -> r",
                    "deliver 3 x1 -> r",
                    "propose d[1, 2, 3] a[] x[] r[]",
                ],
            ),
            step(1, In::AckSync(1, "+ACK", "s1"), &[]),
            step(2, In::AckSync(2, "+ACK", "s2"), &[]),
            // An AckSync for a message not pending is answered at once.
            step(3, In::AckSync(9, "+ACK", "s9"), &["reply -> s9"]),
        ],
    );
    assert!(s.core.gathering());
    assert_eq!(
        s.on(4, ConsumerEvent::ProgressDone { count: 1 }),
        ["propose d[] a[1, 2] x[] r[\"s1\", \"s2\"]"]
    );
    assert!(!s.core.gathering());
}

#[test]
fn the_settle_mark_is_reached_under_steady_acks() {
    // A STREAM.INFO waits for the acks handled before it (the progress mark), not for a lull:
    // acks keep coming and a batch is always in flight or gathering, yet the mark taken
    // while acks 1 and 2 gather is reached once their batch is done.
    let mut s = Script::new(pull_cfg(), 4);
    s.auto_commit = false;
    s.show_proposals = true;
    s.pull(0, "r", r#"{"batch":4}"#);
    assert_eq!((s.core.progress_mark(), s.core.progress_finished()), (1, 0));
    s.ack(1, 1, "+ACK", None);
    s.ack(2, 2, "+ACK", None);
    assert!(s.core.gathering());
    let mark = s.core.progress_mark();
    assert_eq!(mark, 2, "the gathering batch is the next proposal");
    // The deliveries' batch is done: acks 1 and 2 go out as batch 2 ...
    assert_eq!(
        s.on(3, ConsumerEvent::ProgressDone { count: 1 }),
        ["propose d[] a[1, 2] x[] r[]"]
    );
    // ... while ack 3 gathers behind it: the engine is never idle.
    s.ack(4, 3, "+ACK", None);
    assert!(s.core.gathering());
    assert!(s.core.progress_finished() < mark);
    s.on(5, ConsumerEvent::ProgressDone { count: 1 });
    assert!(
        s.core.progress_finished() >= mark,
        "acks 1 and 2 are applied"
    );
    assert!(
        s.core.progress_mark() > mark,
        "ack 3 is behind a later mark"
    );
}

#[test]
fn stop_answers_waiting_requests_and_ends_everything() {
    let mut s = Script::new(pull_cfg(), 0);
    s.pull(0, "a", "");
    s.pull(0, "b", "");
    assert_eq!(
        s.on(1, ConsumerEvent::Stop { deleted: false }),
        ["409 leadership -> a", "409 leadership -> b"]
    );
    assert!(s.core.stopped());
    assert!(s.pull(2, "c", "").is_empty());
}

#[test]
fn an_idle_pull_consumer_sleeps_until_its_pause_ends_or_a_push_consumer_watches_interest() {
    let until = go_time::format(EPOCH + 3 * SEC);
    let mut s = Script::new(
        ConsumerConfig {
            pause_until: Some(until),
            ..pull_cfg()
        },
        1,
    );
    assert!(s.pull(0, "r", r#"{"batch":1}"#).is_empty(), "paused");
    assert_eq!(s.timeout_ms(), 250, "a waiting request: the interest tick");
    s.world.gone.borrow_mut().insert("r".to_string());
    assert!(s.tick(250).is_empty());
    assert_eq!(s.core.info().num_waiting, 0, "its requester went away");
    assert_eq!(
        s.timeout_ms(),
        3000,
        "then nothing but the end of the pause"
    );
    let mut push = Script::new(push_cfg(), 0);
    assert_eq!(push.timeout_ms(), 250, "interest read on the tick");
    push.core.interest_is_told();
    assert_eq!(push.timeout_ms(), IDLE_NS / MS, "interest changes are told");
}

#[test]
fn a_told_push_consumer_counts_inactivity_from_when_its_interest_left() {
    let mut s = Script::new(
        ConsumerConfig {
            inactive_threshold: 5 * SEC as i64,
            ..push_cfg()
        },
        0,
    );
    s.core.interest_is_told();
    assert!(s.tick(0).is_empty());
    assert_eq!(
        s.timeout_ms(),
        IDLE_NS / MS,
        "bound: no inactivity deadline while interest lasts"
    );
    // No round for 20 s (nothing happened), then the subscriber leaves and the owner says so.
    s.world.push_bound.set(false);
    assert!(s.tick(20_000).is_empty(), "inactive only from now on");
    assert_eq!(s.timeout_ms(), 25_000);
    assert!(s.tick(24_999).is_empty());
    s.world.push_bound.set(true);
    assert!(s.tick(24_999).is_empty(), "a subscriber came back in time");
    s.world.push_bound.set(false);
    assert!(s.tick(26_000).is_empty());
    assert_eq!(s.tick(31_000), ["delete"]);
}

#[test]
fn inactive_pull_consumer_asks_for_deletion_once() {
    let mut s = Script::new(
        ConsumerConfig {
            inactive_threshold: 5 * SEC as i64,
            ..pull_cfg()
        },
        0,
    );
    s.pull(0, "r", r#"{"expires":1000000000}"#);
    assert_eq!(s.tick(1000), ["408 1/0 -> r"]);
    // Inactive since its request expired (1000 ms): the engine sleeps until then.
    assert_eq!(s.timeout_ms(), 6000);
    assert!(s.tick(5999).is_empty());
    assert_eq!(s.tick(6000), ["delete"]);
    assert_eq!(
        s.timeout_ms(),
        6000 + IDLE_NS / MS,
        "no wake-ups while the deletion is under way"
    );
    assert!(
        s.tick(7000).is_empty(),
        "no second request while one is under way"
    );
    s.core.handle(at(7000), ConsumerEvent::DeleteFailed);
    assert_eq!(s.timeout_ms(), 12_000);
    assert!(s.tick(11_999).is_empty());
    assert_eq!(s.tick(12_000), ["delete"]);
}

#[test]
fn pending_from_the_replicated_state_keeps_its_delivery_count() {
    let mut state = ConsumerState::default();
    state.delivered.stream_seq = 1;
    state.delivered.consumer_seq = 4;
    state.pending.insert(
        1,
        Pending {
            consumer_seq: 4,
            deliveries: 2,
            last_delivered_ns: EPOCH,
        },
    );
    let mut s = Script::from_state(
        ConsumerConfig {
            ack_wait: SEC as i64,
            max_deliver: 3,
            ..pull_cfg()
        },
        1,
        state,
    );
    s.pull(0, "r", r#"{"batch":5}"#);
    assert_eq!(s.tick(1000), ["deliver 1 x3 -> r"]);
    assert_eq!(s.tick(2000), ["advisory max_deliveries 1 x3"]);
}
