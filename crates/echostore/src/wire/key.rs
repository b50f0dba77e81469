//! Ids and values: the [`Key`] and [`Value`] traits, and the Valkey key names built from them.
//!
//! An id is rendered to bytes once per L2 operation and placed between braces, so that a value and
//! its lock share one Valkey Cluster hash tag: `<table>:{<id>}` and `lock:<table>:{<id>}`. Table
//! names cannot contain braces, so both names open their first `{` at the same id byte and close
//! it at the same `}` — even when the id itself contains braces — and both land on one shard.
//! An empty tag would not do: Valkey Cluster ignores `{}` and hashes the whole key, so the value
//! and lock of an empty id, or of one that *starts* with `}`, would hash apart (`CROSSSLOT`). Such
//! ids, and those starting with the escape byte `\` itself, are written with one `\` before them
//! (`t:{\}x}` for the id `}x`), which makes every tag non-empty and keeps the names one-to-one.

use std::borrow::Cow;
use std::fmt::Debug;
use std::hash::Hash;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// The longest rendered id accepted, in bytes. Longer ids are refused with
/// [`Error::IdTooLong`] before anything touches Valkey.
pub const MAX_ID_BYTES: usize = 1024;

/// An id of a cache table: hashable for L1 and the flights map, renderable for Valkey.
///
/// Implemented for `String`, `&'static str`, `u64`, `i64`, `u32` and, with the `uuid` feature,
/// `uuid::Uuid`. A rendered id may hold any bytes, braces, colons, spaces and newlines included.
pub trait Key: Clone + Eq + Hash + Debug + Send + Sync + 'static {
    /// The id's bytes as they appear inside the braces of its Valkey keys.
    fn render(&self) -> Cow<'_, [u8]>;

    /// The id back from its rendered bytes, when it can be told: coherence uses it to drop just
    /// that id from L1 when another process changes it. The default, `None`, makes such a change
    /// flush the table's whole L1 instead (correct, only coarser); under `Tracking::Keys` a
    /// confirmation of such an id's key is matched with the ids waiting for one, by their bytes.
    fn from_rendered(bytes: &[u8]) -> Option<Self>
    where
        Self: Sized,
    {
        let _ = bytes;
        None
    }
}

/// A cached value: anything serde can encode and decode that may be shared between threads.
///
/// Implemented for every `Serialize + DeserializeOwned + Send + Sync + 'static` type, so a struct
/// of your own needs only serde's derives (serde with its `derive` feature in your
/// `Cargo.toml`). L1 keeps the value itself, shared as an `Arc<V>`; Valkey holds it encoded.
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct User {
///     id: u64,
///     name: String,
///     email: Option<String>,
/// }
///
/// fn cacheable<V: echostore::Value>() {}
/// cacheable::<User>();
/// cacheable::<Option<User>>(); // "not found" cached too
/// cacheable::<Vec<u8>>();
/// ```
pub trait Value: Serialize + DeserializeOwned + Send + Sync + 'static {}

/// An id as a batch read ([`crate::Table::get_many`]) takes it: the key itself, a reference to
/// one (`&ids` of a `Vec<K>`), or a `&str` for a `String` key.
pub trait IntoId<K> {
    /// The owned key.
    fn into_id(self) -> K;
}

impl<K: Key> IntoId<K> for K {
    fn into_id(self) -> K {
        self
    }
}

impl<K: Key> IntoId<K> for &K {
    fn into_id(self) -> K {
        self.clone()
    }
}

impl IntoId<String> for &str {
    fn into_id(self) -> String {
        self.to_owned()
    }
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> Value for T {}

impl Key for String {
    fn render(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.as_bytes())
    }

    fn from_rendered(bytes: &[u8]) -> Option<Self> {
        String::from_utf8(bytes.to_vec()).ok()
    }
}

impl Key for &'static str {
    fn render(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.as_bytes())
    }
}

macro_rules! integer_key {
    ($($t:ty),*) => {$(
        impl Key for $t {
            fn render(&self) -> Cow<'_, [u8]> {
                Cow::Owned(self.to_string().into_bytes())
            }

            fn from_rendered(bytes: &[u8]) -> Option<Self> {
                std::str::from_utf8(bytes).ok()?.parse().ok()
            }
        }
    )*};
}

integer_key!(u64, i64, u32);

#[cfg(feature = "uuid")]
impl Key for uuid::Uuid {
    fn render(&self) -> Cow<'_, [u8]> {
        Cow::Owned(self.hyphenated().to_string().into_bytes())
    }

    fn from_rendered(bytes: &[u8]) -> Option<Self> {
        uuid::Uuid::try_parse_ascii(bytes).ok()
    }
}

/// The word before a lock key's table name (`lock:<table>:{<id>}`): no namespace may be it.
pub(crate) const LOCK_PREFIX: &str = "lock";

/// The byte written before a rendered id that would otherwise give an empty hash tag.
const ESCAPE: u8 = b'\\';

/// `true` for a rendered id written with [`ESCAPE`] before it: empty, starting with `}` (either
/// would leave the tag empty), or starting with the escape itself (so the names stay one-to-one).
fn escaped(id: &[u8]) -> bool {
    matches!(id.first(), None | Some(b'}' | &ESCAPE))
}

/// The Valkey names of one id's value and lock, as every EchoStore process builds them
/// (`docs/lock-protocol.md`, "Keys"); [`key_names`] makes them from a rendered id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyNames {
    /// `[<namespace>:]<table>:{<id>}`
    pub value: Vec<u8>,
    /// `[<namespace>:]lock:<table>:{<id>}`
    pub lock: Vec<u8>,
    /// The other live schemas' value and lock keys of the id, in pairs, when the names are a
    /// write's (`crate::state::schemas`): a put or an invalidation drops them too.
    pub(crate) others: Vec<Vec<u8>>,
}

/// The Valkey names of the id rendered as `id` in `table` under `namespace` (as given to
/// `StoreBuilder::namespace`, if any): what `echostore inspect` and `purge` read, and what an
/// operator's own tooling should use rather than building the names by hand.
///
/// ```
/// let names = echostore::protocol::key_names(Some("app"), "users", b"42").unwrap();
/// assert_eq!(names.value, b"app:users:{42}");
/// assert_eq!(names.lock, b"app:lock:users:{42}");
/// let odd = echostore::protocol::key_names(None, "t", b"}x").unwrap();
/// assert_eq!(odd.value, b"t:{\\}x}", "escaped: the hash tag is never empty");
/// ```
///
/// # Errors
///
/// [`Error::InvalidName`] for a namespace or table name the library refuses,
/// [`Error::IdTooLong`] for an id over [`MAX_ID_BYTES`].
pub fn key_names(namespace: Option<&str>, table: &str, id: &[u8]) -> Result<KeyNames> {
    validate_table_name(table)?;
    KeyNames::rendered(&namespace_prefix(namespace)?, table, id)
}

/// What a namespace puts before every key: `""`, or `"<ns>:"` for a valid one.
pub(crate) fn namespace_prefix(namespace: Option<&str>) -> Result<String> {
    match namespace {
        Some(ns) if ns == LOCK_PREFIX => Err(Error::InvalidName(ns.to_owned())),
        Some(ns) => {
            validate_table_name(ns)?;
            Ok(format!("{ns}:"))
        }
        None => Ok(String::new()),
    }
}

impl KeyNames {
    /// Builds both names under `namespace` (`""`, or `"<ns>:"`), refusing ids over
    /// [`MAX_ID_BYTES`].
    pub(crate) fn new(namespace: &str, table: &str, id: &impl Key) -> Result<Self> {
        Self::rendered(namespace, table, &id.render())
    }

    fn rendered(namespace: &str, table: &str, id: &[u8]) -> Result<Self> {
        if id.len() > MAX_ID_BYTES {
            return Err(Error::IdTooLong {
                len: id.len(),
                max: MAX_ID_BYTES,
            });
        }
        let mut value = Vec::with_capacity(namespace.len() + table.len() + id.len() + 4);
        value.extend_from_slice(namespace.as_bytes());
        value.extend_from_slice(table.as_bytes());
        value.extend_from_slice(b":{");
        if escaped(id) {
            value.push(ESCAPE);
        }
        value.extend_from_slice(id);
        value.push(b'}');
        let mut lock = Vec::with_capacity(value.len() + 5);
        lock.extend_from_slice(namespace.as_bytes());
        lock.extend_from_slice(b"lock:");
        lock.extend_from_slice(&value[namespace.len()..]);
        Ok(KeyNames {
            value,
            lock,
            others: Vec::new(),
        })
    }

    /// The names of a schema's copies: `suffix` (`#<schema>.<generation>`, or nothing for schema
    /// 0) after both names, and `others`' value and lock names beside them.
    pub(crate) fn in_schema<'s>(
        mut self,
        suffix: &[u8],
        others: impl Iterator<Item = &'s [u8]>,
    ) -> Self {
        for other in others {
            for base in [&self.value, &self.lock] {
                let mut key = Vec::with_capacity(base.len() + other.len());
                key.extend_from_slice(base);
                key.extend_from_slice(other);
                self.others.push(key);
            }
        }
        self.value.extend_from_slice(suffix);
        self.lock.extend_from_slice(suffix);
        self
    }

    /// Every key a write drops or sets: the value, the lock, and the other schemas' pairs.
    pub(crate) fn all(&self) -> impl Iterator<Item = &[u8]> {
        [self.value.as_slice(), self.lock.as_slice()]
            .into_iter()
            .chain(self.others.iter().map(Vec::as_slice))
    }
}

/// The byte that opens a schema's suffix after an id's `}` (`crate::state::schemas`).
pub(crate) const SCHEMA_MARK: u8 = b'#';

/// Splits a value or lock key into the key of schema 0 and its schema's suffix (empty for schema
/// 0): the suffix is what follows the last `}` when it opens with [`SCHEMA_MARK`]. An id's tag
/// runs to the last `}`, and no suffix holds one, so the split is one-to-one.
pub(crate) fn split_schema(key: &[u8]) -> (&[u8], &[u8]) {
    match key.iter().rposition(|&b| b == b'}') {
        Some(close) if key.get(close + 1) == Some(&SCHEMA_MARK) => key.split_at(close + 1),
        _ => (key, &[]),
    }
}

/// What follows `<table>:` in the name of a table's marks. No id's value key can take that name:
/// an id whose tag would open with `}` is escaped.
const MARKS_SUFFIX: &[u8] = b"{}marks";

/// The Valkey name of a table's marks, the sorted set that records its clears and tag
/// invalidations (`docs/tags-and-clear.md`): `[<namespace>:]<table>:{}marks`, under the table's
/// tracked prefix, so that every process of the table hears when it changes.
///
/// ```
/// let key = echostore::protocol::marks_key(Some("app"), "users").unwrap();
/// assert_eq!(key, b"app:users:{}marks");
/// ```
///
/// # Errors
///
/// [`Error::InvalidName`] for a namespace or table name the library refuses.
pub fn marks_key(namespace: Option<&str>, table: &str) -> Result<Vec<u8>> {
    validate_table_name(table)?;
    Ok(marks_key_under(&namespace_prefix(namespace)?, table))
}

/// [`marks_key`] under a store's `namespace` (`""`, or `"<ns>:"`) for a checked table name.
pub(crate) fn marks_key_under(namespace: &str, table: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(namespace.len() + table.len() + 1 + MARKS_SUFFIX.len());
    key.extend_from_slice(namespace.as_bytes());
    key.extend_from_slice(table.as_bytes());
    key.push(b':');
    key.extend_from_slice(MARKS_SUFFIX);
    key
}

impl KeyNames {
    /// The Valkey Cluster hash slot of both names (they share the `{id}` hash tag).
    #[cfg(feature = "cluster")]
    pub(crate) fn slot(&self) -> u16 {
        slot(&self.value)
    }
}

/// The Valkey Cluster hash slot of `key`: CRC16 of the hash tag (the bytes between the first `{`
/// and the first `}` after it, when there are any) modulo 16384, as the cluster computes it.
#[cfg(feature = "cluster")]
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tag) % 16384
}

/// Which of an id's two keys a Valkey key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyKind {
    /// `<table>:{<id>}`
    Value,
    /// `lock:<table>:{<id>}`
    Lock,
    /// `<table>:{}marks`, the table's clears and tag invalidations (the id is empty).
    Marks,
}

/// Splits a Valkey key under `namespace` into its kind, table and rendered id; `None` for keys of
/// no table. Table
/// names hold no `:` or `{`, so the first `:{` ends the table name, and the id runs to the last `}`.
pub(crate) fn parse_key<'k>(
    namespace: &str,
    key: &'k [u8],
) -> Option<(KeyKind, &'k str, &'k [u8])> {
    let key = key.strip_prefix(namespace.as_bytes())?;
    let (kind, rest) = match key.strip_prefix(b"lock:") {
        Some(rest) if rest.first() != Some(&b'{') => (KeyKind::Lock, rest),
        _ => (KeyKind::Value, key),
    };
    let colon = rest.iter().position(|&b| b == b':')?;
    let (table, tagged) = (&rest[..colon], &rest[colon + 1..]);
    if kind == KeyKind::Value && tagged == MARKS_SUFFIX {
        let table = std::str::from_utf8(table).ok()?;
        validate_table_name(table).ok()?;
        return Some((KeyKind::Marks, table, &[]));
    }
    let id = tagged.strip_prefix(b"{")?.strip_suffix(b"}")?;
    let id = match id.split_first() {
        Some((&ESCAPE, rest)) => rest,
        _ => id,
    };
    let table = std::str::from_utf8(table).ok()?;
    validate_table_name(table).ok()?;
    Some((kind, table, id))
}

/// Checks a table name against `[A-Za-z0-9_.-]{1,64}`.
pub(crate) fn validate_table_name(name: &str) -> Result<()> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidName(name.to_owned()))
    }
}

#[cfg(test)]
mod tests;
