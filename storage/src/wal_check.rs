//! Checks the record checksums of a database's WAL files before RocksDB replays them.
//!
//! RocksDB 11.8.1 replays the WAL when it opens a database, and some damaged records make its
//! reader loop forever in `log::Reader::ReadRecord` instead of failing (about one byte-flipped
//! WAL in fifty in the corruption test): a node that hangs on open serves nothing, but it is not
//! fail-stop either. So [`crate::db::Db::open`] first reads every WAL file itself and refuses a
//! damaged one with [`StorageError::Corrupt`].
//!
//! RocksDB's log format: the file is a sequence of 32 KiB blocks; a block holds records
//! `checksum (4, masked CRC32C, LE) | length (2, LE) | type (1) | [log number (4), recyclable
//! types only] | payload`, and a record never crosses a block boundary (large writes are split
//! into first/middle/last fragments). The checksum covers everything from the type byte to the
//! end of the payload. The last bytes of a block too short for a header are zero, and space the
//! writer preallocated reads as zero headers (type 0, length 0), which the reader skips.
//!
//! Verdict, matching the recovery mode `Db::open` sets (`TolerateCorruptedTailRecords`): a bad
//! record in the newest WAL file after which no valid record follows is a torn tail (the process
//! died while writing it, so it was never acknowledged). It is cut off here, as RocksDB would drop
//! it, so that RocksDB never reads the damaged bytes. A bad record anywhere else is corruption of
//! acknowledged data, and the open fails.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::StorageError;

/// RocksDB's log block size.
const BLOCK: usize = 32 * 1024;
/// Header of the legacy record types.
const HEADER: usize = 7;
/// Header of the recyclable record types (with the log number).
const RECYCLABLE_HEADER: usize = 11;
/// What [`StorageError::Corrupt`] names as the place of the damage.
const WAL: &str = "wal";
/// The recyclable types (11-byte header).
const RECYCLABLE_TYPES: [u8; 6] = [5, 6, 7, 8, 11, 131];

/// CRC32C (Castagnoli, reflected polynomial 0x82F63B78) lookup table.
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// CRC32C of `bytes`.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc = CRC32C_TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// RocksDB stores checksums masked (rotated and offset) so that a CRC of data that itself
/// holds CRCs does not degenerate; this undoes it.
fn unmask(masked: u32) -> u32 {
    let rot = masked.wrapping_sub(0xa282_ead8);
    rot.rotate_left(15)
}

/// What reading one record at an offset found.
enum Record {
    /// A record with a correct checksum, `len` bytes long with its header.
    Valid { len: usize },
    /// Zero padding or preallocated space: the rest of the block holds nothing.
    Padding,
    /// A damaged record (bad type, length past the block or file end, or checksum mismatch).
    Bad,
}

/// Reads the record starting at `at` in `data` (`at` is inside a block with room for a header).
fn record_at(data: &[u8], at: usize) -> Record {
    let block_end = ((at / BLOCK) + 1) * BLOCK;
    let room = block_end.min(data.len()) - at;
    if room < HEADER {
        return Record::Padding;
    }
    let h = &data[at..at + HEADER];
    let length = usize::from(u16::from_le_bytes([h[4], h[5]]));
    let kind = h[6];
    if kind == 0 && length == 0 {
        return Record::Padding;
    }
    // The record types RocksDB 11 writes; anything else in a header is damage.
    if !matches!(kind, 0..=11 | 130 | 131) {
        return Record::Bad;
    }
    let header = if RECYCLABLE_TYPES.contains(&kind) {
        RECYCLABLE_HEADER
    } else {
        HEADER
    };
    if header + length > room {
        return Record::Bad;
    }
    let stored = unmask(u32::from_le_bytes([h[0], h[1], h[2], h[3]]));
    if crc32c(&data[at + 6..at + header + length]) != stored {
        return Record::Bad;
    }
    Record::Valid {
        len: header + length,
    }
}

/// Where the first bad record of a WAL file is, and whether a valid record follows it.
struct Damage {
    offset: usize,
    valid_after: bool,
}

/// Scans a whole WAL file image.
fn scan(data: &[u8]) -> Option<Damage> {
    let mut at = 0;
    while at < data.len() {
        match record_at(data, at) {
            Record::Valid { len } => at += len,
            Record::Padding => at = ((at / BLOCK) + 1) * BLOCK,
            Record::Bad => {
                return Some(Damage {
                    offset: at,
                    valid_after: valid_record_after(data, at),
                });
            }
        }
    }
    None
}

/// Whether any later block of `data` starts with a valid record (a torn tail is followed by
/// nothing but zeros or the end of the file; real records after damage mean the damage is in
/// the middle of the log).
fn valid_record_after(data: &[u8], bad: usize) -> bool {
    let mut block = (bad / BLOCK) + 1;
    while block * BLOCK < data.len() {
        if matches!(record_at(data, block * BLOCK), Record::Valid { .. }) {
            return true;
        }
        block += 1;
    }
    false
}

/// The WAL files of the database in `dir` (`<number>.log`), oldest first.
fn wal_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>, StorageError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(dir, &e)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| io_error(dir, &e))?.path();
        let number = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(number) = number {
            files.push((number, path));
        }
    }
    files.sort();
    Ok(files)
}

fn io_error(path: &Path, e: &std::io::Error) -> StorageError {
    StorageError::corrupt(WAL, format!("reading WAL {}: {e}", path.display()))
}

/// Checks every WAL file of the database in `dir` (see the module docs): `Ok` when all records
/// are intact or only the newest file ends in a torn record (then cut off and synced),
/// [`StorageError::Corrupt`] naming the file and offset otherwise.
pub(crate) fn check_wal_files(dir: &Path) -> Result<(), StorageError> {
    let files = wal_files(dir)?;
    let newest = files.last().map(|(n, _)| *n);
    for (number, path) in &files {
        let mut data = Vec::new();
        File::open(path)
            .and_then(|mut f| f.read_to_end(&mut data))
            .map_err(|e| io_error(path, &e))?;
        let Some(damage) = scan(&data) else {
            continue;
        };
        if Some(*number) != newest || damage.valid_after {
            return Err(StorageError::corrupt(
                WAL,
                format!(
                    "WAL {} has a damaged record at byte {} followed by {}",
                    path.display(),
                    damage.offset,
                    if damage.valid_after {
                        "intact records"
                    } else {
                        "newer WAL files"
                    }
                ),
            ));
        }
        report_torn_tail(path, damage.offset, data.len());
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| io_error(path, &e))?;
        file.set_len(damage.offset as u64)
            .and_then(|()| file.sync_all())
            .map_err(|e| io_error(path, &e))?;
    }
    Ok(())
}

/// The storage crate has no logger; a torn tail cut off is reported on stderr.
fn report_torn_tail(path: &Path, offset: usize, len: usize) {
    eprintln!(
        "jetraft-storage: WAL {} ends in a torn record at byte {offset} of {len}; cut off (it \
         was never acknowledged)",
        path.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds one legacy record the way RocksDB's writer does.
    fn record(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut body = vec![kind];
        body.extend_from_slice(payload);
        let crc = crc32c(&body);
        let masked = crc.rotate_right(15).wrapping_add(0xa282_ead8);
        let mut out = masked.to_le_bytes().to_vec();
        out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(
            unmask(0xE306_9283u32.rotate_right(15).wrapping_add(0xa282_ead8)),
            0xE306_9283
        );
    }

    #[test]
    fn intact_records_and_padding_pass() {
        let mut data = record(1, b"hello");
        data.extend(record(1, &[7u8; 300]));
        data.resize(BLOCK + 10, 0);
        assert!(scan(&data).is_none());
    }

    #[test]
    fn damage_is_found_and_told_apart_from_a_torn_tail() {
        let mut data = record(1, b"first");
        let second = data.len();
        data.extend(record(1, b"second"));
        let mut torn = data.clone();
        torn[second + 9] ^= 1;
        torn.resize(BLOCK * 2, 0);
        let d = scan(&torn).expect("damage");
        assert_eq!((d.offset, d.valid_after), (second, false));

        let mut middle = torn.clone();
        let later = record(1, b"in the next block");
        middle[BLOCK..BLOCK + later.len()].copy_from_slice(&later);
        let d = scan(&middle).expect("damage");
        assert_eq!((d.offset, d.valid_after), (second, true));
    }

    #[test]
    fn a_length_past_the_block_or_an_unknown_type_is_damage() {
        let mut data = record(1, b"x");
        data[4] = 0xff;
        data[5] = 0xff;
        assert!(scan(&data).is_some());
        let mut data = record(1, b"x");
        data[6] = 77;
        assert!(scan(&data).is_some());
    }
}
