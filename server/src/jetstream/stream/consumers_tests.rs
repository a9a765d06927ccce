//! Replicated consumer state: start positions, progress, retention, persistence, snapshots.

use bytes::Bytes;
use jetraft_proto::stream::{ConsumerProgress, Delivery};
use jetraft_raft::{AppliedState, LogIndex, ReplicatedStateMachine};
use jetraft_storage::Db;
use jetraft_storage::mem::MemStreamStore;
use jetraft_storage::rocks::{RocksConsumerStore, RocksStreamStore};
use jetraft_storage::stream::StreamUid;

use super::super::{ServerIdentity, StreamStateMachine, command};
use super::{StoredConsumer, count_last_per_subject, is_initial_last_per_subject};
use crate::jetstream::api::types::StreamConfig;
use crate::jetstream::api::types::consumer::{AckPolicy, ConsumerConfig, DeliverPolicy};
use crate::jetstream::api::types::requests::decode;
use crate::jetstream::api::validate::normalize;
use crate::jetstream::stream::test_consumers::{ConsumerWrite, HookedConsumers};

const T0: u64 = 1_796_199_467_000_000_000;

fn server() -> ServerIdentity {
    ServerIdentity {
        version: "2.15.1".into(),
        api_level: 5,
        domain: None,
    }
}

fn stream_cfg(json: &str) -> StreamConfig {
    let mut cfg: StreamConfig = decode(json.as_bytes()).unwrap();
    normalize(&mut cfg);
    cfg
}

struct Driver {
    sm: StreamStateMachine,
    index: u64,
}

impl Driver {
    fn mem(json: &str) -> Self {
        let store = Box::new(MemStreamStore::new(StreamUid(1)));
        Self {
            sm: StreamStateMachine::open(store, stream_cfg(json), T0, server()).unwrap(),
            index: 0,
        }
    }

    fn apply(&mut self, cmd: Bytes) {
        self.index += 1;
        self.sm.apply(LogIndex(self.index), &cmd).unwrap();
    }

    fn publish(&mut self, subject: &str) {
        let ts = T0 + self.index;
        self.apply(command::append(subject, Bytes::new(), Bytes::new(), ts));
    }

    fn create(&mut self, name: &str, cfg: ConsumerConfig) {
        self.apply(command::consumer_create(name, &cfg, T0));
    }

    fn deliver(&mut self, name: &str, seqs: &[(u64, u64)]) {
        self.apply(command::consumer_progress(ConsumerProgress {
            name: name.into(),
            delivered: seqs
                .iter()
                .map(|(s, d)| Delivery {
                    stream_seq: *s,
                    consumer_seq: *d,
                    delivered_ns: T0,
                })
                .collect(),
            ..Default::default()
        }));
    }

    fn ack(&mut self, name: &str, seqs: &[u64]) {
        self.apply(command::consumer_progress(ConsumerProgress {
            name: name.into(),
            acked: seqs.to_vec(),
            now_ns: T0,
            ..Default::default()
        }));
    }
}

fn explicit() -> ConsumerConfig {
    ConsumerConfig {
        ack_policy: AckPolicy::Explicit,
        ack_wait: 30_000_000_000,
        ..Default::default()
    }
}

#[test]
fn start_positions_follow_the_deliver_policy() {
    let mut d = Driver::mem(r#"{"name":"S","subjects":["s.*"]}"#);
    for s in ["s.a", "s.b", "s.a", "s.c", "s.b"] {
        d.publish(s);
    }
    let cases = [
        (DeliverPolicy::All, "", 0),
        (DeliverPolicy::Last, "", 4),
        (DeliverPolicy::Last, "s.a", 2),
        (DeliverPolicy::New, "", 5),
        (DeliverPolicy::LastPerSubject, "", 2),
        (DeliverPolicy::All, "s.c", 3),
    ];
    for (i, (policy, filter, delivered)) in cases.into_iter().enumerate() {
        let name = format!("c{i}");
        d.create(
            &name,
            ConsumerConfig {
                deliver_policy: policy,
                filter_subject: filter.into(),
                ..explicit()
            },
        );
        let rec = d.sm.consumer(&name).unwrap();
        assert_eq!(
            rec.state.delivered.stream_seq, delivered,
            "{policy:?} {filter}"
        );
        assert_eq!(
            rec.state.ack_floor.stream_seq, delivered,
            "{policy:?} {filter}"
        );
    }
    d.create(
        "seq",
        ConsumerConfig {
            deliver_policy: DeliverPolicy::ByStartSequence,
            opt_start_seq: 3,
            ..explicit()
        },
    );
    assert_eq!(d.sm.consumer("seq").unwrap().next_seq(), 3);
    assert_eq!(d.sm.consumer_count(), 7);
}

/// The initial set of a `last_per_subject` consumer is fixed when it is created: a later
/// publish on a subject neither removes that subject's initial message nor changes the count
/// (an object store watch with history must still see the meta that was current at creation).
#[test]
fn last_per_subject_initial_set_ignores_later_publishes() {
    let mut d = Driver::mem(r#"{"name":"S","subjects":["s.*"]}"#);
    for s in ["s.a", "s.b", "s.a", "s.c"] {
        d.publish(s);
    }
    d.create(
        "lps",
        ConsumerConfig {
            deliver_policy: DeliverPolicy::LastPerSubject,
            ..explicit()
        },
    );
    let lps_end = d.sm.consumer("lps").unwrap().lps_end;
    assert_eq!(lps_end, 4);
    let store = d.sm.store();
    // Initial set: s.b@2, s.a@3, s.c@4.
    assert_eq!(count_last_per_subject(store, 1, lps_end, &[]).unwrap(), 3);
    assert!(!is_initial_last_per_subject(store, 1, "s.a", lps_end).unwrap());
    assert!(is_initial_last_per_subject(store, 3, "s.a", lps_end).unwrap());

    d.publish("s.a"); // 5
    d.publish("s.d"); // 6
    let store = d.sm.store();
    assert!(is_initial_last_per_subject(store, 3, "s.a", lps_end).unwrap());
    assert!(!is_initial_last_per_subject(store, 1, "s.a", lps_end).unwrap());
    assert_eq!(count_last_per_subject(store, 1, lps_end, &[]).unwrap(), 3);
    assert_eq!(count_last_per_subject(store, 3, lps_end, &[]).unwrap(), 2);
    assert_eq!(count_last_per_subject(store, 4, lps_end, &[]).unwrap(), 1);
    assert_eq!(
        count_last_per_subject(store, 1, lps_end, &["s.a".to_string()]).unwrap(),
        1
    );
}

#[test]
fn acks_move_the_floor_only_over_contiguous_acks() {
    let mut d = Driver::mem(r#"{"name":"S","subjects":["s"]}"#);
    for _ in 0..5 {
        d.publish("s");
    }
    d.create("c", explicit());
    d.deliver("c", &[(1, 1), (2, 2), (3, 3), (4, 4)]);
    d.ack("c", &[1, 2, 4]);
    let st = &d.sm.consumer("c").unwrap().state;
    assert_eq!(st.ack_floor.stream_seq, 2);
    assert_eq!(st.pending.len(), 1);
    // A replayed ack and an ack of an unknown sequence change nothing.
    d.ack("c", &[4, 9]);
    assert_eq!(d.sm.consumer("c").unwrap().state.ack_floor.stream_seq, 2);
    d.ack("c", &[3]);
    let st = &d.sm.consumer("c").unwrap().state;
    assert_eq!(st.ack_floor.stream_seq, 4);
    assert_eq!(st.ack_floor.consumer_seq, 4);
    assert!(st.pending.is_empty());
    // A stale delivery below the floor is ignored: the floor never moves back.
    d.deliver("c", &[(2, 9)]);
    assert!(d.sm.consumer("c").unwrap().state.pending.is_empty());
}

#[test]
fn ack_all_acks_everything_below() {
    let mut d = Driver::mem(r#"{"name":"S","subjects":["s"]}"#);
    for _ in 0..3 {
        d.publish("s");
    }
    d.create(
        "c",
        ConsumerConfig {
            ack_policy: AckPolicy::All,
            ..explicit()
        },
    );
    d.deliver("c", &[(1, 1), (2, 2), (3, 3)]);
    d.ack("c", &[2]);
    let st = &d.sm.consumer("c").unwrap().state;
    assert_eq!(st.ack_floor.stream_seq, 2);
    assert_eq!(st.pending.keys().copied().collect::<Vec<_>>(), vec![3]);
}

#[test]
fn work_queue_removes_acked_messages() {
    let mut d = Driver::mem(r#"{"name":"S","subjects":["s"],"retention":"workqueue"}"#);
    for _ in 0..3 {
        d.publish("s");
    }
    d.create("c", explicit());
    d.deliver("c", &[(1, 1), (2, 2)]);
    d.ack("c", &[2]);
    let st = d.sm.state();
    assert_eq!(st.msgs, 2);
    assert!(d.sm.store().get(2).unwrap().is_none());
}

#[test]
fn interest_removes_once_every_matching_consumer_acked_and_on_delete() {
    let mut d = Driver::mem(r#"{"name":"S","subjects":["s.*"],"retention":"interest"}"#);
    d.create("a", explicit());
    d.create(
        "b",
        ConsumerConfig {
            filter_subject: "s.x".into(),
            ..explicit()
        },
    );
    d.publish("s.x");
    d.publish("s.y");
    d.deliver("a", &[(1, 1), (2, 2)]);
    d.ack("a", &[1, 2]);
    // s.y only interests `a`: gone; s.x waits for `b`.
    assert_eq!(d.sm.state().msgs, 1);
    assert!(d.sm.store().get(1).unwrap().is_some());
    // Deleting `b` frees what only it held.
    d.apply(command::consumer_delete("b"));
    assert_eq!(d.sm.state().msgs, 0);
    assert_eq!(d.sm.consumer_count(), 1);
}

#[test]
fn ack_none_counts_as_acked_on_delivery() {
    let mut d = Driver::mem(r#"{"name":"S","subjects":["s"]}"#);
    d.publish("s");
    d.create("c", ConsumerConfig::default());
    d.deliver("c", &[(1, 1)]);
    let st = &d.sm.consumer("c").unwrap().state;
    assert_eq!(st.ack_floor.stream_seq, 1);
    assert!(st.pending.is_empty());
}

#[test]
fn consumers_survive_reopen_and_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let cfg = stream_cfg(r#"{"name":"S","subjects":["s"]}"#);
    let open = |db: &Db| {
        StreamStateMachine::open_with(
            Box::new(RocksStreamStore::open(db.clone(), StreamUid(5)).unwrap()),
            Box::new(RocksConsumerStore::new(db.clone())),
            cfg.clone(),
            T0,
            server(),
        )
        .unwrap()
    };
    let mut d = Driver {
        sm: open(&db),
        index: 0,
    };
    for _ in 0..4 {
        d.publish("s");
    }
    d.create("c", explicit());
    d.deliver("c", &[(1, 1), (2, 2), (3, 3)]);
    d.ack("c", &[1, 2]);
    d.sm.save_applied(&AppliedState {
        last_applied: None,
        membership: Default::default(),
    })
    .unwrap();
    let before = d.sm.consumer("c").unwrap().clone();
    let snap = d.sm.snapshot().unwrap();
    drop(d);
    let reopened = open(&db);
    let after = reopened.consumer("c").unwrap();
    assert_eq!(after.state, before.state);
    assert_eq!(after.config, before.config);

    let mut other = Driver::mem(r#"{"name":"S","subjects":["s"]}"#);
    other.create("old", explicit());
    other.sm.restore(&snap).unwrap();
    assert!(other.sm.consumer("old").is_none());
    assert_eq!(other.sm.consumer("c").unwrap().state, before.state);
    assert_eq!(other.sm.consumer_count(), 1);
}

#[test]
fn interest_keeps_no_message_that_no_consumer_filter_matches() {
    let mut d = Driver::mem(r#"{"name":"S","subjects":["s.*"],"retention":"interest"}"#);
    d.create(
        "only_x",
        ConsumerConfig {
            filter_subject: "s.x".into(),
            ..explicit()
        },
    );
    // Acknowledged with its sequence, but nobody wants s.y: not kept.
    d.publish("s.y");
    assert_eq!(d.sm.state().msgs, 0);
    assert!(d.sm.store().get(1).unwrap().is_none());
    d.publish("s.x");
    let st = d.sm.state();
    assert_eq!((st.msgs, st.first_seq, st.last_seq), (1, 2, 2));
}

#[test]
fn a_consumer_create_writes_that_consumers_config_only() {
    // 200 creates, each saved on its own: 200 config records written, not 1 + 2 + ... + 200
    // (every config again on every create made N creates cost O(N^2) bytes).
    let writes = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = writes.clone();
    let consumers = HookedConsumers::new(move |w| {
        if w == ConsumerWrite::Config {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let mut d = Driver {
        sm: StreamStateMachine::open_with(
            Box::new(MemStreamStore::new(StreamUid(1))),
            Box::new(consumers),
            stream_cfg(r#"{"name":"S","subjects":["s"]}"#),
            T0,
            server(),
        )
        .unwrap(),
        index: 0,
    };
    let saved = AppliedState::default();
    for i in 0..200 {
        d.create(&format!("c{i}"), explicit());
        d.sm.save_applied(&saved).unwrap();
    }
    assert_eq!(writes.load(std::sync::atomic::Ordering::Relaxed), 200);
    // A change of one config writes that one again; a delete writes none.
    let mut cfg = explicit();
    cfg.description = "changed".into();
    d.create("c7", cfg);
    d.apply(command::consumer_delete("c8"));
    d.sm.save_applied(&saved).unwrap();
    assert_eq!(writes.load(std::sync::atomic::Ordering::Relaxed), 201);
}

#[test]
fn consumer_configs_survive_reopen_one_record_each_and_an_old_list_is_moved() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let cfg = stream_cfg(r#"{"name":"S","subjects":["s"]}"#);
    let uid = StreamUid(5);
    let open = |db: &Db| {
        StreamStateMachine::open_with(
            Box::new(RocksStreamStore::open(db.clone(), uid).unwrap()),
            Box::new(RocksConsumerStore::new(db.clone())),
            cfg.clone(),
            T0,
            server(),
        )
        .unwrap()
    };
    let names = |sm: &StreamStateMachine| sm.consumers().keys().cloned().collect::<Vec<_>>();
    // A store written before the per-consumer records: one list of every consumer's config.
    drop(open(&db));
    {
        use jetraft_storage::consumer::ConsumerStore;
        let mut store = RocksStreamStore::open(db.clone(), uid).unwrap();
        let old: Vec<StoredConsumer> = ["a", "b"]
            .iter()
            .map(|n| StoredConsumer {
                name: n.to_string(),
                config: explicit(),
                created_ns: T0,
                lps_end: 0,
            })
            .collect();
        store
            .put_meta(
                super::super::META_CONSUMERS,
                &serde_json::to_vec(&old).unwrap(),
            )
            .unwrap();
        let mut st = jetraft_storage::consumer::ConsumerState::default();
        st.record_delivery(1, 1, T0);
        RocksConsumerStore::new(db.clone())
            .save(uid, "a", &st)
            .unwrap();
    }
    let sm = open(&db);
    assert_eq!(names(&sm), ["a", "b"]);
    assert_eq!(sm.consumer("a").unwrap().state.delivered.stream_seq, 1);
    drop(sm);
    // Moved into records: the list is empty now, and the records alone give the consumers.
    {
        use jetraft_storage::consumer::ConsumerStore;
        let store = RocksStreamStore::open(db.clone(), uid).unwrap();
        assert_eq!(
            store.get_meta(super::super::META_CONSUMERS).unwrap(),
            Some(b"[]".to_vec())
        );
        assert_eq!(
            RocksConsumerStore::new(db.clone())
                .configs(uid)
                .unwrap()
                .len(),
            2
        );
    }
    let mut d = Driver {
        sm: open(&db),
        index: 0,
    };
    assert_eq!(names(&d.sm), ["a", "b"]);
    d.create("c", explicit());
    d.apply(command::consumer_delete("a"));
    d.sm.save_applied(&AppliedState::default()).unwrap();
    drop(d);
    let sm = open(&db);
    assert_eq!(names(&sm), ["b", "c"]);
    assert_eq!(sm.consumer("c").unwrap().config, explicit());
}
