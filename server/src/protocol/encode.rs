//! Server-to-client encodings: `INFO`, `MSG`, `HMSG`, `PING`, `PONG`, `+OK`, `-ERR`.

use bytes::{BufMut, BytesMut};
use serde::Serialize;

/// `PING\r\n`.
pub const PING: &[u8] = b"PING\r\n";
/// `PONG\r\n`.
pub const PONG: &[u8] = b"PONG\r\n";
/// `+OK\r\n`.
pub const OK: &[u8] = b"+OK\r\n";

/// The `INFO` JSON. Field order and omission rules follow nats-server 2.11+.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ServerInfo {
    /// Unique server id.
    pub server_id: String,
    /// Server name (defaults to the id).
    pub server_name: String,
    /// Advertised nats-server version whose behaviour jetraft implements.
    pub version: String,
    /// Protocol version.
    pub proto: u8,
    /// Build commit, informational.
    pub git_commit: String,
    /// Runtime, informational.
    pub go: String,
    /// Listen host.
    pub host: String,
    /// Listen port.
    pub port: u16,
    /// Headers are supported (always true).
    pub headers: bool,
    /// Clients must authenticate.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub auth_required: bool,
    /// Clients must upgrade to TLS (or start with it, `handshake_first`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tls_required: bool,
    /// Clients must present a certificate.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tls_verify: bool,
    /// Clients may upgrade to TLS but need not (`allow_non_tls`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tls_available: bool,
    /// Largest message accepted.
    pub max_payload: u32,
    /// JetStream is available.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub jetstream: bool,
    /// Connection id.
    pub client_id: u64,
    /// Peer address as seen by the server.
    pub client_ip: String,
    /// Nonce NKEY users sign in CONNECT.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    /// Cluster name, when clustered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Client URLs of the other cluster members.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub connect_urls: Vec<String>,
    /// Lame-duck mode: clients should reconnect elsewhere.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ldm: bool,
    /// Set in the INFO sent after the first PONG.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub connect_info: bool,
    /// Bound account, in the INFO sent after the first PONG.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_account: Option<String>,
    /// JetStream API level.
    pub api_lvl: u32,
}

/// Appends `INFO {json} \r\n` (nats-server puts a space before the CRLF).
pub fn info(buf: &mut BytesMut, info: &ServerInfo) {
    buf.put_slice(b"INFO ");
    // Serialising a plain struct of strings and numbers cannot fail.
    let json = serde_json::to_vec(info).unwrap_or_default();
    buf.put_slice(&json);
    buf.put_slice(b" \r\n");
}

/// Appends `-ERR '<text>'\r\n`.
pub fn err(buf: &mut BytesMut, text: &str) {
    buf.put_slice(b"-ERR '");
    buf.put_slice(text.as_bytes());
    buf.put_slice(b"'\r\n");
}

/// Appends a `MSG` or, when `headers` is given, an `HMSG`.
pub fn msg(
    buf: &mut BytesMut,
    subject: &[u8],
    sid: &[u8],
    reply: Option<&[u8]>,
    headers: Option<&[u8]>,
    payload: &[u8],
) {
    let hlen = headers.map_or(0, <[u8]>::len);
    buf.reserve(
        subject.len() + sid.len() + reply.map_or(0, <[u8]>::len) + hlen + payload.len() + 48,
    );
    buf.put_slice(if headers.is_some() { b"HMSG " } else { b"MSG " });
    buf.put_slice(subject);
    buf.put_u8(b' ');
    buf.put_slice(sid);
    buf.put_u8(b' ');
    if let Some(r) = reply {
        buf.put_slice(r);
        buf.put_u8(b' ');
    }
    if let Some(h) = headers {
        put_decimal(buf, h.len());
        buf.put_u8(b' ');
        put_decimal(buf, h.len() + payload.len());
        buf.put_slice(b"\r\n");
        buf.put_slice(h);
    } else {
        put_decimal(buf, payload.len());
        buf.put_slice(b"\r\n");
    }
    buf.put_slice(payload);
    buf.put_slice(b"\r\n");
}

/// Appends `n` in decimal without allocating.
fn put_decimal(buf: &mut BytesMut, n: usize) {
    let mut tmp = [0u8; 20];
    buf.put_slice(decimal(u64::try_from(n).unwrap_or(u64::MAX), &mut tmp));
}

/// `n`'s decimal digits, written at the end of `tmp` (20 bytes hold any `u64`).
pub(crate) fn decimal(mut n: u64, tmp: &mut [u8; 20]) -> &[u8] {
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &tmp[i..]
}

/// Appends `n` in decimal.
pub(crate) fn push_decimal(s: &mut String, n: u64) {
    let mut tmp = [0u8; 20];
    for &d in decimal(n, &mut tmp) {
        s.push(char::from(d));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msg_framing_matches_nats_server() {
        let mut b = BytesMut::new();
        msg(&mut b, b"foo", b"1", None, None, b"hello");
        msg(&mut b, b"foo", b"22", Some(b"_INBOX.x"), None, b"");
        msg(
            &mut b,
            b"foo",
            b"3",
            None,
            Some(b"NATS/1.0\r\nA: b\r\n\r\n"),
            b"hi",
        );
        assert_eq!(
            &b[..],
            &b"MSG foo 1 5\r\nhello\r\nMSG foo 22 _INBOX.x 0\r\n\r\nHMSG foo 3 18 20\r\nNATS/1.0\r\nA: b\r\n\r\nhi\r\n"[..]
        );
    }

    #[test]
    fn decimals_encode() {
        for n in [0usize, 7, 10, 99, 12345, usize::MAX] {
            let mut b = BytesMut::new();
            put_decimal(&mut b, n);
            assert_eq!(&b[..], n.to_string().as_bytes());
        }
    }

    #[test]
    fn err_is_single_quoted() {
        let mut b = BytesMut::new();
        err(&mut b, "Invalid Subject");
        assert_eq!(&b[..], b"-ERR 'Invalid Subject'\r\n");
    }
}
