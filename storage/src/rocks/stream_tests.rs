//! Tests of [`RocksStreamStore`]: the shared conformance suite plus reopen and isolation.
use super::*;
use crate::stream::conformance::msg;

fn open(dir: &tempfile::TempDir, uid: u64) -> RocksStreamStore {
    RocksStreamStore::open(Db::open(dir.path()).unwrap(), StreamUid(uid)).unwrap()
}

crate::stream::conformance::stream_conformance_tests!(|| {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir, 7);
    (dir, s)
});

/// The same suite with appends staged: every read must see staged messages, and removals and
/// purges must write them first.
mod staged {
    use super::*;

    crate::stream::conformance::stream_conformance_tests!(|| {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open(&dir, 7);
        s.begin_batch();
        (dir, s)
    });
}

#[test]
fn staged_appends_are_written_only_with_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let mut s = RocksStreamStore::open(db.clone(), StreamUid(1)).unwrap();
    s.store_msg(&msg(1, "a")).unwrap();
    s.begin_batch();
    for seq in 2..=5 {
        s.store_msg(&msg(seq, "b")).unwrap();
    }
    assert_eq!(s.get(4).unwrap(), Some(msg(4, "b")));
    assert_eq!(s.last_for_subject("b").unwrap(), Some(msg(5, "b")));
    // A crash now (drop without put_metas) loses the staged appends and keeps the rest whole.
    let reopened = RocksStreamStore::open(db.clone(), StreamUid(1)).unwrap();
    assert_eq!(reopened.state().last_seq, 1);
    assert_eq!(reopened.get_meta(keys::META_USER_MIN).unwrap(), None);
    drop(reopened);
    s.put_metas(&[(keys::META_USER_MIN, b"applied 5")]).unwrap();
    drop(s);
    let s = RocksStreamStore::open(db, StreamUid(1)).unwrap();
    assert_eq!((s.state().msgs, s.state().last_seq), (5, 5));
    assert_eq!(s.get(5).unwrap(), Some(msg(5, "b")));
    assert_eq!(
        s.get_meta(keys::META_USER_MIN).unwrap().as_deref(),
        Some(&b"applied 5"[..])
    );
}

#[test]
fn state_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let mut s = RocksStreamStore::open(db.clone(), StreamUid(1)).unwrap();
    let mut other = RocksStreamStore::open(db.clone(), StreamUid(2)).unwrap();
    for seq in 1..=20 {
        s.store_msg(&msg(seq, if seq % 2 == 0 { "a.b" } else { "c" }))
            .unwrap();
        other.store_msg(&msg(seq, "zzz")).unwrap();
    }
    s.remove(5).unwrap();
    s.purge(&PurgeRequest {
        up_to_seq: Some(3),
        ..Default::default()
    })
    .unwrap();
    let before = (
        s.state(),
        s.deleted().unwrap(),
        s.subject_counts(">").unwrap(),
    );
    drop((s, other, db));
    let db = Db::open(dir.path()).unwrap();
    let s = RocksStreamStore::open(db.clone(), StreamUid(1)).unwrap();
    let after = (
        s.state(),
        s.deleted().unwrap(),
        s.subject_counts(">").unwrap(),
    );
    assert_eq!(before, after);
    // Written without a write tag (as every store before META_WRITE_TAG): it reads as 0.
    assert_eq!(s.write_tag(), 0);
    assert_eq!(s.get(20).unwrap(), Some(msg(20, "a.b")));
    let other = RocksStreamStore::open(db, StreamUid(2)).unwrap();
    assert_eq!(other.state().msgs, 20);
}

/// A subject's first and last sequence are kept in memory while known (a history-1 key's always
/// are), read from the index when not, and rebuilt exactly at open.
#[test]
fn subject_ends_are_kept_while_known_and_rebuilt_at_open() {
    use crate::stream::limits::{StreamLimits, store_with_limits};
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let mut s = RocksStreamStore::open(db.clone(), StreamUid(1)).unwrap();
    let history_1 = StreamLimits {
        max_msgs_per_subject: Some(1),
        ..Default::default()
    };
    // KV-style puts, staged as the apply path does: each replaces its key's previous value,
    // sometimes one staged in the same batch.
    for chunk in (1..=30u64).collect::<Vec<_>>().chunks(4) {
        s.begin_batch();
        for &seq in chunk {
            let key = ["k.a", "k.b", "k.c"][(seq % 3) as usize];
            store_with_limits(&mut s, &history_1, &msg(seq, key)).unwrap();
        }
        s.put_metas(&[]).unwrap();
    }
    let key = |seq: u64| SubjectSeqs {
        count: 1,
        first: seq,
        last: seq,
        first_exact: true,
        last_exact: true,
    };
    assert_eq!(s.subjects["k.a"], key(30));
    assert_eq!(s.subjects["k.b"], key(28));
    assert_eq!(s.subjects["k.c"], key(29));
    assert_eq!((s.state().msgs, s.state().first_seq), (3, 28));
    // Removing the first of several leaves the next one unknown; the index answers.
    for seq in 31..=33 {
        s.store_msg(&msg(seq, "m")).unwrap();
    }
    for seq in 34..=35 {
        s.store_msg(&msg(seq, "m")).unwrap();
    }
    assert!(s.remove(31).unwrap());
    assert!(s.remove(35).unwrap());
    let bounds = SubjectSeqs {
        count: 3,
        first: 32,
        last: 34,
        first_exact: false,
        last_exact: false,
    };
    assert_eq!(s.subjects["m"], bounds);
    assert_eq!(s.first_seq_for_subject("m").unwrap(), Some(32));
    assert_eq!(s.last_for_subject("m").unwrap(), Some(msg(34, "m")));
    // A middle one goes: the bounds still hold, and the index answers past the hole.
    assert!(s.remove(33).unwrap());
    assert!(s.remove(32).unwrap());
    assert_eq!(s.subjects["m"].count, 1);
    assert_eq!(s.first_seq_for_subject("m").unwrap(), Some(34));
    assert_eq!(s.last_for_subject("m").unwrap(), Some(msg(34, "m")));
    let live = s.subjects.clone();
    drop(s);
    // Rebuilt from the index at open: the same counts, every end exact.
    let s = RocksStreamStore::open(db, StreamUid(1)).unwrap();
    assert_eq!(s.subjects.len(), 4);
    for k in ["k.a", "k.b", "k.c"] {
        assert_eq!(s.subjects[k], live[k]);
    }
    assert_eq!(s.subjects["m"], key(34));
    // 28, 29 and 30 (one per key) and 34 are left.
    assert_eq!(s.deleted().unwrap(), vec![31, 32, 33]);
}

#[test]
fn purging_one_stream_leaves_its_neighbours() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let mut a = RocksStreamStore::open(db.clone(), StreamUid(1)).unwrap();
    let mut b = RocksStreamStore::open(db.clone(), StreamUid(2)).unwrap();
    for seq in 1..=10 {
        a.store_msg(&msg(seq, "x")).unwrap();
        b.store_msg(&msg(seq, "x")).unwrap();
    }
    a.purge(&PurgeRequest::default()).unwrap();
    assert_eq!(b.next_matching(0, &["x"]).unwrap().map(|m| m.seq), Some(1));
    assert_eq!(b.last_for_subject(">").unwrap().map(|m| m.seq), Some(10));
    assert!(a.last_for_subject(">").unwrap().is_none());
    drop((a, b, db));
    assert_eq!(open(&dir, 2).state().msgs, 10);
    assert_eq!(open(&dir, 1).state().first_seq, 11);
}

#[test]
fn meta_records_round_trip_and_reserved_kinds_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(&dir, 3);
    assert_eq!(s.get_meta(keys::META_USER_MIN).unwrap(), None);
    s.put_meta(keys::META_USER_MIN, b"applied=42").unwrap();
    assert!(s.put_meta(keys::META_STREAM, b"x").is_err());
    drop(s);
    let s = open(&dir, 3);
    assert_eq!(
        s.get_meta(keys::META_USER_MIN).unwrap().as_deref(),
        Some(&b"applied=42"[..])
    );
}

#[test]
fn destroy_removes_the_stream_and_only_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let mut a = RocksStreamStore::open(db.clone(), StreamUid(1)).unwrap();
    let mut b = RocksStreamStore::open(db.clone(), StreamUid(2)).unwrap();
    for seq in 1..=5 {
        a.store_msg(&msg(seq, "x")).unwrap();
        b.store_msg(&msg(seq, "x")).unwrap();
    }
    a.put_meta(keys::META_USER_MIN, b"a").unwrap();
    let mut consumers = crate::rocks::RocksConsumerStore::new(db.clone());
    let state = crate::consumer::ConsumerState::default();
    crate::consumer::ConsumerStore::save(&mut consumers, StreamUid(1), "c", &state).unwrap();
    a.destroy().unwrap();
    let a = RocksStreamStore::open(db.clone(), StreamUid(1)).unwrap();
    assert_eq!(a.state(), StreamState::default());
    assert_eq!(a.get_meta(keys::META_USER_MIN).unwrap(), None);
    assert!(
        crate::consumer::ConsumerStore::list(&consumers, StreamUid(1))
            .unwrap()
            .is_empty()
    );
    assert_eq!(b.state().msgs, 5);
}

/// Live SST bytes of the message column family.
fn msgs_sst_bytes(db: &Db) -> u64 {
    db.raw()
        .live_files()
        .unwrap()
        .iter()
        .filter(|f| f.column_family_name == ColumnFamily::Msgs.name())
        .map(|f| f.size as u64)
        .sum()
}

#[test]
fn drop_all_drops_the_streams_sst_files_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let mut a = RocksStreamStore::open(db.clone(), StreamUid(1)).unwrap();
    let mut b = RocksStreamStore::open(db.clone(), StreamUid(2)).unwrap();
    for seq in 1..=2000 {
        a.store_msg(&msg(seq, "x")).unwrap();
    }
    db.flush_state().unwrap();
    // Into level 1 (files of level 0 may overlap, so RocksDB never drops them by range; a big
    // stream's older data lives in the lower levels).
    let cf = db.cf(ColumnFamily::Msgs).unwrap();
    db.raw().compact_range_cf(&cf, None::<&[u8]>, None::<&[u8]>);
    drop(cf);
    for seq in 1..=10 {
        b.store_msg(&msg(seq, "y")).unwrap();
    }
    db.flush_state().unwrap();
    let before = msgs_sst_bytes(&db);
    assert!(before > 0);
    assert_eq!(a.drop_all().unwrap(), 2000);
    // A's file went without a compaction; B's (another uid) stays and still serves.
    let after = msgs_sst_bytes(&db);
    assert!(after < before / 4, "SST bytes {before} -> {after}");
    assert_eq!(b.state().msgs, 10);
    assert_eq!(b.get(7).unwrap().unwrap().subject, "y");
    // The purged stream keeps working: new messages after the purge are stored and survive
    // a flush.
    a.store_msg(&msg(2001, "x")).unwrap();
    db.flush_state().unwrap();
    assert_eq!(a.get(2001).unwrap().unwrap().subject, "x");
    assert_eq!(a.get(5).unwrap(), None);
    let a = RocksStreamStore::open(db.clone(), StreamUid(1)).unwrap();
    assert_eq!(a.state().msgs, 1);
}

#[test]
fn big_purge_spans_several_batches() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(&dir, 3);
    let n = (PURGE_CHUNK * 2 + 10) as u64;
    for seq in 1..=n {
        s.store_msg(&msg(seq, if seq % 2 == 0 { "e" } else { "o" }))
            .unwrap();
    }
    let req = PurgeRequest {
        filter: Some("e".into()),
        keep: Some(1),
        ..Default::default()
    };
    assert_eq!(s.purge(&req).unwrap(), n / 2 - 1);
    assert_eq!(s.subject_count("e"), 1);
    assert_eq!(s.state().msgs, n / 2 + 1);
}

#[test]
fn write_tag_is_the_tag_of_the_last_mutation_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let mut s = RocksStreamStore::open(db.clone(), StreamUid(1)).unwrap();
    assert_eq!(s.write_tag(), 0);
    s.set_write_tag(7);
    s.store_msg(&msg(1, "a")).unwrap();
    assert_eq!(s.write_tag(), 7);
    // A tag set without a following mutation is not recorded.
    s.set_write_tag(8);
    assert!(!s.remove(99).unwrap());
    assert_eq!(s.write_tag(), 7);
    s.set_write_tag(9);
    s.remove(1).unwrap();
    s.set_write_tag(10);
    drop((s, db));
    let db = Db::open(dir.path()).unwrap();
    let s = RocksStreamStore::open(db, StreamUid(1)).unwrap();
    assert_eq!(s.write_tag(), 9);
}

/// A bulk load (a snapshot install) past several stage limits writes every message, and on an
/// idle database its wait for flushes returns at once (the wait itself: `Db`'s tests).
#[test]
fn a_bulk_batch_writes_everything_across_stage_limits() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let started = std::time::Instant::now();
    db.wait_for_flushes(std::time::Duration::from_secs(10));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let mut s = RocksStreamStore::open(db.clone(), StreamUid(1)).unwrap();
    // Not empty: the load goes through the memtables (an empty stream's is ingested, below).
    s.store_msg(&msg(1, "first")).unwrap();
    s.begin_bulk_batch();
    let payload = bytes::Bytes::from(vec![7u8; 1 << 20]);
    let count = 3 * (STAGE_LIMIT_BYTES >> 20) as u64 + 5;
    for seq in 2..=count {
        let mut m = msg(seq, "bulk");
        m.payload = payload.clone();
        s.store_msg(&m).unwrap();
    }
    s.put_metas(&[(keys::META_USER_MIN, b"restored")]).unwrap();
    drop(s);
    let s = RocksStreamStore::open(db, StreamUid(1)).unwrap();
    assert_eq!((s.state().msgs, s.state().last_seq), (count, count));
    assert_eq!(
        s.get(count).unwrap().map(|m| m.payload.len()),
        Some(1 << 20)
    );
}

/// Entries in the active memtable of `msgs`.
fn msgs_in_memtable(db: &Db) -> u64 {
    let cf = db.cf(ColumnFamily::Msgs).unwrap();
    db.raw()
        .property_int_value_cf(&cf, "rocksdb.num-entries-active-mem-table")
        .unwrap()
        .unwrap()
}

/// A bulk load into an empty stream past an ingest file's worth of messages goes into table
/// files, not the memtables, and reads back whole, after a reopen too.
#[test]
fn a_bulk_load_into_an_empty_stream_is_ingested() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let mut s = RocksStreamStore::open(db.clone(), StreamUid(3)).unwrap();
    s.reset().unwrap();
    s.begin_bulk_batch();
    let payload = bytes::Bytes::from(vec![9u8; 128 << 10]);
    let count = (crate::rocks::bulk_ingest::INGEST_FILE_BYTES / (128 << 10)) as u64 + 40;
    for seq in 1..=count {
        let mut m = msg(seq, if seq % 2 == 0 { "even" } else { "odd" });
        m.payload = payload.clone();
        s.store_msg(&m).unwrap();
    }
    s.put_metas(&[(keys::META_USER_MIN, b"restored")]).unwrap();
    assert_eq!(
        msgs_in_memtable(&db),
        0,
        "messages went through the memtable"
    );
    assert_eq!(s.state().msgs, count);
    assert_eq!(
        s.get(count).unwrap().map(|m| m.payload),
        Some(payload.clone())
    );
    assert_eq!(
        s.last_for_subject("odd").unwrap().map(|m| m.seq),
        Some(count - 1)
    );
    // Later writes and removals go on as usual over the ingested messages.
    s.remove(2).unwrap();
    let mut next = msg(count + 1, "late");
    next.payload = payload.clone();
    s.store_msg(&next).unwrap();
    drop(s);
    let s = RocksStreamStore::open(db.clone(), StreamUid(3)).unwrap();
    assert_eq!((s.state().msgs, s.state().last_seq), (count, count + 1));
    assert_eq!(s.get(2).unwrap(), None);
    assert_eq!(s.get(1).unwrap().map(|m| m.payload), Some(payload));
    // The ingest directory holds nothing once the load is done.
    let leftover = dir.path().join(crate::rocks::bulk_ingest::INGEST_DIR);
    assert_eq!(std::fs::read_dir(&leftover).map_or(0, |d| d.count()), 0);
}

/// Messages above the counters (a crash between an ingested file and the counters after it)
/// are deleted at open; a table file a crash left before its ingestion is removed.
#[test]
fn messages_above_the_counters_and_unfinished_ingest_files_are_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let mut s = RocksStreamStore::open(db.clone(), StreamUid(4)).unwrap();
    for seq in 1..=3 {
        s.store_msg(&msg(seq, "a")).unwrap();
    }
    drop(s);
    let key = keys::prefixed_u64(4, 7);
    let cf = db.cf(ColumnFamily::Msgs).unwrap();
    db.raw()
        .put_cf(&cf, key, encode_msg(&key, &msg(7, "ghost")))
        .unwrap();
    drop(cf);
    let s = RocksStreamStore::open(db.clone(), StreamUid(4)).unwrap();
    assert_eq!(s.get(7).unwrap(), None);
    assert_eq!((s.state().msgs, s.state().last_seq), (3, 3));
    assert_eq!(s.get(3).unwrap(), Some(msg(3, "a")));
    drop((s, db));

    let stale = dir.path().join(crate::rocks::bulk_ingest::INGEST_DIR);
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("0000000000000004-0.sst"), b"partial").unwrap();
    let db = Db::open(dir.path()).unwrap();
    assert!(!stale.exists());
    drop(db);
}

/// A restore into a stream that holds messages drops their files and the range tombstone first,
/// so its ingested files go below level 0 and the old messages are gone.
#[test]
fn a_restore_over_old_messages_ingests_below_level_0() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let mut s = RocksStreamStore::open(db.clone(), StreamUid(8)).unwrap();
    let payload = bytes::Bytes::from(vec![5u8; 64 << 10]);
    for seq in 1..=200 {
        let mut m = msg(seq, "old");
        m.payload = payload.clone();
        s.store_msg(&m).unwrap();
    }
    db.flush_state().unwrap();
    s.begin_restore().unwrap();
    s.begin_bulk_batch();
    let count = (crate::rocks::bulk_ingest::INGEST_FILE_BYTES / (64 << 10)) as u64 + 10;
    for seq in 1..=count {
        let mut m = msg(seq, "new");
        m.payload = payload.clone();
        s.store_msg(&m).unwrap();
    }
    s.put_metas(&[]).unwrap();
    assert_eq!(
        crate::rocks::bulk_ingest::level0_files(&db),
        0,
        "ingested files landed in level 0"
    );
    assert_eq!(s.last_for_subject("old").unwrap(), None);
    assert_eq!(s.state().msgs, count);
    assert_eq!(
        s.get(count).unwrap().map(|m| m.subject),
        Some("new".to_string())
    );
}

/// While a view of the old messages is live (a snapshot being sent), a restore does not drop
/// their table files: the view still reads every old message.
#[test]
fn a_restore_keeps_the_old_files_while_a_view_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let mut s = RocksStreamStore::open(db.clone(), StreamUid(9)).unwrap();
    for seq in 1..=300 {
        s.store_msg(&msg(seq, "old")).unwrap();
    }
    db.flush_state().unwrap();
    // Below level 0, where whole files can be dropped.
    let cf = db.cf(ColumnFamily::Msgs).unwrap();
    db.raw().compact_range_cf(&cf, None::<&[u8]>, None::<&[u8]>);
    drop(cf);
    let view = s.view().unwrap();
    s.begin_restore().unwrap();
    s.begin_bulk_batch();
    for seq in 1..=5 {
        s.store_msg(&msg(seq, "new")).unwrap();
    }
    s.put_metas(&[]).unwrap();
    let mut seen = 0;
    let mut next = 1;
    loop {
        let batch = view.msgs_from(next, 1 << 20).unwrap();
        let Some(last) = batch.last() else { break };
        next = last.seq + 1;
        assert!(batch.iter().all(|m| m.subject == "old"));
        seen += batch.len();
    }
    assert_eq!(seen, 300);
    assert_eq!(s.state().msgs, 5);
}
