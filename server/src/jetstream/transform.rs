//! Subject transforms (ADR-36) as sources use them: `{src, dest}` rewrites a subject matching
//! `src` by substituting the tokens `src`'s wildcards matched into `dest`.
//!
//! Supported destination forms: literal tokens, `$N` and `{{wildcard(N)}}` (the N-th `*` of
//! `src`, 1-based), and a trailing `>` when `src` ends in `>` (the tokens it matched). An empty
//! `dest` keeps the subject. The other mapping functions (`partition`, `split`, `slice`...) are
//! refused at validation with nats-server's `invalid mapping destination` wording.
//!
//! Pure: no I/O, so the leader's sourcing task and the config validation share it.

use crate::router::subject;

/// One destination token.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// A literal token.
    Literal(String),
    /// The token matched by the N-th (0-based) `*` of `src`.
    Wildcard(usize),
    /// The tail matched by `src`'s trailing `>`.
    Tail,
}

/// A validated transform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transform {
    /// Source pattern (`>` when the config left it empty).
    src: String,
    /// Destination tokens; empty = keep the subject.
    dest: Vec<Part>,
}

/// Parses `$N` or `{{wildcard(N)}}` into N (1-based, as written); `None` for a literal.
fn wildcard_ref(token: &str) -> Option<Result<usize, ()>> {
    // `$` followed by digits only; `$KV` and the like are literal tokens.
    if let Some(n) = token.strip_prefix('$')
        && !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
    {
        return Some(n.parse().map_err(|_| ()));
    }
    let inner = token.strip_prefix("{{")?.strip_suffix("}}")?.trim();
    let (func, args) = inner.split_once('(')?;
    let args = args.strip_suffix(')')?;
    if !func.trim().eq_ignore_ascii_case("wildcard") {
        return Some(Err(()));
    }
    Some(args.trim().parse().map_err(|_| ()))
}

impl Transform {
    /// Validates `src`/`dest`. The error is nats-server's text after the `source transform: `
    /// prefix (`invalid mapping destination: wildcard index out of range in $2: [2]`).
    pub fn new(src: &str, dest: &str) -> Result<Self, String> {
        let src = if src.is_empty() { ">" } else { src };
        if !subject::is_valid_subject(src) {
            return Err("invalid mapping source: invalid subject".to_string());
        }
        let wildcards = subject::tokens(src).filter(|t| *t == "*").count();
        let tail = src == ">" || src.ends_with(".>");
        let mut parts = Vec::new();
        if !dest.is_empty() {
            for token in dest.split('.') {
                let part = match wildcard_ref(token) {
                    Some(Ok(n)) if n >= 1 && n <= wildcards => Part::Wildcard(n - 1),
                    Some(Ok(n)) => {
                        return Err(format!(
                            "invalid mapping destination: wildcard index out of range in {token}: [{n}]"
                        ));
                    }
                    Some(Err(())) => {
                        return Err(format!(
                            "invalid mapping destination: unknown function in {token}"
                        ));
                    }
                    None if token == ">" && tail => Part::Tail,
                    None if token.is_empty() || token == ">" || token.contains('{') => {
                        return Err("invalid mapping destination: invalid transform".to_string());
                    }
                    None => Part::Literal(token.to_string()),
                };
                parts.push(part);
            }
        }
        Ok(Self {
            src: src.to_string(),
            dest: parts,
        })
    }

    /// The source pattern.
    pub fn src(&self) -> &str {
        &self.src
    }

    /// The transformed subject, or `None` when `subj` does not match `src`.
    pub fn apply(&self, subj: &str) -> Option<String> {
        if !subject::matches(&self.src, subj) {
            return None;
        }
        if self.dest.is_empty() {
            return Some(subj.to_string());
        }
        let src: Vec<&str> = subject::tokens(&self.src).collect();
        let tokens: Vec<&str> = subject::tokens(subj).collect();
        let matched: Vec<&str> = src
            .iter()
            .zip(&tokens)
            .filter(|(s, _)| **s == "*")
            .map(|(_, t)| *t)
            .collect();
        let tail = tokens
            .get(src.len().saturating_sub(1)..)
            .unwrap_or_default();
        let out: Vec<String> = self
            .dest
            .iter()
            .map(|p| match p {
                Part::Literal(l) => l.clone(),
                Part::Wildcard(i) => matched.get(*i).copied().unwrap_or_default().to_string(),
                Part::Tail => tail.join("."),
            })
            .collect();
        Some(out.join("."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_wildcard_and_tail_destinations() {
        let t = Transform::new("orig.b", "tr.b").unwrap();
        assert_eq!(t.apply("orig.b").as_deref(), Some("tr.b"));
        assert_eq!(t.apply("orig.a"), None);
        let t = Transform::new("a.*.*", "x.$2.{{wildcard(1)}}").unwrap();
        assert_eq!(t.apply("a.1.2").as_deref(), Some("x.2.1"));
        let t = Transform::new("$KV.O.>", "$KV.B.>").unwrap();
        assert_eq!(t.apply("$KV.O.k.v").as_deref(), Some("$KV.B.k.v"));
        let t = Transform::new("", "").unwrap();
        assert_eq!(t.apply("any.thing").as_deref(), Some("any.thing"));
        let t = Transform::new(">", "p.>").unwrap();
        assert_eq!(t.apply("q.r").as_deref(), Some("p.q.r"));
    }

    #[test]
    fn bad_destinations_use_nats_server_wording() {
        assert_eq!(
            Transform::new("orig.*", "x.$2").unwrap_err(),
            "invalid mapping destination: wildcard index out of range in $2: [2]"
        );
        assert!(Transform::new("a.*", "{{partition(3,1)}}").is_err());
        assert!(Transform::new("a.b", "x.>").is_err());
    }
}
