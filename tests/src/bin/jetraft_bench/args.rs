//! Hand-written command-line parsing for `jetraft-bench` (`--key value` or `--key=value`).

use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};

/// Usage text printed for `--help` and on argument errors.
pub(crate) const USAGE: &str = "\
jetraft-bench: NATS core load generator (async-nats), in the spirit of `nats bench`.

USAGE:
    jetraft-bench pubsub [--url URL] [--sub-url URL] [--msgs N] [--size BYTES] [--timeout SECS]
    jetraft-bench reqrep [--url URL] [--count N] [--size BYTES] [--timeout SECS]
    jetraft-bench jspub  [--url URL] [--msgs N] [--size BYTES] [--storage file|memory]
                         [--replicas N] [--inflight N] [--timeout SECS]
                         [--via leader|follower --peer-urls URL,URL,..]
    jetraft-bench jsconsume [--url URL] [--msgs N] [--size BYTES] [--storage file|memory]
                         [--replicas N] [--consumer pull|ordered] [--batch N] [--timeout SECS]
    jetraft-bench kv     [--url URL] [--count N] [--size BYTES] [--replicas N] [--keys N]
                         [--timeout SECS]

BENCHMARKS:
    pubsub   one publisher connection, one subscriber connection on the same subject; measures
             what the subscriber receives from its first to its last (N-th) message.
    reqrep   one responder connection (echo), one requester doing N sequential requests
             (after a short warm-up); measures per-request latency.
    jspub    JetStream publish with PubAcks to a fresh stream, up to --inflight outstanding
             (1 = synchronous); measures acknowledged messages per second.
    jsconsume  fills a fresh stream, then times a pull consumer with explicit acks (until
             every ack is applied) or an ordered consumer replaying it.
    kv       a fresh KV bucket (history 1): N sequential puts, then N sequential gets, over
             --keys keys (after a short warm-up); measures ops/s and latency of each.

OPTIONS:
    --url URL        server URL                  [default: nats://127.0.0.1:4222]
    --sub-url URL    pubsub: subscriber's server (another cluster node) [default: --url]
    --msgs N         pubsub: messages to send    [default: 1000000]
    --count N        reqrep/kv: ops to time      [default: 10000]
    --size BYTES     payload size                [default: 128]
    --storage KIND   jspub: file or memory       [default: file]
    --replicas N     jspub/kv: replicas          [default: 1]
    --keys N         kv: distinct keys           [default: 100]
    --inflight N     jspub: outstanding acks     [default: 256]
    --via NODE       jspub/jsconsume: publish or consume through the stream leader's node or a
                     follower's, picked among --peer-urls (the cluster's client URLs)
                     [default: the --url node]
    --peer-urls L    jspub/jsconsume: comma-separated client URLs of every node (with --via)
    --consumer KIND  jsconsume: pull or ordered  [default: pull]
    --batch N        jsconsume: pull batch size  [default: 100]
    --timeout SECS   bound on the whole run      [default: 120]
    -h, --help       this text

OUTPUT:
    human-readable progress on stderr; exactly one machine-readable line on stdout:
    RESULT pubsub msgs=.. size=.. elapsed_s=.. msgs_per_sec=.. mb_per_sec=.. pub_msgs_per_sec=..
    RESULT reqrep count=.. size=.. p50_us=.. p90_us=.. p99_us=.. max_us=.. rps=..
    RESULT jspub msgs=.. size=.. storage=.. replicas=.. inflight=.. elapsed_s=.. msgs_per_sec=..
    RESULT jsconsume consumer=.. msgs=.. size=.. storage=.. replicas=.. batch=.. elapsed_s=.. msgs_per_sec=..
    RESULT kv count=.. size=.. replicas=.. keys=.. put_ops_per_sec=.. put_p50_us=.. put_p99_us=..
           get_ops_per_sec=.. get_p50_us=.. get_p99_us=..   (one line)
    (MB = 10^6 bytes; payload bytes only.)
";

/// Which benchmark to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bench {
    /// One publisher, one subscriber: throughput.
    PubSub,
    /// Sequential request/reply: latency.
    ReqRep,
    /// JetStream publish with acks: throughput.
    JsPub,
    /// JetStream consumption: pull with acks, or ordered replay.
    JsConsume,
    /// Sequential KV puts then gets: throughput and latency.
    Kv,
}

/// Parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Args {
    /// The benchmark.
    pub(crate) bench: Bench,
    /// Server URL.
    pub(crate) url: String,
    /// Server URL of the pubsub subscriber, when it differs from `url` (cross-node runs).
    pub(crate) sub_url: Option<String>,
    /// Messages the publisher sends (pubsub).
    pub(crate) msgs: u64,
    /// Timed requests (reqrep).
    pub(crate) count: u64,
    /// Payload size in bytes.
    pub(crate) size: usize,
    /// Bound on the whole run.
    pub(crate) timeout: Duration,
    /// Stream storage for jspub (`file` or `memory`).
    pub(crate) storage: String,
    /// Stream replicas for jspub.
    pub(crate) replicas: u64,
    /// Outstanding PubAcks for jspub.
    pub(crate) inflight: u64,
    /// jspub/jsconsume: publish or consume through the stream leader's node (`leader`) or a
    /// follower's (`follower`) instead of the `url` node.
    pub(crate) via: Option<String>,
    /// jspub/jsconsume: client URLs of every cluster node, to find the `via` node among.
    pub(crate) peer_urls: Vec<String>,
    /// Consumer kind for jsconsume (`pull` or `ordered`).
    pub(crate) consumer: String,
    /// Pull batch size for jsconsume.
    pub(crate) batch: u64,
    /// Distinct keys for kv.
    pub(crate) keys: u64,
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// Print usage and exit successfully.
    Help,
    /// Run a benchmark.
    Run(Box<Args>),
}

/// Parses `argv` without the program name.
pub(crate) fn parse<I: IntoIterator<Item = String>>(argv: I) -> Result<Command> {
    let mut it = argv.into_iter();
    let bench = match it.next().as_deref() {
        None | Some("-h" | "--help" | "help") => return Ok(Command::Help),
        Some("pubsub") => Bench::PubSub,
        Some("reqrep") => Bench::ReqRep,
        Some("jspub") => Bench::JsPub,
        Some("jsconsume") => Bench::JsConsume,
        Some("kv") => Bench::Kv,
        Some(other) => {
            bail!("unknown benchmark {other:?} (expected pubsub, reqrep, jspub, jsconsume or kv)")
        }
    };
    let mut args = Args {
        bench,
        url: "nats://127.0.0.1:4222".to_string(),
        sub_url: None,
        msgs: 1_000_000,
        count: 10_000,
        size: 128,
        timeout: Duration::from_secs(120),
        storage: "file".to_string(),
        replicas: 1,
        inflight: 256,
        via: None,
        peer_urls: Vec::new(),
        consumer: "pull".to_string(),
        batch: 100,
        keys: 100,
    };
    while let Some(arg) = it.next() {
        if arg == "-h" || arg == "--help" {
            return Ok(Command::Help);
        }
        let Some(flag) = arg.strip_prefix("--") else {
            bail!("unexpected argument {arg:?}");
        };
        let (key, value) = match flag.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => {
                let v = it.next().ok_or_else(|| anyhow!("--{flag} needs a value"))?;
                (flag.to_string(), v)
            }
        };
        match key.as_str() {
            "url" => args.url = value,
            "sub-url" => args.sub_url = Some(value),
            "msgs" => args.msgs = number(&key, &value)?,
            "count" => args.count = number(&key, &value)?,
            "size" => {
                args.size = usize::try_from(number(&key, &value)?)
                    .context("--size does not fit in memory")?;
            }
            "timeout" => args.timeout = Duration::from_secs(number(&key, &value)?),
            "storage" if value == "file" || value == "memory" => args.storage = value,
            "storage" => bail!("--storage must be file or memory, got {value:?}"),
            "replicas" => args.replicas = number(&key, &value)?,
            "inflight" => args.inflight = number(&key, &value)?,
            "via" if value == "leader" || value == "follower" => args.via = Some(value),
            "via" => bail!("--via must be leader or follower, got {value:?}"),
            "peer-urls" => {
                args.peer_urls = value
                    .split(',')
                    .filter(|u| !u.is_empty())
                    .map(str::to_string)
                    .collect();
            }
            "consumer" if value == "pull" || value == "ordered" => args.consumer = value,
            "consumer" => bail!("--consumer must be pull or ordered, got {value:?}"),
            "batch" => args.batch = number(&key, &value)?,
            "keys" => args.keys = number(&key, &value)?,
            _ => bail!("unknown option --{key}"),
        }
    }
    match bench {
        // Throughput is measured from the first to the last message: that needs two.
        Bench::PubSub if args.msgs < 2 => bail!("--msgs must be at least 2"),
        Bench::ReqRep if args.count == 0 => bail!("--count must be at least 1"),
        Bench::JsPub if args.msgs == 0 || args.inflight == 0 => {
            bail!("--msgs and --inflight must be at least 1")
        }
        Bench::JsPub if args.via.is_some() && args.peer_urls.is_empty() => {
            bail!("--via needs --peer-urls")
        }
        Bench::JsConsume if args.msgs == 0 || args.batch == 0 => {
            bail!("--msgs and --batch must be at least 1")
        }
        Bench::Kv if args.count == 0 || args.keys == 0 => {
            bail!("--count and --keys must be at least 1")
        }
        _ => {}
    }
    if args.timeout.is_zero() {
        bail!("--timeout must be at least 1 second");
    }
    Ok(Command::Run(Box::new(args)))
}

/// A non-negative integer; `_` separators are allowed (`1_000_000`).
fn number(key: &str, value: &str) -> Result<u64> {
    value
        .replace('_', "")
        .parse()
        .with_context(|| format!("--{key}: {value:?} is not a non-negative integer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Command> {
        parse(s.split_whitespace().map(str::to_string))
    }

    #[test]
    fn parses_both_forms_and_defaults() {
        let Command::Run(a) = p("pubsub --msgs 1_000 --size=64 --url nats://h:1").unwrap() else {
            panic!("expected run");
        };
        assert_eq!(
            (a.bench, a.msgs, a.size, a.url.as_str()),
            (Bench::PubSub, 1000, 64, "nats://h:1")
        );
        assert_eq!(a.timeout, Duration::from_secs(120));
        let Command::Run(a) = p("reqrep").unwrap() else {
            panic!("expected run")
        };
        assert_eq!((a.bench, a.count, a.size), (Bench::ReqRep, 10_000, 128));
        let Command::Run(a) = p("kv --count 500 --keys 7 --replicas 3").unwrap() else {
            panic!("expected run")
        };
        assert_eq!(
            (a.bench, a.count, a.keys, a.replicas),
            (Bench::Kv, 500, 7, 3)
        );
        let Command::Run(a) = p("jspub --via leader --peer-urls nats://a:1,nats://b:2").unwrap()
        else {
            panic!("expected run")
        };
        assert_eq!(a.via.as_deref(), Some("leader"));
        assert_eq!(a.peer_urls, ["nats://a:1", "nats://b:2"]);
    }

    #[test]
    fn rejects_bad_input() {
        assert!(p("pubsub --msgs").is_err());
        assert!(p("pubsub --msgs x").is_err());
        assert!(p("pubsub --msgs 1").is_err());
        assert!(p("reqrep --count 0").is_err());
        assert!(p("reqrep --timeout 0").is_err());
        assert!(p("kv --keys 0").is_err());
        assert!(p("jspub --via leader").is_err());
        assert!(p("jspub --via any --peer-urls nats://a:1").is_err());
        assert!(p("pubsub --nope 1").is_err());
        assert!(p("fly").is_err());
        assert_eq!(p("").unwrap(), Command::Help);
        assert_eq!(p("reqrep --help").unwrap(), Command::Help);
    }
}
