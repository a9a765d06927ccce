//! The compact encoding of a [`ConsumerState`] (a record body; the envelope adds version + CRC).
//!
//! Body: varints `delivered.consumer, delivered.stream, floor.consumer, floor.stream, n, base_ts`,
//! then per pending entry in stream order: `stream_seq - previous` (previous starts at the
//! floor), zigzag `consumer_seq - previous consumer_seq`, `deliveries`, `ts - base_ts`.

use crate::StorageError;
use crate::consumer::{ConsumerState, Pending, SequencePair};
use crate::record::{BodyReader, BodyWriter};

const CF: &str = "consumers";

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Encodes a state into a record body.
pub fn encode(s: &ConsumerState) -> Vec<u8> {
    let mut w = BodyWriter::with_capacity(16 + s.pending.len() * 10);
    let base_ts = s
        .pending
        .values()
        .map(|p| p.last_delivered_ns)
        .min()
        .unwrap_or(0);
    w.varint(s.delivered.consumer_seq)
        .varint(s.delivered.stream_seq)
        .varint(s.ack_floor.consumer_seq)
        .varint(s.ack_floor.stream_seq)
        .varint(s.pending.len() as u64)
        .varint(base_ts);
    let mut prev = s.ack_floor.stream_seq;
    let mut prev_c = s.ack_floor.consumer_seq;
    for (&seq, p) in &s.pending {
        w.varint(seq.wrapping_sub(prev))
            .varint(zigzag(p.consumer_seq.wrapping_sub(prev_c) as i64))
            .varint(p.deliveries)
            .varint(p.last_delivered_ns - base_ts);
        prev = seq;
        prev_c = p.consumer_seq;
    }
    w.finish()
}

/// Decodes a record body written by [`encode`].
pub fn decode(body: &[u8]) -> Result<ConsumerState, StorageError> {
    let mut r = BodyReader::new(CF, body);
    let delivered = SequencePair {
        consumer_seq: r.varint()?,
        stream_seq: r.varint()?,
    };
    let ack_floor = SequencePair {
        consumer_seq: r.varint()?,
        stream_seq: r.varint()?,
    };
    let n = r.varint()?;
    let base_ts = r.varint()?;
    let mut s = ConsumerState {
        delivered,
        ack_floor,
        ..Default::default()
    };
    let mut prev = ack_floor.stream_seq;
    let mut prev_c = ack_floor.consumer_seq;
    for _ in 0..n {
        let seq = prev.wrapping_add(r.varint()?);
        let consumer_seq = prev_c.wrapping_add(unzigzag(r.varint()?) as u64);
        let deliveries = r.varint()?;
        let last_delivered_ns = base_ts
            .checked_add(r.varint()?)
            .ok_or_else(|| StorageError::corrupt(CF, "timestamp overflow"))?;
        if s.pending
            .insert(
                seq,
                Pending {
                    consumer_seq,
                    deliveries,
                    last_delivered_ns,
                },
            )
            .is_some()
        {
            return Err(StorageError::corrupt(CF, "duplicate pending sequence"));
        }
        prev = seq;
        prev_c = consumer_seq;
    }
    r.end()?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn state_strategy() -> impl Strategy<Value = ConsumerState> {
        (
            0u64..1_000_000,
            proptest::collection::btree_map(
                1u64..100_000,
                (any::<u64>(), 1u64..20, 0u64..u64::MAX / 2),
                0..50,
            ),
        )
            .prop_map(|(floor, pend)| {
                let pending = pend
                    .into_iter()
                    .map(|(d, (c, n, ts))| {
                        let p = Pending {
                            consumer_seq: c,
                            deliveries: n,
                            last_delivered_ns: ts,
                        };
                        (floor + d, p)
                    })
                    .collect();
                ConsumerState {
                    delivered: SequencePair {
                        consumer_seq: u64::MAX,
                        stream_seq: floor + 100_000,
                    },
                    ack_floor: SequencePair {
                        consumer_seq: floor / 2,
                        stream_seq: floor,
                    },
                    pending,
                }
            })
    }

    proptest! {
        #[test]
        fn round_trips(s in state_strategy()) {
            prop_assert_eq!(decode(&encode(&s)).unwrap(), s);
        }

        #[test]
        fn truncated_bodies_are_corrupt(s in state_strategy(), cut in any::<prop::sample::Index>()) {
            let body = encode(&s);
            let at = cut.index(body.len());
            prop_assert!(decode(&body[..at]).is_err());
        }
    }

    #[test]
    fn hundred_thousand_pending_acks_stay_compact() {
        let mut s = ConsumerState::default();
        let t0 = 1_800_000_000_000_000_000u64;
        for i in 1..=100_000u64 {
            s.record_delivery(i, i, t0 + i * 1_000_000);
        }
        let body = encode(&s);
        assert!(body.len() < 1_000_000, "{} bytes", body.len());
        assert_eq!(decode(&body).unwrap(), s);
    }

    #[test]
    fn zigzag_round_trips_extremes() {
        for v in [0i64, 1, -1, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }
}
