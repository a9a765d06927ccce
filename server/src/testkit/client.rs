//! [`TestClient`]: a NATS client of one node's bus, without a socket. It is a real
//! [`Client`] with a real [`Subscription`] on its own inbox (so the interest reaches the other
//! nodes like any client's), publishes as `Origin::Client` (as a connection's reader does), and
//! reads what the bus encoded into its outbound buffer, parsing the `MSG`/`HMSG` frames a
//! connection's writer would have sent.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::bus::{Bus, Client, FlushSet, Msg, Origin, Subscription};

/// Source of client ids and inbox names, unique in the test process.
static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

/// One message a [`TestClient`] received.
#[derive(Debug, Clone)]
pub(crate) struct TestMsg {
    /// The subscription it came on.
    pub(crate) sid: String,
    /// Subject shown to the client (JetStream deliveries show the stored subject, not the
    /// inbox they were routed by: tell them apart by `sid`).
    pub(crate) subject: String,
    /// Reply subject, if any.
    pub(crate) reply: Option<String>,
    /// Header block, if any.
    pub(crate) headers: Option<Bytes>,
    /// Payload.
    pub(crate) payload: Bytes,
}

impl TestMsg {
    /// The payload as JSON (panics with the payload when it is not).
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.payload).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.payload)
            )
        })
    }

    /// The status code of a status message (`NATS/1.0 404 ...`), if it is one.
    pub(crate) fn status(&self) -> Option<u16> {
        let h = self.headers.as_ref()?;
        let line = std::str::from_utf8(h).ok()?.lines().next()?;
        line.strip_prefix("NATS/1.0 ")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }
}

/// A client of one node's bus (see the module docs).
#[derive(Debug)]
pub(crate) struct TestClient {
    /// The node's bus.
    bus: Bus,
    /// The router-side client state; its outbound buffer is where deliveries land.
    client: Arc<Client>,
    /// This client's inbox prefix; the client subscribes to `<inbox>.>`.
    inbox: String,
    /// Next reply token.
    next: AtomicU64,
    /// Parsed messages not taken yet.
    received: Mutex<VecDeque<TestMsg>>,
    /// Bytes read from the outbound buffer that do not form a whole frame yet.
    partial: Mutex<BytesMut>,
}

impl TestClient {
    /// A client of `bus`, subscribed to its own inbox.
    pub(crate) fn new(bus: &Bus) -> Self {
        let cid = NEXT_CLIENT.fetch_add(1, Ordering::Relaxed);
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        let client = Arc::new(Client::new(
            cid,
            addr,
            64 * 1024 * 1024,
            &CancellationToken::new(),
        ));
        client.headers.store(true, Ordering::Relaxed);
        let this = Self {
            bus: bus.clone(),
            client,
            inbox: format!("_INBOX.test{cid}"),
            next: AtomicU64::new(1),
            received: Mutex::new(VecDeque::new()),
            partial: Mutex::new(BytesMut::new()),
        };
        let _ = this.subscribe(&format!("{}.>", this.inbox));
        this
    }

    /// Subscribes to `subject` (interest propagates to the other nodes); returns the sid.
    pub(crate) fn subscribe(&self, subject: &str) -> String {
        let sid = Bytes::from(self.client.subs.lock().len().to_string());
        let sub = Arc::new(Subscription {
            client: self.client.clone(),
            subject: subject.to_string(),
            queue: None,
            sid: sid.clone(),
            delivered: AtomicU64::new(0),
            max: AtomicU64::new(0),
        });
        self.client.subs.lock().insert(sid.clone(), sub.clone());
        self.bus
            .add_subscription(&sub)
            .unwrap_or_else(|e| panic!("subscribe {subject}: {e}"));
        String::from_utf8_lossy(&sid).into_owned()
    }

    /// Subscribes to a new subject outside the request inbox (for a pull request's
    /// deliveries); returns the subject and the sid.
    pub(crate) fn subscribe_new_inbox(&self) -> (String, String) {
        let subject = format!(
            "_INBOX.sub{}.{}",
            self.client.cid,
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        let sid = self.subscribe(&subject);
        (subject, sid)
    }

    /// A new reply subject in this client's inbox.
    pub(crate) fn new_inbox(&self) -> String {
        format!(
            "{}.{}",
            self.inbox,
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Publishes like a connected client; returns how many receivers it reached (local
    /// deliveries plus forwards; 0 means no responders).
    pub(crate) fn publish(&self, subject: &str, reply: Option<&str>, payload: &[u8]) -> usize {
        self.publish_with(subject, reply, None, payload)
    }

    /// [`Self::publish`] with a header block (`NATS/1.0\r\n...\r\n\r\n`).
    pub(crate) fn publish_with(
        &self,
        subject: &str,
        reply: Option<&str>,
        hdrs: Option<&[u8]>,
        payload: &[u8],
    ) -> usize {
        let mut flush = FlushSet::default();
        let msg = Msg::new(subject, payload).reply_str(reply).headers(hdrs);
        let n = self.bus.route(
            Origin::Client {
                client: &self.client,
                echo: true,
            },
            &msg,
            &mut flush,
        );
        flush.wake_all();
        n
    }

    /// Sends a request and waits up to `within` for the first answer; `None` on no responders
    /// or no answer in time.
    pub(crate) async fn request(
        &self,
        subject: &str,
        payload: &[u8],
        within: Duration,
    ) -> Option<TestMsg> {
        self.request_with(subject, None, payload, within).await
    }

    /// [`Self::request`] with a header block.
    pub(crate) async fn request_with(
        &self,
        subject: &str,
        hdrs: Option<&[u8]>,
        payload: &[u8],
        within: Duration,
    ) -> Option<TestMsg> {
        let reply = self.new_inbox();
        if self.publish_with(subject, Some(&reply), hdrs, payload) == 0 {
            return None;
        }
        self.next_on(&reply, within).await
    }

    /// Waits up to `within` for the next message shown with `subject` (others stay queued).
    pub(crate) async fn next_on(&self, subject: &str, within: Duration) -> Option<TestMsg> {
        self.next_where(|m| m.subject == subject, within).await
    }

    /// Waits up to `within` for the next message of subscription `sid` (others stay queued).
    pub(crate) async fn next_for(&self, sid: &str, within: Duration) -> Option<TestMsg> {
        self.next_where(|m| m.sid == sid, within).await
    }

    async fn next_where(
        &self,
        wanted: impl Fn(&TestMsg) -> bool,
        within: Duration,
    ) -> Option<TestMsg> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            // Registered before reading, so a delivery in between wakes us.
            let notified = self.client.notify.notified();
            self.drain();
            {
                let mut received = self.received.lock();
                if let Some(i) = received.iter().position(&wanted) {
                    return received.remove(i);
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }

    /// Moves everything in the outbound buffer into `received`.
    fn drain(&self) {
        self.client.flush_scheduled.store(false, Ordering::Release);
        let bytes = std::mem::take(&mut self.client.out.lock().buf);
        let mut partial = self.partial.lock();
        partial.extend_from_slice(&bytes);
        let mut received = self.received.lock();
        while let Some(msg) = parse_frame(&mut partial) {
            received.push_back(msg);
        }
    }
}

/// Takes one `MSG`/`HMSG` frame off the front of `buf`, if a whole one is there. Other
/// protocol lines (none are expected) are skipped.
fn parse_frame(buf: &mut BytesMut) -> Option<TestMsg> {
    loop {
        let eol = buf.windows(2).position(|w| w == b"\r\n")?;
        let line = String::from_utf8_lossy(&buf[..eol]).into_owned();
        let parts: Vec<&str> = line.split(' ').collect();
        let (hmsg, rest) = match parts.split_first() {
            Some((&"MSG", rest)) => (false, rest),
            Some((&"HMSG", rest)) => (true, rest),
            _ => {
                let _ = buf.split_to(eol + 2);
                continue;
            }
        };
        // MSG subject sid [reply] len | HMSG subject sid [reply] hlen tlen
        let sizes = if hmsg { 2 } else { 1 };
        let (fields, lens) = rest.split_at(rest.len().checked_sub(sizes)?);
        let total: usize = lens.last()?.parse().ok()?;
        let hlen: usize = if hmsg { lens.first()?.parse().ok()? } else { 0 };
        if buf.len() < eol + 2 + total + 2 {
            return None;
        }
        let subject = (*fields.first()?).to_string();
        let sid = (*fields.get(1)?).to_string();
        let reply = fields.get(2).map(|r| (*r).to_string());
        let _ = buf.split_to(eol + 2);
        let mut body = buf.split_to(total).freeze();
        let _ = buf.split_to(2);
        let headers = hmsg.then(|| body.split_to(hlen));
        return Some(TestMsg {
            sid,
            subject,
            reply,
            headers,
            payload: body,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_parse_with_and_without_headers_and_reply() {
        let mut buf = BytesMut::new();
        crate::protocol::encode::msg(&mut buf, b"a.b", b"1", None, None, b"hi");
        crate::protocol::encode::msg(
            &mut buf,
            b"c",
            b"2",
            Some(b"r.1"),
            Some(b"NATS/1.0 408 Request Timeout\r\n\r\n"),
            b"",
        );
        buf.extend_from_slice(b"MSG x 3 5\r\nhel");
        let a = parse_frame(&mut buf).unwrap();
        assert_eq!((a.subject.as_str(), &a.payload[..]), ("a.b", &b"hi"[..]));
        assert_eq!(a.sid, "1");
        assert!(a.reply.is_none() && a.headers.is_none());
        let b = parse_frame(&mut buf).unwrap();
        assert_eq!(b.reply.as_deref(), Some("r.1"));
        assert_eq!(b.status(), Some(408));
        assert!(b.payload.is_empty());
        assert!(parse_frame(&mut buf).is_none(), "a partial frame waits");
        buf.extend_from_slice(b"lo\r\n");
        assert_eq!(&parse_frame(&mut buf).unwrap().payload[..], b"hello");
    }
}
