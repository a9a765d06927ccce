//! `$JS.API.CONSUMER.*` handlers. All run on the stream leader (consumers live in the stream's
//! Raft group): validation against the leader's state, then a proposal, then the answer built
//! from the engine (or the state machine when no engine runs).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::core::ConsumerEvent;
use super::engine::{EngineView, Event};
use crate::bus::Msg;
use crate::bus::internal::InternalMsg;
use crate::jetstream::api::consumer_validate::{
    ConsumerContext, CreateForm, CreateOutcome, check_create, check_pedantic, random_name,
    resolve_create, with_response_metadata,
};
use crate::jetstream::api::types::consumer::SequenceInfo;
use crate::jetstream::api::types::consumer::{ConsumerInfo, PriorityGroupState};
use crate::jetstream::api::types::consumer_requests::{
    ConsumerListRequest, ConsumerNamesRequest, ConsumerPauseRequest, ConsumerPauseResponse,
    CreateConsumerRequest, consumer_list_page, consumer_names_page,
};
use crate::jetstream::api::types::requests::{BodyRule, parse_body};
use crate::jetstream::api::types::responses::ApiResponse;
use crate::jetstream::api::types::{go_time, response_type};
use crate::jetstream::api::{ApiError, ErrorKind};
use crate::jetstream::runtime::advisory::Action;
use crate::jetstream::runtime::replica::LocalStream;
use crate::jetstream::runtime::{JetStream, now_ns};
use crate::jetstream::stream::command;
use crate::jetstream::stream::consumers::{ConsumerRecord, count_last_per_subject, count_pending};

/// How long an API handler waits for an engine's view.
const VIEW_WAIT: Duration = Duration::from_secs(2);

fn consumer_not_found() -> ApiError {
    ApiError::new(ErrorKind::ConsumerNotFound)
}

impl JetStream {
    fn leader_stream(&self, stream: &str) -> Result<Arc<LocalStream>, ApiError> {
        self.local_stream(stream)
            .ok_or_else(ApiError::stream_not_found)
    }

    async fn propose_consumer(&self, ls: &LocalStream, cmd: Bytes) -> Result<(), ApiError> {
        self.registry
            .propose(ls.group(), cmd)
            .await
            .map_err(super::super::api::raft_api_error)?;
        Ok(())
    }

    /// `CONSUMER.CREATE.*` and `CONSUMER.DURABLE.CREATE.*`.
    pub(crate) async fn consumer_create(
        self: &Arc<Self>,
        stream: &str,
        form: &CreateForm,
        msg: &InternalMsg,
    ) -> Result<String, ApiError> {
        let ls = self.leader_stream(stream)?;
        let (name, cfg, action) = resolve_create(
            form,
            crate::jetstream::account::stream_name(stream),
            &msg.payload,
            random_name,
        )?;
        let pedantic = CreateConsumerRequest::parse(&msg.payload).is_ok_and(|r| r.pedantic);
        let (outcome, created_ns) = {
            let sm = ls.sm.lock();
            let existing = sm.consumer(&name);
            let others: Vec<_> = sm
                .consumers()
                .iter()
                .filter(|(n, _)| **n != name)
                .map(|(_, r)| &r.config)
                .collect();
            // An account's limits act as the stream's own where they are lower (as
            // nats-server: `max_consumers` per stream, `max_ack_pending` per consumer).
            let limited = self.with_account_limits(stream, sm.config());
            let ctx = ConsumerContext {
                stream: limited.as_ref().unwrap_or(sm.config()),
                existing: existing.map(|r| &r.config),
                others: &others,
                clustered: self.clustered(),
                stream_replicas: sm.config().num_replicas,
                consumer_count: sm.consumers().len(),
            };
            if pedantic {
                check_pedantic(&cfg, sm.config())?;
            }
            let outcome = check_create(&name, cfg, action, &ctx)?;
            (outcome, existing.map_or_else(now_ns, |r| r.created_ns))
        };
        let created = matches!(outcome, CreateOutcome::Create(_));
        let updated = match outcome {
            CreateOutcome::Create(cfg) | CreateOutcome::Update(cfg) => {
                self.propose_consumer(&ls, command::consumer_create(&name, &cfg, created_ns))
                    .await?;
                Some(cfg)
            }
            CreateOutcome::Unchanged => None,
        };
        if let Some(cfg) = updated
            && !ls.engines.send(
                &name,
                Event::Core(ConsumerEvent::Reconfigure(Box::new(cfg))),
            )
        {
            self.sync_consumers(&ls);
        }
        if created {
            self.advise_consumer(stream, &name, Action::Create);
        }
        let info = if created {
            self.initial_consumer_info(&ls, &name).await
        } else {
            self.consumer_info(&ls, &name).await
        }
        .ok_or_else(consumer_not_found)?;
        Ok(ApiResponse::ok(response_type::CONSUMER_CREATE, info).to_json())
    }

    /// The config of the stream with key `stream` with its account's consumer limits applied,
    /// when the account has any.
    fn with_account_limits(
        &self,
        stream: &str,
        cfg: &crate::jetstream::api::types::StreamConfig,
    ) -> Option<crate::jetstream::api::types::StreamConfig> {
        let limits = self
            .accounts
            .limits(crate::jetstream::account::stream_account(stream))?;
        let lower = |own: i64, account: i64| {
            if account > 0 && (own <= 0 || account < own) {
                account
            } else {
                own
            }
        };
        if limits.max_consumers <= 0 && limits.max_ack_pending <= 0 {
            return None;
        }
        let mut cfg = cfg.clone();
        cfg.max_consumers = lower(cfg.max_consumers, limits.max_consumers);
        cfg.consumer_limits.max_ack_pending =
            lower(cfg.consumer_limits.max_ack_pending, limits.max_ack_pending);
        Some(cfg)
    }

    /// The info of consumer `name`, from its engine when it runs here.
    pub(crate) async fn consumer_info(&self, ls: &LocalStream, name: &str) -> Option<ConsumerInfo> {
        let view = self.engine_view(ls, name).await;
        let sm = ls.sm.lock();
        let rec = sm.consumer(name)?;
        let view = match view {
            Some(v) => v,
            None => view_from_record(rec, sm.store()),
        };
        Some(self.info_from_view(ls, name, rec, &view))
    }

    /// The info of a consumer just created, as of before its first delivery (nats-server
    /// snapshots it before starting delivery; clients take `num_pending` from it as the amount
    /// of history to expect, so a delivery racing the answer must not be counted).
    async fn initial_consumer_info(&self, ls: &LocalStream, name: &str) -> Option<ConsumerInfo> {
        let live = self.engine_view(ls, name).await;
        let sm = ls.sm.lock();
        let rec = sm.consumer(name)?;
        let mut initial = rec.clone();
        initial.state = rec.initial.clone();
        initial.last_delivered_ns = 0;
        initial.last_ack_ns = 0;
        let mut view = view_from_record(&initial, sm.store());
        if let Some(live) = live {
            view.push_bound = live.push_bound;
            view.num_waiting = live.num_waiting;
        }
        Some(self.info_from_view(ls, name, &initial, &view))
    }

    /// A consumer info from a record (config, creation) and a delivery view.
    fn info_from_view(
        &self,
        ls: &LocalStream,
        name: &str,
        rec: &ConsumerRecord,
        view: &EngineView,
    ) -> ConsumerInfo {
        let cfg =
            with_response_metadata(&rec.config, &self.identity.version, self.identity.api_level);
        let active = |ns: u64| (ns > 0).then(|| go_time::format(ns));
        let now = now_ns();
        let pause_until = rec.config.pause_until.as_deref().and_then(go_time::parse);
        let paused = pause_until.is_some_and(|p| p > now);
        ConsumerInfo {
            stream_name: crate::jetstream::account::stream_name(&ls.name).to_string(),
            name: name.to_string(),
            created: go_time::format(rec.created_ns),
            config: cfg,
            delivered: SequenceInfo {
                consumer_seq: view.state.delivered.consumer_seq,
                stream_seq: view.state.delivered.stream_seq,
                last_active: active(view.last_delivered_ns),
            },
            ack_floor: SequenceInfo {
                consumer_seq: view.state.ack_floor.consumer_seq,
                stream_seq: view.state.ack_floor.stream_seq,
                last_active: active(view.last_ack_ns),
            },
            num_ack_pending: view.state.pending.len() as u64,
            num_redelivered: view
                .state
                .pending
                .values()
                .filter(|p| p.deliveries > 1)
                .count() as u64,
            num_waiting: view.num_waiting,
            num_pending: view.num_pending,
            cluster: if self.clustered() {
                self.cluster_info(ls)
            } else {
                None
            },
            push_bound: view.push_bound,
            paused,
            pause_remaining: if paused {
                i64::try_from(pause_until.unwrap_or(now) - now).unwrap_or(0)
            } else {
                0
            },
            priority_groups: (view.priority_groups.iter())
                .map(|g| PriorityGroupState {
                    group: g.group.clone(),
                    pinned_client_id: g.pinned_id.clone(),
                    pinned_ts: go_time::format(g.pinned_ns),
                })
                .collect(),
            ts: go_time::format(now),
        }
    }

    /// The running engine's view. Right after this node became the leader the engine starts
    /// only once a barrier entry is applied (the state machine may still be applying entries of
    /// the previous term), so a leader waits (bounded) for it rather than answer from a state
    /// machine that lags.
    pub(crate) async fn engine_view(&self, ls: &LocalStream, name: &str) -> Option<EngineView> {
        let deadline = tokio::time::Instant::now() + VIEW_WAIT;
        loop {
            let (tx, rx) = tokio::sync::oneshot::channel();
            if ls.engines.send(name, Event::Info(tx)) {
                return tokio::time::timeout(VIEW_WAIT, rx).await.ok()?.ok();
            }
            let leading = self.registry.leader(ls.group()).is_ok_and(|l| l.is_self);
            let exists = ls.sm.lock().consumer(name).is_some();
            if !leading || !exists || tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `CONSUMER.INFO.<S>.<C>`.
    pub(crate) async fn consumer_info_api(
        &self,
        stream: &str,
        name: &str,
        msg: &InternalMsg,
    ) -> Result<String, ApiError> {
        parse_body::<ConsumerNamesRequest>(BodyRule::Empty, &msg.payload)?;
        let ls = self.leader_stream(stream)?;
        let info = self
            .consumer_info(&ls, name)
            .await
            .ok_or_else(consumer_not_found)?;
        Ok(ApiResponse::ok(response_type::CONSUMER_INFO, info).to_json())
    }

    /// Deletes a consumer (API or inactivity) and stops its engine.
    pub(crate) async fn delete_consumer(&self, stream: &str, name: &str) -> Result<(), ApiError> {
        let ls = self.leader_stream(stream)?;
        if ls.sm.lock().consumer(name).is_none() {
            return Err(consumer_not_found());
        }
        self.propose_consumer(&ls, command::consumer_delete(name))
            .await?;
        ls.engines.send(name, Event::stop(true));
        self.advise_consumer(stream, name, Action::Delete);
        Ok(())
    }

    /// `CONSUMER.DELETE.<S>.<C>`: the body must be empty (`10038`), as for INFO.
    pub(crate) async fn consumer_delete_api(
        &self,
        stream: &str,
        name: &str,
        msg: &InternalMsg,
    ) -> Result<String, ApiError> {
        parse_body::<ConsumerNamesRequest>(BodyRule::Empty, &msg.payload)?;
        self.delete_consumer(stream, name).await?;
        Ok(format!(
            "{{\"type\":\"{}\",\"success\":true}}",
            response_type::CONSUMER_DELETE
        ))
    }

    /// `CONSUMER.NAMES.<S>`.
    pub(crate) fn consumer_names_api(
        &self,
        stream: &str,
        msg: &InternalMsg,
    ) -> Result<String, ApiError> {
        let req: ConsumerNamesRequest =
            parse_body(BodyRule::Optional, &msg.payload)?.unwrap_or_default();
        let ls = self.leader_stream(stream)?;
        let names: Vec<String> = ls.sm.lock().consumers().keys().cloned().collect();
        let page = consumer_names_page(names, req.offset);
        Ok(ApiResponse::ok(response_type::CONSUMER_NAMES, page).to_json())
    }

    /// `CONSUMER.LIST.<S>`.
    pub(crate) async fn consumer_list_api(
        &self,
        stream: &str,
        msg: &InternalMsg,
    ) -> Result<String, ApiError> {
        let req: ConsumerListRequest =
            parse_body(BodyRule::Optional, &msg.payload)?.unwrap_or_default();
        let ls = self.leader_stream(stream)?;
        let names: Vec<String> = ls.sm.lock().consumers().keys().cloned().collect();
        let mut infos = Vec::with_capacity(names.len());
        for name in &names {
            if let Some(info) = self.consumer_info(&ls, name).await {
                infos.push(info);
            }
        }
        let page = consumer_list_page(infos, req.offset);
        Ok(ApiResponse::ok(response_type::CONSUMER_LIST, page).to_json())
    }

    /// `CONSUMER.MSG.NEXT.<S>.<C>`: hands the request to the engine; a missing consumer gets
    /// the no-responders status the real server's missing subscription produces.
    pub(crate) fn consumer_next(&self, stream: &str, name: &str, msg: &InternalMsg) {
        let Some(reply) = msg.reply.clone() else {
            return;
        };
        let delivered = self.local_stream(stream).is_some_and(|ls| {
            ls.engines.send(
                name,
                Event::Core(ConsumerEvent::Pull {
                    reply: reply.clone(),
                    body: msg.payload.clone(),
                }),
            )
        });
        if !delivered {
            let hdrs = crate::protocol::headers::status_block(503, None, &[]);
            self.bus.publish(
                &Msg::new(&reply, b"")
                    .headers(Some(&hdrs))
                    .in_account(&msg.account),
            );
        }
    }

    /// `CONSUMER.PAUSE.<S>.<C>`.
    pub(crate) async fn consumer_pause_api(
        &self,
        stream: &str,
        name: &str,
        msg: &InternalMsg,
    ) -> Result<String, ApiError> {
        let req: ConsumerPauseRequest =
            parse_body(BodyRule::Optional, &msg.payload)?.unwrap_or_default();
        let until = req.pause_until_ns()?;
        let ls = self.leader_stream(stream)?;
        let (mut cfg, created_ns) = {
            let sm = ls.sm.lock();
            let rec = sm.consumer(name).ok_or_else(consumer_not_found)?;
            (rec.config.clone(), rec.created_ns)
        };
        cfg.pause_until = (until > 0).then(|| go_time::format(until));
        self.propose_consumer(&ls, command::consumer_create(name, &cfg, created_ns))
            .await?;
        ls.engines
            .send(name, Event::Core(ConsumerEvent::Reconfigure(Box::new(cfg))));
        self.advise_consumer_pause(stream, name, until);
        let body = ConsumerPauseResponse::at(until, now_ns());
        Ok(ApiResponse::ok(response_type::CONSUMER_PAUSE, body).to_json())
    }
}

impl JetStream {
    /// `CONSUMER.UNPIN.<S>.<C>` with `{"group":"..."}`: the consumer's pinned client loses its
    /// pin (the next request without a pin id gets a new one). Checked as nats-server checks
    /// it, in its order: plain `json.Unmarshal` of `{"group":..}`, a valid group name, the
    /// stream, the consumer, the group among the consumer's `priority_groups`.
    pub(crate) fn consumer_unpin_api(
        &self,
        stream: &str,
        name: &str,
        msg: &InternalMsg,
    ) -> Result<String, ApiError> {
        let schema = &crate::jetstream::api::go_schema::CONSUMER_UNPIN_REQUEST;
        crate::jetstream::api::go_json::check_unmarshal(&msg.payload, schema)
            .map_err(|e| ApiError::invalid_json(&e))?;
        let group = serde_json::from_slice::<serde_json::Value>(&msg.payload)
            .ok()
            .and_then(|v| v.get("group").and_then(|g| g.as_str().map(str::to_string)))
            .unwrap_or_default();
        if group.is_empty() {
            return Err(ApiError::invalid_json("consumer group not specified"));
        }
        if !crate::jetstream::api::consumer_validate::is_valid_group_name(&group) {
            return Err(ApiError::new(ErrorKind::ConsumerInvalidGroupName));
        }
        let ls = self.leader_stream(stream)?;
        let groups = {
            let sm = ls.sm.lock();
            let rec = sm.consumer(name).ok_or_else(consumer_not_found)?;
            rec.config.priority_groups.clone()
        };
        if !groups.contains(&group) {
            return Err(ApiError::new(ErrorKind::ConsumerInvalidPriorityGroup));
        }
        ls.engines
            .send(name, Event::Core(ConsumerEvent::Unpin { group }));
        Ok(format!(
            "{{\"type\":\"{}\"}}",
            response_type::CONSUMER_UNPIN
        ))
    }
}

/// A view of a consumer from the replicated record (no engine here).
fn view_from_record(
    rec: &ConsumerRecord,
    store: &dyn jetraft_storage::stream::StreamStore,
) -> EngineView {
    EngineView {
        state: rec.state.clone(),
        last_delivered_ns: rec.last_delivered_ns,
        last_ack_ns: rec.last_ack_ns,
        num_pending: pending_of(rec, store),
        num_waiting: 0,
        push_bound: false,
        priority_groups: Vec::new(),
    }
}

/// `num_pending` of a consumer from its replicated position.
fn pending_of(rec: &ConsumerRecord, store: &dyn jetraft_storage::stream::StreamStore) -> u64 {
    let next = rec.next_seq();
    let filters = rec.filters();
    let lps = rec.config.deliver_policy
        == crate::jetstream::api::types::consumer::DeliverPolicy::LastPerSubject
        && next <= rec.lps_end;
    let n = if lps {
        count_last_per_subject(store, next, rec.lps_end, &filters)
            .and_then(|n| count_pending(store, rec.lps_end + 1, &filters).map(|m| n + m))
    } else {
        count_pending(store, next, &filters)
    };
    n.unwrap_or(0)
}

impl JetStream {
    pub(crate) async fn consumer_stepdown(
        &self,
        stream: &str,
        name: &str,
    ) -> Result<String, ApiError> {
        // Consumers follow their stream's leader: stepping one down moves the stream group.
        let exists = self
            .local_stream(stream)
            .ok_or_else(ApiError::stream_not_found)?
            .sm
            .lock()
            .consumer(name)
            .is_some();
        if !exists {
            return Err(ApiError::new(ErrorKind::ConsumerNotFound));
        }
        self.stream_stepdown(stream, &[]).await?;
        Ok(format!(
            "{{\"type\":\"{}\",\"success\":true}}",
            response_type::CONSUMER_LEADER_STEPDOWN
        ))
    }
}
