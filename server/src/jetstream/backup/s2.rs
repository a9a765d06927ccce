//! The S2 stream format (klauspost/compress `s2`, the compression nats-server wraps its stream
//! backups in): Snappy's framing with its own stream identifier, blocks up to 4 MiB and one
//! extension in the block format (a copy with offset 0 repeats the previous offset).
//!
//! Framing: a stream identifier chunk (`ff 06 00 00 "S2sTwO"`, or Snappy's `"sNaPpY"`, which
//! S2 readers accept too), then chunks of `type (1 byte) | length (3 bytes LE) | body`. Data
//! chunks carry the masked CRC-32C of their uncompressed bytes first: `0x00` a compressed
//! block, `0x01` the bytes as they are. `0x80..=0xfe` chunks are skipped (padding, the seek
//! index `0x99`); `0x02..=0x7f` are reserved and refused.
//!
//! [`Encoder`] writes 64 KiB blocks with a greedy hash-table matcher emitting only Snappy tags
//! (valid S2, which is a superset), falling back to an uncompressed chunk when compression does
//! not pay. [`Decoder`] reads both identifiers and every S2 tag. Every length and offset is
//! checked: corrupt input is an [`S2Error`], never a panic or an unbounded allocation.

/// Snappy framing's stream identifier body for S2.
const S2_MAGIC: &[u8] = b"S2sTwO";
/// Snappy's own stream identifier body (S2 readers accept it too).
const SNAPPY_MAGIC: &[u8] = b"sNaPpY";
/// The largest block an S2 stream may hold.
const MAX_BLOCK: usize = 4 << 20;
/// The largest block a Snappy-framed stream may hold.
const MAX_SNAPPY_BLOCK: usize = 1 << 16;
/// The block size [`Encoder`] writes (keeps every copy offset below 65,536).
const BLOCK: usize = 1 << 16;

/// Why an S2 stream could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum S2Error {
    /// The stream does not start with a stream identifier chunk.
    #[error("s2: missing stream identifier")]
    NoIdentifier,
    /// A chunk type reserved by the format.
    #[error("s2: unknown chunk type {0:#04x}")]
    UnknownChunk(u8),
    /// A chunk or block whose lengths or copies do not add up.
    #[error("s2: corrupt input ({0})")]
    Corrupt(&'static str),
    /// A chunk whose checksum does not match its bytes.
    #[error("s2: checksum mismatch")]
    Checksum,
}

/// The CRC-32C (Castagnoli) table, built at compile time.
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ 0x82f6_3b78
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// CRC-32C of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for b in data {
        c = CRC_TABLE[((c ^ u32::from(*b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// The checksum Snappy framing stores: the CRC rotated and offset, so a CRC of CRCs differs.
fn masked_crc(data: &[u8]) -> u32 {
    let c = crc32c(data);
    (c.rotate_right(15)).wrapping_add(0xa282_ead8)
}

/// Writes an S2 stream: the identifier, then one chunk per 64 KiB of input.
#[derive(Debug, Default)]
pub struct Encoder {
    /// Encoded output not yet taken.
    out: Vec<u8>,
    /// Input not yet encoded (less than one block).
    pending: Vec<u8>,
    /// Whether the stream identifier was written.
    started: bool,
}

impl Encoder {
    /// An encoder with nothing written yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `data` to the stream; whole blocks are encoded at once.
    pub fn write(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let room = BLOCK - self.pending.len();
            let (now, rest) = data.split_at(room.min(data.len()));
            self.pending.extend_from_slice(now);
            data = rest;
            if self.pending.len() == BLOCK {
                self.flush();
            }
        }
    }

    /// Encodes whatever input is pending as a (short) block.
    pub fn flush(&mut self) {
        if !self.started {
            self.out.extend_from_slice(&[0xff, 6, 0, 0]);
            self.out.extend_from_slice(S2_MAGIC);
            self.started = true;
        }
        if self.pending.is_empty() {
            return;
        }
        let block = std::mem::take(&mut self.pending);
        let crc = masked_crc(&block);
        let compressed = compress_block(&block);
        let (kind, body) = if compressed.len() < block.len() {
            (0x00, compressed.as_slice())
        } else {
            (0x01, block.as_slice())
        };
        let len = body.len() + 4;
        self.out.push(kind);
        self.out
            .extend_from_slice(&u32::try_from(len).unwrap_or(0).to_le_bytes()[..3]);
        self.out.extend_from_slice(&crc.to_le_bytes());
        self.out.extend_from_slice(body);
        self.pending = block;
        self.pending.clear();
    }

    /// Takes the encoded bytes written so far.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Encoded bytes waiting to be taken.
    pub fn buffered(&self) -> usize {
        self.out.len()
    }

    /// Flushes the pending input and returns everything not taken yet.
    pub fn finish(mut self) -> Vec<u8> {
        self.flush();
        self.out
    }
}

/// Appends `v` as an unsigned LEB128 varint (Go's `binary.PutUvarint`).
pub(super) fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Snappy block compression: greedy matching of 4-byte sequences through a hash table.
fn compress_block(src: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(src.len() / 2 + 16);
    put_uvarint(&mut out, src.len() as u64);
    if src.len() < 16 {
        emit_literal(&mut out, src);
        return out;
    }
    const HASH_BITS: u32 = 14;
    let mut table = vec![0u32; 1 << HASH_BITS];
    let load = |i: usize| u32::from_le_bytes([src[i], src[i + 1], src[i + 2], src[i + 3]]);
    let hash = |v: u32| (v.wrapping_mul(0x1e35_a7bd) >> (32 - HASH_BITS)) as usize;
    let mut lit_start = 0;
    let mut i = 1;
    // Leave room so every 4-byte load stays inside `src`.
    let limit = src.len() - 4;
    while i < limit {
        let v = load(i);
        let h = hash(v);
        let candidate = table[h] as usize;
        table[h] = i as u32;
        if candidate < i && i - candidate < BLOCK && load(candidate) == v {
            let mut len = 4;
            while i + len < src.len() && src[candidate + len] == src[i + len] {
                len += 1;
            }
            emit_literal(&mut out, &src[lit_start..i]);
            emit_copy(&mut out, i - candidate, len);
            i += len;
            lit_start = i;
        } else {
            i += 1;
        }
    }
    emit_literal(&mut out, &src[lit_start..]);
    out
}

/// Appends a literal run (nothing for an empty one).
fn emit_literal(out: &mut Vec<u8>, lit: &[u8]) {
    if lit.is_empty() {
        return;
    }
    let n = lit.len() - 1;
    if n < 60 {
        out.push((n as u8) << 2);
    } else {
        let bytes = (n as u64).to_le_bytes();
        let width = match n {
            0..=0xff => 1,
            0x100..=0xffff => 2,
            0x1_0000..=0xff_ffff => 3,
            _ => 4,
        };
        out.push(((59 + width) as u8) << 2);
        out.extend_from_slice(&bytes[..width]);
    }
    out.extend_from_slice(lit);
}

/// Appends copies of `len` bytes at `offset` back (1 <= offset < 65,536).
fn emit_copy(out: &mut Vec<u8>, offset: usize, mut len: usize) {
    while len > 0 {
        // Leave at least 4 for a final short copy when splitting.
        let take = if len > 64 { (len - 4).min(64) } else { len };
        if (4..12).contains(&take) && offset < 2048 {
            out.push(0x01 | (((take - 4) as u8) << 2) | (((offset >> 8) as u8) << 5));
            out.push(offset as u8);
        } else {
            out.push(0x02 | (((take - 1) as u8) << 2));
            out.extend_from_slice(&(offset as u16).to_le_bytes());
        }
        len -= take;
    }
}

/// Reads an S2 (or Snappy-framed) stream fed in pieces of any size.
#[derive(Debug, Default)]
pub struct Decoder {
    /// Input not yet decoded (at most one incomplete chunk).
    buf: Vec<u8>,
    /// The identifier seen: `Some(true)` for Snappy framing, `Some(false)` for S2.
    snappy: Option<bool>,
}

impl Decoder {
    /// A decoder waiting for the stream identifier.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds `data` and appends every complete chunk's decoded bytes to `out`.
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), S2Error> {
        self.buf.extend_from_slice(data);
        let mut at = 0;
        while let Some(header) = self.buf.get(at..at + 4) {
            let kind = header[0];
            let len =
                usize::from(header[1]) | usize::from(header[2]) << 8 | usize::from(header[3]) << 16;
            let Some(body) = self.buf.get(at + 4..at + 4 + len) else {
                break;
            };
            decode_chunk(&mut self.snappy, kind, body, out)?;
            at += 4 + len;
        }
        self.buf.drain(..at);
        Ok(())
    }

    /// Whether the input ended on a chunk boundary (a truncated stream does not).
    pub fn at_boundary(&self) -> bool {
        self.buf.is_empty()
    }
}

/// Decodes the whole stream `data` (which must end on a chunk boundary).
pub fn decode_all(data: &[u8]) -> Result<Vec<u8>, S2Error> {
    let mut dec = Decoder::new();
    let mut out = Vec::with_capacity(data.len().saturating_mul(2));
    dec.feed(data, &mut out)?;
    if !dec.at_boundary() {
        return Err(S2Error::Corrupt("truncated chunk"));
    }
    Ok(out)
}

fn decode_chunk(
    snappy: &mut Option<bool>,
    kind: u8,
    body: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), S2Error> {
    if kind == 0xff {
        *snappy = match body {
            S2_MAGIC => Some(false),
            SNAPPY_MAGIC => Some(true),
            _ => return Err(S2Error::Corrupt("bad stream identifier")),
        };
        return Ok(());
    }
    let Some(is_snappy) = *snappy else {
        return Err(S2Error::NoIdentifier);
    };
    let max = if is_snappy {
        MAX_SNAPPY_BLOCK
    } else {
        MAX_BLOCK
    };
    match kind {
        0x00 | 0x01 => {
            let (crc, data) = body
                .split_first_chunk::<4>()
                .ok_or(S2Error::Corrupt("short data chunk"))?;
            let start = out.len();
            if kind == 0x00 {
                decode_block(data, max, out)?;
            } else {
                if data.len() > max {
                    return Err(S2Error::Corrupt("block too large"));
                }
                out.extend_from_slice(data);
            }
            if masked_crc(&out[start..]) != u32::from_le_bytes(*crc) {
                out.truncate(start);
                return Err(S2Error::Checksum);
            }
            Ok(())
        }
        0x80..=0xfe => Ok(()),
        other => Err(S2Error::UnknownChunk(other)),
    }
}

/// Reads the uvarint at the start of `src`: its value and length.
fn uvarint(src: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, b) in src.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Little-endian integer of `src[at..at + n]`, or `None` past the end.
fn le(src: &[u8], at: usize, n: usize) -> Option<usize> {
    let bytes = src.get(at..at.checked_add(n)?)?;
    Some(
        bytes
            .iter()
            .rev()
            .fold(0usize, |v, b| (v << 8) | usize::from(*b)),
    )
}

/// Decodes one S2 block and appends it to `out`.
fn decode_block(src: &[u8], max: usize, out: &mut Vec<u8>) -> Result<(), S2Error> {
    let corrupt = S2Error::Corrupt;
    let (len, mut s) = uvarint(src).ok_or(corrupt("bad block length"))?;
    let len = usize::try_from(len)
        .ok()
        .filter(|l| *l <= max)
        .ok_or(corrupt("block too large"))?;
    let base = out.len();
    out.reserve(len);
    let mut offset = 0usize;
    while s < src.len() {
        let tag = src[s];
        let (copy_len, copy_off) = match tag & 0x03 {
            0x00 => {
                let x = usize::from(tag >> 2);
                let (n, head) = if x < 60 {
                    (x, 1)
                } else {
                    let w = x - 59;
                    (le(src, s + 1, w).ok_or(corrupt("short literal"))?, 1 + w)
                };
                let start = s + head;
                let end = start
                    .checked_add(n + 1)
                    .filter(|e| *e <= src.len())
                    .ok_or(corrupt("literal past input"))?;
                if out.len() - base + (end - start) > len {
                    return Err(corrupt("literal past block"));
                }
                out.extend_from_slice(&src[start..end]);
                s = end;
                continue;
            }
            0x01 => {
                let b = le(src, s + 1, 1).ok_or(corrupt("short copy"))?;
                let toff = usize::from(tag & 0xe0) << 3 | b;
                let l = usize::from(tag >> 2 & 0x07);
                s += 2;
                if toff == 0 {
                    // S2's repeat: the previous offset again.
                    let l = match l {
                        5 => {
                            let v = le(src, s, 1).ok_or(corrupt("short repeat"))?;
                            s += 1;
                            v + 8
                        }
                        6 => {
                            let v = le(src, s, 2).ok_or(corrupt("short repeat"))?;
                            s += 2;
                            v + 260
                        }
                        7 => {
                            let v = le(src, s, 3).ok_or(corrupt("short repeat"))?;
                            s += 3;
                            v + 65_540
                        }
                        l => l + 4,
                    };
                    (l, offset)
                } else {
                    (l + 4, toff)
                }
            }
            0x02 => {
                let off = le(src, s + 1, 2).ok_or(corrupt("short copy"))?;
                s += 3;
                (usize::from(tag >> 2) + 1, off)
            }
            _ => {
                let off = le(src, s + 1, 4).ok_or(corrupt("short copy"))?;
                s += 5;
                (usize::from(tag >> 2) + 1, off)
            }
        };
        let written = out.len() - base;
        if copy_off == 0 || copy_off > written || written + copy_len > len {
            return Err(corrupt("bad copy"));
        }
        offset = copy_off;
        let from = out.len() - copy_off;
        for i in 0..copy_len {
            let b = out[from + i];
            out.push(b);
        }
    }
    if out.len() - base != len {
        return Err(corrupt("block length mismatch"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n);
        let mut x = 7u32;
        while v.len() < n {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            // Mostly repetitive text with some noise, as messages are.
            if x.is_multiple_of(5) {
                v.push((x >> 16) as u8);
            } else {
                v.extend_from_slice(b"orders.eu.created {\"id\":42} ");
            }
        }
        v.truncate(n);
        v
    }

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn round_trips_and_compresses() {
        for n in [
            0,
            1,
            15,
            16,
            100,
            BLOCK - 1,
            BLOCK,
            BLOCK + 1,
            3 * BLOCK + 17,
        ] {
            let data = sample(n);
            let mut enc = Encoder::new();
            // Odd write sizes cross block boundaries.
            for piece in data.chunks(7_001) {
                enc.write(piece);
            }
            let bytes = enc.finish();
            assert_eq!(decode_all(&bytes).unwrap(), data, "n={n}");
            if n > 1000 {
                assert!(bytes.len() < n / 2, "n={n}: {} bytes", bytes.len());
            }
        }
    }

    #[test]
    fn incompressible_data_goes_in_uncompressed_chunks() {
        let mut x = 1u64;
        let data: Vec<u8> = (0..5000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let bytes = Encoder::new().finish_with(&data);
        assert_eq!(bytes[10], 0x01);
        assert_eq!(decode_all(&bytes).unwrap(), data);
    }

    impl Encoder {
        fn finish_with(mut self, data: &[u8]) -> Vec<u8> {
            self.write(data);
            self.finish()
        }
    }

    #[test]
    fn decodes_fed_in_any_pieces() {
        let data = sample(200_000);
        let bytes = Encoder::new().finish_with(&data);
        let mut dec = Decoder::new();
        let mut out = Vec::new();
        for piece in bytes.chunks(333) {
            dec.feed(piece, &mut out).unwrap();
        }
        assert!(dec.at_boundary());
        assert_eq!(out, data);
    }

    #[test]
    fn decodes_s2_repeat_offsets() {
        // "abcd" then a copy of 4 at offset 4, then a repeat (offset 0) of length 5.
        let mut block = Vec::new();
        put_uvarint(&mut block, 13);
        emit_literal(&mut block, b"abcd");
        emit_copy(&mut block, 4, 4);
        block.push(0x01 | (1 << 2));
        block.push(0);
        let mut out = Vec::new();
        decode_block(&block, MAX_BLOCK, &mut out).unwrap();
        assert_eq!(out, b"abcdabcdabcda");
    }

    #[test]
    fn corruption_is_an_error_never_a_panic() {
        let data = sample(50_000);
        let bytes = Encoder::new().finish_with(&data);
        // Every single-byte flip past the identifier fails (checksum or structure), and
        // every truncation too.
        for at in (10..bytes.len()).step_by(97) {
            let mut bad = bytes.clone();
            bad[at] ^= 0x5a;
            assert!(decode_all(&bad).is_err(), "flip at {at}");
        }
        for cut in (1..bytes.len()).step_by(101) {
            assert!(decode_all(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(
            decode_all(b"\x00\x05\x00\x00abcde"),
            Err(S2Error::NoIdentifier)
        );
        let mut reserved = bytes[..10].to_vec();
        reserved.extend_from_slice(&[0x05, 0, 0, 0]);
        assert_eq!(decode_all(&reserved), Err(S2Error::UnknownChunk(0x05)));
    }

    #[test]
    fn random_garbage_blocks_do_not_panic() {
        let mut x = 99u64;
        for _ in 0..2000 {
            let n = (x % 64) as usize;
            let block: Vec<u8> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let mut out = Vec::new();
            let _ = decode_block(&block, MAX_BLOCK, &mut out);
        }
    }
}
