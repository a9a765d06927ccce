//! Core NATS behaviour through the official Rust client (async-nats 0.51): pub/sub, wildcards,
//! queue groups, request/reply, headers, limits, auth, permissions, reconnect and drain.

use std::collections::HashSet;
use std::time::Duration;

use async_nats::{
    Client, ConnectErrorKind, ConnectOptions, Event, HeaderMap, RequestErrorKind, ServerError,
    client::PublishErrorKind,
};
use bytes::Bytes;
use futures_util::StreamExt as _;
use jetraft_tests::harness::{
    ServerOptions, ServerProcess, assert_clean_log, round_trip, wait_for, within,
};
use tokio::sync::mpsc;

const OP: Duration = Duration::from_secs(5);

async fn start(opts: ServerOptions) -> ServerProcess {
    ServerProcess::start(opts).await.expect("start server")
}

async fn connect_opts(srv: &ServerProcess, opts: ConnectOptions) -> Client {
    within(
        OP,
        "connect",
        Box::pin(opts.connection_timeout(OP).connect(srv.client_url())),
    )
    .await
    .expect("connect")
}

async fn connect(srv: &ServerProcess) -> Client {
    connect_opts(srv, ConnectOptions::new()).await
}

async fn next_msg(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    within(OP, "next message", sub.next())
        .await
        .expect("subscription ended")
}

/// Client with an event channel, to observe server errors and (re)connects.
async fn connect_with_events(
    srv: &ServerProcess,
    opts: ConnectOptions,
) -> (Client, mpsc::UnboundedReceiver<Event>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let opts = opts.event_callback(move |ev| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(ev);
        }
    });
    (connect_opts(srv, opts).await, rx)
}

async fn wait_event(
    rx: &mut mpsc::UnboundedReceiver<Event>,
    what: &str,
    pred: impl Fn(&Event) -> bool,
) -> Event {
    within(Duration::from_secs(10), what, async {
        loop {
            let ev = rx.recv().await.expect("event channel closed");
            if pred(&ev) {
                return ev;
            }
        }
    })
    .await
}

#[tokio::test]
async fn publish_is_delivered_to_subscriber() {
    let srv = start(ServerOptions::default()).await;
    let client = connect(&srv).await;
    let mut sub = client.subscribe("greet.world").await.unwrap();
    round_trip(&client).await;
    client
        .publish("greet.world", Bytes::from_static(b"hello"))
        .await
        .unwrap();
    let msg = next_msg(&mut sub).await;
    assert_eq!(msg.subject.as_str(), "greet.world");
    assert_eq!(msg.payload.as_ref(), b"hello");
    assert!(msg.reply.is_none());
    assert!(msg.headers.is_none());
    assert_clean_log(&srv);
}

#[tokio::test]
async fn messages_from_one_publisher_arrive_in_order() {
    let srv = start(ServerOptions::default()).await;
    let sub_client = connect(&srv).await;
    let pub_client = connect(&srv).await;
    let mut sub = sub_client.subscribe("ordered").await.unwrap();
    round_trip(&sub_client).await;
    for i in 0..500u32 {
        pub_client
            .publish("ordered", Bytes::from(i.to_string()))
            .await
            .unwrap();
    }
    round_trip(&pub_client).await;
    for i in 0..500u32 {
        assert_eq!(next_msg(&mut sub).await.payload, Bytes::from(i.to_string()));
    }
    assert_clean_log(&srv);
}

#[tokio::test]
async fn wildcard_subscriptions_receive_matching_subjects_only() {
    let srv = start(ServerOptions::default()).await;
    let client = connect(&srv).await;
    let mut star = client.subscribe("orders.*.created").await.unwrap();
    let mut gt = client.subscribe("orders.>").await.unwrap();
    round_trip(&client).await;
    for subject in [
        "orders.eu.created",
        "orders.eu.x.created",
        "orders",
        "orders.us.deleted",
    ] {
        client
            .publish(subject, Bytes::from_static(b"x"))
            .await
            .unwrap();
    }
    client.publish("done", Bytes::new()).await.unwrap();
    round_trip(&client).await;
    assert_eq!(
        next_msg(&mut star).await.subject.as_str(),
        "orders.eu.created"
    );
    let got: Vec<String> = vec![
        next_msg(&mut gt).await.subject.to_string(),
        next_msg(&mut gt).await.subject.to_string(),
        next_msg(&mut gt).await.subject.to_string(),
    ];
    assert_eq!(
        got,
        [
            "orders.eu.created",
            "orders.eu.x.created",
            "orders.us.deleted"
        ]
    );
    // Nothing else is pending for either subscription.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), star.next())
            .await
            .is_err()
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(200), gt.next())
            .await
            .is_err()
    );
    assert_clean_log(&srv);
}

#[tokio::test]
async fn queue_group_of_three_delivers_each_message_exactly_once() {
    let srv = start(ServerOptions::default()).await;
    let mut members = Vec::new();
    for _ in 0..3 {
        let c = connect(&srv).await;
        let sub = c
            .queue_subscribe("jobs", "workers".to_string())
            .await
            .unwrap();
        round_trip(&c).await;
        members.push((c, sub));
    }
    let publisher = connect(&srv).await;
    let n = 300usize;
    for i in 0..n {
        publisher
            .publish("jobs", Bytes::from(i.to_string()))
            .await
            .unwrap();
    }
    round_trip(&publisher).await;

    let mut seen = Vec::new();
    let mut per_member = Vec::new();
    for (c, sub) in &mut members {
        // After this member's round trip, everything routed to it has been received.
        round_trip(c).await;
        let mut count = 0;
        while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(300), sub.next()).await {
            seen.push(String::from_utf8(m.payload.to_vec()).unwrap());
            count += 1;
        }
        per_member.push(count);
    }
    assert_eq!(
        seen.len(),
        n,
        "total deliveries (per member {per_member:?})"
    );
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), n, "a message was delivered twice");
    assert!(
        per_member.iter().all(|&c| c > 0),
        "every member got some: {per_member:?}"
    );
    assert_clean_log(&srv);
}

#[tokio::test]
async fn request_gets_reply_from_responder() {
    let srv = start(ServerOptions::default()).await;
    let responder = connect(&srv).await;
    let mut svc = responder.subscribe("svc.upper").await.unwrap();
    round_trip(&responder).await;
    let task = tokio::spawn(async move {
        for _ in 0..3 {
            let Some(req) = svc.next().await else { return };
            let reply = req.reply.expect("request has a reply subject");
            let body = String::from_utf8_lossy(&req.payload).to_uppercase();
            responder.publish(reply, Bytes::from(body)).await.unwrap();
        }
        responder.flush().await.unwrap();
    });
    let client = connect(&srv).await;
    for word in ["abc", "hello", "x"] {
        let resp = within(
            OP,
            "request",
            client.request("svc.upper", Bytes::from(word)),
        )
        .await
        .expect("request");
        assert_eq!(resp.payload, Bytes::from(word.to_uppercase()));
    }
    within(OP, "responder task", task).await.unwrap();
    assert_clean_log(&srv);
}

#[tokio::test]
async fn request_without_responders_fails_with_no_responders() {
    let srv = start(ServerOptions::default()).await;
    let client = connect(&srv).await;
    let err = within(
        OP,
        "request",
        client.request("nobody.listens", Bytes::from_static(b"?")),
    )
    .await
    .expect_err("request must fail");
    assert_eq!(err.kind(), RequestErrorKind::NoResponders, "{err:?}");
    assert_clean_log(&srv);
}

#[tokio::test]
async fn headers_round_trip_with_multiple_values() {
    let srv = start(ServerOptions::default()).await;
    let client = connect(&srv).await;
    let mut sub = client.subscribe("hdr").await.unwrap();
    round_trip(&client).await;
    let mut headers = HeaderMap::new();
    headers.insert("X-Trace", "abc-123");
    headers.append("X-Multi", "one");
    headers.append("X-Multi", "two");
    client
        .publish_with_headers("hdr", headers, Bytes::from_static(b"body"))
        .await
        .unwrap();
    // Headers with an empty payload.
    let mut only = HeaderMap::new();
    only.insert("K", "v");
    client
        .publish_with_headers("hdr", only, Bytes::new())
        .await
        .unwrap();

    let msg = next_msg(&mut sub).await;
    let h = msg.headers.expect("headers");
    assert_eq!(h.get("X-Trace").map(|v| v.as_str()), Some("abc-123"));
    let multi: Vec<&str> = h.get_all("X-Multi").map(|v| v.as_str()).collect();
    assert_eq!(multi, ["one", "two"]);
    assert_eq!(msg.payload.as_ref(), b"body");
    let msg = next_msg(&mut sub).await;
    assert_eq!(
        msg.headers.expect("headers").get("K").map(|v| v.as_str()),
        Some("v")
    );
    assert!(msg.payload.is_empty());
    assert_clean_log(&srv);
}

#[tokio::test]
async fn flush_sends_buffered_publishes_to_the_server() {
    let srv = start(ServerOptions::default()).await;
    let client = connect(&srv).await;
    let before = srv.monitor_json("/varz").await.unwrap()["in_msgs"]
        .as_u64()
        .unwrap();
    for _ in 0..25 {
        client
            .publish("flush.test", Bytes::from_static(b"0123456789"))
            .await
            .unwrap();
    }
    // async-nats flush writes the buffer out but does not wait for the server (no PING), and
    // nats-server folds per-client counters into /varz lazily: poll.
    within(OP, "flush", client.flush()).await.unwrap();
    wait_for("in_msgs to count the publishes", OP, || async {
        let after = srv.monitor_json("/varz").await.ok()?["in_msgs"].as_u64()?;
        (after >= before + 25).then_some(())
    })
    .await;
    assert_clean_log(&srv);
}

#[tokio::test]
async fn unsubscribe_after_n_stops_delivery() {
    let srv = start(ServerOptions::default()).await;
    let client = connect(&srv).await;
    let mut sub = client.subscribe("limited").await.unwrap();
    sub.unsubscribe_after(3).await.unwrap();
    round_trip(&client).await;
    for i in 0..10u8 {
        client
            .publish("limited", Bytes::from(vec![b'0' + i]))
            .await
            .unwrap();
    }
    round_trip(&client).await;
    let got: Vec<Bytes> = within(OP, "collect", sub.collect::<Vec<_>>())
        .await
        .into_iter()
        .map(|m| m.payload)
        .collect();
    assert_eq!(got, [Bytes::from("0"), Bytes::from("1"), Bytes::from("2")]);
    assert_clean_log(&srv);
}

#[tokio::test]
async fn payload_of_exactly_max_payload_is_delivered_intact() {
    let srv = start(ServerOptions::default()).await;
    let client = connect(&srv).await;
    let max = client.server_info().max_payload;
    assert_eq!(max, 1_048_576);
    let mut sub = client.subscribe("big").await.unwrap();
    round_trip(&client).await;
    let payload: Bytes = (0..max)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into();
    client.publish("big", payload.clone()).await.unwrap();
    let msg = within(Duration::from_secs(10), "big message", sub.next())
        .await
        .unwrap();
    assert_eq!(msg.payload.len(), max);
    assert!(msg.payload == payload, "payload corrupted");
    assert_clean_log(&srv);
}

#[tokio::test]
async fn payload_over_max_payload_is_refused() {
    let srv = start(ServerOptions::with_config("max_payload: 4096\n")).await;
    let client = connect(&srv).await;
    assert_eq!(client.server_info().max_payload, 4096);
    let mut sub = client.subscribe("limit").await.unwrap();
    round_trip(&client).await;
    client
        .publish("limit", Bytes::from(vec![7u8; 4096]))
        .await
        .unwrap();
    assert_eq!(next_msg(&mut sub).await.payload.len(), 4096);
    let err = client
        .publish("limit", Bytes::from(vec![7u8; 4097]))
        .await
        .expect_err("too big");
    assert_eq!(err.kind(), PublishErrorKind::MaxPayloadExceeded);
    // Headers count too.
    let mut h = HeaderMap::new();
    h.insert("K", "v");
    let err = client
        .publish_with_headers("limit", h, Bytes::from(vec![7u8; 4090]))
        .await
        .expect_err("too big with headers");
    assert_eq!(err.kind(), PublishErrorKind::MaxPayloadExceeded);
    assert_clean_log(&srv);
}

#[tokio::test]
async fn user_password_auth_accepts_valid_and_rejects_invalid_credentials() {
    let srv = start(ServerOptions::with_config(
        "authorization { users = [ { user: alice, password: s3cret } ] }\n",
    ))
    .await;
    let ok = connect_opts(
        &srv,
        ConnectOptions::with_user_and_password("alice".into(), "s3cret".into()),
    )
    .await;
    let mut sub = ok.subscribe("auth.ok").await.unwrap();
    round_trip(&ok).await;
    ok.publish("auth.ok", Bytes::from_static(b"in"))
        .await
        .unwrap();
    assert_eq!(next_msg(&mut sub).await.payload.as_ref(), b"in");

    for opts in [
        ConnectOptions::with_user_and_password("alice".into(), "wrong".into()),
        ConnectOptions::with_user_and_password("mallory".into(), "s3cret".into()),
        ConnectOptions::new(),
    ] {
        let err = within(
            OP,
            "connect",
            Box::pin(opts.connection_timeout(OP).connect(srv.client_url())),
        )
        .await
        .expect_err("bad credentials must be refused");
        assert_eq!(
            err.kind(),
            ConnectErrorKind::AuthorizationViolation,
            "{err:?}"
        );
    }
    assert_clean_log(&srv);
}

#[tokio::test]
async fn token_auth_accepts_valid_and_rejects_invalid_token() {
    let srv = start(ServerOptions::with_config(
        "authorization { token: \"t0ken-xyz\" }\n",
    ))
    .await;
    let ok = connect_opts(&srv, ConnectOptions::with_token("t0ken-xyz".into())).await;
    round_trip(&ok).await;
    for opts in [
        ConnectOptions::with_token("nope".into()),
        ConnectOptions::new(),
    ] {
        let err = within(
            OP,
            "connect",
            Box::pin(opts.connection_timeout(OP).connect(srv.client_url())),
        )
        .await
        .expect_err("bad token must be refused");
        assert_eq!(
            err.kind(),
            ConnectErrorKind::AuthorizationViolation,
            "{err:?}"
        );
    }
    assert_clean_log(&srv);
}

#[tokio::test]
async fn permission_violations_are_surfaced_as_server_errors() {
    let srv = start(ServerOptions::with_config(
        r#"authorization { users = [
            { user: app, password: pw, permissions: { publish: ["app.>", "_INBOX.>"], subscribe: ["app.>", "_INBOX.>"] } }
        ] }
        "#,
    ))
    .await;
    let (client, mut events) = connect_with_events(
        &srv,
        ConnectOptions::with_user_and_password("app".into(), "pw".into()),
    )
    .await;
    client
        .publish("secret.data", Bytes::from_static(b"x"))
        .await
        .unwrap();
    round_trip(&client).await;
    let ev = wait_event(&mut events, "publish violation", |e| {
        matches!(e, Event::ServerError(_))
    })
    .await;
    let Event::ServerError(ServerError::Other(text)) = ev else {
        panic!("unexpected {ev:?}")
    };
    assert_eq!(text, "Permissions Violation for Publish to \"secret.data\"");

    let _denied = client.subscribe("secret.>").await.unwrap();
    round_trip(&client).await;
    let ev = wait_event(&mut events, "subscribe violation", |e| {
        matches!(e, Event::ServerError(_))
    })
    .await;
    let Event::ServerError(ServerError::Other(text)) = ev else {
        panic!("unexpected {ev:?}")
    };
    assert_eq!(
        text,
        "Permissions Violation for Subscription to \"secret.>\""
    );

    // The connection is still usable for allowed subjects.
    let mut sub = client.subscribe("app.ok").await.unwrap();
    round_trip(&client).await;
    client
        .publish("app.ok", Bytes::from_static(b"fine"))
        .await
        .unwrap();
    assert_eq!(next_msg(&mut sub).await.payload.as_ref(), b"fine");
    assert_clean_log(&srv);
}

#[tokio::test]
async fn client_reconnects_and_resubscribes_after_server_restart() {
    let mut srv = start(ServerOptions::default()).await;
    let opts = ConnectOptions::new()
        .reconnect_delay_callback(|_| Duration::from_millis(100))
        .max_reconnects(None);
    let (client, mut events) = connect_with_events(&srv, opts).await;
    let mut sub = client.subscribe("survive").await.unwrap();
    round_trip(&client).await;
    client
        .publish("survive", Bytes::from_static(b"before"))
        .await
        .unwrap();
    assert_eq!(next_msg(&mut sub).await.payload.as_ref(), b"before");

    let status = srv.stop().await.expect("stop server");
    assert!(
        status.success() || status.code().is_none(),
        "exit {status:?}"
    );
    wait_event(&mut events, "disconnect", |e| {
        matches!(e, Event::Disconnected)
    })
    .await;
    srv.start_again()
        .await
        .expect("restart server on the same port");
    wait_event(&mut events, "reconnect", |e| matches!(e, Event::Connected)).await;

    // The subscription was re-established by the client on reconnect.
    round_trip(&client).await;
    client
        .publish("survive", Bytes::from_static(b"after"))
        .await
        .unwrap();
    assert_eq!(next_msg(&mut sub).await.payload.as_ref(), b"after");
    assert_clean_log(&srv);
}

#[tokio::test]
async fn subscription_drain_delivers_pending_messages_then_ends() {
    let srv = start(ServerOptions::default()).await;
    let sub_client = connect(&srv).await;
    let pub_client = connect(&srv).await;
    let mut sub = sub_client.subscribe("drain.me").await.unwrap();
    round_trip(&sub_client).await;
    for i in 0..50u32 {
        pub_client
            .publish("drain.me", Bytes::from(i.to_string()))
            .await
            .unwrap();
    }
    round_trip(&pub_client).await;
    round_trip(&sub_client).await;
    sub.drain().await.unwrap();
    let got = within(OP, "drained subscription to end", sub.collect::<Vec<_>>()).await;
    assert_eq!(
        got.len(),
        50,
        "drained subscription delivered {} of 50",
        got.len()
    );
    // Later publishes are not delivered anywhere on this client; the client still works.
    let mut other = sub_client.subscribe("drain.other").await.unwrap();
    round_trip(&sub_client).await;
    pub_client
        .publish("drain.other", Bytes::from_static(b"ok"))
        .await
        .unwrap();
    assert_eq!(next_msg(&mut other).await.payload.as_ref(), b"ok");

    // Draining the client closes its subscriptions and the connection.
    within(OP, "client drain", sub_client.drain())
        .await
        .unwrap();
    assert!(
        within(OP, "subscription end after drain", other.next())
            .await
            .is_none()
    );
    wait_for("drained connection gone from /connz", OP, || async {
        let v = srv.monitor_json("/connz").await.ok()?;
        (v["num_connections"] == 1).then_some(())
    })
    .await;
    assert_clean_log(&srv);
}
