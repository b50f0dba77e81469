//! The envelope: how a value is laid out in Valkey (its header is [`crate::valkey::header`]'s).
//!
//! ```text
//! byte 0       format (2; 3 with a version; 4 and 5: the same, marked)
//! bytes 1..9   fresh_until, unix ms, little-endian u64   (written_at + ttl ± jitter, restamped with it)
//! bytes 9..17  written_at,  unix ms, little-endian u64   (stamped by Valkey's TIME as the write lands)
//! bytes 17..21 delta: how long the load took, µs, little-endian u32 (saturating; 0 = unknown)
//! bytes 21..29 formats 3 and 5: the value's version from the source (`.version_by`), little-endian u64
//! 8 bytes      formats 4 and 5: the table's generation when the write's data was read (`crate::state::marks`)
//! then         formats 4 and 5: the entry's tags (`.tags`), a postcard `Vec<String>`
//! then         the value, serde-encoded with postcard (or JSON), LZ4-compressed or not
//! ```
//!
//! The format byte's high bits say how the value was coded (`crate::valkey::codec`): `0x10` JSON,
//! `0x20` LZ4-compressed; its low four bits are the layout above.
//!
//! A write is **marked** (format 4 or 5) when it has tags or a generation above zero: what a
//! `clear` or an `invalidate_tag` is checked against when the copy is read back.
//!
//! Format 1, which earlier versions wrote, is the same without `delta` (the value from byte 17);
//! it still decodes, with a `delta` of zero: a value whose load time is unknown is never refreshed
//! early (see `docs/early-refresh.md`). Bytes 0..17 are the same in both formats: the Lua scripts
//! of [`crate::valkey::lock`] read `written_at` at bytes 10..17 of either.
//!
//! postcard is a compact, non-self-describing binary codec with a stable, documented wire format
//! (1.0) and no unsafe code; it keeps small values small, which matters when a herd of processes
//! reads them. The key's `PX` carries the physical life (`ttl + stale_for`); between `fresh_until`
//! and that expiry the copy is stale. Bytes that do not decode — a foreign format byte, a short
//! header, a payload of another type, a value nested deeper than [`MAX_DEPTH`](crate::valkey::codec::MAX_DEPTH) — are a
//! [`DecodeError`], which the fill counts and treats as a miss; they never panic.
//!
//! Decoding is bounded whatever the value type: the bytes come from whoever can write to Valkey,
//! and serde decodes nested values by recursion, so a type that nests through itself (an enum that
//! boxes itself) would let a few megabytes of planted bytes overflow the stack and abort the
//! process. postcard's deserializer is wrapped by [`crate::valkey::depth`], which refuses nesting past
//! [`MAX_DEPTH`](crate::valkey::codec::MAX_DEPTH) while decoding, before the deep value exists (a value a million deep could not
//! even be dropped without overflowing the stack).

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::valkey::codec::Coding;
use crate::valkey::header::{
    FORMAT, FORMAT_MARKED, FORMAT_VERSIONED, FORMAT_VERSIONED_MARKED, HEADER_1, decode_header,
};

pub(crate) use crate::valkey::codec::DecodeError;

/// A value read back from Valkey with its timestamps.
#[derive(Debug)]
pub(crate) struct Envelope<V> {
    /// End of the logical life, unix ms.
    pub(crate) fresh_until_ms: u64,
    /// When the fill wrote it, unix ms.
    pub(crate) written_at_ms: u64,
    /// How long the load that produced it took (zero when unknown: format 1, or a `put`).
    pub(crate) delta: Duration,
    /// Its mark: the table's generation when its data was read, and its tags (none before
    /// format 4).
    pub(crate) marking: Marking,
    /// The decoded value.
    pub(crate) value: V,
    /// The fingerprint of the bytes it was decoded from, when the reader asked for it (key
    /// tracking confirms what L1 keeps by it).
    pub(crate) read_as: Option<Fingerprint>,
}

impl<V> Envelope<V> {
    /// `true` while `now_ms` is inside the logical life.
    pub(crate) fn is_fresh(&self, now_ms: u64) -> bool {
        now_ms < self.fresh_until_ms
    }

    /// The envelope with its logical life cut to at most `longest` after `written_at` (Valkey's
    /// stamp): a `fresh_until` from a writer whose clock runs ahead, or planted, cannot keep a
    /// value fresh past the table's own ttl.
    pub(crate) fn capped(mut self, longest: Duration) -> Self {
        let longest_ms = u64::try_from(longest.as_millis()).unwrap_or(u64::MAX);
        self.fresh_until_ms = self
            .fresh_until_ms
            .min(self.written_at_ms.saturating_add(longest_ms));
        self
    }
}

/// What a write is checked against by a `clear` or an `invalidate_tag`: the table's generation
/// when the data written was read from the source (or given to `put`), and the entry's tags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Marking {
    pub(crate) generation: u64,
    pub(crate) tags: Vec<String>,
}

impl Marking {
    /// `true` when there is nothing to carry: the write keeps the unmarked formats.
    fn is_blank(&self) -> bool {
        self.generation == 0 && self.tags.is_empty()
    }
}

/// What a header says of the value behind it: its life, how long its load took, its version.
#[derive(Clone, Copy)]
pub(crate) struct Stamp {
    pub(crate) fresh_until_ms: u64,
    pub(crate) written_at_ms: u64,
    /// Stored in whole microseconds, saturating at `u32::MAX` (about 71 minutes).
    pub(crate) delta: Duration,
    pub(crate) version: Option<u64>,
}

/// Encodes `value` behind its header (format 3 when it has a `version`, 4 or 5 when `marking`
/// is not blank); refuses encodings over `max_bytes` with [`Error::TooLarge`].
pub(crate) fn encode<V: Serialize>(
    value: &V,
    stamp: &Stamp,
    marking: &Marking,
    coding: &Coding,
    max_bytes: usize,
) -> Result<Vec<u8>> {
    let Stamp {
        fresh_until_ms,
        written_at_ms,
        delta,
        version,
    } = *stamp;
    let marked = !marking.is_blank();
    let mut out = Vec::with_capacity(64);
    out.push(match (version.is_some(), marked) {
        (false, false) => FORMAT,
        (true, false) => FORMAT_VERSIONED,
        (false, true) => FORMAT_MARKED,
        (true, true) => FORMAT_VERSIONED_MARKED,
    });
    out.extend_from_slice(&fresh_until_ms.to_le_bytes());
    out.extend_from_slice(&written_at_ms.to_le_bytes());
    let delta_us = u32::try_from(delta.as_micros()).unwrap_or(u32::MAX);
    out.extend_from_slice(&delta_us.to_le_bytes());
    if let Some(version) = version {
        out.extend_from_slice(&version.to_le_bytes());
    }
    let codec = |e: postcard::Error| Error::Codec(e.to_string().into());
    if marked {
        out.extend_from_slice(&marking.generation.to_le_bytes());
        out = postcard::to_extend(&marking.tags, out).map_err(codec)?;
    }
    let (payload, bits) = coding.encode(value)?;
    out[0] |= bits;
    out.extend_from_slice(&payload);
    if out.len() > max_bytes {
        return Err(Error::TooLarge {
            size: out.len(),
            max: max_bytes,
        });
    }
    Ok(out)
}

/// What tells one written envelope from another: its length and a hash of all its bytes but
/// `fresh_until` and `written_at`, which the write scripts restamp on Valkey's clock as the
/// envelope lands (so the bytes a writer sends and the bytes it reads back differ there). Equal
/// bytes otherwise are the same value, loaded in the same time, with the same version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    len: usize,
    hash: u64,
}

/// The fingerprint of an encoded envelope.
pub(crate) fn fingerprint(bytes: &[u8]) -> Fingerprint {
    use std::hash::{DefaultHasher, Hasher};
    let mut hasher = DefaultHasher::new();
    match bytes.get(HEADER_1..) {
        Some(rest) => {
            hasher.write(&bytes[..1]);
            hasher.write(rest);
        }
        None => hasher.write(bytes),
    }
    Fingerprint {
        len: bytes.len(),
        hash: hasher.finish(),
    }
}

/// Decodes bytes read from a value key; a compressed payload may grow to at most `max_bytes`;
/// a custom-coded one needs the table's `custom` codec.
pub(crate) fn decode<V: DeserializeOwned>(
    bytes: &[u8],
    max_bytes: usize,
    custom: Option<&crate::valkey::codec::CustomCodec>,
) -> Result<Envelope<V>, DecodeError> {
    let header = decode_header(bytes)?;
    let mut payload = &bytes[header.len..];
    let marking = match header.generation {
        Some(generation) => {
            let (tags, rest) = postcard::take_from_bytes(payload)?;
            payload = rest;
            Marking { generation, tags }
        }
        None => Marking::default(),
    };
    let value = crate::valkey::codec::decode(header.coding, payload, max_bytes, custom)?;
    Ok(Envelope {
        fresh_until_ms: header.fresh_until_ms,
        written_at_ms: header.written_at_ms,
        delta: header.delta.unwrap_or(Duration::ZERO),
        marking,
        value,
        read_as: None,
    })
}

#[cfg(test)]
mod tests;
