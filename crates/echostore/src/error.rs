//! The one error type of the crate.
//!
//! A single fill answers many waiters, so [`Error`] is `Clone`: every waiter of a flight receives
//! the same error. Causes that are not `Clone` themselves (a loader's error, a Valkey error) are
//! kept behind an `Arc`. No type of the Valkey client appears in the public surface: its errors
//! are wrapped in [`ValkeyError`].

use std::sync::Arc;
use std::time::Duration;

/// The result type of every fallible EchoStore call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How many links of a loader error's chain [`Error::source_as`] looks through.
const MAX_CHAIN: usize = 64;

/// A boxed error as a loader returns it, shared by every waiter of the flight.
pub type SharedError = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in EchoStore.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// Another process holds the regeneration lock and the table's loser policy is
    /// [`LoserPolicy::FailFast`](crate::LoserPolicy::FailFast).
    LockBusy,

    /// The table's `source_budget` was spent across the fleet: no lease came within `waited`
    /// (zero when the loser policy is `FailFast`), so the source was not read.
    BudgetExhausted {
        /// How long the load waited for a lease.
        waited: Duration,
    },

    /// A read with [`ReadOptions::at_least`](crate::ReadOptions::at_least) found no copy of at
    /// least `wanted` within its bounds: the source itself answered an older version.
    VersionUnavailable {
        /// The version the read had to see.
        wanted: crate::Version,
    },

    /// A polling loser waited `waited` without seeing a fresh value.
    WaitTimeout {
        /// How long the loser polled.
        waited: Duration,
    },

    /// The loader failed; every waiter of the flight receives this same error. Nothing was cached.
    ///
    /// The loader's own error is inside: [`std::error::Error::source`] on this error returns it,
    /// and [`Error::source_as`] downcasts it to the loader's error type.
    Source(SharedError),

    /// The loader panicked; its waiters receive this instead of hanging. Nothing was cached.
    LoaderPanicked(Arc<str>),

    /// The loader did not finish within the table's `load_timeout`.
    LoadTimeout(Duration),

    /// Valkey answered with an error, or could not be reached, during an operation that needs it
    /// (a `put`, an `invalidate`, or a store built with `require_valkey`).
    Valkey {
        /// What EchoStore was doing.
        context: &'static str,
        /// The error from the client.
        source: ValkeyError,
    },

    /// Valkey could not be reached recently and the circuit breaker is open: the call failed at
    /// once without touching the network. Fills degrade to L1 + loader instead of surfacing this.
    ValkeyUnavailable,

    /// A value could not be encoded for L2.
    Codec(Arc<str>),

    /// A value's encoding is larger than the table's `max_value_bytes`; nothing was written.
    TooLarge {
        /// The size of the encoded value.
        size: usize,
        /// The table's limit.
        max: usize,
    },

    /// A rendered id is longer than [`MAX_ID_BYTES`](crate::MAX_ID_BYTES).
    IdTooLong {
        /// The rendered length.
        len: usize,
        /// The limit.
        max: usize,
    },

    /// A table name outside `[A-Za-z0-9_.-]{1,64}`.
    InvalidName(String),

    /// A builder setting that cannot work (no loader, jitter out of range, a zero duration…).
    InvalidConfig(String),

    /// The table's owner is gone (the table was dropped, the store shut down, or the owner
    /// crashed and the call was in its mailbox).
    Stopped,

    /// A `put` changed nothing: Valkey holds a newer value — a newer version from the source
    /// (`.version_by`), or a value stamped ahead of Valkey's own clock (planted bytes, or a server
    /// clock stepped back), which stands until it expires or is more than `MAX_CLOCK_SKEW_MS`
    /// ahead. No L1 copy was kept; `invalidate` removes the stored value.
    Superseded,

    /// A `put` reached Valkey after its deadline (about `valkey_timeout` after it was sent) and
    /// was refused there, changing nothing: a write its caller had given up on may not land later
    /// over newer ones. Like any failed put, the id is repaired (`docs/failure-semantics.md`).
    WriteTooLate,

    /// The table's batch loader answered without a value for this id (it left the id out of its
    /// map): the row does not exist at the source, as far as the loader says. Nothing is cached
    /// for it; `get_many` and `fetch_many` leave such ids out of their answer. To cache "not
    /// found", make the value an `Option` and have the batch loader answer `None`.
    Absent,
}

impl Error {
    /// Wraps a Valkey client error with what EchoStore was doing.
    pub(crate) fn valkey(context: &'static str, err: redis::RedisError) -> Self {
        Error::Valkey {
            context,
            source: ValkeyError(Arc::new(err)),
        }
    }

    /// The loader's own error as an `E`, when this is [`Error::Source`]: the first error of type
    /// `E` in the loader error's chain (the error itself, then each [`source`]).
    ///
    /// A loader that returns `Result<V, E>` gets its `E` back, and so does one that returns a
    /// `Box<dyn Error + Send + Sync>` holding an `E`. With `anyhow`, an error given context
    /// (`.context("…")`) is found here, since anyhow's context error names the original as its
    /// source; an error turned into an `anyhow::Error` by `?` alone is boxed inside anyhow's own
    /// type and is not (its message and chain still show in this error's `Display` and
    /// [`source`]).
    ///
    /// [`source`]: std::error::Error::source
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::{Error, Store};
    ///
    /// #[derive(Debug, thiserror::Error)]
    /// #[error("no such user: {0}")]
    /// struct NoSuchUser(u64);
    ///
    /// let store = Store::builder().build().await?;
    /// let users = store
    ///     .table::<u64, String>("users")
    ///     .loader(|id: u64| async move { Err::<String, _>(NoSuchUser(id)) })
    ///     .build()
    ///     .await?;
    /// let err = users.get(&7).await.expect_err("the loader fails");
    /// assert!(matches!(err.source_as::<NoSuchUser>(), Some(NoSuchUser(7))));
    /// // The standard way reaches the same error.
    /// let source = std::error::Error::source(&err).expect("a source");
    /// assert_eq!(source.to_string(), "no such user: 7");
    /// # Ok(())
    /// # }
    /// ```
    pub fn source_as<E: std::error::Error + 'static>(&self) -> Option<&E> {
        let Error::Source(shared) = self else {
            return None;
        };
        let mut link: Option<&(dyn std::error::Error + 'static)> = Some(&**shared);
        // Bounded: an error type whose chain loops must not hang the caller.
        for _ in 0..MAX_CHAIN {
            let error = link?;
            if let Some(found) = error.downcast_ref::<E>() {
                return Some(found);
            }
            link = error.source();
        }
        None
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

    /// `true` for [`Error::Absent`]: the batch loader left the id out of its answer.
    pub fn is_absent(&self) -> bool {
        matches!(self, Error::Absent)
    }

    /// `true` for [`Error::Superseded`].
    pub fn is_superseded(&self) -> bool {
        matches!(self, Error::Superseded)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::LockBusy => {
                f.write_str("another process is regenerating this key (the table fails fast)")
            }
            Error::BudgetExhausted { waited } => write!(
                f,
                "the table's source budget was spent: no load could start within {waited:?}"
            ),
            Error::VersionUnavailable { wanted } => write!(
                f,
                "no copy of at least version {wanted} could be had within the read's bounds"
            ),
            Error::WaitTimeout { waited } => write!(
                f,
                "no fresh value appeared within {waited:?} while another process held the lock"
            ),
            Error::Source(source) => write!(f, "the loader failed: {source}"),
            Error::LoaderPanicked(message) => write!(f, "the loader panicked: {message}"),
            Error::LoadTimeout(limit) => write!(f, "the loader did not finish within {limit:?}"),
            Error::Valkey { context, source } => write!(f, "valkey: {context}: {source}"),
            Error::ValkeyUnavailable => f.write_str("valkey is unreachable (circuit breaker open)"),
            Error::Codec(what) => write!(f, "codec: {what}"),
            Error::TooLarge { size, max } => write!(
                f,
                "the encoded value is {size} bytes, over the table's limit of {max} bytes"
            ),
            Error::IdTooLong { len, max } => write!(
                f,
                "the id renders to {len} bytes, over the limit of {max} bytes"
            ),
            Error::InvalidName(name) => write!(
                f,
                "invalid table name {name:?}: use 1 to 64 characters from [A-Za-z0-9_.-]"
            ),
            Error::InvalidConfig(what) => write!(f, "invalid configuration: {what}"),
            Error::Stopped => f.write_str("the table's owner has stopped"),
            Error::Superseded => f.write_str(
                "the put changed nothing: valkey holds a newer value (a newer version, or one stamped ahead of its clock)",
            ),
            Error::WriteTooLate => f.write_str(
                "the put reached valkey after its deadline (valkey_timeout) and was refused: nothing written",
            ),
            Error::Absent => f.write_str("the batch loader returned no value for this id"),
        }
    }
}

// Written by hand rather than derived: a derived `source()` would return the `Arc` around a
// loader's error, which does not downcast to the loader's type; this returns the error itself.
impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Source(source) => Some(&**source),
            Error::Valkey { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// An error from the Valkey client, in [`Error::Valkey`].
///
/// It shows the client's message; [`code`](Self::code) gives Valkey's error code, and
/// [`std::error::Error::source`] the cause below it (an I/O error, say). The client's own type is
/// kept private, so that a change of client is not a change of EchoStore's API. `Clone` and cheap
/// (an `Arc`), like [`Error`].
#[derive(Clone)]
pub struct ValkeyError(Arc<redis::RedisError>);

impl ValkeyError {
    /// Valkey's error code, when Valkey answered with an error: `"WRONGTYPE"`, `"OOM"`,
    /// `"NOSCRIPT"`, `"NOPERM"`… `None` when the error is not a reply (a connection that failed,
    /// a timeout, a URL that does not parse).
    pub fn code(&self) -> Option<&str> {
        self.0.code()
    }

    /// `true` when the connection failed or timed out, rather than Valkey answering with an error.
    pub fn is_connection_failure(&self) -> bool {
        self.0.is_io_error() || self.0.is_timeout() || self.0.is_connection_dropped()
    }

    /// `true` for what a slot being migrated answers a command that was not run: `TRYAGAIN` (a
    /// multi-key command with some of its keys moved and some not), or `MOVED` / `ASK` once the
    /// cluster client's own retries (spent on the `TRYAGAIN`s) are used up as the slot moves.
    pub(crate) fn is_migrating(&self) -> bool {
        matches!(
            self.0.kind(),
            redis::ErrorKind::Server(
                redis::ServerErrorKind::TryAgain
                    | redis::ServerErrorKind::Moved
                    | redis::ServerErrorKind::Ask
            )
        )
    }
}

impl std::fmt::Display for ValkeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::fmt::Debug for ValkeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl std::error::Error for ValkeyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // The client's error is this error's message: its cause is the next link in the chain.
        self.0.source()
    }
}
