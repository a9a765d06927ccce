//! Key encodings. Every integer is big-endian so that RocksDB's byte order is numeric order,
//! which makes range scans and `delete_range` over a group or stream correct.
//!
//! Shapes (DESIGN.md section 4):
//! - `raft_log`: `group_id | index` (16 bytes).
//! - `raft_state`: `group_id | kind` (9 bytes), kinds [`RAFT_VOTE`], [`RAFT_COMMITTED`],
//!   [`RAFT_PURGED`].
//! - `msgs`: `stream_uid | seq` (16 bytes).
//! - `subjects`: `stream_uid | subject | 0x00 | seq`. Subjects never contain NUL (the stores
//!   reject them), so all keys of one subject are contiguous and seq-ordered (last-by-subject is
//!   one reverse seek, next-by-subject one forward seek), and subjects sort lexicographically.
//! - `consumers`: `stream_uid | name`.
//! - `sm_meta`: `id | kind` (9 bytes): [`META_STREAM`] (a stream's counters, keyed by stream uid),
//!   [`META_INSTALL`] and [`META_INSTALL_COMMIT`] (markers of a snapshot install, keyed by the
//!   stream's [`staging_id`]; [`META_INSTALL`] keyed by the stream uid itself is the marker of
//!   the earlier in-place install, still refused at open),
//!   [`META_WRITE_TAG`] (the caller's tag of the stream's last write, keyed by stream uid),
//!   [`META_RESTORE`] (a state-machine restore in progress, keyed by stream uid), and
//!   kinds from [`META_USER_MIN`] up for the stream state machine's own records.
//!
//! Changing anything here is a `DataChange:` commit with a decode test on old bytes.

/// Length in bytes of a `(prefix, index)` key.
pub const PREFIXED_U64_LEN: usize = 16;

/// `raft_state` kind: the vote.
pub const RAFT_VOTE: u8 = 1;
/// `raft_state` kind: the committed log id.
pub const RAFT_COMMITTED: u8 = 2;
/// `raft_state` kind: the last purged log id.
pub const RAFT_PURGED: u8 = 3;
/// `sm_meta` kind: a stream's persisted counters.
pub const META_STREAM: u8 = 0x10;
/// `sm_meta` kind: a snapshot install in progress for this stream.
pub const META_INSTALL: u8 = 0x11;
/// `sm_meta` kind (under the stream's [`staging_id`]): a snapshot install whose data is
/// complete and durable in the staging range and must replace the stream's data.
pub const META_INSTALL_COMMIT: u8 = 0x13;
/// `sm_meta` kind: the write tag ([`crate::stream::StreamStore::set_write_tag`]) that was current
/// when the stream's last mutation was written; rewritten in the same batch as every mutation.
pub const META_WRITE_TAG: u8 = 0x12;
/// `sm_meta` kind: a restore that replaces the stream's whole state is in progress
/// ([`crate::stream::StreamStore::begin_restore`]); written synced before the old state is
/// touched and deleted in the batch that completes the restore, so a store holding it was left
/// part-restored by a crash: refused at open, damage for [`crate::verify::check_store`].
pub const META_RESTORE: u8 = 0x14;
/// `sm_meta` kinds from here up belong to the stream's state machine
/// ([`crate::rocks::RocksStreamStore::put_meta`]), e.g. its applied log id; they travel with
/// snapshots.
pub const META_USER_MIN: u8 = 0x20;

/// The id under which a snapshot install stages stream `uid`'s incoming data: the uid with all
/// bits inverted. Stream uids are random, so no stream lives there.
pub fn staging_id(uid: u64) -> u64 {
    !uid
}

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

/// Encodes `id | kind`, the shape of `raft_state` and `sm_meta` keys.
pub fn kind_key(id: u64, kind: u8) -> [u8; 9] {
    let mut key = [0u8; 9];
    key[..8].copy_from_slice(&id.to_be_bytes());
    key[8] = kind;
    key
}

/// The first key after every key that starts with `id` (8 bytes): the exclusive end of the id's
/// range. For `id == u64::MAX` it is 17 bytes of `0xff`, which still sorts after every key shape
/// above (UTF-8 subjects never contain `0xff`).
pub fn id_range_end(id: u64) -> Vec<u8> {
    match id.checked_add(1) {
        Some(next) => next.to_be_bytes().to_vec(),
        None => vec![0xff; 17],
    }
}

/// `stream_uid | subject | 0x00 | seq`.
pub fn subject_index(uid: u64, subject: &str, seq: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(8 + subject.len() + 9);
    key.extend_from_slice(&uid.to_be_bytes());
    key.extend_from_slice(subject.as_bytes());
    key.push(0);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// `stream_uid | subject | 0x00`: the prefix of every index key of one literal subject.
pub fn subject_prefix(uid: u64, subject: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(8 + subject.len() + 1);
    key.extend_from_slice(&uid.to_be_bytes());
    key.extend_from_slice(subject.as_bytes());
    key.push(0);
    key
}

/// Splits a `subjects` key into `(uid, subject, seq)`; `None` if malformed.
pub fn decode_subject_index(key: &[u8]) -> Option<(u64, &str, u64)> {
    if key.len() < 8 + 1 + 8 {
        return None;
    }
    let uid = u64::from_be_bytes(key[..8].try_into().ok()?);
    let (rest, seq) = key[8..].split_at(key.len() - 16);
    let (subject, nul) = rest.split_at(rest.len() - 1);
    if nul != [0] {
        return None;
    }
    let subject = std::str::from_utf8(subject).ok()?;
    Some((uid, subject, u64::from_be_bytes(seq.try_into().ok()?)))
}

/// `stream_uid | name`.
pub fn consumer(uid: u64, name: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(8 + name.len());
    key.extend_from_slice(&uid.to_be_bytes());
    key.extend_from_slice(name.as_bytes());
    key
}

/// Marks a consumer's config record: `stream_uid | CONSUMER_CONFIG | name`. UTF-8 never holds
/// the byte 0xFF, so no state key ([`consumer`]) starts like this, and the config records of a
/// stream sort after all its states.
pub const CONSUMER_CONFIG: u8 = 0xFF;

/// `stream_uid | CONSUMER_CONFIG | name`: a consumer's config record.
pub fn consumer_config(uid: u64, name: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(9 + name.len());
    key.extend_from_slice(&uid.to_be_bytes());
    key.push(CONSUMER_CONFIG);
    key.extend_from_slice(name.as_bytes());
    key
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

        #[test]
        fn kind_key_order_is_numeric_order(a in any::<(u64, u8)>(), b in any::<(u64, u8)>()) {
            prop_assert_eq!(kind_key(a.0, a.1).cmp(&kind_key(b.0, b.1)), a.cmp(&b));
        }

        #[test]
        fn subject_index_orders_by_uid_subject_then_seq(
            a in (any::<u64>(), "[a-c.]{1,6}", any::<u64>()),
            b in (any::<u64>(), "[a-c.]{1,6}", any::<u64>()),
        ) {
            let ka = subject_index(a.0, &a.1, a.2);
            let kb = subject_index(b.0, &b.1, b.2);
            prop_assert_eq!(ka.cmp(&kb), (a.0, a.1.as_bytes(), a.2).cmp(&(b.0, b.1.as_bytes(), b.2)));
            prop_assert_eq!(decode_subject_index(&ka), Some((a.0, a.1.as_str(), a.2)));
            prop_assert!(ka.starts_with(&subject_prefix(a.0, &a.1)));
        }

        #[test]
        fn id_range_end_bounds_every_key_of_the_id(id in 0u64..u64::MAX, i in any::<u64>()) {
            let end = id_range_end(id);
            prop_assert!(prefixed_u64(id, i).as_slice() < end.as_slice());
            prop_assert!(id.to_be_bytes().as_slice() < end.as_slice());
        }
    }

    #[test]
    fn wrong_length_is_rejected() {
        assert_eq!(decode_prefixed_u64(&[0u8; 15]), None);
        assert_eq!(decode_subject_index(&[0u8; 10]), None);
    }

    #[test]
    fn pinned_key_bytes() {
        assert_eq!(
            prefixed_u64(1, 2),
            [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2]
        );
        assert_eq!(kind_key(1, RAFT_VOTE), [0, 0, 0, 0, 0, 0, 0, 1, 1]);
        assert_eq!(
            subject_index(1, "a", 2),
            [0, 0, 0, 0, 0, 0, 0, 1, b'a', 0, 0, 0, 0, 0, 0, 0, 0, 2]
        );
    }
}
