//! Ports, `host:port` and route URLs, read the way nats-server reads them; shared by the command
//! line and the config file. Errors are plain reasons; callers add the flag or the location.
//!
//! Port numbers follow nats-server: `-1` asks for a random port (0, assigned by the OS), and
//! `0` means "the default" for the client port and "off" for the monitoring and cluster ports.

use crate::config::DEFAULT_PORT;

/// The client port: `-1` → 0 (random), `0` → [`DEFAULT_PORT`], `1..=65535` as is.
pub(crate) fn client_port(n: i64) -> Result<u16, String> {
    match n {
        -1 => Ok(0),
        0 => Ok(DEFAULT_PORT),
        _ => u16::try_from(n).map_err(|_| format!("port {n} is out of range (-1 to 65535)")),
    }
}

/// A port that may be off (monitoring, cluster): `0` → off, `-1` → `Some(0)` (random).
pub(crate) fn optional_port(n: i64) -> Result<Option<u16>, String> {
    match n {
        0 => Ok(None),
        -1 => Ok(Some(0)),
        _ => u16::try_from(n)
            .map(Some)
            .map_err(|_| format!("port {n} is out of range (-1 to 65535)")),
    }
}

/// A port number as text (`4222`, `-1`).
pub(crate) fn port_number(s: &str) -> Result<i64, String> {
    super::value::parse_integer(s).map_err(|_| format!("port {s:?} is not a number"))
}

/// Splits `host:port`, `:port` or `[v6]:port` like Go's `net.SplitHostPort`; brackets are removed.
pub(crate) fn split_host_port(s: &str) -> Result<(String, String), String> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("missing ']' in address {s:?}"))?;
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| format!("missing port in address {s:?}"))?;
        return Ok((host.to_string(), port.to_string()));
    }
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("missing port in address {s:?}"))?;
    if host.contains(':') {
        return Err(format!(
            "too many colons in address {s:?} (write IPv6 hosts as [::1]:port)"
        ));
    }
    Ok((host.to_string(), port.to_string()))
}

/// Joins a host and port into a socket-address string, bracketing IPv6 hosts.
fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Strips a `nats://` or `nats-route://` scheme (or none), user info, and any path.
fn url_authority<'a>(url: &'a str, kind: &str) -> Result<(&'a str, bool), String> {
    let url = url.trim();
    let rest = match url.split_once("://") {
        Some((scheme, rest)) => {
            let scheme = scheme.to_ascii_lowercase();
            if scheme != "nats" && scheme != "nats-route" {
                return Err(format!(
                    "{kind} URL {url:?} has scheme {scheme:?}; expected nats:// or nats-route://"
                ));
            }
            rest
        }
        None => url,
    };
    let authority = rest.split('/').next().unwrap_or(rest);
    match authority.rsplit_once('@') {
        Some((_, host_port)) => Ok((host_port, true)),
        None => Ok((authority, false)),
    }
}

/// One route URL (`nats://host:6222`, `nats-route://user:pass@host:6222`, `host:6222`) as
/// `host:port`. The port is required. User info is dropped: every node presents the
/// credentials of its own `cluster { authorization }`.
pub(crate) fn route(url: &str) -> Result<String, String> {
    let (authority, _) = url_authority(url, "route")?;
    let (host, port) = split_host_port(authority)
        .map_err(|_| format!("route URL {:?} has no port", url.trim()))?;
    if host.is_empty() {
        return Err(format!("route URL {:?} has no host", url.trim()));
    }
    let port = port_number(&port)?;
    match u16::try_from(port) {
        Ok(port) if port > 0 => Ok(join_host_port(&host, port)),
        _ => Err(format!(
            "route URL {:?} has port {port}, expected 1 to 65535",
            url.trim()
        )),
    }
}

/// A comma-separated `--routes` list; empty items are skipped.
pub(crate) fn routes(list: &str) -> Result<Vec<String>, String> {
    list.split(',')
        .filter(|r| !r.trim().is_empty())
        .map(route)
        .collect()
}

/// The `--cluster` listen URL (`nats://0.0.0.0:6222`) as host and port (`:-1` is random).
/// Credentials are refused: nats-server would require them from peers, and jetraft cannot.
pub(crate) fn cluster_listen(url: &str) -> Result<(String, Option<u16>), String> {
    let (authority, has_user) = url_authority(url, "cluster")?;
    if has_user {
        return Err("cluster credentials (user:password@) are not supported".to_string());
    }
    let (host, port) = split_host_port(authority)?;
    Ok((host, optional_port(port_number(&port)?)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_port_follows_nats_server_special_values() {
        assert_eq!(client_port(-1), Ok(0));
        assert_eq!(client_port(0), Ok(DEFAULT_PORT));
        assert_eq!(client_port(4333), Ok(4333));
        assert!(client_port(65536).unwrap_err().contains("out of range"));
        assert!(client_port(-2).is_err());
    }

    #[test]
    fn optional_port_zero_is_off_and_minus_one_is_random() {
        assert_eq!(optional_port(0), Ok(None));
        assert_eq!(optional_port(-1), Ok(Some(0)));
        assert_eq!(optional_port(8222), Ok(Some(8222)));
        assert!(optional_port(70000).is_err());
    }

    #[test]
    fn split_host_port_handles_empty_host_and_ipv6() {
        assert_eq!(
            split_host_port("127.0.0.1:4222"),
            Ok(("127.0.0.1".into(), "4222".into()))
        );
        assert_eq!(split_host_port(":4222"), Ok((String::new(), "4222".into())));
        assert_eq!(
            split_host_port("[::1]:4222"),
            Ok(("::1".into(), "4222".into()))
        );
        assert!(
            split_host_port("localhost")
                .unwrap_err()
                .contains("missing port")
        );
        assert!(
            split_host_port("::1:4222")
                .unwrap_err()
                .contains("too many colons")
        );
    }

    #[test]
    fn routes_strip_schemes_user_info_and_paths() {
        assert_eq!(route("nats://a:6222"), Ok("a:6222".into()));
        assert_eq!(
            route("nats-route://u:p@b.example:7244/"),
            Ok("b.example:7244".into())
        );
        assert_eq!(route("  NATS://10.0.0.1:6222 "), Ok("10.0.0.1:6222".into()));
        assert_eq!(route("c:6222"), Ok("c:6222".into()));
        assert_eq!(route("nats://[::1]:6222"), Ok("[::1]:6222".into()));
    }

    #[test]
    fn bad_routes_are_rejected_with_reason() {
        assert!(route("nats://a").unwrap_err().contains("has no port"));
        assert!(route("nats://:6222").unwrap_err().contains("no host"));
        assert!(route("tls://a:6222").unwrap_err().contains("scheme"));
        assert!(
            route("nats://a:0")
                .unwrap_err()
                .contains("expected 1 to 65535")
        );
        assert!(route("nats://a:x").unwrap_err().contains("not a number"));
    }

    #[test]
    fn route_lists_split_on_commas_and_skip_empty_items() {
        assert_eq!(
            routes("nats://a:1, nats-route://b:2,,"),
            Ok(vec!["a:1".to_string(), "b:2".to_string()])
        );
        assert_eq!(routes(""), Ok(vec![]));
    }

    #[test]
    fn cluster_listen_reads_host_and_port() {
        assert_eq!(
            cluster_listen("nats://0.0.0.0:6222"),
            Ok(("0.0.0.0".into(), Some(6222)))
        );
        assert_eq!(
            cluster_listen("nats://127.0.0.1:-1"),
            Ok(("127.0.0.1".into(), Some(0)))
        );
        assert_eq!(
            cluster_listen("localhost:7000"),
            Ok(("localhost".into(), Some(7000)))
        );
        assert!(
            cluster_listen("nats://0.0.0.0")
                .unwrap_err()
                .contains("missing port")
        );
        assert!(
            cluster_listen("nats://u:p@0.0.0.0:6222")
                .unwrap_err()
                .contains("credentials")
        );
    }
}
