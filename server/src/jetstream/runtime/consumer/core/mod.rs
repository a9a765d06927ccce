//! The sans-IO core of one consumer's delivery engine: every decision about what to deliver,
//! redeliver, drop, answer and propose, with no clock, channel, task or bus of its own.
//!
//! It is driven by [`ConsumerCore::handle`] (an event and the time it happened), and tells its
//! owner what to do through [`ConsumerCore::poll_action`] (deliver, answer, propose, advise, ...)
//! and when to wake it through [`ConsumerCore::poll_timeout`]. It reads the stream and interest
//! on the bus through the read-only [`ConsumerView`]. The engine task (`engine.rs`) owns the
//! channels, the clock and every I/O call: publishing, proposing to Raft, deleting.
//!
//! Files: this one has the types and the driver (events in, rounds, actions out, the progress
//! batch); `pull.rs` admits and expires pull requests; `delivery.rs` chooses and sends messages
//! (redeliveries first, limits, pacing, flow control, heartbeats); `acks.rs` handles acks, ack
//! wait expiry, `max_deliver` and the catch-up after a change of leader. `tests.rs` has table
//! tests with explicit times, `model_tests.rs` the seeded random-event test.
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
use jetraft_proto::stream::ConsumerProgress;
use jetraft_storage::consumer::ConsumerState;
use jetraft_storage::stream::{StoredMsg, StreamStore};
use tracing::debug;

use super::deadlines::Deadlines;
use super::deliver::{OutMsg, PullStatus};
use super::engine::EngineView;
use super::pacing::Pacer;
use crate::jetstream::ack::AckKind;
use crate::jetstream::api::types::consumer::{AckPolicy, ConsumerConfig};
use crate::jetstream::api::types::consumer_requests::PriorityRequest;
use crate::jetstream::api::types::go_time;

/// Flow control window start and cap (bytes outstanding since the last FC reply).
const FC_WINDOW_START: u64 = 2 * 1024 * 1024;
const FC_WINDOW_MAX: u64 = 32 * 1024 * 1024;
/// Most messages delivered per round (keeps rounds short so acks are not starved).
const DELIVERIES_PER_ROUND: usize = 1024;
/// Interest is re-checked at least this often (ns) while it matters: for a push consumer
/// (a subscriber on the deliver subject starts and stops deliveries and inactivity) and for
/// waiting pull requests (a requester that went away). Interest is read, not told.
pub(crate) const TICK_NS: u64 = 250_000_000;
/// The longest an engine sleeps when nothing is due and no interest is watched: a pull
/// consumer without waiting requests wakes for events, its deadlines, its inactivity
/// threshold and the end of a pause, and otherwise only this rarely.
pub(crate) const IDLE_NS: u64 = 60_000_000_000;
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
    /// `CONSUMER.UNPIN`: the group's pinned client loses its pin (`pinned_client`).
    Unpin {
        /// The priority group.
        group: String,
    },
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
    /// `PINNED`: a priority group was pinned to a new client.
    Pinned {
        /// The priority group.
        group: String,
        /// The new pin id.
        pinned_id: String,
    },
    /// `UNPINNED`: a priority group lost its pin (`admin` or `timeout`).
    Unpinned {
        /// The priority group.
        group: String,
        /// Why.
        reason: &'static str,
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
    /// Publish a `503` no-responders status to `to` (an ack of a consumer without acks).
    NoResponders {
        /// The ack's reply subject.
        to: String,
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
    /// Its priority-group fields (JSON requests), see `priority.rs`.
    priority: Option<PriorityRequest>,
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
    /// Whether the last round found it active (interest or a pull request), so that the
    /// round finding it inactive counts the inactivity from then, not from an older round.
    was_active: bool,
    /// Whether the owner hands in a round (a [`ConsumerEvent::Timeout`]) whenever the push
    /// interest may have changed, so the interest tick is not needed for it.
    interest_told: bool,
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
    /// Progress batches proposed so far (numbered from 1 in proposal order).
    proposed: u64,
    /// Progress batches done (committed or failed) so far; they finish in proposal order.
    finished: u64,
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
    /// The client a `pinned_client` group is pinned to.
    pin: Option<priority::Pin>,
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
            was_active: false,
            interest_told: false,
            last_progress: now.mono_ns,
            ack_replies: Vec::new(),
            out: Vec::new(),
            actions: VecDeque::new(),
            in_flight: 0,
            gathering: false,
            proposed: 0,
            finished: 0,
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
            pin: None,
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
                self.finished += count as u64;
            }
            ConsumerEvent::ProposeFailed => {
                self.in_flight = self.in_flight.saturating_sub(1);
                self.finished += 1;
                return;
            }
            ConsumerEvent::DeleteFailed => {
                self.deleting = false;
                self.last_active = self.now.mono_ns;
                return;
            }
            ConsumerEvent::Unpin { group } => self.unpin(&group, "admin"),
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
    /// latest: the next ack deadline, request expiry, heartbeat, paced delivery, position
    /// record, pin lapse, end of a pause or inactivity deadline; at most [`TICK_NS`] away while
    /// interest is watched (push consumers, waiting pull requests), else at most [`IDLE_NS`].
    pub(crate) fn poll_timeout(&self) -> u64 {
        let now = self.now;
        let watches_interest =
            (self.cfg.is_push() && !self.interest_told) || !self.waiting.is_empty();
        let mut wake = now.mono_ns + if watches_interest { TICK_NS } else { IDLE_NS };
        if let Some(threshold) = u64::try_from(self.cfg.inactive_threshold)
            .ok()
            .filter(|t| *t > 0 && !self.deleting && !self.was_active)
        {
            wake = wake.min(self.last_active.saturating_add(threshold));
        }
        if let Some(until) = self.cfg.pause_until.as_deref().and_then(go_time::parse)
            && until > now.unix_ns
        {
            wake = wake.min(now.mono_ns + (until - now.unix_ns));
        }
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
        if let Some(at) = self.pin_deadline() {
            wake = wake.min(at);
        }
        wake.max(now.mono_ns + MIN_WAKE_NS)
    }

    /// The owner promises a round whenever the push interest may have changed (it watches the
    /// deliver subject): push consumers then wake only for events and deadlines.
    pub(crate) fn interest_is_told(&mut self) {
        self.interest_told = true;
    }

    /// The push consumer's deliver subject (empty for a pull consumer).
    pub(crate) fn deliver_subject(&self) -> &str {
        &self.cfg.deliver_subject
    }

    /// Whether a progress batch is gathering behind the ones in flight (the owner must hand
    /// in [`ConsumerEvent::ProgressDone`] as soon as one is done).
    pub(crate) fn gathering(&self) -> bool {
        self.gathering
    }

    /// The barrier for what the core has handled so far (acks included): the number of the
    /// progress batch that carries the last of it (the one gathering, if any, counts as the
    /// next proposal). Everything handled before is applied once [`Self::progress_finished`]
    /// reaches it, however many batches follow meanwhile.
    pub(crate) fn progress_mark(&self) -> u64 {
        self.proposed + u64::from(self.gathering)
    }

    /// Progress batches done (committed or failed) so far, in proposal order.
    pub(crate) fn progress_finished(&self) -> u64 {
        self.finished
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
            priority_groups: self.pinned_groups(),
        }
    }

    /// The working copy of the delivery and ack state.
    #[cfg(test)]
    pub(crate) fn state(&self) -> &ConsumerState {
        &self.state
    }

    /// One round: redeliveries, deliveries, no-wait answers, heartbeats, inactivity, batch.
    fn round(&mut self) {
        self.lapse_pin();
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
        if active || self.was_active {
            // Active until now, as far as anyone can tell: rounds run on every change of
            // interest or requests (or on the interest tick).
            self.last_active = now;
        }
        self.was_active = active;
        if active {
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
        self.proposed += 1;
        self.actions
            .push_back(Action::Propose { progress, replies });
    }
}

mod acks;
mod delivery;
mod priority;
mod pull;

pub(crate) use priority::PinnedGroup;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod model_tests;

#[cfg(test)]
mod priority_tests;
