//! Cluster formation: when a node may initialise the meta group (DESIGN §5).
//!
//! Rule: a node without meta state waits until it has heard from every configured peer. If none
//! of them has meta state either, the node with the smallest id initialises the meta group with
//! all of them; everyone else waits to be added. If some peer has meta state, the cluster exists
//! and this node waits for the meta leader to add it (as learner, then voter). A node without
//! routes is a one-member cluster and initialises itself.
//!
//! Pure function of what the node knows; the caller re-evaluates whenever its peer view changes.

/// What this node knows about one configured peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerStatus {
    /// The peer's node id.
    pub node_id: u64,
    /// Whether the peer reported existing meta state (it has been part of a cluster).
    pub has_meta_state: bool,
}

/// The formation decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Formation {
    /// This node already has meta state: nothing to form.
    Member,
    /// Initialise the meta group with these voters (sorted, including this node).
    Initialize(Vec<u64>),
    /// Not enough is known yet, or another node initialises, or the existing cluster will add
    /// this node: wait and re-evaluate.
    Wait,
}

/// Decides what a node does about the meta group.
///
/// `expected_peers` is the number of *other* nodes in the configured routes; `heard` holds the
/// peers this node has exchanged identities with.
pub fn decide(
    me: u64,
    has_meta_state: bool,
    expected_peers: usize,
    heard: &[PeerStatus],
) -> Formation {
    if has_meta_state {
        return Formation::Member;
    }
    if heard.iter().any(|p| p.has_meta_state) {
        return Formation::Wait;
    }
    let mut ids: Vec<u64> = heard
        .iter()
        .map(|p| p.node_id)
        .filter(|id| *id != me)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() < expected_peers {
        return Formation::Wait;
    }
    if ids.first().is_some_and(|smallest| *smallest < me) {
        return Formation::Wait;
    }
    ids.push(me);
    ids.sort_unstable();
    Formation::Initialize(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh(id: u64) -> PeerStatus {
        PeerStatus {
            node_id: id,
            has_meta_state: false,
        }
    }

    #[test]
    fn lone_node_initialises_itself() {
        assert_eq!(decide(7, false, 0, &[]), Formation::Initialize(vec![7]));
    }

    #[test]
    fn smallest_id_initialises_once_everyone_is_heard() {
        assert_eq!(decide(1, false, 2, &[fresh(5)]), Formation::Wait);
        assert_eq!(
            decide(1, false, 2, &[fresh(5), fresh(3)]),
            Formation::Initialize(vec![1, 3, 5])
        );
        assert_eq!(decide(3, false, 2, &[fresh(5), fresh(1)]), Formation::Wait);
    }

    #[test]
    fn existing_cluster_means_wait_to_be_added() {
        let member = PeerStatus {
            node_id: 2,
            has_meta_state: true,
        };
        assert_eq!(decide(1, false, 2, &[member, fresh(3)]), Formation::Wait);
        assert_eq!(decide(1, true, 2, &[]), Formation::Member);
    }

    #[test]
    fn self_listed_in_routes_is_ignored() {
        assert_eq!(
            decide(4, false, 1, &[fresh(4), fresh(9)]),
            Formation::Initialize(vec![4, 9])
        );
    }
}
