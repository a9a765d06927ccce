//! Stream configuration normalisation and validation, as nats-server 2.15.1 does it
//! (`checkStreamCfg` and the create/update handlers; spec/nats-protocol-and-jetstream.md §3.4–3.5).
//!
//! Everything is pure: the caller passes the other streams' subjects and the cluster size.
//! Error texts below were checked against the real server (fixture
//! `nats_2_15_1_stream_api.json`); facts worth knowing:
//! - Duplicate subjects in one config are reported as overlapping with themselves
//!   (`subject "a.b" overlaps with "a.b"`).
//! - A zero `duplicate_window` becomes 2 minutes, or `max_age` when that is shorter; sealing a
//!   stream on update zeroes `max_age` but keeps the duplicate window.
//! - An update may change `first_seq` (it is stored, but only matters to a new stream).
//! - `placement: {"cluster":"","tags":[]}` is kept as `"placement":{}`.
//! - `subject_delete_marker_ttl` switches on `allow_msg_ttl` and `allow_rollup_hdrs` and raises
//!   the stored `_nats.req.level` to 1.

use std::collections::BTreeMap;

use crate::jetstream::api::types::{
    DiscardPolicy, RetentionPolicy, StorageType, StreamConfig, StreamSource,
};
use crate::jetstream::api::{ApiError, ErrorKind};
use crate::jetstream::transform::Transform;
use crate::router::subject;

/// Longest stream name.
pub const MAX_NAME_LEN: usize = 255;
/// Longest description.
pub const MAX_DESCRIPTION_LEN: usize = 4096;
/// Most replicas a stream may have.
pub const MAX_REPLICAS: i64 = 5;
/// Total bytes of metadata keys and values.
pub const MAX_METADATA_BYTES: usize = 128 * 1024;
/// Default duplicate window: two minutes.
pub const DEFAULT_DUPLICATE_WINDOW_NS: i64 = 120_000_000_000;
/// Smallest non-zero `max_age` and duplicate window.
pub const MIN_WINDOW_NS: i64 = 100_000_000;
/// Smallest `subject_delete_marker_ttl`.
pub const MIN_MARKER_TTL_NS: i64 = 1_000_000_000;

/// Metadata key holding the API level a stream's features require (stored).
pub const META_REQ_LEVEL: &str = "_nats.req.level";
/// Metadata key with the server version (responses only).
pub const META_VERSION: &str = "_nats.ver";
/// Metadata key with the server's API level (responses only).
pub const META_LEVEL: &str = "_nats.level";

/// What validation needs to know about the rest of the system.
#[derive(Debug, Clone, Copy)]
pub struct ValidationContext<'a> {
    /// Whether the server runs clustered (replicas > 1 are refused otherwise).
    pub clustered: bool,
    /// Nodes available for placement.
    pub cluster_size: usize,
    /// `(stream name, subjects)` of every other stream in the account.
    pub other_streams: &'a [(String, Vec<String>)],
    /// What the account's JetStream limits ask of a stream's `max_bytes`.
    pub max_bytes: MaxBytesLimits,
}

/// An account's limits on a stream's `max_bytes` (`max_bytes_required`,
/// `memory_max_stream_bytes`, `storage_max_stream_bytes`); the default asks nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaxBytesLimits {
    /// Every stream must set `max_bytes` (10113).
    pub required: bool,
    /// A memory stream's `max_bytes` at most, when above 0 (10122).
    pub memory_max: i64,
    /// A file stream's `max_bytes` at most, when above 0 (10122).
    pub storage_max: i64,
}

impl MaxBytesLimits {
    /// No limits (`$G`, `jetstream: enabled`).
    pub const NONE: Self = Self {
        required: false,
        memory_max: 0,
        storage_max: 0,
    };
}

/// Outcome of a create request against an existing stream of the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateOutcome {
    /// No stream of that name: create it with this normalised config.
    Create(Box<StreamConfig>),
    /// An identical stream exists: answer with it (`did_create:true`, observed).
    AlreadyExists,
}

/// Applies nats-server's defaults without judging the config: `0`/`< -1` limits become `-1`,
/// replicas `0` becomes 1, the duplicate window defaults, subjects default to the name (unless
/// a mirror or sources are set), empty placement contents are dropped, and the stored
/// `_nats.req.level` metadata key is set.
pub fn normalize(cfg: &mut StreamConfig) {
    for limit in [
        &mut cfg.max_consumers,
        &mut cfg.max_msgs,
        &mut cfg.max_bytes,
        &mut cfg.max_msgs_per_subject,
    ] {
        if *limit == 0 || *limit < -1 {
            *limit = -1;
        }
    }
    if cfg.max_msg_size == 0 || cfg.max_msg_size < -1 {
        cfg.max_msg_size = -1;
    }
    if cfg.num_replicas == 0 {
        cfg.num_replicas = 1;
    }
    let sourced = cfg.mirror.is_some() || !cfg.sources.is_empty();
    if cfg.duplicate_window == 0 && !sourced {
        cfg.duplicate_window = if cfg.max_age > 0 && cfg.max_age < DEFAULT_DUPLICATE_WINDOW_NS {
            cfg.max_age
        } else {
            DEFAULT_DUPLICATE_WINDOW_NS
        };
    }
    if cfg.subjects.is_empty() && !sourced {
        cfg.subjects = vec![cfg.name.clone()];
    }
    if cfg.subject_delete_marker_ttl > 0 && !cfg.pedantic {
        cfg.allow_msg_ttl = true;
        cfg.allow_rollup_hdrs = true;
    }
    // A schedule message replaces the previous one on its subject (a rollup).
    if cfg.allow_msg_schedules && !cfg.pedantic && cfg.discard != DiscardPolicy::New {
        cfg.allow_rollup_hdrs = true;
        cfg.deny_purge = false;
    }
    if let Some(r) = cfg.republish.as_mut() {
        if r.src.is_empty() {
            r.src = ">".to_string();
        }
        // `>` to `>` republishes the transformed subjects when the input transform's source is
        // the stream's only subject (nats-server's implicit republish).
        if let Some(t) = &cfg.subject_transform
            && r.src == ">"
            && r.dest == ">"
            && cfg.subjects.len() == 1
            && t.src == cfg.subjects[0]
        {
            r.src = t.dest.clone();
            r.dest = t.dest.clone();
        }
    }
    cfg.metadata.remove(META_VERSION);
    cfg.metadata.remove(META_LEVEL);
    cfg.metadata
        .insert(META_REQ_LEVEL.to_string(), required_level(cfg).to_string());
    cfg.pedantic = false;
}

/// The API level a config's features need (`_nats.req.level`), as nats-server 2.12 sets it:
/// 2 for counters, atomic batches, message schedules and async persist mode (2.12), 1 for
/// per-message TTLs (2.11), else 0.
pub fn required_level(cfg: &StreamConfig) -> u32 {
    if cfg.allow_msg_counter
        || cfg.allow_atomic
        || cfg.allow_msg_schedules
        || cfg.persist_mode.is_some()
    {
        2
    } else {
        u32::from(cfg.allow_msg_ttl || cfg.subject_delete_marker_ttl > 0)
    }
}

/// The config as responses show it: the stored one plus `_nats.ver` and `_nats.level`.
pub fn with_response_metadata(cfg: &StreamConfig, version: &str, api_level: u32) -> StreamConfig {
    let mut out = cfg.clone();
    out.metadata
        .insert(META_VERSION.to_string(), version.to_string());
    out.metadata
        .insert(META_LEVEL.to_string(), api_level.to_string());
    out
}

/// The config as STREAM.LIST shows it: only stored metadata keys.
pub fn without_response_metadata(cfg: &StreamConfig) -> StreamConfig {
    let mut out = cfg.clone();
    out.metadata.remove(META_VERSION);
    out.metadata.remove(META_LEVEL);
    out
}

fn invalid(text: &str) -> ApiError {
    ApiError::invalid_config(text)
}

/// True if `name` is a valid stream name: non-empty, at most 255 bytes, and without
/// whitespace, `.`, `*`, `>`, `/` or `\`.
pub fn is_valid_stream_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && !name
            .bytes()
            .any(|b| b.is_ascii_whitespace() || matches!(b, b'.' | b'*' | b'>' | b'/' | b'\\'))
}

/// True if some subject matches both patterns.
pub fn subjects_overlap(a: &str, b: &str) -> bool {
    let mut ta = subject::tokens(a);
    let mut tb = subject::tokens(b);
    loop {
        match (ta.next(), tb.next()) {
            (None, None) => return true,
            (Some(">"), Some(_)) | (Some(_), Some(">")) => return true,
            (Some(x), Some(y)) => {
                if x != y && x != "*" && y != "*" {
                    return false;
                }
            }
            _ => return false,
        }
    }
}

/// Reserved subject spaces a stream may only capture with `no_ack`.
fn check_reserved_subject(subj: &str, no_ack: bool, replicas: i64) -> Result<(), ApiError> {
    if subj == ">" {
        if !no_ack {
            return Err(invalid("capturing all subjects requires no-ack to be true"));
        }
        if replicas != 1 {
            return Err(invalid("capturing all subjects requires replicas of 1"));
        }
    }
    if no_ack {
        return Ok(());
    }
    // All of `$JS.` but its event subjects (acks, flow control and API included), as
    // nats-server 2.15.1 answers.
    let js_api = ["$JS.>", "$JSC.>", "$NRG.>"];
    if js_api.iter().any(|r| subjects_overlap(subj, r)) && !subject::is_subset(subj, "$JS.EVENT.>")
    {
        return Err(invalid(
            "subjects that overlap with jetstream api require no-ack to be true",
        ));
    }
    if subjects_overlap(subj, "$SYS.>") && !subject::is_subset(subj, "$SYS.ACCOUNT.>") {
        return Err(invalid(
            "subjects that overlap with system api require no-ack to be true",
        ));
    }
    Ok(())
}

/// Refuses features this server does not implement yet, with a 10052 naming them.
fn check_supported(cfg: &StreamConfig) -> Result<(), ApiError> {
    let unsupported = [(cfg.allow_batched, "batch publish")];
    match unsupported.iter().find(|(set, _)| *set) {
        Some((_, what)) => Err(invalid(&format!("{what} are not supported by this server"))),
        None => Ok(()),
    }
}

fn check_sources(cfg: &StreamConfig) -> Result<(), ApiError> {
    if let Some(m) = &cfg.mirror {
        if cfg.first_seq > 0 {
            return Err(ApiError::new(ErrorKind::MirrorWithFirstSeq));
        }
        if !cfg.subjects.is_empty() {
            return Err(ApiError::new(ErrorKind::MirrorWithSubjects));
        }
        if !cfg.sources.is_empty() {
            return Err(ApiError::new(ErrorKind::MirrorWithSources));
        }
        if cfg.allow_msg_counter {
            return Err(ApiError::new(ErrorKind::MirrorWithCounters));
        }
        if !m.filter_subject.is_empty() && !m.subject_transforms.is_empty() {
            return Err(ApiError::new(ErrorKind::MirrorMultipleFiltersNotAllowed));
        }
        if cfg.subject_delete_marker_ttl > 0 {
            return Err(invalid("subject delete markers forbidden on mirrors"));
        }
        if cfg.allow_atomic {
            return Err(ApiError::new(ErrorKind::MirrorWithAtomicPublish));
        }
        if cfg.allow_msg_schedules {
            return Err(ApiError::new(ErrorKind::MirrorWithMsgSchedules));
        }
        if !is_valid_stream_name(&m.name) {
            return Err(ApiError::new(ErrorKind::MirrorInvalidStreamName));
        }
        if m.name == cfg.name {
            return Err(invalid("detected cycle"));
        }
        check_source_filters(m, true)?;
    } else if cfg.mirror_direct {
        return Err(invalid("stream has no mirror but does have mirror direct"));
    }
    if !cfg.sources.is_empty() && cfg.allow_msg_schedules {
        return Err(ApiError::new(ErrorKind::SourceWithMsgSchedules));
    }
    for (i, src) in cfg.sources.iter().enumerate() {
        if !is_valid_stream_name(&src.name) {
            return Err(ApiError::new(ErrorKind::SourceInvalidStreamName));
        }
        if src.name == cfg.name {
            return Err(invalid("detected cycle"));
        }
        if cfg.sources[..i].iter().any(|prev| same_source(prev, src)) {
            return Err(ApiError::new(ErrorKind::SourceDuplicateDetected));
        }
        check_source_filters(src, false)?;
    }
    Ok(())
}

/// The external delivery and API prefixes of the mirror and sources, as nats-server checks
/// them after the sources (delivery prefixes first).
fn check_external_prefixes(cfg: &StreamConfig) -> Result<(), ApiError> {
    let externals: Vec<_> = cfg
        .mirror
        .iter()
        .chain(cfg.sources.iter())
        .filter_map(|s| s.external.as_ref())
        .collect();
    let publishable = |p: &str| subject::is_valid_subject(p) && subject::is_literal(p);
    for deliver in externals.iter().map(|e| e.deliver.as_str()) {
        if !deliver.is_empty() && !publishable(deliver) {
            return Err(ApiError::with(
                ErrorKind::StreamInvalidExternalDeliverySubj,
                &[("prefix", deliver)],
            ));
        }
    }
    for api in externals.iter().map(|e| e.api.as_str()) {
        if api.is_empty() {
            continue;
        }
        if !publishable(api) {
            return Err(invalid(&format!(
                "stream external api prefix {} must be a valid subject without wildcards",
                crate::jetstream::api::go_json::go_quote(api)
            )));
        }
        if subjects_overlap(api, "$JS.API") {
            return Err(ApiError::with(
                ErrorKind::StreamExternalApiOverlap,
                &[("prefix", api), ("subject", "$JS.API")],
            ));
        }
    }
    Ok(())
}

/// Two sources copying the same messages the same way (nats-server compares the origin, the
/// filter and the transforms).
fn same_source(a: &StreamSource, b: &StreamSource) -> bool {
    a.name == b.name
        && a.filter_subject == b.filter_subject
        && a.subject_transforms == b.subject_transforms
        && a.external == b.external
}

/// The filter and transforms of a mirror (`mirror`) or a source, with nats-server's errors.
fn check_source_filters(src: &StreamSource, mirror: bool) -> Result<(), ApiError> {
    let kind =
        |source: ErrorKind, mirror_kind: ErrorKind| if mirror { mirror_kind } else { source };
    if !src.filter_subject.is_empty() {
        if !src.subject_transforms.is_empty() {
            return Err(ApiError::new(kind(
                ErrorKind::SourceMultipleFiltersNotAllowed,
                ErrorKind::MirrorMultipleFiltersNotAllowed,
            )));
        }
        if !subject::is_valid_subject(&src.filter_subject) {
            return Err(ApiError::with_err(
                ErrorKind::StreamCreate,
                &format!(
                    "subject filter '{}' for the source: invalid subject",
                    src.filter_subject
                ),
            ));
        }
    }
    for (i, t) in src.subject_transforms.iter().enumerate() {
        if !t.src.is_empty() && !subject::is_valid_subject(&t.src) {
            return Err(ApiError::with_err(
                kind(
                    ErrorKind::SourceInvalidSubjectFilter,
                    ErrorKind::MirrorInvalidSubjectFilter,
                ),
                "invalid subject",
            ));
        }
        if let Err(e) = Transform::new(&t.src, &t.dest) {
            return Err(ApiError::with_err(
                kind(
                    ErrorKind::SourceInvalidTransformDestination,
                    ErrorKind::MirrorInvalidTransformDestination,
                ),
                &e,
            ));
        }
        let src_of = |s: &str| {
            if s.is_empty() {
                ">".to_string()
            } else {
                s.to_string()
            }
        };
        if src.subject_transforms[..i]
            .iter()
            .any(|prev| subjects_overlap(&src_of(&prev.src), &src_of(&t.src)))
        {
            return Err(ApiError::new(kind(
                ErrorKind::SourceOverlappingSubjectFilters,
                ErrorKind::MirrorOverlappingSubjectFilters,
            )));
        }
    }
    Ok(())
}

/// The stream's input `subject_transform` and its `republish`, as nats-server checks them.
fn check_transforms(cfg: &StreamConfig) -> Result<(), ApiError> {
    if let Some(t) = &cfg.subject_transform {
        if !t.src.is_empty() && !subject::is_valid_subject(&t.src) {
            return Err(ApiError::with_err(
                ErrorKind::StreamTransformInvalidSource,
                &format!("invalid subject {}", t.src),
            ));
        }
        let src = if t.src.is_empty() { ">" } else { &t.src };
        if let Err(e) = Transform::new(src, &t.dest) {
            return Err(ApiError::with_err(
                ErrorKind::StreamTransformInvalidDestination,
                &e,
            ));
        }
    }
    if let Some(r) = &cfg.republish {
        if cfg.subjects.iter().any(|s| subjects_overlap(&r.dest, s)) {
            return Err(invalid(
                "stream configuration for republish destination forms a cycle",
            ));
        }
        if Transform::new(&r.src, &r.dest).is_err() {
            return Err(invalid(&format!(
                "stream configuration for republish with transform from '{}' to '{}' not valid",
                r.src, r.dest
            )));
        }
    }
    Ok(())
}

fn check_subjects(cfg: &StreamConfig) -> Result<(), ApiError> {
    for (i, subj) in cfg.subjects.iter().enumerate() {
        if !subject::is_valid_subject(subj) {
            return Err(invalid("invalid subject"));
        }
        check_reserved_subject(subj, cfg.no_ack, cfg.num_replicas)?;
        if let Some(prev) = cfg.subjects[..i].iter().find(|p| subjects_overlap(p, subj)) {
            return Err(invalid(&format!("subject {prev:?} overlaps with {subj:?}")));
        }
    }
    Ok(())
}

fn check_metadata(metadata: &BTreeMap<String, String>) -> Result<(), ApiError> {
    let size: usize = metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > MAX_METADATA_BYTES {
        return Err(invalid(&format!(
            "stream metadata exceeds maximum size of {MAX_METADATA_BYTES} bytes"
        )));
    }
    Ok(())
}

/// True if `name` has none of the characters nats-server refuses in asset names (whitespace,
/// `.`, `*`, `>`, `\\`, `/`) and is not empty; the length is checked apart.
fn has_valid_name_chars(name: &str) -> bool {
    !name.is_empty()
        && !name
            .bytes()
            .any(|b| b.is_ascii_whitespace() || matches!(b, b'.' | b'*' | b'>' | b'/' | b'\\'))
}

/// Validates a normalised config on its own (no knowledge of other streams), in the order of
/// nats-server's `checkStreamCfg`: the first failing check is the one reported.
pub fn check(cfg: &StreamConfig, max_bytes: &MaxBytesLimits) -> Result<(), ApiError> {
    check_head(cfg)?;
    check_body(cfg, max_bytes)
}

/// The checks nats-server makes before it corrects limits: name, description, metadata,
/// replicas.
fn check_head(cfg: &StreamConfig) -> Result<(), ApiError> {
    if !has_valid_name_chars(&cfg.name) {
        return Err(invalid(
            "stream name is required and can not contain '.', '*', '>', '\\', '/'",
        ));
    }
    if cfg.name.len() > MAX_NAME_LEN {
        return Err(invalid(&format!(
            "stream name is too long, maximum allowed is {MAX_NAME_LEN}"
        )));
    }
    if cfg.description.len() > MAX_DESCRIPTION_LEN {
        return Err(invalid(&format!(
            "stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}"
        )));
    }
    check_metadata(&cfg.metadata)?;
    if cfg.num_replicas > MAX_REPLICAS {
        return Err(invalid(&format!("maximum replicas is {MAX_REPLICAS}")));
    }
    if cfg.num_replicas < 0 {
        return Err(ApiError::new(ErrorKind::ReplicasCountCannotBeNegative));
    }
    Ok(())
}

/// Pedantic mode (`"pedantic": true`): the values nats-server would otherwise correct are
/// refused with `10157`, each where nats-server's `checkStreamCfg` corrects it. Runs on the
/// config as sent, before [`normalize`].
pub fn check_pedantic(cfg: &StreamConfig) -> Result<(), ApiError> {
    if !cfg.pedantic {
        return Ok(());
    }
    check_head(cfg)?;
    let pedantic = |what: &str| Err(ApiError::with_err(ErrorKind::Pedantic, what));
    for (value, field) in [
        (cfg.max_msgs, "max_msgs"),
        (cfg.max_msgs_per_subject, "max_msgs_per_subject"),
        (cfg.max_bytes, "max_bytes"),
        (i64::from(cfg.max_msg_size), "max_msg_size"),
        (cfg.max_consumers, "max_consumers"),
    ] {
        if value < -1 {
            return pedantic(&format!("{field} must be set to -1"));
        }
    }
    if cfg.max_age < 0 {
        return Err(invalid("max age can not be negative"));
    }
    if cfg.max_age > 0 && cfg.max_age < MIN_WINDOW_NS {
        return Err(invalid("max age needs to be >= 100ms"));
    }
    let sourced = cfg.mirror.is_some() || !cfg.sources.is_empty();
    if cfg.duplicate_window == 0
        && !sourced
        && cfg.max_age > 0
        && cfg.max_age < DEFAULT_DUPLICATE_WINDOW_NS
    {
        return pedantic("duplicate window cannot be bigger than max age");
    }
    Ok(())
}

/// What a counter stream (`allow_msg_counter`) cannot be combined with, in nats-server's order.
fn check_counter(cfg: &StreamConfig) -> Result<(), ApiError> {
    if !cfg.allow_msg_counter {
        return Ok(());
    }
    if cfg.discard == DiscardPolicy::New {
        return Err(invalid("counter stream cannot use discard new"));
    }
    if cfg.allow_msg_ttl {
        return Err(invalid("counter stream cannot use message TTLs"));
    }
    if cfg.allow_msg_schedules {
        return Err(invalid("counter stream cannot use message schedules"));
    }
    if cfg.retention != RetentionPolicy::Limits {
        return Err(invalid("counter stream can only use limits retention"));
    }
    Ok(())
}

/// The checks after the limits are corrected, in nats-server's order.
fn check_body(cfg: &StreamConfig, max_bytes: &MaxBytesLimits) -> Result<(), ApiError> {
    if cfg.max_age < 0 {
        return Err(invalid("max age can not be negative"));
    }
    if cfg.max_age > 0 && cfg.max_age < MIN_WINDOW_NS {
        return Err(invalid("max age needs to be >= 100ms"));
    }
    if cfg.duplicate_window < 0 {
        return Err(invalid("duplicates window can not be negative"));
    }
    if cfg.max_age > 0 && cfg.duplicate_window > cfg.max_age {
        return Err(invalid("duplicates window can not be larger then max age"));
    }
    if cfg.duplicate_window > 0 && cfg.duplicate_window < MIN_WINDOW_NS {
        return Err(invalid("duplicates window needs to be >= 100ms"));
    }
    if cfg.deny_purge && cfg.allow_rollup_hdrs {
        return Err(invalid("roll-ups require the purge permission"));
    }
    check_counter(cfg)?;
    if cfg.allow_msg_schedules {
        if cfg.discard == DiscardPolicy::New {
            return Err(invalid("message scheduling cannot use discard new"));
        }
        if !cfg.allow_rollup_hdrs {
            return Err(invalid(
                "message scheduling cannot be set if roll-ups are disabled",
            ));
        }
    }
    if cfg.persist_mode.is_some() {
        if cfg.storage != StorageType::File {
            return Err(invalid(
                "async persist mode is only supported on file storage",
            ));
        }
        if cfg.num_replicas > 1 {
            return Err(invalid(
                "async persist mode is not supported on replicated streams",
            ));
        }
        if cfg.allow_atomic {
            return Err(invalid(
                "async persist mode is not supported with atomic batch publish",
            ));
        }
    }
    if cfg.discard_new_per_subject {
        if cfg.discard != DiscardPolicy::New {
            return Err(invalid(
                "discard new per subject requires discard new policy to be set",
            ));
        }
        if cfg.max_msgs_per_subject <= 0 {
            return Err(invalid(
                "discard new per subject requires max msgs per subject > 0",
            ));
        }
    }
    if cfg.subject_delete_marker_ttl > 0 {
        if cfg.subject_delete_marker_ttl < MIN_MARKER_TTL_NS {
            return Err(invalid(
                "subject delete marker TTL must be at least 1 second",
            ));
        }
        // Without pedantic mode, `normalize` switched both on.
        if !cfg.allow_msg_ttl {
            return Err(invalid(
                "subject delete marker cannot be set if message TTLs are disabled",
            ));
        }
        if !cfg.allow_rollup_hdrs {
            return Err(invalid(
                "subject delete marker cannot be set if roll-ups are disabled",
            ));
        }
    } else if cfg.subject_delete_marker_ttl < 0 {
        return Err(invalid("subject delete marker TTL must not be negative"));
    }
    if cfg
        .placement
        .as_ref()
        .is_some_and(|p| !p.preferred.is_empty())
    {
        return Err(invalid("preferred server not permitted in placement"));
    }
    check_sources(cfg)?;
    check_external_prefixes(cfg)?;
    check_subjects(cfg)?;
    check_max_bytes(cfg, max_bytes)?;
    check_transforms(cfg)?;
    check_supported(cfg)
}

/// The account's `max_bytes` limits, where nats-server's `checkStreamCfg` checks them (after
/// the subjects): 10113 without `max_bytes` when required, 10122 above the storage type's bound.
fn check_max_bytes(cfg: &StreamConfig, limits: &MaxBytesLimits) -> Result<(), ApiError> {
    let bound = match cfg.storage {
        StorageType::Memory => limits.memory_max,
        StorageType::File => limits.storage_max,
    };
    if limits.required && cfg.max_bytes <= 0 {
        return Err(ApiError::new(ErrorKind::StreamMaxBytesRequired));
    }
    if bound > 0 && cfg.max_bytes > bound {
        return Err(ApiError::new(ErrorKind::StreamMaxStreamBytesExceeded));
    }
    Ok(())
}

/// Checks replicas against the deployment (10074 single server, 10005 too few peers).
fn check_placement(cfg: &StreamConfig, ctx: &ValidationContext<'_>) -> Result<(), ApiError> {
    if cfg.num_replicas > 1 && !ctx.clustered {
        return Err(ApiError::new(ErrorKind::StreamReplicasNotSupported));
    }
    if usize::try_from(cfg.num_replicas).unwrap_or(usize::MAX) > ctx.cluster_size.max(1) {
        return Err(ApiError::with_err(
            ErrorKind::ClusterNoPeers,
            "no suitable peers for placement",
        ));
    }
    Ok(())
}

/// `400/10065` when any subject overlaps another stream's (the stream itself excluded).
fn check_overlap(cfg: &StreamConfig, ctx: &ValidationContext<'_>) -> Result<(), ApiError> {
    let clash = ctx
        .other_streams
        .iter()
        .filter(|(name, _)| *name != cfg.name)
        .flat_map(|(_, subjects)| subjects)
        .any(|other| cfg.subjects.iter().any(|s| subjects_overlap(s, other)));
    if clash {
        return Err(ApiError::new(ErrorKind::StreamSubjectOverlap));
    }
    Ok(())
}

/// A STREAM.CREATE request: the name in the API subject, the decoded config and the current
/// config of a stream with that name (if any). Returns what to do, or the exact error.
pub fn check_create(
    subject_name: &str,
    mut cfg: StreamConfig,
    existing: Option<&StreamConfig>,
    ctx: &ValidationContext<'_>,
) -> Result<CreateOutcome, ApiError> {
    if cfg.name != subject_name {
        return Err(ApiError::new(ErrorKind::StreamMismatch));
    }
    if subject_name.bytes().any(|b| matches!(b, b'/' | b'\\')) {
        return Err(ApiError::new(ErrorKind::StreamNameContainsPathSeparators));
    }
    if cfg.sealed {
        return Err(invalid("stream configuration for create can not be sealed"));
    }
    if cfg.mirror_direct && cfg.mirror.is_none() {
        return Err(invalid("stream has no mirror but does have mirror direct"));
    }
    check_pedantic(&cfg)?;
    normalize(&mut cfg);
    check(&cfg, &ctx.max_bytes)?;
    if let Some(existing) = existing {
        return if *existing == cfg {
            Ok(CreateOutcome::AlreadyExists)
        } else {
            Err(ApiError::new(ErrorKind::StreamNameExist))
        };
    }
    check_placement(&cfg, ctx)?;
    check_overlap(&cfg, ctx)?;
    Ok(CreateOutcome::Create(Box::new(cfg)))
}

/// A STREAM.UPDATE request: returns the new normalised config, or the exact error.
pub fn check_update(
    subject_name: &str,
    mut cfg: StreamConfig,
    existing: Option<&StreamConfig>,
    ctx: &ValidationContext<'_>,
) -> Result<StreamConfig, ApiError> {
    check_pedantic(&cfg)?;
    normalize(&mut cfg);
    check(&cfg, &ctx.max_bytes)?;
    if cfg.name != subject_name {
        return Err(ApiError::new(ErrorKind::StreamMismatch));
    }
    let Some(old) = existing else {
        return Err(ApiError::stream_not_found());
    };
    if cfg.sealed {
        cfg.max_age = 0;
        cfg.discard = DiscardPolicy::New;
        cfg.deny_delete = true;
        cfg.deny_purge = true;
        cfg.allow_rollup_hdrs = false;
    }
    check(&cfg, &ctx.max_bytes)?;
    let update_err = |what: &str| invalid(&format!("stream configuration update can not {what}"));
    if cfg.storage != old.storage {
        return Err(update_err("change storage type"));
    }
    if cfg.retention != old.retention
        && (cfg.retention == RetentionPolicy::WorkQueue
            || old.retention == RetentionPolicy::WorkQueue)
    {
        return Err(update_err("change retention policy to/from workqueue"));
    }
    if old.sealed && !cfg.sealed {
        return Err(update_err("unseal a sealed stream"));
    }
    if old.deny_delete && !cfg.deny_delete {
        return Err(update_err("cancel deny message deletes"));
    }
    if old.deny_purge && !cfg.deny_purge {
        return Err(update_err("cancel deny purge"));
    }
    if old.persist_mode != cfg.persist_mode {
        return Err(update_err("change persist mode"));
    }
    if old.allow_msg_ttl && !cfg.allow_msg_ttl {
        return Err(invalid("message TTL status can not be disabled"));
    }
    if old.allow_msg_counter != cfg.allow_msg_counter {
        return Err(invalid(
            "stream configuration update can not change message counter setting",
        ));
    }
    if old.allow_msg_schedules && !cfg.allow_msg_schedules {
        return Err(invalid("message schedules can not be disabled"));
    }
    // Removing the mirror (promotion) is allowed; adding or changing one is not.
    if cfg.mirror.is_some() && old.mirror != cfg.mirror {
        return Err(ApiError::new(ErrorKind::StreamMirrorNotUpdatable));
    }
    check_placement(&cfg, ctx)?;
    check_overlap(&cfg, ctx)?;
    Ok(cfg)
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
