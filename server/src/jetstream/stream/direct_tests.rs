//! DIRECT.GET answers over a memory store, with the statuses and headers nats-server gives.

use bytes::Bytes;

use jetraft_storage::mem::MemStreamStore;
use jetraft_storage::stream::{StoredMsg, StreamStore, StreamUid};

use super::answer;
use crate::jetstream::api::types::go_time;

/// Stream time of message `seq`: one second apart from 2025-01-01T00:00:00Z.
fn ts(seq: u64) -> u64 {
    1_735_689_600_000_000_000 + seq * 1_000_000_000
}

/// Messages 1..=n on `k.<seq % 3>` with payload `m<seq>`; then `deleted` removed.
fn store(n: u64, deleted: &[u64]) -> MemStreamStore {
    let mut s = MemStreamStore::new(StreamUid(1));
    for seq in 1..=n {
        s.store_msg(&StoredMsg {
            seq,
            subject: format!("k.{}", seq % 3),
            headers: Bytes::new(),
            payload: Bytes::from(format!("m{seq}")),
            timestamp_ns: ts(seq),
        })
        .unwrap();
    }
    for d in deleted {
        s.remove(*d).unwrap();
    }
    s
}

/// Each reply as (status line or "msg", payload, header lines).
fn ask(
    store: &MemStreamStore,
    last: Option<&str>,
    body: &str,
) -> Vec<(String, String, Vec<String>)> {
    answer(store, "S", last, body.as_bytes(), 1 << 20)
        .into_iter()
        .map(|r| {
            let text = String::from_utf8(r.headers).unwrap();
            let mut lines = text.split("\r\n").filter(|l| !l.is_empty());
            let first = lines.next().unwrap_or("").to_string();
            let status = if first == "NATS/1.0" {
                "msg".to_string()
            } else {
                first
            };
            let payload = String::from_utf8(r.payload.to_vec()).unwrap();
            (status, payload, lines.map(str::to_string).collect())
        })
        .collect()
}

fn header<'a>(lines: &'a [String], name: &str) -> Option<&'a str> {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
}

#[test]
fn empty_malformed_and_conflicting_requests_get_408s() {
    let s = store(5, &[]);
    for (body, want) in [
        ("", "NATS/1.0 408 Empty Request"),
        ("{}", "NATS/1.0 408 Empty Request"),
        (r#"{"seq":0}"#, "NATS/1.0 408 Empty Request"),
        ("{", "NATS/1.0 408 Malformed Request"),
        (
            r#"{"seq":1,"last_by_subj":"k.1"}"#,
            "NATS/1.0 408 Bad Request",
        ),
        (
            r#"{"last_by_subj":"k.1","batch":2}"#,
            "NATS/1.0 408 Bad Request",
        ),
        (
            r#"{"next_by_subj":"k.1","multi_last":["k.1"]}"#,
            "NATS/1.0 408 Bad Request",
        ),
        (
            r#"{"multi_last":["k.*"],"up_to_seq":3,"up_to_time":"2025-01-01T00:00:00Z"}"#,
            "NATS/1.0 408 Bad Request",
        ),
    ] {
        let r = ask(&s, None, body);
        assert_eq!(r.len(), 1, "{body}");
        assert_eq!(r[0].0, want, "{body}");
    }
    // The subject form takes no selectors in its body.
    assert_eq!(
        ask(&s, Some("k.1"), r#"{"seq":2}"#)[0].0,
        "NATS/1.0 408 Bad Request"
    );
    let r = ask(&s, Some("k.1"), "{}");
    assert_eq!((r[0].0.as_str(), r[0].1.as_str()), ("msg", "m4"));
}

#[test]
fn a_single_get_has_no_batch_headers_and_misses_deleted_sequences() {
    let s = store(5, &[2]);
    let r = ask(&s, None, r#"{"seq":1}"#);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].0.as_str(), r[0].1.as_str()), ("msg", "m1"));
    assert_eq!(header(&r[0].2, "Nats-Sequence"), Some("1"));
    assert_eq!(header(&r[0].2, "Nats-Num-Pending"), None);
    assert_eq!(
        ask(&s, None, r#"{"seq":2}"#)[0].0,
        "NATS/1.0 404 Message Not Found"
    );
    let r = ask(&s, None, r#"{"seq":2,"next_by_subj":"k.*"}"#);
    assert_eq!(r[0].1, "m3");
}

#[test]
fn a_batch_steps_over_gaps_counts_down_and_ends_with_eob() {
    let s = store(10, &[3]);
    let r = ask(&s, None, r#"{"seq":2,"batch":4}"#);
    let got: Vec<_> = r.iter().map(|x| x.1.as_str()).collect();
    assert_eq!(got, ["m2", "m4", "m5", "m6", ""]);
    // Pending counts the matching messages after each one; Last-Sequence is the one before.
    assert_eq!(header(&r[0].2, "Nats-Num-Pending"), Some("7"));
    assert_eq!(header(&r[0].2, "Nats-Last-Sequence"), Some("0"));
    assert_eq!(header(&r[1].2, "Nats-Last-Sequence"), Some("2"));
    assert_eq!(header(&r[3].2, "Nats-Num-Pending"), Some("4"));
    assert_eq!(r[4].0, "NATS/1.0 204 EOB");
    assert_eq!(header(&r[4].2, "Nats-Num-Pending"), Some("4"));
    assert_eq!(header(&r[4].2, "Nats-Last-Sequence"), Some("6"));
    // With a subject filter, and running off the end: what there is, then EOB.
    let r = ask(&s, None, r#"{"next_by_subj":"k.1","batch":10}"#);
    let got: Vec<_> = r.iter().map(|x| x.1.as_str()).collect();
    assert_eq!(got, ["m1", "m4", "m7", "m10", ""]);
    assert_eq!(header(&r[4].2, "Nats-Num-Pending"), Some("0"));
    // Nothing at all: 404, no EOB.
    assert_eq!(
        ask(&s, None, r#"{"seq":11,"batch":3}"#)[0].0,
        "NATS/1.0 404 Message Not Found"
    );
}

#[test]
fn max_bytes_stops_a_batch_after_the_message_that_reaches_it() {
    let s = store(10, &[]);
    // Each message is 3 (subject) + 2 or 3 (payload) bytes: 5+5 reaches 10.
    let r = ask(&s, None, r#"{"seq":1,"batch":10,"max_bytes":10}"#);
    let got: Vec<_> = r.iter().map(|x| x.1.as_str()).collect();
    assert_eq!(got, ["m1", "m2", ""]);
}

#[test]
fn a_batch_from_a_start_time() {
    let s = store(6, &[]);
    let body = format!(
        r#"{{"start_time":"{}","batch":2}}"#,
        go_time::format(ts(4) - 1)
    );
    let got: Vec<_> = ask(&s, None, &body).into_iter().map(|x| x.1).collect();
    assert_eq!(got, ["m4", "m5", ""]);
}

#[test]
fn multi_last_gives_each_subjects_last_up_to_a_sequence_oldest_first() {
    let s = store(10, &[]);
    // Lasts: k.0 -> 9, k.1 -> 10, k.2 -> 8.
    let r = ask(&s, None, r#"{"multi_last":["k.*"]}"#);
    let got: Vec<_> = r.iter().map(|x| x.1.as_str()).collect();
    assert_eq!(got, ["m8", "m9", "m10", ""]);
    assert_eq!(header(&r[0].2, "Nats-Num-Pending"), Some("2"));
    assert_eq!(r[3].0, "NATS/1.0 204 EOB");
    assert_eq!(header(&r[3].2, "Nats-UpTo-Sequence"), Some("10"));
    assert_eq!(header(&r[3].2, "Nats-Last-Sequence"), Some("10"));
    // As of sequence 5: k.0 -> 3, k.1 -> 4, k.2 -> 5.
    let r = ask(
        &s,
        None,
        r#"{"multi_last":["k.1","k.2","k.0"],"up_to_seq":5}"#,
    );
    let got: Vec<_> = r.iter().map(|x| x.1.as_str()).collect();
    assert_eq!(got, ["m3", "m4", "m5", ""]);
    assert_eq!(header(&r[3].2, "Nats-UpTo-Sequence"), Some("5"));
    // As of a time: the messages stored before it.
    let body = format!(
        r#"{{"multi_last":["k.*"],"up_to_time":"{}"}}"#,
        go_time::format(ts(3))
    );
    let got: Vec<_> = ask(&s, None, &body).into_iter().map(|x| x.1).collect();
    assert_eq!(got, ["m1", "m2", ""]);
    // Before the first message: no results.
    let body = format!(
        r#"{{"multi_last":["k.*"],"up_to_time":"{}"}}"#,
        go_time::format(ts(1))
    );
    assert_eq!(ask(&s, None, &body)[0].0, "NATS/1.0 404 No Results");
    assert_eq!(
        ask(&s, None, r#"{"multi_last":["none.*"]}"#)[0].0,
        "NATS/1.0 404 No Results"
    );
    // A batch bound and a minimum sequence.
    let got: Vec<_> = ask(&s, None, r#"{"multi_last":["k.*"],"batch":2}"#)
        .into_iter()
        .map(|x| x.1)
        .collect();
    assert_eq!(got, ["m8", "m9", ""]);
    let got: Vec<_> = ask(&s, None, r#"{"multi_last":["k.*"],"seq":9}"#)
        .into_iter()
        .map(|x| x.1)
        .collect();
    assert_eq!(got, ["m9", "m10", ""]);
}

#[test]
fn multi_last_refuses_more_than_1024_subjects() {
    let mut s = MemStreamStore::new(StreamUid(1));
    for seq in 1..=1025u64 {
        s.store_msg(&StoredMsg {
            seq,
            subject: format!("u.{seq}"),
            headers: Bytes::new(),
            payload: Bytes::new(),
            timestamp_ns: ts(seq),
        })
        .unwrap();
    }
    assert_eq!(
        ask(&s, None, r#"{"multi_last":["u.*"]}"#)[0].0,
        "NATS/1.0 413 Too Many Results"
    );
    assert_eq!(
        ask(&s, None, r#"{"multi_last":["u.*"],"up_to_seq":1024}"#).len(),
        1025
    );
}
