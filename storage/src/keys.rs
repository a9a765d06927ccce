//! Key encodings. Every integer is big-endian so that RocksDB's byte order is numeric order,
//! which makes range scans and `delete_range` over a group or stream correct.

/// Length in bytes of a `(prefix, index)` key.
pub const PREFIXED_U64_LEN: usize = 16;

/// Encodes `prefix | index` (both u64, big-endian), the shape of `raft_log` and `msgs` keys.
pub fn prefixed_u64(prefix: u64, index: u64) -> [u8; PREFIXED_U64_LEN] {
    let mut key = [0u8; PREFIXED_U64_LEN];
    key[..8].copy_from_slice(&prefix.to_be_bytes());
    key[8..].copy_from_slice(&index.to_be_bytes());
    key
}

/// Decodes a key written by [`prefixed_u64`]; `None` when the length is wrong.
pub fn decode_prefixed_u64(key: &[u8]) -> Option<(u64, u64)> {
    if key.len() != PREFIXED_U64_LEN {
        return None;
    }
    let (p, i) = key.split_at(8);
    Some((
        u64::from_be_bytes(p.try_into().ok()?),
        u64::from_be_bytes(i.try_into().ok()?),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn byte_order_is_numeric_order(a in any::<(u64, u64)>(), b in any::<(u64, u64)>()) {
            let ka = prefixed_u64(a.0, a.1);
            let kb = prefixed_u64(b.0, b.1);
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
        }

        #[test]
        fn round_trips(p in any::<u64>(), i in any::<u64>()) {
            prop_assert_eq!(decode_prefixed_u64(&prefixed_u64(p, i)), Some((p, i)));
        }
    }

    #[test]
    fn wrong_length_is_rejected() {
        assert_eq!(decode_prefixed_u64(&[0u8; 15]), None);
    }
}
