//! Whether two subject filters can both match one subject (stream subject overlap checks).

/// True when some subject matches both `a` and `b` (wildcards `*` and `>` allowed in either).
pub fn subjects_overlap(a: &str, b: &str) -> bool {
    let mut ta = a.split('.');
    let mut tb = b.split('.');
    loop {
        match (ta.next(), tb.next()) {
            (None, None) => return true,
            (Some(">"), Some(_)) | (Some(_), Some(">")) => return true,
            (Some(x), Some(y)) => {
                if x != y && x != "*" && y != "*" {
                    return false;
                }
            }
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::subjects_overlap;

    #[test]
    fn literal_and_wildcard_overlaps() {
        let cases = [
            ("a.b", "a.b", true),
            ("a.b", "a.c", false),
            ("a.*", "a.b", true),
            ("a.*", "*.b", true),
            ("a.>", "a.b.c", true),
            ("a.>", "a", false),
            ("a", "a.b", false),
            (">", "x", true),
            ("a.*", "a.b.c", false),
            ("*.*", "a.>", true),
        ];
        for (a, b, want) in cases {
            assert_eq!(subjects_overlap(a, b), want, "{a} vs {b}");
            assert_eq!(subjects_overlap(b, a), want, "{b} vs {a}");
        }
    }
}
