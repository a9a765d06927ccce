//! The ports file (`ports_file_dir`, `--ports_file_dir`): once the listeners are bound, the
//! server writes `<ports_file_dir>/<executable name>_<pid>.ports`, a JSON object with the URLs
//! it can be reached on, and removes it on shutdown, as nats-server does. Test launchers (the
//! nats.js suites) start a server on random ports (`-1`) and wait for this file to learn them.
//!
//! The format is nats-server's `Ports`: `{"nats":[...],"monitoring":[...],"cluster":[...]}`,
//! each a list of URLs, absent when the listener is off. A listener on a specific address gives
//! one URL; one on the unspecified address gives a URL per local address it accepts on
//! (nats-server lists every interface address there).
//!
//! Failing to write or remove the file is logged and does not stop the server (nats-server
//! logs `Error writing ports file` and goes on).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::Serialize;

/// The listeners of the node, as bound.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Listeners {
    /// The client listener.
    pub(super) client: Option<SocketAddr>,
    /// The monitoring listener.
    pub(super) monitoring: Option<SocketAddr>,
    /// The cluster (route) listener.
    pub(super) cluster: Option<SocketAddr>,
    /// The HTTPS monitoring listener.
    pub(super) monitoring_tls: Option<SocketAddr>,
    /// Clients connect with TLS (`tls://` URLs).
    pub(super) client_tls: bool,
}

/// The file's content, in nats-server's field order.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct Ports {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    nats: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    monitoring: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    cluster: Vec<String>,
}

/// Writes the ports file into `dir`; returns its path, to remove on shutdown (`None`: the
/// write failed and was logged).
pub(super) fn write(dir: &Path, listeners: &Listeners) -> Option<PathBuf> {
    let path = dir.join(file_name());
    let json = render(listeners, &local_addrs());
    match std::fs::write(&path, json) {
        Ok(()) => Some(path),
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "error writing ports file");
            None
        }
    }
}

/// Removes the ports file written by [`write`].
pub(super) fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        tracing::error!(path = %path.display(), error = %e, "error cleaning up ports file");
    }
}

/// `<executable name>_<pid>.ports`: the name the process was started as (`argv[0]` without
/// its directory), as nats-server names it, so a launcher that starts `nats-server` (a link to
/// jetraft under that name) finds `nats-server_<pid>.ports`.
fn file_name() -> String {
    let exe = std::env::args_os()
        .next()
        .and_then(|a| {
            Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "jetraft".to_string());
    format!("{exe}_{}.ports", std::process::id())
}

/// The JSON of the file for `listeners`, with `local` the addresses of this host (used for
/// listeners on an unspecified address).
fn render(listeners: &Listeners, local: &[IpAddr]) -> String {
    let urls = |scheme: &str, addr: Option<SocketAddr>| -> Vec<String> {
        addr.map(|a| {
            reachable_ips(a.ip(), local)
                .into_iter()
                .map(|ip| format!("{scheme}://{}", SocketAddr::new(ip, a.port())))
                .collect()
        })
        .unwrap_or_default()
    };
    let ports = Ports {
        nats: urls(
            if listeners.client_tls { "tls" } else { "nats" },
            listeners.client,
        ),
        monitoring: [
            urls("http", listeners.monitoring),
            urls("https", listeners.monitoring_tls),
        ]
        .concat(),
        cluster: urls("nats", listeners.cluster),
    };
    serde_json::to_string(&ports).expect("a struct of string lists serialises")
}

/// The addresses a listener on `ip` accepts on: `ip` itself, or for an unspecified address the
/// local addresses of its family (IPv6 `::` also takes IPv4 on Linux, which is dual-stack by
/// default).
fn reachable_ips(ip: IpAddr, local: &[IpAddr]) -> Vec<IpAddr> {
    if !ip.is_unspecified() {
        return vec![ip];
    }
    let v6 = ip.is_ipv6();
    let mut ips: Vec<IpAddr> = local
        .iter()
        .copied()
        .filter(|a| a.is_ipv4() || v6)
        .collect();
    if ips.is_empty() {
        ips.push(if v6 {
            IpAddr::V6(Ipv6Addr::LOCALHOST)
        } else {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        });
    }
    ips
}

/// This host's addresses, loopback first (nats-server lists interfaces in index order, and the
/// loopback interface comes first): IPv4 from `/proc/net/fib_trie`, IPv6 from
/// `/proc/net/if_inet6`. Empty when neither can be read (not Linux).
fn local_addrs() -> Vec<IpAddr> {
    let v4 = std::fs::read_to_string("/proc/net/fib_trie")
        .map(|t| ipv4_from_fib_trie(&t))
        .unwrap_or_default();
    let v6 = std::fs::read_to_string("/proc/net/if_inet6")
        .map(|t| ipv6_from_if_inet6(&t))
        .unwrap_or_default();
    let mut all: Vec<IpAddr> = v4.into_iter().map(IpAddr::V4).collect();
    all.extend(v6.into_iter().map(IpAddr::V6));
    all.sort_by_key(|ip| !ip.is_loopback());
    all
}

/// The local IPv4 addresses of `/proc/net/fib_trie`: a `|-- <addr>` line followed by
/// `/32 host LOCAL`. Each appears once (the file lists the local table twice).
fn ipv4_from_fib_trie(text: &str) -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    let mut last: Option<Ipv4Addr> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(addr) = line.strip_prefix("|-- ") {
            last = addr.parse().ok();
        } else if line.starts_with("/32 host LOCAL")
            && let Some(addr) = last.take()
            && !out.contains(&addr)
        {
            out.push(addr);
        }
    }
    out
}

/// The IPv6 addresses of `/proc/net/if_inet6` (32 hex digits, then the interface index), in
/// interface index order.
fn ipv6_from_if_inet6(text: &str) -> Vec<Ipv6Addr> {
    let mut rows: Vec<(u32, Ipv6Addr)> = text
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let hex = fields.next()?;
            let index = u32::from_str_radix(fields.next()?, 16).ok()?;
            let bits = u128::from_str_radix(hex, 16).ok()?;
            (hex.len() == 32).then_some((index, Ipv6Addr::from(bits)))
        })
        .collect();
    rows.sort_by_key(|(index, _)| *index);
    rows.into_iter().map(|(_, ip)| ip).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIB_TRIE: &str = "\
Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
     |-- 192.0.2.2
        /32 host LOCAL
Local:
  +-- 0.0.0.0/0 3 0 5
           |-- 127.0.0.1
              /32 host LOCAL
     |-- 192.0.2.2
        /32 host LOCAL
";

    const IF_INET6: &str = "\
fe8000000000000000fc00fffe000001 04 40 20 80     eth0
00000000000000000000000000000001 01 80 10 80       lo
fd000000000000000000000000000002 04 40 00 82     eth0
";

    #[test]
    fn local_addresses_come_from_proc_once_each() {
        assert_eq!(
            ipv4_from_fib_trie(FIB_TRIE),
            vec![Ipv4Addr::LOCALHOST, Ipv4Addr::new(192, 0, 2, 2)]
        );
        let v6 = ipv6_from_if_inet6(IF_INET6);
        assert_eq!(v6[0], Ipv6Addr::LOCALHOST);
        assert_eq!(v6.len(), 3);
        assert_eq!(v6[1].to_string(), "fe80::fc:ff:fe00:1");
    }

    #[test]
    fn the_file_lists_urls_as_nats_server_does() {
        let local: Vec<IpAddr> = vec![
            "127.0.0.1".parse().unwrap(),
            "::1".parse().unwrap(),
            "192.0.2.2".parse().unwrap(),
        ];
        let listeners = Listeners {
            client: Some("0.0.0.0:4222".parse().unwrap()),
            monitoring: Some("127.0.0.1:8222".parse().unwrap()),
            cluster: None,
            ..Listeners::default()
        };
        assert_eq!(
            render(&listeners, &local),
            concat!(
                r#"{"nats":["nats://127.0.0.1:4222","nats://192.0.2.2:4222"],"#,
                r#""monitoring":["http://127.0.0.1:8222"]}"#
            )
        );
        let v6 = Listeners {
            client: Some("[::]:4222".parse().unwrap()),
            monitoring: None,
            cluster: Some("[::1]:6222".parse().unwrap()),
            ..Listeners::default()
        };
        assert_eq!(
            render(&v6, &local),
            concat!(
                r#"{"nats":["nats://127.0.0.1:4222","nats://[::1]:4222","nats://192.0.2.2:4222"],"#,
                r#""cluster":["nats://[::1]:6222"]}"#
            )
        );
        assert_eq!(
            render(&listeners, &[]),
            r#"{"nats":["nats://127.0.0.1:4222"],"monitoring":["http://127.0.0.1:8222"]}"#
        );
    }

    #[test]
    fn the_file_is_named_after_the_executable_and_the_pid() {
        let name = file_name();
        assert!(
            name.ends_with(&format!("_{}.ports", std::process::id())),
            "{name}"
        );
    }
}
