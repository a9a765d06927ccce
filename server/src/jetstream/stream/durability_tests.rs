//! What a crash leaves of a file stream's state machine: an apply batch's appends are written
//! with its applied log id, or not at all.

use bytes::Bytes;
use jetraft_raft::{AppliedState, LogIndex, ReplicatedStateMachine};
use jetraft_storage::Db;
use jetraft_storage::rocks::RocksStreamStore;
use jetraft_storage::stream::StreamUid;

use super::{META_CONFIG, ServerIdentity, StoredMeta, StreamStateMachine, command};
use crate::jetstream::api::types::StreamConfig;
use crate::jetstream::api::types::requests::decode;
use crate::jetstream::api::validate::normalize;

const T0: u64 = 1_796_199_467_000_000_000;

fn open(db: &Db) -> StreamStateMachine {
    let mut cfg: StreamConfig = decode(br#"{"name":"D","subjects":["d"]}"#).unwrap();
    normalize(&mut cfg);
    let store = Box::new(RocksStreamStore::open(db.clone(), StreamUid(4)).unwrap());
    let server = ServerIdentity {
        version: "2.15.1".into(),
        api_level: 1,
        domain: None,
    };
    StreamStateMachine::open(store, cfg, T0, server).unwrap()
}

fn publish(sm: &mut StreamStateMachine, index: u64, msg_id: &str) {
    let hdrs = Bytes::from(super::headers::block(&[("Nats-Msg-Id", msg_id)]));
    let cmd = command::append("d", hdrs, Bytes::from_static(b"x"), T0 + index);
    sm.apply(LogIndex(index), &cmd).unwrap();
}

#[test]
fn appends_are_durable_only_with_the_applied_state() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let mut sm = open(&db);
    publish(&mut sm, 1, "a");
    publish(&mut sm, 2, "b");
    assert_eq!(sm.state().msgs, 2, "staged appends are visible at once");
    // The batch is not saved yet: a restart finds neither the messages nor an applied id.
    let restarted = open(&db);
    assert_eq!(restarted.state().msgs, 0);
    assert_eq!(restarted.load_applied().unwrap(), None);
    drop(restarted);

    sm.save_applied(&AppliedState::default()).unwrap();
    drop(sm);
    let sm = open(&db);
    assert_eq!((sm.state().msgs, sm.state().last_seq), (2, 2));
    assert_eq!(sm.load_applied().unwrap(), Some(AppliedState::default()));
    assert_eq!(sm.dedup().get("b").map(|h| h.seq), Some(2));
}

#[test]
fn meta_record_built_around_the_cached_config_decodes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let mut sm = open(&db);
    publish(&mut sm, 1, "quote\"and\\slash");
    sm.save_applied(&AppliedState::default()).unwrap();
    let bytes = sm.store().get_meta(META_CONFIG).unwrap().unwrap();
    let meta: StoredMeta = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(meta.config, *sm.config());
    assert_eq!(meta.created_ns, T0);
    assert_eq!(meta.clock_ns, T0 + 1);
    assert_eq!(meta.last_msg_id, "quote\"and\\slash");
}
