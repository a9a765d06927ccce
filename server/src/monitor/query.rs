//! Query parameters of the monitoring endpoints, decoded and refused as nats-server does.
//!
//! nats-server reads the first value of a parameter (`url.Values.Get`), treats an empty value as
//! absent, and answers a value it cannot decode with `400 Bad Request` and a plain-text body
//! naming the parameter and Go's parse error, e.g.
//! `Error decoding boolean for 'subs': strconv.ParseBool: parsing "x": invalid syntax`.

use std::num::IntErrorKind;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The query parameters of one request, in the order given.
#[derive(Debug, Default)]
pub(crate) struct QueryParams(pub(crate) Vec<(String, String)>);

/// A refused request: answered `400 Bad Request` with this plain-text body, as nats-server
/// writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused(pub(crate) String);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let mut resp = (StatusCode::BAD_REQUEST, self.0).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        resp
    }
}

impl QueryParams {
    /// The first value of `name`, if present and not empty.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// A boolean as Go's `strconv.ParseBool` reads it; absent is `false`.
    pub(crate) fn bool(&self, name: &str) -> Result<bool, Refused> {
        let Some(v) = self.get(name) else {
            return Ok(false);
        };
        match v {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
            "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
            _ => Err(bad_request(format!(
                "Error decoding boolean for '{name}': strconv.ParseBool: parsing {}: invalid syntax",
                go_quote(v)
            ))),
        }
    }

    /// A signed integer as Go's `strconv.Atoi` reads it (64-bit); absent is 0.
    pub(crate) fn int(&self, name: &str) -> Result<i64, Refused> {
        let Some(v) = self.get(name) else {
            return Ok(0);
        };
        v.parse::<i64>().map_err(|e| {
            bad_request(format!(
                "Error decoding int for '{name}': strconv.Atoi: parsing {}: {}",
                go_quote(v),
                go_int_error(e.kind())
            ))
        })
    }

    /// An unsigned integer as Go's `strconv.ParseUint(v, 10, 64)` reads it (no sign); absent
    /// is 0.
    pub(crate) fn uint(&self, name: &str) -> Result<u64, Refused> {
        let Some(v) = self.get(name) else {
            return Ok(0);
        };
        let parsed = if v.starts_with('+') {
            Err(IntErrorKind::InvalidDigit)
        } else {
            v.parse::<u64>().map_err(|e| *e.kind())
        };
        parsed.map_err(|kind| {
            bad_request(format!(
                "Error decoding uint64 for '{name}': strconv.ParseUint: parsing {}: {}",
                go_quote(v),
                go_int_error(&kind)
            ))
        })
    }

    /// `subs`: `detail` (any case) for details, else a boolean. Returns (subs, detail).
    pub(crate) fn subs(&self) -> Result<(bool, bool), Refused> {
        if self
            .get("subs")
            .is_some_and(|v| v.eq_ignore_ascii_case("detail"))
        {
            return Ok((false, true));
        }
        Ok((self.bool("subs")?, false))
    }

    /// `offset`: negative counts as 0.
    pub(crate) fn offset(&self) -> Result<usize, Refused> {
        Ok(usize::try_from(self.int("offset")?).unwrap_or(0))
    }

    /// `limit`: 0 or negative gives `default`.
    pub(crate) fn limit(&self, default: usize) -> Result<usize, Refused> {
        Ok(match usize::try_from(self.int("limit")?) {
            Ok(0) | Err(_) => default,
            Ok(n) => n,
        })
    }
}

/// A refusal with `text` as the body.
pub(crate) fn bad_request(text: String) -> Refused {
    Refused(text)
}

/// The tail of Go's `strconv.NumError` text for an integer parse error.
fn go_int_error(kind: &IntErrorKind) -> &'static str {
    match kind {
        IntErrorKind::PosOverflow | IntErrorKind::NegOverflow => "value out of range",
        _ => "invalid syntax",
    }
}

/// Go's `%q` of a string (`strconv.Quote`), for the characters a query value can hold.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\x7f' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> QueryParams {
        QueryParams(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    async fn body(r: Refused) -> (StatusCode, String) {
        let r = r.into_response();
        assert_eq!(
            r.headers()
                .get(header::CONTENT_TYPE)
                .map(HeaderValue::as_bytes),
            Some(&b"text/plain; charset=utf-8"[..])
        );
        let status = r.status();
        let bytes = axum::body::to_bytes(r.into_body(), 1 << 16)
            .await
            .unwrap_or_default();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[test]
    fn booleans_are_go_parse_bool() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(q(&[("x", t)]).bool("x").ok(), Some(true), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False", ""] {
            assert_eq!(q(&[("x", f)]).bool("x").ok(), Some(false), "{f}");
        }
        for bad in ["yes", "tRuE", "2", " 1"] {
            assert!(q(&[("x", bad)]).bool("x").is_err(), "{bad}");
        }
        // The first value counts, as url.Values.Get.
        assert!(q(&[("x", "bogus"), ("x", "1")]).bool("x").is_err());
    }

    #[tokio::test]
    async fn refusals_carry_nats_server_text() {
        let r = q(&[("subs", "bogus")]).bool("subs").unwrap_err();
        assert_eq!(
            body(r).await,
            (
                StatusCode::BAD_REQUEST,
                "Error decoding boolean for 'subs': strconv.ParseBool: parsing \"bogus\": invalid syntax"
                    .to_string()
            )
        );
        let r = q(&[("limit", "99999999999999999999")])
            .int("limit")
            .unwrap_err();
        assert_eq!(
            body(r).await.1,
            "Error decoding int for 'limit': strconv.Atoi: parsing \"99999999999999999999\": value out of range"
        );
        let r = q(&[("cid", "+5")]).uint("cid").unwrap_err();
        assert_eq!(
            body(r).await.1,
            "Error decoding uint64 for 'cid': strconv.ParseUint: parsing \"+5\": invalid syntax"
        );
        let r = q(&[("cid", "-1")]).uint("cid").unwrap_err();
        assert_eq!(
            body(r).await.1,
            "Error decoding uint64 for 'cid': strconv.ParseUint: parsing \"-1\": invalid syntax"
        );
    }

    #[test]
    fn offsets_and_limits_clamp_as_nats_server() {
        assert_eq!(q(&[("offset", "-3")]).offset().ok(), Some(0));
        assert_eq!(q(&[("limit", "-3")]).limit(1024).ok(), Some(1024));
        assert_eq!(q(&[("limit", "0")]).limit(1024).ok(), Some(1024));
        assert_eq!(q(&[("limit", "+5")]).limit(1024).ok(), Some(5));
        assert_eq!(q(&[]).limit(1024).ok(), Some(1024));
        assert!(q(&[("offset", "1e3")]).offset().is_err());
    }

    #[test]
    fn go_quote_escapes_like_strconv_quote() {
        assert_eq!(go_quote("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\x01\"");
        assert_eq!(go_quote("été"), "\"été\"");
    }
}
