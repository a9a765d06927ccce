//! The meta group (Raft group 0): which nodes form the cluster and where every stream lives.
//!
//! - [`state`]: [`MetaState`](state::MetaState), the pure replicated registry and its `apply`.
//! - [`machine`]: [`MetaMachine`](machine::MetaMachine), the `ReplicatedStateMachine` that
//!   persists it, and [`MetaView`](machine::MetaView), the read handle everyone else holds.
//! - [`formation`]: when a node may initialise the meta group.
//! - [`placement`]: which nodes fit a stream's placement, and replica count changes.

pub mod formation;
pub mod machine;
pub mod placement;
pub mod state;
