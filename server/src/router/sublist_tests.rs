use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::router::subject::matches;

/// A match result in order-independent form: sorted plain values and, per queue name, the
/// sorted members.
type Canonical = (Vec<u32>, BTreeMap<String, Vec<u32>>);

fn canonical(result: &MatchResult<u32>) -> Canonical {
    let mut plain = result.plain.clone();
    plain.sort_unstable();
    let mut queues = BTreeMap::new();
    for group in &result.queues {
        assert!(
            !group.members.is_empty(),
            "queue group {} is empty",
            group.name
        );
        let previous = queues.insert(group.name.to_string(), group.members.clone());
        assert!(
            previous.is_none(),
            "queue group {} appears twice",
            group.name
        );
    }
    for members in queues.values_mut() {
        members.sort_unstable();
    }
    (plain, queues)
}

fn must_match(sl: &Sublist<u32>, subject: &str) -> Canonical {
    canonical(&sl.match_subject(subject))
}

fn plain(values: &[u32]) -> Canonical {
    (values.to_vec(), BTreeMap::new())
}

#[test]
fn insert_rejects_invalid_subjects_and_queues() {
    let sl = Sublist::new();
    for subject in ["", "a..b", ".a", "a.", "foo.>.bar", "a b", "a\tb", ">.>"] {
        assert_eq!(
            sl.insert(subject, None, 1),
            Err(SublistError::InvalidSubject {
                subject: subject.to_owned()
            })
        );
    }
    for queue in ["", "a b", "q\n"] {
        assert_eq!(
            sl.insert("foo", Some(queue), 1),
            Err(SublistError::InvalidQueue {
                queue: queue.to_owned()
            })
        );
    }
    let long = vec!["a"; MAX_PATTERN_TOKENS + 1].join(".");
    assert_eq!(
        sl.insert(&long, None, 1),
        Err(SublistError::TooManyTokens {
            tokens: MAX_PATTERN_TOKENS + 1,
            limit: MAX_PATTERN_TOKENS
        })
    );
    assert_eq!(sl.count(), 0);
    assert_eq!(sl.node_count(), 0);
    assert!(
        sl.insert(&vec!["a"; MAX_PATTERN_TOKENS].join("."), None, 1)
            .is_ok()
    );
}

#[test]
fn literal_and_wildcard_patterns_match_by_token() {
    let sl = Sublist::new();
    sl.insert("foo.bar", None, 1).unwrap();
    sl.insert("foo.*", None, 2).unwrap();
    sl.insert("foo.>", None, 3).unwrap();
    sl.insert(">", None, 4).unwrap();
    sl.insert("*.bar", None, 5).unwrap();
    sl.insert("*", None, 6).unwrap();
    sl.insert("foo.b*r", None, 7).unwrap();
    sl.insert("foo", None, 8).unwrap();

    assert_eq!(must_match(&sl, "foo.bar"), plain(&[1, 2, 3, 4, 5]));
    assert_eq!(must_match(&sl, "foo"), plain(&[4, 6, 8]));
    assert_eq!(must_match(&sl, "foo.baz"), plain(&[2, 3, 4]));
    assert_eq!(must_match(&sl, "foo.bar.baz"), plain(&[3, 4]));
    assert_eq!(must_match(&sl, "foo.b*r"), plain(&[2, 3, 4, 7]));
    assert_eq!(must_match(&sl, "baz.bar"), plain(&[4, 5]));
    assert_eq!(must_match(&sl, "Foo.bar"), plain(&[4, 5]));
}

#[test]
fn publish_to_wildcard_subject_is_routed_literally() {
    let sl = Sublist::new();
    sl.insert("foo.bar", None, 1).unwrap();
    sl.insert("foo.*", None, 2).unwrap();
    sl.insert("foo.>", None, 3).unwrap();
    assert_eq!(must_match(&sl, "foo.*"), plain(&[2, 3]));
    assert_eq!(must_match(&sl, "foo.>"), plain(&[2, 3]));
    assert_eq!(must_match(&sl, "foo.*.bar"), plain(&[3]));
}

#[test]
fn unroutable_subjects_reach_nobody_and_are_not_cached() {
    let sl = Sublist::new();
    sl.insert(">", None, 1).unwrap();
    for subject in ["", "a..b", ".a", "a.", "a b"] {
        assert!(sl.match_subject(subject).is_empty(), "{subject:?}");
        assert!(!sl.has_interest(subject), "{subject:?}");
    }
    assert_eq!(sl.stats().num_cache, 0);
}

#[test]
fn queue_groups_merge_members_across_patterns() {
    let sl = Sublist::new();
    sl.insert("foo.bar", Some("q1"), 1).unwrap();
    sl.insert("foo.*", Some("q1"), 2).unwrap();
    sl.insert("foo.>", Some("q1"), 3).unwrap();
    sl.insert("foo.*", Some("q2"), 4).unwrap();
    sl.insert("foo.bar", None, 5).unwrap();
    sl.insert("other", Some("q1"), 6).unwrap();

    let expected = (
        vec![5],
        BTreeMap::from([("q1".to_owned(), vec![1, 2, 3]), ("q2".to_owned(), vec![4])]),
    );
    assert_eq!(must_match(&sl, "foo.bar"), expected);
    assert_eq!(sl.match_subject("foo.bar").fanout(), 3);

    assert!(sl.remove("foo.*", Some("q2"), &4));
    assert!(!sl.remove("foo.*", Some("q2"), &4));
    let expected = (vec![5], BTreeMap::from([("q1".to_owned(), vec![1, 2, 3])]));
    assert_eq!(must_match(&sl, "foo.bar"), expected);
}

#[test]
fn same_value_under_two_patterns_appears_twice() {
    let sl = Sublist::new();
    sl.insert("foo.*", None, 1).unwrap();
    sl.insert("foo.>", None, 1).unwrap();
    assert_eq!(must_match(&sl, "foo.bar"), plain(&[1, 1]));
}

#[test]
fn same_triple_twice_is_stored_twice_and_removed_once_per_call() {
    let sl = Sublist::new();
    sl.insert("foo", Some("q"), 1).unwrap();
    sl.insert("foo", Some("q"), 1).unwrap();
    assert_eq!(sl.count(), 2);
    assert_eq!(
        must_match(&sl, "foo"),
        (vec![], BTreeMap::from([("q".to_owned(), vec![1, 1])]))
    );
    assert!(sl.remove("foo", Some("q"), &1));
    assert_eq!(
        must_match(&sl, "foo"),
        (vec![], BTreeMap::from([("q".to_owned(), vec![1])]))
    );
    assert!(sl.remove("foo", Some("q"), &1));
    assert!(!sl.remove("foo", Some("q"), &1));
    assert_eq!(sl.count(), 0);
}

#[test]
fn remove_requires_exact_subject_queue_and_value() {
    let sl = Sublist::new();
    sl.insert("foo.*", Some("q"), 1).unwrap();
    assert!(!sl.remove("foo.bar", Some("q"), &1));
    assert!(!sl.remove("foo.>", Some("q"), &1));
    assert!(!sl.remove("foo.*", None, &1));
    assert!(!sl.remove("foo.*", Some("r"), &1));
    assert!(!sl.remove("foo.*", Some("q"), &2));
    assert!(!sl.remove("foo..*", Some("q"), &1));
    assert_eq!(sl.count(), 1);
    assert!(sl.remove("foo.*", Some("q"), &1));
    let stats = sl.stats();
    assert_eq!((stats.num_inserts, stats.num_removes), (1, 1));
}

#[test]
fn removing_everything_prunes_every_node() {
    let sl = Sublist::new();
    let patterns = [
        "a", "a.b", "a.b.c", "a.*", "a.*.c", "a.>", ">", "*", "*.*.>", "x.y.z",
    ];
    for (i, p) in patterns.iter().enumerate() {
        sl.insert(p, None, i as u32).unwrap();
        sl.insert(p, Some("q"), i as u32).unwrap();
    }
    assert_eq!(sl.count(), 2 * patterns.len());
    assert!(sl.node_count() > 0);
    for (i, p) in patterns.iter().enumerate() {
        assert!(sl.remove(p, Some("q"), &(i as u32)));
        assert!(sl.remove(p, None, &(i as u32)));
    }
    assert_eq!(sl.count(), 0);
    assert_eq!(sl.node_count(), 0);
    assert!(sl.all().is_empty());
    assert!(!sl.has_interest("a.b.c"));
}

#[test]
fn insert_after_match_invalidates_cached_result() {
    let sl = Sublist::new();
    sl.insert("foo.bar", None, 1).unwrap();
    assert_eq!(must_match(&sl, "foo.bar"), plain(&[1]));
    assert_eq!(must_match(&sl, "foo.bar"), plain(&[1]));
    assert_eq!(sl.stats().num_cache, 1);

    sl.insert("foo.*", None, 2).unwrap();
    assert_eq!(must_match(&sl, "foo.bar"), plain(&[1, 2]));
    sl.insert("foo.bar", None, 3).unwrap();
    assert_eq!(must_match(&sl, "foo.bar"), plain(&[1, 2, 3]));
    sl.insert(">", Some("q"), 4).unwrap();
    assert_eq!(
        must_match(&sl, "foo.bar"),
        (vec![1, 2, 3], BTreeMap::from([("q".to_owned(), vec![4])]))
    );

    assert!(sl.remove("foo.*", None, &2));
    assert_eq!(
        must_match(&sl, "foo.bar"),
        (vec![1, 3], BTreeMap::from([("q".to_owned(), vec![4])]))
    );
    assert!(sl.remove(">", Some("q"), &4));
    assert!(sl.remove("foo.bar", None, &1));
    assert_eq!(must_match(&sl, "foo.bar"), plain(&[3]));
    assert!(sl.remove("foo.bar", None, &3));
    assert!(sl.match_subject("foo.bar").is_empty());
    assert!(!sl.has_interest("foo.bar"));
}

#[test]
fn changes_invalidate_only_the_cached_subjects_they_match() {
    let sl = Sublist::new();
    sl.insert("foo.bar", None, 1).unwrap();
    for subject in ["foo.bar", "foo.baz", "qux.bar", "foo.bar.baz", "foo"] {
        // Cached from the second miss on.
        sl.match_subject(subject);
        sl.match_subject(subject);
    }
    assert_eq!(sl.stats().num_cache, 5);

    // A wildcard pattern drops the subjects it matches, and only those.
    sl.insert("foo.*", None, 2).unwrap();
    assert_eq!(sl.stats().num_cache, 3);
    // A literal pattern drops just its own subject.
    sl.insert("qux.bar", None, 3).unwrap();
    assert_eq!(sl.stats().num_cache, 2);
    // The survivors are still served from the cache and are still right.
    let hits_before = sl.cache_hits.load(Ordering::Relaxed);
    assert_eq!(must_match(&sl, "foo.bar.baz"), plain(&[]));
    assert_eq!(must_match(&sl, "foo"), plain(&[]));
    assert_eq!(sl.cache_hits.load(Ordering::Relaxed), hits_before + 2);
    // A failed remove changes nothing, so it invalidates nothing.
    assert!(!sl.remove("foo.>", None, &9));
    assert_eq!(sl.stats().num_cache, 2);
}

#[test]
fn result_computed_before_a_change_is_not_cached_after_it() {
    let sl = Sublist::new();
    sl.insert("foo", None, 1).unwrap();
    // Interleave by hand what two threads could do: a match walks the trie under the read
    // lock, an insert lands, then the match tries to cache its now-stale result.
    let Lookup::Computed { result, generation } = sl.lookup("foo") else {
        panic!("an empty cache cannot hit");
    };
    sl.insert("foo", None, 2).unwrap();
    sl.store("foo", &result, generation);
    assert_eq!(sl.stats().num_cache, 0);
    assert_eq!(must_match(&sl, "foo"), plain(&[1, 2]));
    // Without an intervening change the result is cached.
    let Lookup::Computed { result, generation } = sl.lookup("bar") else {
        panic!("bar was never matched");
    };
    sl.store("bar", &result, generation);
    assert_eq!(sl.stats().num_cache, 1);
    assert!(Arc::ptr_eq(&sl.match_subject("bar"), &result));
}

#[test]
fn cache_hit_returns_the_same_arc_and_misses_share_the_empty_result() {
    let sl = Sublist::new();
    sl.insert("foo", None, 1).unwrap();
    sl.match_subject("foo");
    let cached = sl.match_subject("foo");
    let hit = sl.match_subject("foo");
    assert!(Arc::ptr_eq(&cached, &hit));
    let empty_a = sl.match_subject("nobody.a");
    let empty_b = sl.match_subject("nobody.b");
    assert!(Arc::ptr_eq(&empty_a, &empty_b));
    assert!(Arc::ptr_eq(&empty_a, &sl.match_subject("nobody.a")));
}

#[test]
fn cache_stays_bounded_and_results_stay_correct() {
    let sl = Sublist::with_cache_capacity(16);
    sl.insert("s.*", None, 1).unwrap();
    for round in 0..3 {
        for i in 0..100 {
            assert_eq!(
                must_match(&sl, &format!("s.{i}")),
                plain(&[1]),
                "round {round}"
            );
            assert!(sl.stats().num_cache <= 16);
        }
    }
    let stats = sl.stats();
    assert!(stats.num_cache > 0);
    assert_eq!(stats.num_matches, 300);
}

#[test]
fn subjects_seen_once_are_not_cached() {
    let sl = Sublist::new();
    sl.insert("_INBOX.x.*", None, 1).unwrap();
    for i in 0..100 {
        assert_eq!(must_match(&sl, &format!("_INBOX.x.{i}")), plain(&[1]));
    }
    assert_eq!(sl.stats().num_cache, 0);
    // A repeated subject is cached on its second miss and hit after that.
    assert_eq!(must_match(&sl, "_INBOX.x.again"), plain(&[1]));
    assert_eq!(sl.stats().num_cache, 0);
    assert_eq!(must_match(&sl, "_INBOX.x.again"), plain(&[1]));
    assert_eq!(sl.stats().num_cache, 1);
    let hits = sl.cache_hits.load(Ordering::Relaxed);
    assert_eq!(must_match(&sl, "_INBOX.x.again"), plain(&[1]));
    assert_eq!(sl.cache_hits.load(Ordering::Relaxed), hits + 1);
}

#[test]
fn zero_capacity_disables_the_cache() {
    let sl = Sublist::with_cache_capacity(0);
    sl.insert("foo", None, 1).unwrap();
    assert_eq!(must_match(&sl, "foo"), plain(&[1]));
    assert_eq!(must_match(&sl, "foo"), plain(&[1]));
    let stats = sl.stats();
    assert_eq!(
        (stats.num_cache, stats.num_matches, stats.cache_hit_rate),
        (0, 2, 0.0)
    );
}

#[test]
fn stats_report_subsz_fields() {
    let sl = Sublist::new();
    assert_eq!(sl.stats(), SublistStats::default());
    sl.insert("foo", None, 1).unwrap();
    sl.insert("foo", None, 2).unwrap();
    sl.insert("foo", Some("q"), 3).unwrap();
    sl.insert("bar", None, 4).unwrap();
    sl.insert("gone", None, 5).unwrap();
    assert!(sl.remove("gone", None, &5));
    // Two misses each (cached on the second), then one hit each.
    for subject in ["foo", "bar"] {
        for _ in 0..3 {
            sl.match_subject(subject);
        }
    }
    let stats = sl.stats();
    assert_eq!(stats.num_subscriptions, 4);
    assert_eq!(stats.num_cache, 2);
    assert_eq!(stats.num_inserts, 5);
    assert_eq!(stats.num_removes, 1);
    assert_eq!(stats.num_matches, 6);
    assert!((stats.cache_hit_rate - 2.0 / 6.0).abs() < 1e-9);
    assert_eq!(stats.max_fanout, 3);
    assert!((stats.avg_fanout - 2.0).abs() < 1e-9);
}

#[test]
fn has_interest_follows_inserts_and_removes() {
    let sl = Sublist::new();
    assert!(!sl.has_interest("a.b"));
    sl.insert("a.>", Some("q"), 1).unwrap();
    assert!(sl.has_interest("a.b"));
    assert!(sl.has_interest("a.b.c"));
    assert!(!sl.has_interest("a"));
    sl.match_subject("a.b");
    assert!(sl.remove("a.>", Some("q"), &1));
    assert!(!sl.has_interest("a.b"));
}

#[test]
fn all_lists_every_subscription() {
    let sl = Sublist::new();
    sl.insert("a.*.>", None, 1).unwrap();
    sl.insert("a", Some("q"), 2).unwrap();
    sl.insert("a.b", None, 3).unwrap();
    sl.insert("a.b", None, 3).unwrap();
    let mut listed: Vec<_> = sl
        .all()
        .into_iter()
        .map(|(s, q, v)| (s, q.map(|q| q.to_string()), v))
        .collect();
    listed.sort();
    let expected = vec![
        ("a".to_owned(), Some("q".to_owned()), 2),
        ("a.*.>".to_owned(), None, 1),
        ("a.b".to_owned(), None, 3),
        ("a.b".to_owned(), None, 3),
    ];
    assert_eq!(listed, expected);
}

/// One step of the model test.
#[derive(Debug, Clone)]
enum Op {
    Insert {
        pattern: String,
        queue: Option<&'static str>,
        value: u32,
    },
    /// Removes the model entry at this index (modulo its length), if any.
    RemoveExisting(prop::sample::Index),
    /// Removes a triple that is probably not stored.
    RemoveArbitrary {
        pattern: String,
        queue: Option<&'static str>,
        value: u32,
    },
    Match(String),
}

fn pattern_strategy() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(prop::sample::select(vec!["a", "b", "c", "*"]), 1..=4),
        0..4u8,
    )
        .prop_map(|(mut toks, full)| {
            // About a quarter of the patterns end in `>`.
            if full == 0 {
                // `toks` is never empty: the strategy draws 1..=4 tokens.
                toks.pop();
                toks.push(">");
            }
            toks.join(".")
        })
}

/// Literal subjects, plus some `*` and `>` tokens that are routed as literals.
fn subject_strategy() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec!["a", "b", "c", "d", "*", ">"]),
        1..=5,
    )
    .prop_map(|toks| toks.join("."))
}

fn queue_strategy() -> impl Strategy<Value = Option<&'static str>> {
    prop::sample::select(vec![None, None, Some("q1"), Some("q2")])
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (pattern_strategy(), queue_strategy(), 0..8u32)
            .prop_map(|(pattern, queue, value)| Op::Insert { pattern, queue, value }),
        2 => any::<prop::sample::Index>().prop_map(Op::RemoveExisting),
        1 => (pattern_strategy(), queue_strategy(), 0..8u32)
            .prop_map(|(pattern, queue, value)| Op::RemoveArbitrary { pattern, queue, value }),
        5 => subject_strategy().prop_map(Op::Match),
    ]
}

/// The naive model: every stored triple in a `Vec`, matched by a linear scan.
type Model = Vec<(String, Option<&'static str>, u32)>;

fn model_match(model: &Model, subject: &str) -> Canonical {
    let mut result = MatchResult::default();
    for (_, queue, value) in model.iter().filter(|(p, _, _)| matches(p, subject)) {
        match queue {
            None => result.plain.push(*value),
            Some(q) => match result.queues.iter_mut().find(|g| &*g.name == *q) {
                Some(group) => group.members.push(*value),
                None => result.queues.push(QueueGroup {
                    name: (*q).into(),
                    members: vec![*value],
                }),
            },
        }
    }
    canonical(&result)
}

fn model_remove(model: &mut Model, pattern: &str, queue: Option<&str>, value: u32) -> bool {
    match model
        .iter()
        .position(|(p, q, v)| p == pattern && *q == queue && *v == value)
    {
        Some(index) => {
            model.swap_remove(index);
            true
        }
        None => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Under any interleaving of inserts, removes and matches, the sublist (with a normal,
    /// tiny or disabled cache) agrees with the naive model, and removing everything prunes
    /// the trie back to nothing.
    #[test]
    fn sublist_agrees_with_linear_model(
        ops in prop::collection::vec(op_strategy(), 1..80),
        cache_capacity in prop::sample::select(vec![0usize, 3, DEFAULT_CACHE_CAPACITY]),
    ) {
        let sl = Sublist::with_cache_capacity(cache_capacity);
        let mut model: Model = Vec::new();
        for op in ops {
            match op {
                Op::Insert { pattern, queue, value } => {
                    sl.insert(&pattern, queue, value).unwrap();
                    model.push((pattern, queue, value));
                }
                Op::RemoveExisting(index) => {
                    if model.is_empty() {
                        continue;
                    }
                    let (pattern, queue, value) = model[index.index(model.len())].clone();
                    prop_assert!(sl.remove(&pattern, queue, &value));
                    prop_assert!(model_remove(&mut model, &pattern, queue, value));
                }
                Op::RemoveArbitrary { pattern, queue, value } => {
                    let expected = model_remove(&mut model, &pattern, queue, value);
                    prop_assert_eq!(sl.remove(&pattern, queue, &value), expected);
                }
                Op::Match(subject) => {
                    let expected = model_match(&model, &subject);
                    prop_assert_eq!(sl.has_interest(&subject), expected != plain(&[]));
                    prop_assert_eq!(must_match(&sl, &subject), expected.clone(), "subject {}", subject);
                    // A second match is usually a cache hit and must agree too.
                    prop_assert_eq!(must_match(&sl, &subject), expected, "subject {}", subject);
                }
            }
            prop_assert_eq!(sl.count(), model.len());
            prop_assert!(sl.stats().num_cache <= cache_capacity);
        }

        let mut listed: Vec<_> = sl.all().into_iter().map(|(s, q, v)| (s, q.map(|q| q.to_string()), v)).collect();
        let mut expected: Vec<_> = model.iter().map(|(s, q, v)| (s.clone(), q.map(str::to_owned), *v)).collect();
        listed.sort();
        expected.sort();
        prop_assert_eq!(listed, expected);

        for (pattern, queue, value) in &model {
            prop_assert!(sl.remove(pattern, *queue, value));
        }
        prop_assert_eq!(sl.count(), 0);
        prop_assert_eq!(sl.node_count(), 0);
    }
}

/// Several threads insert, match and remove their own values under shared patterns. Each
/// thread must always see its own writes (a cached result is never stale), and the sublist
/// must end empty.
#[test]
fn concurrent_inserts_removes_and_matches_stay_coherent() {
    const THREADS: u32 = 4;
    const ROUNDS: u32 = 300;
    let sl = Sublist::with_cache_capacity(8);
    let patterns = ["t.a", "t.*", "t.>", ">", "*.a"];
    let subjects = ["t.a", "t.b", "u.a", "t.a.b"];
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let sl = &sl;
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    let value = thread * ROUNDS + round;
                    let pattern = patterns[(value % 5) as usize];
                    let queue = if round % 3 == 0 { Some("q") } else { None };
                    let contains = |subject: &str| {
                        let result = sl.match_subject(subject);
                        match queue {
                            None => result.plain.contains(&value),
                            Some(q) => result
                                .queues
                                .iter()
                                .any(|g| &*g.name == q && g.members.contains(&value)),
                        }
                    };
                    for subject in subjects {
                        assert!(!contains(subject), "{value} seen before insert");
                    }
                    sl.insert(pattern, queue, value).unwrap();
                    for subject in subjects {
                        assert_eq!(
                            contains(subject),
                            matches(pattern, subject),
                            "{pattern} {subject}"
                        );
                    }
                    assert!(sl.remove(pattern, queue, &value));
                    for subject in subjects {
                        assert!(!contains(subject), "{value} seen after remove");
                    }
                }
            });
        }
    });
    assert_eq!(sl.count(), 0);
    assert_eq!(sl.node_count(), 0);
    for subject in subjects {
        assert!(sl.match_subject(subject).is_empty());
    }
    let stats = sl.stats();
    assert_eq!(stats.num_inserts, u64::from(THREADS * ROUNDS));
    assert_eq!(stats.num_removes, u64::from(THREADS * ROUNDS));
}
