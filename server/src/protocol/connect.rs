//! The CONNECT options a client sends.

use serde::Deserialize;

/// Options from a client's `CONNECT` JSON. Unknown fields are ignored. As in nats-server the
/// JSON is applied over the defaults (`verbose`, `pedantic` and `echo` on), and `null` leaves a
/// field at its default.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct ConnectOptions {
    /// Acknowledge every op with `+OK`.
    #[serde(deserialize_with = "null_true")]
    pub verbose: bool,
    /// Strict checking (e.g. publish subjects must be literal).
    #[serde(deserialize_with = "null_true")]
    pub pedantic: bool,
    /// Deliver the connection's own publishes to its subscriptions.
    pub echo: Option<bool>,
    /// The client understands HMSG.
    #[serde(deserialize_with = "null_false")]
    pub headers: bool,
    /// The client wants a 503 status when a request has no responders.
    #[serde(deserialize_with = "null_false")]
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
    #[serde(deserialize_with = "null_false")]
    pub tls_required: bool,
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
        }
    }
}

fn null_true<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<bool>::deserialize(d)?.unwrap_or(true))
}

fn null_false<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<bool>::deserialize(d)?.unwrap_or(false))
}

impl ConnectOptions {
    /// Parses the JSON argument of `CONNECT`.
    pub fn from_json(json: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(json)
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
}
