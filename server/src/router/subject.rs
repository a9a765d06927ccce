//! Subject syntax: validation, wildcard matching and subset checks.
//!
//! A subject is a non-empty sequence of tokens separated by `.`. Tokens are never empty and
//! never contain ASCII whitespace (space, tab, CR, LF, FF, VT). Everything else, including
//! UTF-8, is a literal character, compared case-sensitively.
//!
//! In a *pattern* (a SUB subject or a filter), a token that is exactly `*` matches exactly one
//! token, and a token that is exactly `>` matches one or more tokens and must be the last token.
//! A token that only *contains* `*` or `>` (`foo.b*r`, `a>`) is a literal token.
//!
//! Invariants this module guarantees:
//! - Every function is pure, never panics and never allocates.
//! - Wildcards only have meaning in patterns. In the subject passed to [`matches`], a `*` or `>`
//!   token is an ordinary token: a publish to `foo.*` reaches subscribers of `foo.*` and
//!   `foo.>`, but not of `foo.bar`. The sublist relies on [`matches`] being exactly its
//!   routing rule (its property tests compare against it).
//! - [`matches`] and [`is_subset`] return `false` when a pattern argument is not a valid
//!   subject or the subject argument is not routable, rather than guessing.

/// Separates tokens in a subject.
pub const TOKEN_SEPARATOR: char = '.';
/// A pattern token that matches exactly one token.
pub const SINGLE_WILDCARD: &str = "*";
/// A pattern token that matches one or more trailing tokens; only valid as the last token.
pub const FULL_WILDCARD: &str = ">";

/// Splits a subject into its tokens. Does not validate: `a..b` yields an empty token.
pub fn tokens(s: &str) -> std::str::Split<'_, char> {
    s.split(TOKEN_SEPARATOR)
}

/// The whitespace bytes that may not appear anywhere in a subject or a queue name.
fn is_forbidden_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n' | 0x0b | 0x0c)
}

/// Whether `t` is a valid token ignoring wildcard rules: non-empty and without whitespace.
fn is_valid_token(t: &str) -> bool {
    !t.is_empty() && !t.bytes().any(is_forbidden_whitespace)
}

/// Whether `t` is a wildcard token (`*` or `>`) when it appears in a pattern.
fn is_wildcard_token(t: &str) -> bool {
    t == SINGLE_WILDCARD || t == FULL_WILDCARD
}

/// Whether `s` is a valid subscription subject or filter: non-empty, no empty tokens, no
/// whitespace, and a `>` token only in last position.
pub fn is_valid_subject(s: &str) -> bool {
    if s.is_empty() {
        return false;
    }
    let mut after_full_wildcard = false;
    for t in tokens(s) {
        if after_full_wildcard || !is_valid_token(t) {
            return false;
        }
        after_full_wildcard = t == FULL_WILDCARD;
    }
    true
}

/// Whether `s` is a valid subject without wildcard tokens (what a well-behaved client
/// publishes to).
pub fn is_valid_literal_subject(s: &str) -> bool {
    !s.is_empty() && tokens(s).all(|t| is_valid_token(t) && !is_wildcard_token(t))
}

/// Whether `s` can be routed as a message subject: non-empty, no empty tokens, no whitespace.
/// `*` and `>` tokens are allowed anywhere and are treated as literal tokens.
pub fn is_routable_subject(s: &str) -> bool {
    !s.is_empty() && tokens(s).all(is_valid_token)
}

/// Whether `s` contains no wildcard token. Does not validate the rest of the syntax.
pub fn is_literal(s: &str) -> bool {
    !tokens(s).any(is_wildcard_token)
}

/// Whether `q` is a valid queue group name: non-empty and without whitespace.
pub fn is_valid_queue_name(q: &str) -> bool {
    is_valid_token(q)
}

/// Whether the routable `subject` matches `pattern`. Wildcard tokens in `subject` are literal.
///
/// Returns `false` if `pattern` is not a valid subject or `subject` is not routable.
pub fn matches(pattern: &str, subject: &str) -> bool {
    is_valid_subject(pattern) && is_routable_subject(subject) && matches_unchecked(pattern, subject)
}

/// [`matches`] without validating its arguments; callers guarantee that `pattern` is a valid
/// subject and `subject` is routable.
pub(crate) fn matches_unchecked(pattern: &str, subject: &str) -> bool {
    let mut subject_tokens = tokens(subject);
    for p in tokens(pattern) {
        let Some(s) = subject_tokens.next() else {
            return false;
        };
        if p == FULL_WILDCARD {
            return true;
        }
        if p != SINGLE_WILDCARD && p != s {
            return false;
        }
    }
    subject_tokens.next().is_none()
}

/// Whether every subject matched by `pattern` is also matched by `of` (used to check a
/// wildcard subscription against permission patterns).
///
/// Returns `false` if either argument is not a valid subject. `is_subset(p, p)` holds for every
/// valid `p`.
pub fn is_subset(pattern: &str, of: &str) -> bool {
    if !is_valid_subject(pattern) || !is_valid_subject(of) {
        return false;
    }
    let mut pattern_tokens = tokens(pattern);
    for o in tokens(of) {
        let Some(p) = pattern_tokens.next() else {
            // `of` needs more tokens than `pattern` can supply.
            return false;
        };
        match o {
            // `p` and everything after it covers at least one token, which `>` accepts.
            FULL_WILDCARD => return true,
            // `*` accepts any single token, but not the variable length of a `>`.
            SINGLE_WILDCARD if p == FULL_WILDCARD => return false,
            SINGLE_WILDCARD => {}
            // A literal only covers that same literal, never a wildcard.
            literal if p != literal => return false,
            _ => {}
        }
    }
    pattern_tokens.next().is_none()
}

#[cfg(test)]
#[path = "subject_tests.rs"]
mod tests;
