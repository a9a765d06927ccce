//! Subjects that are not UTF-8.
//!
//! nats-server treats subjects as bytes: `PUB foo.\xff 2` is routed like any other subject and
//! delivered as `MSG foo.\xff ...`. jetraft's router keeps subjects as `str`, so a subject's
//! bytes that are not UTF-8 are carried inside it as characters of Unicode plane 16's private
//! use area: byte `b` (always `0x80..=0xFF` in an invalid sequence) becomes U+10FF00 + `b`.
//! [`to_text`] does that where a subject enters (`PUB`, `SUB`, reply subjects, queue names) and
//! [`to_wire`] turns those characters back into their bytes where a subject leaves in a `MSG`.
//! Tokens and wildcards are unaffected (`.`, `*` and `>` are ASCII). The one thing this cannot
//! tell apart: a client that sends the characters U+10FF80..=U+10FFFF themselves gets the raw
//! bytes back (the README says so).

use std::borrow::Cow;

/// The first of the 128 characters that stand for the bytes `0x80..=0xFF`.
const BASE: u32 = 0x10_FF00;

/// The first byte of every stand-in character's UTF-8 encoding (U+10FF80..=U+10FFFF encode as
/// `F4 8F BE 80` ..= `F4 8F BF BF`).
const LEAD: u8 = 0xF4;

/// A subject's bytes as text: UTF-8 stays as it is (borrowed), every byte of an invalid
/// sequence becomes its stand-in character.
pub fn to_text(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(bytes) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for &b in chunk.invalid() {
            out.push(stand_in(b));
        }
    }
    Cow::Owned(out)
}

/// The bytes to send for `subject` (the text form made by [`to_text`]): stand-in characters
/// become their bytes again. Borrowed, without a copy, when there are none.
pub fn to_wire(subject: &[u8]) -> Cow<'_, [u8]> {
    if !subject.contains(&LEAD) {
        return Cow::Borrowed(subject);
    }
    let Ok(text) = std::str::from_utf8(subject) else {
        return Cow::Borrowed(subject);
    };
    if !text.chars().any(|c| byte_of(c).is_some()) {
        return Cow::Borrowed(subject);
    }
    let mut out = Vec::with_capacity(subject.len());
    let mut tmp = [0u8; 4];
    for c in text.chars() {
        match byte_of(c) {
            Some(b) => out.push(b),
            None => out.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes()),
        }
    }
    Cow::Owned(out)
}

/// The character standing for byte `b` (`0x80..=0xFF`).
fn stand_in(b: u8) -> char {
    char::from_u32(BASE + u32::from(b)).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// The byte `c` stands for, if it is a stand-in character.
fn byte_of(c: char) -> Option<u8> {
    let code = u32::from(c);
    if (BASE + 0x80..=BASE + 0xFF).contains(&code) {
        u8::try_from(code - BASE).ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_subjects_are_borrowed_both_ways() {
        assert!(matches!(
            to_text(b"orders.eu.\xc3\xa9"),
            Cow::Borrowed("orders.eu.é")
        ));
        assert!(matches!(
            to_wire("orders.eu.é".as_bytes()),
            Cow::Borrowed(_)
        ));
        // A four-byte character that is not a stand-in passes through.
        assert_eq!(
            &*to_wire("a.\u{1F600}".as_bytes()),
            "a.\u{1F600}".as_bytes()
        );
    }

    #[test]
    fn invalid_bytes_round_trip() {
        let cases: [&[u8]; 5] = [
            b"foo.\xff\xfe",
            b"\x80",
            b"a.\xc3.b",            // a truncated two-byte sequence
            b"x.\xe2\x82.\xf0\x9f", // truncated three- and four-byte sequences
            b"ok.\xc3\xa9.\xff.*",  // valid multi-byte and invalid bytes mixed, with a wildcard
        ];
        for raw in cases {
            let text = to_text(raw);
            assert!(matches!(text, Cow::Owned(_)), "{raw:?}");
            assert_eq!(text.split('.').count(), raw.split(|&b| b == b'.').count());
            assert_eq!(&*to_wire(text.as_bytes()), raw, "{text:?}");
        }
    }

    #[test]
    fn stand_ins_cover_exactly_the_high_bytes() {
        for b in 0x80..=0xFFu8 {
            let c = stand_in(b);
            assert_eq!(c.len_utf8(), 4);
            assert_eq!(c.encode_utf8(&mut [0; 4]).as_bytes()[0], LEAD);
            assert_eq!(byte_of(c), Some(b));
        }
        assert_eq!(byte_of(char::from_u32(BASE + 0x7F).unwrap_or('x')), None);
        assert_eq!(byte_of('a'), None);
    }
}
