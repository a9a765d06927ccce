//! Where a `$JS.API` request is answered: [`route`] is a pure decision over what this node
//! knows when the request arrives ([`Facts`]); `api.rs` gathers the facts, carries out the
//! [`Route`] (answering, forwarding, waiting for an election) and asks again after a wait.
//!
//! The rules (nats-server's, with jetraft's forwarding instead of client-side retries):
//! - The meta leader answers stream create/update/delete, names/list, account info and the
//!   cluster operations; other nodes forward to it. A create, update or delete that arrived
//!   from a client here (not forwarded) is relayed instead, so this node answers only once its
//!   own routing follows the change (`in_force`).
//! - A stream's leader answers the stream's reads and writes; a node hosting no replica forwards
//!   to the first replica (which forwards to the leader if it is not it).
//! - Any replica answers direct gets (the leader only once caught up); a local mirror with
//!   `mirror_direct` answers them for an origin this node does not host.
//! - No leader known: wait once for an election, then refuse (`cluster not available` for the
//!   meta group, `stream offline` for a stream).

use jetraft_raft::{GroupId, NodeId};

use crate::jetstream::api::{ApiError, ErrorKind};
use crate::jetstream::op::{ApiOp, Owner};

/// What this node knows about a request's owner when deciding.
#[derive(Debug, Clone)]
pub(super) struct Facts {
    /// This node.
    pub node: NodeId,
    /// Forwards the request has been through already.
    pub hops: u32,
    /// The meta group's leader, if known here.
    pub meta_leader: Option<NodeId>,
    /// The stream the request names, as the meta state knows it.
    pub stream: Option<StreamFacts>,
    /// A local mirror with `mirror_direct` can answer direct gets for the named stream.
    pub direct_mirror: bool,
    /// The dispatcher already waited for an election for this request.
    pub waited: bool,
}

/// What this node knows about one stream.
#[derive(Debug, Clone, Default)]
pub(super) struct StreamFacts {
    /// Its replicas, in placement order.
    pub replicas: Vec<NodeId>,
    /// Its Raft group, when a current replica runs on this node.
    pub local_group: Option<GroupId>,
    /// Its group's leader as seen from this node (known only where a replica runs).
    pub leader: Option<NodeId>,
}

/// What to do with a request.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Route {
    /// Answer here as the leader of this group (after catching up with its log).
    AsLeader(GroupId),
    /// Answer a direct get from the local mirror of the named stream.
    FromMirror,
    /// Ask the meta leader and relay its answer once this node routes by it.
    RelayInForce(NodeId),
    /// Send the request to this node (refuse with `cluster not available` if that fails).
    Forward(NodeId),
    /// Wait for the meta group (`None`) or this stream group to elect a leader, then decide
    /// again with [`Facts::waited`] set.
    WaitForLeader(Option<GroupId>),
    /// Hand a pull request for an unknown stream to the consumer code, which answers it with
    /// the pull status nats-server sends.
    PullForUnknownStream,
    /// Send no answer (nats-server leaves a direct get of an unknown stream unanswered).
    Ignore,
    /// Answer with this error.
    Refuse(ApiError),
}

/// Decides where `op` is answered. `relays_in_force` says whether `op` is a change whose answer
/// waits until the client's node routes by it (see `in_force`).
pub(super) fn route(op: &ApiOp, facts: &Facts, relays_in_force: bool) -> Route {
    match op.owner() {
        Owner::MetaLeader => match facts.meta_leader {
            Some(l) if l == facts.node => Route::AsLeader(GroupId::META),
            Some(l) if facts.hops == 0 && relays_in_force => Route::RelayInForce(l),
            Some(l) => Route::Forward(l),
            None if facts.waited => Route::Refuse(ApiError::new(ErrorKind::ClusterNotAvail)),
            None => Route::WaitForLeader(None),
        },
        Owner::StreamLeader => stream_route(op, facts),
    }
}

fn stream_route(op: &ApiOp, facts: &Facts) -> Route {
    let direct = matches!(op, ApiOp::DirectGet(_) | ApiOp::DirectGetLast(..));
    let local_group = facts.stream.as_ref().and_then(|s| s.local_group);
    if direct && local_group.is_none() && facts.direct_mirror {
        return Route::FromMirror;
    }
    let Some(stream) = &facts.stream else {
        return match op {
            _ if direct => Route::Ignore,
            ApiOp::ConsumerNext(..) => Route::PullForUnknownStream,
            _ => Route::Refuse(ApiError::stream_not_found()),
        };
    };
    let Some(group) = local_group else {
        return match stream.replicas.first() {
            Some(first) => Route::Forward(*first),
            None => Route::Refuse(ApiError::new(ErrorKind::ClusterNotAvail)),
        };
    };
    match stream.leader {
        Some(l) if l == facts.node => Route::AsLeader(group),
        Some(l) => Route::Forward(l),
        // A direct get has no JSON error to answer with; nats-server's goes unanswered too.
        None if facts.waited && direct => Route::Ignore,
        None if facts.waited => Route::Refuse(ApiError::new(ErrorKind::StreamOffline)),
        None => Route::WaitForLeader(Some(group)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: NodeId = NodeId(1);
    const OTHER: NodeId = NodeId(2);
    const THIRD: NodeId = NodeId(3);
    const GROUP: GroupId = GroupId(7);

    fn facts() -> Facts {
        Facts {
            node: ME,
            hops: 0,
            meta_leader: None,
            stream: None,
            direct_mirror: false,
            waited: false,
        }
    }

    fn hosted(leader: Option<NodeId>) -> Option<StreamFacts> {
        Some(StreamFacts {
            replicas: vec![OTHER, ME, THIRD],
            local_group: Some(GROUP),
            leader,
        })
    }

    fn elsewhere() -> Option<StreamFacts> {
        Some(StreamFacts {
            replicas: vec![THIRD, OTHER],
            local_group: None,
            leader: None,
        })
    }

    fn err_code(r: &Route) -> Option<u16> {
        match r {
            Route::Refuse(e) => Some(e.err_code),
            _ => None,
        }
    }

    #[test]
    fn meta_requests_go_to_the_meta_leader() {
        let create = ApiOp::StreamCreate("S".into());
        let names = ApiOp::StreamNames;
        let mut f = facts();
        f.meta_leader = Some(ME);
        assert_eq!(route(&create, &f, true), Route::AsLeader(GroupId::META));
        f.meta_leader = Some(OTHER);
        assert_eq!(route(&create, &f, true), Route::RelayInForce(OTHER));
        assert_eq!(route(&names, &f, false), Route::Forward(OTHER));
        // Forwarded already: the node it came through relays; this one only forwards.
        f.hops = 1;
        assert_eq!(route(&create, &f, true), Route::Forward(OTHER));
    }

    #[test]
    fn no_meta_leader_waits_once_then_refuses() {
        let op = ApiOp::AccountInfo;
        let mut f = facts();
        assert_eq!(route(&op, &f, false), Route::WaitForLeader(None));
        f.waited = true;
        let cluster_not_avail = ApiError::new(ErrorKind::ClusterNotAvail).err_code;
        assert_eq!(err_code(&route(&op, &f, false)), Some(cluster_not_avail));
    }

    #[test]
    fn stream_requests_go_to_the_stream_leader() {
        let info = ApiOp::StreamInfo("S".into());
        let mut f = facts();
        f.stream = hosted(Some(ME));
        assert_eq!(route(&info, &f, false), Route::AsLeader(GROUP));
        f.stream = hosted(Some(OTHER));
        assert_eq!(route(&info, &f, false), Route::Forward(OTHER));
        // Not hosted here: the first replica takes it (and forwards to its leader).
        f.stream = elsewhere();
        assert_eq!(route(&info, &f, false), Route::Forward(THIRD));
        // Placed nowhere (a stream whose replicas were all removed).
        f.stream = Some(StreamFacts::default());
        let cluster_not_avail = ApiError::new(ErrorKind::ClusterNotAvail).err_code;
        assert_eq!(err_code(&route(&info, &f, false)), Some(cluster_not_avail));
    }

    #[test]
    fn a_leaderless_stream_waits_once_then_is_offline() {
        let purge = ApiOp::StreamPurge("S".into());
        let mut f = facts();
        f.stream = hosted(None);
        assert_eq!(route(&purge, &f, false), Route::WaitForLeader(Some(GROUP)));
        f.waited = true;
        let offline = ApiError::new(ErrorKind::StreamOffline).err_code;
        assert_eq!(err_code(&route(&purge, &f, false)), Some(offline));
    }

    #[test]
    fn unknown_streams() {
        let f = facts();
        let not_found = ApiError::stream_not_found().err_code;
        assert_eq!(
            err_code(&route(&ApiOp::StreamInfo("S".into()), &f, false)),
            Some(not_found)
        );
        assert_eq!(
            route(&ApiOp::DirectGet("S".into()), &f, false),
            Route::Ignore
        );
        assert_eq!(
            route(&ApiOp::ConsumerNext("S".into(), "C".into()), &f, false),
            Route::PullForUnknownStream
        );
    }

    #[test]
    fn direct_gets_are_answered_by_the_leader_or_a_local_mirror() {
        let get = ApiOp::DirectGetLast("S".into(), "a.b".into());
        let mut f = facts();
        // A follower passes it to the leader (its copy may lag an acknowledged write).
        f.stream = hosted(Some(OTHER));
        assert_eq!(route(&get, &f, false), Route::Forward(OTHER));
        f.stream = hosted(Some(ME));
        assert_eq!(route(&get, &f, false), Route::AsLeader(GROUP));
        // Not hosted here, but a local mirror answers for it.
        f.stream = elsewhere();
        f.direct_mirror = true;
        assert_eq!(route(&get, &f, false), Route::FromMirror);
        // Hosted here: the stream's own group answers, not the mirror; without a leader it
        // waits for one, and after that goes unanswered (no JSON error for a direct get).
        f.stream = hosted(None);
        assert_eq!(route(&get, &f, false), Route::WaitForLeader(Some(GROUP)));
        f.waited = true;
        assert_eq!(route(&get, &f, false), Route::Ignore);
        // Not hosted and no mirror: forwarded to a replica.
        f.waited = false;
        f.stream = elsewhere();
        f.direct_mirror = false;
        assert_eq!(route(&get, &f, false), Route::Forward(THIRD));
    }
}
