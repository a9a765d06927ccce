//! The reader task of a connection: reads the socket, parses ops and acts on them.
//!
//! Messages published by this client are routed inline, so their order is the client's order.
//! Writer wake-ups for the receivers are collected per read and issued once at its end.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};
use tracing::{debug, trace};

use super::ConnContext;
use crate::auth::{ConnCredentials, ConnProof};
use crate::bus::{Client, CloseReason, FlushSet, Msg, Origin, Subscription};
use crate::config::Config;
use crate::protocol::{ClientOp, ConnectOptions, Parser, ProtocolError};
use crate::protocol::{encode, subject_text};
use crate::router::subject;

/// Reply subjects a client may not use (JetStream acks, service imports, gateway replies).
const RESERVED_REPLY_PREFIXES: [&[u8]; 3] = [b"$JS.ACK.", b"_R_.", b"$GNR."];

/// Longest a producer pauses per read batch for slow receivers to drain.
const STALL_MAX: std::time::Duration = std::time::Duration::from_millis(100);

/// Smallest free space kept in the read buffer before each read.
const READ_CHUNK: usize = 64 * 1024;

/// Per-connection protocol state owned by the reader.
struct Session {
    ctx: Arc<ConnContext>,
    /// The protocol parser; CONNECT changes what it accepts (headers, auth).
    parser: Parser,
    client: Arc<Client>,
    /// Options in force (nats-server's defaults apply before CONNECT).
    opts: ConnectOptions,
    connected: bool,
    /// Whether the post-CONNECT INFO (`connect_info`) was sent after the first PING.
    sent_connect_info: bool,
    flush: FlushSet,
    /// Names of the verified client certificate (TLS with a client certificate).
    cert_identities: Option<Vec<String>>,
    /// The configuration in force, refreshed after a reload.
    cfg: Arc<Config>,
    /// The version of the settings `cfg` came from ([`super::LiveSettings::version`]).
    settings_version: u64,
}

/// Runs the reader until the connection closes, then unregisters the client.
/// `cert_identities` are the names of the client's verified certificate, if any.
pub async fn run<R: AsyncRead + Unpin>(
    ctx: Arc<ConnContext>,
    client: Arc<Client>,
    mut rd: R,
    cert_identities: Option<Vec<String>>,
) {
    let (settings, settings_version) = ctx.settings.load_versioned();
    let cfg = settings.config.clone();
    let auth_required = settings.auth.required();
    drop(settings);
    let mut parser = Parser::new(cfg.max_payload, cfg.max_control_line);
    parser.set_awaiting_auth(auth_required);
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut s = Session {
        ctx: ctx.clone(),
        parser,
        client: client.clone(),
        opts: ConnectOptions {
            verbose: true,
            pedantic: true,
            echo: Some(true),
            ..ConnectOptions::default()
        },
        connected: false,
        sent_connect_info: false,
        flush: FlushSet::default(),
        cert_identities,
        cfg: cfg.clone(),
        settings_version,
    };
    let auth_timer = tokio::time::sleep(cfg.auth.timeout);
    tokio::pin!(auth_timer);
    'conn: loop {
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        tokio::select! {
            () = client.closing.cancelled() => break,
            () = &mut auth_timer, if auth_required && !s.connected => {
                client.send_err("Authentication Timeout");
                client.close(CloseReason::AuthTimeout);
                break;
            }
            read = rd.read_buf(&mut buf) => match read {
                Ok(0) => {
                    client.close(CloseReason::ClientClosed);
                    break;
                }
                Ok(_) => {
                    *client.last_activity.lock() = time::OffsetDateTime::now_utc();
                    s.follow_reload();
                    loop {
                        match s.parser.parse(&mut buf) {
                            Ok(Some(op)) => {
                                if let Err(reason) = s.on_op(op) {
                                    client.close(reason);
                                    s.wake_receivers();
                                    break 'conn;
                                }
                            }
                            Ok(None) => break,
                            Err(e) => {
                                s.on_protocol_error(&e);
                                s.wake_receivers();
                                break 'conn;
                            }
                        }
                    }
                    s.wake_receivers();
                    s.wait_for_stalled().await;
                }
                Err(e) => {
                    debug!(cid = client.cid, error = %e, "read error");
                    client.close(CloseReason::IoError);
                    break;
                }
            },
        }
    }
    ctx.clients.remove(&client, &ctx.bus);
}

impl Session {
    /// Takes the new limits after a config reload (one atomic load when nothing changed).
    fn follow_reload(&mut self) {
        if self.ctx.settings.version() == self.settings_version {
            return;
        }
        let (settings, version) = self.ctx.settings.load_versioned();
        self.cfg = settings.config.clone();
        self.settings_version = version;
        self.parser
            .set_limits(self.cfg.max_payload, self.cfg.max_control_line);
    }

    fn wake_receivers(&mut self) {
        for c in self.flush.wake.drain(..) {
            c.notify.notify_one();
        }
    }

    /// Back-pressure: pause this producer while receivers it just fed are above their stall
    /// threshold, or internal queues it fed above their pacing threshold, for at most
    /// [`STALL_MAX`] per read batch. A receiver that never drains is closed by its own writer
    /// (write deadline) or by `max_pending`; an internal queue that never drains (a stream
    /// without a leader) slows its producers to one read per [`STALL_MAX`].
    async fn wait_for_stalled(&mut self) {
        if self.flush.stalled.is_empty() && self.flush.paced.is_empty() {
            return;
        }
        let deadline = tokio::time::Instant::now() + STALL_MAX;
        // Internal queues (a stream's capture) above their pacing threshold: wait until they
        // drained to half of it, within the same bound.
        for gauge in std::mem::take(&mut self.flush.paced) {
            if tokio::time::timeout_at(deadline, gauge.wait_resumable())
                .await
                .is_err()
            {
                debug!(
                    cid = self.client.cid,
                    queued = gauge.len(),
                    "producer was paced"
                );
                return;
            }
        }
        for rc in std::mem::take(&mut self.flush.stalled) {
            loop {
                let drained = rc.drained.notified();
                tokio::pin!(drained);
                drained.as_mut().enable();
                if rc.is_closed() || rc.pending_bytes() <= rc.stall_threshold() {
                    break;
                }
                if tokio::time::timeout_at(deadline, drained).await.is_err() {
                    debug!(
                        cid = self.client.cid,
                        receiver = rc.cid,
                        "producer was stalled"
                    );
                    return;
                }
            }
        }
    }

    fn on_protocol_error(&self, e: &ProtocolError) {
        debug!(cid = self.client.cid, error = %e, "protocol error");
        if let Some(text) = e.err_text() {
            self.client.send_err(text);
        }
        self.client.close(match e {
            ProtocolError::MaxPayload => CloseReason::MaxPayload,
            ProtocolError::MaxControlLine => CloseReason::MaxControlLine,
            ProtocolError::AuthViolation => CloseReason::AuthViolation,
            _ => CloseReason::ProtocolViolation,
        });
    }

    fn ok(&self) {
        if self.opts.verbose {
            self.client.send_proto(encode::OK);
        }
    }

    /// Handles one op; `Err` closes the connection with that reason (any `-ERR` already sent).
    fn on_op(&mut self, op: ClientOp) -> Result<(), CloseReason> {
        match &op {
            ClientOp::Connect(json) => {
                let connect = crate::protocol::connect::redacted(json);
                trace!(cid = self.client.cid, %connect, "<<- CONNECT");
            }
            // nats-server's form, `<<- [SUB foo 1]` (nats.js's tests read it from the log).
            _ => trace!(cid = self.client.cid, "<<- [{op}]"),
        }
        if !self.connected && self.ctx.auth().required() && !matches!(op, ClientOp::Connect(_)) {
            self.client.send_err("Authorization Violation");
            return Err(CloseReason::AuthViolation);
        }
        match op {
            ClientOp::Connect(json) => self.on_connect(&json),
            ClientOp::Pub {
                subject,
                reply,
                headers,
                payload,
            } => {
                if headers.is_some() && !self.opts.headers {
                    // nats-server closes without -ERR: "message headers not supported".
                    return Err(CloseReason::ProtocolViolation);
                }
                let headers = headers.filter(|h| !h.is_empty());
                self.on_pub(&subject, reply, headers, &payload);
                Ok(())
            }
            ClientOp::Sub {
                subject,
                queue,
                sid,
            } => {
                self.on_sub(&subject, queue.as_ref(), sid);
                Ok(())
            }
            ClientOp::Unsub { sid, max } => {
                self.on_unsub(&sid, max);
                Ok(())
            }
            ClientOp::Ping => {
                self.client.send_proto(encode::PONG);
                if self.connected && !self.sent_connect_info && self.opts.protocol.unwrap_or(0) >= 1
                {
                    // Async INFO only from now on, after this first PONG (nats-server's rule): a
                    // client that sent CONNECT reads the next line as the answer to its PING,
                    // and an INFO there leaves nats.py "connecting" for good. What changed
                    // before is in this INFO, built after the flag is up.
                    self.sent_connect_info = true;
                    self.client.async_info.store(true, Ordering::Release);
                    let mut out = self.client.out.lock();
                    encode::info(&mut out.buf, &self.ctx.info_for(&self.client, true));
                }
                Ok(())
            }
            ClientOp::Pong => {
                self.client.pings_out.store(0, Ordering::Relaxed);
                if let Some(sent) = self.client.ping_sent.lock().take() {
                    *self.client.rtt.lock() = Some(sent.elapsed());
                }
                Ok(())
            }
            ClientOp::Ignored => Ok(()),
        }
    }

    fn on_connect(&mut self, json: &[u8]) -> Result<(), CloseReason> {
        // nats-server closes without -ERR on unparsable CONNECT JSON.
        let mut opts = self.opts.clone();
        opts.apply_json(json)
            .map_err(|_| CloseReason::ProtocolViolation)?;
        if let Some(p) = opts.protocol
            && !(0..=1).contains(&p)
        {
            self.client.send_err("invalid client protocol");
            return Err(CloseReason::ProtocolViolation);
        }
        if opts.no_responders && !opts.headers {
            self.client
                .send_err("no responders requires headers support");
            return Err(CloseReason::ProtocolViolation);
        }
        let proof = ConnProof {
            nonce: self.client.nonce.get().map(String::as_str),
            cert_identities: self.cert_identities.as_deref(),
        };
        let authed = {
            // Under the credentials lock, with the users loaded inside it: a reload that
            // swapped them before checks this client after (see `conn::reauth`).
            let mut held = self.client.credentials.lock();
            let Ok(authed) = self.ctx.auth().authenticate_conn(&opts, proof) else {
                drop(held);
                self.client.send_err("Authorization Violation");
                return Err(CloseReason::AuthViolation);
            };
            *held = Some(ConnCredentials::new(&opts, self.cert_identities.clone()));
            self.client.set_permissions(authed.perms.clone());
            authed
        };
        // A connection sends one CONNECT before anything else; a second one cannot move it.
        if self.client.account.set(authed.account.clone()).is_err()
            && self.client.account() != &*authed.account
        {
            self.client.send_err("Authorization Violation");
            return Err(CloseReason::AuthViolation);
        }
        let _ = self
            .client
            .account_traffic
            .set(self.ctx.bus.namespace(&authed.account).traffic.clone());
        {
            let mut meta = self.client.meta.lock();
            meta.name = opts.name.clone().unwrap_or_default();
            meta.lang = opts.lang.clone().unwrap_or_default();
            meta.version = opts.version.clone().unwrap_or_default();
            meta.user = authed.user.unwrap_or_default();
        }
        {
            // Until the first PING/PONG measures it, the round-trip time is estimated as the
            // time from accept to CONNECT, as nats-server does (requests through a service
            // import carry it in `Nats-Request-Info`, `/connz` shows it).
            let mut rtt = self.client.rtt.lock();
            if rtt.is_none() {
                let since = time::OffsetDateTime::now_utc() - self.client.start;
                let since = std::time::Duration::try_from(since).unwrap_or_default();
                *rtt = Some(since.max(std::time::Duration::from_nanos(1)));
            }
        }
        self.client.headers.store(opts.headers, Ordering::Relaxed);
        self.parser.set_headers(opts.headers);
        self.parser.set_awaiting_auth(false);
        self.opts = opts;
        self.connected = true;
        self.ok();
        // Wake the writer so it starts the ping timer.
        self.client.connected.store(true, Ordering::Release);
        self.client.wake_writer();
        Ok(())
    }

    fn on_pub(
        &mut self,
        subject: &Bytes,
        reply: Option<Bytes>,
        hdrs: Option<Bytes>,
        payload: &[u8],
    ) {
        let c = &self.client;
        let size = payload.len() + hdrs.as_ref().map_or(0, Bytes::len);
        c.stats.in_msgs.fetch_add(1, Ordering::Relaxed);
        c.stats.in_bytes.fetch_add(size as u64, Ordering::Relaxed);
        let traffic = self.ctx.bus.stats();
        traffic.in_msgs.fetch_add(1, Ordering::Relaxed);
        traffic.in_bytes.fetch_add(size as u64, Ordering::Relaxed);
        if let Some(acc) = c.account_traffic.get() {
            acc.stats.in_msgs.fetch_add(1, Ordering::Relaxed);
            acc.stats.in_bytes.fetch_add(size as u64, Ordering::Relaxed);
        }
        let subj = subject_text::to_text(subject);
        let subj = &*subj;
        if self.opts.pedantic && !subject::is_valid_literal_subject(subj) {
            // nats-server reports it and still delivers.
            c.send_err("Invalid Publish Subject");
        }
        if let Some(r) = reply.as_deref()
            && RESERVED_REPLY_PREFIXES.iter().any(|p| r.starts_with(p))
        {
            let r = String::from_utf8_lossy(r);
            c.send_err(&format!(
                "Permissions Violation for Publish with Reply of \"{r}\""
            ));
            return;
        }
        if let Some(p) = c.permissions()
            && !p.can_publish(subj)
        {
            c.send_err(&format!("Permissions Violation for Publish to \"{subj}\""));
            return;
        }
        let trace = hdrs
            .as_deref()
            .and_then(|h| crate::trace::Trace::from_headers(h, size));
        if let Some(t) = &trace {
            // The trace destination needs the publisher's publish permission (nats-server
            // then drops the message).
            if let Some(p) = c.permissions()
                && !p.can_publish(t.dest())
            {
                c.send_err(&format!(
                    "Permissions Violation for Publish to \"{}\"",
                    t.dest()
                ));
                return;
            }
            self.flush.trace = Some(t.recorder());
        }
        self.ok();
        let from = Origin::Client {
            client: &self.client,
            echo: self.opts.echo(),
        };
        let msg = Msg::new(subj, payload)
            .in_account(self.client.account())
            .reply(reply.as_deref())
            .headers(hdrs.as_deref());
        let delivered = self.ctx.bus.route(from, &msg, &mut self.flush);
        if let Some(t) = trace {
            let route = self.flush.trace.take().unwrap_or_default();
            let settings = self.ctx.settings.load();
            let tracer = crate::trace::Tracer {
                bus: &self.ctx.bus,
                node: &self.ctx.node,
                tags: &settings.config.server_tags,
                jetstream: settings.config.jetstream.enabled,
            };
            let only = t.only();
            t.publish(
                tracer,
                crate::trace::Ingress::Client(&self.client),
                self.client.account(),
                subj,
                &route,
            );
            if only {
                return;
            }
        }
        if delivered == 0
            && self.opts.no_responders
            && self.opts.headers
            && let Some(r) = reply.as_deref()
        {
            let r = subject_text::to_text(r);
            self.ctx.bus.send_no_responders(&self.client, subj, &r);
        }
    }

    fn on_sub(&mut self, subject: &Bytes, queue: Option<&Bytes>, sid: Bytes) {
        let c = &self.client;
        let subj = subject_text::to_text(subject);
        let subj = &*subj;
        if !subject::is_valid_subject(subj) {
            c.send_err("Invalid Subject");
            return;
        }
        let queue = queue.map(|q| subject_text::to_text(q));
        let queue = queue.as_deref();
        // Checked under the subscriptions lock: a reload that changes the permissions
        // meanwhile sees this subscription when it looks for the ones to remove.
        let mut subs = c.subs.lock();
        if let Some(p) = c.permissions()
            && !p.can_subscribe_queue(subj, queue)
        {
            drop(subs);
            let text = match queue {
                Some(q) => format!(
                    "Permissions Violation for Subscription to \"{subj}\" using queue \"{q}\""
                ),
                None => format!("Permissions Violation for Subscription to \"{subj}\""),
            };
            c.send_err(&text);
            return;
        }
        if subs.contains_key(&sid) {
            drop(subs);
            self.ok();
            return;
        }
        let max_subs = self.cfg.max_subscriptions as usize;
        if max_subs > 0 && subs.len() >= max_subs {
            drop(subs);
            c.send_err("maximum subscriptions exceeded");
            return;
        }
        let sub = Arc::new(Subscription {
            client: c.clone(),
            subject: subj.to_string(),
            queue: queue.map(str::to_string),
            sid: sid.clone(),
            delivered: Default::default(),
            max: Default::default(),
        });
        if self.ctx.bus.add_subscription(&sub).is_err() {
            drop(subs);
            c.send_err("Invalid Subject");
            return;
        }
        subs.insert(sid, sub);
        drop(subs);
        self.ok();
    }

    fn on_unsub(&mut self, sid: &Bytes, max: Option<u64>) {
        let c = &self.client;
        let sub = c.subs.lock().get(sid).cloned();
        if let Some(sub) = sub {
            match max {
                Some(n) if n > sub.delivered.load(Ordering::Relaxed) => {
                    sub.max.store(n, Ordering::Relaxed);
                }
                _ => {
                    self.ctx.bus.unsubscribe(c, sid);
                }
            }
        }
        self.ok();
    }
}
