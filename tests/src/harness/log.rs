//! Server log scanning (neon style): a jetraft test fails when the server logged an unexpected
//! `ERROR` line or panicked, even if the client-visible behaviour looked right.
//!
//! ERROR in jetraft means data loss, corruption or a broken invariant (STYLE B8), so a clean test
//! run must not produce one. For the reference nats-server this is a no-op: it logs ordinary
//! client mistakes (bad passwords, parser errors) as `[ERR]`.

use super::{ServerKind, ServerProcess};

/// Panics if the server log has an `ERROR` line or a panic message. No-op for nats-server.
pub fn assert_clean_log(srv: &ServerProcess) {
    assert_clean_log_allowing(srv, &[]);
}

/// Like [`assert_clean_log`], but ignores offending lines that contain any of `allowed`.
pub fn assert_clean_log_allowing(srv: &ServerProcess, allowed: &[&str]) {
    if srv.kind() == ServerKind::NatsServer {
        return;
    }
    let log = srv.log();
    let bad: Vec<String> = log
        .lines()
        .map(strip_ansi)
        .filter(|line| is_error_line(line))
        .filter(|line| !allowed.iter().any(|a| line.contains(a)))
        .collect();
    assert!(
        bad.is_empty(),
        "server log of {} has {} unexpected ERROR/panic line(s):\n{}",
        srv.client_url(),
        bad.len(),
        bad.join("\n")
    );
}

fn is_error_line(line: &str) -> bool {
    line.contains("panicked at")
        || line
            .split_whitespace()
            .any(|tok| tok == "ERROR" || tok == "[ERR]" || tok == "[FTL]")
}

/// Removes ANSI colour escapes (`ESC [ ... m`) that tracing-subscriber may emit.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_tracing_error_lines_with_colours() {
        let line = strip_ansi("2026-12-02T10:00:00Z \u{1b}[31mERROR\u{1b}[0m jetraft: boom");
        assert!(is_error_line(&line));
        assert!(!is_error_line(
            "2026-12-02T10:00:00Z  INFO jetraft: ERRORS are fine in text"
        ));
        assert!(is_error_line("thread 'main' panicked at src/main.rs:1:1:"));
    }
}
