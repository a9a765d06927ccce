//! What crosses accounts when a message is published in an account other than `$G`, by the
//! [`Accounts`](crate::accounts::Accounts) rules:
//! - an answer on a reply subject of a service import in flight goes back to the requesting
//!   account, on the requester's reply subject (on any node: peers forward such answers to the
//!   node that mapped the request, which announced interest in its reply pattern);
//! - a request matching a service import is routed in the exporting account, on the mapped
//!   subject, with a fresh reply subject there ([`ResponseMap`](crate::accounts::ResponseMap));
//! - a message matching another account's stream import is routed in that account, on the
//!   mapped subject.
//!
//! Imports are applied on the node where the message was published (a message a peer
//! forwarded was mapped there already), then routed like a server publish: to the local
//! subscribers of the target account and once to each peer with interest in it. Chains of
//! imports stop after [`MAX_HOPS`] crossings.

use std::sync::Arc;
use std::time::Instant;

use super::{Bus, FlushSet, Msg, Origin};

/// Most crossings between accounts one publish may take (import chains, loops).
const MAX_HOPS: u8 = 4;

impl Bus {
    /// Routes what `msg` (published in an account other than `$G`) feeds in other accounts;
    /// returns the deliveries and forwards, as [`Bus::route`] counts them.
    pub(super) fn route_shared(
        &self,
        origin: Origin<'_>,
        msg: &Msg<'_>,
        flush: &mut FlushSet,
        hops: u8,
    ) -> usize {
        let mut delivered = 0;
        let now = Instant::now();
        if let Some((requester, reply)) = self.inner.responses.answer(msg.account, msg.subject, now)
        {
            let answer = Msg::new(&reply, msg.payload)
                .in_account(&requester)
                .reply(msg.reply)
                .headers(msg.hdrs);
            delivered += self.route_at(Origin::Server, &answer, flush, hops + 1);
        }
        if matches!(origin, Origin::Peer { .. }) || hops >= MAX_HOPS {
            return delivered;
        }
        let accounts = self.accounts();
        let Some(rules) = accounts.get(msg.account) else {
            return delivered;
        };
        if rules.is_closed() {
            return delivered;
        }
        let requester: Arc<str> = Arc::from(msg.account);
        for import in rules
            .service_imports
            .iter()
            .filter(|i| i.map.matches(msg.subject))
        {
            let subject = import.map.apply(msg.subject);
            let reply = msg.reply.map(|r| {
                self.announce_replies_in(&import.exporter);
                self.inner.responses.track(
                    &import.exporter,
                    &requester,
                    &String::from_utf8_lossy(r),
                    import.response,
                    import.threshold,
                    now,
                )
            });
            let request = Msg::new(&subject, msg.payload)
                .in_account(&import.exporter)
                .reply_str(reply.as_deref())
                .headers(msg.hdrs);
            delivered += self.route_at(Origin::Server, &request, flush, hops + 1);
        }
        for import in rules
            .stream_exports
            .iter()
            .filter(|i| i.map.matches(msg.subject))
        {
            let subject = import.map.apply(msg.subject);
            let copy = Msg::new(&subject, msg.payload)
                .in_account(&import.importer)
                .reply(msg.reply)
                .headers(msg.hdrs);
            delivered += self.route_at(Origin::Server, &copy, flush, hops + 1);
        }
        delivered
    }

    /// Tells peers, once per exporting account, that answers on this node's reply subjects
    /// (`_R_.<token>.>`) in `exporter` come here.
    fn announce_replies_in(&self, exporter: &Arc<str>) {
        let Some(peers) = &self.inner.peers else {
            return;
        };
        if self.inner.reply_interest.lock().insert(exporter.clone()) {
            peers.local_subscribed(exporter, &self.inner.responses.pattern(), None);
        }
    }
}
