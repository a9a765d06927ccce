//! The entries inside a stream backup, in nats-server's v2 backup layout (its `archive`
//! package, `NATSARC1`), so a backup moves between jetraft and nats-server 2.15 both ways.
//!
//! Layout (before S2 compression): the 8 magic bytes `NATSARC1`, then entries, each
//! `uvarint name_len | zigzag varint timestamp | uvarint seq | uvarint header_size |
//! uvarint payload_size | name | header_size + payload_size bytes`. A backup holds, in order:
//! `state.json` (the stream state, nats-server's `StreamState` JSON, `consumer_count` = the
//! number of consumer entries that follow), one `consumers/<name>` entry per consumer (JSON
//! `{"config":{..},"state":{..}}`), the messages in ascending sequence (name = subject,
//! timestamp = stored time in ns, the header block and payload as data), and an end marker
//! (an entry with every field zero): a backup without it was truncated.
//!
//! Integrity: the S2 framing checksums every block (CRC-32C of the uncompressed bytes), and
//! [`parse`] checks the structure (order, sizes, the end marker) entry by entry.

use bytes::Bytes;

use super::s2::put_uvarint;

/// The magic bytes an archive starts with.
pub const MAGIC: &[u8] = b"NATSARC1";
/// The name of the stream state entry.
pub const STATE_ENTRY: &str = "state.json";
/// The prefix of consumer entry names.
pub const CONSUMER_PREFIX: &str = "consumers/";
/// The longest entry name accepted (subjects are far shorter).
const MAX_NAME: u64 = 1 << 20;

/// Why an archive could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveError {
    /// The bytes do not start with [`MAGIC`].
    #[error("not a stream backup (bad magic)")]
    BadMagic,
    /// An entry's fields or sizes are malformed, or it ends early.
    #[error("invalid archive: {0}")]
    Invalid(String),
    /// The end marker is missing.
    #[error("backup was truncated")]
    Truncated,
}

/// One message of a backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedMsg {
    /// Stream sequence.
    pub seq: u64,
    /// Subject.
    pub subject: String,
    /// Header block, empty when none.
    pub headers: Bytes,
    /// Payload.
    pub payload: Bytes,
    /// Stored time, Unix ns.
    pub timestamp_ns: i64,
}

/// A whole backup, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archive {
    /// The `state.json` entry.
    pub state_json: Bytes,
    /// The consumer entries: name and JSON.
    pub consumers: Vec<(String, Bytes)>,
    /// The messages, ascending by sequence.
    pub msgs: Vec<ArchivedMsg>,
}

/// Builds the uncompressed archive bytes entry by entry.
#[derive(Debug, Default)]
pub struct ArchiveWriter {
    out: Vec<u8>,
}

impl ArchiveWriter {
    /// A writer that has written the magic bytes.
    pub fn new() -> Self {
        Self {
            out: MAGIC.to_vec(),
        }
    }

    fn entry(&mut self, name: &str, ts: i64, seq: u64, hdr: &[u8], data: &[u8]) {
        put_uvarint(&mut self.out, name.len() as u64);
        put_uvarint(&mut self.out, zigzag(ts));
        put_uvarint(&mut self.out, seq);
        put_uvarint(&mut self.out, hdr.len() as u64);
        put_uvarint(&mut self.out, data.len() as u64);
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(hdr);
        self.out.extend_from_slice(data);
    }

    /// Writes the `state.json` entry.
    pub fn state(&mut self, json: &[u8], now_ns: i64) {
        self.entry(STATE_ENTRY, now_ns, 0, &[], json);
    }

    /// Writes a `consumers/<name>` entry.
    pub fn consumer(&mut self, name: &str, json: &[u8], now_ns: i64) {
        self.entry(&format!("{CONSUMER_PREFIX}{name}"), now_ns, 0, &[], json);
    }

    /// Writes one message.
    pub fn msg(&mut self, seq: u64, subject: &str, headers: &[u8], payload: &[u8], ts: i64) {
        self.entry(subject, ts, seq, headers, payload);
    }

    /// Writes the end marker.
    pub fn end(&mut self) {
        self.entry("", 0, 0, &[], &[]);
    }

    /// Takes the bytes written so far.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }
}

/// One raw entry; `hdr` and `data` are ranges of the archive bytes.
struct Entry<'a> {
    name: &'a str,
    ts: i64,
    seq: u64,
    hdr: std::ops::Range<usize>,
    data: std::ops::Range<usize>,
}

impl Entry<'_> {
    fn is_end(&self) -> bool {
        self.name.is_empty()
            && self.ts == 0
            && self.seq == 0
            && self.hdr.is_empty()
            && self.data.is_empty()
    }
}

/// Reads entries from the uncompressed archive bytes.
struct Reader<'a> {
    src: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn uvarint(&mut self) -> Result<Option<u64>, ArchiveError> {
        if self.at == self.src.len() {
            return Ok(None);
        }
        let mut v = 0u64;
        for i in 0..10 {
            let Some(b) = self.src.get(self.at + i) else {
                return Err(ArchiveError::Truncated);
            };
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.at += i + 1;
                return Ok(Some(v));
            }
        }
        Err(ArchiveError::Invalid("varint too long".into()))
    }

    fn field(&mut self) -> Result<u64, ArchiveError> {
        self.uvarint()?.ok_or(ArchiveError::Truncated)
    }

    fn range(&mut self, n: u64) -> Result<std::ops::Range<usize>, ArchiveError> {
        let n = usize::try_from(n).map_err(|_| ArchiveError::Truncated)?;
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.src.len())
            .ok_or(ArchiveError::Truncated)?;
        let out = self.at..end;
        self.at = end;
        Ok(out)
    }

    /// The next entry, `None` at a clean end of input.
    fn next(&mut self) -> Result<Option<Entry<'a>>, ArchiveError> {
        let Some(name_len) = self.uvarint()? else {
            return Ok(None);
        };
        let ts = unzigzag(self.field()?);
        let seq = self.field()?;
        let hdr_len = self.field()?;
        let data_len = self.field()?;
        if name_len > MAX_NAME {
            return Err(ArchiveError::Invalid("entry name too long".into()));
        }
        let name = self.range(name_len)?;
        let name = std::str::from_utf8(&self.src[name])
            .map_err(|_| ArchiveError::Invalid("entry name is not UTF-8".into()))?;
        let hdr = self.range(hdr_len)?;
        let data = self.range(data_len)?;
        Ok(Some(Entry {
            name,
            ts,
            seq,
            hdr,
            data,
        }))
    }
}

/// Parses a whole archive and checks its structure; headers and payloads are slices of `src`.
pub fn parse(src: &Bytes) -> Result<Archive, ArchiveError> {
    if !src.starts_with(MAGIC) {
        return Err(ArchiveError::BadMagic);
    }
    let body = src.slice(MAGIC.len()..);
    let mut r = Reader { src: &body, at: 0 };
    let first = r.next()?.ok_or(ArchiveError::Truncated)?;
    if first.name != STATE_ENTRY {
        return Err(ArchiveError::Invalid("expected state.json first".into()));
    }
    let state_json = body.slice(first.data);
    let mut consumers = Vec::new();
    let mut msgs: Vec<ArchivedMsg> = Vec::new();
    loop {
        let e = r.next()?.ok_or(ArchiveError::Truncated)?;
        if e.is_end() {
            break;
        }
        if e.seq == 0 {
            let Some(name) = e.name.strip_prefix(CONSUMER_PREFIX) else {
                return Err(ArchiveError::Invalid(format!(
                    "unexpected entry {:?}",
                    e.name
                )));
            };
            if !msgs.is_empty() {
                return Err(ArchiveError::Invalid("consumer after messages".into()));
            }
            consumers.push((name.to_string(), body.slice(e.data)));
            continue;
        }
        if msgs.last().is_some_and(|m| m.seq >= e.seq) {
            return Err(ArchiveError::Invalid(format!(
                "message sequence {} out of order",
                e.seq
            )));
        }
        msgs.push(ArchivedMsg {
            seq: e.seq,
            subject: e.name.to_string(),
            headers: body.slice(e.hdr),
            payload: body.slice(e.data),
            timestamp_ns: e.ts,
        });
    }
    if r.at != body.len() {
        return Err(ArchiveError::Invalid("data after the end marker".into()));
    }
    Ok(Archive {
        state_json,
        consumers,
        msgs,
    })
}

/// Go's `binary.PutVarint` encoding of a signed value.
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut w = ArchiveWriter::new();
        w.state(br#"{"messages":2}"#, 5);
        w.consumer("C", br#"{"config":{},"state":{}}"#, 5);
        w.msg(1, "a.b", b"", b"one", 1_700_000_000_000_000_000);
        w.msg(3, "a.c", b"NATS/1.0\r\nX: y\r\n\r\n", b"three", -2);
        w.end();
        w.take()
    }

    #[test]
    fn round_trips() {
        let a = parse(&Bytes::from(sample())).unwrap();
        assert_eq!(&a.state_json[..], br#"{"messages":2}"#);
        assert_eq!(a.consumers.len(), 1);
        assert_eq!(a.consumers[0].0, "C");
        assert_eq!(a.msgs.len(), 2);
        assert_eq!(a.msgs[1].seq, 3);
        assert_eq!(a.msgs[1].timestamp_ns, -2);
        assert_eq!(&a.msgs[1].headers[..], b"NATS/1.0\r\nX: y\r\n\r\n");
        assert_eq!(&a.msgs[1].payload[..], b"three");
        assert_eq!(a.msgs[0].timestamp_ns, 1_700_000_000_000_000_000);
    }

    #[test]
    fn zigzag_matches_go() {
        for (v, z) in [
            (0i64, 0u64),
            (-1, 1),
            (1, 2),
            (-2, 3),
            (i64::MAX, u64::MAX - 1),
        ] {
            assert_eq!(zigzag(v), z);
            assert_eq!(unzigzag(z), v);
        }
    }

    #[test]
    fn damaged_archives_are_errors() {
        let good = sample();
        assert_eq!(
            parse(&Bytes::from_static(b"NATSARC2xxxx")),
            Err(ArchiveError::BadMagic)
        );
        // Cut anywhere: truncated or invalid, never a panic or a partial success.
        for cut in 0..good.len() {
            assert!(
                parse(&Bytes::copy_from_slice(&good[..cut])).is_err(),
                "cut at {cut}"
            );
        }
        // Every byte flipped: an error or (for a flip inside data) a different archive.
        let want = parse(&Bytes::from(good.clone())).unwrap();
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0xff;
            if let Ok(a) = parse(&Bytes::from(bad)) {
                assert_ne!(a, want, "flip at {at} went unnoticed");
            }
        }
    }

    #[test]
    fn out_of_order_messages_are_refused() {
        let mut w = ArchiveWriter::new();
        w.state(b"{}", 0);
        w.msg(2, "a", b"", b"", 0);
        w.msg(2, "a", b"", b"", 0);
        w.end();
        assert!(matches!(
            parse(&Bytes::from(w.take())),
            Err(ArchiveError::Invalid(_))
        ));
    }
}
