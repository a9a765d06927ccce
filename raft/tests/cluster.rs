//! In-process Raft cluster tests over `MemTransport` (STYLE B9 item 5).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use jetraft_raft::{GroupId, NodeId, RaftError, RemovedVoters};
use openraft::Instant as _;
use openraft::async_runtime::WatchReceiver;
use std::sync::Arc;

use jetraft_raft::mem_log::MemLogStore;
use parking_lot::Mutex;
use support::{Disk, DurableList, TestCluster, addr, len_of};

const G: GroupId = GroupId(1);

fn n(id: u64) -> NodeId {
    NodeId(id)
}

#[tokio::test]
async fn three_node_group_elects_a_leader_and_commits() {
    let c = TestCluster::new(3);
    let all = c.ids();
    c.must_create_group(G, &all).await;
    let leader = c.wait_for_leader(G, &all).await;
    assert!(all.contains(&leader));

    let r1 = c.must_propose(G, &all, "a").await;
    let r2 = c.must_propose(G, &all, "b").await;
    assert_eq!((len_of(&r1), len_of(&r2)), (1, 2));
    c.wait_for_items(G, &all, &["a", "b"]).await;
    c.shutdown().await;
}

#[tokio::test]
async fn proposal_on_a_follower_returns_not_leader_with_hint() {
    let c = TestCluster::new(3);
    let all = c.ids();
    c.must_create_group(G, &all).await;
    let leader = c.wait_for_leader(G, &all).await;
    let follower = *all.iter().find(|&&id| id != leader).unwrap();

    let err = c
        .node(follower)
        .registry
        .propose(G, Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    match err {
        RaftError::NotLeader {
            group,
            leader: hint,
            leader_addr,
        } => {
            assert_eq!(group, G);
            assert_eq!(hint, Some(leader));
            assert_eq!(leader_addr, Some(addr(leader).addr));
        }
        other => panic!("expected NotLeader, got {other}"),
    }
    c.shutdown().await;
}

#[tokio::test]
async fn proposal_before_initialisation_has_no_leader_hint() {
    let c = TestCluster::new(1);
    c.start_group(G, &[n(1)]).await;
    let err = c
        .node(n(1))
        .registry
        .propose(G, Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, RaftError::NotLeader { leader: None, .. }),
        "{err:?}"
    );
    let err = c.node(n(1)).start_group_twice_error(G).await;
    assert!(matches!(err, RaftError::GroupExists { .. }), "{err:?}");
    c.shutdown().await;
}

#[tokio::test]
async fn single_node_group_commits_alone() {
    let c = TestCluster::new(1);
    c.must_create_group(G, &[n(1)]).await;
    let r = c.must_propose(G, &[n(1)], "solo").await;
    assert_eq!(len_of(&r), 1);
    c.shutdown().await;
}

/// What a Raft group costs in tasks once it has a leader and applied an entry: openraft's core,
/// state machine worker, tick and step-down watcher, nothing else. (openraft also ran an
/// IO-completion forwarder and a linearizable-read deadline worker per group: jetraft's patches
/// 4 and 5 in `vendor/openraft/JETRAFT-PATCH.md`; each task is memory on every stream.)
#[tokio::test]
async fn a_single_voter_group_keeps_four_tasks() {
    let c = TestCluster::new(1);
    let tasks = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    c.must_create_group(GroupId(100), &[n(1)]).await;
    c.must_propose(GroupId(100), &[n(1)], "first").await;
    // The count before, once the first group's write has settled (the same reading twice).
    let mut before = tasks();
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = tasks();
        if now == before {
            break;
        }
        before = now;
    }
    const GROUPS: u64 = 10;
    for g in 1..=GROUPS {
        c.must_create_group(GroupId(100 + g), &[n(1)]).await;
        c.must_propose(GroupId(100 + g), &[n(1)], "x").await;
    }
    // Tasks that come and go with a write (answers, quiescence checks) end within a moment.
    let want = 4 * GROUPS as usize;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while tasks() - before > want && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(tasks() - before, want, "tasks of {GROUPS} groups");
    c.shutdown().await;
}

/// A leader that heard no quorum answer for longer than its lease (no heartbeats, as in a
/// quiet group) still takes a client write at once, without a heartbeat round first: Raft's
/// safety does not rest on the lease, and that round added a round trip to every first write
/// to a quiet group. The raw `client_write` is what fails without the openraft patch; the
/// registry's `propose` after it shows the registry path commits too. Membership changes still
/// need the lease (openraft's own check).
#[tokio::test]
async fn a_leader_whose_lease_ran_out_takes_writes_at_once() {
    let c = TestCluster::new(3);
    let all = c.ids();
    c.must_create_group(G, &all).await;
    let leader = c.wait_for_leader(G, &all).await;
    c.must_propose(G, &all, "a").await;
    for &id in &all {
        let raft = c.node(id).registry.raft(G).unwrap();
        raft.runtime_config().heartbeat(false);
        raft.runtime_config().elect(false);
    }
    let registry = &c.node(leader).registry;
    let raft = registry.raft(G).unwrap();
    // openraft's lease is the largest election timeout.
    let lease = registry.timing().election_max;
    tokio::time::sleep(lease * 2).await;
    let acked = raft.metrics().borrow_watched().last_quorum_acked;
    assert!(
        acked.is_some_and(|at| at.elapsed() > lease),
        "the lease should have run out: last quorum answer {acked:?}"
    );

    let write = raft.client_write(jetraft_raft::types::Command(Bytes::from_static(b"b")));
    tokio::time::timeout(Duration::from_secs(5), write)
        .await
        .expect("answered")
        .expect("a leader without a lease takes a client write");
    tokio::time::sleep(lease * 2).await;
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        registry.propose(G, Bytes::from_static(b"c")),
    )
    .await
    .expect("answered");
    assert_eq!(len_of(&answer.expect("proposed")), 3);
    c.wait_for_items(G, &all, &["a", "b", "c"]).await;
    c.shutdown().await;
}

#[tokio::test]
async fn unknown_group_is_reported() {
    let c = TestCluster::new(1);
    let err = c
        .node(n(1))
        .registry
        .propose(GroupId(42), Bytes::new())
        .await
        .unwrap_err();
    assert!(matches!(err, RaftError::GroupNotFound { group } if group == GroupId(42)));
    assert!(matches!(
        c.node(n(1)).registry.remove_group(GroupId(42)).await,
        Err(RaftError::GroupNotFound { .. })
    ));
}

#[tokio::test]
async fn isolated_leader_is_replaced_and_rejoins_after_heal() {
    let c = TestCluster::new(3);
    let all = c.ids();
    c.must_create_group(G, &all).await;
    c.must_propose(G, &all, "before").await;
    c.wait_for_items(G, &all, &["before"]).await;

    let old = c.wait_for_leader(G, &all).await;
    c.net.isolate(old);
    let rest: Vec<NodeId> = all.iter().copied().filter(|&id| id != old).collect();
    let new = c.wait_for_leader(G, &rest).await;
    assert_ne!(new, old);

    // The isolated old leader cannot commit: its proposal fails within the deadline.
    let stale = c
        .node(old)
        .registry
        .propose(G, Bytes::from_static(b"lost"))
        .await;
    assert!(
        matches!(
            stale,
            Err(RaftError::Timeout { .. }
                | RaftError::NotLeader { .. }
                | RaftError::OutcomeUnknown { .. })
        ),
        "isolated node committed or failed oddly: {stale:?}"
    );

    c.must_propose(G, &rest, "after").await;
    c.wait_for_items(G, &rest, &["before", "after"]).await;

    c.net.heal();
    c.wait_for_items(G, &all, &["before", "after"]).await;
    let leader = c.wait_for_leader(G, &all).await;
    assert!(rest.contains(&leader) || leader == old);
    c.must_propose(G, &all, "healed").await;
    c.wait_for_items(G, &all, &["before", "after", "healed"])
        .await;
    c.shutdown().await;
}

#[tokio::test]
async fn five_groups_on_three_nodes_commit_independently() {
    let c = TestCluster::new(3);
    let all = c.ids();
    let groups: Vec<GroupId> = (1..=5).map(GroupId).collect();
    for (i, &g) in groups.iter().enumerate() {
        // Rotate who initialises so leaders spread out.
        let mut members = all.clone();
        members.rotate_left(i % all.len());
        c.must_create_group(g, &members).await;
    }
    for &g in &groups {
        c.must_propose(g, &all, &format!("g{}-1", g.0)).await;
        c.must_propose(g, &all, &format!("g{}-2", g.0)).await;
    }
    for &g in &groups {
        let a = format!("g{}-1", g.0);
        let b = format!("g{}-2", g.0);
        c.wait_for_items(g, &all, &[&a, &b]).await;
    }
    // Removing one group leaves the others working.
    for &id in &all {
        c.node(id).registry.remove_group(GroupId(3)).await.unwrap();
    }
    c.must_propose(GroupId(4), &all, "g4-3").await;
    c.wait_for_items(GroupId(4), &all, &["g4-1", "g4-2", "g4-3"])
        .await;
    assert_eq!(
        c.node(n(1)).registry.groups().ids(),
        vec![GroupId(1), GroupId(2), GroupId(4), GroupId(5)]
    );
    c.shutdown().await;
}

#[tokio::test]
async fn learner_is_added_then_promoted_to_voter() {
    let c = TestCluster::new(4);
    let voters = vec![n(1), n(2), n(3)];
    c.must_create_group(G, &voters).await;
    c.must_propose(G, &voters, "a").await;
    let leader = c.wait_for_leader(G, &voters).await;

    c.start_group(G, &[n(4)]).await;
    c.node(leader)
        .registry
        .add_learner(G, n(4), addr(n(4)))
        .await
        .unwrap();
    c.wait_for_items(G, &[n(4)], &["a"]).await;
    assert_eq!(c.voters(G, leader), BTreeSet::from([1, 2, 3]));

    let all: BTreeSet<NodeId> = [1, 2, 3, 4].map(n).into();
    c.node(leader)
        .registry
        .change_voters(G, all.clone(), RemovedVoters::KeepAsLearners)
        .await
        .unwrap();
    assert_eq!(c.voters(G, leader), BTreeSet::from([1, 2, 3, 4]));

    let everyone: Vec<NodeId> = all.into_iter().collect();
    c.must_propose(G, &everyone, "b").await;
    c.wait_for_items(G, &everyone, &["a", "b"]).await;
    c.shutdown().await;
}

#[tokio::test]
async fn far_behind_follower_catches_up_by_snapshot() {
    let c = TestCluster::new(3);
    let all = c.ids();
    c.must_create_group(G, &all).await;
    c.must_propose(G, &all, "0").await;
    c.wait_for_items(G, &all, &["0"]).await;

    let leader = c.wait_for_leader(G, &all).await;
    let lagger = *all.iter().find(|&&id| id != leader).unwrap();
    c.net.isolate(lagger);
    let rest: Vec<NodeId> = all.iter().copied().filter(|&id| id != lagger).collect();
    let mut want = vec!["0".to_string()];
    for i in 1..20 {
        want.push(i.to_string());
        c.must_propose(G, &rest, &i.to_string()).await;
    }
    let want_ref: Vec<&str> = want.iter().map(String::as_str).collect();
    c.wait_for_items(G, &rest, &want_ref).await;

    // Snapshot and purge the log on the leader, so the lagger cannot catch up from the log.
    let leader = c.wait_for_leader(G, &rest).await;
    let raft = c.node(leader).registry.raft(G).unwrap();
    let applied = raft.metrics().borrow_watched().last_applied.unwrap().index;
    raft.trigger().snapshot().await.unwrap();
    raft.wait(Some(Duration::from_secs(5)))
        .metrics(
            |m| m.snapshot.map(|s| s.index) >= Some(applied),
            "snapshot built",
        )
        .await
        .unwrap();
    raft.trigger().purge_log(applied).await.unwrap();
    raft.wait(Some(Duration::from_secs(5)))
        .metrics(|m| m.purged.map(|p| p.index) >= Some(applied), "log purged")
        .await
        .unwrap();
    assert!(c.log(G, leader).len() < want.len());

    c.net.heal();
    c.wait_for_items(G, &all, &want_ref).await;
    let lag_raft = c.node(lagger).registry.raft(G).unwrap();
    assert!(
        lag_raft.metrics().borrow_watched().snapshot.is_some(),
        "lagger caught up without installing a snapshot"
    );
    c.must_propose(G, &all, "after").await;
    want.push("after".into());
    let want_ref: Vec<&str> = want.iter().map(String::as_str).collect();
    c.wait_for_items(G, &all, &want_ref).await;
    c.shutdown().await;
}

#[tokio::test]
async fn one_cut_link_keeps_quorum_and_the_cut_follower_catches_up() {
    let c = TestCluster::new(3);
    let all = c.ids();
    c.must_create_group(G, &all).await;
    let leader = c.wait_for_leader(G, &all).await;
    let cut = *all.iter().find(|&&id| id != leader).unwrap();
    c.net.partition(leader, cut);

    let majority: Vec<NodeId> = all.iter().copied().filter(|&id| id != cut).collect();
    c.must_propose(G, &majority, "x").await;
    c.must_propose(G, &majority, "y").await;
    c.wait_for_items(G, &majority, &["x", "y"]).await;
    assert!(c.items(G, cut).len() < 2, "cut follower received entries");

    c.net.heal();
    c.wait_for_items(G, &all, &["x", "y"]).await;
    c.shutdown().await;
}

#[tokio::test]
async fn replicas_agree_under_delay_and_random_drops() {
    let c = TestCluster::new(3);
    let all = c.ids();
    c.must_create_group(G, &all).await;
    c.wait_for_leader(G, &all).await;
    for &a in &all {
        for &b in &all {
            if a != b {
                c.net
                    .set_delay(a, b, Duration::from_millis(5 * (a.0 + b.0)));
            }
        }
    }
    c.net.set_drop_probability(0.1);
    let cmds: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
    for cmd in &cmds {
        c.must_propose(G, &all, cmd).await;
    }
    c.net.set_drop_probability(0.0);
    // A retried proposal may have committed twice; replicas must still agree exactly.
    let state = c.wait_for_agreement(G, &all).await;
    for cmd in &cmds {
        assert!(
            state.iter().any(|s| s.as_ref() == cmd.as_bytes()),
            "{cmd} missing from {state:?}"
        );
    }
    c.shutdown().await;
}

#[tokio::test]
async fn leadership_transfers_to_the_chosen_follower() {
    let c = TestCluster::new(3);
    let all = c.ids();
    c.must_create_group(G, &all).await;
    c.must_propose(G, &all, "a").await;
    let old = c.wait_for_leader(G, &all).await;
    let to = *all.iter().find(|&&id| id != old).unwrap();

    let mut watch = c.node(to).registry.watch_leader(G).unwrap();
    assert_eq!(watch.current().leader, Some(old));
    let err = c.node(to).registry.transfer_leadership(G, old).await;
    assert!(matches!(err, Err(RaftError::NotLeader { .. })), "{err:?}");

    c.node(old)
        .registry
        .transfer_leadership(G, to)
        .await
        .unwrap();
    assert_eq!(c.wait_for_leader(G, &all).await, to);
    let seen = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let info = watch.changed().await.unwrap();
            if info.is_self {
                return info;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(seen.leader, Some(to));
    c.must_propose(G, &all, "b").await;
    c.wait_for_items(G, &all, &["a", "b"]).await;
    c.shutdown().await;
}

#[tokio::test]
async fn wiped_node_rejoins_under_a_new_id() {
    let mut c = TestCluster::new(3);
    let all = c.ids();
    c.must_create_group(G, &all).await;
    c.must_propose(G, &all, "a").await;
    c.wait_for_items(G, &all, &["a"]).await;

    // Wipe a follower; it comes back with a fresh id, never its old one.
    let leader = c.wait_for_leader(G, &all).await;
    let wiped = *all.iter().find(|&&id| id != leader).unwrap();
    c.wipe_node(wiped).await;
    let fresh = n(10);
    c.add_node(fresh);
    c.start_group(G, &[fresh]).await;

    let survivors: Vec<NodeId> = all.iter().copied().filter(|&id| id != wiped).collect();
    c.must_propose(G, &survivors, "b").await;
    let leader = c.wait_for_leader(G, &survivors).await;
    c.node(leader)
        .registry
        .add_learner(G, fresh, addr(fresh))
        .await
        .unwrap();
    let mut voters: BTreeSet<NodeId> = survivors.iter().copied().collect();
    voters.insert(fresh);
    c.node(leader)
        .registry
        .change_voters(G, voters.clone(), RemovedVoters::Remove)
        .await
        .unwrap();
    let want: BTreeSet<u64> = voters.iter().map(|v| v.0).collect();
    assert_eq!(c.voters(G, leader), want);
    let raft = c.node(leader).registry.raft(G).unwrap();
    assert_eq!(raft.learner_ids().count(), 0, "wiped id kept as learner");

    let members: Vec<NodeId> = voters.into_iter().collect();
    c.must_propose(G, &members, "c").await;
    c.wait_for_items(G, &members, &["a", "b", "c"]).await;
    c.shutdown().await;
}

#[tokio::test]
async fn restarted_group_resumes_from_the_saved_applied_state() {
    let c = TestCluster::new(1);
    let node = c.node(n(1));
    let disk = Arc::new(Mutex::new(Disk::default()));
    let log = MemLogStore::new();
    let start = |log: MemLogStore| {
        let disk = disk.clone();
        async move {
            node.registry
                .create_group(G, log, Box::new(DurableList::open(disk)))
                .await
                .unwrap();
        }
    };
    start(log.clone()).await;
    node.registry
        .initialize(G, [(n(1), addr(n(1)))].into())
        .await
        .unwrap();
    for cmd in ["a", "b", "c"] {
        c.must_propose(G, &[n(1)], cmd).await;
    }
    // Answers leave before the applied state is written (the write follows at once).
    let saved_items = |n: usize| {
        let disk = disk.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            while disk.lock().items.len() < n && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    saved_items(3).await;
    let saved = disk.lock().applied.clone().unwrap();
    assert!(disk.lock().saves >= 1);
    assert_eq!(disk.lock().items.len(), 3);

    // Restart: same log and "disk", new Raft and state machine instances.
    node.registry.remove_group(G).await.unwrap();
    start(log).await;
    let r = c.must_propose(G, &[n(1)], "d").await;
    assert_eq!(len_of(&r), 4, "entries re-applied after restart");
    saved_items(4).await;
    let disk = disk.lock();
    let items: Vec<&[u8]> = disk.items.iter().map(|b| b.as_ref()).collect();
    assert_eq!(items, [b"a", b"b", b"c", b"d"]);
    assert!(disk.applied.as_ref().unwrap().last_applied > saved.last_applied);
}

/// Acked-write oracle under a seeded schedule of isolations and drops (STYLE B9 item 8, small).
#[tokio::test]
async fn acked_writes_survive_a_seeded_fault_schedule() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    const SEED: u64 = 0x5eed;
    let mut rng = StdRng::seed_from_u64(SEED);
    let c = TestCluster::new(3);
    let all = c.ids();
    c.must_create_group(G, &all).await;
    c.net.set_drop_probability(0.05);

    let mut acked = Vec::new();
    for round in 0..6 {
        c.net.heal();
        let victim = all[rng.random_range(0..all.len())];
        c.net.isolate(victim);
        let rest: Vec<NodeId> = all.iter().copied().filter(|&id| id != victim).collect();
        for i in 0..2 {
            let cmd = format!("r{round}-{i}");
            c.must_propose(G, &rest, &cmd).await;
            acked.push(cmd);
        }
    }
    c.net.heal();
    c.net.set_drop_probability(0.0);
    let state = c.wait_for_agreement(G, &all).await;
    for cmd in &acked {
        assert!(
            state.iter().any(|s| s.as_ref() == cmd.as_bytes()),
            "seed {SEED:#x}: acked {cmd} lost; state {state:?}"
        );
    }
    c.shutdown().await;
}

/// A proposal whose answer misses the deadline (the leader's links to both followers are slower
/// than it) is settled, not made again blindly: `must_propose` commits a marker through the
/// leader once the links recover, finds the first copy applied and returns its answer. A blind
/// retry would have put a second copy in the log behind the first, and both would commit.
#[tokio::test]
async fn a_proposal_that_timed_out_is_settled_not_repeated() {
    support::init_log();
    // Elections far off: the followers hear nothing from the leader while its links are slow.
    let timing = jetraft_raft::RaftTiming {
        election_min: Duration::from_secs(30),
        election_max: Duration::from_secs(60),
        ..support::test_timing()
    };
    let ids: Vec<NodeId> = (1..=3).map(NodeId).collect();
    let c = TestCluster::with_timing(&ids, timing);
    c.must_create_group(G, &ids).await;
    let leader = c.wait_for_leader(G, &ids).await;
    let followers: Vec<NodeId> = ids.iter().copied().filter(|n| *n != leader).collect();
    let slow = timing.propose_timeout + Duration::from_secs(1);
    for f in &followers {
        c.net.set_delay(leader, *f, slow);
    }
    let net = c.net.clone();
    let restore = followers.clone();
    tokio::spawn(async move {
        tokio::time::sleep(slow + Duration::from_millis(500)).await;
        for f in restore {
            net.set_delay(leader, f, Duration::ZERO);
        }
    });
    let started = tokio::time::Instant::now();
    let resp = c.must_propose(G, &ids, "once").await;
    assert!(
        started.elapsed() > timing.propose_timeout,
        "the first proposal was answered within the deadline: nothing to settle"
    );
    assert_eq!(len_of(&resp), 1);
    let items = c.wait_for_agreement(G, &ids).await;
    assert_eq!(items, vec![Bytes::from_static(b"once")]);
    c.shutdown().await;
}
