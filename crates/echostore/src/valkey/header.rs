//! The envelope's header, read without knowing the value's type: the one decoder of the layout
//! that [`crate::valkey::envelope`] reads values with and tools (`echostore inspect`, tests) read headers
//! with, published as [`crate::protocol::decode_header`].
//!
//! ```text
//! byte 0       format: 1; 2 (which records the load time); 3 (and the source's version);
//!              4 and 5: 2 and 3 with the table's generation and the entry's tags
//! bytes 1..9   fresh_until, unix ms, little-endian u64   (Valkey's clock: the write scripts stamp it)
//! bytes 9..17  written_at,  unix ms, little-endian u64   (Valkey's clock: the write scripts stamp it)
//! bytes 17..21 formats 2 to 5: delta, the load's duration in µs, little-endian u32
//! bytes 21..29 formats 3 and 5: version, the value's own (`.version_by`), little-endian u64
//! then 8 bytes formats 4 and 5: generation, little-endian u64 (`crate::state::marks`)
//! then         formats 4 and 5: the tags, a postcard `Vec<String>`; then the value, postcard-encoded
//! ```
//!
//! The format byte's high four bits say how the value is coded: `0x10` JSON rather than postcard,
//! `0x20` LZ4-compressed (`crate::valkey::codec`); the layout above is the low four.
//!
//! Formats 4 and 5 are written only when there is something to carry: a table that has never
//! been cleared or had a tag invalidated, and whose entries carry no tags, writes 2 and 3 as
//! before, so older processes still read its values.

use std::time::Duration;

/// The format byte this version writes for a table without `.version_by`.
pub(crate) const FORMAT: u8 = 2;
/// The format byte of an envelope that carries the source's version.
pub(crate) const FORMAT_VERSIONED: u8 = 3;
/// Format 2 with the generation and the tags.
pub(crate) const FORMAT_MARKED: u8 = 4;
/// Format 3 with the generation and the tags.
pub(crate) const FORMAT_VERSIONED_MARKED: u8 = 5;
/// The format byte's bit for a JSON payload (postcard without it).
pub(crate) const JSON: u8 = 0x10;
/// The format byte's bit for an LZ4-compressed payload.
pub(crate) const LZ4: u8 = 0x20;
/// The format byte's bit for a payload of the table's custom codec.
pub(crate) const CUSTOM: u8 = 0x40;
/// The format byte's bits that say how the payload is coded; the low four are the layout.
pub(crate) const CODING_MASK: u8 = 0xF0;
/// The layout without `delta`, still read.
pub(crate) const FORMAT_1: u8 = 1;
/// Format 1's header: format, `fresh_until`, `written_at`.
pub(crate) const HEADER_1: usize = 17;
/// Where `written_at` starts (it ends at [`HEADER_1`]).
pub(crate) const WRITTEN_AT: usize = 9;
/// Format 2's header: format 1's, then `delta`.
pub(crate) const HEADER_2: usize = HEADER_1 + 4;
/// Format 3's header: format 2's, then `version`.
pub(crate) const HEADER_3: usize = HEADER_2 + 8;
/// Format 5's header, the longest: format 3's, then the generation (the tags that follow are
/// read with the payload).
pub const LONGEST_HEADER: usize = HEADER_3 + 8;

/// An envelope's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The layout: 1 to 5 (the format byte's low four bits).
    pub format: u8,
    /// How the payload is coded (the format byte's high bits): `0x10` JSON rather than postcard,
    /// `0x40` a custom codec, `0x20` LZ4-compressed.
    pub coding: u8,
    /// End of the logical life, unix ms.
    pub fresh_until_ms: u64,
    /// When the value landed on Valkey, unix ms.
    pub written_at_ms: u64,
    /// How long the load that produced the value took (formats 2 and 3; zero for a `put`).
    /// `None` for format 1, which does not record it.
    pub delta: Option<Duration>,
    /// The value's version from the source (formats 3 and 5: a table with `.version_by`).
    pub version: Option<u64>,
    /// The table's generation the write was stamped with (formats 4 and 5): a clear or a tag
    /// invalidation at a later generation makes the copy a miss (`docs/tags-and-clear.md`).
    pub generation: Option<u64>,
    /// Bytes the header takes; the payload is the rest (for formats 4 and 5, the tags and then
    /// the value).
    pub len: usize,
}

/// Why bytes under a value key have no envelope header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Fewer bytes than the header of their format (or than any header).
    #[error("{len} bytes is shorter than the {need}-byte envelope header")]
    Short {
        /// Bytes stored.
        len: usize,
        /// Bytes the header needs.
        need: usize,
    },
    /// A format byte this version does not know.
    #[error(
        "unknown envelope format {0} (0x{0:02x}): not written by EchoStore, or by a newer version"
    )]
    Format(u8),
}

/// Decodes the header at the start of `bytes` (at least [`LONGEST_HEADER`] of them when the
/// value is that long).
pub fn decode_header(bytes: &[u8]) -> Result<Header, HeaderError> {
    let byte = *bytes.first().ok_or(HeaderError::Short {
        len: 0,
        need: HEADER_1,
    })?;
    let (format, coding) = (byte & !CODING_MASK, byte & CODING_MASK);
    if coding & !(JSON | LZ4 | CUSTOM) != 0 {
        return Err(HeaderError::Format(byte));
    }
    let len = match format {
        FORMAT_VERSIONED_MARKED => LONGEST_HEADER,
        FORMAT_MARKED | FORMAT_VERSIONED => HEADER_3,
        FORMAT => HEADER_2,
        FORMAT_1 => HEADER_1,
        _ => return Err(HeaderError::Format(byte)),
    };
    if bytes.len() < len {
        return Err(HeaderError::Short {
            len: bytes.len(),
            need: len,
        });
    }
    let word = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let delta = (format != FORMAT_1).then(|| {
        let mut b = [0u8; 4];
        b.copy_from_slice(&bytes[HEADER_1..HEADER_2]);
        Duration::from_micros(u64::from(u32::from_le_bytes(b)))
    });
    Ok(Header {
        format,
        coding,
        fresh_until_ms: word(1),
        written_at_ms: word(WRITTEN_AT),
        delta,
        version: matches!(format, FORMAT_VERSIONED | FORMAT_VERSIONED_MARKED)
            .then(|| word(HEADER_2)),
        generation: match format {
            FORMAT_MARKED => Some(word(HEADER_2)),
            FORMAT_VERSIONED_MARKED => Some(word(HEADER_3)),
            _ => None,
        },
        len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format_1(fresh_until: u64, written_at: u64) -> Vec<u8> {
        let mut out = vec![FORMAT_1];
        out.extend_from_slice(&fresh_until.to_le_bytes());
        out.extend_from_slice(&written_at.to_le_bytes());
        out
    }

    /// Format 1's fields come back, and the header is 17 bytes.
    #[test]
    fn reads_format_1() {
        let mut bytes = format_1(2000, 1000);
        bytes.extend_from_slice(b"payload");
        assert_eq!(
            decode_header(&bytes),
            Ok(Header {
                format: 1,
                coding: 0,
                fresh_until_ms: 2000,
                written_at_ms: 1000,
                delta: None,
                version: None,
                generation: None,
                len: HEADER_1,
            })
        );
    }

    /// Format 2 adds the delta, in microseconds, after byte 17; a format-2 value cut inside it is
    /// short.
    #[test]
    fn reads_format_2_with_its_delta_in_microseconds() {
        let mut bytes = format_1(2000, 1000);
        bytes[0] = FORMAT;
        bytes.extend_from_slice(&250_000u32.to_le_bytes());
        let header = decode_header(&bytes).expect("a header");
        assert_eq!(header.delta, Some(Duration::from_millis(250)));
        assert_eq!((header.len, header.version), (HEADER_2, None));
        assert_eq!(
            decode_header(&bytes[..19]),
            Err(HeaderError::Short { len: 19, need: 21 })
        );
    }

    /// Format 3 adds the source's version after byte 21.
    #[test]
    fn reads_format_3_with_its_version() {
        let mut bytes = format_1(2000, 1000);
        bytes[0] = FORMAT_VERSIONED;
        bytes.extend_from_slice(&250_000u32.to_le_bytes());
        bytes.extend_from_slice(&u64::MAX.to_le_bytes());
        let header = decode_header(&bytes).expect("a header");
        assert_eq!(header.delta, Some(Duration::from_millis(250)));
        assert_eq!((header.len, header.version), (HEADER_3, Some(u64::MAX)));
        assert_eq!(
            decode_header(&bytes[..28]),
            Err(HeaderError::Short { len: 28, need: 29 })
        );
    }

    /// Formats 4 and 5 add the generation after the header of 2 and 3.
    #[test]
    fn reads_the_generation_of_formats_4_and_5() {
        let mut bytes = format_1(2000, 1000);
        bytes[0] = FORMAT_MARKED;
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&77u64.to_le_bytes());
        let header = decode_header(&bytes).expect("a header");
        assert_eq!(
            (header.len, header.version, header.generation),
            (HEADER_3, None, Some(77))
        );
        bytes[0] = FORMAT_VERSIONED_MARKED;
        bytes.extend_from_slice(&78u64.to_le_bytes());
        let header = decode_header(&bytes).expect("a header");
        assert_eq!(
            (header.len, header.version, header.generation),
            (LONGEST_HEADER, Some(77), Some(78))
        );
        assert_eq!(
            decode_header(&bytes[..36]),
            Err(HeaderError::Short { len: 36, need: 37 })
        );
    }

    /// Empty, short and foreign bytes have no header, whatever their length.
    #[test]
    fn bad_bytes_have_no_header() {
        let good = format_1(2, 1);
        for cut in 0..good.len() {
            assert!(decode_header(&good[..cut]).is_err(), "{cut} bytes");
        }
        assert_eq!(decode_header(b"hello"), Err(HeaderError::Format(b'h')));
        assert_eq!(
            decode_header(&[]),
            Err(HeaderError::Short { len: 0, need: 17 })
        );
        assert!(HeaderError::Format(104).to_string().contains("0x68"));
    }
}
