//! Validation tests against replies captured from nats-server 2.15.1
//! (`server/tests/fixtures/jetstream/nats_2_15_1_stream_api.json`, see its README).

use super::*;
use crate::jetstream::api::types::requests::decode;
use crate::jetstream::api::types::responses::error_json;
use crate::jetstream::api::types::{StorageType, response_type, to_go_json};

fn fixture(name: &str) -> String {
    let all: serde_json::Value = serde_json::from_str(include_str!(
        "../../../tests/fixtures/jetstream/nats_2_15_1_stream_api.json"
    ))
    .unwrap();
    all[name].as_str().unwrap().to_string()
}

/// The exact `config` bytes of a captured create/update response.
fn fixture_config(name: &str) -> String {
    let body = fixture(name);
    let start = body.find("\"config\":").unwrap() + "\"config\":".len();
    let end = body.find(",\"created\"").unwrap();
    body[start..end].to_string()
}

const SINGLE: ValidationContext<'static> = ValidationContext {
    clustered: false,
    cluster_size: 1,
    other_streams: &[],
    max_bytes: MaxBytesLimits::NONE,
};

fn created(json: &str, ctx: &ValidationContext<'_>) -> StreamConfig {
    let cfg: StreamConfig = decode(json.as_bytes()).unwrap();
    let name = cfg.name.clone();
    match check_create(&name, cfg, None, ctx).unwrap() {
        CreateOutcome::Create(c) => *c,
        CreateOutcome::AlreadyExists => panic!("nothing exists"),
    }
}

fn shown(cfg: &StreamConfig) -> String {
    to_go_json(&with_response_metadata(cfg, "2.15.1", 5))
}

#[test]
fn normalised_configs_match_nats_server_bytes() {
    let cases = [
        ("create_min", r#"{"name":"ORDERS","subjects":["orders.>"]}"#),
        ("create_nosubj", r#"{"name":"NOSUBJ"}"#),
        (
            "create_dw_maxage",
            r#"{"name":"DW2","max_age":60000000000}"#,
        ),
        (
            "create_zero_limits",
            r#"{"name":"ZL","max_msgs":0,"max_bytes":0,"max_consumers":0,"num_replicas":0,"duplicate_window":0,"max_msg_size":0,"max_msgs_per_subject":-5}"#,
        ),
        (
            "create_ttl_marker",
            r#"{"name":"TM2","subject_delete_marker_ttl":2000000000}"#,
        ),
        (
            "create_full",
            r#"{"name":"FULL","subjects":["f.*"],"description":"d","retention":"interest","max_consumers":5,"max_msgs":100,"max_bytes":100000,"max_age":3600000000000,"max_msgs_per_subject":3,"max_msg_size":1024,"discard":"new","discard_new_per_subject":true,"storage":"memory","num_replicas":1,"no_ack":false,"duplicate_window":60000000000,"allow_direct":true,"allow_rollup_hdrs":true,"deny_delete":true,"deny_purge":false,"first_seq":100,"metadata":{"k":"v"},"placement":{"cluster":"","tags":[]},"consumer_limits":{"inactive_threshold":5000000000,"max_ack_pending":10}}"#,
        ),
    ];
    for (name, request) in cases {
        assert_eq!(
            shown(&created(request, &SINGLE)),
            fixture_config(name),
            "{name}"
        );
    }
}

#[test]
fn normalised_config_round_trips_through_json() {
    let cfg = created(
        r#"{"name":"FULL","subjects":["f.*"],"max_msgs":100,"metadata":{"k":"v"},"consumer_limits":null,"placement":null}"#,
        &SINGLE,
    );
    let back: StreamConfig = decode(to_go_json(&cfg).as_bytes()).unwrap();
    assert_eq!(back, cfg);
}

#[test]
fn create_errors_match_nats_server_bytes() {
    let others = [("ORDERS".to_string(), vec!["orders.>".to_string()])];
    let ctx = ValidationContext {
        other_streams: &others,
        ..SINGLE
    };
    let cases = [
        ("err_mismatch", "X", r#"{"name":"Y"}"#),
        ("err_sealed", "SE", r#"{"name":"SE","sealed":true}"#),
        (
            "err_overlap",
            "OV",
            r#"{"name":"OV","subjects":["orders.a"]}"#,
        ),
        (
            "err_self_overlap",
            "SO",
            r#"{"name":"SO","subjects":["a.>","a.b"]}"#,
        ),
        (
            "err_dup_subj",
            "SD",
            r#"{"name":"SD","subjects":["a.b","a.b"]}"#,
        ),
        ("err_replicas", "R3", r#"{"name":"R3","num_replicas":3}"#),
        (
            "err_replicas_neg",
            "RN",
            r#"{"name":"RN","num_replicas":-1}"#,
        ),
        ("err_replicas_6", "R6", r#"{"name":"R6","num_replicas":6}"#),
        (
            "err_dw_gt_maxage",
            "DWX",
            r#"{"name":"DWX","max_age":60000000000,"duplicate_window":120000000000}"#,
        ),
        ("err_maxage_small", "MA", r#"{"name":"MA","max_age":1000}"#),
        ("err_maxage_neg", "MAN", r#"{"name":"MAN","max_age":-1}"#),
        (
            "err_dnps",
            "DN",
            r#"{"name":"DN","discard_new_per_subject":true}"#,
        ),
        (
            "err_dnps2",
            "DN2",
            r#"{"name":"DN2","discard":"new","discard_new_per_subject":true}"#,
        ),
        (
            "err_rollup_purge",
            "RP",
            r#"{"name":"RP","deny_purge":true,"allow_rollup_hdrs":true}"#,
        ),
        ("err_name_dot", "A", r#"{"name":"A.B"}"#),
        (
            "err_bad_subject",
            "BS",
            r#"{"name":"BS","subjects":["a..b"]}"#,
        ),
        ("err_gt_alone", "GT", r#"{"name":"GT","subjects":[">"]}"#),
        (
            "err_js_api",
            "JA",
            r#"{"name":"JA","subjects":["$JS.API.>"]}"#,
        ),
        (
            "err_ttl_marker",
            "TM",
            r#"{"name":"TM","subject_delete_marker_ttl":500000000}"#,
        ),
        (
            "err_mirror_direct",
            "MD",
            r#"{"name":"MD","mirror_direct":true}"#,
        ),
    ];
    for (name, subject_name, request) in cases {
        let cfg: StreamConfig = decode(request.as_bytes()).unwrap();
        let err = check_create(subject_name, cfg, None, &ctx).unwrap_err();
        assert_eq!(
            error_json(response_type::STREAM_CREATE, err),
            fixture(name),
            "{name}"
        );
    }
    let long = format!(r#"{{"name":"DL","description":"{}"}}"#, "x".repeat(4097));
    let err = check_create("DL", decode(long.as_bytes()).unwrap(), None, &ctx).unwrap_err();
    assert_eq!(
        error_json(response_type::STREAM_CREATE, err),
        fixture("err_desc_long")
    );
}

#[test]
fn decode_errors_match_nats_server_bytes() {
    for (name, request) in [
        ("err_unknown_field", r#"{"name":"UF","foo_bar":1}"#),
        ("err_bad_enum", r#"{"name":"BE","retention":"bogus"}"#),
        ("err_bad_json", r#"{"name":"#),
    ] {
        let err = decode::<StreamConfig>(request.as_bytes()).unwrap_err();
        assert_eq!(
            error_json(response_type::STREAM_CREATE, err),
            fixture(name),
            "{name}"
        );
    }
}

#[test]
fn identical_create_is_idempotent_and_a_different_one_is_10058() {
    let existing = created(r#"{"name":"ORDERS","subjects":["orders.>"]}"#, &SINGLE);
    let same: StreamConfig = decode(br#"{"name":"ORDERS","subjects":["orders.>"]}"#).unwrap();
    assert_eq!(
        check_create("ORDERS", same, Some(&existing), &SINGLE),
        Ok(CreateOutcome::AlreadyExists)
    );
    let other: StreamConfig =
        decode(br#"{"name":"ORDERS","subjects":["orders.>"],"max_msgs":5}"#).unwrap();
    let err = check_create("ORDERS", other, Some(&existing), &SINGLE).unwrap_err();
    assert_eq!(
        error_json(response_type::STREAM_CREATE, err),
        fixture("err_name_exist")
    );
}

#[test]
fn update_rules_match_nats_server() {
    let orders = created(r#"{"name":"ORDERS","subjects":["orders.>"]}"#, &SINGLE);
    let upd = |json: &str, old: &StreamConfig| {
        let cfg: StreamConfig = decode(json.as_bytes()).unwrap();
        let name = cfg.name.clone();
        check_update(&name, cfg, Some(old), &SINGLE)
    };
    for (name, request) in [
        (
            "err_upd_storage",
            r#"{"name":"ORDERS","subjects":["orders.>"],"storage":"memory"}"#,
        ),
        (
            "err_upd_retention",
            r#"{"name":"ORDERS","subjects":["orders.>"],"retention":"workqueue"}"#,
        ),
    ] {
        let err = upd(request, &orders).unwrap_err();
        assert_eq!(
            error_json(response_type::STREAM_UPDATE, err),
            fixture(name),
            "{name}"
        );
    }
    let ok = upd(
        r#"{"name":"ORDERS","subjects":["orders.>","more.>"],"max_msgs":50,"retention":"interest"}"#,
        &orders,
    )
    .unwrap();
    assert_eq!(shown(&ok), fixture_config("upd_ok"));

    let full = created(
        r#"{"name":"FULL","subjects":["f.*"],"storage":"memory","retention":"interest","deny_delete":true}"#,
        &SINGLE,
    );
    assert_eq!(full.storage, StorageType::Memory);
    let err = upd(
        r#"{"name":"FULL","subjects":["f.*"],"storage":"memory","retention":"interest","deny_delete":false}"#,
        &full,
    )
    .unwrap_err();
    assert_eq!(
        error_json(response_type::STREAM_UPDATE, err),
        fixture("err_upd_deny_delete")
    );

    let dw2 = created(r#"{"name":"DW2","max_age":60000000000}"#, &SINGLE);
    let sealed = upd(
        r#"{"name":"DW2","max_age":60000000000,"sealed":true}"#,
        &dw2,
    )
    .unwrap();
    assert_eq!(shown(&sealed), fixture_config("upd_seal"));
    let err = upd(
        r#"{"name":"DW2","max_age":60000000000,"sealed":false}"#,
        &sealed,
    )
    .unwrap_err();
    assert_eq!(
        error_json(response_type::STREAM_UPDATE, err),
        fixture("err_upd_unseal")
    );

    let cfg: StreamConfig = decode(br#"{"name":"NOPE"}"#).unwrap();
    let err = check_update("NOPE", cfg, None, &SINGLE).unwrap_err();
    assert_eq!(
        error_json(response_type::STREAM_UPDATE, err),
        fixture("err_upd_notfound")
    );
}

#[test]
fn replicas_are_checked_against_the_cluster() {
    let three = ValidationContext {
        clustered: true,
        cluster_size: 3,
        other_streams: &[],
        max_bytes: MaxBytesLimits::NONE,
    };
    assert_eq!(
        created(r#"{"name":"R3","num_replicas":3}"#, &three).num_replicas,
        3
    );
    let cfg: StreamConfig = decode(br#"{"name":"R5","num_replicas":5}"#).unwrap();
    let err = check_create("R5", cfg, None, &three).unwrap_err();
    assert_eq!((err.code, err.err_code), (400, 10005));
}

#[test]
fn overlap_is_token_wise() {
    assert!(subjects_overlap("a.>", "a.b.c"));
    assert!(subjects_overlap("a.*", "*.b"));
    assert!(subjects_overlap(">", "x"));
    assert!(!subjects_overlap("a.*", "a.b.c"));
    assert!(!subjects_overlap("a.b", "a.c"));
    assert!(!subjects_overlap("a", "a.b"));
    assert!(subjects_overlap("a.b", "a.b"));
}

#[test]
fn stream_names_reject_separators_and_wildcards() {
    for bad in [
        "",
        "a.b",
        "a*",
        "a>",
        "a b",
        "a/b",
        "a\\b",
        &"x".repeat(256),
    ] {
        assert!(!is_valid_stream_name(bad), "{bad:?}");
    }
    assert!(is_valid_stream_name("KV_bucket-1"));
    let cfg: StreamConfig = decode(br#"{"name":"a/b"}"#).unwrap();
    let err = check_create("a/b", cfg, None, &SINGLE).unwrap_err();
    assert_eq!(err.err_code, 10128);
}

#[test]
fn unsupported_features_are_refused_with_10052() {
    let cfg: StreamConfig = decode(br#"{"name":"M","allow_batched":true}"#).unwrap();
    let err = check_create("M", cfg, None, &SINGLE).unwrap_err();
    assert_eq!(err.err_code, 10052);
}

#[test]
fn counter_streams_refuse_what_nats_server_refuses() {
    let create = |json: &str| {
        let cfg: StreamConfig = decode(json.as_bytes()).unwrap();
        check_create("M", cfg, None, &SINGLE)
    };
    assert!(create(r#"{"name":"M","allow_msg_counter":true}"#).is_ok());
    for (json, text) in [
        (
            r#""discard":"new""#,
            "counter stream cannot use discard new",
        ),
        (
            r#""allow_msg_ttl":true"#,
            "counter stream cannot use message TTLs",
        ),
        (
            r#""retention":"workqueue""#,
            "counter stream can only use limits retention",
        ),
    ] {
        let err = create(&format!(
            r#"{{"name":"M","allow_msg_counter":true,{json}}}"#
        ))
        .unwrap_err();
        assert_eq!(err.err_code, 10052, "{json}");
        assert!(
            err.description.contains(text),
            "{json}: {}",
            err.description
        );
    }
    let err = create(r#"{"name":"M","allow_msg_counter":true,"mirror":{"name":"O"}}"#).unwrap_err();
    assert_eq!(err.err_code, 10173);
}

#[test]
fn republish_and_subject_transform_are_checked_as_nats_server_does() {
    let create = |json: &str| {
        let cfg: StreamConfig = decode(json.as_bytes()).unwrap();
        check_create("M", cfg, None, &SINGLE)
    };
    let err = create(r#"{"name":"M","subjects":["m.>"],"republish":{"dest":"m.x"}}"#).unwrap_err();
    assert_eq!(err.err_code, 10052);
    assert!(
        err.description.contains("forms a cycle"),
        "{}",
        err.description
    );
    let err = create(r#"{"name":"M","subjects":["m.>"],"republish":{"src":"m.*","dest":"r.$2"}}"#)
        .unwrap_err();
    assert!(err.description.contains("not valid"), "{}", err.description);
    let err = create(
        r#"{"name":"M","subjects":["m.*"],"subject_transform":{"src":"m.*","dest":"s.$3"}}"#,
    )
    .unwrap_err();
    assert_eq!(err.err_code, 10156);
    assert!(
        create(r#"{"name":"M","subjects":["m.*"],"republish":{"src":"m.*","dest":"r.$1"}}"#)
            .is_ok()
    );
    // `>` to `>` with a transform of the only subject republishes the transformed subjects.
    let Ok(CreateOutcome::Create(cfg)) = create(
        r#"{"name":"M","subjects":["m"],"subject_transform":{"src":"m","dest":"t"},
            "republish":{"src":">","dest":">"}}"#,
    ) else {
        panic!("implicit republish refused")
    };
    let r = cfg.republish.unwrap();
    assert_eq!((r.src.as_str(), r.dest.as_str()), ("t", "t"));
}

fn fixture3(name: &str) -> String {
    let all: serde_json::Value = serde_json::from_str(include_str!(
        "../../../tests/fixtures/jetstream/nats_2_15_1_stream_validation.json"
    ))
    .unwrap();
    all[name].as_str().unwrap().to_string()
}

#[test]
fn more_create_errors_match_nats_server_bytes() {
    let long_name = "N".repeat(256);
    let long_body = format!(r#"{{"name":"{long_name}"}}"#);
    let big_meta = format!(
        r#"{{"name":"MB","metadata":{{"k":"{}"}}}}"#,
        "x".repeat(128 * 1024 + 1)
    );
    let cases: Vec<(&str, &str, &str)> = vec![
        (
            "err_dw_small",
            "DS",
            r#"{"name":"DS","duplicate_window":50000000}"#,
        ),
        ("err_dw_neg", "DN", r#"{"name":"DN","duplicate_window":-5}"#),
        ("err_meta_big", "MB", &big_meta),
        ("err_name_long", &long_name, &long_body),
        ("err_name_slash", "a/b", r#"{"name":"a/b"}"#),
        ("err_sys", "SY", r#"{"name":"SY","subjects":["$SYS.>"]}"#),
        (
            "err_preferred",
            "PF",
            r#"{"name":"PF","placement":{"preferred":"x"}}"#,
        ),
        (
            "err_mirror_subjects",
            "MS",
            r#"{"name":"MS","subjects":["m"],"mirror":{"name":"O"}}"#,
        ),
        (
            "err_source_name",
            "SN",
            r#"{"name":"SN","sources":[{"name":"a.b"}]}"#,
        ),
    ];
    for (name, subject_name, request) in cases {
        let cfg: StreamConfig = decode(request.as_bytes()).unwrap();
        let err = check_create(subject_name, cfg, None, &SINGLE).unwrap_err();
        assert_eq!(
            error_json(response_type::STREAM_CREATE, err),
            fixture3(name),
            "{name}"
        );
    }
    for ok in [
        r#"{"name":"SA","subjects":["$SYS.ACCOUNT.x"]}"#,
        r#"{"name":"JE","subjects":["$JS.EVENT.x"]}"#,
        r#"{"name":"PD","pedantic":true}"#,
    ] {
        created(ok, &SINGLE);
    }
}

#[test]
fn more_update_errors_match_nats_server_bytes() {
    let dp = created(
        r#"{"name":"DP","deny_purge":true,"allow_msg_ttl":true}"#,
        &SINGLE,
    );
    for (name, subject_name, request) in [
        (
            "err_upd_deny_purge",
            "DP",
            r#"{"name":"DP","deny_purge":false,"allow_msg_ttl":true}"#,
        ),
        (
            "err_upd_ttl",
            "DP",
            r#"{"name":"DP","deny_purge":true,"allow_msg_ttl":false}"#,
        ),
        ("err_upd_mismatch", "DP", r#"{"name":"XX"}"#),
    ] {
        let cfg: StreamConfig = decode(request.as_bytes()).unwrap();
        let err = check_update(subject_name, cfg, Some(&dp), &SINGLE).unwrap_err();
        assert_eq!(
            error_json(response_type::STREAM_UPDATE, err),
            fixture3(name),
            "{name}"
        );
    }
}

#[test]
fn mirror_and_source_configs_are_checked_as_nats_server_does() {
    // Codes and texts observed from nats-server 2.15.1.
    for (json, code, text) in [
        (
            r#"{"name":"M","subjects":["x"],"mirror":{"name":"O"}}"#,
            10034,
            "stream mirrors can not contain subjects",
        ),
        (
            r#"{"name":"M","mirror":{"name":"O"},"sources":[{"name":"O"}]}"#,
            10031,
            "stream mirrors can not also contain other sources",
        ),
        (
            r#"{"name":"M","sources":[{"name":"O"},{"name":"O"}]}"#,
            10140,
            "duplicate source configuration detected",
        ),
        (
            r#"{"name":"M","sources":[{"name":"O","filter_subject":"o.a","subject_transforms":[{"src":"o.b","dest":"x"}]}]}"#,
            10144,
            "source with multiple subject transforms cannot also have a single subject filter",
        ),
        (
            r#"{"name":"M","mirror":{"name":"M"}}"#,
            10052,
            "detected cycle",
        ),
        (
            r#"{"name":"M","sources":[{"name":"O","subject_transforms":[{"src":"o.>","dest":"a.>"},{"src":"o.a","dest":"b"}]}]}"#,
            10147,
            "source filters can not overlap",
        ),
        (
            r#"{"name":"M","sources":[{"name":"O","filter_subject":"bad..x"}]}"#,
            10049,
            "subject filter 'bad..x' for the source: invalid subject",
        ),
        (
            r#"{"name":"M","sources":[{"name":"O","subject_transforms":[{"src":"o.*","dest":"x.$2"}]}]}"#,
            10146,
            "source transform: invalid mapping destination: wildcard index out of range in $2: [2]",
        ),
        (
            r#"{"name":"M","mirror":{"name":""}}"#,
            10142,
            "mirrored stream name is invalid",
        ),
    ] {
        let cfg: StreamConfig = decode(json.as_bytes()).unwrap();
        let err = check_create("M", cfg, None, &SINGLE).unwrap_err();
        assert_eq!(
            (err.err_code, err.description.as_str()),
            (code, text),
            "{json}"
        );
    }
    for json in [
        r#"{"name":"M","mirror":{"name":"O","filter_subject":"o.a"}}"#,
        r#"{"name":"M","mirror":{"name":"O","opt_start_seq":2,"opt_start_time":"2020-01-01T00:00:00Z"}}"#,
        r#"{"name":"M","subjects":["s.>"],"sources":[{"name":"O","filter_subject":"o.a"},{"name":"P","subject_transforms":[{"src":"o.b","dest":"tr.b"}]}]}"#,
    ] {
        let cfg: StreamConfig = decode(json.as_bytes()).unwrap();
        assert!(check_create("M", cfg, None, &SINGLE).is_ok(), "{json}");
    }
}

/// Stream subjects in JetStream's own subject space, as nats-server 2.15.1 answered each one
/// (2026-12-04, one create per subject on a fresh server): everything under `$JS.` but its
/// event subjects needs `no_ack`, so a stream can never capture its consumers' acks or flow
/// control replies (which would store its own acks as messages).
#[test]
fn streams_may_not_capture_jetstream_subjects_without_no_ack() {
    let refused = [
        "$JS.ACK.>",
        "$JS.ACK",
        "$JS.FC.>",
        "$JS.API",
        "$JS.API.>",
        "$JS.>",
        "$JSC.>",
        "$JS.ACK.S.>",
        "$JS.FOO",
        "$JS.*.>",
        "*.API.>",
        "$NRG.>",
    ];
    for subject in refused {
        let body = format!(r#"{{"name":"S","subjects":["{subject}"]}}"#);
        let cfg: StreamConfig = decode(body.as_bytes()).unwrap();
        let err = check_create("S", cfg, None, &SINGLE).expect_err(subject);
        assert_eq!(err.err_code, 10052, "{subject}");
        assert_eq!(
            err.description, "subjects that overlap with jetstream api require no-ack to be true",
            "{subject}"
        );
        let no_ack = format!(r#"{{"name":"S","subjects":["{subject}"],"no_ack":true}}"#);
        let cfg: StreamConfig = decode(no_ack.as_bytes()).unwrap();
        assert!(
            check_create("S", cfg, None, &SINGLE).is_ok(),
            "{subject} with no_ack"
        );
    }
    for subject in ["$JS.EVENT.>", "$JS.EVENT.ADVISORY.>", "$KV.x.>"] {
        let body = format!(r#"{{"name":"S","subjects":["{subject}"]}}"#);
        let cfg: StreamConfig = decode(body.as_bytes()).unwrap();
        assert!(check_create("S", cfg, None, &SINGLE).is_ok(), "{subject}");
    }
}
