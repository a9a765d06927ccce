//! Table tests of priority groups (`priority.rs`): pinned clients, overflow thresholds,
//! prioritized requests, and the request checks, with nats-server's statuses.

use super::tests::{SEC, Script, at, pull_cfg};
use super::*;

fn cfg(policy: &str) -> ConsumerConfig {
    ConsumerConfig {
        priority_policy: policy.to_string(),
        priority_groups: vec!["A".to_string()],
        priority_timeout: if policy == "pinned_client" {
            (2 * SEC) as i64
        } else {
            0
        },
        ..pull_cfg()
    }
}

/// The pin id the last delivery carried (`Nats-Pin-Id`), from the core's actions.
fn deliveries_with_pins(s: &mut Script, ms: u64, ev: ConsumerEvent) -> Vec<(u64, String, String)> {
    s.core.handle(at(ms), ev);
    let mut out = Vec::new();
    while let Some(a) = s.core.poll_action() {
        if let Action::Deliver {
            stream_seq, msg, ..
        } = a
        {
            let hdrs = String::from_utf8_lossy(msg.hdrs.as_deref().unwrap_or_default()).to_string();
            let pin = hdrs
                .lines()
                .find_map(|l| l.strip_prefix("Nats-Pin-Id: "))
                .unwrap_or_default()
                .to_string();
            out.push((stream_seq, msg.subject, pin));
        } else if let Action::Propose { .. } = a {
            s.core
                .handle(at(ms), ConsumerEvent::ProgressDone { count: 1 });
        }
    }
    out
}

fn pull_event(reply: &str, body: &str) -> ConsumerEvent {
    ConsumerEvent::Pull {
        reply: reply.to_string(),
        body: Bytes::copy_from_slice(body.as_bytes()),
    }
}

#[test]
fn the_first_client_is_pinned_others_wait_and_a_wrong_id_gets_423() {
    let mut s = Script::new(cfg("pinned_client"), 4);
    let first = deliveries_with_pins(&mut s, 0, pull_event("r1", r#"{"batch":2,"group":"A"}"#));
    assert_eq!(first.len(), 2, "{first:?}");
    let pin = first[0].2.clone();
    assert_eq!(
        pin.len(),
        22,
        "a NUID-sized pin id on every message: {first:?}"
    );
    assert!(first.iter().all(|(_, to, p)| to == "r1" && *p == pin));
    // Another client without the id waits; one with a wrong id is refused at once.
    assert!(
        deliveries_with_pins(&mut s, 10, pull_event("r2", r#"{"batch":5,"group":"A"}"#)).is_empty()
    );
    assert_eq!(
        s.pull(20, "r3", r#"{"batch":1,"group":"A","id":"WRONG"}"#),
        vec!["423 pin mismatch -> r3"]
    );
    // The pinned client goes on with its id.
    let next = deliveries_with_pins(
        &mut s,
        30,
        pull_event("r1b", &format!(r#"{{"batch":5,"group":"A","id":"{pin}"}}"#)),
    );
    assert_eq!(
        next.iter()
            .map(|(seq, to, _)| (*seq, to.as_str()))
            .collect::<Vec<_>>(),
        vec![(3, "r1b"), (4, "r1b")]
    );
}

#[test]
fn a_pin_lapses_after_priority_timeout_and_the_waiting_client_takes_over() {
    let mut s = Script::new(cfg("pinned_client"), 1);
    let first = deliveries_with_pins(&mut s, 0, pull_event("r1", r#"{"batch":1,"group":"A"}"#));
    let old_pin = first[0].2.clone();
    assert!(
        s.pull(
            100,
            "r2",
            r#"{"batch":1,"expires":10000000000,"group":"A"}"#
        )
        .is_empty()
    );
    assert!(s.tick(1900).is_empty());
    assert_eq!(s.timeout_ms(), 2000, "woken when the pin lapses");
    // No request from the pinned client for 2 s: unpinned, and r2 is pinned when a message comes.
    assert_eq!(s.tick(2000), vec!["advisory unpinned A timeout"]);
    s.world.publish("orders.new", 10);
    let taken = deliveries_with_pins(&mut s, 2010, ConsumerEvent::StreamChanged);
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].1, "r2");
    assert_ne!(taken[0].2, old_pin, "a new pin id");
    // The old client's next request with its lapsed id is refused.
    assert_eq!(
        s.pull(
            2020,
            "r1c",
            &format!(r#"{{"batch":1,"group":"A","id":"{old_pin}"}}"#)
        ),
        vec!["423 pin mismatch -> r1c"]
    );
}

#[test]
fn unpin_advises_and_a_waiting_request_with_the_old_id_gets_423_with_what_was_left() {
    let mut s = Script::new(cfg("pinned_client"), 1);
    let first = deliveries_with_pins(&mut s, 0, pull_event("r1", r#"{"batch":1,"group":"A"}"#));
    let pin = first[0].2.clone();
    let body = format!(r#"{{"batch":3,"expires":5000000000,"group":"A","id":"{pin}"}}"#);
    assert!(
        s.pull(10, "r1b", &body).is_empty(),
        "nothing to deliver yet"
    );
    assert_eq!(
        s.on(20, ConsumerEvent::Unpin { group: "A".into() }),
        vec!["advisory unpinned A admin"]
    );
    s.world.publish("orders.new", 10);
    assert_eq!(
        s.on(30, ConsumerEvent::StreamChanged),
        vec!["423 wrong pin 3/0 -> r1b"]
    );
}

#[test]
fn overflow_serves_a_request_only_past_its_thresholds() {
    let mut s = Script::new(cfg("overflow"), 3);
    // min_pending 5 with 3 pending: waits; a plain group request is served.
    assert!(
        s.pull(0, "big", r#"{"batch":10,"group":"A","min_pending":5}"#)
            .is_empty()
    );
    assert_eq!(
        s.pull(10, "any", r#"{"batch":1,"group":"A"}"#),
        vec!["deliver 1 x1 -> any"]
    );
    for _ in 0..4 {
        s.world.publish("orders.new", 10);
    }
    // 6 pending now: the overflow request takes messages until fewer than 5 are left.
    let out = s.on(20, ConsumerEvent::StreamChanged);
    assert_eq!(
        out,
        vec!["deliver 2 x1 -> big", "deliver 3 x1 -> big"],
        "served while num_pending >= 5"
    );
    // min_ack_pending: served once that many messages wait for their ack.
    assert_eq!(
        s.pull(30, "acks", r#"{"batch":1,"group":"A","min_ack_pending":3}"#),
        vec!["deliver 4 x1 -> acks"]
    );
}

#[test]
fn prioritized_requests_are_served_lowest_priority_number_first() {
    let mut s = Script::new(cfg("prioritized"), 0);
    assert!(
        s.pull(0, "low", r#"{"batch":2,"group":"A","priority":5}"#)
            .is_empty()
    );
    assert!(
        s.pull(1, "high", r#"{"batch":2,"group":"A","priority":1}"#)
            .is_empty()
    );
    assert!(
        s.pull(2, "high2", r#"{"batch":1,"group":"A","priority":1}"#)
            .is_empty()
    );
    for _ in 0..5 {
        s.world.publish("orders.new", 10);
    }
    assert_eq!(
        s.on(10, ConsumerEvent::StreamChanged),
        vec![
            "deliver 1 x1 -> high",
            "deliver 2 x1 -> high2",
            "deliver 3 x1 -> high",
            "deliver 4 x1 -> low",
            "deliver 5 x1 -> low",
        ]
    );
}

#[test]
fn priority_fields_are_checked_as_nats_server_does() {
    let mut pinned = Script::new(cfg("pinned_client"), 0);
    let cases = [
        (r#"{"batch":1}"#, "400 Bad Request - Priority Group missing"),
        (
            r#"{"batch":1,"group":"B"}"#,
            "400 Bad Request - Invalid Priority Group",
        ),
        (
            r#"{"batch":1,"group":"A","min_pending":1}"#,
            "400 Bad Request - Not a Overflow Priority consumer",
        ),
        (
            r#"{"batch":1,"group":"A","priority":10}"#,
            "400 Bad Request - Priority must be between 0 and 9",
        ),
    ];
    for (i, (body, want)) in cases.iter().enumerate() {
        let ms = i as u64 * 10;
        assert_eq!(
            pinned.pull(ms, "r", body),
            vec![format!("{want} -> r")],
            "{body}"
        );
    }
    let mut plain = Script::new(pull_cfg(), 0);
    assert_eq!(
        plain.pull(0, "r", r#"{"batch":1,"id":"X"}"#),
        vec!["400 Bad Request - Not a Pinned Client Priority consumer -> r"]
    );
    assert!(
        plain
            .pull(10, "ok", r#"{"batch":1,"group":"A"}"#)
            .is_empty(),
        "a group on a consumer without priority policy is ignored"
    );
}
