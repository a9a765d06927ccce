//! DIRECT.GET: answered by the stream leader once it confirmed it leads (or by a local mirror
//! with `mirror_direct`).

use std::sync::Arc;

use crate::bus::Msg;
use crate::bus::internal::InternalMsg;
use crate::jetstream::api::types::requests::{BodyRule, MsgGetRequest, parse_body};
use crate::jetstream::runtime::JetStream;
use crate::jetstream::runtime::replica::LocalStream;
use crate::jetstream::stream::info;

impl JetStream {
    pub(crate) fn direct_get(&self, name: &str, last_subject: Option<&str>, msg: &InternalMsg) {
        if let Some(ls) = self.local_stream(name) {
            self.direct_get_from(&ls, last_subject, msg);
        }
    }

    /// A local mirror with `mirror_direct` of `origin`, if any.
    pub(crate) fn local_direct_mirror(&self, origin: &str) -> Option<Arc<LocalStream>> {
        let candidates: Vec<Arc<LocalStream>> = self.local.read().values().cloned().collect();
        candidates.into_iter().find(|ls| {
            let sm = ls.sm.lock();
            let cfg = sm.config();
            cfg.mirror_direct && cfg.mirror.as_ref().is_some_and(|m| m.name == origin)
        })
    }

    /// Answers a DIRECT.GET from `ls` (the stream itself with `allow_direct`, or a mirror of
    /// it with `mirror_direct`; the reply's `Nats-Stream` names the answering stream, as
    /// nats-server's does).
    pub(crate) fn direct_get_from(
        &self,
        ls: &LocalStream,
        last_subject: Option<&str>,
        msg: &InternalMsg,
    ) {
        let Some(reply) = &msg.reply else {
            return;
        };
        let name = ls.name.as_str();
        let outcome = {
            let sm = ls.sm.lock();
            if !sm.config().allow_direct && !sm.config().mirror_direct {
                return;
            }
            direct_lookup(sm.store(), last_subject, &msg.payload)
        };
        match outcome {
            DirectOutcome::Found(m, no_hdr) => {
                let r = info::direct_get_reply(name, &m, no_hdr);
                let hdrs = (!r.headers.is_empty()).then_some(r.headers.as_slice());
                self.bus.publish(&Msg::new(reply, &r.payload).headers(hdrs));
            }
            DirectOutcome::NotFound => {
                let status = info::direct_status(404, "Message Not Found");
                self.bus
                    .publish(&Msg::new(reply, b"").headers(Some(&status)));
            }
            DirectOutcome::BadRequest => {
                let status = info::direct_status(408, "Bad Request");
                self.bus
                    .publish(&Msg::new(reply, b"").headers(Some(&status)));
            }
        }
    }
}

/// What a DIRECT.GET finds.
enum DirectOutcome {
    /// The message, and whether headers are left out.
    Found(jetraft_storage::stream::StoredMsg, bool),
    /// No such message.
    NotFound,
    /// The request was malformed.
    BadRequest,
}

fn direct_lookup(
    store: &dyn jetraft_storage::stream::StreamStore,
    last_subject: Option<&str>,
    body: &[u8],
) -> DirectOutcome {
    let (found, no_hdr) = match last_subject {
        Some(subject) => {
            if !body.is_empty() {
                return DirectOutcome::BadRequest;
            }
            (store.last_for_subject(subject), false)
        }
        None => {
            let Ok(Some(req)) = parse_body::<MsgGetRequest>(BodyRule::Required, body) else {
                return DirectOutcome::BadRequest;
            };
            let Ok(selector) = req.selector() else {
                return DirectOutcome::BadRequest;
            };
            (info::find_message(store, &selector), req.no_hdr)
        }
    };
    match found {
        Ok(Some(m)) => DirectOutcome::Found(m, no_hdr),
        _ => DirectOutcome::NotFound,
    }
}
