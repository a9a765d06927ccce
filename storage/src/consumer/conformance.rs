//! The conformance suite every [`ConsumerStore`] runs; [`consumer_conformance_tests!`]
//! instantiates it.

use crate::consumer::{ConsumerState, ConsumerStore};
use crate::stream::StreamUid;

fn sample(n: u64) -> ConsumerState {
    let mut s = ConsumerState::default();
    for i in 1..=n {
        s.record_delivery(i * 2, i, 1_000 + i);
    }
    s.record_delivery(4, n + 1, 5_000);
    s
}

pub(crate) fn save_load_delete_list<S: ConsumerStore>(mut s: S) {
    let (a, b) = (StreamUid(1), StreamUid(2));
    assert!(s.load(a, "c1").unwrap().is_none());
    s.save(a, "c2", &sample(3)).unwrap();
    s.save(a, "c1", &sample(5)).unwrap();
    s.save(b, "c1", &sample(1)).unwrap();
    assert_eq!(s.load(a, "c1").unwrap(), Some(sample(5)));
    assert_eq!(s.load(b, "c1").unwrap(), Some(sample(1)));
    assert_eq!(s.list(a).unwrap(), vec!["c1", "c2"]);
    s.save(a, "c1", &sample(2)).unwrap();
    assert_eq!(s.load(a, "c1").unwrap(), Some(sample(2)));
    assert!(s.delete(a, "c1").unwrap());
    assert!(!s.delete(a, "c1").unwrap());
    assert_eq!(s.list(a).unwrap(), vec!["c2"]);
    assert_eq!(s.list(b).unwrap(), vec!["c1"]);
    assert!(s.list(StreamUid(3)).unwrap().is_empty());
}

pub(crate) fn ack_and_redelivery_bookkeeping<S: ConsumerStore>(mut s: S) {
    let mut st = ConsumerState::default();
    for seq in 1..=5 {
        st.record_delivery(seq, seq, seq * 10);
    }
    assert!(st.ack(1));
    assert!(!st.ack(1));
    assert_eq!(st.ack_floor.stream_seq, 1);
    assert!(st.ack(3));
    assert_eq!(st.ack_floor.stream_seq, 1);
    st.record_delivery(2, 6, 100);
    assert_eq!(st.pending[&2].deliveries, 2);
    assert_eq!(st.due_for_redelivery(50), vec![4, 5]);
    st.check().unwrap();
    s.save(StreamUid(9), "d", &st).unwrap();
    let back = s.load(StreamUid(9), "d").unwrap().unwrap();
    assert_eq!(back, st);
    for seq in [2, 4, 5] {
        assert!(st.ack(seq));
    }
    assert_eq!(st.ack_floor, st.delivered);
    assert!(st.pending.is_empty());
}

pub(crate) fn large_pending_set_round_trips<S: ConsumerStore>(mut s: S) {
    let mut st = ConsumerState::default();
    for seq in 1..=100_000u64 {
        st.record_delivery(seq, seq, 1_700_000_000_000_000_000 + seq);
    }
    s.save(StreamUid(1), "big", &st).unwrap();
    assert_eq!(s.load(StreamUid(1), "big").unwrap(), Some(st));
}

pub(crate) fn config_records_are_per_consumer<S: ConsumerStore>(mut s: S) {
    let (a, b) = (StreamUid(1), StreamUid(2));
    assert!(s.configs(a).unwrap().is_empty());
    s.save(a, "c1", &sample(1)).unwrap();
    s.save_config(a, "c2", b"two").unwrap();
    s.save_config(a, "c1", b"one").unwrap();
    s.save_config(b, "c1", b"other stream").unwrap();
    s.save_config(a, "c1", b"one again").unwrap();
    assert_eq!(
        s.configs(a).unwrap(),
        vec![
            ("c1".to_string(), b"one again".to_vec()),
            ("c2".to_string(), b"two".to_vec())
        ]
    );
    // Config records are not states.
    assert_eq!(s.list(a).unwrap(), vec!["c1"]);
    assert!(s.load(a, "c2").unwrap().is_none());
    // A delete drops both, with or without a state.
    assert!(s.delete(a, "c1").unwrap());
    assert!(!s.delete(a, "c2").unwrap());
    assert!(s.configs(a).unwrap().is_empty());
    assert!(s.list(a).unwrap().is_empty());
    assert_eq!(
        s.configs(b).unwrap(),
        vec![("c1".to_string(), b"other stream".to_vec())]
    );
}

/// Instantiates the consumer conformance checks; `$make` returns `(guard, store)`.
macro_rules! consumer_conformance_tests {
    ($make:expr) => {
        crate::consumer::conformance::consumer_conformance_tests!(@each $make;
            save_load_delete_list, ack_and_redelivery_bookkeeping, large_pending_set_round_trips,
            config_records_are_per_consumer);
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                #[allow(clippy::redundant_closure_call)]
                let (_guard, store) = ($make)();
                crate::consumer::conformance::$name(store);
            }
        )*
    };
}
pub(crate) use consumer_conformance_tests;
