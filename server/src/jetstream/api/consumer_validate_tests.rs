//! Tests for consumer create validation. Unless a comment says otherwise, every expected text
//! was observed from nats-server 2.15.1 (`nats-server -js`, single server) with the same body.

use super::*;
use crate::jetstream::api::types::{ConsumerLimits, to_go_json};

fn stream(retention: RetentionPolicy) -> StreamConfig {
    StreamConfig {
        name: "S".into(),
        subjects: vec!["s.>".into()],
        retention,
        max_consumers: -1,
        num_replicas: 1,
        ..StreamConfig::default()
    }
}

fn ctx<'a>(stream: &'a StreamConfig) -> ConsumerContext<'a> {
    ConsumerContext {
        stream,
        existing: None,
        others: &[],
        clustered: false,
        stream_replicas: stream.num_replicas,
        consumer_count: 0,
    }
}

fn named(name: &str) -> CreateForm {
    CreateForm::Named(name.into())
}

/// Runs both steps for a create body (`config` JSON) on `form`.
fn create_in(
    form: &CreateForm,
    config: &str,
    action: &str,
    ctx: &ConsumerContext<'_>,
) -> Result<(String, CreateOutcome), ApiError> {
    let body = format!(r#"{{"stream_name":"S","config":{config},"action":"{action}"}}"#);
    let (name, cfg, action) = resolve_create(form, "S", body.as_bytes(), || "GENERATD".into())?;
    let outcome = check_create(&name, cfg, action, ctx)?;
    Ok((name, outcome))
}

fn created(form: &CreateForm, config: &str) -> (String, ConsumerConfig) {
    let s = stream(RetentionPolicy::Limits);
    match create_in(form, config, "", &ctx(&s)) {
        Ok((name, CreateOutcome::Create(cfg))) => (name, cfg),
        other => panic!("{config}: {other:?}"),
    }
}

fn response_json(cfg: &ConsumerConfig) -> String {
    to_go_json(&with_response_metadata(cfg, "2.15.1", 5))
}

fn err(e: &ApiError) -> (u16, u16, &str) {
    (e.code, e.err_code, e.description.as_str())
}

const META: &str = r#""metadata":{"_nats.level":"5","_nats.req.level":"0","_nats.ver":"2.15.1"}"#;

#[test]
fn durable_defaults_match_the_spec_example() {
    let (name, cfg) = created(
        &named("dur1"),
        r#"{"durable_name":"dur1","ack_policy":"explicit","filter_subject":"c.a"}"#,
    );
    assert_eq!(name, "dur1");
    assert_eq!(
        response_json(&cfg),
        concat!(
            r#"{"durable_name":"dur1","name":"dur1","deliver_policy":"all","ack_policy":"explicit","ack_wait":30000000000,"#,
            r#""max_deliver":-1,"filter_subject":"c.a","replay_policy":"instant","max_waiting":512,"max_ack_pending":1000,"#,
            r#""num_replicas":0,"metadata":{"_nats.level":"5","_nats.req.level":"0","_nats.ver":"2.15.1"}}"#
        )
    );
}

#[test]
fn observed_defaults_for_other_shapes() {
    let cases = [
        // Generated name: not in config.name; ephemeral gets the 5s threshold.
        (
            CreateForm::Plain,
            r#"{"ack_policy":"explicit"}"#,
            r#"{"deliver_policy":"all","ack_policy":"explicit","ack_wait":30000000000,"max_deliver":-1,"replay_policy":"instant","max_waiting":512,"max_ack_pending":1000,"inactive_threshold":5000000000,"num_replicas":0,"#,
        ),
        (
            CreateForm::Filtered {
                name: "f1".into(),
                filter: "s.a".into(),
            },
            r#"{"filter_subject":"s.a"}"#,
            r#"{"name":"f1","deliver_policy":"all","ack_policy":"none","max_deliver":-1,"filter_subject":"s.a","replay_policy":"instant","max_waiting":512,"inactive_threshold":5000000000,"num_replicas":0,"#,
        ),
        (
            named("p1"),
            r#"{"backoff":[1000000000,2000000000],"max_deliver":2,"ack_policy":"explicit"}"#,
            r#"{"name":"p1","deliver_policy":"all","ack_policy":"explicit","ack_wait":1000000000,"max_deliver":2,"backoff":[1000000000,2000000000],"replay_policy":"instant","max_waiting":512,"max_ack_pending":1000,"inactive_threshold":5000000000,"num_replicas":0,"#,
        ),
        (
            named("pc"),
            r#"{"durable_name":"pc","ack_policy":"explicit","max_batch":2,"max_expires":1500000000,"max_bytes":100}"#,
            r#"{"durable_name":"pc","name":"pc","deliver_policy":"all","ack_policy":"explicit","ack_wait":30000000000,"max_deliver":-1,"replay_policy":"instant","max_waiting":512,"max_ack_pending":1000,"max_batch":2,"max_expires":1500000000,"max_bytes":100,"num_replicas":0,"#,
        ),
        // Spec §3.9: push durable has no max_waiting; ack none push has no ack_wait or
        // max_ack_pending [SRC].
        (
            named("push"),
            r#"{"durable_name":"push","ack_policy":"none","deliver_subject":"dx"}"#,
            r#"{"durable_name":"push","name":"push","deliver_policy":"all","ack_policy":"none","max_deliver":-1,"replay_policy":"instant","deliver_subject":"dx","num_replicas":0,"#,
        ),
    ];
    for (form, config, want_prefix) in cases {
        let (_, cfg) = created(&form, config);
        assert_eq!(
            response_json(&cfg),
            format!("{want_prefix}{META}}}"),
            "{config}"
        );
    }
    let (name, cfg) = created(&CreateForm::Plain, r#"{"name":"given"}"#);
    assert_eq!((name.as_str(), cfg.name.as_str()), ("given", "given"));
    let (name, cfg) = created(&CreateForm::Plain, "{}");
    assert_eq!((name.as_str(), cfg.name.as_str()), ("GENERATD", ""));
}

#[test]
fn out_of_range_values_are_corrected_not_refused() {
    // [SRC] setConsumerConfigDefaults without pedantic.
    let (_, cfg) = created(
        &named("n"),
        r#"{"max_waiting":-5,"max_deliver":-7,"max_ack_pending":-9,"max_batch":-1,"max_expires":-1,"max_bytes":-1,"inactive_threshold":-1,"ack_policy":"all"}"#,
    );
    assert_eq!(
        (cfg.max_waiting, cfg.max_deliver, cfg.max_ack_pending),
        (512, -1, -1)
    );
    assert_eq!((cfg.max_batch, cfg.max_expires, cfg.max_bytes), (0, 0, 0));
    assert_eq!(
        (cfg.ack_wait, cfg.inactive_threshold),
        (30_000_000_000, 5_000_000_000)
    );
}

#[test]
fn stream_consumer_limits_supply_defaults_and_maxima() {
    let mut s = stream(RetentionPolicy::Limits);
    s.consumer_limits = ConsumerLimits {
        inactive_threshold: 10_000_000_000,
        max_ack_pending: 50,
    };
    let c = ctx(&s);
    let Ok((_, CreateOutcome::Create(cfg))) = create_in(
        &named("d"),
        r#"{"durable_name":"d","ack_policy":"explicit"}"#,
        "",
        &c,
    ) else {
        panic!()
    };
    assert_eq!(
        (cfg.max_ack_pending, cfg.inactive_threshold),
        (50, 10_000_000_000)
    );
    // Observed with a stream `consumer_limits` of 10s / 50.
    let e = create_in(
        &named("d"),
        r#"{"max_ack_pending":51,"ack_policy":"explicit"}"#,
        "",
        &c,
    )
    .unwrap_err();
    assert_eq!(
        err(&e),
        (
            400,
            10121,
            "consumer max ack pending exceeds system limit of 50"
        )
    );
    let e = create_in(&named("d"), r#"{"inactive_threshold":20000000000}"#, "", &c).unwrap_err();
    assert_eq!(
        err(&e),
        (
            400,
            10153,
            "consumer inactive threshold exceeds system limit of 10s"
        )
    );
}

#[test]
fn subject_forms_and_name_rules() {
    let s = stream(RetentionPolicy::Limits);
    let c = ctx(&s);
    let filtered = CreateForm::Filtered {
        name: "f1".into(),
        filter: "s.a".into(),
    };
    let cases: Vec<(CreateForm, &str, (u16, u16, &str))> = vec![
        (
            CreateForm::Plain,
            r#"{"durable_name":"dur1"}"#,
            (
                400,
                10020,
                "consumer expected to be ephemeral but a durable name was set in request",
            ),
        ),
        (
            CreateForm::Plain,
            r#"{"name":"ab","durable_name":"ac"}"#,
            (
                400,
                10020,
                "consumer expected to be ephemeral but a durable name was set in request",
            ),
        ),
        (
            CreateForm::Plain,
            r#"{"name":"a.b"}"#,
            (
                500,
                10052,
                r"consumer name can not contain '.', '*', '>', '\', '/'",
            ),
        ),
        (
            named("a\\b"),
            "{}",
            (400, 10127, "Consumer name can not contain path separators"),
        ),
        (
            named("x"),
            r#"{"durable_name":"y"}"#,
            (
                400,
                10017,
                "consumer name in subject does not match durable name in request",
            ),
        ),
        (
            CreateForm::Durable("dd".into()),
            "{}",
            (
                400,
                10018,
                "consumer expected to be durable but a durable name was not set",
            ),
        ),
        (
            CreateForm::Durable("dd".into()),
            r#"{"durable_name":"de"}"#,
            (
                400,
                10017,
                "consumer name in subject does not match durable name in request",
            ),
        ),
        (
            filtered.clone(),
            r#"{"filter_subject":"s.b"}"#,
            (
                400,
                10131,
                "Consumer create request did not match filtered subject from create subject",
            ),
        ),
        (
            filtered.clone(),
            r#"{"filter_subjects":["s.a"]}"#,
            (
                400,
                10137,
                "consumer with multiple subject filters cannot use subject based API",
            ),
        ),
        (
            filtered,
            "{}",
            (
                400,
                10131,
                "Consumer create request did not match filtered subject from create subject",
            ),
        ),
    ];
    for (form, config, want) in cases {
        let e = create_in(&form, config, "", &c).unwrap_err();
        assert_eq!(err(&e), want, "{form:?} {config}");
    }
    // [SRC] 10132 is unreachable through the subject forms (the subject name overwrites
    // config.name), but check_create still refuses such a config.
    let mismatched = ConsumerConfig {
        durable_name: "dd".into(),
        name: "other".into(),
        ..ConsumerConfig::default()
    };
    let e = check_create("dd", mismatched, CreateAction::Create, &c).unwrap_err();
    assert_eq!(
        err(&e),
        (
            400,
            10132,
            "Consumer Durable and Name have to be equal if both are provided"
        )
    );
    // The subject name wins over config.name (nats-server overwrites it).
    let (name, cfg) = created(&named("sub"), r#"{"name":"body"}"#);
    assert_eq!((name.as_str(), cfg.name.as_str()), ("sub", "sub"));
    let (_, cfg) = created(
        &CreateForm::Durable("dd".into()),
        r#"{"durable_name":"dd"}"#,
    );
    assert_eq!(cfg.name, "dd");
    // [SRC] 10102 only for durables, 10103 for a bad name that reached the end.
    let long = "x".repeat(256);
    let e = create_in(
        &named(&long),
        &format!(r#"{{"durable_name":"{long}"}}"#),
        "",
        &c,
    )
    .unwrap_err();
    assert_eq!(
        err(&e),
        (
            400,
            10102,
            "consumer name is too long, maximum allowed is 255"
        )
    );
}

#[test]
fn body_and_stream_name_errors() {
    let run = |body: &[u8]| resolve_create(&CreateForm::Plain, "S", body, String::new).unwrap_err();
    let mismatch = (400, 10056, "stream name in subject does not match request");
    assert_eq!(err(&run(b"")), mismatch);
    assert_eq!(err(&run(br#"{"stream_name":"T","config":{}}"#)), mismatch);
    assert_eq!(
        err(&run(br#"{"stream_name":"S","action":"bogus"}"#)),
        (
            400,
            10025,
            r#"invalid JSON: unknown consumer action: "bogus""#
        )
    );
    assert_eq!(run(b"{").err_code, 10025);
    // A missing config is the zero config, as in Go.
    let (_, cfg, action) =
        resolve_create(&named("n"), "S", br#"{"stream_name":"S"}"#, String::new).unwrap();
    assert_eq!(action, CreateAction::CreateOrUpdate);
    assert_eq!(cfg.name, "n");
}

#[test]
fn config_validation_errors() {
    let s = stream(RetentionPolicy::Limits);
    let c = ctx(&s);
    let cases: &[(&str, (u16, u16, &str))] = &[
        (
            r#"{"deliver_policy":"by_start_sequence"}"#,
            (
                400,
                10094,
                "consumer delivery policy is deliver by start sequence, but optional start sequence is not set",
            ),
        ),
        (
            r#"{"deliver_policy":"by_start_time"}"#,
            (
                400,
                10094,
                "consumer delivery policy is deliver by start time, but optional start time is not set",
            ),
        ),
        (
            r#"{"deliver_policy":"all","opt_start_seq":3}"#,
            (
                400,
                10094,
                "consumer delivery policy is deliver all, but optional start sequence is also set",
            ),
        ),
        (
            r#"{"deliver_policy":"last_per_subject"}"#,
            (
                400,
                10094,
                "consumer delivery policy is deliver last per subject, but optional filter subject is not set",
            ),
        ),
        (
            r#"{"deliver_policy":"by_start_time","opt_start_time":"2020-01-01T00:00:00Z","opt_start_seq":2}"#,
            (
                400,
                10094,
                "consumer delivery policy is deliver by start time, but optional start start sequence is also set",
            ),
        ),
        // [SRC] the remaining start-position combinations.
        (
            r#"{"deliver_policy":"new","opt_start_time":"2020-01-01T00:00:00Z"}"#,
            (
                400,
                10094,
                "consumer delivery policy is deliver new, but optional start time is also set",
            ),
        ),
        (
            r#"{"deliver_policy":"last","opt_start_seq":1}"#,
            (
                400,
                10094,
                "consumer delivery policy is deliver last, but optional start sequence is also set",
            ),
        ),
        (
            r#"{"deliver_policy":"by_start_sequence","opt_start_seq":1,"opt_start_time":"2020-01-01T00:00:00Z"}"#,
            (
                400,
                10094,
                "consumer delivery policy is deliver by start sequence, but optional start time is also set",
            ),
        ),
        (
            r#"{"idle_heartbeat":1000000000}"#,
            (
                400,
                10088,
                "consumer idle heartbeat requires a push based consumer",
            ),
        ),
        (
            r#"{"flow_control":true}"#,
            (
                400,
                10089,
                "consumer flow control requires a push based consumer",
            ),
        ),
        (
            r#"{"rate_limit_bps":1000}"#,
            (
                400,
                10086,
                "consumer in pull mode can not have rate limit set",
            ),
        ),
        (
            r#"{"max_expires":10}"#,
            (
                400,
                10115,
                "consumer max request expires needs to be >= 1ms",
            ),
        ),
        (
            r#"{"deliver_subject":"s.x"}"#,
            (400, 10081, "consumer deliver subject forms a cycle"),
        ),
        (
            r#"{"deliver_subject":"d.*"}"#,
            (400, 10079, "consumer deliver subject has wildcards"),
        ),
        (
            r#"{"deliver_subject":"d..x"}"#,
            (400, 10112, "invalid push consumer deliver subject"),
        ),
        (
            r#"{"deliver_subject":"dx","idle_heartbeat":1000}"#,
            (400, 10083, "consumer idle heartbeat needs to be >= 100ms"),
        ),
        (
            r#"{"deliver_subject":"dx","max_waiting":3}"#,
            (400, 10080, "consumer in push mode can not set max waiting"),
        ),
        (
            r#"{"deliver_subject":"dx","ack_policy":"none","max_ack_pending":3}"#,
            (
                400,
                10082,
                "consumer requires ack policy for max ack pending",
            ),
        ),
        (
            r#"{"deliver_subject":"dx","flow_control":true}"#,
            (
                400,
                10108,
                "consumer with flow control also needs heartbeats",
            ),
        ),
        (
            r#"{"filter_subjects":["s.a","s.*"]}"#,
            (400, 10138, "consumer subject filters cannot overlap"),
        ),
        (
            r#"{"filter_subjects":["s.a","s.a"]}"#,
            (400, 10138, "consumer subject filters cannot overlap"),
        ),
        (
            r#"{"filter_subjects":["s.a",""]}"#,
            (
                400,
                10139,
                "consumer filter in FilterSubjects cannot be empty",
            ),
        ),
        (
            r#"{"filter_subject":"s.a","filter_subjects":["s.b"]}"#,
            (
                400,
                10136,
                "consumer cannot have both FilterSubject and FilterSubjects specified",
            ),
        ),
        (
            r#"{"filter_subject":"s..a"}"#,
            (500, 10052, "invalid subject"),
        ),
        (
            r#"{"filter_subjects":["s.>.a"]}"#,
            (500, 10052, "invalid subject"),
        ),
        (
            r#"{"backoff":[1000000000,2000000000],"max_deliver":1,"ack_policy":"explicit"}"#,
            (
                400,
                10116,
                "max deliver is required to be > length of backoff values",
            ),
        ),
        (
            r#"{"backoff":[-1],"ack_policy":"explicit"}"#,
            (400, 10184, "consumer backoff needs to be positive"),
        ),
        (
            r#"{"ack_wait":-1,"ack_policy":"explicit"}"#,
            (400, 10183, "consumer ack wait needs to be positive"),
        ),
        (
            r#"{"sample_freq":"x%"}"#,
            (
                400,
                10095,
                r#"failed to parse consumer sampling configuration: strconv.Atoi: parsing "x": invalid syntax"#,
            ),
        ),
        (
            r#"{"sample_freq":"-5"}"#,
            (
                400,
                10095,
                "failed to parse consumer sampling configuration: <nil>",
            ),
        ),
        (
            r#"{"priority_policy":"bogus"}"#,
            (
                400,
                10025,
                r#"invalid JSON: unknown priority policy: "bogus""#,
            ),
        ),
        (
            r#"{"num_replicas":3}"#,
            (
                500,
                10074,
                "replicas > 1 not supported in non-clustered mode",
            ),
        ),
        (
            r#"{"num_replicas":-1}"#,
            (400, 10133, "replicas count cannot be negative"),
        ),
        (
            r#"{"priority_policy":"overflow"}"#,
            (
                400,
                10159,
                "Setting PriorityPolicy requires at least one PriorityGroup to be set",
            ),
        ),
        (
            r#"{"priority_policy":"overflow","priority_groups":["bad group"]}"#,
            (
                400,
                10162,
                "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters",
            ),
        ),
        (
            r#"{"priority_policy":"pinned_client","priority_groups":["g"],"deliver_subject":"dx"}"#,
            (
                400,
                10178,
                "priority groups can not be used with push consumers",
            ),
        ),
        (
            r#"{"priority_groups":["g"]}"#,
            (
                400,
                10196,
                "consumer can not have priority groups when policy is none",
            ),
        ),
        (
            r#"{"ack_policy":"flow_control"}"#,
            (
                400,
                10218,
                "flow control ack policy requires a push based consumer",
            ),
        ),
        (
            r#"{"direct":true}"#,
            (400, 10090, "consumer direct requires a push based consumer"),
        ),
    ];
    for (config, want) in cases {
        let e = create_in(&named("p1"), config, "", &c).unwrap_err();
        assert_eq!(err(&e), *want, "{config}");
    }
    // Valid neighbours of the rules above.
    for ok in [
        r#"{"deliver_policy":"by_start_sequence","opt_start_seq":1}"#,
        r#"{"deliver_policy":"by_start_time","opt_start_time":"2020-01-01T00:00:00Z"}"#,
        r#"{"deliver_policy":"last_per_subject","filter_subjects":["s.a","s.b"]}"#,
        r#"{"filter_subjects":["s.*.x","s.a.*"]}"#,
        r#"{"filter_subject":"nomatch.>"}"#,
        r#"{"deliver_subject":"dx","idle_heartbeat":100000000,"flow_control":true}"#,
        r#"{"sample_freq":"30%"}"#,
        r#"{"num_replicas":1}"#,
        r#"{"priority_policy":"overflow","priority_groups":["jobs"]}"#,
        r#"{"backoff":[1,2],"ack_policy":"explicit"}"#,
    ] {
        assert!(
            matches!(
                create_in(&named("ok"), ok, "", &c),
                Ok((_, CreateOutcome::Create(_)))
            ),
            "{ok}"
        );
    }
}

#[test]
fn size_limits() {
    let s = stream(RetentionPolicy::Limits);
    let c = ctx(&s);
    let desc = format!(r#"{{"description":"{}"}}"#, "d".repeat(4097));
    assert_eq!(
        err(&create_in(&named("n"), &desc, "", &c).unwrap_err()),
        (
            400,
            10107,
            "consumer description is too long, maximum allowed is 4096"
        )
    );
    let meta = format!(r#"{{"metadata":{{"k":"{}"}}}}"#, "v".repeat(128 * 1024));
    assert_eq!(
        err(&create_in(&named("n"), &meta, "", &c).unwrap_err()),
        (
            400,
            10135,
            "consumer metadata exceeds maximum size of 128KB"
        )
    );
    let ok = format!(r#"{{"description":"{}"}}"#, "d".repeat(4096));
    assert!(create_in(&named("n"), &ok, "", &c).is_ok());
}

#[test]
fn replicas_rules_in_clusters() {
    let mut s = stream(RetentionPolicy::Limits);
    s.num_replicas = 3;
    let mut c = ctx(&s);
    c.clustered = true;
    assert!(create_in(&named("n"), r#"{"num_replicas":3}"#, "", &c).is_ok());
    let e = create_in(&named("n"), r#"{"num_replicas":5}"#, "", &c).unwrap_err();
    assert_eq!(
        err(&e),
        (
            400,
            10126,
            "consumer config replica count exceeds parent stream"
        )
    );
    let mut i = stream(RetentionPolicy::Interest);
    i.num_replicas = 3;
    let mut c = ctx(&i);
    c.clustered = true;
    let e = create_in(&named("n"), r#"{"num_replicas":1}"#, "", &c).unwrap_err();
    assert_eq!(e.err_code, 10134);
    assert!(create_in(&named("n"), r#"{"num_replicas":0}"#, "", &c).is_ok());
}

#[test]
fn workqueue_rules() {
    let s = stream(RetentionPolicy::WorkQueue);
    let c = ctx(&s);
    let cases: &[(&str, (u16, u16, &str))] = &[
        (
            r#"{"ack_policy":"none"}"#,
            (
                400,
                10084,
                "consumer in pull mode requires explicit ack policy on workqueue stream",
            ),
        ),
        (
            r#"{"ack_policy":"all"}"#,
            (400, 10098, "workqueue stream requires explicit ack"),
        ),
        (
            r#"{"ack_policy":"none","deliver_subject":"dx"}"#,
            (400, 10098, "workqueue stream requires explicit ack"),
        ),
        (
            r#"{"ack_policy":"explicit","deliver_policy":"new"}"#,
            (
                400,
                10101,
                "consumer must be deliver all on workqueue stream",
            ),
        ),
    ];
    for (config, want) in cases {
        assert_eq!(
            err(&create_in(&named("w1"), config, "", &c).unwrap_err()),
            *want,
            "{config}"
        );
    }
    // With an unfiltered w1 in place (observed sequence).
    let w1 = created(&named("w1"), r#"{"ack_policy":"explicit"}"#).1;
    let others = [&w1];
    let c = ConsumerContext {
        others: &others,
        consumer_count: 1,
        ..ctx(&s)
    };
    let e = create_in(&named("w2"), r#"{"ack_policy":"explicit"}"#, "", &c).unwrap_err();
    assert_eq!(
        err(&e),
        (
            400,
            10099,
            "multiple non-filtered consumers not allowed on workqueue stream"
        )
    );
    let e = create_in(
        &named("w2"),
        r#"{"ack_policy":"explicit","filter_subject":"w.a"}"#,
        "",
        &c,
    )
    .unwrap_err();
    assert_eq!(
        err(&e),
        (
            400,
            10100,
            "filtered consumer not unique on workqueue stream"
        )
    );
    // w1 narrowed to w.b; then w.* collides but w.c does not.
    let mut w1b = w1;
    w1b.filter_subject = "w.b".into();
    let others = [&w1b];
    let c = ConsumerContext {
        others: &others,
        consumer_count: 1,
        ..ctx(&s)
    };
    let e = create_in(
        &named("w2"),
        r#"{"ack_policy":"explicit","filter_subject":"w.*"}"#,
        "",
        &c,
    )
    .unwrap_err();
    assert_eq!(e.err_code, 10100);
    assert!(
        create_in(
            &named("w2"),
            r#"{"ack_policy":"explicit","filter_subject":"w.c"}"#,
            "",
            &c
        )
        .is_ok()
    );
}

#[test]
fn max_consumers_applies_to_new_consumers_only() {
    let mut s = stream(RetentionPolicy::Limits);
    s.max_consumers = 1;
    let existing = created(&named("a"), r#"{"durable_name":"a"}"#).1;
    let full = ConsumerContext {
        consumer_count: 1,
        ..ctx(&s)
    };
    let e = create_in(&named("b"), r#"{"durable_name":"b"}"#, "", &full).unwrap_err();
    assert_eq!(err(&e), (400, 10026, "maximum consumers limit reached"));
    let update = ConsumerContext {
        existing: Some(&existing),
        ..full
    };
    assert!(
        create_in(
            &named("a"),
            r#"{"durable_name":"a","max_deliver":3}"#,
            "",
            &update
        )
        .is_ok()
    );
}

#[test]
fn existing_consumer_rules() {
    let s = stream(RetentionPolicy::Limits);
    let dur = created(
        &named("dur1"),
        r#"{"durable_name":"dur1","ack_policy":"explicit","filter_subject":"s.a"}"#,
    )
    .1;
    let eph = created(&named("eph1"), r#"{"ack_policy":"explicit"}"#).1;
    fn with<'a>(s: &'a StreamConfig, existing: &'a ConsumerConfig) -> ConsumerContext<'a> {
        ConsumerContext {
            existing: Some(existing),
            ..ctx(s)
        }
    }
    let d = with(&s, &dur);
    let dur_body = r#"{"durable_name":"dur1","ack_policy":"explicit","filter_subject":"s.a"}"#;
    // Identical re-create, with and without action create.
    for action in ["", "create"] {
        assert_eq!(
            create_in(&named("dur1"), dur_body, action, &d).unwrap().1,
            CreateOutcome::Unchanged
        );
    }
    let changed = r#"{"durable_name":"dur1","ack_policy":"explicit","filter_subject":"s.b"}"#;
    assert_eq!(
        err(&create_in(&named("dur1"), changed, "create", &d).unwrap_err()),
        (400, 10148, "consumer already exists")
    );
    let Ok((_, CreateOutcome::Update(updated))) = create_in(&named("dur1"), changed, "update", &d)
    else {
        panic!("update")
    };
    assert_eq!(updated.filter_subject, "s.b");
    // Named ephemeral: the same body with action create differs by the 5s default
    // (observed 10148), but create-or-update is a no-op (observed success).
    let e = with(&s, &eph);
    let eph_body = r#"{"ack_policy":"explicit"}"#;
    assert_eq!(
        create_in(&named("eph1"), eph_body, "create", &e)
            .unwrap_err()
            .err_code,
        10148
    );
    assert_eq!(
        create_in(&named("eph1"), eph_body, "", &e).unwrap().1,
        CreateOutcome::Unchanged
    );
    let immutable = [
        (r#"{"ack_policy":"none"}"#, "ack policy can not be updated"),
        (
            r#"{"ack_policy":"explicit","deliver_policy":"new"}"#,
            "deliver policy can not be updated",
        ),
        // [SRC] the remaining checkNewConsumerConfig reasons.
        (
            r#"{"ack_policy":"explicit","replay_policy":"original"}"#,
            "replay policy can not be updated",
        ),
        (
            r#"{"ack_policy":"explicit","mem_storage":true}"#,
            "storage type can not be updated",
        ),
        (
            r#"{"ack_policy":"explicit","deliver_policy":"by_start_sequence","opt_start_seq":1}"#,
            "deliver policy can not be updated",
        ),
        (
            r#"{"ack_policy":"explicit","max_waiting":10}"#,
            "max waiting can not be updated",
        ),
        (
            r#"{"ack_policy":"explicit","deliver_subject":"dx"}"#,
            "can not update pull consumer to push based",
        ),
    ];
    for (config, reason) in immutable {
        let got = create_in(&named("eph1"), config, "", &e).unwrap_err();
        assert_eq!(err(&got), (500, 10012, reason), "{config}");
    }
    let Ok((_, CreateOutcome::Update(cfg))) = create_in(
        &named("eph1"),
        r#"{"ack_policy":"explicit","max_deliver":5,"description":"x","inactive_threshold":9000000000}"#,
        "",
        &e,
    ) else {
        panic!("mutable update")
    };
    assert_eq!(
        (cfg.max_deliver, cfg.inactive_threshold),
        (5, 9_000_000_000)
    );
    // Missing consumer with action update.
    assert_eq!(
        err(&create_in(&named("nope"), eph_body, "update", &ctx(&s)).unwrap_err()),
        (400, 10149, "consumer does not exist")
    );
}

#[test]
fn update_checks_between_push_configs_and_start_times() {
    let push = created(
        &named("p"),
        r#"{"durable_name":"p","deliver_subject":"d1"}"#,
    )
    .1;
    let mut moved = push.clone();
    moved.deliver_subject = "d2".into();
    assert_eq!(check_update(&push, &moved), Ok(()));
    let mut pull = push.clone();
    pull.deliver_subject.clear();
    assert_eq!(
        check_update(&push, &pull).unwrap_err().description,
        "can not update push consumer to pull based"
    );
    let mut a = push.clone();
    a.deliver_policy = DeliverPolicy::ByStartTime;
    a.opt_start_time = Some("2020-01-01T00:00:00Z".into());
    let mut b = a.clone();
    b.opt_start_time = Some("2020-01-01T01:00:00+01:00".into());
    assert_eq!(check_update(&a, &b), Ok(()));
    b.opt_start_time = Some("2020-01-01T00:00:01Z".into());
    assert_eq!(
        check_update(&a, &b).unwrap_err().description,
        "start time can not be updated"
    );
    let mut hb = push.clone();
    hb.idle_heartbeat = 1_000_000_000;
    assert_eq!(
        check_update(&push, &hb).unwrap_err().description,
        "heart beats can not be updated"
    );
}

#[test]
fn pause_until_is_kept_on_update_and_raises_the_required_level() {
    let s = stream(RetentionPolicy::Limits);
    let mut old = created(&named("d"), r#"{"durable_name":"d"}"#).1;
    old.pause_until = Some("2099-01-01T00:00:00Z".into());
    set_static_metadata(&mut old);
    assert_eq!(old.metadata[META_REQ_LEVEL], "1");
    let c = ConsumerContext {
        existing: Some(&old),
        ..ctx(&s)
    };
    let outcome = create_in(&named("d"), r#"{"durable_name":"d"}"#, "", &c)
        .unwrap()
        .1;
    assert_eq!(outcome, CreateOutcome::Unchanged);
    let (_, cfg) = created(
        &named("g"),
        r#"{"priority_policy":"pinned_client","priority_groups":["g"]}"#,
    );
    assert_eq!(
        (cfg.priority_timeout, cfg.metadata[META_REQ_LEVEL].as_str()),
        (DEFAULT_PINNED_TTL_NS, "1")
    );
    // Response-only keys sent by a client are not stored.
    let (_, cfg) = created(&named("m"), r#"{"metadata":{"_nats.ver":"9","a":"b"}}"#);
    assert_eq!(
        serde_json::to_string(&cfg.metadata).unwrap(),
        r#"{"_nats.req.level":"0","a":"b"}"#
    );
}

#[test]
fn create_subjects_are_split_into_forms() {
    let p = |s: &str| parse_create_subject(s);
    assert_eq!(
        p("$JS.API.CONSUMER.CREATE.S"),
        Some(Ok(("S".into(), CreateForm::Plain)))
    );
    assert_eq!(
        p("$JS.API.CONSUMER.CREATE.S.c"),
        Some(Ok(("S".into(), named("c"))))
    );
    assert_eq!(
        p("$JS.API.CONSUMER.CREATE.S.c.a.*.>"),
        Some(Ok((
            "S".into(),
            CreateForm::Filtered {
                name: "c".into(),
                filter: "a.*.>".into()
            }
        )))
    );
    assert_eq!(
        p("$JS.API.CONSUMER.DURABLE.CREATE.S.c"),
        Some(Ok(("S".into(), CreateForm::Durable("c".into()))))
    );
    // [SRC] 10016 for a durable subject with extra tokens (observed: a 7+ token subject with a
    // dotted name gets no reply from 2.15.1 because of its subscription shape).
    assert_eq!(
        p("$JS.API.CONSUMER.DURABLE.CREATE.S.c.x")
            .unwrap()
            .unwrap_err()
            .err_code,
        10016
    );
    assert_eq!(p("$JS.API.CONSUMER.INFO.S.c"), None);
    assert_eq!(p("$JS.API.CONSUMER"), None);
}

#[test]
fn random_names_are_eight_alphanumerics() {
    let a = random_name();
    assert_eq!(a.len(), GENERATED_NAME_LEN);
    assert!(a.bytes().all(|b| b.is_ascii_alphanumeric()), "{a}");
    assert!(is_valid_asset_name(&a));
    assert_ne!(random_name(), random_name());
}

#[test]
fn pedantic_mode_refuses_what_the_defaults_would_correct() {
    let stream = stream(RetentionPolicy::Limits);
    let mut limited = stream.clone();
    limited.consumer_limits.max_ack_pending = 10;
    let cases: [(&str, &StreamConfig, Option<&str>); 6] = [
        (
            r#"{"max_deliver":-2}"#,
            &stream,
            Some("pedantic mode: max_deliver must be set to -1"),
        ),
        (
            r#"{"max_ack_pending":-3}"#,
            &stream,
            Some("pedantic mode: max_ack_pending must be set to -1"),
        ),
        (
            r#"{"max_expires":-1}"#,
            &stream,
            Some("pedantic mode: max_expires must not be negative"),
        ),
        (
            r#"{"ack_policy":"explicit","backoff":[1000000000]}"#,
            &stream,
            Some("pedantic mode: first backoff value has to equal batch AckWait"),
        ),
        (
            r#"{"ack_policy":"explicit"}"#,
            &limited,
            Some("pedantic mode: max_ack_pending must be set if it's configured in stream limits"),
        ),
        (
            r#"{"ack_policy":"explicit","ack_wait":1000000000,"backoff":[1000000000]}"#,
            &stream,
            None,
        ),
    ];
    for (json, stream, want) in cases {
        let cfg: ConsumerConfig = serde_json::from_str(json).unwrap();
        match (check_pedantic(&cfg, stream), want) {
            (Ok(()), None) => {}
            (Err(e), Some(text)) => {
                assert_eq!(
                    (e.err_code, e.description.as_str()),
                    (10157, text),
                    "{json}"
                );
            }
            (got, want) => panic!("{json}: {got:?}, wanted {want:?}"),
        }
    }
}
