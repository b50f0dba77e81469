//! The envelope's header, read without knowing the value's type: what `inspect` can tell of the
//! bytes under a value key.
//!
//! ```text
//! byte 0       format: 1, or 2 once early refresh records the load time
//! bytes 1..9   fresh_until, unix ms, little-endian u64
//! bytes 9..17  written_at,  unix ms, little-endian u64
//! bytes 17..21 format 2 only: delta, the load's duration in ms, little-endian u32 (assumed; see below)
//! then         the value, postcard-encoded (its type is the table's: not decoded here)
//! ```
//!
//! Format 1 is `crates/echostore/src/envelope.rs` as it stands. Format 2 is what DESIGN.md's
//! "Early refresh" announces (the envelope "also records how long the load took"); its layout is
//! not on `main` yet, so this reads it as format 1's header followed by a u32 LE of milliseconds
//! ([`DELTA_BYTES`]). The lock scripts (`lock.rs`) already accept format 1 or 2 with `written_at`
//! at bytes 9..17, which this keeps. Bytes that are not such a header — too short, another format
//! byte — are an [`Undecodable`], never a panic.

use std::fmt;

/// The format byte of the first layout.
pub(crate) const FORMAT_1: u8 = 1;

/// The format byte of the layout that records the load time.
pub(crate) const FORMAT_2: u8 = 2;

/// Format 1's header: format byte, `fresh_until`, `written_at`.
pub(crate) const HEADER_1: usize = 17;

/// The width of format 2's `delta` (milliseconds, little-endian u32), right after format 1's header.
pub(crate) const DELTA_BYTES: usize = 4;

/// Format 2's header.
pub(crate) const HEADER_2: usize = HEADER_1 + DELTA_BYTES;

/// The most bytes a header needs: what `inspect` reads of a value.
pub(crate) const LONGEST_HEADER: usize = HEADER_2;

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// The format byte.
    pub(crate) format: u8,
    /// End of the logical life, unix ms.
    pub(crate) fresh_until_ms: u64,
    /// When the value was written, unix ms.
    pub(crate) written_at_ms: u64,
    /// How long the load took, ms (format 2 only).
    pub(crate) delta_ms: Option<u32>,
    /// Bytes the header takes; the payload is the rest.
    pub(crate) header_bytes: usize,
}

/// Why bytes under a value key are not an envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Undecodable {
    /// Fewer bytes than the header of their format (or than any header).
    Short {
        /// Bytes stored.
        len: usize,
        /// Bytes the header needs.
        need: usize,
    },
    /// A format byte this version does not know.
    Format(u8),
}

impl fmt::Display for Undecodable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Undecodable::Short { len, need } => write!(
                f,
                "{len} bytes is shorter than the {need}-byte envelope header"
            ),
            Undecodable::Format(byte) => write!(
                f,
                "unknown envelope format {byte} (0x{byte:02x}): not written by EchoStore, or by a newer version"
            ),
        }
    }
}

/// Decodes the header at the start of `head` (the first bytes of the value: at least
/// [`LONGEST_HEADER`] of them when the value is that long).
pub(crate) fn decode(head: &[u8]) -> Result<Header, Undecodable> {
    let Some(&format) = head.first() else {
        return Err(Undecodable::Short {
            len: 0,
            need: HEADER_1,
        });
    };
    let header_bytes = match format {
        FORMAT_1 => HEADER_1,
        FORMAT_2 => HEADER_2,
        other => return Err(Undecodable::Format(other)),
    };
    if head.len() < header_bytes {
        return Err(Undecodable::Short {
            len: head.len(),
            need: header_bytes,
        });
    }
    let word = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&head[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let delta_ms = (format == FORMAT_2).then(|| {
        let mut b = [0u8; DELTA_BYTES];
        b.copy_from_slice(&head[HEADER_1..HEADER_2]);
        u32::from_le_bytes(b)
    });
    Ok(Header {
        format,
        fresh_until_ms: word(1),
        written_at_ms: word(9),
        delta_ms,
        header_bytes,
    })
}

/// The first bytes as hex, `68 65 6c 6c 6f`, for a report of bytes that did not decode.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
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
        let header = decode(&bytes).expect("a header");
        assert_eq!(
            header,
            Header {
                format: 1,
                fresh_until_ms: 2000,
                written_at_ms: 1000,
                delta_ms: None,
                header_bytes: HEADER_1,
            }
        );
    }

    /// Format 2 adds the delta after byte 17; a format-2 value cut inside it is short.
    #[test]
    fn reads_format_2() {
        let mut bytes = format_1(2000, 1000);
        bytes[0] = FORMAT_2;
        bytes.extend_from_slice(&250u32.to_le_bytes());
        let header = decode(&bytes).expect("a header");
        assert_eq!(header.delta_ms, Some(250));
        assert_eq!(header.header_bytes, HEADER_2);
        assert_eq!(
            decode(&bytes[..19]),
            Err(Undecodable::Short { len: 19, need: 21 })
        );
    }

    /// Empty, short and foreign bytes are undecodable, whatever their length.
    #[test]
    fn bad_bytes_are_undecodable() {
        let good = format_1(2, 1);
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_err(), "{cut} bytes");
        }
        assert_eq!(decode(b"hello"), Err(Undecodable::Format(b'h')));
        assert_eq!(decode(&[]), Err(Undecodable::Short { len: 0, need: 17 }));
        assert!(Undecodable::Format(104).to_string().contains("0x68"));
        assert_eq!(hex(b"hi"), "68 69");
    }
}
