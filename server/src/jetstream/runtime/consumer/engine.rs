//! The delivery engine task of one consumer: runs on the stream leader only, one task per
//! consumer. It owns the consumer's [`ConsumerCore`] (every delivery decision, see `core/`)
//! and everything the core must not touch: its mailbox, the clock, publishing to the bus,
//! proposing progress batches to the stream group, and the outbox that sends AckSync replies
//! once their batch is committed.
//!
//! Each wake-up (an event, a stream change, a commit the core gathers behind, a change of
//! interest in a push consumer's deliver subject, or the core's timeout) hands the core what
//! happened with the current time, then performs the actions the core returns, in order.
//!
//! Invariants:
//! - Progress batches are submitted one after another from this task, in the order the core
//!   asks for them.
//! - An AckSync reply the core holds back leaves through the outbox, behind the commit of every
//!   batch submitted before it; replies of a batch that fails are dropped (the acks must be
//!   sent again to the next leader).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use jetraft_raft::GroupId;
use jetraft_storage::consumer::ConsumerState;
use jetraft_storage::stream::StreamStore;
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, trace};

use super::core::{
    Action, Advisory, ConsumerCore, ConsumerEvent, ConsumerStart, ConsumerView, Now,
};
use super::deliver::{self, OutMsg};
use crate::bus::FlushSet;
use crate::jetstream::runtime::{JetStream, now_ns};
use crate::jetstream::stream::StreamStateMachine;
use crate::router::interest_watch::{WatchCallback, WatchGuard};

/// Most events handled before the core runs a round.
const EVENTS_PER_ROUND: usize = 256;
/// Most outbox items waiting (each is one round's AckSync replies, or one progress batch's
/// commit); the engine waits for room, so a stalled commit slows the engine down rather than
/// queueing without bound.
const OUTBOX_CAPACITY: usize = 1024;

/// The engine's progress batches that are done (committed or failed), counted by the outbox
/// and handed to the core by the engine.
#[derive(Default)]
struct InFlight {
    /// Batches done since the engine last looked.
    done: AtomicUsize,
    /// Notified each time one is done.
    notify: tokio::sync::Notify,
}

/// What a consumer engine is asked to do (its mailbox).
pub(crate) enum Event {
    /// Something for the core: a pull request, an ack, a flow-control reply, a new
    /// configuration, or stop.
    Core(ConsumerEvent),
    /// A snapshot of the engine's view for `CONSUMER.INFO`.
    Info(oneshot::Sender<EngineView>),
    /// Answered once every ack received before it is applied (the progress batch carrying the
    /// last of them is done, whatever came after), for a STREAM.INFO that counts what acks
    /// removed (`settle`).
    Settled(oneshot::Sender<()>),
}

impl Event {
    /// Stop: the consumer was deleted (true) or leadership moved (false).
    pub(crate) fn stop(deleted: bool) -> Self {
        Self::Core(ConsumerEvent::Stop { deleted })
    }
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
    /// `pinned_client` groups and their pins.
    pub priority_groups: Vec<super::core::PinnedGroup>,
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
async fn outbox_loop(js: Arc<JetStream>, account: Arc<str>, mut rx: mpsc::Receiver<OutItem>) {
    while let Some(item) = rx.recv().await {
        let committed = match item.wait {
            Some(wait) => wait.await.is_ok(),
            None => true,
        };
        if let Some(f) = &item.in_flight {
            f.done.fetch_add(1, Ordering::AcqRel);
            f.notify.notify_one();
        }
        if !committed {
            // Not committed (leadership lost): the acks must be sent again to the next leader.
            continue;
        }
        for m in &item.after {
            m.publish(&js, &account);
        }
    }
}

/// The stream and the bus as the core reads them.
struct LiveView {
    js: Arc<JetStream>,
    /// The stream's account (deliveries and interest are in its namespace).
    account: Arc<str>,
    sm: Arc<Mutex<StreamStateMachine>>,
}

impl ConsumerView for LiveView {
    fn read<T>(&self, f: impl FnOnce(&dyn StreamStore, u64) -> T) -> T {
        let sm = self.sm.lock();
        f(sm.store(), sm.removals())
    }

    fn has_interest(&self, subject: &str) -> bool {
        // Also a subscriber of another account importing the subject (a pull request made
        // through an imported `$JS.API` with a reply subject exported back to the importer).
        self.js
            .bus
            .namespace(&self.account)
            .sublist
            .has_interest(subject)
            || self.js.bus.delivery_interest(&self.account, subject, None)
    }

    fn push_interest(&self, subject: &str, group: Option<&str>) -> bool {
        deliver::has_interest(&self.js, &self.account, subject, group)
    }

    fn rate_burst(&self) -> u64 {
        let max_msg = self.sm.lock().config().max_msg_size;
        u64::try_from(max_msg)
            .ok()
            .filter(|m| *m > 0)
            .unwrap_or_else(|| u64::from(self.js.server_max_payload()))
    }
}

/// The engine task of one consumer.
pub(crate) struct Engine {
    js: Arc<JetStream>,
    /// The stream's key (see `jetstream::account`).
    stream: String,
    /// The stream's account.
    account: Arc<str>,
    name: String,
    group: GroupId,
    /// Every decision.
    core: ConsumerCore<LiveView>,
    events: mpsc::UnboundedReceiver<Event>,
    stream_changes: watch::Receiver<u64>,
    /// The ordered sender task.
    outbox: mpsc::Sender<OutItem>,
    /// Progress batches done, for the core's gathering.
    in_flight: Arc<InFlight>,
    /// Origin of the core's monotonic clock.
    origin: Instant,
    /// Told when a subscription matching the push consumer's deliver subject comes or goes.
    interest: Arc<Notify>,
    /// The watches on the deliver subject (push consumers; in the consumer's account and
    /// where other accounts' stream imports show it), and the subject they watch.
    interest_watch: Option<(String, Vec<WatchGuard>)>,
    /// [`Event::Settled`] requests not yet given their barrier (the next round's end sets it).
    settle_new: Vec<oneshot::Sender<()>>,
    /// [`Event::Settled`] requests waiting for the progress batch numbered in the pair (see
    /// [`ConsumerCore::progress_mark`]).
    settle_waiters: Vec<(u64, oneshot::Sender<()>)>,
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
        let start = {
            let guard = sm.lock();
            let rec = guard.consumer(&name)?;
            ConsumerStart {
                config: rec.config.clone(),
                lps_end: rec.lps_end,
                state: rec.state.clone(),
                last_delivered_ns: rec.last_delivered_ns,
                last_ack_ns: rec.last_ack_ns,
            }
        };
        let origin = Instant::now();
        let now = Now {
            mono_ns: 0,
            unix_ns: now_ns(),
        };
        let account: Arc<str> = Arc::from(crate::jetstream::account::stream_account(&stream));
        let view = LiveView {
            js: js.clone(),
            account: account.clone(),
            sm,
        };
        // Ack and flow-control subjects name the stream as its clients know it.
        let core = ConsumerCore::new(
            view,
            crate::jetstream::account::stream_name(&stream).to_string(),
            name.clone(),
            start,
            now,
            rand::random(),
        );
        let (outbox, outbox_rx) = mpsc::channel(OUTBOX_CAPACITY);
        js.tasks
            .spawn(outbox_loop(js.clone(), account.clone(), outbox_rx));
        let mut engine = Self {
            js,
            stream,
            account,
            name,
            group,
            core,
            events,
            stream_changes,
            outbox,
            in_flight: Arc::default(),
            origin,
            interest: Arc::new(Notify::new()),
            interest_watch: None,
            settle_new: Vec::new(),
            settle_waiters: Vec::new(),
        };
        engine.core.interest_is_told();
        engine.watch_interest();
        Some(engine)
    }

    /// Keeps the watch on the deliver subject in step with the config: a push consumer's
    /// engine is told when a subscription that matches it comes or goes (on this node or a
    /// peer), instead of reading the interest on a timer.
    fn watch_interest(&mut self) {
        let subject = self.core.deliver_subject();
        if self.interest_watch.as_ref().map(|(s, _)| s.as_str()) == Some(subject) {
            return;
        }
        // Drop the old watch first: a consumer is pull or push, one subject at a time.
        self.interest_watch = None;
        if subject.is_empty() {
            return;
        }
        let notify = self.interest.clone();
        let callback: WatchCallback = Arc::new(move || notify.notify_one());
        let guards = self
            .js
            .bus
            .watch_delivery_interest(&self.account, subject, &callback);
        self.interest_watch = Some((subject.to_string(), guards));
        // A subscription made before the watch must be seen too.
        self.interest.notify_one();
    }

    /// The time now, as the core counts it.
    fn now(&self) -> Now {
        Now {
            mono_ns: u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX),
            unix_ns: now_ns(),
        }
    }

    /// Runs until stopped.
    pub(crate) async fn run(mut self, cancel: tokio_util::sync::CancellationToken) {
        self.core.handle(self.now(), ConsumerEvent::Timeout);
        loop {
            if self.perform().await {
                return;
            }
            self.answer_settled();
            let wake = self.origin + Duration::from_nanos(self.core.poll_timeout());
            // A settle request waits for the batches in flight too.
            let gathering = self.core.gathering() || !self.settle_waiters.is_empty();
            tokio::select! {
                () = cancel.cancelled() => {
                    self.stop().await;
                    return;
                }
                ev = self.events.recv() => {
                    let Some(ev) = ev else {
                        self.stop().await;
                        return;
                    };
                    self.on_event(ev);
                    for _ in 0..EVENTS_PER_ROUND {
                        if self.core.stopped() {
                            break;
                        }
                        match self.events.try_recv() {
                            Ok(ev) => self.on_event(ev),
                            Err(_) => break,
                        }
                    }
                }
                r = self.stream_changes.changed() => {
                    if r.is_err() {
                        self.stop().await;
                        return;
                    }
                    self.core.handle(self.now(), ConsumerEvent::StreamChanged);
                }
                () = self.in_flight.notify.notified(), if gathering => {}
                () = self.interest.notified(), if self.interest_watch.is_some() => {}
                () = tokio::time::sleep_until(wake) => {}
            }
            let now = self.now();
            let done = self.in_flight.done.swap(0, Ordering::AcqRel);
            if done > 0 {
                self.core
                    .handle(now, ConsumerEvent::ProgressDone { count: done });
            }
            self.core.handle(now, ConsumerEvent::Timeout);
        }
    }

    /// Hands one mailbox event to the core (or answers it, for `Info`).
    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Core(event) => {
                let reconfigure = matches!(event, ConsumerEvent::Reconfigure(_));
                self.core.handle(self.now(), event);
                if reconfigure {
                    self.watch_interest();
                }
            }
            Event::Info(tx) => {
                // An append applied before this request (a publish already acknowledged) must
                // be counted even when the select picked the mailbox before the stream watch.
                if self.stream_changes.has_changed().unwrap_or(false) {
                    self.stream_changes.borrow_and_update();
                    self.core.handle(self.now(), ConsumerEvent::StreamChanged);
                }
                let _ = tx.send(self.core.info());
            }
            Event::Settled(tx) => self.settle_new.push(tx),
        }
    }

    /// Gives the settle requests that came in this round their barrier (what the core has
    /// handled by now, the round just run included) and answers those whose barrier's progress
    /// batch is done. A barrier, not "nothing in flight": under steady acks the engine is
    /// rarely idle, and a STREAM.INFO must not wait for a lull.
    fn answer_settled(&mut self) {
        if !self.settle_new.is_empty() {
            let mark = self.core.progress_mark();
            self.settle_waiters
                .extend(self.settle_new.drain(..).map(|tx| (mark, tx)));
        }
        if self.settle_waiters.is_empty() {
            return;
        }
        let finished = self.core.progress_finished();
        let (done, waiting) = std::mem::take(&mut self.settle_waiters)
            .into_iter()
            .partition(|(mark, _)| *mark <= finished);
        self.settle_waiters = waiting;
        for (_, tx) in done {
            let _ = tx.send(());
        }
    }

    /// Leadership moved (or the replica is going): waiting requests get `409 Leadership
    /// Change`.
    async fn stop(&mut self) {
        self.core
            .handle(self.now(), ConsumerEvent::Stop { deleted: false });
        self.perform().await;
    }

    /// Performs what the core asks for, in order; true when the engine must end (stopped, or
    /// deleted for inactivity).
    async fn perform(&mut self) -> bool {
        let mut wake = FlushSet::default();
        while let Some(action) = self.core.poll_action() {
            match action {
                Action::Deliver {
                    stream_seq,
                    deliveries,
                    msg,
                } => {
                    trace!(consumer = %self.name, stream_seq, deliveries, "deliver");
                    msg.publish_into(&self.js, &self.account, &mut wake);
                }
                Action::Status { to, status } => {
                    deliver::status_msg(&to, &status).publish_into(
                        &self.js,
                        &self.account,
                        &mut wake,
                    );
                }
                Action::Heartbeat {
                    to,
                    last_consumer,
                    last_stream,
                    stalled,
                } => deliver::heartbeat_msg(&to, last_consumer, last_stream, stalled.as_deref())
                    .publish_into(&self.js, &self.account, &mut wake),
                Action::FlowControlRequest { to, reply } => {
                    deliver::flow_control_msg(&to, &reply).publish_into(
                        &self.js,
                        &self.account,
                        &mut wake,
                    );
                }
                Action::Reply { to } => {
                    OutMsg::empty(to).publish_into(&self.js, &self.account, &mut wake)
                }
                Action::NoResponders { to } => {
                    deliver::no_responders_msg(to).publish_into(&self.js, &self.account, &mut wake);
                }
                Action::Propose { progress, replies } => {
                    wake.wake_all();
                    self.propose(progress, replies).await;
                }
                Action::RepliesAfterCommits(replies) => {
                    let item = OutItem {
                        wait: None,
                        after: replies.into_iter().map(OutMsg::empty).collect(),
                        in_flight: None,
                    };
                    let _ = self.outbox.send(item).await;
                }
                Action::Advisory(a) => self.advise(&a),
                Action::DeadLetter {
                    subject,
                    msg,
                    deliveries,
                    reason,
                } => deliver::dead_letter(
                    &self.js,
                    &subject,
                    &self.stream,
                    &self.name,
                    &msg,
                    deliveries,
                    reason,
                ),
                Action::DeleteInactive => {
                    wake.wake_all();
                    match self.js.delete_consumer(&self.stream, &self.name).await {
                        Ok(()) => return true,
                        Err(e) => {
                            debug!(consumer = %self.name, error = %e, "inactive consumer not deleted");
                            self.core.handle(self.now(), ConsumerEvent::DeleteFailed);
                        }
                    }
                }
            }
        }
        wake.wake_all();
        self.core.stopped()
    }

    /// Submits a progress batch; `replies` leave once it is committed.
    async fn propose(
        &mut self,
        progress: jetraft_proto::stream::ConsumerProgress,
        replies: Vec<String>,
    ) {
        let cmd = crate::jetstream::stream::command::consumer_progress(progress);
        match self.js.registry.submit(self.group, cmd).await {
            Ok(done) => {
                let item = OutItem {
                    wait: Some(Box::pin(done)),
                    after: replies.into_iter().map(OutMsg::empty).collect(),
                    in_flight: Some(Arc::clone(&self.in_flight)),
                };
                if self.outbox.send(item).await.is_err() {
                    // The outbox ends only with the runtime; nothing will count this batch.
                    self.core.handle(self.now(), ConsumerEvent::ProposeFailed);
                }
            }
            Err(e) => {
                debug!(error = %e, "consumer progress not proposed");
                self.core.handle(self.now(), ConsumerEvent::ProposeFailed);
            }
        }
    }

    /// Publishes an advisory.
    fn advise(&self, a: &Advisory) {
        let (js, stream, name) = (&self.js, self.stream.as_str(), self.name.as_str());
        match a {
            Advisory::MaxDeliveries {
                stream_seq,
                deliveries,
            } => js.advise_max_deliveries(stream, name, *stream_seq, *deliveries),
            Advisory::Nak {
                stream_seq,
                consumer_seq,
                deliveries,
            } => js.advise_nak(stream, name, (*stream_seq, *consumer_seq), *deliveries),
            Advisory::Terminated {
                stream_seq,
                consumer_seq,
                deliveries,
                reason,
            } => js.advise_terminated(
                stream,
                name,
                (*stream_seq, *consumer_seq),
                *deliveries,
                reason,
            ),
            Advisory::Pinned { group, pinned_id } => {
                js.advise_pinned(stream, name, group, pinned_id)
            }
            Advisory::Unpinned { group, reason } => js.advise_unpinned(stream, name, group, reason),
        }
    }
}
