//! Account info and the cluster operations the meta leader answers: placement sizes, meta
//! proposals, META.LEADER.STEPDOWN (see `stepdown`).

use std::time::Duration;

use jetraft_proto::meta::{MetaCommand, MetaResult, meta_command};
use jetraft_raft::GroupId;
use prost::Message;

use super::raft_api_error;
use crate::jetstream::api::ApiError;
use crate::jetstream::api::types::AccountInfo;
use crate::jetstream::runtime::JetStream;

impl JetStream {
    /// `$JS.API.INFO` in `account`: its streams and, from the replicas on this node (the meta
    /// leader answers), its consumers and storage use; its limits; its API counters over the
    /// cluster.
    pub(crate) async fn account_info(&self, account: &str) -> String {
        let usage = self.account_usage(account);
        let mut info = AccountInfo {
            streams: self.meta.read(|m| {
                m.streams()
                    .filter(|s| crate::jetstream::account::in_account(&s.name, account))
                    .count() as u64
            }),
            consumers: usage.consumers,
            memory: usage.memory,
            storage: usage.storage,
            domain: self.identity.domain.clone(),
            ..AccountInfo::default()
        };
        (info.reserved_memory, info.reserved_storage) =
            crate::jetstream::runtime::account_limits::reserved(self, account);
        if let Some(limits) = self.accounts.limits(account) {
            info.limits.max_memory = limits.max_memory;
            info.limits.max_storage = limits.max_storage;
            info.limits.max_streams = limits.max_streams;
            info.limits.max_consumers = limits.max_consumers;
            info.limits.max_ack_pending = limits.max_ack_pending;
            info.limits.memory_max_stream_bytes = limits.memory_max_stream_bytes;
            info.limits.storage_max_stream_bytes = limits.storage_max_stream_bytes;
            info.limits.max_bytes_required = limits.max_bytes_required;
        }
        let api = self.cluster_api_counts(account).await;
        info.api.total = api.total;
        info.api.errors = api.errors;
        // Clients gate features on it (async-nats refuses KV limit markers below level 1).
        info.api.level = self.identity.api_level;
        crate::jetstream::api::types::to_go_json(&info)
    }

    /// The meta group's voters: the nodes streams can be placed on.
    pub(crate) fn voters(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .registry
            .raft(GroupId::META)
            .map(|r| r.voter_ids().collect())
            .unwrap_or_default();
        if v.is_empty() {
            v.push(self.node.0);
        }
        v
    }

    pub(crate) fn cluster_size(&self) -> usize {
        self.voters().len()
    }

    /// The number of placement candidates for `replicas`; while the cluster is still forming
    /// (fewer voters than asked for) waits a moment for joining nodes.
    pub(crate) async fn placement_size(&self, replicas: i64) -> usize {
        let want = usize::try_from(replicas).unwrap_or(1);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        loop {
            let n = self.cluster_size();
            if n >= want || !self.clustered() || tokio::time::Instant::now() >= deadline {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) async fn propose_meta(&self, op: meta_command::Op) -> Result<MetaResult, ApiError> {
        let cmd = MetaCommand { op: Some(op) };
        let bytes = self
            .registry
            .propose(GroupId::META, cmd.encode_to_vec().into())
            .await
            .map_err(raft_api_error)?;
        MetaResult::decode(bytes.as_ref()).map_err(|e| ApiError::store_failed(&e.to_string()))
    }

    pub(crate) async fn meta_stepdown(&self, body: &[u8]) -> Result<String, ApiError> {
        self.step_down(GroupId::META, body).await?;
        Ok("{\"type\":\"io.nats.jetstream.api.v1.meta_leader_stepdown_response\",\"success\":true}"
            .to_string())
    }
}
