//! A minimal HTTP/1.1 client for the monitoring port (no extra dependencies): GET, and
//! body-less requests of other methods (`/drainz`).
//!
//! Sends `Connection: close` and reads to EOF, so the body ends at EOF; handles both
//! `Content-Length` and `Transfer-Encoding: chunked` bodies (nats-server uses chunked once a body
//! exceeds Go's 4 KiB response buffer, e.g. `/varz`). Bounded by a 5 s timeout.

use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// A received HTTP response.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// Status code from the status line.
    pub status: u16,
    /// Header fields in order, names as sent.
    pub headers: Vec<(String, String)>,
    /// Decoded body (de-chunked), as UTF-8 (lossy).
    pub body: String,
}

impl HttpResponse {
    /// First header value with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Parses the body as JSON.
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        serde_json::from_str(&self.body).with_context(|| format!("parse JSON body: {}", self.body))
    }
}

/// GET `path` (including any query string) from `127.0.0.1:<port>`.
pub async fn get(port: u16, path: &str) -> anyhow::Result<HttpResponse> {
    request(port, "GET", path).await
}

/// A `method` request without a body (`POST`, `DELETE`, ...) for `path` on
/// `127.0.0.1:<port>`.
pub async fn request(port: u16, method: &str, path: &str) -> anyhow::Result<HttpResponse> {
    timeout(Duration::from_secs(5), request_inner(port, method, path))
        .await
        .with_context(|| format!("{method} {path} on port {port} timed out"))?
}

async fn request_inner(port: u16, method: &str, path: &str) -> anyhow::Result<HttpResponse> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .context("connect")?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: jetraft-tests\r\n\
         Accept: */*\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(req.as_bytes())
        .await
        .context("send request")?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .await
        .context("read response")?;
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> anyhow::Result<HttpResponse> {
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of headers in response")?;
    let head = std::str::from_utf8(&raw[..head_end]).context("non-UTF-8 response head")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        bail!("bad status line {status_line:?}");
    }
    let status: u16 = parts
        .next()
        .unwrap_or_default()
        .parse()
        .context("bad status code")?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    let rest = &raw[head_end + 4..];
    let chunked = headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("transfer-encoding") && v.to_ascii_lowercase().contains("chunked")
    });
    let body = if chunked {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    Ok(HttpResponse {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn dechunk(mut data: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("truncated chunk size")?;
        let size_str = std::str::from_utf8(&data[..line_end]).context("bad chunk size")?;
        let size_str = size_str.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_str, 16).context("bad chunk size")?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size + 2 {
            bail!("truncated chunk");
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// `GET path` over HTTPS on `127.0.0.1:port`, trusting only the CA in `ca_file`.
pub async fn https_get(
    port: u16,
    path: &str,
    ca_file: &std::path::Path,
) -> anyhow::Result<HttpResponse> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(ca_file)? {
        roots.add(cert?)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let fetch = async {
        let tcp = TcpStream::connect(("127.0.0.1", port))
            .await
            .context("connect")?;
        let name = rustls_pki_types::ServerName::try_from("127.0.0.1")?;
        let mut stream = connector
            .connect(name, tcp)
            .await
            .context("TLS handshake")?;
        let req =
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
        stream.write_all(req.as_bytes()).await.context("send")?;
        let mut raw = Vec::new();
        // A server closing without close_notify is fine once the response is complete.
        let _ = stream.read_to_end(&mut raw).await;
        parse_response(&raw)
    };
    timeout(Duration::from_secs(5), fetch)
        .await
        .with_context(|| format!("GET {path} over https on port {port} timed out"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_content_length_and_chunked_bodies() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}").unwrap();
        assert_eq!((r.status, r.body.as_str()), (200, "{}"));
        let r = parse_response(
            b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!((r.status, r.body.as_str()), (503, "abcde"));
        assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    }
}
