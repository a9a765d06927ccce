//! The sans-IO core of one consumer's delivery engine: every decision about what to deliver,
//! redeliver, drop, answer and propose, with no clock, channel, task or bus of its own.
//!
//! It is driven by [`ConsumerCore::handle`] (an event and the time it happened), and tells its
//! owner what to do through [`ConsumerCore::poll_action`] (deliver, answer, propose, advise, ...)
//! and when to wake it through [`ConsumerCore::poll_timeout`]. It reads the stream and interest
//! on the bus through the read-only [`ConsumerView`]. The engine task (`engine.rs`) owns the
//! channels, the clock and every I/O call: publishing, proposing to Raft, deleting.
//!
//! It keeps a working copy of the consumer's replicated state (`ConsumerState`), ahead of the
//! state machine by the progress batches in flight, plus what is never replicated: waiting pull
//! requests, ack deadlines, flow control, pacing and heartbeat timers.
//!
//! Invariants:
//! - Every delivery, ack and drop is appended to one `ConsumerProgress` batch, proposed (as an
//!   [`Action::Propose`]) in the order it happened.
//! - Messages go out as soon as they are chosen, before the batch recording their delivery is
//!   committed (as nats-server does); an AckSync reply goes out only once the batch holding
//!   that ack is committed.
//! - Redeliveries go before new messages; `max_ack_pending` only holds back new messages.
//! - A message is delivered at most `max_deliver` times: when it would become due again after
//!   that many deliveries (ack wait expired, or a NAK, as in nats-server) it is dropped with a
//!   `MAX_DELIVERIES` advisory and its dead-letter copy instead.
//! - A new leader starts from the replicated state: acknowledged messages are never redelivered;
//!   pending ones come back when their ack wait (from their recorded delivery time) expires.
//! - A delivery the old leader made but did not get committed is unknown to the new leader, and
//!   a client may still ack it: an ack above the last recorded delivery first records every
//!   matching message up to it as delivered now (any of them may have been sent), then acks.
//!   So an ack that got its AckSync reply is never undone, and the messages around it that
//!   nobody acked come back after their ack wait.
//!
//! Time: [`Now`] carries a monotonic clock (timers of pull requests, heartbeats, pacing,
//! inactivity) and the wall clock (recorded delivery and ack times, ack deadlines, which must
//! survive a change of leader, and `pause_until`).

use std::collections::{BTreeSet, VecDeque};

use bytes::Bytes;
use jetraft_proto::stream::{ConsumerProgress, Delivery};
use jetraft_storage::consumer::ConsumerState;
use jetraft_storage::stream::{StoredMsg, StreamStore};
use tracing::debug;

use super::deadlines::Deadlines;
use super::deliver::{self, OutMsg, PullStatus};
use super::engine::EngineView;
use super::pacing::Pacer;
use crate::jetstream::ack::AckKind;
use crate::jetstream::api::types::consumer::{AckPolicy, ConsumerConfig, DeliverPolicy};
use crate::jetstream::api::types::consumer_requests::{
    NextRequest, check_next_request_limits, parse_next_request,
};
use crate::jetstream::api::types::go_time;
use crate::jetstream::stream::consumers::{
    count_last_per_subject, count_pending, is_initial_last_per_subject,
};

/// Flow control window start and cap (bytes outstanding since the last FC reply).
const FC_WINDOW_START: u64 = 2 * 1024 * 1024;
const FC_WINDOW_MAX: u64 = 32 * 1024 * 1024;
/// Most messages delivered per round (keeps rounds short so acks are not starved).
const DELIVERIES_PER_ROUND: usize = 1024;
/// Interest and inactivity are re-checked at least this often (ns).
pub(crate) const TICK_NS: u64 = 250_000_000;
/// Most new messages read from the store in one pass (and at most [`READ_AHEAD_BYTES`]).
const READ_AHEAD: usize = 128;
/// Byte budget of one read-ahead pass.
const READ_AHEAD_BYTES: usize = 1024 * 1024;
/// Most messages an ack above the last recorded delivery may record as delivered (the old
/// leader's uncommitted deliveries are at most a few rounds; a larger gap is a forged ack).
const CATCH_UP_MAX: usize = 16 * 1024;
/// How often a consumer without acks records its position in the stream group (ns).
const POSITION_EVERY_NS: u64 = 200_000_000;
/// Progress batches proposed and not yet committed; with this many in flight the next batch
/// gathers behind them (the first commit wakes the engine), so a stream of acks makes a few
/// large entries instead of one small entry per round.
const PROGRESS_IN_FLIGHT: usize = 1;
/// A gathering batch is proposed anyway once it records this many deliveries, acks and drops.
const PROGRESS_GATHER_MAX: usize = 8192;
/// The earliest a wake-up is asked for after `now` (ns).
const MIN_WAKE_NS: u64 = 1_000_000;

/// The time an event happened (or a round runs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Now {
    /// Monotonic nanoseconds since an origin the owner picks (never goes back).
    pub mono_ns: u64,
    /// Wall clock, nanoseconds since the Unix epoch.
    pub unix_ns: u64,
}

/// What the core may read of the world, never change: the stream's store, and interest on
/// the bus (the engine task implements it over the stream state machine and the bus; tests over
/// a memory store).
pub(crate) trait ConsumerView {
    /// Runs `f` on the stream's store and the state machine's removal count (which changes when
    /// messages are removed, so `num_pending` must be counted again).
    fn read<T>(&self, f: impl FnOnce(&dyn StreamStore, u64) -> T) -> T;
    /// Whether anyone listens on `subject` (a pull request's reply subject).
    fn has_interest(&self, subject: &str) -> bool;
    /// Whether a push consumer's deliver subject has a subscriber of the right kind: a plain
    /// one without `group`, a member of `group` with one.
    fn push_interest(&self, subject: &str, group: Option<&str>) -> bool;
    /// The rate limit's burst in bytes: the stream's `max_msg_size` when set, else the
    /// server's `max_payload` (nats-server's choice).
    fn rate_burst(&self) -> u64;
}

/// What happens to a consumer, fed to [`ConsumerCore::handle`].
#[derive(Debug)]
pub(crate) enum ConsumerEvent {
    /// A pull request (`MSG.NEXT` or `+NXT`) with its reply subject.
    Pull {
        /// Where deliveries and statuses go.
        reply: String,
        /// The request body.
        body: Bytes,
    },
    /// An ack for stream sequence `stream_seq`.
    Ack {
        /// Stream sequence acknowledged.
        stream_seq: u64,
        /// What kind of ack.
        kind: AckKind,
        /// AckSync reply subject.
        reply: Option<String>,
    },
    /// A flow-control reply arrived on `subject`.
    FlowControl {
        /// The `$JS.FC...` subject answered.
        subject: String,
    },
    /// The configuration was updated.
    Reconfigure(Box<ConsumerConfig>),
    /// The stream changed (appends or removals): `num_pending` is counted again.
    StreamChanged,
    /// Nothing but time passed (a timer fired, or the owner woke for another reason).
    Timeout,
    /// `count` of the proposed progress batches are done (committed or failed).
    ProgressDone {
        /// How many.
        count: usize,
    },
    /// The last [`Action::Propose`] could not be submitted (its batch is lost; a new leader
    /// recovers from the replicated state).
    ProposeFailed,
    /// The last [`Action::DeleteInactive`] failed: the consumer stays, inactivity restarts.
    DeleteFailed,
    /// Stop: the consumer was deleted (true) or leadership moved (false). Waiting requests
    /// get their status; nothing else happens afterwards.
    Stop {
        /// Whether the consumer was deleted.
        deleted: bool,
    },
}

/// An advisory to publish on `$JS.EVENT.ADVISORY.CONSUMER.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Advisory {
    /// `MAX_DELIVERIES`: a message was dropped after `max_deliver` deliveries.
    MaxDeliveries {
        /// Stream sequence.
        stream_seq: u64,
        /// Deliveries made.
        deliveries: u64,
    },
    /// `MSG_NAKED`.
    Nak {
        /// Stream sequence.
        stream_seq: u64,
        /// Consumer sequence of its last delivery.
        consumer_seq: u64,
        /// Deliveries made.
        deliveries: u64,
    },
    /// `MSG_TERMINATED`.
    Terminated {
        /// Stream sequence.
        stream_seq: u64,
        /// Consumer sequence of its last delivery.
        consumer_seq: u64,
        /// Deliveries made.
        deliveries: u64,
        /// The `+TERM` reason.
        reason: String,
    },
}

/// What the owner of a core must do, in order, from [`ConsumerCore::poll_action`].
#[derive(Debug)]
pub(crate) enum Action {
    /// Publish a delivery (to the pull request's reply subject or the deliver subject).
    Deliver {
        /// Stream sequence delivered.
        stream_seq: u64,
        /// Deliveries of it so far, this one included.
        deliveries: u64,
        /// The message, its reply subject being the ack subject.
        msg: OutMsg,
    },
    /// Publish a pull status (404, 408, 409, 400) to `to`.
    Status {
        /// The request's reply subject.
        to: String,
        /// Which status.
        status: PullStatus,
    },
    /// Publish `100 Idle Heartbeat` to `to`.
    Heartbeat {
        /// Reply subject of a pull request, or the deliver subject.
        to: String,
        /// Last delivered consumer sequence.
        last_consumer: u64,
        /// Last delivered stream sequence.
        last_stream: u64,
        /// The flow-control subject a stalled push consumer waits on.
        stalled: Option<String>,
    },
    /// Publish `100 FlowControl Request` to the deliver subject with `reply`.
    FlowControlRequest {
        /// The deliver subject.
        to: String,
        /// The `$JS.FC...` subject to answer.
        reply: String,
    },
    /// Publish an empty AckSync reply to `to` now.
    Reply {
        /// The ack's reply subject.
        to: String,
    },
    /// Propose this progress batch to the stream group; once it is committed, and after every
    /// earlier batch, publish an empty reply to each of `replies` (nothing if it fails).
    Propose {
        /// Deliveries, acks and drops, in the order they happened.
        progress: ConsumerProgress,
        /// AckSync replies waiting for it.
        replies: Vec<String>,
    },
    /// Publish an empty reply to each of these once the batches proposed before are committed.
    RepliesAfterCommits(Vec<String>),
    /// Publish an advisory.
    Advisory(Advisory),
    /// Republish a dropped message to the consumer's dead-letter subject.
    DeadLetter {
        /// The dead-letter subject.
        subject: String,
        /// The message dropped.
        msg: StoredMsg,
        /// Deliveries made.
        deliveries: u64,
        /// `max_deliver` or `terminated`.
        reason: &'static str,
    },
    /// Delete the consumer (inactive past `inactive_threshold`); on success publish the
    /// `DELETED` advisory and stop, else report [`ConsumerEvent::DeleteFailed`].
    DeleteInactive,
}

/// How a consumer starts: its replicated record.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConsumerStart {
    /// Configuration.
    pub config: ConsumerConfig,
    /// For `last_per_subject`: the stream's last sequence at creation.
    pub lps_end: u64,
    /// Replicated delivery and ack state.
    pub state: ConsumerState,
    /// Last delivery time, Unix ns.
    pub last_delivered_ns: u64,
    /// Last ack time, Unix ns.
    pub last_ack_ns: u64,
}

/// One waiting pull request.
#[derive(Debug)]
struct PullRequest {
    reply: String,
    /// Messages still wanted.
    batch: u64,
    /// Bytes still allowed (0 = no limit).
    max_bytes: u64,
    /// Whether `max_bytes` was set.
    bytes_limited: bool,
    no_wait: bool,
    /// Monotonic ns.
    expires: Option<u64>,
    /// ns.
    heartbeat: Option<u64>,
    /// Last time (monotonic ns) something (message or heartbeat) was sent to this request.
    last_sent: u64,
    /// Messages delivered to this request so far.
    delivered: u64,
}

/// Flow control of a push consumer.
#[derive(Debug, Default)]
struct FlowControl {
    window: u64,
    /// Bytes delivered since the last answered FC request.
    outstanding: u64,
    /// The FC subject waiting for its reply.
    pending: Option<String>,
}

/// The sans-IO delivery engine of one consumer (see the module docs).
pub(crate) struct ConsumerCore<V> {
    /// The stream and the bus, read-only.
    view: V,
    stream: String,
    name: String,
    cfg: ConsumerConfig,
    filters: Vec<String>,
    lps_end: u64,
    /// Working copy of the replicated state.
    state: ConsumerState,
    /// Ack deadlines of pending messages, Unix ns.
    deadlines: Deadlines,
    /// Pending messages due for redelivery, ascending.
    due: BTreeSet<u64>,
    last_delivered_ns: u64,
    last_ack_ns: u64,
    num_pending: u64,
    /// The stream's last sequence when `num_pending` was last computed (`None`: never).
    counted: Option<u64>,
    /// The state machine's removal count at that time.
    counted_removals: u64,
    waiting: VecDeque<PullRequest>,
    fc: FlowControl,
    /// Last time (monotonic ns) anything went to the deliver subject.
    push_last_sent: u64,
    /// Last time (monotonic ns) the consumer had interest or a pull request.
    last_active: u64,
    /// Last time (monotonic ns) a progress batch was proposed.
    last_progress: u64,
    batch: ConsumerProgress,
    /// AckSync replies that wait for the batch being gathered.
    ack_replies: Vec<String>,
    /// Messages produced this round, moved to `actions` at the round's end (advisories and
    /// dead letters go to `actions` at once).
    out: Vec<Action>,
    /// What the owner must do next.
    actions: VecDeque<Action>,
    /// Progress batches proposed and not done (see [`PROGRESS_IN_FLIGHT`]).
    in_flight: usize,
    /// The batch is gathering behind those in flight: a commit must wake the core.
    gathering: bool,
    /// Replay-original and rate-limit pacing.
    pacer: Pacer,
    /// When (monotonic ns) a paced delivery may go.
    paced_until: Option<u64>,
    /// New messages read ahead in one store pass, next first; only kept within one round
    /// (a message removed meanwhile may still go out, as one removed just after its read).
    ahead: VecDeque<StoredMsg>,
    /// Where the next read-ahead pass of this round starts (`None`: after the last delivery).
    read_next: Option<u64>,
    /// The latest time handed in.
    now: Now,
    /// An event came in since the last round.
    round_due: bool,
    /// A deletion for inactivity is under way: no rounds until it fails.
    deleting: bool,
    /// Stopped: nothing more happens.
    stopped: bool,
    /// State of the generator of flow-control subject tokens (xorshift; seeded by the owner).
    token_state: u64,
}

impl<V: ConsumerView> ConsumerCore<V> {
    /// A core for consumer `name` of `stream`, starting from its replicated record at `now`;
    /// `seed` feeds the flow-control subject tokens (any value; 0 is replaced).
    pub(crate) fn new(
        view: V,
        stream: String,
        name: String,
        start: ConsumerStart,
        now: Now,
        seed: u64,
    ) -> Self {
        let pacer = Pacer::new(&start.config, view.rate_burst(), now.mono_ns);
        let mut core = Self {
            view,
            stream,
            filters: start.config.filters(),
            batch: ConsumerProgress {
                name: name.clone(),
                ..ConsumerProgress::default()
            },
            name,
            cfg: start.config,
            lps_end: start.lps_end,
            state: start.state,
            deadlines: Deadlines::default(),
            due: BTreeSet::new(),
            last_delivered_ns: start.last_delivered_ns,
            last_ack_ns: start.last_ack_ns,
            num_pending: 0,
            counted: None,
            counted_removals: 0,
            waiting: VecDeque::new(),
            fc: FlowControl {
                window: FC_WINDOW_START,
                ..FlowControl::default()
            },
            push_last_sent: now.mono_ns,
            last_active: now.mono_ns,
            last_progress: now.mono_ns,
            ack_replies: Vec::new(),
            out: Vec::new(),
            actions: VecDeque::new(),
            in_flight: 0,
            gathering: false,
            pacer,
            paced_until: None,
            ahead: VecDeque::new(),
            read_next: None,
            now,
            round_due: true,
            deleting: false,
            stopped: false,
            token_state: if seed == 0 {
                0x9E37_79B9_7F4A_7C15
            } else {
                seed
            },
        };
        let pending: Vec<(u64, u64, u64)> = (core.state.pending.iter())
            .map(|(s, p)| (*s, p.deliveries, p.last_delivered_ns))
            .collect();
        for (seq, deliveries, at) in pending {
            let deadline = at.saturating_add(core.ack_wait_ns(deliveries));
            core.deadlines.insert(seq, deadline);
        }
        core.recount();
        debug!(
            consumer = %core.name,
            floor = core.state.ack_floor.stream_seq,
            delivered = core.state.delivered.stream_seq,
            pending = core.state.pending.len(),
            "consumer engine started"
        );
        core
    }

    /// Handles `event`, which happened at `now` (earlier times than one seen before count as
    /// that one). The round of deliveries it may cause runs at the next
    /// [`ConsumerCore::poll_action`].
    pub(crate) fn handle(&mut self, now: Now, event: ConsumerEvent) {
        self.now = Now {
            mono_ns: now.mono_ns.max(self.now.mono_ns),
            unix_ns: now.unix_ns,
        };
        if self.stopped {
            return;
        }
        match event {
            ConsumerEvent::Pull { reply, body } => self.on_pull(reply, &body),
            ConsumerEvent::Ack {
                stream_seq,
                kind,
                reply,
            } => self.on_ack(stream_seq, kind, reply),
            ConsumerEvent::FlowControl { subject } => {
                if self.fc.pending.as_deref() == Some(subject.as_str()) {
                    self.fc.pending = None;
                    self.fc.outstanding = 0;
                    self.fc.window = (self.fc.window * 2).min(FC_WINDOW_MAX);
                }
            }
            ConsumerEvent::Reconfigure(cfg) => {
                self.filters = cfg.filters();
                self.pacer = Pacer::new(&cfg, self.view.rate_burst(), self.now.mono_ns);
                self.paced_until = None;
                self.cfg = *cfg;
                self.counted = None;
                self.recount();
            }
            ConsumerEvent::StreamChanged => self.recount(),
            ConsumerEvent::Timeout => {}
            ConsumerEvent::ProgressDone { count } => {
                self.in_flight = self.in_flight.saturating_sub(count);
            }
            ConsumerEvent::ProposeFailed => {
                self.in_flight = self.in_flight.saturating_sub(1);
                return;
            }
            ConsumerEvent::DeleteFailed => {
                self.deleting = false;
                self.last_active = self.now.mono_ns;
                return;
            }
            ConsumerEvent::Stop { deleted } => {
                self.stop(deleted);
                return;
            }
        }
        self.round_due = true;
    }

    /// The next thing to do, `None` when there is nothing until the next event. Runs the round
    /// (redeliveries, deliveries, statuses, heartbeats, the progress batch) the events handled
    /// since the last one call for, at the latest time handed in.
    pub(crate) fn poll_action(&mut self) -> Option<Action> {
        if self.round_due && !self.stopped && !self.deleting {
            self.round_due = false;
            self.round();
        }
        self.actions.pop_front()
    }

    /// When (monotonic ns) the core must be woken with [`ConsumerEvent::Timeout`] at the
    /// latest: the next ack deadline, request expiry, heartbeat, paced delivery or position
    /// record, and at most [`TICK_NS`] away (interest and inactivity are read, not told).
    pub(crate) fn poll_timeout(&self) -> u64 {
        let now = self.now;
        let mut wake = now.mono_ns + TICK_NS;
        if let Some(d) = self.deadlines.earliest() {
            wake = wake.min(now.mono_ns + d.saturating_sub(now.unix_ns));
        }
        for req in &self.waiting {
            if let Some(e) = req.expires {
                wake = wake.min(e);
            }
            if let Some(hb) = req.heartbeat {
                wake = wake.min(req.last_sent + hb);
            }
        }
        if let Some(hb) = self.push_heartbeat_ns() {
            wake = wake.min(self.push_last_sent + hb);
        }
        if !self.batch.delivered.is_empty() {
            wake = wake.min(self.last_progress + POSITION_EVERY_NS);
        }
        if let Some(at) = self.paced_until {
            wake = wake.min(at);
        }
        wake.max(now.mono_ns + MIN_WAKE_NS)
    }

    /// Whether a progress batch is gathering behind the ones in flight (the owner must hand
    /// in [`ConsumerEvent::ProgressDone`] as soon as one is done).
    pub(crate) fn gathering(&self) -> bool {
        self.gathering
    }

    /// Whether the core stopped (after [`ConsumerEvent::Stop`]).
    pub(crate) fn stopped(&self) -> bool {
        self.stopped
    }

    /// The consumer's live view for `CONSUMER.INFO`.
    pub(crate) fn info(&self) -> EngineView {
        EngineView {
            state: self.state.clone(),
            last_delivered_ns: self.last_delivered_ns,
            last_ack_ns: self.last_ack_ns,
            num_pending: self.num_pending,
            num_waiting: self.waiting.len() as u64,
            push_bound: self.cfg.is_push() && self.push_interest(),
        }
    }

    /// The working copy of the delivery and ack state.
    #[cfg(test)]
    pub(crate) fn state(&self) -> &ConsumerState {
        &self.state
    }

    /// One round: redeliveries, deliveries, no-wait answers, heartbeats, inactivity, batch.
    fn round(&mut self) {
        self.expire_and_redeliver();
        self.pump();
        self.finish_no_wait();
        self.heartbeats();
        if self.check_inactive() {
            return;
        }
        self.flush();
    }

    /// Ends waiting requests with the right status and stops.
    fn stop(&mut self, deleted: bool) {
        let status = if deleted {
            PullStatus::ConsumerDeleted
        } else {
            PullStatus::LeadershipChange
        };
        for req in std::mem::take(&mut self.waiting) {
            self.out.push(Action::Status {
                to: req.reply,
                status: status.clone(),
            });
        }
        self.actions.extend(self.out.drain(..));
        self.stopped = true;
    }

    fn ack_wait_ns(&self, deliveries: u64) -> u64 {
        let backoff = &self.cfg.backoff;
        let ns = if backoff.is_empty() {
            self.cfg.ack_wait
        } else {
            let i = usize::try_from(deliveries.saturating_sub(1))
                .unwrap_or(usize::MAX)
                .min(backoff.len() - 1);
            backoff[i]
        };
        u64::try_from(ns).unwrap_or(0).max(1)
    }

    fn acks(&self) -> bool {
        self.cfg.ack_policy != AckPolicy::None
    }

    fn max_deliver(&self) -> Option<u64> {
        u64::try_from(self.cfg.max_deliver).ok().filter(|m| *m > 0)
    }

    fn paused(&self) -> bool {
        self.cfg
            .pause_until
            .as_deref()
            .and_then(go_time::parse)
            .is_some_and(|until| until > self.now.unix_ns)
    }

    fn push_heartbeat_ns(&self) -> Option<u64> {
        (self.cfg.is_push() && self.cfg.idle_heartbeat > 0)
            .then(|| u64::try_from(self.cfg.idle_heartbeat).unwrap_or(0))
    }

    fn push_interest(&self) -> bool {
        self.view.push_interest(
            &self.cfg.deliver_subject,
            (!self.cfg.deliver_group.is_empty()).then_some(self.cfg.deliver_group.as_str()),
        )
    }

    /// Keeps `num_pending` current: a full count after removals that may concern messages
    /// not delivered yet, otherwise only the messages appended since the last look.
    fn recount(&mut self) {
        let next = self.state.delivered.stream_seq + 1;
        let lps = self.cfg.deliver_policy == DeliverPolicy::LastPerSubject && next <= self.lps_end;
        let (filters, lps_end, counted, prev) =
            (&self.filters, self.lps_end, self.counted, self.num_pending);
        let counted_removals = self.counted_removals;
        let (result, last_seq, removals) = self.view.read(|store, removals| {
            let st = store.state();
            let full = counted.is_none() || counted_removals != removals || lps;
            let result = if full {
                if lps {
                    count_last_per_subject(store, next, lps_end, filters)
                        .and_then(|n| count_pending(store, lps_end + 1, filters).map(|m| n + m))
                } else {
                    count_pending(store, next, filters)
                }
            } else {
                let refs: Vec<&str> = filters.iter().map(String::as_str).collect();
                let mut n = prev;
                let mut at = (counted.unwrap_or(0) + 1).max(next);
                let mut failed = None;
                while at <= st.last_seq {
                    match store.next_matching(at, &refs) {
                        Ok(Some(m)) => {
                            n += 1;
                            at = m.seq + 1;
                        }
                        Ok(None) => break,
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
                match failed {
                    Some(e) => Err(e),
                    None => Ok(n),
                }
            };
            (result, st.last_seq, removals)
        });
        match result {
            Ok(n) => self.num_pending = n,
            Err(e) => debug!(error = %e, "num_pending not recomputed"),
        }
        self.counted = Some(last_seq);
        self.counted_removals = removals;
    }

    fn on_pull(&mut self, reply: String, body: &[u8]) {
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
        let max_waiting = u64::try_from(self.cfg.max_waiting).unwrap_or(0);
        if max_waiting > 0 && self.waiting.len() as u64 >= max_waiting {
            self.out.push(Action::Status {
                to: reply,
                status: PullStatus::Conflict("Exceeded MaxWaiting".to_string()),
            });
            return;
        }
        let now = self.now.mono_ns;
        self.waiting.push_back(PullRequest {
            reply,
            batch: req.batch.max(1),
            max_bytes: req.max_bytes,
            bytes_limited: req.max_bytes > 0,
            no_wait: req.no_wait,
            expires: (req.expires_ns > 0).then(|| now.saturating_add(req.expires_ns)),
            heartbeat: (req.idle_heartbeat_ns > 0).then_some(req.idle_heartbeat_ns),
            last_sent: now,
            delivered: 0,
        });
    }

    fn on_ack(&mut self, seq: u64, kind: AckKind, reply: Option<String>) {
        let now = self.now.unix_ns;
        if matches!(kind, AckKind::Ack | AckKind::Next { .. }) {
            self.catch_up_to(seq, now);
        }
        let known = self.state.pending.contains_key(&seq);
        if !known {
            debug!(consumer = %self.name, seq, "ack for a message not pending");
        }
        match kind {
            AckKind::Ack => {
                let replicated = self.ack(seq, now, known);
                self.answer(reply, replicated);
            }
            AckKind::Next { request } => {
                // Ack, then the ack's reply subject becomes a pull request.
                self.ack(seq, now, known);
                if let Some(reply) = reply {
                    self.on_pull(reply, &request);
                }
            }
            AckKind::Nak { delay_ns } => {
                let mut dropped = false;
                if known && self.acks() {
                    let (dseq, deliveries) = self.pending_info(seq);
                    self.actions.push_back(Action::Advisory(Advisory::Nak {
                        stream_seq: seq,
                        consumer_seq: dseq,
                        deliveries,
                    }));
                    let delay = delay_ns.unwrap_or(0);
                    if delay == 0 {
                        // A NAK counts as a delivery (nats-server): past max_deliver the
                        // message is dropped rather than redelivered.
                        self.deadlines.remove(&seq);
                        dropped = !self.make_due(seq);
                    } else {
                        self.due.remove(&seq);
                        self.deadlines.insert(seq, now.saturating_add(delay));
                    }
                }
                if dropped {
                    debug!(consumer = %self.name, seq, "nak past max_deliver: dropped");
                }
                self.answer(reply, false);
            }
            AckKind::Progress => {
                if known {
                    let (_, deliveries) = self.pending_info(seq);
                    self.deadlines
                        .insert(seq, now.saturating_add(self.ack_wait_ns(deliveries)));
                }
                self.answer(reply, false);
            }
            AckKind::Unknown => self.answer(reply, false),
            AckKind::Term { reason } => {
                if known && self.acks() {
                    let (dseq, deliveries) = self.pending_info(seq);
                    self.dead_letter(seq, deliveries, "terminated");
                    self.drop_pending(seq);
                    self.last_ack_ns = now;
                    self.actions
                        .push_back(Action::Advisory(Advisory::Terminated {
                            stream_seq: seq,
                            consumer_seq: dseq,
                            deliveries,
                            reason,
                        }));
                }
                self.answer(reply, known);
            }
        }
    }

    /// Records as delivered now every matching message after the last recorded delivery up to
    /// `seq`: an ack for `seq` means the previous leader delivered it (and, in order, the ones
    /// before it) without getting that committed. Nothing happens for `seq` at or below the
    /// last recorded delivery, past the stream's end, or further than [`CATCH_UP_MAX`] ahead.
    fn catch_up_to(&mut self, seq: u64, now: u64) {
        if !self.acks() || seq <= self.state.delivered.stream_seq {
            return;
        }
        let from = self.state.delivered.stream_seq + 1;
        let refs: Vec<&str> = self.filters.iter().map(String::as_str).collect();
        let lps =
            (self.cfg.deliver_policy == DeliverPolicy::LastPerSubject).then_some(self.lps_end);
        let gap: Option<Vec<(u64, bool)>> = self.view.read(|store, _| {
            if seq > store.state().last_seq {
                return None;
            }
            let mut out = Vec::new();
            let mut at = from;
            while at <= seq && out.len() <= CATCH_UP_MAX {
                let msgs = match store.next_matching_batch(at, &refs, READ_AHEAD, usize::MAX) {
                    Ok(m) => m,
                    Err(e) => {
                        debug!(error = %e, "ack catch-up read failed");
                        return None;
                    }
                };
                let Some(last) = msgs.last() else {
                    break;
                };
                at = last.seq + 1;
                for m in msgs.iter().filter(|m| m.seq <= seq) {
                    let skip = lps.is_some_and(|end| {
                        m.seq <= end
                            && !is_initial_last_per_subject(store, m.seq, &m.subject, end)
                                .unwrap_or(true)
                    });
                    out.push((m.seq, skip));
                }
            }
            Some(out)
        });
        let Some(gap) = gap else {
            return;
        };
        if gap.len() > CATCH_UP_MAX || gap.last().is_none_or(|(s, _)| *s != seq) {
            debug!(consumer = %self.name, seq, "ack far above the last delivery ignored");
            return;
        }
        debug!(consumer = %self.name, from, seq, "ack above the last recorded delivery");
        for (s, skip) in gap {
            if skip {
                continue;
            }
            let dseq = self.state.delivered.consumer_seq + 1;
            self.state.record_delivery(s, dseq, now);
            self.batch.delivered.push(Delivery {
                stream_seq: s,
                consumer_seq: dseq,
                delivered_ns: now,
            });
            self.deadlines
                .insert(s, now.saturating_add(self.ack_wait_ns(1)));
            self.num_pending = self.num_pending.saturating_sub(1);
        }
    }

    /// (consumer sequence, deliveries) of a pending message.
    fn pending_info(&self, seq: u64) -> (u64, u64) {
        self.state
            .pending
            .get(&seq)
            .map_or((0, 0), |p| (p.consumer_seq, p.deliveries))
    }

    /// Sends an AckSync reply now, or once the current batch is committed.
    fn answer(&mut self, reply: Option<String>, after_commit: bool) {
        if let Some(r) = reply {
            if after_commit {
                self.ack_replies.push(r);
            } else {
                self.out.push(Action::Reply { to: r });
            }
        }
    }

    /// Acks `seq` (and below for `ack_policy: all`); true when something was acknowledged.
    fn ack(&mut self, seq: u64, now: u64, known: bool) -> bool {
        if !self.acks() {
            return false;
        }
        let acked: Vec<u64> = match self.cfg.ack_policy {
            AckPolicy::All => self.state.pending.range(..=seq).map(|(s, _)| *s).collect(),
            _ if known => vec![seq],
            _ => Vec::new(),
        };
        for s in &acked {
            self.state.ack(*s);
            self.deadlines.remove(s);
            self.due.remove(s);
        }
        if acked.is_empty() {
            return false;
        }
        self.batch.acked.push(seq);
        self.last_ack_ns = now;
        true
    }

    /// Removes a pending message without an ack (term, max deliver, gone from the stream).
    fn drop_pending(&mut self, seq: u64) {
        if self.state.ack(seq) {
            self.batch.dropped.push(seq);
        }
        self.deadlines.remove(&seq);
        self.due.remove(&seq);
    }

    /// Makes pending `seq` due for redelivery, or drops it (advisory, dead letter) when it was
    /// delivered `max_deliver` times already; false when it was dropped.
    fn make_due(&mut self, seq: u64) -> bool {
        let deliveries = self.state.pending.get(&seq).map_or(0, |p| p.deliveries);
        if self.max_deliver().is_some_and(|m| deliveries >= m) {
            self.drop_pending(seq);
            self.actions
                .push_back(Action::Advisory(Advisory::MaxDeliveries {
                    stream_seq: seq,
                    deliveries,
                }));
            self.dead_letter(seq, deliveries, "max_deliver");
            return false;
        }
        self.deadlines.remove(&seq);
        self.due.insert(seq);
        true
    }

    /// Moves pending messages whose ack wait expired to `due`, or drops them at max_deliver.
    fn expire_and_redeliver(&mut self) {
        if self.deadlines.is_empty() {
            return;
        }
        for seq in self.deadlines.expired(self.now.unix_ns) {
            self.make_due(seq);
        }
    }

    /// Queues a dropped message's copy for the consumer's dead-letter subject, if it names one.
    fn dead_letter(&mut self, seq: u64, deliveries: u64, reason: &'static str) {
        let Some(subject) = self.cfg.metadata.get(deliver::DEAD_LETTER_KEY) else {
            return;
        };
        let msg = self.view.read(|store, _| store.get(seq).ok().flatten());
        if let Some(msg) = msg {
            self.actions.push_back(Action::DeadLetter {
                subject: subject.clone(),
                msg,
                deliveries,
                reason,
            });
        }
    }

    /// The next message to deliver: a due redelivery first, then the next new one.
    fn next_message(&mut self, allow_new: bool) -> Option<(StoredMsg, bool)> {
        while let Some(seq) = self.due.first().copied() {
            self.due.remove(&seq);
            if !self.state.pending.contains_key(&seq) {
                continue;
            }
            match self.view.read(|store, _| store.get(seq).ok().flatten()) {
                Some(m) => return Some((m, true)),
                None => self.drop_pending(seq),
            }
        }
        if !allow_new {
            return None;
        }
        loop {
            if self.ahead.is_empty() {
                self.read_ahead();
            }
            let m = self.ahead.pop_front()?;
            if self.cfg.deliver_policy == DeliverPolicy::LastPerSubject && m.seq <= self.lps_end {
                // Skip it if a later message on its subject was already there when the
                // consumer was created (later publishes do not count: they come after).
                let end = self.lps_end;
                let initial = self
                    .view
                    .read(|store, _| is_initial_last_per_subject(store, m.seq, &m.subject, end));
                if !initial.unwrap_or(true) {
                    continue;
                }
            }
            return Some((m, false));
        }
    }

    /// Reads the next new messages after the last delivered one into `ahead`, as many as this
    /// round can use (pull: what the waiting requests ask for; push: one round's worth).
    fn read_ahead(&mut self) {
        let start = self
            .read_next
            .unwrap_or(self.state.delivered.stream_seq + 1);
        let want = if self.cfg.is_push() {
            DELIVERIES_PER_ROUND
        } else {
            let asked = (self.waiting.iter()).fold(0u64, |n, r| n.saturating_add(r.batch));
            usize::try_from(asked).unwrap_or(usize::MAX)
        };
        let max = want.clamp(1, READ_AHEAD);
        let refs: Vec<&str> = self.filters.iter().map(String::as_str).collect();
        match self
            .view
            .read(|store, _| store.next_matching_batch(start, &refs, max, READ_AHEAD_BYTES))
        {
            Ok(msgs) => {
                if let Some(last) = msgs.last() {
                    self.read_next = Some(last.seq + 1);
                }
                self.ahead.extend(msgs);
            }
            Err(e) => debug!(error = %e, "consumer read failed"),
        }
    }

    /// Delivers as much as targets, limits and flow control allow.
    fn pump(&mut self) {
        self.pump_round();
        self.ahead.clear();
        self.read_next = None;
    }

    /// One round of [`ConsumerCore::pump`]; a new message it reads but does not send goes
    /// back to the front of `ahead`.
    fn pump_round(&mut self) {
        if self.paused() {
            return;
        }
        let max_ack_pending = u64::try_from(self.cfg.max_ack_pending)
            .ok()
            .filter(|m| *m > 0 && self.acks());
        let push = self.cfg.is_push();
        if push && !self.push_interest() {
            return;
        }
        for _ in 0..DELIVERIES_PER_ROUND {
            if push {
                if self.fc.pending.is_some() && self.fc.outstanding >= self.fc.window {
                    return;
                }
            } else {
                self.drop_dead_requests();
                if self.waiting.is_empty() {
                    return;
                }
            }
            let allow_new = max_ack_pending.is_none_or(|m| (self.state.pending.len() as u64) < m);
            let Some((msg, redelivery)) = self.next_message(allow_new) else {
                return;
            };
            if self.pacer.active() {
                let now = self.now.mono_ns;
                let bytes = (msg.subject.len() + msg.headers.len() + msg.payload.len()) as u64;
                if let Some(at) = self
                    .pacer
                    .ready_at(msg.timestamp_ns, bytes, redelivery, now)
                {
                    if redelivery {
                        self.due.insert(msg.seq);
                    }
                    self.paced_until = Some(at);
                    return;
                }
                self.paced_until = None;
            }
            if !push {
                let size = deliver::pull_size(&msg, &self.stream, &self.name);
                let Some(req) = self.waiting.front_mut() else {
                    return;
                };
                if req.bytes_limited && size > req.max_bytes {
                    // Put the message back for the next request.
                    if redelivery {
                        self.due.insert(msg.seq);
                    } else {
                        self.ahead.push_front(msg);
                    }
                    if let Some(req) = self.waiting.pop_front() {
                        self.out.push(Action::Status {
                            to: req.reply,
                            status: PullStatus::MaxBytesExceeded {
                                pending_msgs: req.batch,
                                pending_bytes: req.max_bytes,
                            },
                        });
                    }
                    continue;
                }
            }
            self.deliver(msg, redelivery);
        }
    }

    /// Sends one message and records the delivery.
    fn deliver(&mut self, msg: StoredMsg, redelivery: bool) {
        let now = self.now;
        let seq = msg.seq;
        let deliveries = if redelivery {
            self.state.pending.get(&seq).map_or(1, |p| p.deliveries + 1)
        } else {
            1
        };
        let dseq = self.state.delivered.consumer_seq + 1;
        if !redelivery && self.num_pending > 0 {
            self.num_pending -= 1;
        }
        let ack_subject = deliver::ack_subject(
            &self.stream,
            &self.name,
            deliveries,
            seq,
            dseq,
            msg.timestamp_ns,
            self.num_pending,
        );
        let (hdrs, payload) = deliver::body(&msg, self.cfg.headers_only);
        let timestamp_ns = msg.timestamp_ns;
        let size;
        if self.cfg.is_push() {
            size = (msg.subject.len() + ack_subject.len() + payload.len()) as u64
                + hdrs.as_ref().map_or(0, |h| h.len() as u64);
            self.out.push(Action::Deliver {
                stream_seq: seq,
                deliveries,
                msg: OutMsg {
                    subject: self.cfg.deliver_subject.clone(),
                    shown: Some(msg.subject),
                    reply: Some(ack_subject),
                    hdrs,
                    payload,
                },
            });
            self.push_last_sent = now.mono_ns;
            if self.cfg.flow_control {
                self.fc.outstanding += size;
                if self.fc.pending.is_none() && self.fc.outstanding >= self.fc.window / 2 {
                    let subject = self.fc_subject();
                    self.out.push(Action::FlowControlRequest {
                        to: self.cfg.deliver_subject.clone(),
                        reply: subject.clone(),
                    });
                    self.fc.pending = Some(subject);
                }
            }
        } else if let Some(req) = self.waiting.front_mut() {
            size = deliver::pull_size(&msg, &self.stream, &self.name);
            self.out.push(Action::Deliver {
                stream_seq: seq,
                deliveries,
                msg: OutMsg {
                    subject: req.reply.clone(),
                    shown: Some(msg.subject),
                    reply: Some(ack_subject),
                    hdrs,
                    payload,
                },
            });
            req.batch -= 1;
            req.delivered += 1;
            req.last_sent = now.mono_ns;
            if req.bytes_limited {
                req.max_bytes = req.max_bytes.saturating_sub(size);
            }
            let done = req.batch == 0 || (req.bytes_limited && req.max_bytes == 0);
            if let Some(req) = self.waiting.pop_front()
                && !done
            {
                // Round robin between waiting requests.
                self.waiting.push_back(req);
            }
        } else {
            return;
        }
        if self.pacer.active() {
            self.pacer.sent(timestamp_ns, size, redelivery, now.mono_ns);
        }
        self.state.record_delivery(seq, dseq, now.unix_ns);
        self.last_delivered_ns = now.unix_ns;
        if !self.acks() {
            // Without acks only the position matters: keep the last delivery.
            self.batch.delivered.clear();
        }
        self.batch.delivered.push(Delivery {
            stream_seq: seq,
            consumer_seq: dseq,
            delivered_ns: now.unix_ns,
        });
        if self.acks() {
            self.deadlines.insert(
                seq,
                now.unix_ns.saturating_add(self.ack_wait_ns(deliveries)),
            );
        } else {
            self.state.pending.remove(&seq);
            self.state.ack_floor = self.state.delivered;
        }
    }

    /// A fresh flow-control reply subject: `$JS.FC.<stream>.<consumer>.<4 random chars>`.
    fn fc_subject(&mut self) -> String {
        const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        let mut token = String::with_capacity(4);
        for _ in 0..4 {
            // xorshift64
            let mut x = self.token_state;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.token_state = x;
            let i = usize::try_from(x % ALPHABET.len() as u64).unwrap_or(0);
            token.push(ALPHABET[i] as char);
        }
        format!("$JS.FC.{}.{}.{token}", self.stream, self.name)
    }

    /// Drops requests that expired (408) or whose reply lost interest (silently).
    fn drop_dead_requests(&mut self) {
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
    fn finish_no_wait(&mut self) {
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

    /// Idle heartbeats for pull requests and push consumers.
    fn heartbeats(&mut self) {
        let now = self.now.mono_ns;
        let last_stream = self.state.delivered.stream_seq;
        let last_consumer = self.state.delivered.consumer_seq;
        for req in &mut self.waiting {
            if let Some(hb) = req.heartbeat
                && now.saturating_sub(req.last_sent) >= hb
            {
                self.out.push(Action::Heartbeat {
                    to: req.reply.clone(),
                    last_consumer,
                    last_stream,
                    stalled: None,
                });
                req.last_sent = now;
            }
        }
        if let Some(hb) = self.push_heartbeat_ns()
            && now.saturating_sub(self.push_last_sent) >= hb
            && self.push_interest()
        {
            let stalled = if self.fc.outstanding >= self.fc.window {
                self.fc.pending.clone()
            } else {
                None
            };
            self.out.push(Action::Heartbeat {
                to: self.cfg.deliver_subject.clone(),
                last_consumer,
                last_stream,
                stalled,
            });
            self.push_last_sent = now;
        }
    }

    /// Asks for the consumer's deletion after `inactive_threshold` without interest or
    /// requests (after flushing the round). True when it did.
    fn check_inactive(&mut self) -> bool {
        let threshold = u64::try_from(self.cfg.inactive_threshold).unwrap_or(0);
        if threshold == 0 {
            return false;
        }
        let active = if self.cfg.is_push() {
            self.push_interest()
        } else {
            !self.waiting.is_empty()
        };
        let now = self.now.mono_ns;
        if active {
            self.last_active = now;
            return false;
        }
        if now.saturating_sub(self.last_active) < threshold {
            return false;
        }
        self.flush();
        self.actions.push_back(Action::DeleteInactive);
        self.deleting = true;
        true
    }

    /// Moves what this round produced to the actions and proposes the progress batch; AckSync
    /// replies wait for its commit (behind earlier batches).
    fn flush(&mut self) {
        self.actions.extend(self.out.drain(..));
        // Consumers without acks record their position at most every POSITION_EVERY_NS.
        let position_only = !self.acks()
            && self.batch.acked.is_empty()
            && self.batch.dropped.is_empty()
            && self.now.mono_ns.saturating_sub(self.last_progress) < POSITION_EVERY_NS;
        let empty = position_only
            || (self.batch.delivered.is_empty()
                && self.batch.acked.is_empty()
                && self.batch.dropped.is_empty());
        self.gathering = false;
        if empty {
            if !self.ack_replies.is_empty() {
                let replies = std::mem::take(&mut self.ack_replies);
                self.actions.push_back(Action::RepliesAfterCommits(replies));
            }
            return;
        }
        let gathered =
            self.batch.delivered.len() + self.batch.acked.len() + self.batch.dropped.len();
        if self.in_flight >= PROGRESS_IN_FLIGHT && gathered < PROGRESS_GATHER_MAX {
            // Gather behind the batches in flight; AckSync replies wait with their acks.
            self.gathering = true;
            return;
        }
        let replies = std::mem::take(&mut self.ack_replies);
        self.last_progress = self.now.mono_ns;
        let mut progress = ConsumerProgress {
            name: self.name.clone(),
            ..ConsumerProgress::default()
        };
        std::mem::swap(&mut progress, &mut self.batch);
        progress.now_ns = self.now.unix_ns;
        self.in_flight += 1;
        self.actions
            .push_back(Action::Propose { progress, replies });
    }
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "model_tests.rs"]
mod model_tests;
