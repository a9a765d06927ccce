//! The one conformance suite every [`StreamStore`] implementation runs.
//!
//! Each check is a generic function taking a fresh, empty store; [`stream_conformance_tests!`]
//! instantiates them as `#[test]`s for an implementation. Sizes are always computed with the
//! store's own `msg_size`, the one place the implementations legitimately differ.

use bytes::Bytes;

use crate::StorageError;
use crate::stream::limits::{
    DiscardPolicy, LimitViolation, StoreOutcome, StreamLimits, expire, next_expiry,
    store_with_limits,
};
use crate::stream::{PurgeRequest, StoredMsg, StreamStore};

/// A message with a payload derived from its sequence.
pub(crate) fn msg(seq: u64, subject: &str) -> StoredMsg {
    StoredMsg {
        seq,
        subject: subject.to_string(),
        headers: if seq.is_multiple_of(3) {
            Bytes::from_static(b"NATS/1.0\r\nA: b\r\n\r\n")
        } else {
            Bytes::new()
        },
        payload: Bytes::from(format!("payload-{seq}")),
        timestamp_ns: 1_000 * seq,
    }
}

fn put<S: StreamStore>(s: &mut S, seq: u64, subject: &str) {
    s.store_msg(&msg(seq, subject)).unwrap();
}

fn size<S: StreamStore>(s: &S, m: &StoredMsg) -> u64 {
    s.msg_size(&m.subject, m.headers.len(), m.payload.len())
}

fn seqs<S: StreamStore>(s: &S) -> Vec<u64> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(m) = s.next_matching(at, &[]).unwrap() {
        out.push(m.seq);
        at = m.seq + 1;
    }
    out
}

pub(crate) fn new_stream_state<S: StreamStore>(s: S) {
    let st = s.state();
    assert_eq!((st.msgs, st.bytes, st.first_seq, st.last_seq), (0, 0, 0, 0));
    assert_eq!(st.num_deleted(), 0);
    assert!(s.get(1).unwrap().is_none());
    assert!(s.last_for_subject("a").unwrap().is_none());
    assert!(s.next_matching(0, &[]).unwrap().is_none());
}

pub(crate) fn store_get_and_state<S: StreamStore>(mut s: S) {
    for (seq, subj) in [(1, "a.x"), (2, "b.y"), (3, "a.x")] {
        put(&mut s, seq, subj);
    }
    assert_eq!(s.get(2).unwrap(), Some(msg(2, "b.y")));
    assert_eq!(s.get(3).unwrap(), Some(msg(3, "a.x")));
    assert!(s.get(4).unwrap().is_none());
    let st = s.state();
    let bytes: u64 = (1..=3).map(|i| size(&s, &s.get(i).unwrap().unwrap())).sum();
    assert_eq!(st.msgs, 3);
    assert_eq!(st.bytes, bytes);
    assert_eq!((st.first_seq, st.first_ts), (1, 1_000));
    assert_eq!((st.last_seq, st.last_ts), (3, 3_000));
    assert_eq!(st.num_subjects, 2);
    assert_eq!(s.subject_count("a.x"), 2);
    assert_eq!(s.first_seq_for_subject("a.x").unwrap(), Some(1));
    assert_eq!(s.first_seq_for_subject("zz").unwrap(), None);
}

pub(crate) fn sequences_must_increase<S: StreamStore>(mut s: S) {
    put(&mut s, 5, "a");
    for seq in [5, 3] {
        let e = s.store_msg(&msg(seq, "a")).unwrap_err();
        assert!(matches!(e, StorageError::SeqNotIncreasing { .. }), "{e:?}");
    }
    let e = s.store_msg(&msg(6, "")).unwrap_err();
    assert!(matches!(e, StorageError::InvalidSubject { .. }));
    assert_eq!(s.state().msgs, 1);
    assert_eq!(s.state().first_seq, 5);
}

pub(crate) fn gaps_and_removals_are_deleted_sequences<S: StreamStore>(mut s: S) {
    for seq in [1, 2, 5, 6] {
        put(&mut s, seq, "a");
    }
    assert_eq!(s.deleted().unwrap(), vec![3, 4]);
    assert_eq!(s.state().num_deleted(), 2);
    assert!(s.remove(2).unwrap());
    assert!(!s.remove(2).unwrap());
    assert!(!s.remove(99).unwrap());
    assert_eq!(s.deleted().unwrap(), vec![2, 3, 4]);
    assert!(s.remove(1).unwrap());
    let st = s.state();
    assert_eq!((st.first_seq, st.first_ts, st.msgs), (5, 5_000, 2));
    assert_eq!(s.deleted().unwrap(), Vec::<u64>::new());
    assert!(s.remove(6).unwrap());
    assert!(s.remove(5).unwrap());
    let st = s.state();
    assert_eq!((st.msgs, st.bytes, st.first_seq, st.last_seq), (0, 0, 7, 6));
    assert_eq!((st.first_ts, st.last_ts, st.num_subjects), (0, 6_000, 0));
    put(&mut s, 7, "b");
    assert_eq!(s.state().first_seq, 7);
}

pub(crate) fn last_for_subject_literal_and_wildcard<S: StreamStore>(mut s: S) {
    for (seq, subj) in [
        (1, "kv.a"),
        (2, "kv.b"),
        (3, "kv.a"),
        (4, "x.y.z"),
        (5, "kv.b"),
    ] {
        put(&mut s, seq, subj);
    }
    let last = |s: &S, f: &str| s.last_for_subject(f).unwrap().map(|m| m.seq);
    assert_eq!(last(&s, "kv.a"), Some(3));
    assert_eq!(last(&s, "kv.*"), Some(5));
    assert_eq!(last(&s, "x.>"), Some(4));
    assert_eq!(last(&s, ">"), Some(5));
    assert_eq!(last(&s, "kv"), None);
    assert_eq!(last(&s, "kv.c"), None);
    s.remove(3).unwrap();
    assert_eq!(last(&s, "kv.a"), Some(1));
}

pub(crate) fn next_matching_one_and_many_filters<S: StreamStore>(mut s: S) {
    for seq in 1..=300 {
        put(&mut s, seq, "noise.n");
    }
    put(&mut s, 301, "a.1");
    put(&mut s, 302, "b.2");
    put(&mut s, 303, "c.3");
    let next = |s: &S, at: u64, f: &[&str]| s.next_matching(at, f).unwrap().map(|m| m.seq);
    assert_eq!(next(&s, 0, &[]), Some(1));
    assert_eq!(next(&s, 0, &["a.1"]), Some(301));
    assert_eq!(next(&s, 0, &["c.*", "b.>"]), Some(302));
    assert_eq!(next(&s, 303, &["c.*", "b.>"]), Some(303));
    assert_eq!(next(&s, 304, &[]), None);
    assert_eq!(next(&s, 5, &["noise.*"]), Some(5));
    assert_eq!(next(&s, 0, &["zzz"]), None);
    assert_eq!(next(&s, 100, &[">"]), Some(100));
    s.remove(100).unwrap();
    assert_eq!(next(&s, 100, &["noise.n"]), Some(101));
}

/// `next_matching_batch` returns what repeated `next_matching` calls return, written and
/// staged (batched appends) alike, and honours its count and byte limits.
pub(crate) fn next_matching_batch_agrees_with_next_matching<S: StreamStore>(mut s: S) {
    for seq in 1..=600 {
        let subject = match seq % 7 {
            0 => "a.x",
            1 => "b.y",
            _ => "noise.n",
        };
        put(&mut s, seq, subject);
    }
    s.remove(7).unwrap();
    s.remove(300).unwrap();
    s.begin_batch();
    for seq in 601..=640 {
        put(&mut s, seq, if seq % 2 == 0 { "a.x" } else { "noise.n" });
    }
    let one_by_one = |s: &S, start: u64, f: &[&str], max: usize| {
        let mut out = Vec::new();
        let mut at = start;
        while out.len() < max {
            let Some(m) = s.next_matching(at, f).unwrap() else {
                break;
            };
            at = m.seq + 1;
            out.push(m.seq);
        }
        out
    };
    let filters: [&[&str]; 5] = [&[], &[">"], &["a.*"], &["a.x", "b.>"], &["zzz"]];
    for f in filters {
        for start in [0, 1, 7, 299, 590, 620, 641] {
            for max in [1, 3, 50, 1000] {
                let got: Vec<u64> = s
                    .next_matching_batch(start, f, max, usize::MAX)
                    .unwrap()
                    .iter()
                    .map(|m| m.seq)
                    .collect();
                let want = one_by_one(&s, start, f, max);
                // A batch may stop early (sparse filters), but never skips or reorders.
                assert!(!got.is_empty() || want.is_empty(), "{f:?} from {start}");
                assert_eq!(got[..], want[..got.len()], "{f:?} from {start} max {max}");
            }
        }
    }
    let all = s.next_matching_batch(0, &[], 10_000, usize::MAX).unwrap();
    assert_eq!(
        all.len(),
        638,
        "every written and staged message in one batch"
    );
    // The byte budget stops after the message that reaches it.
    let bytes = |m: &StoredMsg| m.subject.len() + m.headers.len() + m.payload.len();
    let budget = bytes(&all[0]) + bytes(&all[1]) + 1;
    let capped = s.next_matching_batch(0, &[], 100, budget).unwrap();
    assert_eq!(capped.len(), 3);
    assert!(
        s.next_matching_batch(0, &[], 0, usize::MAX)
            .unwrap()
            .is_empty()
    );
    s.put_metas(&[]).unwrap();
    assert_eq!(
        s.next_matching_batch(601, &["a.x"], 100, usize::MAX)
            .unwrap()
            .len(),
        20
    );
}

pub(crate) fn purge_all_keeps_last_seq<S: StreamStore>(mut s: S) {
    for seq in 1..=10 {
        put(&mut s, seq, if seq % 2 == 0 { "e" } else { "o" });
    }
    assert_eq!(s.purge(&PurgeRequest::default()).unwrap(), 10);
    let st = s.state();
    assert_eq!(
        (st.msgs, st.bytes, st.first_seq, st.last_seq),
        (0, 0, 11, 10)
    );
    assert_eq!((st.last_ts, st.num_subjects), (10_000, 0));
    assert!(s.subject_counts(">").unwrap().is_empty());
    assert!(s.last_for_subject("e").unwrap().is_none());
    put(&mut s, 11, "e");
    assert_eq!(s.state().first_seq, 11);
    assert_eq!(s.subject_count("e"), 1);
}

pub(crate) fn purge_up_to_seq_and_keep<S: StreamStore>(mut s: S) {
    for seq in 1..=10 {
        put(&mut s, seq, "a");
    }
    let by_seq = PurgeRequest {
        up_to_seq: Some(4),
        ..Default::default()
    };
    assert_eq!(s.purge(&by_seq).unwrap(), 3);
    assert_eq!(s.state().first_seq, 4);
    let keep = PurgeRequest {
        keep: Some(2),
        ..Default::default()
    };
    assert_eq!(s.purge(&keep).unwrap(), 5);
    assert_eq!(seqs(&s), vec![9, 10]);
    assert_eq!(s.purge(&keep).unwrap(), 0);
    let both = PurgeRequest {
        up_to_seq: Some(3),
        keep: Some(1),
        ..Default::default()
    };
    assert!(matches!(
        s.purge(&both),
        Err(StorageError::InvalidPurge { .. })
    ));
    let past_end = PurgeRequest {
        up_to_seq: Some(100),
        ..Default::default()
    };
    assert_eq!(s.purge(&past_end).unwrap(), 2);
    let st = s.state();
    assert_eq!((st.msgs, st.first_seq, st.last_seq), (0, 100, 99));
    put(&mut s, 100, "a");
    assert_eq!(s.state().first_seq, 100);
}

pub(crate) fn purge_by_filter_with_keep_and_seq<S: StreamStore>(mut s: S) {
    for seq in 1..=12 {
        let subj = ["kv.a", "kv.b", "other"][(seq % 3) as usize];
        put(&mut s, seq, subj);
    }
    // kv.a: 3 6 9 12; kv.b: 1 4 7 10; other: 2 5 8 11
    let f = |filter: &str, up_to_seq, keep| PurgeRequest {
        filter: Some(filter.to_string()),
        up_to_seq,
        keep,
    };
    assert_eq!(s.purge(&f("kv.a", Some(7), None)).unwrap(), 2);
    assert_eq!(s.subject_count("kv.a"), 2);
    assert_eq!(s.purge(&f("kv.*", None, Some(3))).unwrap(), 3);
    // Left matching kv.*: 9(a) 10(b) 12(a) after removing 1 4 7 (oldest first).
    assert_eq!(s.subject_counts("kv.*").unwrap().values().sum::<u64>(), 3);
    assert_eq!(s.first_seq_for_subject("kv.b").unwrap(), Some(10));
    assert_eq!(s.purge(&f("other", None, None)).unwrap(), 4);
    assert_eq!(seqs(&s), vec![9, 10, 12]);
    let st = s.state();
    assert_eq!((st.first_seq, st.last_seq, st.num_subjects), (9, 12, 2));
    assert_eq!(s.deleted().unwrap(), vec![11]);
    assert_eq!(s.purge(&f(">", None, None)).unwrap(), 3);
    assert_eq!(s.state().first_seq, 13);
}

pub(crate) fn subject_counts_filtered<S: StreamStore>(mut s: S) {
    for (seq, subj) in [(1, "a.b"), (2, "a.c"), (3, "a.b"), (4, "d")] {
        put(&mut s, seq, subj);
    }
    let all = s.subject_counts(">").unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all["a.b"], 2);
    let some = s.subject_counts("a.*").unwrap();
    assert_eq!(some.keys().collect::<Vec<_>>(), vec!["a.b", "a.c"]);
    assert_eq!(s.subject_counts("").unwrap().len(), 3);
}

pub(crate) fn skip_to_sets_first_seq<S: StreamStore>(mut s: S) {
    s.skip_to(100).unwrap();
    let st = s.state();
    assert_eq!((st.first_seq, st.last_seq, st.msgs), (100, 99, 0));
    put(&mut s, 100, "a");
    assert_eq!(s.state().first_seq, 100);
}

pub(crate) fn limits_discard_old<S: StreamStore>(mut s: S) {
    let limits = StreamLimits {
        max_msgs: Some(5),
        max_msgs_per_subject: Some(2),
        ..Default::default()
    };
    let mut removed = 0;
    for seq in 1..=10 {
        let subj = if seq <= 4 { "k" } else { "m" };
        match store_with_limits(&mut s, &limits, &msg(seq, subj)).unwrap() {
            StoreOutcome::Stored { removed: r } => removed += r,
            StoreOutcome::Rejected(v) => panic!("rejected {v:?}"),
        }
    }
    // Per subject keeps 2 of k (3,4) and 2 of m (9,10): 4 messages.
    assert_eq!(seqs(&s), vec![3, 4, 9, 10]);
    assert_eq!(removed, 6);
    let bytes = StreamLimits {
        max_bytes: Some(size(&s, &msg(11, "z")) * 2),
        ..Default::default()
    };
    store_with_limits(&mut s, &bytes, &msg(11, "z")).unwrap();
    assert!(s.state().bytes <= bytes.max_bytes.unwrap_or(0));
    assert_eq!(*seqs(&s).last().unwrap(), 11);
}

pub(crate) fn limits_discard_new<S: StreamStore>(mut s: S) {
    let limits = StreamLimits {
        max_msgs: Some(3),
        discard: DiscardPolicy::New,
        ..Default::default()
    };
    for seq in 1..=3 {
        store_with_limits(&mut s, &limits, &msg(seq, "a")).unwrap();
    }
    assert_eq!(
        store_with_limits(&mut s, &limits, &msg(4, "a")).unwrap(),
        StoreOutcome::Rejected(LimitViolation::MaxMsgs)
    );
    assert_eq!(s.state().last_seq, 3);
    let one = size(&s, &msg(4, "a"));
    let bytes = StreamLimits {
        max_bytes: Some(s.state().bytes + one - 1),
        discard: DiscardPolicy::New,
        ..Default::default()
    };
    assert_eq!(
        store_with_limits(&mut s, &bytes, &msg(4, "a")).unwrap(),
        StoreOutcome::Rejected(LimitViolation::MaxBytes)
    );
    let per = StreamLimits {
        max_msgs_per_subject: Some(3),
        discard: DiscardPolicy::New,
        discard_new_per_subject: true,
        ..Default::default()
    };
    assert_eq!(
        store_with_limits(&mut s, &per, &msg(4, "a")).unwrap(),
        StoreOutcome::Rejected(LimitViolation::MaxMsgsPerSubject)
    );
    // Without discard_new_per_subject a replacing message is allowed even at max_msgs.
    let replace = StreamLimits {
        max_msgs: Some(3),
        max_msgs_per_subject: Some(3),
        discard: DiscardPolicy::New,
        ..Default::default()
    };
    assert_eq!(
        store_with_limits(&mut s, &replace, &msg(4, "a")).unwrap(),
        StoreOutcome::Stored { removed: 1 }
    );
    assert_eq!(seqs(&s), vec![2, 3, 4]);
    let small = StreamLimits {
        max_msg_size: Some(3),
        ..Default::default()
    };
    assert_eq!(
        store_with_limits(&mut s, &small, &msg(5, "a")).unwrap(),
        StoreOutcome::Rejected(LimitViolation::MaxMsgSize)
    );
}

pub(crate) fn max_age_expires_from_the_front<S: StreamStore>(mut s: S) {
    let limits = StreamLimits {
        max_age_ns: Some(2_500),
        ..Default::default()
    };
    assert_eq!(next_expiry(&s, &limits), None);
    for seq in 1..=5 {
        put(&mut s, seq, "a");
    }
    assert_eq!(next_expiry(&s, &limits), Some(3_500));
    assert_eq!(expire(&mut s, &limits, 3_000).unwrap(), 0);
    assert_eq!(expire(&mut s, &limits, 4_600).unwrap(), 2);
    assert_eq!(s.state().first_seq, 3);
    assert_eq!(expire(&mut s, &limits, 100_000).unwrap(), 3);
    assert_eq!(s.state().first_seq, 6);
    assert_eq!(
        expire(&mut s, &StreamLimits::default(), 100_000).unwrap(),
        0
    );
}

pub(crate) fn reset_forgets_messages_and_sequences<S: StreamStore>(mut s: S) {
    for seq in 5..=7 {
        put(&mut s, seq, "a");
    }
    s.put_meta(crate::keys::META_USER_MIN, b"applied").unwrap();
    s.reset().unwrap();
    let st = s.state();
    assert_eq!(
        (
            st.msgs,
            st.bytes,
            st.first_seq,
            st.last_seq,
            st.last_ts,
            st.num_subjects
        ),
        (0, 0, 0, 0, 0, 0)
    );
    assert!(s.get(5).unwrap().is_none());
    assert!(s.last_for_subject("a").unwrap().is_none());
    assert_eq!(s.subject_count("a"), 0);
    assert_eq!(
        s.get_meta(crate::keys::META_USER_MIN).unwrap().as_deref(),
        Some(&b"applied"[..])
    );
    // Sequences below the old last_seq are accepted again.
    put(&mut s, 2, "b");
    assert_eq!((s.state().first_seq, s.state().last_seq), (2, 2));
    assert!(s.put_meta(0, b"x").is_err());
}

pub(crate) fn write_tag_follows_mutations<S: StreamStore>(mut s: S) {
    assert_eq!(s.write_tag(), 0);
    s.set_write_tag(3);
    put(&mut s, 1, "a");
    put(&mut s, 2, "a");
    // Staged appends (if the store stages them) are written, with the tag, by put_metas.
    s.put_metas(&[]).unwrap();
    assert_eq!(s.write_tag(), 3);
    // Calls that change nothing record no tag.
    s.set_write_tag(4);
    assert!(!s.remove(50).unwrap());
    assert_eq!(s.write_tag(), 3);
    s.set_write_tag(5);
    s.purge(&PurgeRequest::default()).unwrap();
    assert_eq!(s.write_tag(), 5);
}

/// Every message `view` holds from `start` on, read `max_bytes` at a time.
fn view_all(view: &dyn crate::stream::StreamView, start: u64, max_bytes: usize) -> Vec<StoredMsg> {
    let mut out: Vec<StoredMsg> = Vec::new();
    loop {
        let at = out.last().map_or(start, |m| m.seq + 1);
        let batch = view.msgs_from(at, max_bytes).unwrap();
        if batch.is_empty() {
            return out;
        }
        out.extend(batch);
    }
}

pub(crate) fn view_is_a_point_in_time<S: StreamStore>(mut s: S) {
    for seq in 1..=10 {
        put(&mut s, seq, "a");
    }
    s.remove(4).unwrap();
    // Written, then (for a store that stages) more appends staged and not yet written.
    s.put_metas(&[]).unwrap();
    s.begin_batch();
    for seq in 11..=20 {
        put(&mut s, seq, "b");
    }
    let view = s.view().unwrap();
    // Writes after the view: appends, a removal, a purge; none of them is seen by it.
    put(&mut s, 21, "c");
    s.put_metas(&[]).unwrap();
    s.remove(12).unwrap();
    s.purge(&PurgeRequest {
        keep: Some(1),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(seqs(&s), [21]);

    let want: Vec<StoredMsg> = (1..=20)
        .filter(|seq| *seq != 4)
        .map(|seq| msg(seq, if seq <= 10 { "a" } else { "b" }))
        .collect();
    assert_eq!(view_all(view.as_ref(), 0, 1 << 20), want);
    // Small reads return one message each and still cover everything.
    assert_eq!(view.msgs_from(0, 1).unwrap().len(), 1);
    assert_eq!(view_all(view.as_ref(), 0, 1), want);
    assert_eq!(view_all(view.as_ref(), 12, 1), want[10..]);
    assert!(view.msgs_from(21, 1 << 20).unwrap().is_empty());
}

/// Instantiates every conformance check as a `#[test]`; `$make` returns `(guard, store)`.
macro_rules! stream_conformance_tests {
    ($make:expr) => {
        crate::stream::conformance::stream_conformance_tests!(@each $make;
            new_stream_state, store_get_and_state, sequences_must_increase,
            gaps_and_removals_are_deleted_sequences, last_for_subject_literal_and_wildcard,
            next_matching_one_and_many_filters, next_matching_batch_agrees_with_next_matching,
            purge_all_keeps_last_seq,
            purge_up_to_seq_and_keep, purge_by_filter_with_keep_and_seq,
            subject_counts_filtered, skip_to_sets_first_seq, limits_discard_old,
            limits_discard_new, max_age_expires_from_the_front,
            reset_forgets_messages_and_sequences, write_tag_follows_mutations,
            view_is_a_point_in_time);
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                #[allow(clippy::redundant_closure_call)]
                let (_guard, store) = ($make)();
                crate::stream::conformance::$name(store);
            }
        )*
    };
}
pub(crate) use stream_conformance_tests;
