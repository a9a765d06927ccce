//! Applying purge, message delete and config update commands (expiry is in `ttl`).

use jetraft_proto::stream::{DeleteMsg, Purge, UpdateConfig};
use jetraft_raft::{LogIndex, StateMachineError};
use jetraft_storage::StorageError;
use jetraft_storage::stream::limits;

use super::{StreamStateMachine, info, limits_for};
use crate::jetstream::api::types::responses::{
    msg_delete_error_json, msg_delete_json, purge_error_json, purge_json,
};
use crate::jetstream::api::types::{PurgeRequest, StreamConfig, requests};
use crate::jetstream::api::{ApiError, ErrorKind};

impl StreamStateMachine {
    /// `$JS.API.STREAM.PURGE`: sealed → 10109, `deny_purge` → 10110, `seq`+`keep` → 10003.
    pub(super) fn apply_purge(&mut self, p: &Purge) -> Result<String, StorageError> {
        if self.config.sealed {
            return Ok(purge_error_json(ApiError::new(ErrorKind::StreamSealed)));
        }
        if self.config.deny_purge {
            return Ok(purge_error_json(ApiError::with_err(
                ErrorKind::StreamPurgeFailed,
                "stream purge not permitted",
            )));
        }
        let req = PurgeRequest {
            filter: p.filter.clone(),
            seq: p.seq,
            keep: p.keep,
        };
        let store_req = match req.to_store() {
            Ok(r) => r,
            Err(e) => return Ok(purge_error_json(e)),
        };
        let purged = self.store.purge(&store_req)?;
        Ok(purge_json(purged))
    }

    /// `$JS.API.STREAM.MSG.DELETE`: sealed → 10109, `deny_delete` → 10057 `message delete not
    /// permitted`, a sequence above the last one → 10057 `stream store EOF`, a missing one (or
    /// 0) → 10057 `no message found` (all observed; the spec's 10043 never appeared).
    pub(super) fn apply_delete(&mut self, d: &DeleteMsg) -> Result<String, StorageError> {
        if self.config.sealed {
            return Ok(msg_delete_error_json(ApiError::new(
                ErrorKind::StreamSealed,
            )));
        }
        if self.config.deny_delete {
            return Ok(msg_delete_error_json(ApiError::with_err(
                ErrorKind::StreamMsgDeleteFailed,
                "message delete not permitted",
            )));
        }
        // nats-server's memory store reports a missing sequence as 10043 `sequence N not
        // found`; its file store as 10057 (`stream store EOF` above the last sequence, `no
        // message found` below).
        let memory = self.config.storage == crate::jetstream::api::types::StorageType::Memory;
        if memory && (d.seq > self.store.state().last_seq || !self.store.remove(d.seq)?) {
            return Ok(msg_delete_error_json(ApiError::sequence_not_found(d.seq)));
        }
        if memory {
            return Ok(msg_delete_json());
        }
        if d.seq > self.store.state().last_seq {
            return Ok(msg_delete_error_json(ApiError::with_err(
                ErrorKind::StreamMsgDeleteFailed,
                "stream store EOF",
            )));
        }
        if !self.store.remove(d.seq)? {
            return Ok(msg_delete_error_json(ApiError::with_err(
                ErrorKind::StreamMsgDeleteFailed,
                "no message found",
            )));
        }
        Ok(msg_delete_json())
    }

    /// Installs a validated config and enforces lowered limits at once; answers with the
    /// `stream_update_response` (its `ts` is the command's time).
    pub(super) fn apply_update(
        &mut self,
        index: LogIndex,
        u: &UpdateConfig,
    ) -> Result<String, StateMachineError> {
        let config: StreamConfig =
            requests::decode_stored(&u.config_json).map_err(|e| StateMachineError::Apply {
                index,
                reason: format!("undecodable config in update: {}", e.description),
            })?;
        let storage = |e: StorageError| StateMachineError::Apply {
            index,
            reason: e.to_string(),
        };
        self.config = config;
        self.limits = limits_for(&self.config);
        self.enforce_all().map_err(storage)?;
        self.advance_clock(u.timestamp_ns);
        self.save_meta().map_err(storage)?;
        Ok(info::update_response_json(self, u.timestamp_ns))
    }

    /// Removes messages over the (possibly lowered) limits: per subject, then count and bytes.
    fn enforce_all(&mut self) -> Result<u64, StorageError> {
        let mut removed = 0;
        if self.limits.max_msgs_per_subject.is_some() {
            let subjects = self.store.subject_counts(">")?;
            for subject in subjects.keys() {
                removed += limits::enforce(self.store.as_mut(), &self.limits, Some(subject))?;
            }
        }
        removed += limits::enforce(self.store.as_mut(), &self.limits, None)?;
        Ok(removed)
    }
}
