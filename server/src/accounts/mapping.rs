//! [`SubjectMap`]: a subject matched by one pattern rewritten into another, wildcard tokens
//! carried over by position (`svc.*` -> `api.*`, `ev.>` -> `pre.ev.>`), as imports map their
//! subjects between accounts.

use crate::router::subject;

/// Maps subjects matching `from` onto `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectMap {
    /// The pattern subjects must match.
    from: String,
    /// The pattern they are rewritten into.
    to: String,
}

impl SubjectMap {
    /// A map from `from` to `to` (both valid subjects, wildcards allowed).
    pub fn new(from: impl Into<String>, to: impl Into<String>) -> Self {
        Self {
            from: from.into(),
            to: to.into(),
        }
    }

    /// The pattern subjects must match.
    pub fn from(&self) -> &str {
        &self.from
    }

    /// Whether the literal `subject` is mapped.
    pub fn matches(&self, subject_: &str) -> bool {
        subject::matches(&self.from, subject_)
    }

    /// `subject_` (which [`Self::matches`]) rewritten: each `*` of `to` takes the token the
    /// same-numbered `*` of `from` matched, and a trailing `>` takes what `from`'s `>` matched.
    /// A `to` wildcard with nothing to take stays as written.
    pub fn apply(&self, subject_: &str) -> String {
        if self.from == self.to {
            return subject_.to_string();
        }
        let mut singles = Vec::new();
        let mut tail = None;
        let mut tokens = subject::tokens(subject_);
        let mut consumed = 0usize;
        for p in subject::tokens(&self.from) {
            if p == ">" {
                tail = Some(&subject_[consumed.min(subject_.len())..]);
                break;
            }
            let Some(t) = tokens.next() else { break };
            consumed += t.len() + 1;
            if p == "*" {
                singles.push(t);
            }
        }
        let mut singles = singles.into_iter();
        let mapped: Vec<&str> = subject::tokens(&self.to)
            .map(|t| match t {
                "*" => singles.next().unwrap_or(t),
                ">" => tail.unwrap_or(t),
                _ => t,
            })
            .collect();
        mapped.join(".")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_patterns_keep_the_subject() {
        let m = SubjectMap::new("svc.>", "svc.>");
        assert!(m.matches("svc.a.b"));
        assert_eq!(m.apply("svc.a.b"), "svc.a.b");
    }

    #[test]
    fn wildcards_are_carried_by_position() {
        let m = SubjectMap::new("req.*.x", "api.*");
        assert!(m.matches("req.7.x"));
        assert!(!m.matches("req.7.y"));
        assert_eq!(m.apply("req.7.x"), "api.7");
        let m = SubjectMap::new("ev.>", "pre.ev.>");
        assert_eq!(m.apply("ev.a.b"), "pre.ev.a.b");
        let m = SubjectMap::new("a.*.>", "b.>.*");
        assert_eq!(m.apply("a.1.2.3"), "b.2.3.1");
    }

    #[test]
    fn literal_patterns_map_to_the_literal() {
        let m = SubjectMap::new("time.now", "svc.time");
        assert!(m.matches("time.now"));
        assert_eq!(m.apply("time.now"), "svc.time");
    }
}
