//! Ids and values: the [`Key`] and [`Value`] traits, and the Valkey key names built from them.
//!
//! An id is rendered to bytes once per L2 operation and placed between braces, so that a value and
//! its lock share one Valkey Cluster hash tag: `<table>:{<id>}` and `lock:<table>:{<id>}`. Table
//! names cannot contain braces, so both names open their first `{` at the same id byte and close
//! it at the same `}` — even when the id itself contains braces — and both land on one shard.
//! (One exception, relevant only on a Valkey Cluster: an id that *starts* with `}` gives the empty
//! tag `{}`, which Cluster ignores, so its value and lock may hash apart. EchoStore talks to a single
//! Valkey today, where this changes nothing.)

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

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> Value for T {}

impl Key for String {
    fn render(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.as_bytes())
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
        }
    )*};
}

integer_key!(u64, i64, u32);

#[cfg(feature = "uuid")]
impl Key for uuid::Uuid {
    fn render(&self) -> Cow<'_, [u8]> {
        Cow::Owned(self.hyphenated().to_string().into_bytes())
    }
}

/// The Valkey names of one id's value and lock.
#[derive(Debug, Clone)]
pub(crate) struct KeyNames {
    /// `<table>:{<id>}`
    pub(crate) value: Vec<u8>,
    /// `lock:<table>:{<id>}`
    pub(crate) lock: Vec<u8>,
}

impl KeyNames {
    /// Builds both names, refusing ids over [`MAX_ID_BYTES`].
    pub(crate) fn new(table: &str, id: &impl Key) -> Result<Self> {
        let id = id.render();
        if id.len() > MAX_ID_BYTES {
            return Err(Error::IdTooLong {
                len: id.len(),
                max: MAX_ID_BYTES,
            });
        }
        let mut value = Vec::with_capacity(table.len() + id.len() + 3);
        value.extend_from_slice(table.as_bytes());
        value.extend_from_slice(b":{");
        value.extend_from_slice(&id);
        value.push(b'}');
        let mut lock = Vec::with_capacity(value.len() + 5);
        lock.extend_from_slice(b"lock:");
        lock.extend_from_slice(&value);
        Ok(KeyNames { value, lock })
    }
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
mod tests {
    use super::*;

    /// The names on the wire are DESIGN.md's, braces and all.
    #[test]
    fn names_follow_the_design() {
        let names = KeyNames::new("set", &"EMS0ODMggk1d5N").expect("short id");
        assert_eq!(names.value, b"set:{EMS0ODMggk1d5N}");
        assert_eq!(names.lock, b"lock:set:{EMS0ODMggk1d5N}");
    }

    /// Ids with braces keep value and lock on one hash tag.
    #[test]
    fn braces_inside_ids_keep_one_hash_tag() {
        let names = KeyNames::new("t", &String::from("a}b{c")).expect("short id");
        let tag = |k: &[u8]| {
            let open = k.iter().position(|&b| b == b'{').expect("open");
            let close = open + k[open..].iter().position(|&b| b == b'}').expect("close");
            k[open + 1..close].to_vec()
        };
        assert_eq!(tag(&names.value), tag(&names.lock));
    }

    /// Ids over the limit are refused, not truncated.
    #[test]
    fn long_ids_are_refused() {
        let id = "x".repeat(MAX_ID_BYTES + 1);
        assert!(matches!(
            KeyNames::new("t", &id),
            Err(Error::IdTooLong { len, max: MAX_ID_BYTES }) if len == MAX_ID_BYTES + 1
        ));
    }

    /// Only the documented alphabet and lengths are table names.
    #[test]
    fn table_names_are_validated() {
        for good in ["users", "a", "A-z_0.9", &"n".repeat(64)] {
            assert!(validate_table_name(good).is_ok(), "{good}");
        }
        for bad in ["", "has space", "brace{", "colon:", "ünï", &"n".repeat(65)] {
            assert!(validate_table_name(bad).is_err(), "{bad}");
        }
    }
}
