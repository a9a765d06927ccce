//! Subject filter matching, local to storage (storage may not depend on the server crate).
//!
//! Tokens are separated by `.`. In a filter, a token that is exactly `*` matches one token, and a
//! last token that is exactly `>` matches one or more remaining tokens. Everything else matches
//! byte for byte. The matcher does not validate subjects; the server does that before storing.

/// True if `subject` (literal) matches `filter` (may contain wildcards).
pub fn matches(filter: &str, subject: &str) -> bool {
    let mut f = filter.split('.');
    let mut s = subject.split('.');
    loop {
        match (f.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(ft), Some(st)) if ft == st => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// True if `filter` contains no wildcard token.
pub fn is_literal(filter: &str) -> bool {
    !filter.split('.').any(|t| t == "*" || t == ">")
}

/// True if `filter` matches every subject (`>`) or is empty (no filter).
pub fn is_match_all(filter: &str) -> bool {
    filter.is_empty() || filter == ">"
}

/// The literal text every subject matching `filter` starts with: the tokens before the first
/// wildcard, with their trailing `.`. For a literal filter it is the whole filter.
pub fn literal_prefix(filter: &str) -> &str {
    let mut end = 0;
    for tok in filter.split('.') {
        if tok == "*" || tok == ">" {
            return &filter[..end];
        }
        end += tok.len() + 1;
    }
    filter
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A naive matcher written differently (token vectors and recursion) to check against.
    fn naive(filter: &[&str], subject: &[&str]) -> bool {
        match (filter.first(), subject.first()) {
            (Some(&">"), Some(_)) => filter.len() == 1,
            (Some(&"*"), Some(_)) => naive(&filter[1..], &subject[1..]),
            (Some(f), Some(s)) => f == s && naive(&filter[1..], &subject[1..]),
            (None, None) => true,
            _ => false,
        }
    }

    #[test]
    fn table() {
        let cases = [
            ("a.b", "a.b", true),
            ("a.b", "a.c", false),
            ("a.*", "a.b", true),
            ("a.*", "a.b.c", false),
            ("a.>", "a.b.c", true),
            ("a.>", "a", false),
            (">", "a", true),
            ("*", "a.b", false),
            ("*.b.>", "x.b.c", true),
            ("a.*b", "a.xb", false),
            ("a.*b", "a.*b", true),
        ];
        for (f, s, want) in cases {
            assert_eq!(matches(f, s), want, "{f} vs {s}");
        }
    }

    #[test]
    fn literal_prefixes() {
        assert_eq!(literal_prefix("orders.>"), "orders.");
        assert_eq!(literal_prefix("a.*.c"), "a.");
        assert_eq!(literal_prefix(">"), "");
        assert_eq!(literal_prefix("a.b"), "a.b");
        assert!(is_literal("a.b") && !is_literal("a.*") && !is_literal(">"));
    }

    proptest! {
        #[test]
        fn agrees_with_naive_matcher(f in proptest::collection::vec("[ab*>]", 1..5),
                                     s in proptest::collection::vec("[ab]", 1..5)) {
            // `>` is only valid last; the naive matcher encodes that rule, so use valid filters.
            let valid = f.iter().take(f.len() - 1).all(|t| t != ">");
            prop_assume!(valid);
            let filter = f.join(".");
            let subject = s.join(".");
            let fv: Vec<&str> = f.iter().map(String::as_str).collect();
            let sv: Vec<&str> = s.iter().map(String::as_str).collect();
            prop_assert_eq!(matches(&filter, &subject), naive(&fv, &sv));
            if matches(&filter, &subject) {
                prop_assert!(subject.starts_with(literal_prefix(&filter)));
            }
        }
    }
}
