//! How a value's bytes are made: the table's [`Codec`] (postcard, JSON or one of the user's, through
//! a `serde_json::Value` tree), then LZ4 compression
//! above the table's `compress_above`. The envelope's format byte records both in its high bits
//! (`crate::valkey::header::CODING_MASK`), so any process decodes any other's values whatever its own settings.
//!
//! Decoding is bounded after decompression as before it: a compressed payload declares its
//! decompressed size up front, and one over the table's `max_value_bytes` is refused before any
//! allocation (a decompression bomb is a [`DecodeError`], a counted miss); postcard payloads are
//! decoded within [`MAX_DEPTH`] levels, JSON within serde_json's own
//! recursion limit (128).

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::valkey::depth::{Budget, Limited};
use crate::valkey::header::HeaderError;

pub(crate) use crate::valkey::header::{CUSTOM, JSON, LZ4};

/// How a table encodes its values on Valkey (`.codec`). Whatever a table writes, it reads
/// postcard and JSON: processes with different settings share values. A custom codec's values are
/// read by the tables that have that codec (others count them as decode errors, a miss).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum Codec {
    /// postcard: compact binary, the default.
    #[default]
    Postcard,
    /// JSON (serde_json): readable with `redis-cli`, larger.
    Json,
    /// Yours ([`Codec::custom`]): MessagePack, CBOR, a schema registry's format.
    Custom(CustomCodec),
}

/// The error a custom codec's functions answer.
pub type CodecError = Box<dyn std::error::Error + Send + Sync>;

type EncodeTree = dyn Fn(&serde_json::Value) -> Result<Vec<u8>, CodecError> + Send + Sync;
type DecodeTree = dyn Fn(&[u8]) -> Result<serde_json::Value, CodecError> + Send + Sync;

/// A codec of your own: the value as a `serde_json::Value` tree to bytes, and back.
#[derive(Clone)]
pub struct CustomCodec {
    encode: std::sync::Arc<EncodeTree>,
    decode: std::sync::Arc<DecodeTree>,
}

impl std::fmt::Debug for CustomCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CustomCodec")
    }
}

impl Codec {
    /// A codec of your own, through serde's data model: `encode` turns the value's tree (as
    /// `serde_json::to_value` makes it) into bytes, `decode` turns bytes back into a tree. The
    /// decoded tree is held to the same nesting bound as postcard's.
    ///
    /// ```
    /// use echostore::Codec;
    ///
    /// // JSON with a one-byte prefix, standing in for MessagePack or CBOR.
    /// let prefixed = Codec::custom(
    ///     |tree| Ok([b"v1:".as_slice(), &serde_json::to_vec(tree)?].concat()),
    ///     |bytes| Ok(serde_json::from_slice(bytes.strip_prefix(b"v1:").ok_or("no prefix")?)?),
    /// );
    /// ```
    pub fn custom(
        encode: impl Fn(&serde_json::Value) -> Result<Vec<u8>, CodecError> + Send + Sync + 'static,
        decode: impl Fn(&[u8]) -> Result<serde_json::Value, CodecError> + Send + Sync + 'static,
    ) -> Codec {
        Codec::Custom(CustomCodec {
            encode: std::sync::Arc::new(encode),
            decode: std::sync::Arc::new(decode),
        })
    }
}

/// A table's coding: its codec, and the payload size above which it compresses.
#[derive(Debug, Clone, Default)]
pub(crate) struct Coding {
    pub(crate) codec: Codec,
    pub(crate) compress_above: Option<usize>,
}

impl Coding {
    /// The table's custom codec, for decoding what one wrote.
    pub(crate) fn custom(&self) -> Option<&CustomCodec> {
        match &self.codec {
            Codec::Custom(custom) => Some(custom),
            _ => None,
        }
    }

    /// `value`'s payload and the format bits that say how it was made. Compressed only above
    /// `compress_above`, and only when that makes it smaller.
    pub(crate) fn encode<V: Serialize>(&self, value: &V) -> Result<(Vec<u8>, u8)> {
        // The value's `Serialize` is the user's code: a panic in it is an error of this write.
        let (payload, mut bits) =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.payload(value)))
                .unwrap_or_else(|_| Err(Error::Codec("the value's Serialize panicked".into())))?;
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

    /// `value` in the table's codec, uncompressed, with the bits that name the codec.
    fn payload<V: Serialize>(&self, value: &V) -> Result<(Vec<u8>, u8)> {
        Ok(match &self.codec {
            Codec::Postcard => (postcard::to_allocvec(value).map_err(codec_error)?, 0),
            Codec::Json => (serde_json::to_vec(value).map_err(codec_error)?, JSON),
            Codec::Custom(custom) => {
                let tree = serde_json::to_value(value).map_err(codec_error)?;
                (custom_encode(custom, &tree)?, CUSTOM)
            }
        })
    }
}

/// The custom codec's `encode`, a panic in it an error.
fn custom_encode(custom: &CustomCodec, tree: &serde_json::Value) -> Result<Vec<u8>> {
    let encoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (custom.encode)(tree)));
    match encoded {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => Err(codec_error(e)),
        Err(_) => Err(Error::Codec("the custom codec's encode panicked".into())),
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
    #[error("custom payload: {0}")]
    Custom(String),
    #[error("the value's Deserialize panicked")]
    Panicked,
}

fn codec_error(e: impl std::fmt::Display) -> Error {
    Error::Codec(e.to_string().into())
}

/// Decodes a payload coded as `bits` say, decompressing at most `max_bytes`; a custom payload
/// with the table's `custom` codec.
pub(crate) fn decode<V: DeserializeOwned>(
    bits: u8,
    payload: &[u8],
    max_bytes: usize,
    custom: Option<&CustomCodec>,
) -> Result<V, DecodeError> {
    // The value's `Deserialize` is the user's code, and the bytes may be anyone's: a panic is
    // bytes this table cannot read, as any other undecodable payload.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        decode_unguarded(bits, payload, max_bytes, custom)
    }))
    .unwrap_or(Err(DecodeError::Panicked))
}

fn decode_unguarded<V: DeserializeOwned>(
    bits: u8,
    payload: &[u8],
    max_bytes: usize,
    custom: Option<&CustomCodec>,
) -> Result<V, DecodeError> {
    if bits & LZ4 == 0 {
        return decode_plain(bits, payload, custom);
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
    decode_plain(bits, &plain, custom)
}

fn decode_plain<V: DeserializeOwned>(
    bits: u8,
    payload: &[u8],
    custom: Option<&CustomCodec>,
) -> Result<V, DecodeError> {
    if bits & CUSTOM != 0 {
        return decode_custom(payload, custom);
    }
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

/// A custom payload: the codec's tree, then the value within the nesting bound.
fn decode_custom<V: DeserializeOwned>(
    payload: &[u8],
    custom: Option<&CustomCodec>,
) -> Result<V, DecodeError> {
    let custom = custom.ok_or_else(|| {
        DecodeError::Custom("written with a custom codec; this table has none".into())
    })?;
    let decoded =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (custom.decode)(payload)));
    let tree = match decoded {
        Ok(Ok(tree)) => tree,
        Ok(Err(e)) => return Err(DecodeError::Custom(e.to_string())),
        Err(_) => {
            return Err(DecodeError::Custom(
                "the custom codec's decode panicked".into(),
            ));
        }
    };
    let budget = Budget::new(MAX_DEPTH);
    match V::deserialize(Limited::new(tree, &budget)) {
        Ok(value) => Ok(value),
        Err(_) if budget.exceeded() => Err(DecodeError::TooDeep(MAX_DEPTH)),
        Err(e) => Err(DecodeError::Custom(e.to_string())),
    }
}
