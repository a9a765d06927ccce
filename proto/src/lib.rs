//! `jetraft-proto` owns every encoded form exchanged between nodes (and, later, the Raft log
//! payloads): [`node`] and [`raft`] (Raft RPCs and log entries). It contains generated code and no
//! logic.

/// Node identity and node-to-node control messages.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod node {
    include!(concat!(env!("OUT_DIR"), "/jetraft.node.rs"));
}

/// Meta group log payloads and state: peers and stream placement.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod meta {
    include!(concat!(env!("OUT_DIR"), "/jetraft.meta.rs"));
}

/// Core NATS between nodes: the `NodeLink` service, interest and forwarded messages.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod cluster {
    include!(concat!(env!("OUT_DIR"), "/jetraft.cluster.rs"));
}

/// Raft RPCs between nodes (tonic service) and the Raft log's stored forms.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod raft {
    include!(concat!(env!("OUT_DIR"), "/jetraft.raft.rs"));
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
                ..Default::default()
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

    #[test]
    fn appends_from_before_origin_seq_decode_as_client_publishes() {
        use super::stream::{StreamCommand, stream_command::Cmd};
        // The bytes of `stream_command_bytes_are_stable`, written before fields 5 and 6 existed.
        let old = [0x0a, 0x08, 0x0a, 0x01, b'a', 0x1a, 0x01, b'x', 0x20, 0x05];
        let Some(Cmd::Append(a)) = StreamCommand::decode(old.as_slice()).unwrap().cmd else {
            panic!("not an append");
        };
        assert_eq!((a.origin_seq, a.source_key.as_str()), (0, ""));
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
            server_id: "NABC".into(),
            cluster_addr: "127.0.0.1:6222".into(),
            tags: vec!["az:1".into()],
        };
        let bytes = id.encode_to_vec();
        assert_eq!(NodeIdentity::decode(bytes.as_slice()).unwrap(), id);
    }

    #[test]
    fn identity_from_before_server_id_still_decodes() {
        // Bytes written by the first NodeIdentity (fields 1-4 only).
        let old = NodeIdentity {
            node_id: 7,
            server_name: "n1".into(),
            client_url: "h:1".into(),
            cluster_name: "c".into(),
            ..NodeIdentity::default()
        }
        .encode_to_vec();
        let id = NodeIdentity::decode(old.as_slice()).unwrap();
        assert_eq!(id.node_id, 7);
        assert!(id.server_id.is_empty() && id.cluster_addr.is_empty());
    }

    #[test]
    fn stream_assignment_from_before_joining_still_decodes() {
        use super::meta::StreamAssignment;
        // Bytes of an assignment written before field 7: name "S" (1), uid 3 (2), replicas [1, 2]
        // (4, packed).
        let old = [0x0a, 0x01, b'S', 0x10, 0x03, 0x22, 0x02, 0x01, 0x02];
        let sa = StreamAssignment::decode(old.as_slice()).unwrap();
        assert_eq!((sa.name.as_str(), sa.uid), ("S", 3));
        assert_eq!(sa.replicas, [1, 2]);
        assert!(sa.joining.is_empty());
        let new = StreamAssignment {
            joining: vec![2],
            ..sa
        };
        assert_eq!(
            StreamAssignment::decode(new.encode_to_vec().as_slice()).unwrap(),
            new
        );
    }

    #[test]
    fn cluster_frame_with_msg_batch_round_trips() {
        use super::cluster::{Frame, Msg, MsgBatch, frame::Kind};
        let frame = Frame {
            kind: Some(Kind::Msgs(MsgBatch {
                msgs: vec![Msg {
                    subject: "a.b".into(),
                    reply: "r".into(),
                    headers: Default::default(),
                    payload: "hi".into(),
                    queues: vec!["q".into()],
                    shown_subject: "s.t".into(),
                    account: "A".into(),
                }],
            })),
        };
        let bytes = frame.encode_to_vec();
        assert_eq!(Frame::decode(bytes.as_slice()).unwrap(), frame);
    }
}
