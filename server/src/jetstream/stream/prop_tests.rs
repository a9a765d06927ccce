//! Property tests: random command sequences give identical answers and states on the memory
//! and RocksDB stores, and a replica restored from a snapshot taken at any point continues
//! exactly like the original.

use bytes::Bytes;
use jetraft_raft::{LogIndex, ReplicatedStateMachine};
use jetraft_storage::Db;
use jetraft_storage::mem::MemStreamStore;
use jetraft_storage::rocks::RocksStreamStore;
use jetraft_storage::stream::StreamUid;
use proptest::prelude::*;

use super::headers::block;
use super::{ServerIdentity, StreamStateMachine, command};
use crate::jetstream::api::types::{StreamConfig, decode};
use crate::jetstream::api::validate::normalize;

const T0: u64 = 1_796_199_467_000_000_000;
const CFG: &str = r#"{"name":"P","subjects":["p.*"],"max_msgs":12,"max_msgs_per_subject":4,"allow_rollup_hdrs":true,"duplicate_window":3000000000}"#;

/// A generated command.
#[derive(Debug, Clone)]
enum Op {
    Publish {
        subject: u8,
        msg_id: Option<u8>,
        expected_last: Option<u8>,
        rollup: bool,
        gap_ms: u16,
    },
    Purge {
        subject: Option<u8>,
        keep: u8,
    },
    Delete(u8),
    Expire,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3u8, proptest::option::of(0..6u8), proptest::option::weighted(0.2, 0..20u8), proptest::bool::weighted(0.1), 0..2000u16)
            .prop_map(|(subject, msg_id, expected_last, rollup, gap_ms)| Op::Publish { subject, msg_id, expected_last, rollup, gap_ms }),
        1 => (proptest::option::of(0..3u8), 0..3u8).prop_map(|(subject, keep)| Op::Purge { subject, keep }),
        1 => (1..30u8).prop_map(Op::Delete),
        1 => Just(Op::Expire),
    ]
}

/// Encodes ops with a running clock.
fn commands(ops: &[Op]) -> Vec<Bytes> {
    let mut now = T0;
    ops.iter()
        .map(|op| match op {
            Op::Publish {
                subject,
                msg_id,
                expected_last,
                rollup,
                gap_ms,
            } => {
                now += u64::from(*gap_ms) * 1_000_000;
                let mut h: Vec<(&str, String)> = Vec::new();
                if let Some(id) = msg_id {
                    h.push(("Nats-Msg-Id", format!("id{id}")));
                }
                if let Some(seq) = expected_last {
                    h.push(("Nats-Expected-Last-Sequence", seq.to_string()));
                }
                if *rollup {
                    h.push(("Nats-Rollup", "sub".into()));
                }
                let pairs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let headers = if pairs.is_empty() {
                    Bytes::new()
                } else {
                    Bytes::from(block(&pairs))
                };
                command::append(
                    &format!("p.{subject}"),
                    headers,
                    Bytes::from_static(b"d"),
                    now,
                )
            }
            Op::Purge { subject, keep } => {
                let filter = subject.map(|s| format!("p.{s}")).unwrap_or_default();
                command::purge(&filter, 0, u64::from(*keep))
            }
            Op::Delete(seq) => command::delete_msg(u64::from(*seq), false),
            Op::Expire => command::expire(now),
        })
        .collect()
}

fn config() -> StreamConfig {
    let mut cfg: StreamConfig = decode(CFG.as_bytes()).unwrap();
    normalize(&mut cfg);
    cfg
}

fn server() -> ServerIdentity {
    ServerIdentity {
        version: "2.15.1".into(),
        api_level: 5,
        domain: None,
    }
}

fn mem() -> StreamStateMachine {
    StreamStateMachine::open(
        Box::new(MemStreamStore::new(StreamUid(1))),
        config(),
        T0,
        server(),
    )
    .unwrap()
}

fn run(sm: &mut StreamStateMachine, cmds: &[Bytes], first_index: u64) -> Vec<Bytes> {
    cmds.iter()
        .enumerate()
        .map(|(i, c)| sm.apply(LogIndex(first_index + i as u64), c).unwrap())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn memory_and_rocks_machines_agree(ops in proptest::collection::vec(op(), 1..60)) {
        let cmds = commands(&ops);
        let mut a = mem();
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let store = Box::new(RocksStreamStore::open(db, StreamUid(2)).unwrap());
        let mut b = StreamStateMachine::open(store, config(), T0, server()).unwrap();
        prop_assert_eq!(run(&mut a, &cmds, 1), run(&mut b, &cmds, 1));
        prop_assert_eq!(a.snapshot().unwrap(), b.snapshot().unwrap());
        let (sa, sb) = (a.state(), b.state());
        prop_assert_eq!((sa.msgs, sa.first_seq, sa.last_seq, sa.last_ts), (sb.msgs, sb.first_seq, sb.last_seq, sb.last_ts));
    }

    #[test]
    fn restored_replica_continues_identically(ops in proptest::collection::vec(op(), 1..60), cut in 0usize..60) {
        let cmds = commands(&ops);
        let cut = cut.min(cmds.len());
        let mut original = mem();
        run(&mut original, &cmds[..cut], 1);
        let mut replica = mem();
        replica.restore(&original.snapshot().unwrap()).unwrap();
        let rest = &cmds[cut..];
        prop_assert_eq!(run(&mut original, rest, cut as u64 + 1), run(&mut replica, rest, cut as u64 + 1));
        prop_assert_eq!(original.snapshot().unwrap(), replica.snapshot().unwrap());
        prop_assert_eq!(original.state(), replica.state());
    }
}
