//! State machine tests on the memory store and on a RocksDB store in a tempdir.

use bytes::Bytes;
use jetraft_raft::{AppliedState, LogIndex, ReplicatedStateMachine};
use jetraft_storage::Db;
use jetraft_storage::mem::MemStreamStore;
use jetraft_storage::rocks::RocksStreamStore;
use jetraft_storage::stream::StreamUid;

use super::headers::block;
use super::snapshot_fields::chunked_payload;
use super::*;
use crate::jetstream::api::types::requests::{MsgSelector, decode};
use crate::jetstream::api::types::{StreamConfig, StreamInfoRequest};
use crate::jetstream::api::validate::normalize;

const T0: u64 = 1_796_199_467_000_000_000;
const SEC: u64 = 1_000_000_000;

fn server() -> ServerIdentity {
    ServerIdentity {
        version: "2.15.1".into(),
        api_level: 5,
        domain: None,
    }
}

fn config(json: &str) -> StreamConfig {
    let mut cfg: StreamConfig = decode(json.as_bytes()).unwrap();
    normalize(&mut cfg);
    cfg
}

pub(super) fn mem_sm(json: &str) -> StreamStateMachine {
    let store = Box::new(MemStreamStore::new(StreamUid(1)));
    StreamStateMachine::open(store, config(json), T0, server()).unwrap()
}

/// Feeds commands with increasing log indexes.
struct Driver {
    sm: StreamStateMachine,
    index: u64,
}

impl Driver {
    fn new(sm: StreamStateMachine) -> Self {
        Self { sm, index: 0 }
    }

    fn apply(&mut self, cmd: Bytes) -> String {
        self.index += 1;
        let out = self.sm.apply(LogIndex(self.index), &cmd).unwrap();
        String::from_utf8(out.to_vec()).unwrap()
    }

    fn publish(&mut self, subject: &str, hdrs: &[(&str, &str)], ts: u64) -> String {
        let headers = if hdrs.is_empty() {
            Bytes::new()
        } else {
            Bytes::from(block(hdrs))
        };
        self.apply(command::append(
            subject,
            headers,
            Bytes::from_static(b"x"),
            ts,
        ))
    }
}

fn fixture(name: &str) -> String {
    let all: serde_json::Value = serde_json::from_str(include_str!(
        "../../../tests/fixtures/jetstream/nats_2_15_1_stream_msgs.json"
    ))
    .unwrap();
    all[name].as_str().unwrap().to_string()
}

#[test]
fn publish_answers_exact_pub_ack_bytes() {
    let mut d = Driver::new(mem_sm(r#"{"name":"ORDERS","subjects":["orders.>"]}"#));
    assert_eq!(
        d.publish("orders.a", &[], T0),
        r#"{"stream":"ORDERS","seq":1}"#
    );
    assert_eq!(
        d.publish("orders.b", &[], T0 + 1),
        r#"{"stream":"ORDERS","seq":2}"#
    );
    assert_eq!(d.sm.state().msgs, 2);
}

#[test]
fn duplicate_msg_id_returns_original_seq_within_window_only() {
    let mut d = Driver::new(mem_sm(
        r#"{"name":"D","subjects":["d"],"duplicate_window":1000000000}"#,
    ));
    assert_eq!(
        d.publish("d", &[("Nats-Msg-Id", "m1")], T0),
        r#"{"stream":"D","seq":1}"#
    );
    assert_eq!(
        d.publish("d", &[("Nats-Msg-Id", "m1")], T0 + SEC / 2),
        r#"{"stream":"D","seq":1,"duplicate": true}"#
    );
    assert_eq!(d.sm.state().msgs, 1);
    assert_eq!(
        d.publish("d", &[("Nats-Msg-Id", "m1")], T0 + SEC),
        r#"{"stream":"D","seq":2}"#
    );
}

#[test]
fn expected_headers_are_checked_in_nats_server_order() {
    let mut d = Driver::new(mem_sm(r#"{"name":"ORDERS","subjects":["orders.>"]}"#));
    d.publish("orders.a", &[], T0);
    d.publish("orders.a", &[("Nats-Msg-Id", "m1")], T0 + 1);
    // The captured replies of nats-server 2.15.1 for the same sequence of publishes.
    assert_eq!(
        d.publish("orders.a", &[("Nats-Expected-Stream", "OTHER")], T0 + 2),
        r#"{"error":{"code":400,"err_code":10060,"description":"expected stream does not match"},"stream":"ORDERS","seq":0}"#
    );
    assert_eq!(
        d.publish("orders.a", &[("Nats-Expected-Last-Sequence", "1")], T0 + 3),
        r#"{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 2"},"stream":"ORDERS","seq":0}"#
    );
    assert_eq!(
        d.publish(
            "orders.a",
            &[("Nats-Expected-Last-Sequence", "abc")],
            T0 + 3
        ),
        r#"{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 2"},"stream":"ORDERS","seq":0}"#
    );
    assert_eq!(
        d.publish(
            "orders.b",
            &[("Nats-Expected-Last-Subject-Sequence", "5")],
            T0 + 4
        ),
        r#"{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 0"},"stream":"ORDERS","seq":0}"#
    );
    assert_eq!(
        d.publish(
            "orders.b",
            &[("Nats-Expected-Last-Subject-Sequence", "0")],
            T0 + 5
        ),
        r#"{"stream":"ORDERS","seq":3}"#
    );
    assert_eq!(
        d.publish(
            "orders.b",
            &[("Nats-Expected-Last-Subject-Sequence-Subject", "orders.*")],
            T0 + 6
        ),
        r#"{"error":{"code":400,"err_code":10193,"description":"missing sequence for expected last sequence per subject"},"stream":"ORDERS","seq":0}"#
    );
    assert_eq!(
        d.publish(
            "orders.c",
            &[
                ("Nats-Expected-Last-Subject-Sequence", "3"),
                ("Nats-Expected-Last-Subject-Sequence-Subject", "orders.*")
            ],
            T0 + 7
        ),
        r#"{"stream":"ORDERS","seq":4}"#
    );
    assert_eq!(
        d.publish("orders.a", &[("Nats-Expected-Last-Msg-Id", "zz")], T0 + 8),
        r#"{"error":{"code":400,"err_code":10070,"description":"wrong last msg ID: "},"stream":"ORDERS","seq":0}"#
    );
    // Expected last sequence is checked before the duplicate id is noticed.
    assert_eq!(
        d.publish(
            "orders.a",
            &[("Nats-Msg-Id", "m1"), ("Nats-Expected-Last-Sequence", "99")],
            T0 + 9
        ),
        r#"{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 4"},"stream":"ORDERS","seq":0}"#
    );
    d.publish("orders.z", &[("Nats-Msg-Id", "last")], T0 + 10);
    assert_eq!(
        d.publish(
            "orders.a",
            &[("Nats-Expected-Last-Msg-Id", "last")],
            T0 + 11
        ),
        r#"{"stream":"ORDERS","seq":6}"#
    );
}

#[test]
fn racing_publishers_with_the_same_expected_seq_get_one_success() {
    let mut d = Driver::new(mem_sm(r#"{"name":"KV","subjects":["kv.>"]}"#));
    let a = d.publish("kv.k", &[("Nats-Expected-Last-Subject-Sequence", "0")], T0);
    let b = d.publish(
        "kv.k",
        &[("Nats-Expected-Last-Subject-Sequence", "0")],
        T0 + 1,
    );
    assert_eq!(a, r#"{"stream":"KV","seq":1}"#);
    assert!(b.contains(r#""err_code":10071"#), "{b}");
    assert!(b.contains("wrong last sequence: 1"), "{b}");
}

#[test]
fn rollup_requires_permission_and_removes_older_messages() {
    let mut d = Driver::new(mem_sm(r#"{"name":"R","subjects":["r.>"]}"#));
    assert_eq!(
        d.publish("r.a", &[("Nats-Rollup", "sub")], T0),
        r#"{"error":{"code":500,"err_code":10111,"description":"rollup not permitted"},"stream":"R","seq":0}"#
    );
    let mut d = Driver::new(mem_sm(
        r#"{"name":"R","subjects":["r.>"],"allow_rollup_hdrs":true}"#,
    ));
    for i in 0..3 {
        d.publish("r.a", &[], T0 + i);
        d.publish("r.b", &[], T0 + i);
    }
    assert_eq!(
        d.publish("r.a", &[("Nats-Rollup", "bogus")], T0 + 5),
        fixture("pub_rollup_bogus")
    );
    assert_eq!(
        d.publish("r.a", &[("Nats-Rollup", "sub")], T0 + 6),
        r#"{"stream":"R","seq":7}"#
    );
    assert_eq!(d.sm.store().subject_count("r.a"), 1);
    assert_eq!(d.sm.store().subject_count("r.b"), 3);
    // Same publishes as the capture: seqs 1 and 3 are gone, deleted = [3, 5] there too.
    assert_eq!(d.sm.store().deleted().unwrap(), vec![3, 5]);
    assert_eq!(
        d.publish("r.a", &[("Nats-TTL", "10s")], T0 + 6),
        fixture("pub_ttl_disabled")
    );
    assert_eq!(
        d.publish("r.c", &[("Nats-Rollup", "all")], T0 + 7),
        r#"{"stream":"R","seq":8}"#
    );
    let st = d.sm.state();
    assert_eq!((st.msgs, st.first_seq, st.last_seq), (1, 8, 8));
}

#[test]
fn sealed_and_size_limits_refuse_publishes() {
    let mut d = Driver::new(mem_sm(r#"{"name":"S","subjects":["s"],"max_msg_size":10}"#));
    let big = d.apply(command::append(
        "s",
        Bytes::new(),
        Bytes::from(vec![b'x'; 11]),
        T0,
    ));
    assert_eq!(
        big,
        r#"{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"},"stream":"S","seq":0}"#
    );
    let sealed = config(r#"{"name":"S","subjects":["s"],"sealed":true}"#);
    d.apply(command::update_config(&sealed, T0 + 1));
    assert_eq!(
        d.publish("s", &[], T0 + 2),
        r#"{"error":{"code":400,"err_code":10109,"description":"invalid operation on sealed stream"},"stream":"S","seq":0}"#
    );
    assert!(d.apply(command::purge("", 0, 0)).contains("10109"));
    assert!(d.apply(command::delete_msg(1, false)).contains("10109"));
}

#[test]
fn discard_new_limits_answer_10077() {
    let mut d = Driver::new(mem_sm(
        r#"{"name":"L","subjects":["l.*"],"max_msgs":2,"discard":"new"}"#,
    ));
    d.publish("l.a", &[], T0);
    d.publish("l.b", &[], T0 + 1);
    assert_eq!(
        d.publish("l.c", &[], T0 + 2),
        r#"{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"L","seq":0}"#
    );
    let mut d = Driver::new(mem_sm(
        r#"{"name":"P","subjects":["p.*"],"max_msgs_per_subject":1,"discard":"new","discard_new_per_subject":true}"#,
    ));
    d.publish("p.a", &[], T0);
    assert!(
        d.publish("p.a", &[], T0 + 1)
            .contains("maximum messages per subject exceeded")
    );
    assert_eq!(d.publish("p.b", &[], T0 + 2), r#"{"stream":"P","seq":2}"#);
}

#[test]
fn discard_old_keeps_history_per_subject() {
    let mut d = Driver::new(mem_sm(
        r#"{"name":"KV","subjects":["kv.>"],"max_msgs_per_subject":2}"#,
    ));
    for i in 0..5 {
        d.publish("kv.a", &[], T0 + i);
    }
    let st = d.sm.state();
    assert_eq!((st.msgs, st.first_seq, st.last_seq), (2, 4, 5));
}

#[test]
fn purge_variants_answer_counts() {
    let mut d = Driver::new(mem_sm(r#"{"name":"P","subjects":["p.*"]}"#));
    for i in 0..6 {
        d.publish(if i % 2 == 0 { "p.a" } else { "p.b" }, &[], T0 + i);
    }
    assert_eq!(
        d.apply(command::purge("p.a", 0, 1)),
        r#"{"type":"io.nats.jetstream.api.v1.stream_purge_response","success":true,"purged":2}"#
    );
    assert_eq!(
        d.apply(command::purge("", 2, 1)),
        r#"{"type":"io.nats.jetstream.api.v1.stream_purge_response","error":{"code":400,"err_code":10003,"description":"bad request"},"purged":0}"#
    );
    assert!(
        d.apply(command::purge("", 5, 0))
            .ends_with(r#""purged":2}"#)
    );
    assert!(
        d.apply(command::purge("", 0, 0))
            .ends_with(r#""purged":2}"#)
    );
    let st = d.sm.state();
    assert_eq!((st.msgs, st.first_seq, st.last_seq), (0, 7, 6));
    let mut denied = Driver::new(mem_sm(r#"{"name":"N","subjects":["n"],"deny_purge":true}"#));
    assert_eq!(
        denied.apply(command::purge("", 0, 0)),
        r#"{"type":"io.nats.jetstream.api.v1.stream_purge_response","error":{"code":500,"err_code":10110,"description":"stream purge not permitted"},"purged":0}"#
    );
}

#[test]
fn delete_msg_answers() {
    let mut d = Driver::new(mem_sm(r#"{"name":"M","subjects":["m"]}"#));
    d.publish("m", &[], T0);
    d.publish("m", &[], T0 + 1);
    assert_eq!(
        d.apply(command::delete_msg(1, false)),
        r#"{"type":"io.nats.jetstream.api.v1.stream_msg_delete_response","success":true}"#
    );
    assert_eq!(
        d.apply(command::delete_msg(1, true)),
        r#"{"type":"io.nats.jetstream.api.v1.stream_msg_delete_response","error":{"code":500,"err_code":10057,"description":"no message found"}}"#
    );
    assert_eq!(d.apply(command::delete_msg(0, false)), fixture("del_zero"));
    assert_eq!(
        d.apply(command::delete_msg(99, false)),
        fixture("del_beyond")
    );
    let mut denied = Driver::new(mem_sm(
        r#"{"name":"N","subjects":["n"],"deny_delete":true}"#,
    ));
    denied.publish("n", &[], T0);
    assert!(
        denied
            .apply(command::delete_msg(1, false))
            .contains("message delete not permitted")
    );
}

#[test]
fn first_seq_and_update_enforce_config() {
    let mut d = Driver::new(mem_sm(r#"{"name":"F","subjects":["f.*"],"first_seq":100}"#));
    let st = d.sm.state();
    assert_eq!((st.first_seq, st.last_seq), (100, 99));
    for i in 0..5 {
        d.publish("f.a", &[], T0 + i);
    }
    assert_eq!(d.sm.state().last_seq, 104);
    let lowered = config(r#"{"name":"F","subjects":["f.*"],"first_seq":100,"max_msgs":2}"#);
    let answer = d.apply(command::update_config(&lowered, T0 + SEC));
    assert!(
        answer.starts_with(
            r#"{"type":"io.nats.jetstream.api.v1.stream_update_response","config":{"name":"F""#
        ),
        "{answer}"
    );
    assert!(answer.contains(r#""state":{"messages":2,"#), "{answer}");
    assert_eq!(d.sm.state().first_seq, 103);
}

#[test]
fn a_publish_past_the_last_sequence_is_refused_and_the_stream_goes_on() {
    let refused = |name: &str| {
        format!(
            r#"{{"error":{{"code":503,"err_code":10077,"description":"stream sequence space exhausted"}},"stream":"{name}","seq":0}}"#
        )
    };
    // The last storable sequence is 2^64-2: one publish fits, then every one is refused.
    let mut d = Driver::new(mem_sm(
        r#"{"name":"M","subjects":["m"],"first_seq":18446744073709551614}"#,
    ));
    assert_eq!(
        d.publish("m", &[], T0),
        r#"{"stream":"M","seq":18446744073709551614}"#
    );
    assert_eq!(d.publish("m", &[], T0 + 1), refused("M"));
    assert_eq!(d.publish("m", &[], T0 + 2), refused("M"));
    let st = d.sm.state();
    assert_eq!((st.msgs, st.last_seq), (1, u64::MAX - 1));
    // Other commands still apply: the group is not stuck.
    let purged = d.apply(command::purge("", 0, 0));
    assert!(purged.contains(r#""purged":1"#), "{purged}");
    assert_eq!(d.publish("m", &[], T0 + 3), refused("M"));
    // first_seq 2^64-1 (accepted at create, as nats-server does) leaves no room at all.
    let mut d = Driver::new(mem_sm(
        r#"{"name":"X","subjects":["x"],"first_seq":18446744073709551615}"#,
    ));
    assert_eq!(d.publish("x", &[], T0), refused("X"));
    assert_eq!(d.sm.state().msgs, 0);
}

#[test]
fn expire_removes_old_messages_by_command_time() {
    let mut d = Driver::new(mem_sm(
        r#"{"name":"E","subjects":["e"],"max_age":2000000000}"#,
    ));
    d.publish("e", &[], T0);
    d.publish("e", &[], T0 + SEC);
    assert_eq!(d.apply(command::expire(T0 + 2 * SEC + 1)), "");
    assert_eq!(d.sm.state().msgs, 1);
}

#[test]
fn interest_stream_without_consumers_acks_but_drops() {
    let mut d = Driver::new(mem_sm(
        r#"{"name":"I","subjects":["i"],"retention":"interest"}"#,
    ));
    assert_eq!(d.publish("i", &[], T0), r#"{"stream":"I","seq":1}"#);
    let st = d.sm.state();
    assert_eq!((st.msgs, st.first_seq, st.last_seq), (0, 2, 1));
}

/// A mixed command sequence exercising every command kind.
fn workload() -> Vec<Bytes> {
    let mut cmds = Vec::new();
    for i in 0..40u64 {
        let subject = format!("w.{}", i % 4);
        let mut h = vec![("Nats-Msg-Id".to_string(), format!("id-{}", i % 30))];
        if i % 7 == 0 {
            h.push(("Nats-Expected-Last-Sequence".into(), (i / 2).to_string()));
        }
        if i % 11 == 0 {
            h.push(("Nats-Rollup".into(), "sub".into()));
        }
        let pairs: Vec<(&str, &str)> = h.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        cmds.push(command::append(
            &subject,
            Bytes::from(block(&pairs)),
            Bytes::from(format!("payload {i}")),
            T0 + i * SEC / 4,
        ));
        if i == 20 {
            cmds.push(command::delete_msg(5, false));
            cmds.push(command::purge("w.1", 0, 1));
        }
    }
    cmds.push(command::delete_msg(36, false));
    cmds
}

/// A memory-store state machine after [`workload`].
fn after_workload() -> Driver {
    let mut d = Driver::new(mem_sm(WORKLOAD_CFG));
    for cmd in workload() {
        d.apply(cmd);
    }
    d
}

const WORKLOAD_CFG: &str = r#"{"name":"W","subjects":["w.*"],"max_msgs":25,"allow_rollup_hdrs":true,"duplicate_window":5000000000}"#;

#[test]
fn two_machines_fed_the_same_commands_agree() {
    let mut a = Driver::new(mem_sm(WORKLOAD_CFG));
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let rocks = Box::new(RocksStreamStore::open(db, StreamUid(9)).unwrap());
    let mut b =
        Driver::new(StreamStateMachine::open(rocks, config(WORKLOAD_CFG), T0, server()).unwrap());
    for cmd in workload() {
        assert_eq!(a.apply(cmd.clone()), b.apply(cmd));
    }
    assert_eq!(a.sm.snapshot().unwrap(), b.sm.snapshot().unwrap());
    assert!(a.sm.state().msgs > 0 && a.sm.state().num_deleted() > 0);
    assert!(!a.sm.dedup().is_empty());
}

/// Compares two machines; `bytes` only when both use the same store kind (memory and file
/// stores count stored sizes differently, spec/nats-protocol-and-jetstream.md §4.6).
fn assert_same_state(a: &StreamStateMachine, b: &StreamStateMachine) {
    let (mut sa, mut sb) = (a.state(), b.state());
    if a.store().msg_size("s", 0, 0) != b.store().msg_size("s", 0, 0) {
        (sa.bytes, sb.bytes) = (0, 0);
    }
    assert_eq!(sa, sb);
    assert_eq!(a.store().deleted().unwrap(), b.store().deleted().unwrap());
    assert_eq!(a.dedup(), b.dedup());
    assert_eq!(a.config(), b.config());
    assert_eq!(a.snapshot().unwrap(), b.snapshot().unwrap());
}

#[test]
fn snapshot_restore_reproduces_the_state_on_both_stores() {
    let mut a = after_workload();
    // Messages removed at the tail: last_seq lies above the last present message.
    let last = a.sm.state().last_seq;
    a.apply(command::delete_msg(last, false));
    let snap = a.sm.snapshot().unwrap();

    let mut mem = mem_sm(r#"{"name":"OTHER","subjects":["o"]}"#);
    for i in 0..50 {
        let mut d = Driver::new(mem);
        d.publish("o", &[], T0 + i);
        mem = d.sm;
    }
    mem.restore(&snap).unwrap();
    assert_same_state(&a.sm, &mem);

    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let rocks = Box::new(RocksStreamStore::open(db, StreamUid(3)).unwrap());
    let mut r = StreamStateMachine::open(rocks, config(r#"{"name":"X"}"#), T0, server()).unwrap();
    r.restore(&snap).unwrap();
    assert_same_state(&a.sm, &r);

    // Both keep answering alike after the restore.
    let next = command::append(
        "w.0",
        Bytes::from(block(&[("Nats-Msg-Id", "id-3")])),
        Bytes::new(),
        T0 + 11 * SEC,
    );
    let mut a2 = Driver::new(mem);
    let mut r2 = Driver::new(r);
    assert_eq!(a.apply(next.clone()), a2.apply(next.clone()));
    assert_eq!(a.apply(next.clone()), r2.apply(next));
}

/// Takes a lazy snapshot of `d` after the workload, changes the stream (appends, a purge of
/// everything), and checks that the lazy snapshot still reads as the state when it was taken.
fn lazy_snapshot_is_a_point_in_time(mut d: Driver) {
    for cmd in workload() {
        d.apply(cmd);
    }
    let lazy = d.sm.snapshot_source().unwrap();
    let then = d.sm.snapshot().unwrap();
    assert!(matches!(lazy, jetraft_raft::SnapshotData::Lazy(_)));
    for i in 0..5 {
        d.publish("w.late", &[], T0 + 20 * SEC + i);
    }
    d.apply(command::purge("", 0, 0));
    assert_eq!(d.sm.state().msgs, 0);
    assert_eq!(lazy.clone().into_bytes().unwrap(), then);
    // A second pass reads the same bytes; the restored state is the state then.
    let bytes = lazy.into_bytes().unwrap();
    assert_eq!(bytes, then);
    let mut back = mem_sm(r#"{"name":"OTHER","subjects":["o"]}"#);
    back.restore(&bytes).unwrap();
    assert!(back.state().msgs > 0);
    assert_eq!(back.snapshot().unwrap(), then);
}

#[test]
fn a_lazy_snapshot_reads_the_state_as_of_when_it_was_taken() {
    lazy_snapshot_is_a_point_in_time(Driver::new(mem_sm(WORKLOAD_CFG)));
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let rocks = Box::new(RocksStreamStore::open(db, StreamUid(9)).unwrap());
    let sm = StreamStateMachine::open(rocks, config(WORKLOAD_CFG), T0, server()).unwrap();
    lazy_snapshot_is_a_point_in_time(Driver::new(sm));
}

#[test]
fn a_restore_read_chunk_by_chunk_reproduces_the_state() {
    let a = after_workload();
    let snap = a.sm.snapshot().unwrap();
    for size in [1, 7, 100, 4096] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let rocks = Box::new(RocksStreamStore::open(db, StreamUid(3)).unwrap());
        let mut r =
            StreamStateMachine::open(rocks, config(r#"{"name":"X"}"#), T0, server()).unwrap();
        r.restore_data(&chunked_payload(&snap, size)).unwrap();
        assert_same_state(&a.sm, &r);
        assert_eq!(r.snapshot().unwrap(), snap, "chunks of {size} bytes");
    }
}

#[test]
fn a_snapshot_found_corrupt_late_is_refused_before_the_store_is_touched() {
    let a = after_workload();
    let good = a.sm.snapshot().unwrap();
    // The good snapshot with one more message after the rest, out of order: only a reader
    // that got to the end knows.
    let mut bad = good.to_vec();
    let stray = jetraft_proto::stream::SnapshotMsg {
        seq: 1,
        subject: "w.0".into(),
        ..Default::default()
    };
    prost::encoding::message::encode(5, &stray, &mut bad);
    let bad = Bytes::from(bad);

    let mut other = Driver::new(mem_sm(r#"{"name":"OTHER","subjects":["o"]}"#));
    for i in 0..5 {
        other.publish("o", &[], T0 + i);
    }
    let before = other.sm.snapshot().unwrap();
    for data in [chunked_payload(&bad, 64), SnapshotData::from(bad.clone())] {
        let err = other.sm.restore_data(&data).unwrap_err();
        assert!(
            matches!(err, StateMachineError::CorruptSnapshot { .. }),
            "{err}"
        );
        assert_eq!(other.sm.snapshot().unwrap(), before);
    }
    // Cut short: the same.
    let cut = good.slice(..good.len() - 3);
    assert!(other.sm.restore_data(&chunked_payload(&cut, 64)).is_err());
    assert_eq!(other.sm.snapshot().unwrap(), before);
}

#[test]
fn empty_purged_stream_snapshot_keeps_sequences() {
    let mut a = Driver::new(mem_sm(r#"{"name":"E","subjects":["e"]}"#));
    for i in 0..3 {
        a.publish("e", &[], T0 + i);
    }
    a.apply(command::purge("", 0, 0));
    let mut b = mem_sm(r#"{"name":"E","subjects":["e"]}"#);
    b.restore(&a.sm.snapshot().unwrap()).unwrap();
    assert_same_state(&a.sm, &b);
    assert_eq!((b.state().first_seq, b.state().last_seq), (4, 3));
    assert!(b.restore(b"\xff\xff not a snapshot").is_err());
}

#[test]
fn rocks_state_machine_survives_restart_with_dedup_and_applied_state() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(r#"{"name":"R","subjects":["r"],"duplicate_window":60000000000}"#);
    {
        let db = Db::open(dir.path()).unwrap();
        let rocks = Box::new(RocksStreamStore::open(db, StreamUid(5)).unwrap());
        let mut d =
            Driver::new(StreamStateMachine::open(rocks, cfg.clone(), T0, server()).unwrap());
        assert!(d.sm.load_applied().unwrap().is_none());
        d.publish("r", &[("Nats-Msg-Id", "a")], T0);
        d.publish("r", &[("Nats-Msg-Id", "b")], T0 + SEC);
        d.sm.save_applied(&AppliedState::default()).unwrap();
        let lowered =
            config(r#"{"name":"R","subjects":["r"],"duplicate_window":60000000000,"max_msgs":10}"#);
        d.apply(command::update_config(&lowered, T0 + 2 * SEC));
    }
    let db = Db::open(dir.path()).unwrap();
    let rocks = Box::new(RocksStreamStore::open(db, StreamUid(5)).unwrap());
    // The stored config wins over the one passed in.
    let mut d = Driver::new(StreamStateMachine::open(rocks, cfg, T0, server()).unwrap());
    assert_eq!(d.sm.config().max_msgs, 10);
    assert_eq!(d.sm.load_applied().unwrap(), Some(AppliedState::default()));
    // New entries continue the log after the three applied before the restart.
    d.index = 3;
    assert_eq!(
        d.publish("r", &[("Nats-Msg-Id", "a")], T0 + 3 * SEC),
        r#"{"stream":"R","seq":1,"duplicate": true}"#
    );
    assert_eq!(
        d.publish("r", &[("Nats-Msg-Id", "c")], T0 + 3 * SEC),
        r#"{"stream":"R","seq":3}"#
    );
}

/// A restore is refused at the next open until its applied position was saved: a replica
/// stopped part-way through one (its store reset and partly rewritten) is not served as if it
/// held either state, and the store check names it for repair.
#[test]
fn a_restore_interrupted_before_its_applied_position_is_refused_at_open() {
    let a = after_workload();
    let snap = a.sm.snapshot().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let open = |db: &Db| {
        let rocks = Box::new(RocksStreamStore::open(db.clone(), StreamUid(6))?);
        Ok::<_, jetraft_storage::StorageError>(
            StreamStateMachine::open(rocks, config(r#"{"name":"X"}"#), T0, server()).unwrap(),
        )
    };
    {
        let db = Db::open(dir.path()).unwrap();
        let mut r = open(&db).unwrap();
        r.save_applied(&AppliedState::default()).unwrap();
        r.restore_data(&chunked_payload(&snap, 4096)).unwrap();
        // Stopped here: no applied position saved after the restore.
    }
    {
        let db = Db::open(dir.path()).unwrap();
        let err = open(&db).unwrap_err();
        assert!(
            matches!(err, jetraft_storage::StorageError::IncompleteInstall { .. }),
            "{err}"
        );
    }
    let check = jetraft_storage::verify::check_store(dir.path()).unwrap();
    assert!(
        matches!(
            check,
            jetraft_storage::verify::StoreCheck::Damaged {
                kind: jetraft_storage::verify::DamageKind::InterruptedRestore,
                ..
            }
        ),
        "{check:?}"
    );

    // The same restore completed with its applied position (and the durability barrier, as
    // the Raft adapter runs it) opens as the restored state.
    let dir = tempfile::tempdir().unwrap();
    let restored = {
        let db = Db::open(dir.path()).unwrap();
        let mut r = open(&db).unwrap();
        r.restore_data(&chunked_payload(&snap, 4096)).unwrap();
        r.save_applied(&AppliedState::default()).unwrap();
        (r.durability_barrier().unwrap())().unwrap();
        assert_same_state(&a.sm, &r);
        (r.state(), contents(&r))
    };
    assert_eq!(
        jetraft_storage::verify::check_store(dir.path()).unwrap(),
        jetraft_storage::verify::StoreCheck::Sound
    );
    let db = Db::open(dir.path()).unwrap();
    let r = open(&db).unwrap();
    assert_eq!((r.state(), contents(&r)), restored);
}

/// Messages as (seq, subject, payload), for comparing replicas.
fn contents(sm: &StreamStateMachine) -> Vec<(u64, String, Bytes)> {
    let mut out = Vec::new();
    let mut at = 1;
    while let Some(m) = sm.store().next_matching(at, &[]).unwrap() {
        at = m.seq + 1;
        out.push((m.seq, m.subject, m.payload));
    }
    out
}

#[test]
fn entries_applied_again_after_a_crash_ahead_of_the_applied_record_change_nothing() {
    // The log: appends without Nats-Msg-Id, a rollup, a purge, more appends. A replica that
    // crashed after writing the effects of entries up to `crash_at` but with its applied record
    // at `saved` applies `saved+1 ..` again after the restart; it must end up identical to a
    // replica that never crashed.
    let cfg_json = r#"{"name":"C","subjects":["c.>"],"allow_rollup_hdrs":true,"max_msgs":6}"#;
    let payload = |i: u64| Bytes::from(format!("p{i}"));
    let log: Vec<Bytes> = (1..=12u64)
        .map(|i| match i {
            5 => command::append(
                "c.r",
                Bytes::from(block(&[("Nats-Rollup", "sub")])),
                payload(i),
                T0 + i,
            ),
            8 => command::purge("c.b", 0, 0),
            _ => command::append(
                if i % 2 == 0 { "c.a" } else { "c.b" },
                Bytes::new(),
                payload(i),
                T0 + i,
            ),
        })
        .collect();
    assert_replay_after_any_crash_matches(cfg_json, &log);
}

#[test]
fn batches_applied_again_after_a_crash_inside_them_change_nothing() {
    // As above with `AppendBatch` entries: max_msgs makes every batch write its staged appends
    // part-way through (to remove the oldest), so a crash can leave a batch half applied, with
    // a rollup and a duplicate Nats-Msg-Id inside batches.
    let cfg_json = r#"{"name":"C","subjects":["c.>"],"allow_rollup_hdrs":true,"max_msgs":4}"#;
    let plain =
        |subject: &'static str, i: u64| (subject, Bytes::new(), Bytes::from(format!("p{i}")));
    let with = |subject: &'static str, i: u64, h: (&str, &str)| {
        (
            subject,
            Bytes::from(block(&[h])),
            Bytes::from(format!("p{i}")),
        )
    };
    let log = vec![
        command::append_batch([plain("c.a", 1), plain("c.b", 2), plain("c.a", 3)], T0 + 1),
        command::append_batch(
            [
                plain("c.b", 4),
                with("c.r", 5, ("Nats-Rollup", "sub")),
                with("c.a", 6, ("Nats-Msg-Id", "x")),
                plain("c.b", 7),
            ],
            T0 + 2,
        ),
        command::purge("c.b", 0, 0),
        command::append_batch(
            [
                plain("c.a", 8),
                with("c.b", 9, ("Nats-Msg-Id", "y")),
                with("c.b", 10, ("Nats-Msg-Id", "x")),
                plain("c.a", 11),
                with("c.a", 12, ("Nats-Msg-Id", "y")),
                plain("c.b", 13),
            ],
            T0 + 3,
        ),
        command::append("c.a", Bytes::new(), Bytes::from_static(b"p14"), T0 + 4),
        command::append_batch([plain("c.b", 15), plain("c.a", 16)], T0 + 5),
    ];
    assert_replay_after_any_crash_matches(cfg_json, &log);
}

/// Applies `log` to a replica that crashes after any entry, with its applied record saved at any
/// earlier entry, then applies the entries after the record again: it must end up identical to
/// a replica that never crashed.
fn assert_replay_after_any_crash_matches(cfg_json: &str, log: &[Bytes]) {
    let ref_dir = tempfile::tempdir().unwrap();
    let ref_store =
        RocksStreamStore::open(Db::open(ref_dir.path()).unwrap(), StreamUid(4)).unwrap();
    let mut reference = Driver::new(
        StreamStateMachine::open(Box::new(ref_store), config(cfg_json), T0, server()).unwrap(),
    );
    for cmd in log {
        reference.apply(cmd.clone());
    }
    for saved in 0..log.len() as u64 {
        for crash_at in saved..=log.len() as u64 {
            let dir = tempfile::tempdir().unwrap();
            {
                let db = Db::open(dir.path()).unwrap();
                let rocks = Box::new(RocksStreamStore::open(db, StreamUid(4)).unwrap());
                let mut d = Driver::new(
                    StreamStateMachine::open(rocks, config(cfg_json), T0, server()).unwrap(),
                );
                for (i, cmd) in log.iter().enumerate().take(crash_at as usize) {
                    d.apply(cmd.clone());
                    if i as u64 + 1 == saved {
                        let applied = AppliedState {
                            last_applied: Some(jetraft_raft::convert::log_id::new(1, 1, saved)),
                            ..AppliedState::default()
                        };
                        d.sm.save_applied(&applied).unwrap();
                    }
                }
            }
            let db = Db::open(dir.path()).unwrap();
            let rocks = Box::new(RocksStreamStore::open(db, StreamUid(4)).unwrap());
            let mut d = Driver::new(
                StreamStateMachine::open(rocks, config(cfg_json), T0, server()).unwrap(),
            );
            d.index = saved;
            for cmd in &log[saved as usize..] {
                d.apply(cmd.clone());
            }
            assert_eq!(
                contents(&d.sm),
                contents(&reference.sm),
                "applied record at {saved}, crash after {crash_at}"
            );
            assert_eq!(
                d.sm.state(),
                reference.sm.state(),
                "saved {saved}, crash {crash_at}"
            );
        }
    }
}

#[test]
fn a_replica_nobody_waits_on_changes_the_same_and_builds_no_answers() {
    // A follower applies entries with no proposer waiting: same state, empty batch answers.
    let cfg = r#"{"name":"F","subjects":["f.>"],"max_msgs_per_subject":2}"#;
    let with = |subject: &'static str, h: (&str, &str)| {
        (subject, Bytes::from(block(&[h])), Bytes::from_static(b"p"))
    };
    let plain = |subject: &'static str| (subject, Bytes::new(), Bytes::from_static(b"p"));
    let log = [
        command::append_batch(
            [
                plain("f.a"),
                with("f.b", ("Nats-Msg-Id", "m1")),
                plain("f.a"),
                plain("f.a"),
            ],
            T0 + 1,
        ),
        command::append_batch(
            [
                with("f.c", ("Nats-Msg-Id", "m1")),
                with("f.c", ("Nats-Expected-Stream", "OTHER")),
                plain("f.c"),
            ],
            T0 + 2,
        ),
    ];
    let mut leader = mem_sm(cfg);
    let mut follower = mem_sm(cfg);
    let mut answers = Vec::new();
    for (i, cmd) in log.iter().enumerate() {
        let index = LogIndex(i as u64 + 1);
        let framed = leader.apply_shared(index, cmd, true).unwrap();
        answers.extend(command::split_answers(&framed));
        assert!(follower.apply_shared(index, cmd, false).unwrap().is_empty());
    }
    assert_eq!(contents(&follower), contents(&leader));
    assert_eq!(follower.state(), leader.state());
    let answers: Vec<String> = answers
        .iter()
        .map(|a| String::from_utf8(a.to_vec()).unwrap())
        .collect();
    assert_eq!(
        &answers[..4],
        [
            r#"{"stream":"F","seq":1}"#,
            r#"{"stream":"F","seq":2}"#,
            r#"{"stream":"F","seq":3}"#,
            r#"{"stream":"F","seq":4}"#,
        ]
    );
    assert_eq!(answers[4], r#"{"stream":"F","seq":2,"duplicate": true}"#);
    assert!(
        answers[5].starts_with(r#"{"error":{"code":400,"err_code":10060"#),
        "{}",
        answers[5]
    );
    assert_eq!(answers[6], r#"{"stream":"F","seq":5}"#);
    assert_eq!(
        contents(&leader).len(),
        4,
        "max_msgs_per_subject 2 dropped one f.a"
    );
}

#[test]
fn the_memory_store_keeps_its_own_copy_of_each_message() {
    // Decoding slices the Raft entry; a kept slice would pin the whole entry in memory.
    let mut sm = mem_sm(r#"{"name":"M","subjects":["m"],"storage":"memory"}"#);
    let big = Bytes::from(vec![7u8; 4096]);
    let cmd = command::append_batch([("m", Bytes::new(), big.clone())], T0);
    sm.apply_shared(LogIndex(1), &cmd, true).unwrap();
    let stored = sm.store().get(1).unwrap().unwrap();
    assert_eq!(stored.payload, big);
    let entry = cmd.as_ptr_range();
    assert!(
        !entry.contains(&stored.payload.as_ptr()),
        "payload shares the entry"
    );
}

#[test]
fn undecodable_commands_are_apply_errors() {
    let mut sm = mem_sm(r#"{"name":"U"}"#);
    assert!(sm.apply(LogIndex(1), b"\xff\xff\xff").is_err());
    assert!(sm.apply(LogIndex(2), b"").is_err());
}

#[test]
fn info_and_msg_get_builders_match_nats_server_shapes() {
    let mut d = Driver::new(mem_sm(r#"{"name":"ORDERS","subjects":["orders.>"]}"#));
    d.publish("orders.a", &[("X-I", "3")], T0);
    d.publish("orders.b", &[], T0 + SEC);
    d.apply(command::delete_msg(1, false));
    d.publish("orders.b", &[], T0 + 2 * SEC);
    let req = StreamInfoRequest {
        deleted_details: true,
        subjects_filter: ">".into(),
        offset: 0,
    };
    let cluster = crate::jetstream::api::types::ClusterInfo {
        leader: "probe".into(),
        ..Default::default()
    };
    let json = info::info_response_json(&d.sm, &req, T0 + 3 * SEC, Some(cluster), |_| {}).unwrap();
    assert!(json.starts_with(
        r#"{"type":"io.nats.jetstream.api.v1.stream_info_response","total":1,"offset":0,"limit":100000,"config":{"name":"ORDERS","subjects":["orders.\u003e"],"#
    ), "{json}");
    assert!(
        json.contains(r#""created":"2026-12-02T08:17:47Z","state":{"messages":2,"bytes":"#),
        "{json}"
    );
    assert!(json.contains(
        r#""first_seq":2,"first_ts":"2026-12-02T08:17:48Z","last_seq":3,"last_ts":"2026-12-02T08:17:49Z","num_subjects":1,"subjects":{"orders.b":2},"consumer_count":0},"cluster":{"leader":"probe"},"ts":"2026-12-02T08:17:50Z"}"#
    ), "{json}");
    let create = info::create_response_json(&d.sm, T0);
    assert!(
        create.ends_with(r#""ts":"2026-12-02T08:17:47Z","did_create":true}"#),
        "{create}"
    );

    let get = info::msg_get_response_json(
        d.sm.store(),
        &MsgSelector::LastBySubject("orders.*".into()),
        false,
    )
    .unwrap();
    assert_eq!(
        get,
        r#"{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","message":{"subject":"orders.b","seq":3,"data":"eA==","time":"2026-12-02T08:17:49Z"}}"#
    );
    let missing = info::msg_get_response_json(d.sm.store(), &MsgSelector::Seq(1), false).unwrap();
    assert_eq!(
        missing,
        r#"{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","error":{"code":404,"err_code":10037,"description":"no message found"}}"#
    );
    let by_time = info::find_message(d.sm.store(), &MsgSelector::StartTime(T0 + SEC / 2)).unwrap();
    assert_eq!(by_time.map(|m| m.seq), Some(2));
    let next = info::find_message(
        d.sm.store(),
        &MsgSelector::NextBySubject {
            subject: "orders.b".into(),
            from: 3,
        },
    )
    .unwrap();
    assert_eq!(next.map(|m| m.seq), Some(3));
}

#[test]
fn direct_get_reply_appends_stream_headers() {
    let msg = jetraft_storage::stream::StoredMsg {
        seq: 3,
        subject: "m.a".into(),
        headers: Bytes::from_static(b"NATS/1.0\r\nX-I: 3\r\n\r\n"),
        payload: Bytes::from_static(b"v3"),
        timestamp_ns: 1_796_199_467_555_474_235,
    };
    let reply = info::direct_get_reply("M", &msg, false);
    assert_eq!(
        String::from_utf8(reply.headers).unwrap(),
        "NATS/1.0\r\nX-I: 3\r\nNats-Stream: M\r\nNats-Subject: m.a\r\nNats-Sequence: 3\r\nNats-Time-Stamp: 2026-12-02T08:17:47.555474235Z\r\n\r\n"
    );
    assert_eq!(reply.payload, Bytes::from_static(b"v3"));
    let bare = info::direct_get_reply("M", &msg, true);
    assert!(bare.headers.is_empty());
    assert_eq!(
        info::direct_status(404, "Message Not Found"),
        b"NATS/1.0 404 Message Not Found\r\n\r\n"
    );
}

#[test]
fn stream_info_of_a_file_stream_matches_nats_server_byte_for_byte() {
    // Replays the `create_r` .. `info_after_rollup` probes of the capture on a RocksDB store;
    // the times are the captured ones, so the whole reply must be identical.
    let captured = fixture("info_after_rollup");
    let time_of = |key: &str| {
        let at = captured.find(&format!("\"{key}\":\"")).unwrap() + key.len() + 4;
        let end = at + captured[at..].find('"').unwrap();
        crate::jetstream::api::types::go_time::parse(&captured[at..end]).unwrap()
    };
    let (created, first_ts, last_ts, now) = (
        time_of("created"),
        time_of("first_ts"),
        time_of("last_ts"),
        time_of("ts"),
    );
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let rocks = Box::new(RocksStreamStore::open(db, StreamUid(77)).unwrap());
    let cfg = config(r#"{"name":"R","subjects":["r.>"],"allow_rollup_hdrs":true}"#);
    let mut d = Driver::new(StreamStateMachine::open(rocks, cfg, created, server()).unwrap());
    for i in 0..3u64 {
        let ts = first_ts - 1 + 2 * i;
        let h = Bytes::from(block(&[("X-I", &i.to_string())]));
        d.apply(command::append("r.a", h, Bytes::from_static(b"x"), ts));
        d.apply(command::append("r.b", Bytes::new(), Bytes::new(), ts + 1));
    }
    d.publish("r.a", &[("Nats-Rollup", "bogus")], last_ts - 1);
    d.publish("r.a", &[("Nats-Rollup", "sub")], last_ts);
    let req = StreamInfoRequest {
        deleted_details: true,
        subjects_filter: ">".into(),
        offset: 0,
    };
    let cluster = crate::jetstream::api::types::ClusterInfo {
        leader: "probe".into(),
        ..Default::default()
    };
    let json = info::info_response_json(&d.sm, &req, now, Some(cluster), |_| {}).unwrap();
    assert_eq!(json, captured);
}

/// Reads the header block of the message at `seq`.
fn headers_at(d: &Driver, seq: u64) -> String {
    let m = d.sm.store().get(seq).unwrap().expect("message present");
    String::from_utf8(m.headers.to_vec()).unwrap()
}

#[test]
fn per_message_ttl_expires_and_leaves_one_marker() {
    let mut d = Driver::new(mem_sm(
        r#"{"name":"T","subjects":["t.>"],"allow_msg_ttl":true,"allow_rollup_hdrs":true,"subject_delete_marker_ttl":1000000000}"#,
    ));
    d.publish("t.a", &[("Nats-TTL", "2s")], T0);
    d.publish("t.b", &[], T0);
    d.publish("t.c", &[("Nats-TTL", "1")], T0);
    d.publish("t.c", &[], T0 + 1);
    assert!(!d.sm.expiry_due(T0 + SEC - 1));
    assert!(d.sm.expiry_due(T0 + SEC));
    assert_eq!(
        d.sm.next_expiry(),
        Some(T0 + SEC),
        "the leader wakes exactly then"
    );
    // t.c's first message expires, but t.c still has a message: no marker.
    d.apply(command::expire(T0 + SEC));
    assert_eq!(d.sm.state().msgs, 3);
    assert_eq!(d.sm.state().last_seq, 4);
    // t.a expires and was the last on its subject: a MaxAge marker at the command's time.
    d.apply(command::expire(T0 + 2 * SEC));
    let st = d.sm.state();
    assert_eq!((st.msgs, st.last_seq), (3, 5));
    let m = d.sm.store().get(5).unwrap().unwrap();
    assert_eq!((m.subject.as_str(), m.timestamp_ns), ("t.a", T0 + 2 * SEC));
    assert!(m.payload.is_empty());
    assert_eq!(
        headers_at(&d, 5),
        "NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 1s\r\nNats-Rollup: sub\r\n\r\n"
    );
    // The marker expires after its own TTL and leaves nothing behind.
    assert!(d.sm.expiry_due(T0 + 3 * SEC));
    d.apply(command::expire(T0 + 3 * SEC));
    let st = d.sm.state();
    assert_eq!((st.msgs, st.last_seq), (2, 5));
    assert!(!d.sm.expiry_due(T0 + 100 * SEC));
    assert_eq!(d.sm.next_expiry(), None);
}

#[test]
fn kv_purge_with_ttl_expires_without_a_marker_but_delete_leaves_one() {
    let mut d = Driver::new(mem_sm(
        r#"{"name":"T","subjects":["t.>"],"allow_msg_ttl":true,"allow_rollup_hdrs":true,"subject_delete_marker_ttl":1000000000}"#,
    ));
    d.publish(
        "t.p",
        &[
            ("KV-Operation", "PURGE"),
            ("Nats-Rollup", "sub"),
            ("Nats-TTL", "1s"),
        ],
        T0,
    );
    d.publish("t.d", &[("KV-Operation", "DEL"), ("Nats-TTL", "1s")], T0);
    d.apply(command::expire(T0 + SEC));
    let st = d.sm.state();
    assert_eq!((st.msgs, st.last_seq), (1, 3));
    assert_eq!(d.sm.store().get(3).unwrap().unwrap().subject, "t.d");
}

#[test]
fn max_age_spares_never_and_marks_emptied_subjects() {
    let mut d = Driver::new(mem_sm(
        r#"{"name":"T","subjects":["t.>"],"max_age":5000000000,"allow_msg_ttl":true,"allow_rollup_hdrs":true,"subject_delete_marker_ttl":1000000000}"#,
    ));
    d.publish("t.n", &[("Nats-TTL", "never")], T0);
    d.publish("t.a", &[], T0);
    d.publish("t.a", &[], T0 + SEC);
    d.publish("t.b", &[("Nats-TTL", "1h")], T0 + SEC);
    assert!(!d.sm.expiry_due(T0 + 5 * SEC - 1));
    d.apply(command::expire(T0 + 5 * SEC));
    // t.a's older message went; nothing emptied yet.
    assert_eq!(d.sm.state().msgs, 3);
    d.apply(command::expire(T0 + 6 * SEC));
    // t.a and t.b (a TTL longer than max_age does not extend it) emptied: two markers.
    let st = d.sm.state();
    assert_eq!((st.msgs, st.last_seq), (3, 6));
    assert_eq!(d.sm.store().get(5).unwrap().unwrap().subject, "t.a");
    assert_eq!(d.sm.store().get(6).unwrap().unwrap().subject, "t.b");
    // Only the `never` message survives, at any age, once the markers expired.
    d.apply(command::expire(T0 + 1000 * SEC));
    let st = d.sm.state();
    assert_eq!((st.msgs, st.first_seq), (1, 1));
    assert!(!d.sm.expiry_due(T0 + 2000 * SEC));
}

#[test]
fn ttl_index_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(r#"{"name":"T","subjects":["t"],"allow_msg_ttl":true}"#);
    {
        let db = Db::open(dir.path()).unwrap();
        let rocks = Box::new(RocksStreamStore::open(db, StreamUid(7)).unwrap());
        let mut d =
            Driver::new(StreamStateMachine::open(rocks, cfg.clone(), T0, server()).unwrap());
        d.publish("t", &[("Nats-TTL", "1s")], T0);
        d.publish("t", &[], T0);
        d.sm.save_applied(&AppliedState::default()).unwrap();
    }
    let db = Db::open(dir.path()).unwrap();
    let rocks = Box::new(RocksStreamStore::open(db, StreamUid(7)).unwrap());
    let mut d = Driver::new(StreamStateMachine::open(rocks, cfg, T0, server()).unwrap());
    d.index = 2;
    assert!(d.sm.expiry_due(T0 + SEC));
    d.apply(command::expire(T0 + SEC));
    let st = d.sm.state();
    assert_eq!((st.msgs, st.first_seq), (1, 2));
}

#[test]
fn short_ttls_are_raised_to_the_marker_ttl_unless_history_is_one() {
    // Observed on nats-server 2.15.1 with a 5 s marker TTL.
    for (per, cases) in [
        (
            3,
            [("1s", "5"), ("2", "5"), ("10s", "10s"), ("never", "never")],
        ),
        (
            1,
            [("1s", "1s"), ("2", "2"), ("10s", "10s"), ("never", "never")],
        ),
    ] {
        let mut d = Driver::new(mem_sm(&format!(
            r#"{{"name":"T","subjects":["t.>"],"max_msgs_per_subject":{per},"subject_delete_marker_ttl":5000000000}}"#
        )));
        for (i, (sent, stored)) in cases.iter().enumerate() {
            d.publish(&format!("t.{i}"), &[("Nats-TTL", sent)], T0);
            assert_eq!(
                headers_at(&d, i as u64 + 1),
                format!("NATS/1.0\r\nNats-TTL: {stored}\r\n\r\n"),
                "per {per}, {sent}"
            );
        }
    }
    // A raised TTL expires at the floor, not before.
    let mut d = Driver::new(mem_sm(
        r#"{"name":"T","subjects":["t.>"],"max_msgs_per_subject":3,"subject_delete_marker_ttl":5000000000}"#,
    ));
    d.publish("t.a", &[("Nats-TTL", "1s")], T0);
    assert!(!d.sm.expiry_due(T0 + 4 * SEC));
    assert!(d.sm.expiry_due(T0 + 5 * SEC));
}

#[test]
fn only_the_waiting_proposer_republishes_with_the_previous_sequence_of_the_subject() {
    let cfg = r#"{"name":"R","subjects":["in.*"],
        "subject_transform":{"src":"in.*","dest":"stored.{{wildcard(1)}}"},
        "republish":{"src":"stored.*","dest":"out.{{wildcard(1)}}"}}"#;
    let out = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut proposer = mem_sm(cfg);
    let sink = out.clone();
    proposer.set_republish_sink(std::sync::Arc::new(move |subject, headers, payload| {
        sink.lock().push((
            subject.to_string(),
            String::from_utf8(headers).unwrap(),
            payload,
        ));
    }));
    let mut follower = mem_sm(cfg);
    let follower_out = std::sync::Arc::new(parking_lot::Mutex::new(0usize));
    let counted = follower_out.clone();
    follower.set_republish_sink(std::sync::Arc::new(move |_, _, _| *counted.lock() += 1));
    let plain = |s: &'static str| (s, Bytes::new(), Bytes::from_static(b"x"));
    let cmd = command::append_batch([plain("in.a"), plain("in.b"), plain("in.a")], T0);
    proposer.apply_shared(LogIndex(1), &cmd, true).unwrap();
    follower.apply_shared(LogIndex(1), &cmd, false).unwrap();
    // Stored under the transformed subject.
    assert_eq!(
        proposer.store().get(3).unwrap().unwrap().subject,
        "stored.a"
    );
    let out = out.lock();
    let got: Vec<(&str, &str)> = out
        .iter()
        .map(|(s, h, _)| {
            let last = h
                .split("\r\n")
                .find_map(|l| l.strip_prefix("Nats-Last-Sequence: "))
                .unwrap();
            (s.as_str(), last)
        })
        .collect();
    assert_eq!(got, [("out.a", "0"), ("out.b", "0"), ("out.a", "1")]);
    assert!(
        out[2]
            .1
            .contains("Nats-Subject: stored.a\r\nNats-Sequence: 3\r\n"),
        "{}",
        out[2].1
    );
    assert_eq!(*follower_out.lock(), 0, "a follower never republishes");
}

#[test]
fn a_schedule_fires_on_the_first_expire_at_its_time_identically_on_every_replica() {
    let cfg = r#"{"name":"S","subjects":["s.>"],"allow_msg_schedules":true}"#;
    let at = format!(
        "@at {}",
        crate::jetstream::api::types::go_time::format(T0 + 5 * SEC)
    );
    let hdrs = [
        ("Nats-Schedule", at.as_str()),
        ("Nats-Schedule-Target", "s.out"),
    ];
    let mut replicas = [Driver::new(mem_sm(cfg)), Driver::new(mem_sm(cfg))];
    for d in &mut replicas {
        assert_eq!(d.publish("s.plan", &hdrs, T0), r#"{"stream":"S","seq":1}"#);
        assert_eq!(d.sm.next_expiry(), Some(T0 + 5 * SEC));
        d.apply(command::expire(T0 + 5 * SEC - 1));
        assert_eq!(d.sm.state().last_seq, 1, "not before its time");
        d.apply(command::expire(T0 + 6 * SEC));
        d.apply(command::expire(T0 + 7 * SEC));
    }
    let fired: Vec<_> = replicas
        .iter()
        .map(|d| d.sm.store().get(2).unwrap().expect("fired"))
        .collect();
    assert_eq!(fired[0], fired[1]);
    assert_eq!(fired[0].subject, "s.out");
    assert_eq!(fired[0].timestamp_ns, T0 + 6 * SEC);
    assert_eq!(
        super::headers::get(&fired[0].headers, "Nats-Scheduler"),
        Some("s.plan")
    );
    for d in &replicas {
        let st = d.sm.state();
        assert_eq!(
            (st.msgs, st.last_seq),
            (1, 2),
            "fired once, schedule removed"
        );
        assert_eq!(d.sm.next_expiry(), None);
    }
}

#[test]
fn an_atomic_batch_is_applied_whole_or_refused_whole_with_one_answer() {
    let mut d = Driver::new(mem_sm(
        r#"{"name":"S","subjects":["s.>"],"allow_atomic":true}"#,
    ));
    let wrong = Bytes::from(block(&[("Nats-Expected-Last-Subject-Sequence", "9")]));
    let publishes = |third: Bytes| {
        command::atomic_batch(
            [
                ("s.a", Bytes::new(), Bytes::from_static(b"1")),
                ("s.b", Bytes::new(), Bytes::from_static(b"2")),
                ("s.c", third, Bytes::from_static(b"3")),
            ],
            T0,
            "b1",
        )
    };
    d.index += 1;
    let framed = d.sm.apply(LogIndex(d.index), &publishes(wrong)).unwrap();
    let answers = command::split_answers(&framed);
    assert_eq!(answers.len(), 3);
    assert!(answers[0].is_empty() && answers[1].is_empty());
    assert!(
        String::from_utf8_lossy(&answers[2]).contains(r#""err_code":10071"#),
        "{answers:?}"
    );
    assert_eq!(
        d.sm.state().last_seq,
        0,
        "nothing of a refused batch is stored"
    );

    d.index += 1;
    let framed =
        d.sm.apply(LogIndex(d.index), &publishes(Bytes::new()))
            .unwrap();
    let answers = command::split_answers(&framed);
    assert_eq!(
        &answers[2][..],
        br#"{"stream":"S","seq":3,"batch":"b1","count":3}"#
    );
    assert_eq!(d.sm.state().msgs, 3);
}
