//! DIRECT.GET: answered by the stream leader once it confirmed it leads (or by a local mirror
//! with `mirror_direct`).

use std::sync::Arc;

use crate::bus::Msg;
use crate::bus::internal::InternalMsg;
use crate::jetstream::runtime::JetStream;
use crate::jetstream::runtime::replica::LocalStream;
use crate::jetstream::stream::direct;

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
            cfg.mirror_direct
                && cfg.mirror.as_ref().is_some_and(|m| {
                    let account = crate::jetstream::account::stream_account(&ls.name);
                    crate::jetstream::account::stream_key(account, &m.name) == origin
                })
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
        let replies = {
            let sm = ls.sm.lock();
            // A replica being restored from a snapshot holds no messages until it is done.
            if sm.is_stand_in() || (!sm.config().allow_direct && !sm.config().mirror_direct) {
                return;
            }
            direct::answer(
                sm.store(),
                crate::jetstream::account::stream_name(&ls.name),
                last_subject,
                &msg.payload,
                self.config.max_pending,
            )
        };
        for r in replies {
            let hdrs = (!r.headers.is_empty()).then_some(r.headers.as_slice());
            self.bus.publish(
                &Msg::new(reply, &r.payload)
                    .headers(hdrs)
                    .in_account(&msg.account),
            );
        }
    }
}
