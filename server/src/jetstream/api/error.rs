//! The one JetStream API error table (spec/nats-protocol-and-jetstream.md §3.13, nats-server
//! `errors.json`, 226 entries) and
//! [`ApiError`], the `{"code","err_code","description"}` object every failed API reply carries.
//!
//! Each row is `(kind, err_code, code, description template)`. Templates contain `{name}`
//! placeholders (`{err}`, `{seq}`, `{id}`, ...) that [`ApiError::with`] substitutes; unfilled
//! placeholders stay as written, like nats-server's `NewJS*Error` with no arguments.
//!
//! Observed in 2.15.1 (fixture `nats_2_15_1_stream_api.json`): most "F" errors use their `{err}`
//! slot for a fixed sentence (10052 `stream configuration update can not change storage type`,
//! 10057 `message delete not permitted` or `no message found`), so callers pass the exact text.

use serde::{Deserialize, Serialize};

/// Declares [`ErrorKind`] and its table from one list of rows.
macro_rules! js_errors {
    ($(($kind:ident, $err_code:literal, $code:literal, $desc:literal),)*) => {
        /// Every JetStream API error nats-server 2.15.1 can return, named after its Go constant
        /// without the `JS` prefix and `Err`/`ErrF` suffix.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorKind {
            $(
                #[doc = concat!("`", stringify!($code), "/", stringify!($err_code), "`: ", $desc)]
                $kind,
            )*
        }

        impl ErrorKind {
            /// Every kind, in `err_code` order.
            pub const ALL: &'static [ErrorKind] = &[$(ErrorKind::$kind,)*];

            /// The stable NATS error number (`err_code`).
            pub const fn err_code(self) -> u16 {
                match self { $(ErrorKind::$kind => $err_code,)* }
            }

            /// The HTTP-like status (`code`).
            pub const fn code(self) -> u16 {
                match self { $(ErrorKind::$kind => $code,)* }
            }

            /// The description template, with `{placeholders}`.
            pub const fn template(self) -> &'static str {
                match self { $(ErrorKind::$kind => $desc,)* }
            }
        }
    };
}

js_errors! {
    (AccountResourcesExceeded, 10002, 400, "resource limits exceeded for account"),
    (BadRequest, 10003, 400, "bad request"),
    (ClusterIncomplete, 10004, 503, "incomplete results"),
    (ClusterNoPeers, 10005, 400, "{err}"),
    (ClusterNotActive, 10006, 500, "JetStream not in clustered mode"),
    (ClusterNotAssigned, 10007, 500, "JetStream cluster not assigned to this server"),
    (ClusterNotAvail, 10008, 503, "JetStream system temporarily unavailable"),
    (ClusterNotLeader, 10009, 500, "JetStream cluster can not handle request"),
    (ClusterRequired, 10010, 503, "JetStream clustering support required"),
    (ClusterTags, 10011, 400, "tags placement not supported for operation"),
    (ConsumerCreate, 10012, 500, "{err}"),
    (ConsumerNameExist, 10013, 400, "consumer name already in use"),
    (ConsumerNotFound, 10014, 404, "consumer not found"),
    (SnapshotDeliverSubjectInvalid, 10015, 400, "deliver subject not valid"),
    (ConsumerDurableNameNotInSubject, 10016, 400, "consumer expected to be durable but no durable name set in subject"),
    (ConsumerDurableNameNotMatchSubject, 10017, 400, "consumer name in subject does not match durable name in request"),
    (ConsumerDurableNameNotSet, 10018, 400, "consumer expected to be durable but a durable name was not set"),
    (ConsumerEphemeralWithDurableInSubject, 10019, 400, "consumer expected to be ephemeral but detected a durable name set in subject"),
    (ConsumerEphemeralWithDurableName, 10020, 400, "consumer expected to be ephemeral but a durable name was set in request"),
    (StreamExternalApiOverlap, 10021, 400, "stream external api prefix {prefix} must not overlap with {subject}"),
    (StreamExternalDelPrefixOverlaps, 10022, 400, "stream external delivery prefix {prefix} overlaps with stream subject {subject}"),
    (InsufficientResources, 10023, 503, "insufficient resources"),
    (StreamInvalidExternalDeliverySubj, 10024, 400, "stream external delivery prefix {prefix} must not contain wildcards"),
    (InvalidJSON, 10025, 400, "invalid JSON: {err}"),
    (MaximumConsumersLimit, 10026, 400, "maximum consumers limit reached"),
    (MaximumStreamsLimit, 10027, 400, "maximum number of streams reached"),
    (MemoryResourcesExceeded, 10028, 500, "insufficient memory resources available"),
    (MirrorConsumerSetupFailed, 10029, 500, "{err}"),
    (MirrorMaxMessageSizeTooBig, 10030, 400, "stream mirror must have max message size >= source"),
    (MirrorWithSources, 10031, 400, "stream mirrors can not also contain other sources"),
    (MirrorWithStartSeqAndTime, 10032, 400, "stream mirrors can not have both start seq and start time configured"),
    (MirrorWithSubjectFilters, 10033, 400, "stream mirrors can not contain filtered subjects"),
    (MirrorWithSubjects, 10034, 400, "stream mirrors can not contain subjects"),
    (NoAccount, 10035, 503, "account not found"),
    (ClusterUnSupportFeature, 10036, 503, "not currently supported in clustered mode"),
    (NoMessageFound, 10037, 404, "no message found"),
    (NotEmptyRequest, 10038, 400, "expected an empty request payload"),
    (NotEnabledForAccount, 10039, 503, "JetStream not enabled for account"),
    (ClusterPeerNotMember, 10040, 400, "peer not a member"),
    (RaftGeneral, 10041, 500, "{err}"),
    (RestoreSubscribeFailed, 10042, 500, "JetStream unable to subscribe to restore snapshot {subject}: {err}"),
    (SequenceNotFound, 10043, 400, "sequence {seq} not found"),
    (ClusterServerNotMember, 10044, 400, "server is not a member of the cluster"),
    (SourceConsumerSetupFailed, 10045, 500, "{err}"),
    (SourceMaxMessageSizeTooBig, 10046, 400, "stream source must have max message size >= target"),
    (StorageResourcesExceeded, 10047, 500, "insufficient storage resources available"),
    (StreamAssignment, 10048, 500, "{err}"),
    (StreamCreate, 10049, 500, "{err}"),
    (StreamDelete, 10050, 500, "{err}"),
    (StreamGeneralError, 10051, 500, "{err}"),
    (StreamInvalidConfig, 10052, 500, "{err}"),
    (StreamLimits, 10053, 500, "{err}"),
    (StreamMessageExceedsMaximum, 10054, 400, "message size exceeds maximum allowed"),
    (StreamMirrorNotUpdatable, 10055, 400, "stream mirror configuration can not be updated"),
    (StreamMismatch, 10056, 400, "stream name in subject does not match request"),
    (StreamMsgDeleteFailed, 10057, 500, "{err}"),
    (StreamNameExist, 10058, 400, "stream name already in use with a different configuration"),
    (StreamNotFound, 10059, 404, "stream not found"),
    (StreamNotMatch, 10060, 400, "expected stream does not match"),
    (StreamReplicasNotUpdatable, 10061, 400, "Replicas configuration can not be updated"),
    (StreamRestore, 10062, 500, "restore failed: {err}"),
    (StreamSequenceNotMatch, 10063, 503, "expected stream sequence does not match"),
    (StreamSnapshot, 10064, 500, "snapshot failed: {err}"),
    (StreamSubjectOverlap, 10065, 400, "subjects overlap with an existing stream"),
    (StreamTemplateCreate, 10066, 500, "{err}"),
    (StreamTemplateDelete, 10067, 500, "{err}"),
    (StreamTemplateNotFound, 10068, 404, "template not found"),
    (StreamUpdate, 10069, 500, "{err}"),
    (StreamWrongLastMsgID, 10070, 400, "wrong last msg ID: {id}"),
    (StreamWrongLastSequence, 10071, 400, "wrong last sequence: {seq}"),
    (TempStorageFailed, 10072, 500, "JetStream unable to open temp storage for restore"),
    (TemplateNameNotMatchSubject, 10073, 400, "template name in subject does not match request"),
    (StreamReplicasNotSupported, 10074, 500, "replicas > 1 not supported in non-clustered mode"),
    (PeerRemap, 10075, 503, "peer remap failed"),
    (NotEnabled, 10076, 503, "JetStream not enabled"),
    (StreamStoreFailed, 10077, 503, "{err}"),
    (ConsumerConfigRequired, 10078, 400, "consumer config required"),
    (ConsumerDeliverToWildcards, 10079, 400, "consumer deliver subject has wildcards"),
    (ConsumerPushMaxWaiting, 10080, 400, "consumer in push mode can not set max waiting"),
    (ConsumerDeliverCycle, 10081, 400, "consumer deliver subject forms a cycle"),
    (ConsumerMaxPendingAckPolicyRequired, 10082, 400, "consumer requires ack policy for max ack pending"),
    (ConsumerSmallHeartbeat, 10083, 400, "consumer idle heartbeat needs to be >= 100ms"),
    (ConsumerPullRequiresAck, 10084, 400, "consumer in pull mode requires explicit ack policy on workqueue stream"),
    (ConsumerPullNotDurable, 10085, 400, "consumer in pull mode requires a durable name"),
    (ConsumerPullWithRateLimit, 10086, 400, "consumer in pull mode can not have rate limit set"),
    (ConsumerMaxWaitingNegative, 10087, 400, "consumer max waiting needs to be positive"),
    (ConsumerHBRequiresPush, 10088, 400, "consumer idle heartbeat requires a push based consumer"),
    (ConsumerFCRequiresPush, 10089, 400, "consumer flow control requires a push based consumer"),
    (ConsumerDirectRequiresPush, 10090, 400, "consumer direct requires a push based consumer"),
    (ConsumerDirectRequiresEphemeral, 10091, 400, "consumer direct requires an ephemeral consumer"),
    (ConsumerOnMapped, 10092, 400, "consumer direct on a mapped consumer"),
    (ConsumerFilterNotSubset, 10093, 400, "consumer filter subject is not a valid subset of the interest subjects"),
    (ConsumerInvalidPolicy, 10094, 400, "{err}"),
    (ConsumerInvalidSampling, 10095, 400, "failed to parse consumer sampling configuration: {err}"),
    (StreamInvalid, 10096, 500, "stream not valid"),
    (StreamHeaderExceedsMaximum, 10097, 400, "header size exceeds maximum allowed of 64k"),
    (ConsumerWQRequiresExplicitAck, 10098, 400, "workqueue stream requires explicit ack"),
    (ConsumerWQMultipleUnfiltered, 10099, 400, "multiple non-filtered consumers not allowed on workqueue stream"),
    (ConsumerWQConsumerNotUnique, 10100, 400, "filtered consumer not unique on workqueue stream"),
    (ConsumerWQConsumerNotDeliverAll, 10101, 400, "consumer must be deliver all on workqueue stream"),
    (ConsumerNameTooLong, 10102, 400, "consumer name is too long, maximum allowed is {max}"),
    (ConsumerBadDurableName, 10103, 400, "durable name can not contain '.', '*', '>'"),
    (ConsumerStoreFailed, 10104, 500, "error creating store for consumer: {err}"),
    (ConsumerExistingActive, 10105, 400, "consumer already exists and is still active"),
    (ConsumerReplacementWithDifferentName, 10106, 400, "consumer replacement durable config not the same"),
    (ConsumerDescriptionTooLong, 10107, 400, "consumer description is too long, maximum allowed is {max}"),
    (ConsumerWithFlowControlNeedsHeartbeats, 10108, 400, "consumer with flow control also needs heartbeats"),
    (StreamSealed, 10109, 400, "invalid operation on sealed stream"),
    (StreamPurgeFailed, 10110, 500, "{err}"),
    (StreamRollupFailed, 10111, 500, "{err}"),
    (ConsumerInvalidDeliverSubject, 10112, 400, "invalid push consumer deliver subject"),
    (StreamMaxBytesRequired, 10113, 400, "account requires a stream config to have max bytes set"),
    (ConsumerMaxRequestBatchNegative, 10114, 400, "consumer max request batch needs to be > 0"),
    (ConsumerMaxRequestExpiresTooSmall, 10115, 400, "consumer max request expires needs to be >= 1ms"),
    (ConsumerMaxDeliverBackoff, 10116, 400, "max deliver is required to be > length of backoff values"),
    (StreamInfoMaxSubjects, 10117, 500, "subject details would exceed maximum allowed"),
    (StreamOffline, 10118, 500, "stream is offline"),
    (ConsumerOffline, 10119, 500, "consumer is offline"),
    (NoLimits, 10120, 400, "no JetStream default or applicable tiered limit present"),
    (ConsumerMaxPendingAckExcess, 10121, 400, "consumer max ack pending exceeds system limit of {limit}"),
    (StreamMaxStreamBytesExceeded, 10122, 400, "stream max bytes exceeds account limit max stream bytes"),
    (StreamMoveAndScale, 10123, 400, "can not move and scale a stream in a single update"),
    (StreamMoveInProgress, 10124, 400, "stream move already in progress"),
    (ConsumerMaxRequestBatchExceeded, 10125, 400, "consumer max request batch exceeds server limit of {limit}"),
    (ConsumerReplicasExceedsStream, 10126, 400, "consumer config replica count exceeds parent stream"),
    (ConsumerNameContainsPathSeparators, 10127, 400, "Consumer name can not contain path separators"),
    (StreamNameContainsPathSeparators, 10128, 400, "Stream name can not contain path separators"),
    (StreamReconfigureNotInProgress, 10129, 400, "stream reconfiguration not in progress"),
    (StreamNameExistRestoreFailed, 10130, 400, "stream name already in use, cannot restore"),
    (ConsumerCreateFilterSubjectMismatch, 10131, 400, "Consumer create request did not match filtered subject from create subject"),
    (ConsumerCreateDurableAndNameMismatch, 10132, 400, "Consumer Durable and Name have to be equal if both are provided"),
    (ReplicasCountCannotBeNegative, 10133, 400, "replicas count cannot be negative"),
    (ConsumerReplicasShouldMatchStream, 10134, 400, "consumer config replicas must match interest retention stream's replicas"),
    (ConsumerMetadataLength, 10135, 400, "consumer metadata exceeds maximum size of {limit}"),
    (ConsumerDuplicateFilterSubjects, 10136, 400, "consumer cannot have both FilterSubject and FilterSubjects specified"),
    (ConsumerMultipleFiltersNotAllowed, 10137, 400, "consumer with multiple subject filters cannot use subject based API"),
    (ConsumerOverlappingSubjectFilters, 10138, 400, "consumer subject filters cannot overlap"),
    (ConsumerEmptyFilter, 10139, 400, "consumer filter in FilterSubjects cannot be empty"),
    (SourceDuplicateDetected, 10140, 400, "duplicate source configuration detected"),
    (SourceInvalidStreamName, 10141, 400, "sourced stream name is invalid"),
    (MirrorInvalidStreamName, 10142, 400, "mirrored stream name is invalid"),
    (MirrorWithFirstSeq, 10143, 400, "stream mirrors can not have first sequence configured"),
    (SourceMultipleFiltersNotAllowed, 10144, 400, "source with multiple subject transforms cannot also have a single subject filter"),
    (SourceInvalidSubjectFilter, 10145, 400, "source transform source: {err}"),
    (SourceInvalidTransformDestination, 10146, 400, "source transform: {err}"),
    (SourceOverlappingSubjectFilters, 10147, 400, "source filters can not overlap"),
    (ConsumerAlreadyExists, 10148, 400, "consumer already exists"),
    (ConsumerDoesNotExist, 10149, 400, "consumer does not exist"),
    (MirrorMultipleFiltersNotAllowed, 10150, 400, "mirror with multiple subject transforms cannot also have a single subject filter"),
    (MirrorInvalidSubjectFilter, 10151, 400, "mirror transform source: {err}"),
    (MirrorOverlappingSubjectFilters, 10152, 400, "mirror subject filters can not overlap"),
    (ConsumerInactiveThresholdExcess, 10153, 400, "consumer inactive threshold exceeds system limit of {limit}"),
    (MirrorInvalidTransformDestination, 10154, 400, "mirror transform: {err}"),
    (StreamTransformInvalidSource, 10155, 400, "stream transform source: {err}"),
    (StreamTransformInvalidDestination, 10156, 400, "stream transform: {err}"),
    (Pedantic, 10157, 400, "pedantic mode: {err}"),
    (StreamDuplicateMessageConflict, 10158, 409, "duplicate message id is in process"),
    (ConsumerPriorityPolicyWithoutGroup, 10159, 400, "Setting PriorityPolicy requires at least one PriorityGroup to be set"),
    (ConsumerInvalidPriorityGroup, 10160, 400, "Provided priority group does not exist for this consumer"),
    (ConsumerEmptyGroupName, 10161, 400, "Group name cannot be an empty string"),
    (ConsumerInvalidGroupName, 10162, 400, "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters"),
    (StreamExpectedLastSeqPerSubjectNotReady, 10163, 503, "expected last sequence per subject temporarily unavailable"),
    (StreamWrongLastSequenceConstant, 10164, 400, "wrong last sequence"),
    (MessageTTLInvalid, 10165, 400, "invalid per-message TTL"),
    (MessageTTLDisabled, 10166, 400, "per-message TTL is disabled"),
    (StreamTooManyRequests, 10167, 429, "too many requests"),
    (MessageIncrDisabled, 10168, 400, "message counters is disabled"),
    (MessageIncrMissing, 10169, 400, "message counter increment is missing"),
    (MessageIncrPayload, 10170, 400, "message counter has payload"),
    (MessageIncrInvalid, 10171, 400, "message counter increment is invalid"),
    (MessageCounterBroken, 10172, 400, "message counter is broken"),
    (MirrorWithCounters, 10173, 400, "stream mirrors can not also calculate counters"),
    (AtomicPublishDisabled, 10174, 400, "atomic publish is disabled"),
    (AtomicPublishMissingSeq, 10175, 400, "atomic publish sequence is missing"),
    (AtomicPublishIncompleteBatch, 10176, 400, "atomic publish batch is incomplete"),
    (AtomicPublishUnsupportedHeaderBatch, 10177, 400, "atomic publish unsupported header used: {header}"),
    (ConsumerPushWithPriorityGroup, 10178, 400, "priority groups can not be used with push consumers"),
    (AtomicPublishInvalidBatchID, 10179, 400, "atomic publish batch ID is invalid"),
    (StreamMinLastSeq, 10180, 412, "min last sequence"),
    (ConsumerAckPolicyInvalid, 10181, 400, "consumer ack policy invalid"),
    (ConsumerReplayPolicyInvalid, 10182, 400, "consumer replay policy invalid"),
    (ConsumerAckWaitNegative, 10183, 400, "consumer ack wait needs to be positive"),
    (ConsumerBackOffNegative, 10184, 400, "consumer backoff needs to be positive"),
    (RequiredApiLevel, 10185, 412, "JetStream minimum api level required"),
    (MirrorWithMsgSchedules, 10186, 400, "stream mirrors can not also schedule messages"),
    (SourceWithMsgSchedules, 10187, 400, "stream source can not also schedule messages"),
    (MessageSchedulesDisabled, 10188, 400, "message schedules is disabled"),
    (MessageSchedulesPatternInvalid, 10189, 400, "message schedules pattern is invalid"),
    (MessageSchedulesTargetInvalid, 10190, 400, "message schedules target is invalid"),
    (MessageSchedulesTTLInvalid, 10191, 400, "message schedules invalid per-message TTL"),
    (MessageSchedulesRollupInvalid, 10192, 400, "message schedules invalid rollup"),
    (StreamExpectedLastSeqPerSubjectInvalid, 10193, 400, "missing sequence for expected last sequence per subject"),
    (StreamOfflineReason, 10194, 500, "stream is offline: {err}"),
    (ConsumerOfflineReason, 10195, 500, "consumer is offline: {err}"),
    (ConsumerPriorityGroupWithPolicyNone, 10196, 400, "consumer can not have priority groups when policy is none"),
    (ConsumerPinnedTTLWithoutPriorityPolicyNone, 10197, 400, "PinnedTTL cannot be set when PriorityPolicy is none"),
    (MirrorWithAtomicPublish, 10198, 400, "stream mirrors can not also use atomic publishing"),
    (AtomicPublishTooLargeBatch, 10199, 400, "atomic publish batch is too large: {size}"),
    (AtomicPublishInvalidBatchCommit, 10200, 400, "atomic publish batch commit is invalid"),
    (AtomicPublishContainsDuplicateMessage, 10201, 400, "atomic publish batch contains duplicate message id"),
    (ClusterServerMemberChangeInflight, 10202, 400, "cluster member change is in progress"),
    (MessageSchedulesSourceInvalid, 10203, 400, "message schedules source is invalid"),
    (ConsumerInvalidReset, 10204, 400, "invalid reset: {err}"),
    (BatchPublishDisabled, 10205, 400, "batch publish is disabled"),
    (BatchPublishInvalidPattern, 10206, 400, "batch publish pattern is invalid"),
    (BatchPublishInvalidBatchID, 10207, 400, "batch publish ID is invalid"),
    (BatchPublishUnknownBatchID, 10208, 400, "batch publish ID unknown"),
    (MirrorWithBatchPublish, 10209, 400, "stream mirrors can not also use batch publishing"),
    (AtomicPublishTooManyInflight, 10210, 429, "atomic publish too many inflight"),
    (BatchPublishTooManyInflight, 10211, 429, "batch publish too many inflight"),
    (MessageSchedulesSchedulerInvalid, 10212, 400, "message schedules invalid scheduler"),
    (MirrorDurableConsumerCfgInvalid, 10213, 400, "stream mirror consumer config is invalid"),
    (MirrorConsumerRequiresAckFC, 10214, 400, "stream mirror consumer requires flow control ack policy"),
    (SourceDurableConsumerCfgInvalid, 10215, 400, "stream source consumer config is invalid"),
    (SourceDurableConsumerDuplicateDetected, 10216, 400, "duplicate stream source consumer detected"),
    (SourceConsumerRequiresAckFC, 10217, 400, "stream source consumer requires flow control ack policy"),
    (ConsumerAckFCRequiresPush, 10218, 400, "flow control ack policy requires a push based consumer"),
    (ConsumerAckFCRequiresFC, 10219, 400, "flow control ack policy requires flow control"),
    (ConsumerAckFCRequiresMaxAckPending, 10220, 400, "flow control ack policy requires max ack pending"),
    (ConsumerAckFCRequiresNoAckWait, 10221, 400, "flow control ack policy requires unset ack wait"),
    (ConsumerAckFCRequiresNoMaxDeliver, 10222, 400, "flow control ack policy requires unset max deliver"),
    (MessageSchedulesTimeZoneInvalid, 10223, 400, "message schedules time zone is invalid"),
    (ClusterRescue, 10224, 400, "JetStream system rescue not applied: {err}"),
    (ConsumerStreamIdentityMismatch, 10225, 400, "consumer's stream identity does not match: {msg}"),
    (StreamReconfigureInProgress, 10226, 400, "stream reconfiguration already in progress"),
    (MessageSourceHdrNotAllowed, 10227, 400, "message stream source header is not allowed"),
}

impl ErrorKind {
    /// The kind with this `err_code`, if any.
    pub fn from_err_code(err_code: u16) -> Option<Self> {
        Self::ALL
            .binary_search_by_key(&err_code, |k| k.err_code())
            .ok()
            .map(|i| Self::ALL[i])
    }
}

/// A JetStream API error as it appears on the wire: `"error":{"code":..,"err_code":..,
/// "description":".."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{description} ({code}/{err_code})")]
pub struct ApiError {
    /// HTTP-like status; clients branch on 404 (not found) and 503 (unavailable).
    pub code: u16,
    /// The stable NATS error number clients match on.
    pub err_code: u16,
    /// Human-readable text; clients only display it.
    pub description: String,
}

impl ApiError {
    /// The error of `kind` with its template as the description (no substitution).
    pub fn new(kind: ErrorKind) -> Self {
        Self {
            code: kind.code(),
            err_code: kind.err_code(),
            description: kind.template().to_string(),
        }
    }

    /// The error of `kind` with each `{name}` placeholder replaced by its value.
    pub fn with(kind: ErrorKind, args: &[(&str, &str)]) -> Self {
        let mut description = kind.template().to_string();
        for (name, value) in args {
            description = description.replace(&format!("{{{name}}}"), value);
        }
        Self {
            code: kind.code(),
            err_code: kind.err_code(),
            description,
        }
    }

    /// The error of `kind` with `{err}` replaced by `err` (the common "F" form).
    pub fn with_err(kind: ErrorKind, err: &str) -> Self {
        Self::with(kind, &[("err", err)])
    }

    /// The kind this error was built from, if its `err_code` is known.
    pub fn kind(&self) -> Option<ErrorKind> {
        ErrorKind::from_err_code(self.err_code)
    }

    /// `400/10003 bad request`.
    pub fn bad_request() -> Self {
        Self::new(ErrorKind::BadRequest)
    }

    /// `400/10025 invalid JSON: {err}`.
    pub fn invalid_json(err: &str) -> Self {
        Self::with_err(ErrorKind::InvalidJSON, err)
    }

    /// `404/10059 stream not found`.
    pub fn stream_not_found() -> Self {
        Self::new(ErrorKind::StreamNotFound)
    }

    /// `500/10052 {err}`: an invalid stream configuration.
    pub fn invalid_config(err: &str) -> Self {
        Self::with_err(ErrorKind::StreamInvalidConfig, err)
    }

    /// `404/10037 no message found`.
    pub fn no_message_found() -> Self {
        Self::new(ErrorKind::NoMessageFound)
    }

    /// `400/10071 wrong last sequence: {seq}`.
    pub fn wrong_last_sequence(seq: u64) -> Self {
        Self::with(
            ErrorKind::StreamWrongLastSequence,
            &[("seq", &seq.to_string())],
        )
    }

    /// `400/10070 wrong last msg ID: {id}`.
    pub fn wrong_last_msg_id(id: &str) -> Self {
        Self::with(ErrorKind::StreamWrongLastMsgID, &[("id", id)])
    }

    /// `400/10043 sequence {seq} not found`.
    pub fn sequence_not_found(seq: u64) -> Self {
        Self::with(ErrorKind::SequenceNotFound, &[("seq", &seq.to_string())])
    }

    /// `503/10077 {err}`: the store refused the message (limits with discard new).
    pub fn store_failed(err: &str) -> Self {
        Self::with_err(ErrorKind::StreamStoreFailed, err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_all_226_entries_sorted_and_unique() {
        assert_eq!(ErrorKind::ALL.len(), 226);
        for pair in ErrorKind::ALL.windows(2) {
            assert!(pair[0].err_code() < pair[1].err_code(), "{pair:?}");
        }
        assert_eq!(ErrorKind::ALL[0].err_code(), 10002);
        assert_eq!(ErrorKind::ALL[225].err_code(), 10227);
    }

    #[test]
    fn every_kind_serialises_as_nats_server_does() {
        for &kind in ErrorKind::ALL {
            let e = ApiError::new(kind);
            let json = serde_json::to_string(&e).unwrap();
            let want = format!(
                "{{\"code\":{},\"err_code\":{},\"description\":{}}}",
                kind.code(),
                kind.err_code(),
                serde_json::to_string(kind.template()).unwrap()
            );
            assert_eq!(json, want);
            assert_eq!(e.kind(), Some(kind));
            assert!(
                [400, 404, 409, 412, 429, 500, 503].contains(&e.code),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn placeholders_are_substituted() {
        assert_eq!(
            ApiError::wrong_last_sequence(3).description,
            "wrong last sequence: 3"
        );
        assert_eq!(
            ApiError::wrong_last_msg_id("").description,
            "wrong last msg ID: "
        );
        assert_eq!(
            ApiError::with(
                ErrorKind::StreamExternalApiOverlap,
                &[("prefix", "$JS.X"), ("subject", "a.>")]
            )
            .description,
            "stream external api prefix $JS.X must not overlap with a.>"
        );
        let e = ApiError::invalid_config("maximum replicas is 5");
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"code":500,"err_code":10052,"description":"maximum replicas is 5"}"#
        );
    }

    #[test]
    fn well_known_codes_match_the_spec() {
        let cases = [
            (ApiError::stream_not_found(), 404, 10059, "stream not found"),
            (ApiError::no_message_found(), 404, 10037, "no message found"),
            (ApiError::bad_request(), 400, 10003, "bad request"),
            (
                ApiError::sequence_not_found(7),
                400,
                10043,
                "sequence 7 not found",
            ),
            (
                ApiError::store_failed("maximum messages exceeded"),
                503,
                10077,
                "maximum messages exceeded",
            ),
            (
                ApiError::invalid_json("unexpected EOF"),
                400,
                10025,
                "invalid JSON: unexpected EOF",
            ),
            (
                ApiError::new(ErrorKind::ConsumerNotFound),
                404,
                10014,
                "consumer not found",
            ),
            (
                ApiError::new(ErrorKind::StreamNameExist),
                400,
                10058,
                "stream name already in use with a different configuration",
            ),
        ];
        for (e, code, err_code, desc) in cases {
            assert_eq!(
                (e.code, e.err_code, e.description.as_str()),
                (code, err_code, desc)
            );
        }
    }
}
