//! Core NATS across a 3-node cluster (processes on loopback): interest propagation, message
//! forwarding, queue groups, request/reply, no-responders, unsubscribe propagation,
//! `connect_urls`, and a member killed with SIGKILL and restarted.
//!
//! Interest travels between nodes asynchronously, so before relying on a subscription made on
//! another node a test calls [`sync_interest`]: a subscription made later on the same connection
//! is only visible on the publisher's node once the earlier ones are.

use std::collections::HashSet;
use std::time::Duration;

use async_nats::{Client, RequestErrorKind};
use bytes::Bytes;
use futures_util::StreamExt as _;
use jetraft_tests::harness::cluster::connect_urls;
use jetraft_tests::harness::{Cluster, RawClient, ServerProcess, wait_for, within};

const OP: Duration = Duration::from_secs(5);

async fn cluster() -> Cluster {
    Cluster::start(3, "core").await.expect("start cluster")
}

async fn connect(srv: &ServerProcess) -> Client {
    within(
        OP,
        "connect",
        Box::pin(
            async_nats::ConnectOptions::new()
                .connection_timeout(OP)
                .connect(srv.client_url()),
        ),
    )
    .await
    .expect("connect")
}

async fn next_msg(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    within(OP, "next message", sub.next())
        .await
        .expect("subscription ended")
}

/// Returns once everything `subscriber` subscribed so far is visible to `publisher`'s node:
/// subscribes to a fresh subject on `subscriber` and publishes to it from `publisher` until a
/// message arrives.
async fn sync_interest(publisher: &Client, subscriber: &Client) {
    let subject = subscriber.new_inbox();
    let mut probe = subscriber
        .subscribe(subject.clone())
        .await
        .expect("probe sub");
    subscriber.flush().await.expect("flush");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        publisher
            .publish(subject.clone(), Bytes::new())
            .await
            .expect("probe publish");
        publisher.flush().await.expect("flush");
        if tokio::time::timeout(Duration::from_millis(100), probe.next())
            .await
            .is_ok()
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "interest did not propagate within 10s"
        );
    }
}

/// Collects messages until `quiet` passes without one.
async fn drain(sub: &mut async_nats::Subscriber, quiet: Duration) -> Vec<async_nats::Message> {
    let mut got = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(quiet, sub.next()).await {
        got.push(m);
    }
    got
}

#[tokio::test]
async fn publish_on_one_node_reaches_subscribers_on_the_others_including_wildcards() {
    let c = cluster().await;
    let (p, s2, s3) = (
        connect(c.node(0)).await,
        connect(c.node(1)).await,
        connect(c.node(2)).await,
    );
    let mut exact = s2.subscribe("orders.new").await.unwrap();
    let mut star = s3.subscribe("orders.*").await.unwrap();
    let mut full = s3.subscribe("orders.>").await.unwrap();
    let mut other = s2.subscribe("invoices.>").await.unwrap();
    sync_interest(&p, &s2).await;
    sync_interest(&p, &s3).await;
    for i in 0..10 {
        p.publish("orders.new", format!("m{i}").into())
            .await
            .unwrap();
    }
    p.publish("orders.eu.new", "deep".into()).await.unwrap();
    p.flush().await.unwrap();
    for sub in [&mut exact, &mut star] {
        for i in 0..10 {
            let m = next_msg(sub).await;
            assert_eq!(m.subject.as_str(), "orders.new");
            assert_eq!(m.payload, format!("m{i}"), "order is kept across nodes");
        }
    }
    let got: Vec<String> = drain(&mut full, Duration::from_millis(300))
        .await
        .iter()
        .map(|m| m.subject.to_string())
        .collect();
    assert_eq!(got.len(), 11, "orders.> gets every message once: {got:?}");
    assert_eq!(got.last().map(String::as_str), Some("orders.eu.new"));
    assert!(
        drain(&mut star, Duration::from_millis(200))
            .await
            .is_empty()
    );
    assert!(
        drain(&mut other, Duration::from_millis(200))
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn headers_and_reply_subjects_cross_nodes() {
    let c = cluster().await;
    let (p, s) = (connect(c.node(0)).await, connect(c.node(1)).await);
    let mut sub = s.subscribe("h.x").await.unwrap();
    sync_interest(&p, &s).await;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("X-Trace", "abc");
    p.publish_with_reply_and_headers("h.x", "my.reply", headers, "body".into())
        .await
        .unwrap();
    let m = next_msg(&mut sub).await;
    assert_eq!(m.payload, "body");
    assert_eq!(m.reply.as_deref(), Some("my.reply"));
    let h = m.headers.expect("headers");
    assert_eq!(h.get("X-Trace").map(|v| v.as_str()), Some("abc"));
}

#[tokio::test]
async fn subjects_that_are_not_utf8_cross_nodes_byte_for_byte() {
    let c = cluster().await;
    let (p, s) = (connect(c.node(0)).await, connect(c.node(1)).await);
    let mut raw_sub = RawClient::connected(c.node(1)).await;
    raw_sub.send(b"SUB bin.\xff.* 1\r\n").await;
    raw_sub.ping_pong().await;
    // Interest of the raw subscriber's node reaches node 0 like any other: wait with a probe.
    sync_interest(&p, &s).await;
    let mut raw_pub = RawClient::connected(c.node(0)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let got = loop {
        raw_pub.send(b"PUB bin.\xff.\xfe r.\xc3 2\r\nok\r\n").await;
        raw_pub.ping_pong().await;
        raw_sub.send("PING\r\n").await;
        let got = raw_sub
            .read_until_contains(b"PONG\r\n", Duration::from_secs(5))
            .await;
        if got.starts_with(b"MSG") || tokio::time::Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        got.starts_with(b"MSG bin.\xff.\xfe 1 r.\xc3 2\r\nok\r\n"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
}

async fn queue_members(
    clients: &[&Client],
    per_node: usize,
) -> Vec<(usize, async_nats::Subscriber)> {
    let mut subs = Vec::new();
    for (n, c) in clients.iter().enumerate() {
        for _ in 0..per_node {
            let sub = c.queue_subscribe("work", "q".into()).await;
            subs.push((n, sub.expect("queue subscribe")));
        }
    }
    subs
}

/// Publishes `count` numbered messages and returns, per node index, the numbers received.
async fn run_queue(
    publisher: &Client,
    subs: &mut [(usize, async_nats::Subscriber)],
    count: usize,
) -> Vec<(usize, u32)> {
    for i in 0..count {
        publisher
            .publish("work", i.to_string().into())
            .await
            .expect("publish");
    }
    publisher.flush().await.expect("flush");
    let mut got = Vec::new();
    for (node, sub) in subs.iter_mut() {
        for m in drain(sub, Duration::from_millis(500)).await {
            let text = std::str::from_utf8(&m.payload).expect("utf-8 payload");
            let n: u32 = text.parse().expect("numbered payload");
            got.push((*node, n));
        }
    }
    got
}

#[tokio::test]
async fn queue_group_across_three_nodes_delivers_each_message_exactly_once() {
    let c = cluster().await;
    let (c1, c2, c3) = (
        connect(c.node(0)).await,
        connect(c.node(1)).await,
        connect(c.node(2)).await,
    );
    // Members on the two nodes without the publisher: every message crosses a link.
    let mut remote_only = queue_members(&[&c2, &c3], 2).await;
    sync_interest(&c1, &c2).await;
    sync_interest(&c1, &c3).await;
    let got = run_queue(&c1, &mut remote_only, 200).await;
    let numbers: HashSet<u32> = got.iter().map(|(_, n)| *n).collect();
    assert_eq!(got.len(), 200, "each message delivered exactly once");
    assert_eq!(numbers.len(), 200);
    drop(remote_only);
    // Members on all three nodes: still exactly once cluster-wide.
    let mut everywhere = queue_members(&[&c1, &c2, &c3], 2).await;
    sync_interest(&c1, &c2).await;
    sync_interest(&c1, &c3).await;
    let got = run_queue(&c1, &mut everywhere, 200).await;
    let numbers: HashSet<u32> = got.iter().map(|(_, n)| *n).collect();
    assert_eq!(got.len(), 200, "each message delivered exactly once");
    assert_eq!(numbers.len(), 200);
    c.assert_clean_logs();
}

#[tokio::test]
async fn request_reply_across_nodes() {
    let c = cluster().await;
    let (requester, responder) = (connect(c.node(0)).await, connect(c.node(2)).await);
    let mut svc = responder.subscribe("svc.echo").await.unwrap();
    let r = responder.clone();
    let task = tokio::spawn(async move {
        while let Some(m) = svc.next().await {
            if let Some(reply) = m.reply {
                let mut body = b"echo:".to_vec();
                body.extend_from_slice(&m.payload);
                r.publish(reply, body.into()).await.unwrap();
            }
        }
    });
    sync_interest(&requester, &responder).await;
    for i in 0..20 {
        let resp = within(
            OP,
            "request",
            requester.request("svc.echo", format!("{i}").into()),
        )
        .await
        .expect("request answered by the remote responder, not 503");
        assert_eq!(resp.payload, format!("echo:{i}"));
    }
    task.abort();
}

#[tokio::test]
async fn request_with_no_responder_anywhere_gets_no_responders() {
    let c = cluster().await;
    let requester = connect(c.node(0)).await;
    let other = connect(c.node(1)).await;
    let _unrelated = other.subscribe("svc.other").await.unwrap();
    sync_interest(&requester, &other).await;
    let err = within(OP, "request", requester.request("svc.none", "x".into()))
        .await
        .expect_err("nobody listens");
    assert_eq!(err.kind(), RequestErrorKind::NoResponders);
}

/// Requests `subject` from `requester` until the answer is no-responders.
async fn wait_for_no_responders(requester: &Client, subject: &'static str) {
    wait_for("no responders", Duration::from_secs(10), || async {
        match tokio::time::timeout(OP, requester.request(subject, "x".into())).await {
            Ok(Err(e)) if e.kind() == RequestErrorKind::NoResponders => Some(()),
            _ => None,
        }
    })
    .await;
}

#[tokio::test]
async fn unsubscribe_and_auto_unsubscribe_propagate_to_other_nodes() {
    let c = cluster().await;
    let (requester, responder) = (connect(c.node(0)).await, connect(c.node(1)).await);
    // Explicit UNSUB.
    let mut sub = responder.subscribe("svc.a").await.unwrap();
    sync_interest(&requester, &responder).await;
    let req = tokio::spawn({
        let r = requester.clone();
        async move { r.request("svc.a", "1".into()).await }
    });
    let m = next_msg(&mut sub).await;
    responder
        .publish(m.reply.unwrap(), "ok".into())
        .await
        .unwrap();
    assert_eq!(
        within(OP, "request", req).await.unwrap().unwrap().payload,
        "ok"
    );
    sub.unsubscribe().await.unwrap();
    wait_for_no_responders(&requester, "svc.a").await;
    // UNSUB with a max: the node removes the subscription after the last delivery and tells
    // its peers.
    let mut sub = responder.subscribe("svc.b").await.unwrap();
    sub.unsubscribe_after(1).await.unwrap();
    sync_interest(&requester, &responder).await;
    let req = tokio::spawn({
        let r = requester.clone();
        async move { r.request("svc.b", "1".into()).await }
    });
    let m = next_msg(&mut sub).await;
    responder
        .publish(m.reply.unwrap(), "once".into())
        .await
        .unwrap();
    assert_eq!(
        within(OP, "request", req).await.unwrap().unwrap().payload,
        "once"
    );
    wait_for_no_responders(&requester, "svc.b").await;
}

#[tokio::test]
async fn closing_a_connection_withdraws_its_interest_from_other_nodes() {
    let c = cluster().await;
    let requester = connect(c.node(0)).await;
    let responder = connect(c.node(2)).await;
    let _sub = responder.subscribe("svc.c").await.unwrap();
    sync_interest(&requester, &responder).await;
    drop(_sub);
    drop(responder);
    wait_for_no_responders(&requester, "svc.c").await;
}

#[tokio::test]
async fn info_connect_urls_list_the_other_nodes_and_change_when_one_dies() {
    let mut c = cluster().await;
    let urls = connect_urls(c.node(0)).await.unwrap();
    assert_eq!(
        urls.first(),
        Some(&c.node(0).client_addr()),
        "own URL first, as nats-server"
    );
    for i in 1..3 {
        assert!(
            urls.contains(&c.node(i).client_addr()),
            "{urls:?} lacks node {}",
            i + 1
        );
    }
    // `/varz` lists the same URLs (nats.js's test launcher waits on them for a cluster).
    let varz = c.node(0).monitor_json("/varz").await.expect("varz");
    let mut listed: Vec<String> = varz["connect_urls"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let mut advertised = urls.clone();
    listed.sort();
    advertised.sort();
    assert_eq!(listed, advertised, "{varz}");
    // A protocol-1 client gets an async INFO without the dead node.
    let (mut raw, _) = RawClient::connect_with(
        c.node(0),
        r#"{"verbose":false,"pedantic":false,"protocol":1,"headers":true}"#,
    )
    .await;
    raw.read_until_contains(b"connect_info", OP).await;
    let dead = c.node(2).client_addr();
    c.kill(2);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let line = raw.read_line_within(Duration::from_secs(15)).await;
        if let Some(json) = line.strip_prefix("INFO ") {
            let info: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
            let urls: Vec<&str> = info["connect_urls"]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
                .unwrap_or_default();
            if !urls.contains(&dead.as_str()) {
                assert!(urls.contains(&c.node(1).client_addr().as_str()), "{urls:?}");
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no INFO without the dead node"
        );
    }
}

#[tokio::test]
async fn killed_node_leaves_the_others_working_and_rejoins_with_its_interest_rebuilt() {
    let mut c = cluster().await;
    let (c1, c2) = (connect(c.node(0)).await, connect(c.node(1)).await);
    let mut on2 = c2.subscribe("k.x").await.unwrap();
    sync_interest(&c1, &c2).await;
    c.kill(2);
    for i in 0..5 {
        c1.publish("k.x", format!("{i}").into()).await.unwrap();
    }
    c1.flush().await.unwrap();
    for i in 0..5 {
        assert_eq!(next_msg(&mut on2).await.payload, format!("{i}"));
    }
    // A subscription on node 1 made while node 3 is down must reach node 3 when it is back.
    let mut on1 = c1.subscribe("k.y").await.unwrap();
    c1.flush().await.unwrap();
    c.restart(2).await.expect("restart node 3");
    let c3 = connect(c.node(2)).await;
    sync_interest(&c3, &c1).await;
    c3.publish("k.y", "from3".into()).await.unwrap();
    c3.flush().await.unwrap();
    assert_eq!(next_msg(&mut on1).await.payload, "from3");
    // And node 3's new interest reaches the others.
    let mut on3 = c3.subscribe("k.z").await.unwrap();
    sync_interest(&c2, &c3).await;
    c2.publish("k.z", "to3".into()).await.unwrap();
    c2.flush().await.unwrap();
    assert_eq!(next_msg(&mut on3).await.payload, "to3");
    c.assert_clean_logs();
}

#[tokio::test]
async fn a_clustered_node_exits_cleanly_on_sigterm_and_the_others_carry_on() {
    let mut c = cluster().await;
    let (c1, c2) = (connect(c.node(0)).await, connect(c.node(1)).await);
    let mut sub = c2.subscribe("t.x").await.unwrap();
    sync_interest(&c1, &c2).await;
    let status = c
        .stop_within(2, Duration::from_secs(10))
        .await
        .expect("node 3 stops within 10s");
    assert!(status.success(), "exit status {status}");
    c1.publish("t.x", "still".into()).await.unwrap();
    assert_eq!(next_msg(&mut sub).await.payload, "still");
}
