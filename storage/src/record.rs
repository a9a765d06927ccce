//! The versioned, checksummed envelope around every stored value, and a tiny binary body codec.
//!
//! Layout: `version (1 byte) | crc32 (4 bytes, big-endian) | body`. The CRC (crc32fast, IEEE)
//! covers the version byte, the **key** and the body, so a value copied under the wrong key, a
//! flipped key byte or a flipped value byte are all detected.
//!
//! Invariants:
//! - [`open`] is the only way to get at a stored body; it returns [`StorageError::Corrupt`] on any
//!   mismatch and never hands out unchecked bytes.
//! - Version 1 is the only version; a reader seeing an unknown version reports corruption rather
//!   than guessing. A new version must keep decoding version 1.

use crate::StorageError;

/// The record format version written today.
pub const VERSION: u8 = 1;
/// Bytes in front of the body.
pub const HEADER_LEN: usize = 5;

fn checksum(version: u8, key: &[u8], body: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&[version]);
    h.update(&(key.len() as u32).to_be_bytes());
    h.update(key);
    h.update(body);
    h.finalize()
}

/// Wraps `body` stored under `key` in the envelope.
pub fn seal(key: &[u8], body: &[u8]) -> Vec<u8> {
    seal_with(key, body.len(), |out| out.extend_from_slice(body))
}

/// [`seal`] for a body that `write` appends straight into the record: no copy of the body.
pub fn seal_with(key: &[u8], capacity: usize, write: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = open_record(capacity);
    write(&mut out);
    close_record(out, key)
}

/// An empty record with room for a `capacity`-byte body: the header, still zero.
fn open_record(capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + capacity);
    out.resize(HEADER_LEN, 0);
    out
}

/// Fills in the header of a record made by [`open_record`] whose body is written.
fn close_record(mut out: Vec<u8>, key: &[u8]) -> Vec<u8> {
    let sum = checksum(VERSION, key, &out[HEADER_LEN..]);
    out[0] = VERSION;
    out[1..HEADER_LEN].copy_from_slice(&sum.to_be_bytes());
    out
}

/// Checks the envelope of `value` stored under `key` and returns the body.
pub fn open<'a>(cf: &'static str, key: &[u8], value: &'a [u8]) -> Result<&'a [u8], StorageError> {
    if value.len() < HEADER_LEN {
        return Err(StorageError::corrupt(
            cf,
            format!("record of {} bytes", value.len()),
        ));
    }
    let (head, body) = value.split_at(HEADER_LEN);
    let version = head[0];
    if version != VERSION {
        return Err(StorageError::corrupt(
            cf,
            format!("unknown record version {version}"),
        ));
    }
    let stored = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
    let actual = checksum(version, key, body);
    if stored != actual {
        return Err(StorageError::corrupt(
            cf,
            format!("checksum mismatch (stored {stored:08x}, computed {actual:08x})"),
        ));
    }
    Ok(body)
}

/// Appends big-endian fixed-width fields and length-prefixed byte strings to a body.
#[derive(Debug, Default)]
pub struct BodyWriter {
    buf: Vec<u8>,
}

impl BodyWriter {
    /// An empty body with room for `cap` bytes.
    pub fn with_capacity(cap: usize) -> Self {
        Self {
            buf: Vec::with_capacity(cap),
        }
    }
    /// Appends one byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    /// Appends a big-endian u32.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    /// Appends a big-endian u64.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    /// Appends an LEB128 varint.
    pub fn varint(&mut self, mut v: u64) -> &mut Self {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
        self
    }
    /// Appends a u32 length followed by the bytes.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.buf.extend_from_slice(v);
        self
    }
    /// The finished body.
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }

    /// A body written straight into a record ([`BodyWriter::seal`]), with room for `cap` bytes.
    pub fn for_record(cap: usize) -> Self {
        Self {
            buf: open_record(cap),
        }
    }

    /// The record of a body started with [`BodyWriter::for_record`], stored under `key`: what
    /// [`seal`] makes of the same body, without copying it.
    pub fn seal(self, key: &[u8]) -> Vec<u8> {
        close_record(self.buf, key)
    }
}

/// Reads what a [`BodyWriter`] wrote; every short read is a [`StorageError::Corrupt`].
#[derive(Debug)]
pub struct BodyReader<'a> {
    cf: &'static str,
    rest: &'a [u8],
}

impl<'a> BodyReader<'a> {
    /// Reads `body` of a record from column family `cf` (named in errors).
    pub fn new(cf: &'static str, body: &'a [u8]) -> Self {
        Self { cf, rest: body }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], StorageError> {
        if self.rest.len() < n {
            return Err(StorageError::corrupt(self.cf, "record body too short"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }
    /// Reads one byte.
    pub fn u8(&mut self) -> Result<u8, StorageError> {
        Ok(self.take(1)?[0])
    }
    /// Reads a big-endian u32.
    pub fn u32(&mut self) -> Result<u32, StorageError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// Reads a big-endian u64.
    pub fn u64(&mut self) -> Result<u64, StorageError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(a))
    }
    /// Reads an LEB128 varint (at most 10 bytes).
    pub fn varint(&mut self) -> Result<u64, StorageError> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.u8()?;
            if shift == 63 && b > 1 {
                return Err(StorageError::corrupt(self.cf, "varint overflow"));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(StorageError::corrupt(self.cf, "varint too long"))
    }
    /// Reads a u32-length-prefixed byte string.
    pub fn bytes(&mut self) -> Result<&'a [u8], StorageError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// Reads a length-prefixed UTF-8 string.
    pub fn str(&mut self) -> Result<&'a str, StorageError> {
        let b = self.bytes()?;
        std::str::from_utf8(b).map_err(|_| StorageError::corrupt(self.cf, "subject is not UTF-8"))
    }
    /// True when every byte was consumed.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
    /// Fails unless every byte was consumed.
    pub fn end(self) -> Result<(), StorageError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(StorageError::corrupt(self.cf, "trailing bytes in record"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn seal_open_round_trips(key in proptest::collection::vec(any::<u8>(), 0..32),
                                 body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let v = seal(&key, &body);
            prop_assert_eq!(open("t", &key, &v).unwrap(), &body[..]);
        }

        #[test]
        fn any_single_bit_flip_is_detected(body in proptest::collection::vec(any::<u8>(), 0..64),
                                           pos in any::<prop::sample::Index>(), bit in 0u8..8) {
            let key = b"key";
            let mut v = seal(key, &body);
            let i = pos.index(v.len());
            v[i] ^= 1 << bit;
            let detected = matches!(open("t", key, &v), Err(StorageError::Corrupt { .. }));
            prop_assert!(detected);
        }

        #[test]
        fn varints_round_trip(v in any::<u64>()) {
            let mut w = BodyWriter::default();
            w.varint(v);
            let body = w.finish();
            let mut r = BodyReader::new("t", &body);
            prop_assert_eq!(r.varint().unwrap(), v);
            r.end().unwrap();
        }
    }

    #[test]
    fn bodies_written_into_the_record_seal_exactly_as_copied_ones() {
        for body in [&b""[..], b"x", b"a longer body than the capacity hint"] {
            // The layout by hand: version, CRC over version, key length, key and body, body.
            let mut h = crc32fast::Hasher::new();
            h.update(&[VERSION]);
            h.update(&3u32.to_be_bytes());
            h.update(b"key");
            h.update(body);
            let mut copied = vec![VERSION];
            copied.extend_from_slice(&h.finalize().to_be_bytes());
            copied.extend_from_slice(body);
            assert_eq!(seal(b"key", body), copied);
            assert_eq!(
                seal_with(b"key", 4, |out| out.extend_from_slice(body)),
                copied
            );
            let mut w = BodyWriter::for_record(0);
            w.bytes(body);
            let mut plain = BodyWriter::default();
            plain.bytes(body);
            assert_eq!(w.seal(b"key"), seal(b"key", &plain.finish()));
            assert_eq!(open("t", b"key", &copied).unwrap(), body);
        }
    }

    #[test]
    fn value_under_another_key_is_corrupt() {
        let v = seal(b"a", b"body");
        assert!(matches!(
            open("t", b"b", &v),
            Err(StorageError::Corrupt { .. })
        ));
    }

    #[test]
    fn short_and_unknown_version_records_are_corrupt() {
        assert!(open("t", b"k", &[1, 2]).is_err());
        let mut v = seal(b"k", b"x");
        v[0] = 9;
        assert!(open("t", b"k", &v).is_err());
    }

    #[test]
    fn short_body_reads_fail() {
        let mut r = BodyReader::new("t", &[0, 0, 0, 9, 1]);
        assert!(r.bytes().is_err());
    }

    #[test]
    fn version_1_bytes_still_decode() {
        // Pinned bytes of a version-1 record: a format change must keep decoding these.
        let v = [1u8, 204, 252, 164, 0, 104, 105];
        assert_eq!(seal(b"k", b"hi"), v);
        assert_eq!(open("t", b"k", &v).unwrap(), b"hi");
    }
}
