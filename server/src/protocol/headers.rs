//! NATS header blocks (ADR-4): `NATS/1.0[ status[ description]]\r\n(Name: value\r\n)*\r\n`.

/// Appends one `Name: value\r\n` header line.
pub fn push_header(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `block` (empty: none) with header `name` set to `value`: every earlier `name` line (matched
/// case-insensitively) removed and the new one last, as nats-server's `setHeader` leaves it; the
/// first line (`NATS/1.0` and any status) is kept.
pub fn set_header(block: &[u8], name: &str, value: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(block);
    let mut lines = text.split("\r\n");
    let first = lines.next().filter(|l| !l.is_empty()).unwrap_or("NATS/1.0");
    let mut out = first.as_bytes().to_vec();
    out.extend_from_slice(b"\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let same = line
            .split_once(':')
            .is_some_and(|(k, _)| k.eq_ignore_ascii_case(name));
        if !same {
            out.extend_from_slice(line.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    push_header(&mut out, name, value);
    out.extend_from_slice(b"\r\n");
    out
}

/// Builds a header block without status: `NATS/1.0\r\n` then the `(name, value)` lines.
pub fn block(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut out = b"NATS/1.0\r\n".to_vec();
    for (k, v) in pairs {
        push_header(&mut out, k, v);
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Builds a status-only header block such as `NATS/1.0 503\r\n\r\n` with extra header lines.
pub fn status_block(status: u16, description: Option<&str>, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(b"NATS/1.0 ");
    out.extend_from_slice(status.to_string().as_bytes());
    if let Some(d) = description {
        out.push(b' ');
        out.extend_from_slice(d.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    for (k, v) in extra {
        push_header(&mut out, k, v);
    }
    out.extend_from_slice(b"\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_responders_block_matches_nats_server() {
        let b = status_block(503, None, &[("Nats-Subject", "nobody.here")]);
        assert_eq!(b, b"NATS/1.0 503\r\nNats-Subject: nobody.here\r\n\r\n");
        assert_eq!(b.len(), 32 + "nobody.here".len());
    }

    #[test]
    fn description_follows_status() {
        assert_eq!(
            status_block(404, Some("No Messages"), &[]),
            b"NATS/1.0 404 No Messages\r\n\r\n"
        );
    }

    #[test]
    fn set_header_replaces_every_earlier_value_and_keeps_the_status_line() {
        assert_eq!(set_header(b"", "A", "1"), b"NATS/1.0\r\nA: 1\r\n\r\n");
        let block = b"NATS/1.0 100 Idle\r\na: 0\r\nX: y\r\nA: 2\r\n\r\n";
        assert_eq!(
            set_header(block, "A", "1"),
            b"NATS/1.0 100 Idle\r\nX: y\r\nA: 1\r\n\r\n"
        );
    }
}
