//! [`MetaState`]: the cluster-wide registry the meta group replicates (peers and stream
//! placement), and its deterministic `apply`.
//!
//! Invariants:
//! - `apply` reads nothing but the state and the command; every replica reaches the same state
//!   and returns the same [`MetaResult`].
//! - Stream uids come from one counter that only grows, so a deleted-then-recreated stream never
//!   reuses a uid (its Raft group id and storage key prefix). Uid 0 is the meta group.
//! - Retired node ids are remembered and refused forever (ids are never reused after data loss).

use std::collections::{BTreeMap, BTreeSet};

use jetraft_proto::meta::{
    ApiErrorPb, MetaCommand, MetaResult, MetaSnapshot, Peer, StreamAssignment, meta_command,
    meta_result,
};

use crate::jetstream::api::validate::subjects_overlap;

/// First stream uid; 0 is the meta group.
const FIRST_UID: u64 = 1;

/// The replicated cluster metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct MetaState {
    /// Cluster members by node id.
    peers: BTreeMap<u64, Peer>,
    /// Streams by name.
    streams: BTreeMap<String, StreamAssignment>,
    /// Next uid to hand out.
    next_uid: u64,
    /// Node ids removed from the cluster.
    retired: BTreeSet<u64>,
    /// Node ids drained for maintenance (they lead no group).
    drained: BTreeSet<u64>,
}

impl Default for MetaState {
    fn default() -> Self {
        Self {
            peers: BTreeMap::new(),
            streams: BTreeMap::new(),
            next_uid: FIRST_UID,
            retired: BTreeSet::new(),
            drained: BTreeSet::new(),
        }
    }
}

/// Builds an API error answer.
pub fn api_error(code: u32, err_code: u32, description: &str) -> MetaResult {
    MetaResult {
        result: Some(meta_result::Result::Error(ApiErrorPb {
            code,
            err_code,
            description: description.to_string(),
        })),
    }
}

fn ok() -> MetaResult {
    MetaResult {
        result: Some(meta_result::Result::Ok(true)),
    }
}

fn stream_result(sa: &StreamAssignment) -> MetaResult {
    MetaResult {
        result: Some(meta_result::Result::Stream(sa.clone())),
    }
}

fn stream_not_found() -> MetaResult {
    api_error(404, 10059, "stream not found")
}

impl MetaState {
    /// Applies one command and returns its answer.
    pub fn apply(&mut self, cmd: MetaCommand) -> MetaResult {
        let Some(op) = cmd.op else {
            return api_error(400, 10003, "bad request");
        };
        match op {
            meta_command::Op::AddPeer(peer) => self.add_peer(peer),
            meta_command::Op::RemovePeer(id) => {
                self.peers.remove(&id);
                self.retired.insert(id);
                ok()
            }
            meta_command::Op::CreateStream(sa) => self.create_stream(sa),
            meta_command::Op::DeleteStream(name) => match self.streams.remove(&name) {
                Some(_) => ok(),
                None => stream_not_found(),
            },
            meta_command::Op::UpdateStream(sa) => self.update_stream(sa),
            meta_command::Op::Drain(d) => {
                if d.drained {
                    self.drained.insert(d.node_id);
                } else {
                    self.drained.remove(&d.node_id);
                }
                ok()
            }
        }
    }

    fn add_peer(&mut self, peer: Peer) -> MetaResult {
        if self.retired.contains(&peer.node_id) {
            return api_error(400, 10003, "node id was removed from the cluster");
        }
        self.peers.insert(peer.node_id, peer);
        ok()
    }

    fn create_stream(&mut self, mut sa: StreamAssignment) -> MetaResult {
        if let Some(existing) = self.streams.get(&sa.name) {
            if existing.config_json == sa.config_json {
                return stream_result(existing);
            }
            return api_error(
                400,
                10058,
                "stream name already in use with a different configuration",
            );
        }
        if self.overlaps(&sa.name, &sa.subjects) {
            return api_error(400, 10065, "subjects overlap with an existing stream");
        }
        sa.uid = self.next_uid;
        self.next_uid += 1;
        self.streams.insert(sa.name.clone(), sa.clone());
        stream_result(&sa)
    }

    fn update_stream(&mut self, sa: StreamAssignment) -> MetaResult {
        let Some(existing) = self.streams.get(&sa.name) else {
            return stream_not_found();
        };
        if existing.uid != sa.uid {
            return stream_not_found();
        }
        // Made from an older revision: another writer (a client's update, a replica move,
        // an evacuation) changed the assignment since; the writer reads it again and retries.
        if existing.revision != sa.revision {
            return api_error(503, 10008, "JetStream system temporarily unavailable");
        }
        if self.overlaps(&sa.name, &sa.subjects) {
            return api_error(400, 10065, "subjects overlap with an existing stream");
        }
        let updated = StreamAssignment {
            created_ns: existing.created_ns,
            revision: existing.revision + 1,
            ..sa
        };
        self.streams.insert(updated.name.clone(), updated.clone());
        stream_result(&updated)
    }

    /// Whether any of `subjects` overlaps a subject of a stream other than `name` in the same
    /// account (each account is a subject namespace of its own; see `jetstream::account`).
    pub fn overlaps(&self, name: &str, subjects: &[String]) -> bool {
        let account = crate::jetstream::account::stream_account(name);
        let others = self
            .streams
            .values()
            .filter(|s| s.name != name && crate::jetstream::account::in_account(&s.name, account));
        others.into_iter().any(|s| {
            s.subjects
                .iter()
                .any(|a| subjects.iter().any(|b| subjects_overlap(a, b)))
        })
    }

    /// The stream named `name`.
    pub fn stream(&self, name: &str) -> Option<&StreamAssignment> {
        self.streams.get(name)
    }

    /// All streams, sorted by name.
    pub fn streams(&self) -> impl Iterator<Item = &StreamAssignment> {
        self.streams.values()
    }

    /// The cluster's peers, by node id.
    pub fn peers(&self) -> &BTreeMap<u64, Peer> {
        &self.peers
    }

    /// Whether `node` is drained for maintenance.
    pub fn is_drained(&self, node: u64) -> bool {
        self.drained.contains(&node)
    }

    /// Whether `node` was removed from the cluster for good.
    pub fn is_retired(&self, node: u64) -> bool {
        self.retired.contains(&node)
    }

    /// Picks `replicas` nodes among `candidates` for a new stream: least loaded first (fewest
    /// assigned streams), then fewest streams it was placed first for, then node id. The first
    /// node initialises the group and so becomes its first leader: without the second key every
    /// stream spanning the whole cluster would start led by the same node. `None` when there
    /// are too few candidates.
    pub fn place(&self, replicas: usize, candidates: &[u64]) -> Option<Vec<u64>> {
        if replicas == 0 || candidates.len() < replicas {
            return None;
        }
        // node -> (streams assigned, streams placed first)
        let mut load: BTreeMap<u64, (usize, usize)> =
            candidates.iter().map(|n| (*n, (0, 0))).collect();
        for s in self.streams.values() {
            for (i, r) in s.replicas.iter().enumerate() {
                if let Some((assigned, first)) = load.get_mut(r) {
                    *assigned += 1;
                    *first += usize::from(i == 0);
                }
            }
        }
        let mut ranked: Vec<((usize, usize), u64)> =
            load.into_iter().map(|(n, l)| (l, n)).collect();
        ranked.sort_unstable();
        Some(ranked.into_iter().take(replicas).map(|(_, n)| n).collect())
    }

    /// The whole state as a snapshot message.
    pub fn to_snapshot(&self) -> MetaSnapshot {
        MetaSnapshot {
            peers: self.peers.values().cloned().collect(),
            streams: self.streams.values().cloned().collect(),
            next_uid: self.next_uid,
            retired: self.retired.iter().copied().collect(),
            drained: self.drained.iter().copied().collect(),
        }
    }

    /// Rebuilds the state from a snapshot message.
    pub fn from_snapshot(snap: MetaSnapshot) -> Self {
        Self {
            peers: snap.peers.into_iter().map(|p| (p.node_id, p)).collect(),
            streams: snap
                .streams
                .into_iter()
                .map(|s| (s.name.clone(), s))
                .collect(),
            next_uid: snap.next_uid.max(FIRST_UID),
            retired: snap.retired.into_iter().collect(),
            drained: snap.drained.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(name: &str, subjects: &[&str], config: &str) -> MetaCommand {
        MetaCommand {
            op: Some(meta_command::Op::CreateStream(StreamAssignment {
                name: name.into(),
                uid: 0,
                config_json: config.as_bytes().to_vec().into(),
                replicas: vec![7],
                created_ns: 1,
                subjects: subjects.iter().map(|s| s.to_string()).collect(),
                joining: Vec::new(),
                revision: 0,
            })),
        }
    }

    fn err_code(r: &MetaResult) -> Option<u32> {
        match &r.result {
            Some(meta_result::Result::Error(e)) => Some(e.err_code),
            _ => None,
        }
    }

    fn uid(r: &MetaResult) -> u64 {
        match &r.result {
            Some(meta_result::Result::Stream(s)) => s.uid,
            other => panic!("not a stream: {other:?}"),
        }
    }

    #[test]
    fn uids_grow_and_are_never_reused() {
        let mut m = MetaState::default();
        assert_eq!(uid(&m.apply(create("A", &["a"], "{}"))), 1);
        assert_eq!(uid(&m.apply(create("B", &["b"], "{}"))), 2);
        let del = MetaCommand {
            op: Some(meta_command::Op::DeleteStream("A".into())),
        };
        assert_eq!(m.apply(del), ok());
        assert_eq!(uid(&m.apply(create("A", &["a"], "{}"))), 3);
    }

    #[test]
    fn same_config_is_idempotent_and_different_config_is_refused() {
        let mut m = MetaState::default();
        let first = uid(&m.apply(create("A", &["a"], "{\"x\":1}")));
        assert_eq!(uid(&m.apply(create("A", &["a"], "{\"x\":1}"))), first);
        assert_eq!(
            err_code(&m.apply(create("A", &["a"], "{\"x\":2}"))),
            Some(10058)
        );
    }

    #[test]
    fn overlapping_subjects_are_refused() {
        let mut m = MetaState::default();
        m.apply(create("A", &["orders.*"], "{}"));
        assert_eq!(
            err_code(&m.apply(create("B", &["orders.>"], "{}"))),
            Some(10065)
        );
        assert_eq!(
            err_code(&m.apply(create("C", &["orders.eu"], "{}"))),
            Some(10065)
        );
        assert_eq!(err_code(&m.apply(create("D", &["orders"], "{}"))), None);
        // Another account's streams may take the same subjects (and names).
        assert_eq!(err_code(&m.apply(create("X/A", &["orders.*"], "{}"))), None);
        assert_eq!(err_code(&m.apply(create("X/D", &["orders"], "{}"))), None);
        assert_eq!(
            err_code(&m.apply(create("X/E", &["orders.eu"], "{}"))),
            Some(10065)
        );
    }

    #[test]
    fn an_update_made_from_an_older_revision_is_refused() {
        let mut m = MetaState::default();
        let Some(meta_result::Result::Stream(base)) = m.apply(create("A", &["a"], "{}")).result
        else {
            panic!("not created");
        };
        let update = |sa: StreamAssignment| MetaCommand {
            op: Some(meta_command::Op::UpdateStream(sa)),
        };
        // Two writers read revision 0: a client's config change and a replica move.
        let config_change = StreamAssignment {
            config_json: b"{\"max_msgs\":5}".to_vec().into(),
            ..base.clone()
        };
        let replica_move = StreamAssignment {
            replicas: vec![8],
            ..base
        };
        let Some(meta_result::Result::Stream(after)) = m.apply(update(config_change)).result else {
            panic!("first update refused");
        };
        assert_eq!(after.revision, 1);
        // The second would silently undo the first: refused, the writer reads again.
        assert_eq!(
            err_code(&m.apply(update(replica_move.clone()))),
            Some(10008)
        );
        let again = StreamAssignment {
            replicas: vec![8],
            ..after
        };
        let Some(meta_result::Result::Stream(last)) = m.apply(update(again)).result else {
            panic!("retry refused");
        };
        assert_eq!((last.revision, last.replicas.as_slice()), (2, &[8][..]));
        assert_eq!(&last.config_json[..], b"{\"max_msgs\":5}");
    }

    #[test]
    fn deleting_a_missing_stream_is_not_found() {
        let mut m = MetaState::default();
        let del = MetaCommand {
            op: Some(meta_command::Op::DeleteStream("nope".into())),
        };
        assert_eq!(err_code(&m.apply(del)), Some(10059));
    }

    #[test]
    fn retired_ids_cannot_rejoin() {
        let mut m = MetaState::default();
        let peer = Peer {
            node_id: 9,
            server_name: "n".into(),
            cluster_addr: "a".into(),
            client_url: "c".into(),
            tags: Vec::new(),
        };
        let add = MetaCommand {
            op: Some(meta_command::Op::AddPeer(peer)),
        };
        assert_eq!(m.apply(add.clone()), ok());
        m.apply(MetaCommand {
            op: Some(meta_command::Op::RemovePeer(9)),
        });
        assert!(m.peers().is_empty());
        assert_eq!(err_code(&m.apply(add)), Some(10003));
    }

    #[test]
    fn placement_prefers_least_loaded_nodes() {
        let mut m = MetaState::default();
        for (i, name) in ["A", "B"].iter().enumerate() {
            let mut c = create(name, &[&format!("s{i}")], "{}");
            if let Some(meta_command::Op::CreateStream(sa)) = &mut c.op {
                sa.replicas = vec![1];
            }
            m.apply(c);
        }
        assert_eq!(m.place(2, &[1, 2, 3]), Some(vec![2, 3]));
        assert_eq!(m.place(3, &[1, 2, 3]), Some(vec![2, 3, 1]));
        assert_eq!(m.place(4, &[1, 2, 3]), None);
    }

    #[test]
    fn streams_over_the_whole_cluster_start_on_different_first_replicas() {
        let mut m = MetaState::default();
        let mut firsts = Vec::new();
        for i in 0..6 {
            let placed = m.place(3, &[1, 2, 3]).unwrap();
            let mut sorted = placed.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, [1, 2, 3]);
            firsts.push(placed[0]);
            let mut c = create(&format!("S{i}"), &[&format!("s{i}")], "{}");
            if let Some(meta_command::Op::CreateStream(sa)) = &mut c.op {
                sa.replicas = placed;
            }
            m.apply(c);
        }
        assert_eq!(firsts, [1, 2, 3, 1, 2, 3]);
    }

    #[test]
    fn snapshot_round_trips() {
        let mut m = MetaState::default();
        m.apply(create("A", &["a"], "{}"));
        m.apply(MetaCommand {
            op: Some(meta_command::Op::RemovePeer(4)),
        });
        m.apply(MetaCommand {
            op: Some(meta_command::Op::Drain(jetraft_proto::meta::Drain {
                node_id: 5,
                drained: true,
            })),
        });
        assert!(m.is_drained(5));
        assert_eq!(MetaState::from_snapshot(m.to_snapshot()), m);
    }
}
