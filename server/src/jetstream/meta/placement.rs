//! Which nodes a stream may live on, and how its replica set changes.
//!
//! - [`fitting`]: the candidates that satisfy a stream's `placement { cluster, tags }` (every
//!   tag must be among the node's `server_tags`; a tag `!t` excludes nodes tagged `t`; the
//!   cluster must be this cluster's name), and, when too few fit, nats-server's error
//!   (`no suitable peers for placement, tags not matched ['t']`, 400/10005).
//! - [`rescale`]: the replica list after a change of `num_replicas`: growing keeps every replica
//!   and adds the given new nodes; shrinking keeps the leader and drops followers.
//!
//! Pure functions of the meta state's peer records: the meta leader decides, the meta group
//! records the result.

use std::collections::{BTreeMap, BTreeSet};

use jetraft_proto::meta::Peer;

use crate::jetstream::api::types::Placement;
use crate::jetstream::api::{ApiError, ErrorKind};

/// The candidates that fit a placement, and why the others did not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fit {
    /// Fitting candidates, in the order given.
    pub nodes: Vec<u64>,
    /// Required tags some candidate of the cluster lacked.
    missing: BTreeSet<String>,
    /// Excluded tags some candidate of the cluster had.
    excluded: BTreeSet<String>,
}

impl Fit {
    /// nats-server's answer when too few nodes fit (`selectPeerError`): 400/10005 with the
    /// reasons appended.
    pub fn error(&self) -> ApiError {
        let mut text = String::from("no suitable peers for placement");
        let list = |tags: &BTreeSet<String>| {
            let quoted: Vec<String> = tags.iter().map(|t| format!("'{t}'")).collect();
            quoted.join(", ")
        };
        if !self.missing.is_empty() {
            text.push_str(&format!(", tags not matched [{}]", list(&self.missing)));
        }
        if !self.excluded.is_empty() {
            text.push_str(&format!(", tags excluded [{}]", list(&self.excluded)));
        }
        ApiError::with_err(ErrorKind::ClusterNoPeers, &text)
    }
}

/// Whether `tags` (a node's, lower-cased) has `tag`, compared as nats-server's tag lists do
/// (lower-cased, trimmed).
pub fn has_tag(tags: &[String], tag: &str) -> bool {
    let tag = tag.trim().to_lowercase();
    tags.contains(&tag)
}

/// The `candidates` that satisfy `placement` in the cluster named `cluster`; a candidate
/// without a peer record has no tags.
pub fn fitting(
    peers: &BTreeMap<u64, Peer>,
    candidates: &[u64],
    cluster: &str,
    placement: Option<&Placement>,
) -> Fit {
    let mut fit = Fit::default();
    let Some(p) = placement else {
        fit.nodes = candidates.to_vec();
        return fit;
    };
    if !p.cluster.is_empty() && p.cluster != cluster {
        return fit;
    }
    let none = Vec::new();
    'node: for node in candidates {
        let tags = peers.get(node).map_or(&none, |peer| &peer.tags);
        for tag in &p.tags {
            match tag.strip_prefix('!') {
                Some(excluded) if has_tag(tags, excluded) => {
                    fit.excluded.insert(excluded.trim().to_lowercase());
                    continue 'node;
                }
                Some(_) => {}
                None if !has_tag(tags, tag) => {
                    fit.missing.insert(tag.trim().to_lowercase());
                    continue 'node;
                }
                None => {}
            }
        }
        fit.nodes.push(*node);
    }
    fit
}

/// The replica list for `want` replicas from `current`: growing appends `added` (as many as
/// needed, in order); shrinking keeps `leader` (when it is a replica) and the earliest other
/// replicas, so only followers leave. `None` when growing lacks nodes.
pub fn rescale(
    current: &[u64],
    leader: Option<u64>,
    want: usize,
    added: &[u64],
) -> Option<Vec<u64>> {
    if want >= current.len() {
        let fresh: Vec<u64> = added
            .iter()
            .copied()
            .filter(|n| !current.contains(n))
            .take(want - current.len())
            .collect();
        if current.len() + fresh.len() < want {
            return None;
        }
        return Some(current.iter().copied().chain(fresh).collect());
    }
    let leader = leader.filter(|l| current.contains(l));
    let mut kept: Vec<u64> = leader.into_iter().collect();
    kept.extend(
        current
            .iter()
            .copied()
            .filter(|r| Some(*r) != leader)
            .take(want.saturating_sub(kept.len())),
    );
    kept.truncate(want.max(1));
    Some(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers() -> BTreeMap<u64, Peer> {
        let tagged = |id: u64, tags: &[&str]| Peer {
            node_id: id,
            server_name: format!("n{id}"),
            cluster_addr: String::new(),
            client_url: String::new(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
        };
        [
            tagged(1, &["ssd", "az:1"]),
            tagged(2, &["ssd", "az:2"]),
            tagged(3, &["hdd", "az:3"]),
        ]
        .into_iter()
        .map(|p| (p.node_id, p))
        .collect()
    }

    fn placement(cluster: &str, tags: &[&str]) -> Placement {
        Placement {
            cluster: cluster.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            preferred: String::new(),
        }
    }

    #[test]
    fn every_tag_must_match_case_insensitively() {
        let fit = fitting(&peers(), &[1, 2, 3], "c", Some(&placement("", &["SSD"])));
        assert_eq!(fit.nodes, [1, 2]);
        let fit = fitting(
            &peers(),
            &[1, 2, 3],
            "c",
            Some(&placement("c", &["ssd", "az:2"])),
        );
        assert_eq!(fit.nodes, [2]);
        assert_eq!(
            fit.error().description,
            "no suitable peers for placement, tags not matched ['az:2', 'ssd']"
        );
    }

    #[test]
    fn an_excluded_tag_and_another_cluster_leave_nodes_out() {
        let fit = fitting(&peers(), &[1, 2, 3], "c", Some(&placement("", &["!hdd"])));
        assert_eq!(fit.nodes, [1, 2]);
        assert_eq!(
            fit.error().description,
            "no suitable peers for placement, tags excluded ['hdd']"
        );
        let fit = fitting(&peers(), &[1, 2, 3], "c", Some(&placement("other", &[])));
        assert!(fit.nodes.is_empty());
        assert_eq!(fit.error().description, "no suitable peers for placement");
        assert_eq!(fit.error().err_code, 10005);
        assert_eq!(fitting(&peers(), &[3, 1], "c", None).nodes, [3, 1]);
    }

    #[test]
    fn growing_adds_and_shrinking_keeps_the_leader() {
        assert_eq!(rescale(&[4], Some(4), 3, &[5, 6, 7]), Some(vec![4, 5, 6]));
        assert_eq!(rescale(&[4], Some(4), 3, &[5]), None);
        assert_eq!(rescale(&[4, 5, 6], Some(6), 1, &[]), Some(vec![6]));
        assert_eq!(rescale(&[4, 5, 6], Some(5), 2, &[]), Some(vec![5, 4]));
        assert_eq!(rescale(&[4, 5, 6], None, 1, &[]), Some(vec![4]));
        assert_eq!(rescale(&[4, 5], Some(4), 2, &[]), Some(vec![4, 5]));
    }
}
