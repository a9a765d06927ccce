use proptest::prelude::*;

use super::*;

#[test]
fn subject_validation_table() {
    // (subject, is_valid_subject, is_valid_literal_subject, is_routable_subject)
    let cases: &[(&str, bool, bool, bool)] = &[
        ("foo", true, true, true),
        ("foo.bar", true, true, true),
        ("foo.bar.baz", true, true, true),
        ("*", true, false, true),
        (">", true, false, true),
        ("foo.*", true, false, true),
        ("foo.>", true, false, true),
        ("*.bar", true, false, true),
        ("foo.*.baz", true, false, true),
        ("*.*.>", true, false, true),
        ("foo.b*r", true, true, true),
        ("a>", true, true, true),
        ("a>.b*", true, true, true),
        ("**", true, true, true),
        (">>", true, true, true),
        ("ü.x", true, true, true),
        ("$JS.API.INFO", true, true, true),
        ("_INBOX.abc.*", true, false, true),
        ("Foo", true, true, true),
        ("", false, false, false),
        (".", false, false, false),
        ("..", false, false, false),
        ("a..b", false, false, false),
        (".a", false, false, false),
        ("a.", false, false, false),
        ("foo..bar", false, false, false),
        (".foo", false, false, false),
        ("foo.>.x", false, false, true),
        (">.a", false, false, true),
        ("a.>.>", false, false, true),
        ("a b", false, false, false),
        ("a\tb", false, false, false),
        ("a\rb", false, false, false),
        ("a\nb", false, false, false),
        ("a\x0cb", false, false, false),
        ("a\x0bb", false, false, false),
        (" a", false, false, false),
        ("a ", false, false, false),
        ("a. .b", false, false, false),
        ("foo.*.>", true, false, true),
    ];
    for &(s, valid, literal, routable) in cases {
        assert_eq!(is_valid_subject(s), valid, "is_valid_subject({s:?})");
        assert_eq!(
            is_valid_literal_subject(s),
            literal,
            "is_valid_literal_subject({s:?})"
        );
        assert_eq!(
            is_routable_subject(s),
            routable,
            "is_routable_subject({s:?})"
        );
    }
}

#[test]
fn is_literal_only_looks_at_whole_tokens() {
    assert!(is_literal("foo.bar"));
    assert!(is_literal("foo.b*r"));
    assert!(is_literal("a>.*b"));
    assert!(!is_literal("foo.*"));
    assert!(!is_literal("*"));
    assert!(!is_literal("foo.>"));
    assert!(!is_literal("*.foo"));
}

#[test]
fn queue_name_validation() {
    assert!(is_valid_queue_name("workers"));
    assert!(is_valid_queue_name("a.b"));
    assert!(!is_valid_queue_name(""));
    assert!(!is_valid_queue_name("a b"));
    assert!(!is_valid_queue_name("a\tb"));
}

#[test]
fn tokens_splits_on_dots() {
    assert_eq!(tokens("a.b.c").collect::<Vec<_>>(), ["a", "b", "c"]);
    assert_eq!(tokens("a").collect::<Vec<_>>(), ["a"]);
    assert_eq!(tokens("a..b").collect::<Vec<_>>(), ["a", "", "b"]);
}

#[test]
fn matches_table() {
    let cases: &[(&str, &str, bool)] = &[
        ("foo", "foo", true),
        ("foo", "Foo", false),
        ("foo", "foo.bar", false),
        ("foo.bar", "foo", false),
        ("foo.*", "foo.bar", true),
        ("foo.*", "foo", false),
        ("foo.*", "foo.bar.baz", false),
        ("*", "foo", true),
        ("*", "foo.bar", false),
        ("foo.>", "foo.bar", true),
        ("foo.>", "foo.bar.baz", true),
        ("foo.>", "foo", false),
        (">", "foo", true),
        (">", "foo.bar.baz", true),
        ("*.bar.>", "foo.bar.baz.qux", true),
        ("*.bar.>", "foo.baz.baz.qux", false),
        ("foo.*.baz", "foo.x.baz", true),
        ("foo.*.baz", "foo.x.bar", false),
        // Literal tokens that contain wildcard characters.
        ("foo.b*r", "foo.bar", false),
        ("foo.b*r", "foo.b*r", true),
        ("a>", "a>", true),
        ("a>", "ab", false),
        // Wildcards in the subject are ordinary tokens.
        ("foo.*", "foo.*", true),
        ("foo.>", "foo.*", true),
        ("foo.bar", "foo.*", false),
        ("foo.*", "foo.>", true),
        ("foo.bar", "foo.>", false),
        ("*.>", "*.>", true),
        // Invalid patterns never match.
        ("foo.>.bar", "foo.x.bar", false),
        ("foo..bar", "foo..bar", false),
        ("", "", false),
        ("a b", "a b", false),
        // Unroutable subjects never match.
        (">", "a..b", false),
        (">", "", false),
        (">", "a.", false),
        ("*", "a b", false),
    ];
    for &(pattern, subject, expected) in cases {
        assert_eq!(
            matches(pattern, subject),
            expected,
            "matches({pattern:?}, {subject:?})"
        );
    }
}

#[test]
fn is_subset_table() {
    let cases: &[(&str, &str, bool)] = &[
        ("foo", "foo", true),
        ("foo", "bar", false),
        ("foo", "*", true),
        ("foo", ">", true),
        ("foo.bar", "foo.*", true),
        ("foo.bar", "foo.>", true),
        ("foo.bar.baz", "foo.>", true),
        ("foo.*", "foo.*", true),
        ("foo.*", "foo.>", true),
        ("foo.*", "foo.bar", false),
        ("foo.>", "foo.>", true),
        ("foo.>", "foo.*", false),
        ("foo.>", ">", true),
        ("foo.>", "*.>", true),
        ("foo.>", "foo.*.>", false),
        ("foo.*.>", "foo.>", true),
        ("*", ">", true),
        (">", "*", false),
        (">", ">", true),
        ("*.*", "*.>", true),
        ("*.>", "*.*", false),
        ("*", "foo", false),
        ("foo", "foo.>", false),
        ("foo.>", "foo", false),
        ("foo.b*r", "foo.*", true),
        ("foo.*", "foo.b*r", false),
        ("foo.bar", "foo.bar.baz", false),
        ("foo.bar.baz", "foo.bar", false),
        // Invalid arguments.
        ("foo..bar", ">", false),
        ("foo", "foo.>.bar", false),
        ("", ">", false),
    ];
    for &(pattern, of, expected) in cases {
        assert_eq!(
            is_subset(pattern, of),
            expected,
            "is_subset({pattern:?}, {of:?})"
        );
    }
}

/// A pattern of 1..=4 tokens over a small alphabet, possibly ending in `>`.
fn pattern_strategy() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(prop::sample::select(vec!["a", "b", "*"]), 1..=4),
        any::<bool>(),
    )
        .prop_map(|(mut toks, full)| {
            if full {
                // `toks` is never empty: the strategy draws 1..=4 tokens.
                toks.pop();
                toks.push(">");
            }
            toks.join(".")
        })
}

/// Every subject of 1..=`max_len` tokens over `alphabet`.
fn all_subjects(alphabet: &[&str], max_len: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut frontier: Vec<String> = alphabet.iter().map(|t| t.to_string()).collect();
    for _ in 0..max_len {
        out.extend(frontier.iter().cloned());
        frontier = frontier
            .iter()
            .flat_map(|prefix| alphabet.iter().map(move |t| format!("{prefix}.{t}")))
            .collect();
    }
    out
}

proptest! {
    /// `is_subset` agrees with its definition, checked over every subject up to one token longer
    /// than the patterns, with a token (`z`) that no pattern names literally. That set contains a
    /// witness whenever the subset relation fails.
    #[test]
    fn is_subset_agrees_with_exhaustive_matching(p in pattern_strategy(), o in pattern_strategy()) {
        let subjects = all_subjects(&["a", "b", "z"], 5);
        let by_definition = subjects.iter().all(|s| !matches(&p, s) || matches(&o, s));
        prop_assert_eq!(is_subset(&p, &o), by_definition, "is_subset({:?}, {:?})", p, o);
    }

    /// Functions never panic on arbitrary input, and validity implies routability.
    #[test]
    fn arbitrary_input_is_handled(s in "[a-c.*> \t]{0,8}", p in "[a-c.*>]{0,8}") {
        let _ = matches(&p, &s);
        let _ = is_subset(&p, &s);
        if is_valid_subject(&s) {
            prop_assert!(is_routable_subject(&s));
        }
        if is_valid_literal_subject(&s) {
            prop_assert!(is_valid_subject(&s) && is_literal(&s));
            prop_assert!(matches(&s, &s));
        }
        if is_valid_subject(&p) {
            prop_assert!(is_subset(&p, &p));
            prop_assert!(is_subset(&p, ">"));
        }
    }
}
