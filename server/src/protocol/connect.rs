//! The CONNECT options a client sends.
//!
//! The JSON is applied the way nats-server's `json.Unmarshal` into its client options applies
//! it, because clients depend on the answers: a JSON object is applied key by key over the
//! options already in force, in document order (so of duplicate keys the last wins), keys match
//! field names exactly or else ASCII-case-insensitively, `null` (as a value or as the whole
//! document) leaves options as they are, unknown keys are ignored, and anything else (an
//! array, a number, a value of the wrong type for a known field, trailing bytes) is an error.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

/// Options from a client's `CONNECT` JSON. Before any CONNECT nats-server's defaults apply
/// (`verbose`, `pedantic` and `echo` on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Acknowledge every op with `+OK`.
    pub verbose: bool,
    /// Strict checking (e.g. publish subjects must be literal).
    pub pedantic: bool,
    /// Deliver the connection's own publishes to its subscriptions.
    pub echo: Option<bool>,
    /// The client understands HMSG.
    pub headers: bool,
    /// The client wants a 503 status when a request has no responders.
    pub no_responders: bool,
    /// Protocol version (0 or 1).
    pub protocol: Option<i64>,
    /// Client-given connection name.
    pub name: Option<String>,
    /// Client library language.
    pub lang: Option<String>,
    /// Client library version.
    pub version: Option<String>,
    /// User name.
    pub user: Option<String>,
    /// Password.
    pub pass: Option<String>,
    /// Token.
    pub auth_token: Option<String>,
    /// TLS was required by the client.
    pub tls_required: bool,
    /// Public NKEY of the user.
    pub nkey: Option<String>,
    /// Signature of the INFO nonce by the NKEY (base64url).
    pub sig: Option<String>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            verbose: true,
            pedantic: true,
            echo: None,
            headers: false,
            no_responders: false,
            protocol: None,
            name: None,
            lang: None,
            version: None,
            user: None,
            pass: None,
            auth_token: None,
            tls_required: false,
            nkey: None,
            sig: None,
        }
    }
}

/// Why a CONNECT argument was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    /// Not JSON, or not an object or `null`.
    #[error("invalid CONNECT JSON: {0}")]
    Json(String),
    /// A known field has a value of the wrong type.
    #[error("CONNECT field {0:?} has the wrong type")]
    FieldType(String),
}

/// The keys of a JSON object in document order, duplicates kept; `None` for `null`.
struct Entries(Option<Vec<(String, Value)>>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;
        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Entries, E> {
                Ok(Entries(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    out.push(entry);
                }
                Ok(Entries(Some(out)))
            }
        }
        d.deserialize_any(EntriesVisitor)
    }
}

/// Fields nats-server knows with a value type our options do not keep: checked, then ignored.
const OTHER_STRING_FIELDS: [&str; 4] = ["jwt", "account", "remote_account", "proxy_sig"];

/// CONNECT fields that are secrets: never logged.
const SECRET_FIELDS: [&str; 4] = ["pass", "auth_token", "sig", "jwt"];

/// The CONNECT JSON for the trace log, with secrets replaced by `[REDACTED]` (as nats-server
/// traces it); unparsable JSON is not echoed at all.
pub fn redacted(json: &[u8]) -> String {
    match serde_json::from_slice::<Value>(json) {
        Ok(Value::Object(mut map)) => {
            for (key, value) in map.iter_mut() {
                if SECRET_FIELDS.iter().any(|s| key.eq_ignore_ascii_case(s)) && !value.is_null() {
                    *value = Value::String("[REDACTED]".into());
                }
            }
            Value::Object(map).to_string()
        }
        _ => format!("<{} bytes, not a JSON object>", json.len()),
    }
}

impl ConnectOptions {
    /// Parses the JSON argument of `CONNECT` over the defaults.
    pub fn from_json(json: &[u8]) -> Result<Self, ConnectError> {
        let mut opts = Self::default();
        opts.apply_json(json)?;
        Ok(opts)
    }

    /// Applies the JSON argument of `CONNECT` over these options (see the module docs). On an
    /// error some fields may already be changed; the caller closes the connection.
    pub fn apply_json(&mut self, json: &[u8]) -> Result<(), ConnectError> {
        let entries = serde_json::from_slice::<Entries>(json)
            .map_err(|e| ConnectError::Json(e.to_string()))?;
        for (key, value) in entries.0.unwrap_or_default() {
            self.apply_field(&key, value)?;
        }
        Ok(())
    }

    fn apply_field(&mut self, key: &str, value: Value) -> Result<(), ConnectError> {
        let is = |name: &str| key.eq_ignore_ascii_case(name);
        let wrong = || ConnectError::FieldType(key.to_string());
        let boolean = |v: &Value| match v {
            Value::Null => Ok(None),
            Value::Bool(b) => Ok(Some(*b)),
            _ => Err(wrong()),
        };
        let string = |v: Value| match v {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s)),
            _ => Err(wrong()),
        };
        let set_bool = |field: &mut bool, v: &Value| -> Result<(), ConnectError> {
            if let Some(b) = boolean(v)? {
                *field = b;
            }
            Ok(())
        };
        if is("verbose") {
            set_bool(&mut self.verbose, &value)?;
        } else if is("pedantic") {
            set_bool(&mut self.pedantic, &value)?;
        } else if is("tls_required") {
            set_bool(&mut self.tls_required, &value)?;
        } else if is("headers") {
            set_bool(&mut self.headers, &value)?;
        } else if is("no_responders") {
            set_bool(&mut self.no_responders, &value)?;
        } else if is("new_account") {
            boolean(&value)?;
        } else if is("echo") {
            if let Some(b) = boolean(&value)? {
                self.echo = Some(b);
            }
        } else if is("protocol") {
            match value {
                Value::Null => {}
                Value::Number(n) => self.protocol = Some(n.as_i64().ok_or_else(wrong)?),
                _ => return Err(wrong()),
            }
        } else if let Some(field) = [
            ("name", &mut self.name),
            ("lang", &mut self.lang),
            ("version", &mut self.version),
            ("user", &mut self.user),
            ("pass", &mut self.pass),
            ("auth_token", &mut self.auth_token),
            ("nkey", &mut self.nkey),
            ("sig", &mut self.sig),
        ]
        .into_iter()
        .find_map(|(name, field)| is(name).then_some(field))
        {
            if let Some(s) = string(value)? {
                *field = Some(s);
            }
        } else if OTHER_STRING_FIELDS.iter().any(|name| is(name)) {
            string(value)?;
        } else if (is("import") || is("export")) && !matches!(value, Value::Null | Value::Object(_))
        {
            return Err(wrong());
        }
        Ok(())
    }

    /// Whether echo is on (the default).
    pub fn echo(&self) -> bool {
        self.echo.unwrap_or(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn async_nats_connect_with_nulls_parses() {
        let json = br#"{"verbose":false,"pedantic":false,"jwt":null,"nkey":null,"sig":null,"name":"rsprobe","echo":true,"lang":"rust","version":"0.51.0","protocol":1,"tls_required":false,"user":null,"pass":null,"auth_token":null,"headers":true,"no_responders":true}"#;
        let c = ConnectOptions::from_json(json).unwrap();
        assert!(c.headers && c.no_responders && c.echo());
        assert_eq!(c.name.as_deref(), Some("rsprobe"));
        assert_eq!(c.user, None);
    }

    #[test]
    fn empty_object_gets_nats_server_defaults() {
        let c = ConnectOptions::from_json(b"{}").unwrap();
        assert!(c.verbose && c.pedantic && c.echo() && !c.headers);
        let c = ConnectOptions::from_json(br#"{"verbose":null,"headers":null}"#).unwrap();
        assert!(c.verbose && !c.headers);
    }

    #[test]
    fn invalid_json_is_an_error() {
        assert!(ConnectOptions::from_json(b"{verbose").is_err());
    }

    /// What nats-server 2.15.1 does with each CONNECT argument (measured with raw sockets:
    /// accepted and verbose on/off, or the connection closed).
    #[test]
    fn json_is_applied_as_nats_server_applies_it() {
        let verbose = |json: &str| ConnectOptions::from_json(json.as_bytes()).map(|c| c.verbose);
        // Duplicate keys: the last one wins.
        assert_eq!(verbose(r#"{"verbose":false,"verbose":true}"#), Ok(true));
        assert_eq!(verbose(r#"{"verbose":true,"verbose":false}"#), Ok(false));
        // Keys match case-insensitively; in document order.
        assert_eq!(verbose(r#"{"VERBOSE":false}"#), Ok(false));
        assert_eq!(verbose(r#"{"verbose":false,"Verbose":true}"#), Ok(true));
        // null as the whole document or as a value leaves the defaults.
        assert_eq!(verbose("null"), Ok(true));
        assert_eq!(verbose(" null "), Ok(true));
        assert_eq!(verbose(r#"{"verbose":null}"#), Ok(true));
        // Unknown keys are ignored, whatever their type.
        assert_eq!(
            verbose(r#"{"x":[1,{"y":null}],"verbose":false}"#),
            Ok(false)
        );
        // Everything else closes the connection.
        for bad in [
            "[]",
            "[false]",
            "5",
            "\"x\"",
            "true",
            "",
            "\r",
            "{}x",
            r#"{"verbose":"x"}"#,
            r#"{"verbose":1}"#,
            r#"{"protocol":1.0}"#,
            r#"{"protocol":"1"}"#,
            r#"{"name":5}"#,
            r#"{"jwt":false}"#,
            r#"{"import":"x"}"#,
        ] {
            assert!(
                ConnectOptions::from_json(bad.as_bytes()).is_err(),
                "{bad:?} must be refused"
            );
        }
    }

    #[test]
    fn json_applies_over_the_options_in_force() {
        let mut c = ConnectOptions::from_json(br#"{"verbose":false,"name":"a"}"#).unwrap();
        c.apply_json(br#"{"headers":true}"#).unwrap();
        assert!(!c.verbose && c.headers);
        assert_eq!(c.name.as_deref(), Some("a"));
        c.apply_json(b"null").unwrap();
        assert!(!c.verbose && c.headers);
    }

    #[test]
    fn redacted_hides_secrets_only() {
        let out = redacted(
            br#"{"user":"bob","pass":"hunter2","auth_token":"tok","sig":"abc","nkey":"UABC"}"#,
        );
        assert!(!out.contains("hunter2") && !out.contains("tok\"") && !out.contains("abc"));
        assert!(out.contains("bob") && out.contains("UABC") && out.contains("[REDACTED]"));
        assert!(!redacted(b"{\"pass\":\"x").contains('x'));
    }
}
