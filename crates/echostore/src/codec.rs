//! How a value's bytes are made: the table's [`Codec`] (postcard or JSON), then LZ4 compression
//! above the table's `compress_above`. The envelope's format byte records both in its high bits
//! (`crate::header::CODING_MASK`), so any process decodes any other's values whatever its own settings.
//!
//! Decoding is bounded after decompression as before it: a compressed payload declares its
//! decompressed size up front, and one over the table's `max_value_bytes` is refused before any
//! allocation (a decompression bomb is a [`DecodeError`], a counted miss); postcard payloads are
//! decoded within [`MAX_DEPTH`] levels, JSON within serde_json's own
//! recursion limit (128).

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::depth::{Budget, Limited};
use crate::error::{Error, Result};
use crate::header::HeaderError;

pub(crate) use crate::header::{JSON, LZ4};

/// How a table encodes its values on Valkey (`.codec`). Whatever a table writes, it reads every
/// codec: processes with different settings share values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Codec {
    /// postcard: compact binary, the default.
    #[default]
    Postcard,
    /// JSON (serde_json): readable with `redis-cli`, larger.
    Json,
}

/// A table's coding: its codec, and the payload size above which it compresses.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Coding {
    pub(crate) codec: Codec,
    pub(crate) compress_above: Option<usize>,
}

impl Coding {
    /// `value`'s payload and the format bits that say how it was made. Compressed only above
    /// `compress_above`, and only when that makes it smaller.
    pub(crate) fn encode<V: Serialize>(&self, value: &V) -> Result<(Vec<u8>, u8)> {
        let (payload, mut bits) = match self.codec {
            Codec::Postcard => (postcard::to_allocvec(value).map_err(codec_error)?, 0),
            Codec::Json => (serde_json::to_vec(value).map_err(codec_error)?, JSON),
        };
        let Some(above) = self.compress_above else {
            return Ok((payload, bits));
        };
        if payload.len() <= above {
            return Ok((payload, bits));
        }
        let compressed = lz4_flex::block::compress_prepend_size(&payload);
        if compressed.len() >= payload.len() {
            return Ok((payload, bits));
        }
        bits |= LZ4;
        Ok((compressed, bits))
    }
}

/// How deeply a value read from Valkey may nest: every sequence, tuple, map, struct, enum,
/// newtype and `Some` inside another is one level. Deeper bytes are a [`DecodeError::TooDeep`],
/// a counted miss. 128 levels is far beyond the shape of a cached record and a few hundred
/// kilobytes of stack at most, well within a Tokio worker's 2 MiB. A value that legitimately
/// nests deeper encodes, but never reads back: every read of it is a miss.
pub(crate) const MAX_DEPTH: usize = 128;

/// Why stored bytes are not a value of this table.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DecodeError {
    #[error(transparent)]
    Header(#[from] HeaderError),
    #[error("{0} bytes left over after the payload (a value of another type?)")]
    Trailing(usize),
    #[error("the payload nests deeper than {0} levels")]
    TooDeep(usize),
    #[error("payload: {0}")]
    Payload(#[from] postcard::Error),
    #[error("JSON payload: {0}")]
    Json(String),
    #[error("compressed payload: {0}")]
    Compressed(String),
}

fn codec_error(e: impl std::fmt::Display) -> Error {
    Error::Codec(e.to_string().into())
}

/// Decodes a payload coded as `bits` say, decompressing at most `max_bytes`.
pub(crate) fn decode<V: DeserializeOwned>(
    bits: u8,
    payload: &[u8],
    max_bytes: usize,
) -> Result<V, DecodeError> {
    if bits & LZ4 == 0 {
        return decode_plain(bits, payload);
    }
    let (size, rest) = lz4_flex::block::uncompressed_size(payload)
        .map_err(|e| DecodeError::Compressed(e.to_string()))?;
    if size > max_bytes {
        return Err(DecodeError::Compressed(format!(
            "declares {size} bytes decompressed, over the table's max_value_bytes ({max_bytes})"
        )));
    }
    let plain = lz4_flex::block::decompress(rest, size)
        .map_err(|e| DecodeError::Compressed(e.to_string()))?;
    decode_plain(bits, &plain)
}

fn decode_plain<V: DeserializeOwned>(bits: u8, payload: &[u8]) -> Result<V, DecodeError> {
    if bits & JSON != 0 {
        return serde_json::from_slice(payload).map_err(|e| DecodeError::Json(e.to_string()));
    }
    let budget = Budget::new(MAX_DEPTH);
    let mut de = postcard::Deserializer::from_bytes(payload);
    let value = match V::deserialize(Limited::new(&mut de, &budget)) {
        Ok(value) => value,
        Err(_) if budget.exceeded() => return Err(DecodeError::TooDeep(MAX_DEPTH)),
        Err(e) => return Err(e.into()),
    };
    let rest = de.finalize()?;
    if !rest.is_empty() {
        return Err(DecodeError::Trailing(rest.len()));
    }
    Ok(value)
}
