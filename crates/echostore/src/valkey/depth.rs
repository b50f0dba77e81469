//! Bounded nesting while decoding: a [`serde::Deserializer`] adapter that counts how deeply the
//! value being built is nested and fails once it passes a limit.
//!
//! Why: bytes on Valkey are anyone's input; a self-nesting type lets a few megabytes describe a
//! value a million deep, which serde decodes (and `Drop` drops) by recursion until the stack
//! overflows. Growing the stack cannot help: the nesting is refused before the value exists.
//!
//! How: [`Limited`] wraps any deserializer (postcard's, in [`crate::valkey::envelope`]). Every visitor it
//! hands on is wrapped, and every compound the visitor opens — a sequence, tuple, map, struct,
//! enum, newtype or `Some` — takes one level from a shared [`Budget`] for as long as its contents
//! are being decoded, and gives it back when it is done. Sibling elements never add up: a list of
//! a million flat items is one level deep. Past the limit the decode fails with the deserializer's
//! own error, and the budget records that the limit was the reason.

use std::cell::Cell;
use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};

/// How deeply one decode may nest, and how deep it is now.
pub(crate) struct Budget {
    max: usize,
    depth: Cell<usize>,
    exceeded: Cell<bool>,
}

impl Budget {
    /// A budget of `max` levels.
    pub(crate) fn new(max: usize) -> Self {
        Budget {
            max,
            depth: Cell::new(0),
            exceeded: Cell::new(false),
        }
    }

    /// `true` once a decode under this budget tried to nest deeper than its limit.
    pub(crate) fn exceeded(&self) -> bool {
        self.exceeded.get()
    }

    /// Takes one level until the returned guard is dropped; past the limit, an error.
    fn enter<E: de::Error>(&self) -> Result<Level<'_>, E> {
        let depth = self.depth.get() + 1;
        if depth > self.max {
            self.exceeded.set(true);
            return Err(E::custom(format_args!(
                "nested deeper than {} levels",
                self.max
            )));
        }
        self.depth.set(depth);
        Ok(Level(self))
    }
}

/// One level taken from a [`Budget`], given back on drop (on success and on error alike).
struct Level<'b>(&'b Budget);

impl Drop for Level<'_> {
    fn drop(&mut self) {
        self.0.depth.set(self.0.depth.get().saturating_sub(1));
    }
}

/// A deserializer whose values may nest at most as deep as its budget allows.
pub(crate) struct Limited<'b, D> {
    de: D,
    budget: &'b Budget,
}

impl<'b, D> Limited<'b, D> {
    /// Wraps `de`; everything decoded through it shares `budget`.
    pub(crate) fn new(de: D, budget: &'b Budget) -> Self {
        Limited { de, budget }
    }
}

/// A visitor, seed or access handed on under the same budget.
struct Wrap<'b, T> {
    inner: T,
    budget: &'b Budget,
}

impl<'b, T> Wrap<'b, T> {
    fn new(inner: T, budget: &'b Budget) -> Self {
        Wrap { inner, budget }
    }
}

macro_rules! forward_deserialize {
    ($($method:ident),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            self.de.$method(Wrap::new(visitor, self.budget))
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Limited<'_, D> {
    type Error = D::Error;

    forward_deserialize!(
        deserialize_any,
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_option,
        deserialize_unit,
        deserialize_seq,
        deserialize_map,
        deserialize_identifier,
        deserialize_ignored_any,
    );

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de
            .deserialize_unit_struct(name, Wrap::new(visitor, self.budget))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de
            .deserialize_newtype_struct(name, Wrap::new(visitor, self.budget))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de
            .deserialize_tuple(len, Wrap::new(visitor, self.budget))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de
            .deserialize_tuple_struct(name, len, Wrap::new(visitor, self.budget))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de
            .deserialize_struct(name, fields, Wrap::new(visitor, self.budget))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de
            .deserialize_enum(name, variants, Wrap::new(visitor, self.budget))
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty)),* $(,)?) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.inner.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    forward_visit!(
        visit_bool(bool),
        visit_i8(i8),
        visit_i16(i16),
        visit_i32(i32),
        visit_i64(i64),
        visit_i128(i128),
        visit_u8(u8),
        visit_u16(u16),
        visit_u32(u32),
        visit_u64(u64),
        visit_u128(u128),
        visit_f32(f32),
        visit_f64(f64),
        visit_char(char),
        visit_str(&str),
        visit_borrowed_str(&'de str),
        visit_string(String),
        visit_bytes(&[u8]),
        visit_borrowed_bytes(&'de [u8]),
        visit_byte_buf(Vec<u8>),
    );

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        let _level = self.budget.enter()?;
        self.inner.visit_some(Limited::new(de, self.budget))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        let _level = self.budget.enter()?;
        self.inner
            .visit_newtype_struct(Limited::new(de, self.budget))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        let _level = self.budget.enter()?;
        self.inner.visit_seq(Wrap::new(seq, self.budget))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        let _level = self.budget.enter()?;
        self.inner.visit_map(Wrap::new(map, self.budget))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        let _level = self.budget.enter()?;
        self.inner.visit_enum(Wrap::new(data, self.budget))
    }
}

impl<'de, T: DeserializeSeed<'de>> DeserializeSeed<'de> for Wrap<'_, T> {
    type Value = T::Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<T::Value, D::Error> {
        self.inner.deserialize(Limited::new(de, self.budget))
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Wrap<'_, A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.inner.next_element_seed(Wrap::new(seed, self.budget))
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Wrap<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.inner.next_key_seed(Wrap::new(seed, self.budget))
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.inner.next_value_seed(Wrap::new(seed, self.budget))
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'b, 'de, A: EnumAccess<'de>> EnumAccess<'de> for Wrap<'b, A> {
    type Error = A::Error;
    type Variant = Wrap<'b, A::Variant>;

    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Self::Variant), A::Error> {
        let (tag, variant) = self.inner.variant_seed(Wrap::new(seed, self.budget))?;
        Ok((tag, Wrap::new(variant, self.budget)))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Wrap<'_, A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.inner
            .newtype_variant_seed(Wrap::new(seed, self.budget))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.inner
            .tuple_variant(len, Wrap::new(visitor, self.budget))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.inner
            .struct_variant(fields, Wrap::new(visitor, self.budget))
    }
}

#[cfg(test)]
mod tests;
