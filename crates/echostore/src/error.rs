//! The one error type of the crate.
//!
//! A single fill answers many waiters, so [`Error`] is `Clone`: every waiter of a flight receives
//! the same error. Causes that are not `Clone` themselves (a loader's error, a Valkey error) are
//! kept behind an `Arc`.

use std::sync::Arc;
use std::time::Duration;

/// The result type of every fallible EchoStore call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A boxed error as a loader returns it, shared by every waiter of the flight.
pub type SharedError = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in EchoStore.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another process holds the regeneration lock and the table's loser policy is
    /// [`LoserPolicy::FailFast`](crate::LoserPolicy::FailFast).
    #[error("another process is regenerating this key (the table fails fast)")]
    LockBusy,

    /// A polling loser waited `waited` without seeing a fresh value.
    #[error("no fresh value appeared within {waited:?} while another process held the lock")]
    WaitTimeout {
        /// How long the loser polled.
        waited: Duration,
    },

    /// The loader failed; every waiter of the flight receives this same error. Nothing was cached.
    #[error("the loader failed: {0}")]
    Source(SharedError),

    /// The loader panicked; its waiters receive this instead of hanging. Nothing was cached.
    #[error("the loader panicked: {0}")]
    LoaderPanicked(Arc<str>),

    /// The loader did not finish within the table's `load_timeout`.
    #[error("the loader did not finish within {0:?}")]
    LoadTimeout(Duration),

    /// Valkey answered with an error, or could not be reached, during an operation that needs it
    /// (a `put`, an `invalidate`, or a store built with `require_valkey`).
    #[error("valkey: {context}: {source}")]
    Valkey {
        /// What EchoStore was doing.
        context: &'static str,
        /// The error from the client.
        source: Arc<redis::RedisError>,
    },

    /// Valkey could not be reached recently and the circuit breaker is open: the call failed at
    /// once without touching the network. Fills degrade to L1 + loader instead of surfacing this.
    #[error("valkey is unreachable (circuit breaker open)")]
    ValkeyUnavailable,

    /// A value could not be encoded for L2.
    #[error("codec: {0}")]
    Codec(Arc<str>),

    /// A value's encoding is larger than the table's `max_value_bytes`; nothing was written.
    #[error("the encoded value is {size} bytes, over the table's limit of {max} bytes")]
    TooLarge {
        /// The size of the encoded value.
        size: usize,
        /// The table's limit.
        max: usize,
    },

    /// A rendered id is longer than [`MAX_ID_BYTES`](crate::MAX_ID_BYTES).
    #[error("the id renders to {len} bytes, over the limit of {max} bytes")]
    IdTooLong {
        /// The rendered length.
        len: usize,
        /// The limit.
        max: usize,
    },

    /// A table name outside `[A-Za-z0-9_.-]{1,64}`.
    #[error("invalid table name {0:?}: use 1 to 64 characters from [A-Za-z0-9_.-]")]
    InvalidName(String),

    /// A builder setting that cannot work (no loader, jitter out of range, a zero duration…).
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    /// The table's owner is gone (the table was dropped, the store shut down, or the owner
    /// crashed and the call was in its mailbox).
    #[error("the table's owner has stopped")]
    Stopped,
}

impl Error {
    /// Wraps a Valkey client error with what EchoStore was doing.
    pub(crate) fn valkey(context: &'static str, err: redis::RedisError) -> Self {
        Error::Valkey {
            context,
            source: Arc::new(err),
        }
    }

    /// `true` for [`Error::LockBusy`].
    pub fn is_lock_busy(&self) -> bool {
        matches!(self, Error::LockBusy)
    }

    /// `true` for [`Error::WaitTimeout`].
    pub fn is_wait_timeout(&self) -> bool {
        matches!(self, Error::WaitTimeout { .. })
    }

    /// `true` when the loader failed, panicked or timed out: the source, not the cache, is at fault.
    pub fn is_source(&self) -> bool {
        matches!(
            self,
            Error::Source(_) | Error::LoaderPanicked(_) | Error::LoadTimeout(_)
        )
    }

    /// `true` for [`Error::Valkey`] and [`Error::ValkeyUnavailable`].
    pub fn is_valkey(&self) -> bool {
        matches!(self, Error::Valkey { .. } | Error::ValkeyUnavailable)
    }

    /// `WRONGTYPE`: the key holds a hash, a list… rather than a string.
    pub(crate) fn is_wrong_type(&self) -> bool {
        matches!(self, Error::Valkey { source, .. } if source.code() == Some("WRONGTYPE"))
    }

    /// `true` for [`Error::Stopped`].
    pub fn is_stopped(&self) -> bool {
        matches!(self, Error::Stopped)
    }
}
