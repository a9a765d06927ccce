//! The meta task: keeps this node's stream replicas and capture subscriptions in step with the
//! meta state. It alone creates and removes replicas ([`LocalStream`] handles in
//! `JetStream::local`), owns the capture subscriptions and the replica moves in progress
//! ([`MetaOwned`]), and publishes what the request paths route by ([`StreamRouting`]).
//!
//! Runs after every meta change (and every few seconds, to retry what failed): starts the Raft
//! group of every stream assigned here, stops and deletes the ones no longer assigned (or
//! recreated under a new uid), initialises a new group on its first replica, records this node
//! in the meta peers when it leads the meta group, and proposes config changes the meta group
//! accepted to streams this node leads.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use jetraft_proto::meta::{MetaCommand, Peer, StreamAssignment, meta_command};
use jetraft_raft::{GroupId, NodeId, PeerNode};
use jetraft_storage::mem::MemStreamStore;
use jetraft_storage::rocks::RocksStreamStore;
use jetraft_storage::stream::{StreamStore, StreamUid};
use parking_lot::Mutex;
use prost::Message;
use tracing::{info, warn};

use super::publish::Captures;
use super::replica::{LocalStream, SharedStream};
use super::{JetStream, now_ns};
use crate::jetstream::api::types::{StorageType, StreamConfig};
use crate::jetstream::stream::{StreamStateMachine, command};

/// Retry period for replicas that failed to start.
const RETRY: Duration = Duration::from_secs(2);
/// How long a replica other than the first waits for the new group's leader before it
/// initialises the group itself ([`JetStream::ensure_initialized`]).
const INIT_FALLBACK: Duration = Duration::from_millis(1500);

/// What the meta task owns, and nothing else touches.
#[derive(Default)]
pub(super) struct MetaOwned {
    /// Capture subscriptions by stream name.
    captures: Captures,
    /// Replica moves this node drives as a stream leader (`peer_remove`), one per stream group.
    pub(super) moving: HashMap<StreamUid, tokio::task::JoinHandle<()>>,
    /// The replicas that are no longer assigned here but still run
    /// (`JetStream::still_needed_here`).
    pub(super) leaving: HashMap<StreamUid, super::peer_remove::Leaving>,
    /// Each stream's config JSON as of the last pass and the DIRECT.GET entries it gives, so
    /// a pass parses only the configs that changed.
    direct: HashMap<String, (bytes::Bytes, Vec<String>)>,
    /// Assignments (uid, revision) whose replica here was running, initialised, configured
    /// and not moving after a pass: a pass woken by a meta change skips them, a full pass
    /// (at least every [`RETRY`]) goes over every one again.
    settled: HashSet<(StreamUid, u64)>,
    /// When the last full pass started.
    last_full: Option<std::time::Instant>,
}

/// What the request paths route by, as of the meta task's last pass: published on a watch
/// channel, so readers never wait for the meta task and it never waits for them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct StreamRouting {
    /// Subjects captured on this node, by stream name.
    pub(crate) captured: BTreeMap<String, Vec<String>>,
    /// Streams whose DIRECT.GET this node answers: those with `allow_direct`, and the origins
    /// of mirrors with `mirror_direct`.
    pub(crate) direct: HashSet<String>,
}

/// The stream keys whose DIRECT.GET this node answers, from every stream's config; `cache`
/// keeps each config's entries from the last pass, so only changed configs are parsed.
fn direct_streams(
    cache: &mut HashMap<String, (bytes::Bytes, Vec<String>)>,
    streams: &[StreamAssignment],
) -> HashSet<String> {
    let mut next = HashMap::with_capacity(streams.len());
    let mut direct = HashSet::new();
    for s in streams {
        let entry = match cache.remove(&s.name) {
            Some((json, keys)) if json == s.config_json => (json, keys),
            _ => (s.config_json.clone(), direct_keys(&s.name, &s.config_json)),
        };
        direct.extend(entry.1.iter().cloned());
        next.insert(s.name.clone(), entry);
    }
    *cache = next;
    direct
}

/// The DIRECT.GET entries of stream `key` with config `json`: itself with `allow_direct`, and
/// a mirror's origin with `mirror_direct` (by stream key: the origin is a stream of the
/// mirror's account).
fn direct_keys(key: &str, json: &[u8]) -> Vec<String> {
    let Ok(c) = serde_json::from_slice::<StreamConfig>(json) else {
        return Vec::new();
    };
    let own = c.allow_direct.then(|| key.to_string());
    let origin = c.mirror.filter(|_| c.mirror_direct).map(|m| {
        crate::jetstream::account::stream_key(
            crate::jetstream::account::stream_account(key),
            &m.name,
        )
    });
    own.into_iter().chain(origin).collect()
}

impl JetStream {
    /// The meta task: runs until the runtime stops.
    pub(super) async fn reconcile_loop(self: Arc<Self>) {
        let mut version = self.meta.subscribe();
        let mut owned = MetaOwned::default();
        loop {
            self.reconcile(&mut owned).await;
            tokio::select! {
                () = self.cancel.cancelled() => break,
                changed = version.changed() => if changed.is_err() { break },
                () = tokio::time::sleep(RETRY) => {}
            }
        }
    }

    async fn reconcile(self: &Arc<Self>, owned: &mut MetaOwned) {
        let (streams, peers) = self
            .meta
            .read(|m| (m.streams().cloned().collect::<Vec<_>>(), m.peers().clone()));
        for p in peers.values() {
            if p.node_id != self.node.0 {
                self.transport.add_peer(NodeId(p.node_id), &p.cluster_addr);
            }
        }
        if let Some(cluster) = &self.cluster {
            for p in cluster.peers.snapshot().values() {
                if !p.cluster_addr.is_empty() {
                    self.transport
                        .add_peer(NodeId(p.node_id.0), &p.cluster_addr);
                }
            }
        }
        self.register_self(&peers).await;
        self.hand_off_if_drained(GroupId::META).await;
        // Streams of an account that has no JetStream now (e.g. `$G`'s after accounts were
        // configured) keep their data but capture nothing, as the account's API is off.
        let captures: Vec<(String, StreamUid, Vec<String>)> = streams
            .iter()
            .filter(|s| {
                self.accounts
                    .enabled(crate::jetstream::account::stream_account(&s.name))
            })
            .map(|s| (s.name.clone(), StreamUid(s.uid), s.subjects.clone()))
            .collect();
        self.sync_captures(&mut owned.captures, &captures);
        let direct = direct_streams(&mut owned.direct, &streams);
        let routing = StreamRouting {
            captured: (owned.captures.iter())
                .map(|(name, c)| (name.clone(), c.subjects.clone()))
                .collect(),
            direct,
        };
        self.routing.send_if_modified(|r| {
            let changed = *r != routing;
            *r = routing;
            changed
        });
        owned.moving.retain(|_, task| !task.is_finished());
        let wanted: HashMap<&str, &StreamAssignment> = streams
            .iter()
            .filter(|s| s.replicas.contains(&self.node.0))
            .map(|s| (s.name.as_str(), s))
            .collect();
        let current: Vec<Arc<LocalStream>> = self.local.read().values().cloned().collect();
        // A replica assigned here again starts a new grace if it leaves later.
        owned.leaving.retain(|uid, _| {
            current.iter().any(|ls| {
                ls.uid == *uid
                    && wanted.get(ls.name.as_str()).map(|a| StreamUid(a.uid)) != Some(*uid)
            })
        });
        for ls in current {
            if wanted.get(ls.name.as_str()).map(|a| StreamUid(a.uid)) != Some(ls.uid) {
                // Moved away (STREAM.PEER.REMOVE): keep leading until the new voters took over.
                let moved = streams.iter().find(|s| StreamUid(s.uid) == ls.uid);
                if let Some(a) = moved
                    && self.still_needed_here(&ls, &a.replicas, &mut owned.leaving)
                {
                    self.drive_membership(&mut owned.moving, &ls, &a.replicas);
                    continue;
                }
                owned.leaving.remove(&ls.uid);
                self.stop_replica(&ls).await;
            }
        }
        // A stream created, changed or moved meanwhile is unsettled; leadership changes and
        // retries of what failed are caught by the full pass.
        let full = owned.last_full.is_none_or(|t| t.elapsed() >= RETRY);
        if full {
            owned.last_full = Some(std::time::Instant::now());
            owned.settled.clear();
        }
        for a in wanted.values() {
            let key = (StreamUid(a.uid), a.revision);
            if owned.settled.contains(&key) {
                continue;
            }
            if !self.local.read().contains_key(&a.name)
                && let Err(e) = self.start_replica(a).await
            {
                warn!(stream = %a.name, error = %e, "stream replica not started");
            }
            if let Some(ls) = self.local_stream(&a.name) {
                // The replica list changes on a peer removal.
                ls.set_replicas(&a.replicas);
                if !a.joining.contains(&self.node.0) {
                    self.ensure_initialized(&ls).await;
                }
                self.push_config(&ls, a).await;
                self.drive_membership(&mut owned.moving, &ls, &a.replicas);
                if ls.initialized.load(Ordering::Relaxed) && !owned.moving.contains_key(&ls.uid) {
                    owned.settled.insert(key);
                }
            }
        }
    }

    /// The meta leader records itself in the meta peers (address, name) once.
    async fn register_self(&self, peers: &BTreeMap<u64, Peer>) {
        let Ok(info) = self.registry.leader(GroupId::META) else {
            return;
        };
        if !info.is_self {
            return;
        }
        // Once, and again after a restart with other tags (the rest of a record other nodes
        // wrote stays as they saw it).
        let record = match peers.get(&self.node.0) {
            None => self.self_peer(),
            Some(p) if p.tags != self.config.server_tags => Peer {
                tags: self.config.server_tags.clone(),
                ..p.clone()
            },
            Some(_) => return,
        };
        let cmd = MetaCommand {
            op: Some(meta_command::Op::AddPeer(record)),
        };
        if let Err(e) = self
            .registry
            .propose(GroupId::META, cmd.encode_to_vec().into())
            .await
        {
            warn!(error = %e, "recording this node in the meta state failed");
        }
    }

    /// This node as a meta peer record.
    pub(super) fn self_peer(&self) -> Peer {
        Peer {
            node_id: self.node.0,
            server_name: self.info.server_name.clone(),
            cluster_addr: self.cluster_addr.clone(),
            client_url: self.info.client_addr.to_string(),
            tags: self.config.server_tags.clone(),
        }
    }

    async fn start_replica(self: &Arc<Self>, a: &StreamAssignment) -> Result<(), String> {
        let config: StreamConfig =
            serde_json::from_slice(&a.config_json).map_err(|e| format!("stream config: {e}"))?;
        let uid = StreamUid(a.uid);
        type Stores = (
            Box<dyn StreamStore + Sync>,
            Box<dyn jetraft_storage::consumer::ConsumerStore + Sync>,
        );
        let (store, consumers): Stores = match config.storage {
            StorageType::File => (
                Box::new(
                    RocksStreamStore::open(self.logs.db().clone(), uid)
                        .map_err(|e| e.to_string())?,
                ),
                Box::new(jetraft_storage::rocks::RocksConsumerStore::new(
                    self.logs.db().clone(),
                )),
            ),
            StorageType::Memory => (
                Box::new(MemStreamStore::new(uid)),
                Box::new(jetraft_storage::mem::MemConsumerStore::new()),
            ),
        };
        let memory = config.storage == StorageType::Memory;
        let created = u64::try_from(a.created_ns).unwrap_or(0);
        let mut sm =
            StreamStateMachine::open_with(store, consumers, config, created, self.identity.clone())
                .map_err(|e| e.to_string())?;
        let bus = self.bus.clone();
        let account = crate::jetstream::account::stream_account(&a.name).to_string();
        sm.set_republish_sink(Arc::new(move |subject, headers, payload| {
            bus.publish(
                &crate::bus::Msg::new(subject, &payload)
                    .headers(Some(&headers))
                    .in_account(&account),
            );
        }));
        let sm = Arc::new(Mutex::new(sm));
        let group = GroupId(a.uid);
        let (changes, _) = tokio::sync::watch::channel(0u64);
        // Its queue grows with use (a Tokio channel's first block is ~2 KB per stream).
        let (acks, ack_rx) = jetraft_raft::rt::mpsc::unbounded();
        // A memory stream's log is not fsynced: it survives a crash of the process, and its
        // replicas are its durability (see the README).
        let shared = SharedStream(sm, changes, Arc::new(tokio::sync::Notify::new()));
        let created = match memory {
            true => {
                (self.logs)
                    .create_unsynced_group(&self.registry, group, Box::new(shared.clone()))
                    .await
            }
            false => {
                (self.logs)
                    .create_group(&self.registry, group, Box::new(shared.clone()))
                    .await
            }
        };
        created.map_err(|e| e.to_string())?;
        let local = Arc::new(LocalStream::new(
            a.name.clone(),
            uid,
            a.replicas.clone(),
            shared,
            acks,
            self.cancel.child_token(),
        ));
        self.local.write().insert(a.name.clone(), local.clone());
        self.local_changed.notify_waiters();
        let (js, cancel, applied) = (self.clone(), local.cancel.clone(), local.applied.clone());
        self.tasks
            .spawn(async move { js.ack_loop(ack_rx, applied, cancel).await });
        let js = self.clone();
        self.tasks.spawn(async move { js.run_replica(local).await });
        info!(stream = %a.name, uid = a.uid, "stream replica started");
        Ok(())
    }

    /// Initialises a new stream's Raft group with every replica once their addresses are known
    /// (retried by the next reconcile until it happens). The first replica of the assignment
    /// does it at once; openraft then starts an election right away, and its vote requests
    /// wait briefly on peers that have not created the group yet. The other replicas do it too,
    /// with the same membership (openraft allows that: each starts with the same first entry),
    /// but only once [`INIT_FALLBACK`] passed without a leader, as when the first replica is
    /// down: had they all done it at once, each would have started an election at the same
    /// moment and split the votes, leaving the new stream without a leader for an election
    /// timeout.
    async fn ensure_initialized(&self, ls: &LocalStream) {
        if ls.initialized.load(Ordering::Relaxed) {
            return;
        }
        match self.registry.is_initialized(ls.group()).await {
            Some(true) => {
                ls.initialized.store(true, Ordering::Relaxed);
                return;
            }
            // The group is gone: nothing to initialise.
            None => return,
            Some(false) => {}
        }
        let first = ls.first_replica() == Some(self.node.0);
        if !first
            && (ls.started.elapsed() < INIT_FALLBACK
                || self
                    .registry
                    .leader(ls.group())
                    .is_ok_and(|l| l.leader.is_some()))
        {
            return;
        }
        let mut members = BTreeMap::new();
        for r in &ls.replicas() {
            let Some(addr) = self.peer_cluster_addr(*r) else {
                // Retried at the next pass (every few seconds, or when the meta state moves).
                warn!(stream = %ls.name, replica = r, "stream group not initialised yet: no cluster address known for a replica");
                return;
            };
            members.insert(NodeId(*r), PeerNode::new(addr));
        }
        if let Err(e) = self.registry.initialize(ls.group(), members).await {
            warn!(stream = %ls.name, error = %e, "stream group initialisation failed");
        }
    }

    async fn stop_replica(&self, ls: &LocalStream) {
        self.local.write().remove(&ls.name);
        self.local_changed.notify_waiters();
        ls.cancel.cancel();
        ls.engines.stop_all(true);
        if let Err(e) = self.logs.remove_group(&self.registry, ls.group()).await {
            warn!(stream = %ls.name, error = %e, "stream group did not stop cleanly");
        }
        // Messages go; the uid's small meta records stay (uids are never reused).
        if let Err(e) = ls.sm.lock().purge_all() {
            warn!(stream = %ls.name, error = %e, "stream data not deleted");
        }
        info!(stream = %ls.name, uid = ls.uid.0, "stream replica removed");
    }

    /// On the stream leader: proposes the meta group's config for the stream if the replica
    /// still runs an older one.
    async fn push_config(&self, ls: &LocalStream, a: &StreamAssignment) {
        let Ok(info) = self.registry.leader(ls.group()) else {
            return;
        };
        if !info.is_self {
            return;
        }
        let Some(wanted) = ls.config_to_push(&a.config_json) else {
            return;
        };
        let cmd = command::update_config(&wanted, now_ns());
        if let Err(e) = self.registry.propose(ls.group(), cmd).await {
            warn!(stream = %ls.name, error = %e, "stream config update not applied yet");
        }
    }
}
