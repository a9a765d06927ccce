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
    fn stream_command_bytes_are_stable() {
        use super::stream::{Append, StreamCommand, stream_command::Cmd};
        let cmd = StreamCommand {
            cmd: Some(Cmd::Append(Append {
                subject: "a".into(),
                headers: bytes_of(b""),
                payload: bytes_of(b"x"),
                timestamp_ns: 5,
            })),
        };
        // Field 1 (append), length 8: subject "a" (field 1), payload "x" (field 3), ts 5 (field 4).
        let encoded = cmd.encode_to_vec();
        assert_eq!(
            encoded,
            [0x0a, 0x08, 0x0a, 0x01, b'a', 0x1a, 0x01, b'x', 0x20, 0x05]
        );
        assert_eq!(StreamCommand::decode(encoded.as_slice()).unwrap(), cmd);
    }

    fn bytes_of(b: &'static [u8]) -> prost::bytes::Bytes {
        prost::bytes::Bytes::from_static(b)
    }

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
