//! A value type's own "not found", asked of the type itself through serde: [`absent`] hands
//! `V::deserialize` a deserializer that answers only `deserialize_option`, with `None`.
//! `Option<T>` (and a transparent newtype around one) takes it; every other type asks for
//! something else and is refused. `delete` writes it as a tombstone (`crate::handle::delete`).

use serde::de::{self, Deserializer, Visitor};

use crate::wire::key::Value;

/// The value type's own "not found" (`None` for an `Option`), if it has one.
pub(crate) fn absent<V: Value>() -> Option<V> {
    // The type's `Deserialize` is the user's code: one that panics has no "not found".
    std::panic::catch_unwind(|| V::deserialize(OnlyNone).ok())
        .ok()
        .flatten()
}

/// Whether `value`, of a type that has a "not found" ([`absent`] is `Some`), is it: postcard
/// writes an `Option`'s `None` as the one byte 0, and any `Some` as more.
pub(crate) fn is_none<V: serde::Serialize>(value: &V) -> bool {
    // The value's `Serialize` is the user's code: a panic in it is no `None`.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut one = [0u8; 1];
        matches!(postcard::to_slice(value, &mut one), Ok(bytes) if bytes == [0])
    }))
    .unwrap_or(false)
}

/// A deserializer that answers `deserialize_option` with `None` and refuses everything else.
struct OnlyNone;

#[derive(Debug)]
struct NotAnOption;

impl std::fmt::Display for NotAnOption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not an Option")
    }
}

impl std::error::Error for NotAnOption {}

impl de::Error for NotAnOption {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        NotAnOption
    }
}

impl<'de> Deserializer<'de> for OnlyNone {
    type Error = NotAnOption;

    fn deserialize_any<W: Visitor<'de>>(self, _: W) -> Result<W::Value, NotAnOption> {
        Err(NotAnOption)
    }

    fn deserialize_option<W: Visitor<'de>>(self, visitor: W) -> Result<W::Value, NotAnOption> {
        visitor.visit_none()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Options have a "not found"; other types do not.
    #[test]
    fn only_options_are_absent() {
        assert_eq!(absent::<Option<String>>(), Some(None));
        assert_eq!(absent::<Option<u64>>(), Some(None));
        assert_eq!(absent::<String>(), None);
        assert_eq!(absent::<u64>(), None);
        assert_eq!(absent::<Vec<u8>>(), None);
        assert_eq!(absent::<()>(), None);
        #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        struct Row {
            name: Option<String>,
        }
        assert_eq!(absent::<Row>(), None);
    }

    /// `None` is told apart from every `Some`, the `Some` of a zero included.
    #[test]
    fn only_none_is_none() {
        assert!(is_none(&None::<u64>));
        assert!(!is_none(&Some(0u64)));
        assert!(!is_none(&Some(String::new())));
        assert!(!is_none(&Some(None::<u8>)));
        assert!(is_none(&None::<Option<u8>>));
    }

    /// A value type whose serde code panics: the user's bug is caught where it runs, and the
    /// type has no "not found" and no value of it is `None` (so `delete` invalidates, and a
    /// load's value is kept as a value), rather than the panic ending the caller's task.
    #[test]
    fn serde_code_that_panics_is_no_none() {
        #[derive(Debug)]
        struct Hostile;
        impl serde::Serialize for Hostile {
            fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                panic!("a user's Serialize that panics");
            }
        }
        impl<'de> serde::Deserialize<'de> for Hostile {
            fn deserialize<D: Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
                panic!("a user's Deserialize that panics");
            }
        }
        assert!(absent::<Hostile>().is_none());
        assert!(!is_none(&Hostile));
        assert!(!is_none(&Some(Hostile)));
    }
}
