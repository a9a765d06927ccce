//! Free loopback ports for spawned servers.
//!
//! Ports are drawn at random from 20000..32000, below Linux's default ephemeral range
//! (32768..60999), so that outgoing client connections of other tests never hold a port we are
//! about to hand to a server. Each candidate is checked by binding it on 127.0.0.1 and releasing
//! it. The remaining race (another test process, which runs in parallel under nextest, drawing
//! the same port in between) is handled by `ServerProcess::start`: it checks that the server
//! answering on the port is its own (by server name) and retries with fresh ports when its
//! server fails to start.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

const FIRST: u32 = 20_000;
const SPAN: u32 = 12_000;

/// A pseudo-random number per call: a per-process randomly keyed hash of a counter.
fn random_u64() -> u64 {
    static KEYS: OnceLock<RandomState> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // RandomState is seeded randomly per process: enough entropy to spread test processes.
    let mut h = KEYS.get_or_init(RandomState::new).build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.finish()
}

/// Returns a port on 127.0.0.1 that was free a moment ago.
///
/// # Panics
/// If no free port is found among 1000 candidates (the machine is out of ports).
pub fn free_port() -> u16 {
    for _ in 0..1000 {
        let offset = u32::try_from(random_u64() % u64::from(SPAN)).unwrap_or(0);
        let port = u16::try_from(FIRST + offset).unwrap_or(u16::MAX);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 in {FIRST}..{}", FIRST + SPAN);
}
