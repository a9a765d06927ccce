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
use crate::accounts::request_info;

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
                .shown_as(shown_after_mapping(msg, &reply))
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
        let mut stamped: Option<Vec<u8>> = None;
        for import in rules
            .service_imports
            .iter()
            .filter(|i| i.map.matches(msg.subject))
        {
            let hdrs = stamped.get_or_insert_with(|| request_headers(origin, msg, hops));
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
                .headers(Some(hdrs));
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
                .shown_as(shown_after_mapping(msg, &subject))
                .reply(msg.reply)
                .headers(msg.hdrs);
            delivered += self.route_at(Origin::Server, &copy, flush, hops + 1);
        }
        delivered
    }

    /// Whether a message on `subject` in `account` reaches a subscriber: a plain one without
    /// `group`, a member of `group` with one; in the account itself or, through the stream
    /// imports of other accounts and the reply subjects of service imports, in theirs (nats-server counts an importer's subscriptions as
    /// interest in the exporting account, so a push consumer delivers to a subject another
    /// account imports).
    pub fn delivery_interest(&self, account: &str, subject: &str, group: Option<&str>) -> bool {
        self.delivery_interest_at(account, subject, group, 0)
    }

    fn delivery_interest_at(
        &self,
        account: &str,
        subject: &str,
        group: Option<&str>,
        hops: u8,
    ) -> bool {
        let result = self.namespace(account).sublist.match_subject(subject);
        let here = match group {
            None => !result.plain.is_empty(),
            Some(g) => result.queues.iter().any(|q| &*q.name == g),
        };
        if here || hops >= MAX_HOPS {
            return here;
        }
        // A reply subject of a service-import request: the requester's reply subject.
        if let Some((requester, reply)) =
            self.inner.responses.peek(account, subject, Instant::now())
        {
            return self.delivery_interest_at(&requester, &reply, group, hops + 1);
        }
        let accounts = self.accounts();
        let Some(rules) = accounts.get(account) else {
            return false;
        };
        rules
            .stream_exports
            .iter()
            .filter(|i| i.map.matches(subject))
            .any(|i| {
                let mapped = i.map.apply(subject);
                self.delivery_interest_at(&i.importer, &mapped, group, hops + 1)
            })
    }

    /// Watches the interest [`Self::delivery_interest`] reads for a push consumer's deliver
    /// subject: `subject` in `account` and, through the stream imports of other accounts, the
    /// subjects it is seen on there (a subscriber in an importing account must wake the
    /// consumer as one in its own account does). The watches last as long as the guards.
    pub fn watch_delivery_interest(
        &self,
        account: &str,
        subject: &str,
        callback: &crate::router::interest_watch::WatchCallback,
    ) -> Vec<crate::router::interest_watch::WatchGuard> {
        let mut guards = Vec::new();
        self.watch_delivery_interest_at(account, subject, callback, 0, &mut guards);
        guards
    }

    fn watch_delivery_interest_at(
        &self,
        account: &str,
        subject: &str,
        callback: &crate::router::interest_watch::WatchCallback,
        hops: u8,
        guards: &mut Vec<crate::router::interest_watch::WatchGuard>,
    ) {
        guards.push(
            self.namespace(account)
                .sublist
                .watch(subject, callback.clone()),
        );
        if hops >= MAX_HOPS {
            return;
        }
        let accounts = self.accounts();
        let Some(rules) = accounts.get(account) else {
            return;
        };
        for import in rules
            .stream_exports
            .iter()
            .filter(|i| i.map.matches(subject))
        {
            let mapped = import.map.apply(subject);
            self.watch_delivery_interest_at(&import.importer, &mapped, callback, hops + 1, guards);
        }
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

/// What receivers see of `msg` once it is routed on `mapped` in another account: a JetStream
/// delivery keeps showing the stored subject (a pull consumer's answers through a service
/// import too: nats.js takes a message shown on its own inbox for a status), anything else the
/// new subject, as nats-server does.
fn shown_after_mapping<'a>(msg: &Msg<'a>, mapped: &'a str) -> &'a str {
    if msg.shown == msg.subject {
        mapped
    } else {
        msg.shown
    }
}

/// The headers of a request crossing a service import: `msg`'s with the `Nats-Request-Info`
/// stamp of its publisher (its account, and its round-trip time when a client of this node
/// published it), or, on a further crossing (`hops` > 0), the first stamp naming this account
/// as `svc`.
fn request_headers(origin: Origin<'_>, msg: &Msg<'_>, hops: u8) -> Vec<u8> {
    let rtt = match origin {
        Origin::Client { client, .. } => *client.rtt.lock(),
        Origin::Peer { .. } | Origin::Server => None,
    };
    let chained = (hops > 0).then_some(msg.account);
    request_info::stamped(msg.hdrs, msg.account, rtt, chained)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;

    use bytes::Bytes;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::accounts::Accounts;
    use crate::bus::{Client, Subscription};

    const CONFIG: &str = r#"
accounts {
  A: { exports: [ { service: "svc.>" }, { stream: "ev.>" } ] }
  B: { imports: [
    { service: { account: A, subject: "svc.time" }, to: "time.now" }
    { stream: { account: A, subject: "ev.>" }, prefix: "from_a" }
  ] }
  C: {}
}
"#;

    fn bus() -> Bus {
        let mut cfg = crate::config::Config::default();
        crate::config::file::apply(CONFIG, std::path::Path::new("t.conf"), &mut cfg)
            .expect("config");
        let bus = Bus::new(None);
        bus.set_accounts(Arc::new(Accounts::from_config(&cfg.auth)));
        bus
    }

    /// A client in `account` subscribed to `subjects` (sids 1, 2, ...).
    fn client(bus: &Bus, cid: u64, account: &str, subjects: &[&str]) -> Arc<Client> {
        let c = Arc::new(Client::new(
            cid,
            "127.0.0.1:1".parse().unwrap(),
            1 << 20,
            &CancellationToken::new(),
        ));
        c.account.set(Arc::from(account)).unwrap();
        for (i, subject) in subjects.iter().enumerate() {
            let sub = Arc::new(Subscription {
                client: c.clone(),
                subject: subject.to_string(),
                queue: None,
                sid: Bytes::from((i + 1).to_string()),
                delivered: AtomicU64::new(0),
                max: AtomicU64::new(0),
            });
            bus.add_subscription(&sub).unwrap();
        }
        c
    }

    fn take_out(c: &Client) -> String {
        let mut out = c.out.lock();
        String::from_utf8_lossy(&out.buf.split()).into_owned()
    }

    fn publish(bus: &Bus, account: &str, subject: &str, reply: Option<&str>) -> usize {
        bus.publish(&Msg::new(subject, b"x").in_account(account).reply_str(reply))
    }

    #[test]
    fn a_stream_import_copies_into_the_importer_under_its_prefix_only() {
        let bus = bus();
        let a = client(&bus, 1, "A", &["ev.>"]);
        let b = client(&bus, 2, "B", &["from_a.>", "ev.>"]);
        let c = client(&bus, 3, "C", &[">"]);
        assert_eq!(
            bus.subscription_count(),
            4,
            "every account's subscriptions count"
        );
        assert_eq!(bus.sublist().count(), 0, "none is in $G");
        assert_eq!(publish(&bus, "A", "ev.1", None), 2);
        assert_eq!(take_out(&a), "MSG ev.1 1 1\r\nx\r\n");
        assert_eq!(take_out(&b), "MSG from_a.ev.1 1 1\r\nx\r\n");
        assert_eq!(take_out(&c), "", "C imports nothing");
        // Nothing flows back: B's own ev.1 stays in B.
        assert_eq!(publish(&bus, "B", "ev.1", None), 1);
        assert_eq!(take_out(&a), "");
        assert_eq!(take_out(&b), "MSG ev.1 2 1\r\nx\r\n");
    }

    #[test]
    fn a_service_request_is_mapped_and_one_answer_goes_back() {
        let bus = bus();
        let a = client(&bus, 1, "A", &["svc.>"]);
        let b = client(&bus, 2, "B", &["_INBOX.b.>"]);
        assert_eq!(publish(&bus, "B", "time.now", Some("_INBOX.b.1")), 1);
        let seen = take_out(&a);
        let mut words = seen.split_whitespace();
        assert_eq!(words.next(), Some("MSG"));
        assert_eq!(words.next(), Some("svc.time"));
        assert_eq!(words.next(), Some("1"));
        let reply = words.next().unwrap().to_string();
        assert!(reply.starts_with("_R_."), "{seen}");
        // The answer in A returns to B's inbox, once.
        assert_eq!(publish(&bus, "A", &reply, None), 1);
        assert_eq!(take_out(&b), "MSG _INBOX.b.1 1 1\r\nx\r\n");
        assert_eq!(publish(&bus, "A", &reply, None), 0, "singleton answered");
        assert_eq!(take_out(&b), "");
        // Only an answer from the exporting account is mapped back.
        assert_eq!(publish(&bus, "B", "time.now", Some("_INBOX.b.2")), 1);
        let reply = take_out(&a).split_whitespace().nth(3).unwrap().to_string();
        assert_eq!(publish(&bus, "C", &reply, None), 0);
        assert_eq!(take_out(&b), "");
    }
}
