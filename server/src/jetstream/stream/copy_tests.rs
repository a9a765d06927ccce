//! Mirror and source copies (`Append.origin_seq`): stored at the origin sequence (mirror) or the
//! next one (source), ignored at or below the copy position, and the source positions survive a
//! snapshot and a restart.

use bytes::Bytes;
use jetraft_raft::{LogIndex, ReplicatedStateMachine};
use jetraft_storage::mem::MemStreamStore;
use jetraft_storage::stream::StreamUid;

use super::*;
use crate::jetstream::api::types::requests::decode;
use crate::jetstream::api::validate::normalize;

fn sm(json: &str) -> StreamStateMachine {
    let mut cfg: StreamConfig = decode(json.as_bytes()).unwrap();
    normalize(&mut cfg);
    let store = Box::new(MemStreamStore::new(StreamUid(1)));
    let server = ServerIdentity {
        version: "2.15.1".into(),
        api_level: 5,
        domain: None,
    };
    StreamStateMachine::open(store, cfg, 1_000, server).unwrap()
}

fn copy(sm: &mut StreamStateMachine, index: u64, origin_seq: u64, key: &str, ts: u64) -> String {
    let cmd = command::copy(
        "o.a",
        Bytes::new(),
        Bytes::from_static(b"x"),
        ts,
        origin_seq,
        key,
    );
    let out = sm.apply(LogIndex(index), &cmd).unwrap();
    String::from_utf8(out.to_vec()).unwrap()
}

#[test]
fn mirror_copies_keep_origin_sequences_and_times_and_ignore_repeats() {
    let mut m = sm(r#"{"name":"M","mirror":{"name":"O"}}"#);
    assert_eq!(copy(&mut m, 1, 2, "", 50), r#"{"stream":"M","seq":2}"#);
    assert_eq!(copy(&mut m, 2, 5, "", 60), r#"{"stream":"M","seq":5}"#);
    // Copied again after a leader change: nothing changes.
    assert!(copy(&mut m, 3, 5, "", 70).contains(r#""duplicate": true"#));
    assert!(copy(&mut m, 4, 2, "", 70).contains(r#""duplicate": true"#));
    let st = m.state();
    assert_eq!((st.msgs, st.first_seq, st.last_seq), (2, 2, 5));
    assert_eq!(m.store().get(5).unwrap().unwrap().timestamp_ns, 60);
}

#[test]
fn source_positions_are_per_key_and_survive_snapshots() {
    let mut s = sm(r#"{"name":"S","subjects":["s.>"],"sources":[{"name":"A"},{"name":"B"}]}"#);
    assert_eq!(copy(&mut s, 1, 7, "A||", 10), r#"{"stream":"S","seq":1}"#);
    assert_eq!(copy(&mut s, 2, 3, "B||", 11), r#"{"stream":"S","seq":2}"#);
    assert!(copy(&mut s, 3, 7, "A||", 12).contains(r#""duplicate": true"#));
    assert_eq!(copy(&mut s, 4, 8, "A||", 13), r#"{"stream":"S","seq":3}"#);
    assert_eq!((s.source_position("A||"), s.source_position("B||")), (8, 3));

    let snap = s.snapshot().unwrap();
    let mut other = sm(r#"{"name":"S","subjects":["s.>"]}"#);
    other.restore(&snap).unwrap();
    assert_eq!(other.source_position("A||"), 8);
    assert!(copy(&mut other, 5, 8, "A||", 14).contains(r#""duplicate": true"#));
    assert_eq!(other.state().last_seq, 3);
}

#[test]
fn a_mirror_copy_into_a_promoted_stream_is_ignored() {
    let mut s = sm(r#"{"name":"S"}"#);
    assert!(copy(&mut s, 1, 4, "", 10).contains(r#""duplicate": true"#));
    assert_eq!(s.state().last_seq, 0);
}
