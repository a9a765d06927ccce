//! Crash test of the state writes that skip the WAL (stream messages, index, counters, meta
//! records and consumer states).
//!
//! The test binary re-runs itself as a child (`child_applies_until_killed`, active only when
//! `JETRAFT_UNLOGGED_CRASH_DIR` is set). The child stores messages the way a stream's apply does
//! (staged, then written with a meta record naming the last sequence, then a consumer state
//! naming it too), and every few batches passes the durability barrier and prints
//! `DURABLE <seq>`. The parent SIGKILLs it at a random point and reopens the database: the
//! stream must open (its counters agree with its subject index), hold every message up to the
//! last durable sequence, hold exactly the messages `first..=last` with their original
//! contents, and its meta record must name its last sequence: the state on disk is what a prefix
//! of the writes made, never a mix. Every loop is bounded in count and time.

use std::time::{Duration, Instant};

use rand::Rng;

use crate::consumer::{ConsumerState, ConsumerStore, SequencePair};
use crate::db::Db;
use crate::rocks::crash_tests::run_child_until_killed;
use crate::rocks::{RocksConsumerStore, RocksStreamStore};
use crate::stream::conformance::msg;
use crate::stream::{StreamStore, StreamUid};

const CHILD_ENV: &str = "JETRAFT_UNLOGGED_CRASH_DIR";
const UID: StreamUid = StreamUid(7);
/// The meta record kind the test writes (any user kind).
const META_LAST: u8 = crate::keys::META_USER_MIN;

fn subject(seq: u64) -> String {
    format!("s.{}", seq % 11)
}

/// The child side: applies until killed (or 30 s pass). A no-op in a normal test run.
#[test]
fn child_applies_until_killed() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let db = Db::open(std::path::Path::new(&dir)).expect("open");
    let mut stream = RocksStreamStore::open(db.clone(), UID).expect("stream");
    let mut consumers = RocksConsumerStore::new(db.clone());
    let mut next = stream.state().last_seq + 1;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut batches = 0u64;
    while Instant::now() < deadline {
        stream.begin_batch();
        for seq in next..next + 16 {
            stream.store_msg(&msg(seq, &subject(seq))).expect("store");
        }
        let last = next + 15;
        next += 16;
        stream
            .put_metas(&[(META_LAST, &last.to_be_bytes())])
            .expect("put metas");
        let seqs = SequencePair {
            consumer_seq: last,
            stream_seq: last,
        };
        let state = ConsumerState {
            delivered: seqs,
            ack_floor: seqs,
            ..ConsumerState::default()
        };
        consumers.save(UID, "c", &state).expect("consumer");
        batches += 1;
        if batches.is_multiple_of(8) {
            let barrier = stream.durability_barrier().expect("a barrier");
            barrier().expect("flush");
            println!("DURABLE {last}");
        }
    }
}

#[test]
fn unlogged_state_is_a_prefix_of_its_writes_after_sigkill_10_rounds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = rand::rng();
    let started = Instant::now();
    let mut max_durable = 0u64;
    for round in 0..10 {
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "crash test over time budget"
        );
        let durable = run_child_until_killed(
            "rocks::unlogged_crash_tests::child_applies_until_killed",
            (CHILD_ENV, dir.path()),
            "DURABLE ",
            Duration::from_millis(rng.random_range(20..300)),
        );
        if let Some(d) = durable.into_iter().max() {
            max_durable = max_durable.max(d);
        }

        let db = Db::open(dir.path()).expect("reopen after kill");
        let stream = RocksStreamStore::open(db.clone(), UID).expect("counters agree with index");
        let st = stream.state();
        assert!(
            st.last_seq >= max_durable,
            "round {round}: last {} < durable {max_durable}",
            st.last_seq
        );
        assert_eq!(st.first_seq, 1, "round {round}");
        assert_eq!(st.msgs, st.last_seq, "round {round}: a hole");
        for seq in (1..=st.last_seq).step_by(97).chain([st.last_seq]) {
            let got = stream.get(seq).expect("read").expect("present");
            assert_eq!(got, msg(seq, &subject(seq)), "round {round}: seq {seq}");
        }
        let meta = stream
            .get_meta(META_LAST)
            .expect("meta")
            .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")));
        assert_eq!(
            meta,
            Some(st.last_seq),
            "round {round}: meta record vs data"
        );
        let consumer = RocksConsumerStore::new(db.clone())
            .load(UID, "c")
            .expect("consumer");
        let floor = consumer.map_or(0, |c| c.ack_floor.stream_seq);
        assert!(
            floor <= st.last_seq && floor + 16 >= st.last_seq,
            "round {round}: consumer floor {floor} vs stream last {}",
            st.last_seq
        );
    }
    assert!(max_durable > 0, "no round reached a durable point");
    eprintln!("unlogged crash test: 10 kills, durable up to {max_durable}");
}
