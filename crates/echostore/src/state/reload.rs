//! Refresh with the old value ([`Reload`], `.reloader`): what a reloader answers, and the
//! winner's part of it. A copy on Valkey within its stale window is handed to the reloader
//! instead of calling the loader; "unchanged" renews that copy where it is — its life restamped
//! on Valkey by a fenced script ([`crate::valkey::lock::renew`]), the same `Arc` kept in L1 — so the
//! source's "304 Not Modified" costs no value bytes on the wire. The renewed copy keeps its
//! fingerprint (which leaves out the life), so this process knows the push it causes for its own.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::error::SharedError;

/// What a reloader says of the value it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reload<V> {
    /// The source still holds this value: renew its life everywhere, send no bytes.
    Unchanged,
    /// The source holds this value now: store it as a load's.
    Changed(V),
    /// The row is gone at the source: delete the copy; the read answers `Error::Absent`.
    Gone,
}

/// A table's `.reloader`.
pub(crate) type Reloader<K, V> =
    Arc<dyn Fn(K, Arc<V>) -> BoxFuture<'static, Result<Reload<V>, SharedError>> + Send + Sync>;
