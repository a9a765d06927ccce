//! The delivery engine of one consumer: runs on the stream leader only, as one task.
//!
//! It keeps a working copy of the consumer's replicated state (`ConsumerState`), ahead of the
//! state machine by the progress batches in flight, plus what is never replicated: waiting pull
//! requests, ack deadlines, flow control and heartbeat timers.
//!
//! Invariants:
//! - Every delivery, ack and drop is appended to one `ConsumerProgress` batch, proposed in the
//!   order it happened (proposals are submitted one after another from this task).
//! - Messages go out as soon as they are chosen, before the batch recording their delivery is
//!   committed (as nats-server does); an AckSync reply goes out only once the batch holding
//!   that ack is committed.
//! - Redeliveries go before new messages; `max_ack_pending` only holds back new messages.
//! - A new leader starts from the replicated state: acknowledged messages are never redelivered;
//!   pending ones come back when their ack wait (from their recorded delivery time) expires.
//! - A delivery the old leader made but did not get committed is unknown to the new leader, and
//!   a client may still ack it: an ack above the last recorded delivery first records every
//!   matching message up to it as delivered now (any of them may have been sent), then acks.
//!   So an ack that got its AckSync reply is never undone, and the messages around it that
//!   nobody acked come back after their ack wait.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use jetraft_proto::stream::{ConsumerProgress, Delivery};
use jetraft_raft::GroupId;
use jetraft_storage::consumer::ConsumerState;
use jetraft_storage::stream::StoredMsg;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::debug;

use super::deadlines::Deadlines;
use super::deliver::{self, OutMsg, PullStatus};
use super::pacing::Pacer;
use crate::bus::FlushSet;
use crate::jetstream::ack::AckKind;
use crate::jetstream::api::types::consumer::{AckPolicy, ConsumerConfig, DeliverPolicy};
use crate::jetstream::api::types::consumer_requests::{
    NextRequest, check_next_request_limits, parse_next_request,
};
use crate::jetstream::api::types::go_time;
use crate::jetstream::runtime::{JetStream, now_ns};
use crate::jetstream::stream::StreamStateMachine;
use crate::jetstream::stream::consumers::{
    count_last_per_subject, count_pending, is_initial_last_per_subject,
};

/// Flow control window start and cap (bytes outstanding since the last FC reply).
const FC_WINDOW_START: u64 = 2 * 1024 * 1024;
const FC_WINDOW_MAX: u64 = 32 * 1024 * 1024;
/// Most events handled before deliveries are pumped and progress is proposed.
const EVENTS_PER_ROUND: usize = 256;
/// Most messages delivered per round (keeps rounds short so acks are not starved).
const DELIVERIES_PER_ROUND: usize = 1024;
/// Interest and inactivity are re-checked at least this often.
const TICK: Duration = Duration::from_millis(250);
/// Most new messages read from the store in one pass (and at most [`READ_AHEAD_BYTES`]).
const READ_AHEAD: usize = 128;
/// Byte budget of one read-ahead pass.
const READ_AHEAD_BYTES: usize = 1024 * 1024;
/// Most messages an ack above the last recorded delivery may record as delivered (the old
/// leader's uncommitted deliveries are at most a few rounds; a larger gap is a forged ack).
const CATCH_UP_MAX: usize = 16 * 1024;
/// How often a consumer without acks records its position in the stream group.
const POSITION_EVERY: Duration = Duration::from_millis(200);
/// Progress batches proposed and not yet committed; with this many in flight the next batch
/// gathers behind them (the first commit wakes the engine), so a stream of acks makes a few
/// large entries instead of one small entry per round.
const PROGRESS_IN_FLIGHT: usize = 1;
/// A gathering batch is proposed anyway once it records this many deliveries, acks and drops.
const PROGRESS_GATHER_MAX: usize = 8192;

/// The engine's progress batches proposed and not yet committed (or failed).
#[derive(Default)]
struct InFlight {
    count: AtomicUsize,
    /// Notified each time one of them is done.
    done: tokio::sync::Notify,
}

/// What a consumer engine is asked to do.
pub(crate) enum Event {
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
    /// A snapshot of the engine's view for `CONSUMER.INFO`.
    Info(oneshot::Sender<EngineView>),
    /// Stop: the consumer was deleted (true) or leadership moved (false).
    Stop {
        /// Whether the consumer was deleted.
        deleted: bool,
    },
}

/// What `CONSUMER.INFO` reports from a running engine.
#[derive(Debug, Clone, Default)]
pub(crate) struct EngineView {
    /// Delivery/ack state including what is still being replicated.
    pub state: ConsumerState,
    /// Last delivery time, Unix ns.
    pub last_delivered_ns: u64,
    /// Last ack time, Unix ns.
    pub last_ack_ns: u64,
    /// Matching messages not delivered yet.
    pub num_pending: u64,
    /// Outstanding pull requests.
    pub num_waiting: u64,
    /// Push consumer with interest.
    pub push_bound: bool,
}

/// A proposal's commit, as `registry.submit` returns it.
type Commit = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Bytes, jetraft_raft::RaftError>> + Send>,
>;

/// One step of the outbox: wait for `wait` (dropping `after` if it fails), then send `after`.
pub(crate) struct OutItem {
    wait: Option<Commit>,
    after: Vec<OutMsg>,
    /// Counts `wait` among the engine's progress batches in flight.
    in_flight: Option<Arc<InFlight>>,
}

/// Sends AckSync replies, in order, each after the commit of the batch holding its ack.
async fn outbox_loop(js: Arc<JetStream>, mut rx: mpsc::UnboundedReceiver<OutItem>) {
    while let Some(item) = rx.recv().await {
        let committed = match item.wait {
            Some(wait) => wait.await.is_ok(),
            None => true,
        };
        if let Some(f) = &item.in_flight {
            f.count.fetch_sub(1, Ordering::AcqRel);
            f.done.notify_one();
        }
        if !committed {
            // Not committed (leadership lost): the acks must be sent again to the next leader.
            continue;
        }
        for m in &item.after {
            m.publish(&js);
        }
    }
}

/// One waiting pull request.
struct PullRequest {
    reply: String,
    /// Messages still wanted.
    batch: u64,
    /// Bytes still allowed (0 = no limit).
    max_bytes: u64,
    /// Whether `max_bytes` was set.
    bytes_limited: bool,
    no_wait: bool,
    expires: Option<Instant>,
    heartbeat: Option<Duration>,
    /// Last time something (message or heartbeat) was sent to this request.
    last_sent: Instant,
    /// Messages delivered to this request so far.
    delivered: u64,
}

/// Flow control of a push consumer.
#[derive(Default)]
struct FlowControl {
    window: u64,
    /// Bytes delivered since the last answered FC request.
    outstanding: u64,
    /// The FC subject waiting for its reply.
    pending: Option<String>,
}

/// The engine of one consumer.
pub(crate) struct Engine {
    js: Arc<JetStream>,
    stream: String,
    name: String,
    group: GroupId,
    sm: Arc<Mutex<StreamStateMachine>>,
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
    /// Last time anything went to the deliver subject.
    push_last_sent: Instant,
    /// Last time the consumer had interest or a pull request.
    last_active: Instant,
    /// Last time a progress batch was proposed.
    last_progress: Instant,
    batch: ConsumerProgress,
    ack_replies: Vec<String>,
    /// Messages produced this round, sent by `flush`.
    out: Vec<OutMsg>,
    /// The ordered sender task.
    outbox: mpsc::UnboundedSender<OutItem>,
    /// Progress batches in flight (see [`PROGRESS_IN_FLIGHT`]).
    in_flight: Arc<InFlight>,
    /// The batch is gathering behind those in flight: a commit wakes the engine.
    gathering: bool,
    events: mpsc::UnboundedReceiver<Event>,
    stream_changes: watch::Receiver<u64>,
    /// Replay-original and rate-limit pacing.
    pacer: Pacer,
    /// When a paced delivery may go (the engine wakes then).
    paced_until: Option<Instant>,
    /// New messages read ahead in one store pass, next first; only kept within one `pump`
    /// (a message removed meanwhile may still go out, as one removed just after its read).
    ahead: VecDeque<StoredMsg>,
    /// Where the next read-ahead pass of this `pump` starts (`None`: after the last delivery).
    read_next: Option<u64>,
}

/// The rate limit's burst: the stream's `max_msg_size` when set, else the server's
/// `max_payload` (nats-server's choice).
fn rate_burst(js: &JetStream, sm: &Mutex<StreamStateMachine>) -> u64 {
    let max_msg = sm.lock().config().max_msg_size;
    u64::try_from(max_msg)
        .ok()
        .filter(|m| *m > 0)
        .unwrap_or_else(|| u64::from(js.server_max_payload()))
}

impl Engine {
    /// An engine starting from the replicated state of consumer `name`; `None` if it is gone.
    pub(crate) fn new(
        js: Arc<JetStream>,
        stream: String,
        name: String,
        group: GroupId,
        sm: Arc<Mutex<StreamStateMachine>>,
        events: mpsc::UnboundedReceiver<Event>,
        stream_changes: watch::Receiver<u64>,
    ) -> Option<Self> {
        let (cfg, lps_end, state, last_delivered_ns, last_ack_ns) = {
            let guard = sm.lock();
            let rec = guard.consumer(&name)?;
            (
                rec.config.clone(),
                rec.lps_end,
                rec.state.clone(),
                rec.last_delivered_ns,
                rec.last_ack_ns,
            )
        };
        let now = Instant::now();
        let pacer = Pacer::new(&cfg, rate_burst(&js, &sm));
        let (outbox, outbox_rx) = mpsc::unbounded_channel();
        js.tasks.spawn(outbox_loop(js.clone(), outbox_rx));
        let mut e = Self {
            js,
            stream,
            filters: cfg.filters(),
            name: name.clone(),
            group,
            sm,
            cfg,
            lps_end,
            state,
            deadlines: Deadlines::default(),
            due: BTreeSet::new(),
            last_delivered_ns,
            last_ack_ns,
            num_pending: 0,
            counted: None,
            counted_removals: 0,
            waiting: VecDeque::new(),
            fc: FlowControl {
                window: FC_WINDOW_START,
                ..FlowControl::default()
            },
            push_last_sent: now,
            last_active: now,
            last_progress: now,
            batch: ConsumerProgress {
                name,
                ..ConsumerProgress::default()
            },
            ack_replies: Vec::new(),
            out: Vec::new(),
            outbox,
            in_flight: Arc::default(),
            gathering: false,
            events,
            stream_changes,
            pacer,
            paced_until: None,
            ahead: VecDeque::new(),
            read_next: None,
        };
        let pending: Vec<(u64, u64, u64)> = e
            .state
            .pending
            .iter()
            .map(|(s, p)| (*s, p.deliveries, p.last_delivered_ns))
            .collect();
        for (seq, deliveries, at) in pending {
            let deadline = at.saturating_add(e.ack_wait_ns(deliveries));
            e.deadlines.insert(seq, deadline);
        }
        e.recount();
        debug!(
            consumer = %e.name,
            floor = e.state.ack_floor.stream_seq,
            delivered = e.state.delivered.stream_seq,
            pending = e.state.pending.len(),
            "consumer engine started"
        );
        Some(e)
    }

    /// Runs until stopped; returns whether the consumer was deleted.
    pub(crate) async fn run(mut self, cancel: tokio_util::sync::CancellationToken) {
        loop {
            self.expire_and_redeliver();
            self.pump();
            self.finish_no_wait();
            self.heartbeats();
            if self.check_inactive().await {
                return;
            }
            self.flush().await;
            let wake = self.next_wake();
            tokio::select! {
                () = cancel.cancelled() => {
                    self.stop(false);
                    return;
                }
                ev = self.events.recv() => {
                    let Some(ev) = ev else {
                        self.stop(false);
                        return;
                    };
                    if self.handle(ev) {
                        return;
                    }
                    for _ in 0..EVENTS_PER_ROUND {
                        match self.events.try_recv() {
                            Ok(ev) => {
                                if self.handle(ev) {
                                    return;
                                }
                            }
                            Err(_) => break,
                        }
                    }
                }
                r = self.stream_changes.changed() => {
                    if r.is_err() {
                        self.stop(false);
                        return;
                    }
                    self.recount();
                }
                () = self.in_flight.done.notified(), if self.gathering => {}
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// Handles one event; true when the engine must stop.
    fn handle(&mut self, ev: Event) -> bool {
        match ev {
            Event::Pull { reply, body } => self.on_pull(reply, &body),
            Event::Ack {
                stream_seq,
                kind,
                reply,
            } => self.on_ack(stream_seq, kind, reply),
            Event::FlowControl { subject } => {
                if self.fc.pending.as_deref() == Some(subject.as_str()) {
                    self.fc.pending = None;
                    self.fc.outstanding = 0;
                    self.fc.window = (self.fc.window * 2).min(FC_WINDOW_MAX);
                }
            }
            Event::Reconfigure(cfg) => {
                self.filters = cfg.filters();
                self.pacer = Pacer::new(&cfg, rate_burst(&self.js, &self.sm));
                self.paced_until = None;
                self.cfg = *cfg;
                self.counted = None;
                self.recount();
            }
            Event::Info(tx) => {
                let _ = tx.send(self.view());
            }
            Event::Stop { deleted } => {
                self.stop(deleted);
                return true;
            }
        }
        false
    }

    fn view(&self) -> EngineView {
        EngineView {
            state: self.state.clone(),
            last_delivered_ns: self.last_delivered_ns,
            last_ack_ns: self.last_ack_ns,
            num_pending: self.num_pending,
            num_waiting: self.waiting.len() as u64,
            push_bound: self.cfg.is_push() && self.push_interest(),
        }
    }

    /// Ends waiting requests with the right status.
    fn stop(&mut self, deleted: bool) {
        let status = if deleted {
            PullStatus::ConsumerDeleted
        } else {
            PullStatus::LeadershipChange
        };
        for req in std::mem::take(&mut self.waiting) {
            self.out.push(deliver::status_msg(&req.reply, &status));
        }
        for m in std::mem::take(&mut self.out) {
            m.publish(&self.js);
        }
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

    fn paused(&self) -> bool {
        self.cfg
            .pause_until
            .as_deref()
            .and_then(go_time::parse)
            .is_some_and(|until| until > now_ns())
    }

    /// Keeps `num_pending` current: a full count after removals that may concern messages
    /// not delivered yet, otherwise only the messages appended since the last look.
    fn recount(&mut self) {
        let sm = self.sm.lock();
        let store = sm.store();
        let st = store.state();
        let removals = sm.removals();
        let next = self.state.delivered.stream_seq + 1;
        let lps = self.cfg.deliver_policy == DeliverPolicy::LastPerSubject && next <= self.lps_end;
        let full = self.counted.is_none() || self.counted_removals != removals || lps;
        let result = if full {
            if lps {
                count_last_per_subject(store, next, self.lps_end, &self.filters).and_then(|n| {
                    count_pending(store, self.lps_end + 1, &self.filters).map(|m| n + m)
                })
            } else {
                count_pending(store, next, &self.filters)
            }
        } else {
            let counted_to = self.counted.unwrap_or(0);
            let refs: Vec<&str> = self.filters.iter().map(String::as_str).collect();
            let mut n = self.num_pending;
            let mut at = (counted_to + 1).max(next);
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
        match result {
            Ok(n) => self.num_pending = n,
            Err(e) => debug!(error = %e, "num_pending not recomputed"),
        }
        self.counted = Some(st.last_seq);
        self.counted_removals = removals;
    }

    fn on_pull(&mut self, reply: String, body: &[u8]) {
        self.last_active = Instant::now();
        if self.cfg.is_push() {
            self.out
                .push(deliver::status_msg(&reply, &PullStatus::PushBased));
            return;
        }
        let req: NextRequest = match parse_next_request(body) {
            Ok(r) => r,
            Err(text) => {
                self.out
                    .push(deliver::status_msg(&reply, &PullStatus::BadRequest(text)));
                return;
            }
        };
        if let Err(text) = check_next_request_limits(&req, &self.cfg) {
            self.out
                .push(deliver::status_msg(&reply, &PullStatus::Conflict(text)));
            return;
        }
        let max_waiting = u64::try_from(self.cfg.max_waiting).unwrap_or(0);
        if max_waiting > 0 && self.waiting.len() as u64 >= max_waiting {
            self.out.push(deliver::status_msg(
                &reply,
                &PullStatus::Conflict("Exceeded MaxWaiting".to_string()),
            ));
            return;
        }
        let now = Instant::now();
        self.waiting.push_back(PullRequest {
            reply,
            batch: req.batch.max(1),
            max_bytes: req.max_bytes,
            bytes_limited: req.max_bytes > 0,
            no_wait: req.no_wait,
            expires: (req.expires_ns > 0).then(|| now + Duration::from_nanos(req.expires_ns)),
            heartbeat: (req.idle_heartbeat_ns > 0)
                .then(|| Duration::from_nanos(req.idle_heartbeat_ns)),
            last_sent: now,
            delivered: 0,
        });
    }

    fn on_ack(&mut self, seq: u64, kind: AckKind, reply: Option<String>) {
        let now = now_ns();
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
                if known && self.acks() {
                    let delay = delay_ns.unwrap_or(0);
                    if delay == 0 {
                        self.deadlines.remove(&seq);
                        self.due.insert(seq);
                    } else {
                        self.due.remove(&seq);
                        self.deadlines.insert(seq, now.saturating_add(delay));
                    }
                    let (dseq, deliveries) = self.pending_info(seq);
                    deliver::advisory_nak(
                        &self.js,
                        &self.stream,
                        &self.name,
                        seq,
                        dseq,
                        deliveries,
                    );
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
                    deliver::advisory_terminated(
                        &self.js,
                        &self.stream,
                        &self.name,
                        seq,
                        dseq,
                        deliveries,
                        &reason,
                    );
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
        let gap: Vec<(u64, bool)> = {
            let sm = self.sm.lock();
            let store = sm.store();
            if seq > store.state().last_seq {
                return;
            }
            let mut out = Vec::new();
            let mut at = from;
            while at <= seq && out.len() <= CATCH_UP_MAX {
                let msgs = match store.next_matching_batch(at, &refs, READ_AHEAD, usize::MAX) {
                    Ok(m) => m,
                    Err(e) => {
                        debug!(error = %e, "ack catch-up read failed");
                        return;
                    }
                };
                let Some(last) = msgs.last() else {
                    break;
                };
                at = last.seq + 1;
                for m in msgs.iter().filter(|m| m.seq <= seq) {
                    let skip = self.cfg.deliver_policy == DeliverPolicy::LastPerSubject
                        && m.seq <= self.lps_end
                        && !is_initial_last_per_subject(store, m.seq, &m.subject, self.lps_end)
                            .unwrap_or(true);
                    out.push((m.seq, skip));
                }
            }
            out
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
                self.out.push(OutMsg::empty(r));
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

    /// Moves pending messages whose ack wait expired to `due`, or drops them at max_deliver.
    fn expire_and_redeliver(&mut self) {
        if self.deadlines.is_empty() {
            return;
        }
        let now = now_ns();
        let expired = self.deadlines.expired(now);
        let max_deliver = u64::try_from(self.cfg.max_deliver).ok().filter(|m| *m > 0);
        for seq in expired {
            let deliveries = self.state.pending.get(&seq).map_or(0, |p| p.deliveries);
            if max_deliver.is_some_and(|m| deliveries >= m) {
                self.drop_pending(seq);
                deliver::advisory_max_deliveries(
                    &self.js,
                    &self.stream,
                    &self.name,
                    seq,
                    deliveries,
                );
                self.dead_letter(seq, deliveries, "max_deliver");
            } else {
                self.deadlines.remove(&seq);
                self.due.insert(seq);
            }
        }
    }

    /// Republishes a dropped message to the consumer's dead-letter subject, if it names one.
    fn dead_letter(&self, seq: u64, deliveries: u64, reason: &str) {
        let Some(subject) = self.cfg.metadata.get(deliver::DEAD_LETTER_KEY) else {
            return;
        };
        let msg = self.sm.lock().store().get(seq).ok().flatten();
        if let Some(msg) = msg {
            deliver::dead_letter(
                &self.js,
                subject,
                &self.stream,
                &self.name,
                &msg,
                deliveries,
                reason,
            );
        }
    }

    fn push_interest(&self) -> bool {
        deliver::has_interest(
            &self.js,
            &self.cfg.deliver_subject,
            (!self.cfg.deliver_group.is_empty()).then_some(self.cfg.deliver_group.as_str()),
        )
    }

    /// The next message to deliver: a due redelivery first, then the next new one.
    fn next_message(&mut self, allow_new: bool) -> Option<(StoredMsg, bool)> {
        while let Some(seq) = self.due.first().copied() {
            self.due.remove(&seq);
            if !self.state.pending.contains_key(&seq) {
                continue;
            }
            let msg = self.sm.lock().store().get(seq).ok().flatten();
            match msg {
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
                let sm = self.sm.lock();
                let initial =
                    is_initial_last_per_subject(sm.store(), m.seq, &m.subject, self.lps_end);
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
        let sm = self.sm.lock();
        match sm
            .store()
            .next_matching_batch(start, &refs, max, READ_AHEAD_BYTES)
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

    /// One round of [`Engine::pump`]; a new message it reads but does not send goes back to
    /// the front of `ahead`.
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
                let now = Instant::now();
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
                    let req = self.waiting.pop_front();
                    if let Some(req) = req {
                        self.out.push(deliver::status_msg(
                            &req.reply,
                            &PullStatus::MaxBytesExceeded {
                                pending_msgs: req.batch,
                                pending_bytes: req.max_bytes,
                            },
                        ));
                    }
                    continue;
                }
            }
            self.deliver(msg, redelivery);
        }
    }

    /// Sends one message and records the delivery.
    fn deliver(&mut self, msg: StoredMsg, redelivery: bool) {
        let now = now_ns();
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
            self.out.push(OutMsg {
                subject: self.cfg.deliver_subject.clone(),
                shown: Some(msg.subject),
                reply: Some(ack_subject),
                hdrs,
                payload,
            });
            self.push_last_sent = Instant::now();
            if self.cfg.flow_control {
                self.fc.outstanding += size;
                if self.fc.pending.is_none() && self.fc.outstanding >= self.fc.window / 2 {
                    let subject = deliver::fc_subject(&self.stream, &self.name);
                    self.out.push(deliver::flow_control_msg(
                        &self.cfg.deliver_subject,
                        &subject,
                    ));
                    self.fc.pending = Some(subject);
                }
            }
        } else if let Some(req) = self.waiting.front_mut() {
            size = deliver::pull_size(&msg, &self.stream, &self.name);
            self.out.push(OutMsg {
                subject: req.reply.clone(),
                shown: Some(msg.subject),
                reply: Some(ack_subject),
                hdrs,
                payload,
            });
            req.batch -= 1;
            req.delivered += 1;
            req.last_sent = Instant::now();
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
            self.pacer
                .sent(timestamp_ns, size, redelivery, Instant::now());
        }
        self.state.record_delivery(seq, dseq, now);
        self.last_delivered_ns = now;
        if !self.acks() {
            // Without acks only the position matters: keep the last delivery.
            self.batch.delivered.clear();
        }
        self.batch.delivered.push(Delivery {
            stream_seq: seq,
            consumer_seq: dseq,
            delivered_ns: now,
        });
        if self.acks() {
            self.deadlines
                .insert(seq, now.saturating_add(self.ack_wait_ns(deliveries)));
        } else {
            self.state.pending.remove(&seq);
            self.state.ack_floor = self.state.delivered;
        }
    }

    /// Drops requests that expired (408) or whose reply lost interest (silently).
    fn drop_dead_requests(&mut self) {
        let now = Instant::now();
        let js = &self.js;
        let out = &mut self.out;
        self.waiting.retain(|req| {
            if req.expires.is_some_and(|e| e <= now) {
                out.push(deliver::status_msg(
                    &req.reply,
                    &PullStatus::Timeout {
                        pending_msgs: req.batch,
                        pending_bytes: req.max_bytes,
                    },
                ));
                return false;
            }
            js.bus.has_interest(&req.reply)
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
                out.push(deliver::status_msg(&req.reply, &PullStatus::NoMessages));
                return false;
            }
            true
        });
    }

    /// Idle heartbeats for pull requests and push consumers.
    fn heartbeats(&mut self) {
        let now = Instant::now();
        let last_stream = self.state.delivered.stream_seq;
        let last_consumer = self.state.delivered.consumer_seq;
        for req in &mut self.waiting {
            if let Some(hb) = req.heartbeat
                && now.duration_since(req.last_sent) >= hb
            {
                self.out.push(deliver::heartbeat_msg(
                    &req.reply,
                    last_consumer,
                    last_stream,
                    None,
                ));
                req.last_sent = now;
            }
        }
        if self.cfg.is_push() && self.cfg.idle_heartbeat > 0 {
            let hb = Duration::from_nanos(u64::try_from(self.cfg.idle_heartbeat).unwrap_or(0));
            if now.duration_since(self.push_last_sent) >= hb && self.push_interest() {
                let stalled = if self.fc.outstanding >= self.fc.window {
                    self.fc.pending.clone()
                } else {
                    None
                };
                self.out.push(deliver::heartbeat_msg(
                    &self.cfg.deliver_subject,
                    last_consumer,
                    last_stream,
                    stalled.as_deref(),
                ));
                self.push_last_sent = now;
            }
        }
    }

    /// Deletes the consumer after `inactive_threshold` without interest or requests. Returns
    /// true when it did (the engine stops).
    async fn check_inactive(&mut self) -> bool {
        let threshold = u64::try_from(self.cfg.inactive_threshold).unwrap_or(0);
        if threshold == 0 {
            return false;
        }
        let active = if self.cfg.is_push() {
            self.push_interest()
        } else {
            !self.waiting.is_empty()
        };
        let now = Instant::now();
        if active {
            self.last_active = now;
            return false;
        }
        if now.duration_since(self.last_active) < Duration::from_nanos(threshold) {
            return false;
        }
        self.flush().await;
        match self.js.delete_consumer(&self.stream, &self.name).await {
            Ok(()) => {
                deliver::advisory_deleted(&self.js, &self.stream, &self.name);
                true
            }
            Err(e) => {
                debug!(consumer = %self.name, error = %e, "inactive consumer not deleted");
                self.last_active = now;
                false
            }
        }
    }

    /// When the loop must wake at the latest.
    fn next_wake(&self) -> Instant {
        let now = Instant::now();
        let mut wake = now + TICK;
        if let Some(d) = self.deadlines.earliest() {
            let in_ns = d.saturating_sub(now_ns());
            wake = wake.min(now + Duration::from_nanos(in_ns));
        }
        for req in &self.waiting {
            if let Some(e) = req.expires {
                wake = wake.min(e);
            }
            if let Some(hb) = req.heartbeat {
                wake = wake.min(req.last_sent + hb);
            }
        }
        if self.cfg.is_push() && self.cfg.idle_heartbeat > 0 {
            let hb = Duration::from_nanos(u64::try_from(self.cfg.idle_heartbeat).unwrap_or(0));
            wake = wake.min(self.push_last_sent + hb);
        }
        if !self.batch.delivered.is_empty() {
            wake = wake.min(self.last_progress + POSITION_EVERY);
        }
        if let Some(at) = self.paced_until {
            wake = wake.min(at);
        }
        wake.max(now + Duration::from_millis(1))
    }

    /// Sends what this round produced and proposes the progress batch; AckSync replies wait
    /// for its commit (in the outbox, behind earlier batches).
    async fn flush(&mut self) {
        let mut wake = FlushSet::default();
        for m in std::mem::take(&mut self.out) {
            m.publish_into(&self.js, &mut wake);
        }
        wake.wake_all();
        // Consumers without acks record their position at most every POSITION_EVERY.
        let position_only = !self.acks()
            && self.batch.acked.is_empty()
            && self.batch.dropped.is_empty()
            && self.last_progress.elapsed() < POSITION_EVERY;
        let empty = position_only
            || (self.batch.delivered.is_empty()
                && self.batch.acked.is_empty()
                && self.batch.dropped.is_empty());
        self.gathering = false;
        if empty {
            if !self.ack_replies.is_empty() {
                let _ = self.outbox.send(OutItem {
                    wait: None,
                    after: self.ack_replies.drain(..).map(OutMsg::empty).collect(),
                    in_flight: None,
                });
            }
            return;
        }
        let gathered =
            self.batch.delivered.len() + self.batch.acked.len() + self.batch.dropped.len();
        if self.in_flight.count.load(Ordering::Acquire) >= PROGRESS_IN_FLIGHT
            && gathered < PROGRESS_GATHER_MAX
        {
            // Gather behind the batches in flight; AckSync replies wait with their acks.
            self.gathering = true;
            return;
        }
        let replies: Vec<OutMsg> = self.ack_replies.drain(..).map(OutMsg::empty).collect();
        self.last_progress = Instant::now();
        let mut batch = ConsumerProgress {
            name: self.name.clone(),
            ..ConsumerProgress::default()
        };
        std::mem::swap(&mut batch, &mut self.batch);
        batch.now_ns = now_ns();
        let cmd = crate::jetstream::stream::command::consumer_progress(batch);
        match self.js.registry.submit(self.group, cmd).await {
            Ok(done) => {
                self.in_flight.count.fetch_add(1, Ordering::AcqRel);
                let _ = self.outbox.send(OutItem {
                    wait: Some(Box::pin(done)),
                    after: replies,
                    in_flight: Some(Arc::clone(&self.in_flight)),
                });
            }
            Err(e) => debug!(error = %e, "consumer progress not proposed"),
        }
    }
}
