//! What this node's JetStream reports to the monitoring endpoints (`/jsz`, `/varz`): usage of the
//! streams hosted here, API counters, the meta group as this node sees it, and per-stream
//! details. Shapes follow nats-server's `/jsz` (spec/nats-protocol-and-jetstream.md §2.5): counts
//! and bytes are those of
//! the replicas on this node, so a cluster's sum counts each replica once.

use std::sync::atomic::Ordering;

use jetraft_raft::GroupId;
use serde_json::{Value, json};

use super::{JetStream, now_ns};
use crate::jetstream::api::types::{PeerInfo, StorageType, to_go_json};
use crate::jetstream::stream::info;

/// Usage and counters of this node's JetStream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JszStats {
    /// Bytes of memory streams hosted here.
    pub memory: u64,
    /// Bytes of file streams hosted here.
    pub storage: u64,
    /// Replicated assets here: the meta group (clustered), every replicated stream and each of
    /// its consumers (nats-server counts a consumer's own group; here it rides in its stream's).
    pub ha_assets: u64,
    /// API level.
    pub api_level: u32,
    /// API requests received here.
    pub api_total: u64,
    /// API requests answered with an error here.
    pub api_errors: u64,
    /// Streams hosted here.
    pub streams: u64,
    /// Consumers of the streams hosted here.
    pub consumers: u64,
    /// Messages in the streams hosted here.
    pub messages: u64,
    /// Bytes in the streams hosted here.
    pub bytes: u64,
}

/// Which details `/jsz` asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JszDetail {
    /// Each stream's config.
    pub config: bool,
    /// Each stream's consumers.
    pub consumers: bool,
}

/// One account's use of JetStream on this node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountUsage {
    /// Consumers of its streams.
    pub consumers: u64,
    /// Bytes in its memory streams.
    pub memory: u64,
    /// Bytes in its file streams.
    pub storage: u64,
}

impl JetStream {
    /// Usage and counters of the streams hosted on this node.
    pub fn jsz_stats(&self) -> JszStats {
        let mut st = JszStats {
            ha_assets: u64::from(self.clustered),
            api_level: self.identity.api_level,
            api_total: self.api_total.load(Ordering::Relaxed),
            api_errors: self.api_errors.load(Ordering::Relaxed),
            ..JszStats::default()
        };
        for ls in self.local.read().values() {
            let sm = ls.sm.lock();
            let state = sm.state();
            let consumers = sm.consumers().len() as u64;
            st.streams += 1;
            st.consumers += consumers;
            st.messages += state.msgs;
            st.bytes += state.bytes;
            match sm.config().storage {
                StorageType::File => st.storage += state.bytes,
                StorageType::Memory => st.memory += state.bytes,
            }
            if ls.replicas().len() > 1 {
                st.ha_assets += 1 + consumers;
            }
        }
        st
    }

    /// What `account`'s stream replicas on this node hold.
    pub fn account_usage(&self, account: &str) -> AccountUsage {
        let mut usage = AccountUsage::default();
        for ls in self.local.read().values() {
            if !crate::jetstream::account::in_account(&ls.name, account) {
                continue;
            }
            let sm = ls.sm.lock();
            usage.consumers += sm.consumers().len() as u64;
            let bytes = sm.state().bytes;
            match sm.config().storage {
                StorageType::File => usage.storage += bytes,
                StorageType::Memory => usage.memory += bytes,
            }
        }
        usage
    }

    /// Whether this node leads the meta group (always, single node).
    pub fn is_meta_leader(&self) -> bool {
        !self.clustered || self.meta_leader() == Some(self.node)
    }

    /// The `meta_cluster` section: the meta leader and the other meta voters as this node sees
    /// them (their progress only when it leads); `None` when not clustered.
    pub fn meta_cluster(&self) -> Option<Value> {
        if !self.clustered {
            return None;
        }
        let voters: Vec<u64> = self
            .registry
            .raft(GroupId::META)
            .ok()?
            .voter_ids()
            .collect();
        let leader = self.meta_leader();
        let ci = self.group_cluster_info(GroupId::META, &voters);
        let mut replicas: Vec<PeerInfo> = ci
            .as_ref()
            .map(|c| c.replicas.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p.name != self.info.server_name)
            .collect();
        if let (Some(c), Some(l)) = (&ci, leader)
            && l != self.node
        {
            // Seen from a follower: the leader is the one it hears from.
            replicas.push(PeerInfo {
                name: c.leader.clone(),
                current: true,
                ..PeerInfo::default()
            });
        }
        replicas.sort_by(|a, b| a.name.cmp(&b.name));
        let size = voters.len();
        Some(json!({
            "name": self.info.cluster_name.clone().unwrap_or_default(),
            "leader": ci.map(|c| c.leader).unwrap_or_default(),
            "replicas": replicas,
            "cluster_size": size,
            "quorum_needed": size / 2 + 1,
            "pending": 0,
        }))
    }

    /// `stream_detail` entries of the streams hosted here, by name.
    pub async fn stream_details(&self, detail: JszDetail, account: &str) -> Vec<Value> {
        let mut hosted: Vec<_> = (self.local.read().values())
            .filter(|ls| crate::jetstream::account::in_account(&ls.name, account))
            .cloned()
            .collect();
        hosted.sort_by(|a, b| a.name.cmp(&b.name));
        let mut out = Vec::with_capacity(hosted.len());
        for ls in hosted {
            let cluster = self.cluster_info(&ls);
            let (stream_info, names) = {
                let sm = ls.sm.lock();
                let names: Vec<String> = sm.consumers().keys().cloned().collect();
                (info::stream_info(&sm, now_ns(), cluster), names)
            };
            let full: Value = serde_json::from_str(&to_go_json(&stream_info)).unwrap_or_default();
            let mut entry = json!({
                "name": crate::jetstream::account::stream_name(&ls.name),
                "created": full["created"],
            });
            if !full["cluster"].is_null() {
                entry["cluster"] = full["cluster"].clone();
            }
            if detail.config {
                entry["config"] = full["config"].clone();
            }
            entry["state"] = full["state"].clone();
            if detail.consumers && !names.is_empty() {
                let mut consumers = Vec::with_capacity(names.len());
                for name in names {
                    if let Some(ci) = self.consumer_info(&ls, &name).await {
                        let mut v: Value =
                            serde_json::from_str(&to_go_json(&ci)).unwrap_or_default();
                        if !detail.config
                            && let Some(obj) = v.as_object_mut()
                        {
                            obj.remove("config");
                        }
                        consumers.push(v);
                    }
                }
                entry["consumer_detail"] = consumers.into();
            }
            out.push(entry);
        }
        out
    }
}
