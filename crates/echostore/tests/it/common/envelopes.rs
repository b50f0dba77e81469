//! Envelopes as the tests read and plant them on Valkey: `format | fresh_until | written_at |
//! [delta, formats 2 and 3] | [version, format 3] | postcard payload` (docs/lock-protocol.md).
//! EchoStore writes format 2, or 3 for a `.version_by` table; the tests plant format 1, which it
//! still reads, and format 3.

use std::time::{SystemTime, UNIX_EPOCH};

use redis::AsyncCommands;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Wall-clock now in unix ms, as EchoStore stamps envelopes.
pub fn unix_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(since.as_millis()).expect("fits")
}

/// The envelope bytes of `value`, as EchoStore writes them.
pub fn envelope(fresh_until_ms: u64, written_at_ms: u64, value: &impl Serialize) -> Vec<u8> {
    let mut bytes = envelope_header(fresh_until_ms, written_at_ms);
    bytes.extend(postcard::to_allocvec(value).expect("postcard encodes"));
    bytes
}

/// The 17-byte header alone, for planting hand-made payloads behind it.
pub fn envelope_header(fresh_until_ms: u64, written_at_ms: u64) -> Vec<u8> {
    let mut bytes = vec![1u8];
    bytes.extend_from_slice(&fresh_until_ms.to_le_bytes());
    bytes.extend_from_slice(&written_at_ms.to_le_bytes());
    bytes
}

/// A format-3 envelope of `value` carrying the source's `version` (a `.version_by` table's).
pub fn versioned_envelope(
    fresh_until_ms: u64,
    written_at_ms: u64,
    version: u64,
    value: &impl Serialize,
) -> Vec<u8> {
    let mut bytes = envelope_header(fresh_until_ms, written_at_ms);
    bytes[0] = 3;
    bytes.extend_from_slice(&0u32.to_le_bytes()); // delta
    bytes.extend_from_slice(&version.to_le_bytes());
    bytes.extend(postcard::to_allocvec(value).expect("postcard encodes"));
    bytes
}

/// An envelope read back from Valkey.
#[derive(Debug)]
pub struct OnValkey<V> {
    pub fresh_until_ms: u64,
    pub written_at_ms: u64,
    /// The source's version (format 3 only).
    pub version: Option<u64>,
    pub value: V,
}

/// The envelope under `key`, decoded; `None` if the key is missing.
pub async fn read_envelope<V: DeserializeOwned>(
    conn: &mut super::RawConn,
    key: &str,
) -> Option<OnValkey<V>> {
    let bytes: Vec<u8> = conn.get::<_, Option<Vec<u8>>>(key).await.expect("GET")?;
    let header = echostore::protocol::decode_header(&bytes)
        .unwrap_or_else(|e| panic!("an envelope under {key}: {e}"));
    Some(OnValkey {
        fresh_until_ms: header.fresh_until_ms,
        written_at_ms: header.written_at_ms,
        version: header.version,
        value: postcard::from_bytes(&bytes[header.len..]).expect("a payload of the table's type"),
    })
}
