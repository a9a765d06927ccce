//! Mutation fuzzing of everything that decodes input from clients or peers: the client protocol
//! parser, the config file parser, the `$JS.API` request decoders and validators, the subject
//! index (what remote interest inserts), the stream state machine's command decoding and
//! apply, and the Raft messages of the cluster port and records of the Raft log (protobuf decode
//! and conversion for openraft). Inputs come from the committed corpus (`fuzz/corpus/<target>/`) and from valid
//! encodings built here, mutated (bit flips, interesting bytes, insertions, deletions, splices,
//! truncations) by a seeded generator. A panic fails the test and writes the input to
//! `$CARGO_TARGET_TMPDIR/fuzz-failures/` (the seed is printed, so a run can be repeated).
//!
//! Bounded: `JETRAFT_FUZZ_ITERS` inputs per target (default 3,000, well under a second each in
//! `make test`), or `JETRAFT_FUZZ_SECONDS` per target (`make fuzz`, run by `make chaos`).
//! `JETRAFT_FUZZ_SEED` repeats a run.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use jetraft_raft::{LogIndex, ReplicatedStateMachine};
use jetraft_server::config::Config;
use jetraft_server::jetstream::api::consumer_validate::{self, ConsumerContext, CreateForm};
use jetraft_server::jetstream::api::types::StreamConfig;
use jetraft_server::jetstream::api::types::consumer_requests::{
    ConsumerNamesRequest, ConsumerPauseRequest,
};
use jetraft_server::jetstream::api::types::requests::{
    MsgDeleteRequest, MsgGetRequest, PurgeRequest, StreamInfoRequest, StreamNamesRequest, decode,
};
use jetraft_server::jetstream::api::validate::{self, ValidationContext};
use jetraft_server::jetstream::op::ApiOp;
use jetraft_server::jetstream::stream::{ServerIdentity, StreamStateMachine, command};
use jetraft_server::protocol::parser::Parser;
use jetraft_server::router::sublist::Sublist;
use jetraft_storage::mem::MemStreamStore;
use jetraft_storage::stream::StreamUid;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Bytes that tend to matter to these decoders.
const INTERESTING: &[u8] = b"\0\xff\r\n \t.*>{}[]\":,0123456789-+eE\\$_";

/// How long one target runs.
enum Budget {
    Iterations(u64),
    Time(Duration),
}

fn budget() -> Budget {
    if let Some(s) = std::env::var("JETRAFT_FUZZ_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return Budget::Time(Duration::from_secs(s));
    }
    let n = std::env::var("JETRAFT_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000);
    Budget::Iterations(n)
}

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for p in paths {
            if let Ok(b) = std::fs::read(&p) {
                out.push(b);
            }
        }
    }
    assert!(!out.is_empty(), "no corpus in {}", dir.display());
    out
}

/// One mutation of `seed` (sometimes spliced with `other`).
fn mutate(rng: &mut StdRng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        let len = v.len();
        match rng.random_range(0..7) {
            0 if len > 0 => {
                let i = rng.random_range(0..len);
                v[i] ^= 1 << rng.random_range(0..8);
            }
            1 if len > 0 => {
                let i = rng.random_range(0..len);
                v[i] = INTERESTING[rng.random_range(0..INTERESTING.len())];
            }
            2 => {
                let i = rng.random_range(0..=len);
                let n = rng.random_range(1..=8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.random()).collect();
                v.splice(i..i, bytes);
            }
            3 if len > 0 => {
                let a = rng.random_range(0..len);
                let b = rng.random_range(a..=len.min(a + 16));
                v.drain(a..b);
            }
            4 if len > 0 => {
                let a = rng.random_range(0..len);
                let b = rng.random_range(a..=len.min(a + 32));
                let copy = v[a..b].to_vec();
                let at = rng.random_range(0..=v.len());
                v.splice(at..at, copy);
            }
            5 if !other.is_empty() => {
                let cut = rng.random_range(0..=len);
                let from = rng.random_range(0..other.len());
                v.truncate(cut);
                v.extend_from_slice(&other[from..]);
            }
            6 if len > 0 => v.truncate(rng.random_range(0..len)),
            _ => {}
        }
    }
    v
}

/// Runs `check` on the seeds and on mutations of them within the budget.
fn fuzz(target: &str, seeds: Vec<Vec<u8>>, mut check: impl FnMut(&[u8])) {
    let seed: u64 = std::env::var("JETRAFT_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("fuzz {target}: seed {seed} (JETRAFT_FUZZ_SEED repeats it)");
    let mut rng = StdRng::seed_from_u64(seed);
    let started = Instant::now();
    let budget = budget();
    let mut run = |input: &[u8]| {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(input)));
        if outcome.is_err() {
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures");
            let _ = std::fs::create_dir_all(&dir);
            let path = dir.join(format!("{target}-{seed}"));
            let _ = std::fs::write(&path, input);
            panic!(
                "fuzz {target}: panic on input {:?} (seed {seed}; saved to {})",
                String::from_utf8_lossy(input),
                path.display()
            );
        }
    };
    for s in &seeds {
        run(s);
    }
    let mut n = 0u64;
    loop {
        match budget {
            Budget::Iterations(max) if n >= max => break,
            Budget::Time(t) if started.elapsed() >= t => break,
            _ => {}
        }
        let a = &seeds[rng.random_range(0..seeds.len())];
        let b = &seeds[rng.random_range(0..seeds.len())];
        run(&mutate(&mut rng, a, b));
        n += 1;
    }
    eprintln!("fuzz {target}: {n} inputs in {:?}", started.elapsed());
}

#[test]
fn fuzz_client_protocol_parser() {
    fuzz("protocol", corpus("protocol"), |input| {
        let mut parser = Parser::new(1024, 4096);
        let mut buf = BytesMut::from(input);
        // Until the parser wants more bytes or refuses the connection.
        for _ in 0..10_000 {
            match parser.parse(&mut buf) {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    });
}

#[test]
fn fuzz_config_file_parser() {
    fuzz("config", corpus("config"), |input| {
        let text = String::from_utf8_lossy(input);
        // `include` reads other files: not what this target is about (and /dev/zero never ends).
        if text.contains("include") {
            return;
        }
        let mut cfg = Config::default();
        let _ =
            jetraft_server::config::file::apply(&text, Path::new("/nonexistent/x.conf"), &mut cfg);
    });
}

#[test]
fn fuzz_jetstream_api_requests() {
    let others = vec![("OTHER".to_string(), vec!["other.>".to_string()])];
    let ctx = ValidationContext {
        clustered: true,
        cluster_size: 3,
        other_streams: &others,
        max_bytes: validate::MaxBytesLimits::NONE,
    };
    let stream: StreamConfig = decode(br#"{"name":"S","subjects":["s.>"]}"#).expect("stream");
    fuzz("api", corpus("api"), |input| {
        let subject = String::from_utf8_lossy(input);
        let _ = ApiOp::parse(&subject);
        let _ = consumer_validate::parse_create_subject(&subject);
        if let Ok(cfg) = decode::<StreamConfig>(input) {
            let name = cfg.name.clone();
            if let Ok(validate::CreateOutcome::Create(cfg)) =
                validate::check_create(&name, cfg, None, &ctx)
            {
                let _ = validate::check_update(&name, (*cfg).clone(), Some(&cfg), &ctx);
            }
        }
        let _ = decode::<StreamInfoRequest>(input);
        let _ = decode::<StreamNamesRequest>(input);
        let _ = decode::<PurgeRequest>(input).map(|p| p.to_store());
        let _ = decode::<MsgGetRequest>(input).map(|r| r.selector());
        let _ = decode::<MsgDeleteRequest>(input);
        let _ = decode::<ConsumerNamesRequest>(input);
        let _ = decode::<ConsumerPauseRequest>(input).map(|r| r.pause_until_ns());
        if let Ok((name, cfg, action)) =
            consumer_validate::resolve_create(&CreateForm::Plain, "S", input, || "gen".into())
        {
            let cctx = ConsumerContext {
                stream: &stream,
                existing: None,
                others: &[],
                clustered: true,
                stream_replicas: 3,
                consumer_count: 0,
            };
            let _ = consumer_validate::check_create(&name, cfg, action, &cctx);
        }
    });
}

#[test]
fn fuzz_subject_index() {
    fuzz("subjects", corpus("subjects"), |input| {
        let list: Sublist<u32> = Sublist::new();
        let text = String::from_utf8_lossy(input);
        // Patterns as a peer's interest delivers them: inserted unchecked (the index refuses
        // what is not a subject), some with a queue group.
        for (i, pattern) in text.split(' ').enumerate() {
            let queue = (i % 3 == 0).then_some("q");
            let _ = list.insert(pattern, queue, i as u32);
        }
        for subject in text.split(' ') {
            if jetraft_server::router::subject::is_valid_literal_subject(subject) {
                let _ = list.match_subject(subject);
            }
        }
        for (i, pattern) in text.split(' ').enumerate().step_by(2) {
            let queue = (i % 3 == 0).then_some("q");
            list.remove(pattern, queue, &(i as u32));
        }
    });
}

fn server() -> ServerIdentity {
    ServerIdentity {
        version: jetraft_server::node::NATS_VERSION.into(),
        api_level: jetraft_server::node::API_LEVEL,
        domain: None,
    }
}

/// Valid stream commands to mutate: publishes (with the headers the apply acts on), purges,
/// deletes, config updates, expiry and consumer records.
fn command_seeds() -> Vec<Vec<u8>> {
    let cfg: StreamConfig = decode(
        br#"{"name":"F","subjects":["f.>"],"allow_msg_ttl":true,"allow_rollup_hdrs":true,
            "max_msgs_per_subject":3,"republish":{"src":">","dest":"r.>"}}"#,
    )
    .expect("config");
    let hdr = |k: &str, v: &str| Bytes::from(format!("NATS/1.0\r\n{k}: {v}\r\n\r\n"));
    let consumer =
        serde_json::from_str(r#"{"durable_name":"C","ack_policy":"explicit"}"#).expect("consumer");
    [
        command::append_batch(
            [
                ("f.a", Bytes::new(), Bytes::from_static(b"x")),
                ("f.b", hdr("Nats-Msg-Id", "1"), Bytes::new()),
                ("f.c", hdr("Nats-TTL", "1s"), Bytes::new()),
                ("f.d", hdr("Nats-Rollup", "sub"), Bytes::new()),
                ("f.e", hdr("Nats-Expected-Last-Sequence", "2"), Bytes::new()),
            ],
            1_000,
        ),
        command::purge("f.a", 2, 1),
        command::delete_msg(1, false),
        command::update_config(&cfg, 2_000),
        command::expire(5_000_000_000),
        command::consumer_create("C", &consumer, 3_000),
        command::consumer_delete("C"),
        restore_seed(),
    ]
    .into_iter()
    .map(|b| b.to_vec())
    .collect()
}

/// A `Restore` entry (STREAM.RESTORE) with messages, a tail position and a consumer.
fn restore_seed() -> Bytes {
    use jetraft_proto::stream::{
        ConsumerSnapshot, Restore, SnapshotMsg, StreamCommand, stream_command::Cmd,
    };
    use prost::Message;
    let msg = |seq| SnapshotMsg {
        seq,
        subject: format!("f.{seq}"),
        headers: Bytes::new(),
        payload: Bytes::from_static(b"p"),
        timestamp_ns: 1_000 + seq,
    };
    let restore = Restore {
        msgs: vec![msg(3), msg(5)],
        last: true,
        first_seq: 3,
        last_seq: 7,
        last_ts: 9_000,
        consumers: vec![ConsumerSnapshot {
            name: "C".into(),
            config_json: Bytes::from_static(br#"{"durable_name":"C","ack_policy":"explicit"}"#),
            created_ns: 1,
            state: Bytes::new(),
            lps_end: 0,
        }],
    };
    let cmd = StreamCommand {
        cmd: Some(Cmd::Restore(restore)),
    };
    Bytes::from(cmd.encode_to_vec())
}

#[test]
fn fuzz_stream_commands() {
    let cfg: StreamConfig =
        decode(br#"{"name":"F","subjects":["f.>"],"allow_msg_ttl":true}"#).expect("config");
    fuzz("stream-commands", command_seeds(), |input| {
        let store = Box::new(MemStreamStore::new(StreamUid(1)));
        let mut sm = StreamStateMachine::open(store, cfg.clone(), 1, server())
            .expect("open a memory stream");
        // A valid history first, then the mutated entry: apply answers or refuses, never panics.
        for (i, seed) in command_seeds().iter().take(3).enumerate() {
            let _ = sm.apply(LogIndex(i as u64 + 1), seed);
        }
        let _ = sm.apply(LogIndex(10), input);
    });
}

/// Valid Raft messages as the cluster port carries them (protobuf), to mutate.
fn raft_seeds() -> Vec<Vec<u8>> {
    use jetraft_proto::raft as pb;
    use prost::Message;
    let log_id = |term, index| pb::LogId {
        term,
        leader_node: 7,
        index,
    };
    let vote = pb::Vote {
        term: 3,
        node_id: 7,
        committed: true,
    };
    let membership = pb::Membership {
        configs: vec![pb::VoterSet { ids: vec![1, 7, 9] }],
        nodes: vec![pb::Member {
            id: 1,
            addr: "127.0.0.1:6222".into(),
        }],
    };
    let entries = vec![
        pb::Entry {
            log_id: Some(log_id(3, 10)),
            payload: Some(pb::entry::Payload::Normal(
                command_seeds()[0].clone().into(),
            )),
        },
        pb::Entry {
            log_id: Some(log_id(3, 11)),
            payload: Some(pb::entry::Payload::Membership(membership.clone())),
        },
    ];
    vec![
        pb::AppendEntriesRequest {
            group_id: 5,
            from: 7,
            vote: Some(vote),
            prev_log_id: Some(log_id(3, 9)),
            entries,
            leader_commit: Some(log_id(3, 9)),
        }
        .encode_to_vec(),
        pb::VoteRequest {
            group_id: 0,
            from: 7,
            vote: Some(vote),
            last_log_id: Some(log_id(2, 40)),
            leadership_transfer: false,
        }
        .encode_to_vec(),
        pb::SnapshotChunk {
            group_id: 5,
            from: 7,
            vote: Some(vote),
            meta: Some(pb::SnapshotMeta {
                last_log_id: Some(log_id(3, 9)),
                last_membership: Some(pb::StoredMembership {
                    log_id: Some(log_id(1, 1)),
                    membership: Some(membership),
                }),
            }),
            offset: 0,
            data: vec![1, 2, 3].into(),
            done: true,
            size_hint: 3,
        }
        .encode_to_vec(),
    ]
}

#[test]
fn fuzz_raft_message_decoders() {
    use jetraft_proto::raft as pb;
    use jetraft_raft::convert::{append, entry, snapshot, vote};
    use prost::Message;
    fuzz("raft-messages", raft_seeds(), |input| {
        // Each message type the cluster port accepts, decoded and converted for openraft.
        if let Ok(r) = pb::AppendEntriesRequest::decode(input) {
            let _ = append::request_from_pb(r);
        }
        if let Ok(r) = pb::VoteRequest::decode(input) {
            let _ = vote::request_from_pb(r);
        }
        if let Ok(e) = pb::Entry::decode(input) {
            let _ = entry::from_pb(e);
        }
        if let Ok(c) = pb::SnapshotChunk::decode(input) {
            let mut asm = snapshot::Assembler::new(1 << 20);
            if asm.push(c).is_ok() {
                let _ = asm.finish();
            }
        }
        if let Ok(r) = pb::AppendEntriesResponse::decode(input) {
            let _ = append::response_from_pb(r);
        }
        if let Ok(r) = pb::VoteResponse::decode(input) {
            let _ = vote::response_from_pb(r);
        }
        // The same bytes as a stored log record (the RocksDB log's codec).
        use jetraft_raft::codec::ProstCodec;
        use jetraft_raft::types::JetraftConfig;
        use jetraft_storage::rocks::LogCodec;
        let _ = <ProstCodec as LogCodec<JetraftConfig>>::decode_entry(input);
        let _ = <ProstCodec as LogCodec<JetraftConfig>>::decode_vote(input);
        let _ = <ProstCodec as LogCodec<JetraftConfig>>::decode_log_id(input);
    });
}

/// Stream backups (STREAM.RESTORE input from clients): the S2 stream and the archive inside.
#[test]
fn fuzz_backup_decoders() {
    use jetraft_server::jetstream::backup::{archive, s2};
    let mut w = archive::ArchiveWriter::new();
    w.state(
        br#"{"messages":2,"first_seq":1,"last_seq":3,"consumer_count":1}"#,
        1,
    );
    w.consumer("C", br#"{"config":{"durable_name":"C"},"state":{}}"#, 1);
    w.msg(1, "a.b", b"NATS/1.0\r\nX: 1\r\n\r\n", b"one", 5);
    w.msg(3, "a.c", b"", b"three three three three", 6);
    w.end();
    let plain = w.take();
    let mut enc = s2::Encoder::new();
    enc.write(&plain);
    let seeds = vec![enc.finish(), plain];
    fuzz("backup", seeds, |input| {
        if let Ok(plain) = s2::decode_all(input) {
            let _ = archive::parse(&Bytes::from(plain));
        }
        let _ = archive::parse(&Bytes::copy_from_slice(input));
    });
}
