//! Session tokens: the [`Version`] a write returns ([`Written`]), and what decides whether a copy
//! is at least that version.
//!
//! A version is what orders a table's writes on Valkey: the source's own version for a table with
//! `.version_by` (a *source* version), else the instant Valkey's clock stamped the write with (a
//! *written* version, ms). A token is meant for the table that issued it; versions of the two
//! kinds do not compare with each other (a written version orders after every source version, so
//! the order is total, but carries no meaning across kinds).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// The version of one write: opaque, ordered, and printable as a short URL-safe token
/// (`Display`/`FromStr`), to carry from the replica that wrote to the replica that reads, in a
/// cookie or a header. See [`ReadOptions::at_least`](crate::ReadOptions::at_least).
///
/// ```
/// let v: echostore::Version = "w18c3b2a1f00".parse().unwrap();
/// assert_eq!(v.to_string(), "w18c3b2a1f00");
/// assert!("s7".parse::<echostore::Version>().unwrap() < v);
/// assert!("x1".parse::<echostore::Version>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    kind: Kind,
    n: u64,
}

/// What a version counts: declared in the order versions of different kinds sort.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    /// The source's own version (`.version_by`).
    Source,
    /// Valkey's clock when the write landed, unix ms.
    Written,
}

impl Version {
    /// The version of a value whose `.version_by` is `n`: a token a service can hand out for a
    /// row it changed at the source without a put (a database's row version after an `UPDATE`),
    /// for a table ordered by that version.
    pub fn from_source(n: u64) -> Self {
        Self::source(n)
    }

    pub(crate) fn source(n: u64) -> Self {
        Version {
            kind: Kind::Source,
            n,
        }
    }

    pub(crate) fn written(at_ms: u64) -> Self {
        Version {
            kind: Kind::Written,
            n: at_ms,
        }
    }

    /// The source version, for a token of that kind.
    pub(crate) fn as_source(&self) -> Option<u64> {
        (self.kind == Kind::Source).then_some(self.n)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = match self.kind {
            Kind::Source => 's',
            Kind::Written => 'w',
        };
        write!(f, "{tag}{:x}", self.n)
    }
}

/// A token that is not a [`Version`]'s text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionParseError(String);

impl fmt::Display for VersionParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a version token (`s` or `w`, then up to 16 hex digits)",
            self.0
        )
    }
}

impl std::error::Error for VersionParseError {}

impl FromStr for Version {
    type Err = VersionParseError;

    fn from_str(token: &str) -> Result<Self, Self::Err> {
        let bad = || VersionParseError(token.chars().take(40).collect());
        let kind = match token.as_bytes().first() {
            Some(b's') => Kind::Source,
            Some(b'w') => Kind::Written,
            _ => return Err(bad()),
        };
        let digits = &token[1..];
        let hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
        if digits.is_empty() || digits.len() > 16 || !digits.chars().all(hex) {
            return Err(bad());
        }
        let n = u64::from_str_radix(digits, 16).map_err(|_| bad())?;
        Ok(Version { kind, n })
    }
}

/// What [`Table::put_versioned`](crate::Table::put_versioned) stored: the value, shared with L1,
/// and the version that orders it.
#[derive(Debug, Clone)]
pub struct Written<V> {
    /// The value L1 now holds.
    pub value: Arc<V>,
    /// The write's version: pass it to another replica's read as
    /// [`ReadOptions::at_least`](crate::ReadOptions::at_least).
    pub version: Version,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_round_trips_and_hostile_text_is_refused() {
        for v in [
            Version::source(0),
            Version::written(u64::MAX),
            Version::source(42),
        ] {
            assert_eq!(v.to_string().parse::<Version>(), Ok(v));
        }
        for bad in [
            "",
            "s",
            "w-1",
            "sG",
            "W1",
            "s00000000000000000",
            "s1 ",
            "é1",
        ] {
            assert!(bad.parse::<Version>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn versions_order_by_kind_then_number() {
        assert!(Version::source(9) < Version::source(10));
        assert!(Version::written(1) < Version::written(2));
        assert!(Version::source(u64::MAX) < Version::written(0));
    }
}
