//! `jetraft-proto` owns every encoded form exchanged between nodes (and, later, the Raft log
//! payloads). It contains generated code and no logic.

/// Node identity and node-to-node control messages.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod node {
    include!(concat!(env!("OUT_DIR"), "/jetraft.node.rs"));
}

/// Stream-group Raft commands and stream snapshots.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod stream {
    include!(concat!(env!("OUT_DIR"), "/jetraft.stream.rs"));
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::node::NodeIdentity;

    #[test]
    fn node_identity_round_trips() {
        let id = NodeIdentity {
            node_id: u64::MAX - 1,
            server_name: "n1".into(),
            client_url: "127.0.0.1:4222".into(),
            cluster_name: "c".into(),
        };
        let bytes = id.encode_to_vec();
        assert_eq!(NodeIdentity::decode(bytes.as_slice()).unwrap(), id);
    }
}
