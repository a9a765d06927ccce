//! Model test: random operations against a `Vec` model and a [`StreamStore`], compared after
//! every step. Run for both implementations.

use bytes::Bytes;
use proptest::prelude::*;

use crate::stream::limits::{DiscardPolicy, StoreOutcome, StreamLimits, expire, store_with_limits};
use crate::stream::{PurgeRequest, StoredMsg, StreamStore, StreamUid};
use crate::subject;

const SUBJECTS: [&str; 4] = ["a.x", "a.y", "b.x", "c"];
const FILTERS: [&str; 5] = ["a.x", "a.*", "*.x", ">", "c"];

#[derive(Debug, Clone)]
enum Op {
    Store {
        subject: usize,
        headers: bool,
        payload: usize,
        skip: u64,
        limits: usize,
    },
    Remove(u64),
    Purge {
        filter: Option<usize>,
        seq: Option<u64>,
        keep: Option<u64>,
    },
    Expire(u64),
    /// Starts staging appends (`begin_batch`), as a state machine does per applied batch.
    BeginBatch,
    /// Writes what is staged (`put_metas`).
    EndBatch,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..SUBJECTS.len(), any::<bool>(), 0usize..40, 0u64..3, 0usize..4).prop_map(
            |(subject, headers, payload, skip, limits)| Op::Store { subject, headers, payload, skip, limits }),
        2 => (0u64..40).prop_map(Op::Remove),
        1 => (proptest::option::of(0..FILTERS.len()), proptest::option::of(0u64..40),
              proptest::option::of(0u64..5))
            .prop_map(|(filter, seq, keep)| Op::Purge { filter, seq, keep: if seq.is_some() { None } else { keep } }),
        1 => (0u64..40_000).prop_map(Op::Expire),
        1 => Just(Op::BeginBatch),
        1 => Just(Op::EndBatch),
    ]
}

fn limits(i: usize) -> StreamLimits {
    match i {
        0 => StreamLimits::default(),
        1 => StreamLimits {
            max_msgs: Some(6),
            max_msgs_per_subject: Some(3),
            ..Default::default()
        },
        2 => StreamLimits {
            max_bytes: Some(400),
            discard: DiscardPolicy::New,
            ..Default::default()
        },
        _ => StreamLimits {
            max_msgs: Some(8),
            max_msgs_per_subject: Some(2),
            discard: DiscardPolicy::New,
            discard_new_per_subject: i.is_multiple_of(2),
            ..Default::default()
        },
    }
}

/// The model: messages in a `Vec`, everything recomputed by linear scans.
#[derive(Debug, Default)]
struct Model {
    msgs: Vec<StoredMsg>,
    first_seq: u64,
    last_seq: u64,
    last_ts: u64,
}

impl Model {
    fn count(&self, subject: &str) -> u64 {
        self.msgs.iter().filter(|m| m.subject == subject).count() as u64
    }
    fn bytes(&self, size: &dyn Fn(&StoredMsg) -> u64) -> u64 {
        self.msgs.iter().map(size).sum()
    }
    fn remove(&mut self, seq: u64) -> bool {
        let before = self.msgs.len();
        self.msgs.retain(|m| m.seq != seq);
        let removed = before != self.msgs.len();
        if removed {
            self.fix_first();
        }
        removed
    }
    fn fix_first(&mut self) {
        self.first_seq = self.msgs.first().map_or(self.last_seq + 1, |m| m.seq);
    }
    fn store(&mut self, m: StoredMsg, l: &StreamLimits, size: &dyn Fn(&StoredMsg) -> u64) -> bool {
        let new_size = size(&m);
        if let Some(max) = l.max_msg_size
            && (m.headers.len() + m.payload.len()) as u64 > max
        {
            return false;
        }
        if l.discard == DiscardPolicy::New {
            let full_subject = l
                .max_msgs_per_subject
                .is_some_and(|x| self.count(&m.subject) >= x);
            if full_subject && l.discard_new_per_subject {
                return false;
            }
            if l.max_msgs.is_some_and(|x| self.msgs.len() as u64 >= x) && !full_subject {
                return false;
            }
            let freed = if full_subject {
                self.msgs
                    .iter()
                    .find(|o| o.subject == m.subject)
                    .map_or(0, size)
            } else {
                0
            };
            if l.max_bytes
                .is_some_and(|x| (self.bytes(size) + new_size).saturating_sub(freed) > x)
            {
                return false;
            }
        }
        if self.msgs.is_empty() {
            self.first_seq = m.seq;
        }
        self.last_seq = m.seq;
        self.last_ts = m.timestamp_ns;
        let subj = m.subject.clone();
        self.msgs.push(m);
        if let Some(max) = l.max_msgs_per_subject {
            while self.count(&subj) > max {
                if let Some(s) = self.msgs.iter().find(|o| o.subject == subj).map(|o| o.seq) {
                    self.remove(s);
                }
            }
        }
        while !self.msgs.is_empty()
            && (l.max_msgs.is_some_and(|x| self.msgs.len() as u64 > x)
                || l.max_bytes.is_some_and(|x| self.bytes(size) > x))
        {
            let seq = self.msgs[0].seq;
            self.remove(seq);
        }
        true
    }
    fn purge(&mut self, req: &PurgeRequest) -> u64 {
        let filter = req.filter.as_deref().filter(|f| *f != ">");
        let hit = |m: &StoredMsg| filter.is_none_or(|f| subject::matches(f, &m.subject));
        let below = req.up_to_seq.unwrap_or(u64::MAX);
        let matching = self.msgs.iter().filter(|m| hit(m)).count() as u64;
        let mut budget = req.keep.map_or(u64::MAX, |k| matching.saturating_sub(k));
        let before = self.msgs.len();
        self.msgs.retain(|m| {
            if budget > 0 && m.seq < below && hit(m) {
                budget -= 1;
                false
            } else {
                true
            }
        });
        let everything = filter.is_none() && req.keep.is_none() && below > self.last_seq;
        if before != self.msgs.len() || everything {
            self.fix_first();
        }
        if filter.is_none()
            && self.msgs.is_empty()
            && below != u64::MAX
            && below > self.last_seq + 1
        {
            self.last_seq = below - 1;
            self.first_seq = below;
        }
        (before - self.msgs.len()) as u64
    }
}

fn run<S: StreamStore>(mut store: S, ops: Vec<Op>) -> Result<(), TestCaseError> {
    // The two stores size messages differently (memory vs file formula of
    // spec/nats-protocol-and-jetstream.md §4.6).
    let memory_sizes = store.msg_size("", 0, 0) == 16;
    let size_of = move |m: &StoredMsg| {
        let (s, h, p) = (
            m.subject.len() as u64,
            m.headers.len() as u64,
            m.payload.len() as u64,
        );
        match (memory_sizes, h) {
            (true, _) => s + h + p + 16,
            (false, 0) => s + p + 30,
            (false, _) => s + h + p + 34,
        }
    };
    let size_fn: &dyn Fn(&StoredMsg) -> u64 = &size_of;
    let mut model = Model::default();
    let mut shadow = Vec::new();
    for (step, op) in ops.into_iter().enumerate() {
        shadow.push(op.clone());
        match op {
            Op::Store {
                subject,
                headers,
                payload,
                skip,
                limits: li,
            } => {
                let seq = model.last_seq + 1 + skip;
                let m = StoredMsg {
                    seq,
                    subject: SUBJECTS[subject].to_string(),
                    headers: if headers {
                        Bytes::from_static(b"NATS/1.0\r\n\r\n")
                    } else {
                        Bytes::new()
                    },
                    payload: Bytes::from(vec![b'x'; payload]),
                    timestamp_ns: seq * 1_000,
                };
                let l = limits(li);
                let stored = model.store(m.clone(), &l, size_fn);
                let got = store_with_limits(&mut store, &l, &m).expect("store");
                prop_assert_eq!(
                    matches!(got, StoreOutcome::Stored { .. }),
                    stored,
                    "step {}",
                    step
                );
            }
            Op::Remove(seq) => {
                prop_assert_eq!(store.remove(seq).expect("remove"), model.remove(seq));
            }
            Op::Purge { filter, seq, keep } => {
                let req = PurgeRequest {
                    filter: filter.map(|f| FILTERS[f].to_string()),
                    up_to_seq: seq,
                    keep,
                };
                prop_assert_eq!(
                    store.purge(&req).expect("purge"),
                    model.purge(&req),
                    "step {}",
                    step
                );
            }
            Op::Expire(now) => {
                let l = StreamLimits {
                    max_age_ns: Some(10_000),
                    ..Default::default()
                };
                let cutoff = now.saturating_sub(10_000);
                let want: Vec<u64> = model
                    .msgs
                    .iter()
                    .take_while(|m| m.timestamp_ns <= cutoff)
                    .map(|m| m.seq)
                    .collect();
                for s in &want {
                    model.remove(*s);
                }
                prop_assert_eq!(
                    expire(&mut store, &l, now).expect("expire"),
                    want.len() as u64
                );
            }
            Op::BeginBatch => store.begin_batch(),
            Op::EndBatch => store.put_metas(&[]).expect("put_metas"),
        }
        let st = store.state();
        let seqs: Vec<u64> = model.msgs.iter().map(|m| m.seq).collect();
        prop_assert_eq!(st.msgs, seqs.len() as u64, "step {} ops {:?}", step, shadow);
        prop_assert_eq!(st.bytes, model.bytes(size_fn));
        prop_assert_eq!(
            (st.first_seq, st.last_seq),
            (model.first_seq, model.last_seq),
            "ops {:?}",
            shadow
        );
        prop_assert_eq!(st.last_ts, model.last_ts);
        prop_assert_eq!(
            st.first_ts,
            model.msgs.first().map_or(0, |m| m.timestamp_ns)
        );
        let mut subjects: Vec<&str> = model.msgs.iter().map(|m| m.subject.as_str()).collect();
        subjects.sort_unstable();
        subjects.dedup();
        prop_assert_eq!(st.num_subjects, subjects.len() as u64);
        let deleted: Vec<u64> = match (seqs.first(), seqs.last()) {
            (Some(f), Some(l)) => (*f..=*l).filter(|s| !seqs.contains(s)).collect(),
            _ => vec![],
        };
        prop_assert_eq!(store.deleted().expect("deleted"), deleted);
        for subj in SUBJECTS {
            let want = model.msgs.iter().find(|m| m.subject == subj).map(|m| m.seq);
            prop_assert_eq!(
                store.first_seq_for_subject(subj).expect("first"),
                want,
                "step {} ops {:?}",
                step,
                shadow
            );
            prop_assert_eq!(store.subject_count(subj), model.count(subj));
        }
        for f in FILTERS {
            let want = model
                .msgs
                .iter()
                .rev()
                .find(|m| subject::matches(f, &m.subject))
                .map(|m| m.seq);
            prop_assert_eq!(
                store.last_for_subject(f).expect("last").map(|m| m.seq),
                want
            );
            let want = model
                .msgs
                .iter()
                .find(|m| m.seq >= 3 && subject::matches(f, &m.subject))
                .map(|m| m.seq);
            prop_assert_eq!(
                store.next_matching(3, &[f]).expect("next").map(|m| m.seq),
                want
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    #[test]
    fn mem_store_matches_vec_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(crate::mem::MemStreamStore::new(StreamUid(1)), ops)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn rocks_store_matches_vec_model(ops in proptest::collection::vec(op(), 1..60)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = crate::Db::open(dir.path()).expect("open");
        run(crate::rocks::RocksStreamStore::open(db, StreamUid(1)).expect("store"), ops)?;
    }
}
