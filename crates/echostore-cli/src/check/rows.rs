//! What a check table holds for a row: the source's version, and on an [`OPTIONAL`] table
//! `None` for a row the source no longer has. Such a table caches "not found" as a service
//! would (`Option` values, the crate docs' recipe): a `delete` writes a tombstone through L1 and
//! Valkey, a load of a gone row caches `None`, and both must obey every rule a value does.
//!
//! The source has no "gone" of its own: on an optional table, every version [`is_gone`] names
//! is a row that is gone (one in three, so reads meet `None` often), and a delete moves the
//! source to the next such version before it calls `Table::delete`. A `None` answer names no
//! version; it is recorded as [`GONE`] and the model judges it as the gone version most in its
//! favour (`model::Run::resolve`). In every other worker ([`leaves_out`]) the batch loader leaves
//! a gone row out of its answer instead, as a service without `Option` values would: that read
//! answers `Error::Absent`, recorded as [`GONE`] too.

use echostore::{LoserPolicy, Value};

/// Which tables ([`TABLES`](super::tables::TABLES) order) cache `Option` values.
pub(crate) const OPTIONAL: [bool; 3] = [true, false, false];

/// What a read of a gone row (`None`) records as its version: no source version is this large
/// (and it is not [`PLACEHOLDER`](super::tables::PLACEHOLDER)).
pub(crate) const GONE: u64 = u64::MAX - 1;

/// Whether `version` of `table`'s rows is a row gone at the source.
pub(crate) fn is_gone(table: u8, version: u64) -> bool {
    OPTIONAL.get(usize::from(table)) == Some(&true) && version % 3 == 2
}

/// Whether worker `process`'s batch loader of `table` leaves a gone row out of its answer
/// (`Error::Absent`: nothing cached, the row's copies deleted) rather than answering `None`:
/// on the optional table, in every other worker, so that the two meet on every id.
pub(crate) fn leaves_out(process: u32, table: u8) -> bool {
    OPTIONAL.get(usize::from(table)) == Some(&true) && process.is_multiple_of(2)
}

/// The first version after `version` that is a row gone at the source (what a delete moves the
/// source to).
pub(crate) fn next_gone(version: u64) -> u64 {
    let next = version + 1;
    next + (5 - next % 3) % 3
}

/// A check table's value type: built from the source's version, read back as one.
pub(crate) trait Row: Value + Clone + PartialEq {
    /// The value of `version` of one of `table`'s rows.
    fn of(table: u8, version: u64) -> Self;

    /// The version a read records: [`GONE`] for `None`.
    fn shown(&self) -> u64;
}

impl Row for u64 {
    fn of(_: u8, version: u64) -> Self {
        version
    }

    fn shown(&self) -> u64 {
        *self
    }
}

impl Row for Option<u64> {
    fn of(table: u8, version: u64) -> Self {
        (!is_gone(table, version)).then_some(version)
    }

    fn shown(&self) -> u64 {
        self.unwrap_or(GONE)
    }
}

/// `policy` for a table whose values are `V`: its placeholder as `table`'s value of that version.
pub(crate) fn policy_for<V: Row>(policy: &LoserPolicy<u64>, table: u8) -> LoserPolicy<V> {
    match policy {
        LoserPolicy::ServeStale => LoserPolicy::ServeStale,
        LoserPolicy::Default(version) => LoserPolicy::Default(V::of(table, *version)),
        LoserPolicy::FailFast => LoserPolicy::FailFast,
        LoserPolicy::Poll { every, up_to } => LoserPolicy::Poll {
            every: *every,
            up_to: *up_to,
        },
        // A policy this check does not know: the library's default.
        _ => LoserPolicy::DEFAULT_POLL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A delete moves the source to the next gone version, whatever the current one.
    #[test]
    fn a_delete_moves_to_the_next_gone_version() {
        for version in 0..30 {
            let next = next_gone(version);
            assert!(next > version && is_gone(0, next), "{version} -> {next}");
            assert!((version + 1..next).all(|v| !is_gone(0, v)), "{version}");
        }
    }

    /// Only an optional table has gone rows; its value of a gone version is `None`, read back as
    /// [`GONE`]; the placeholder and the initial row are live.
    #[test]
    fn a_gone_version_is_none_on_an_optional_table_only() {
        assert_eq!(<Option<u64>>::of(0, 2), None);
        assert_eq!(<Option<u64>>::of(0, 2).shown(), GONE);
        assert_eq!(<Option<u64>>::of(0, 3).shown(), 3);
        assert!(!is_gone(1, 2) && !is_gone(0, 0));
        assert!(!is_gone(0, super::super::tables::PLACEHOLDER));
        assert_eq!(u64::of(0, 2).shown(), 2);
    }
}
