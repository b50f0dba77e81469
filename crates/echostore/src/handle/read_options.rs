//! Per-call options of a read ([`ReadOptions`]), and the reads that take them:
//! [`Table::get_with`] and [`Table::fetch_with`].

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::fetched::Fetched;
use crate::handle::table::Table;
use crate::state::core::MAX_DURATION;
use crate::state::loser_policy::LoserPolicy;
use crate::version::Version;
use crate::wire::key::{Key, Value};

/// How one read may differ from the table's settings; an option left unset is the table's.
///
/// - [`losers`](Self::losers): the loser policy of a flight this read starts (this request must
///   not wait for another process: `FailFast`; this one may serve stale: `ServeStale`). A read
///   that joins a flight already running for its id in this process shares that flight's answer,
///   as every caller of one flight does; and a flight that waits behind a write of its id runs
///   with the table's policy.
/// - [`wait_at_most`](Self::wait_at_most): this read answers within the bound, or fails with
///   [`Error::WaitTimeout`]; the flight goes on for its other callers and fills the cache.
/// - [`at_least`](Self::at_least): this read never answers a copy older than a version a write
///   returned ([`Table::put_versioned`]), here or in another process.
///
/// There is no option to skip Valkey for one read: a value loaded here that Valkey never saw
/// would be newer than Valkey's copy, and this process's next read could go back to that copy
/// (`docs/consistency.md`, rule 4).
#[derive(Debug, Clone)]
pub struct ReadOptions<V> {
    losers: Option<LoserPolicy<V>>,
    wait: Option<Duration>,
    at_least: Option<Version>,
}

/// Checked options: the flight's loser policy, if the read's own, its wait bound, and the
/// version it must see.
struct Checked<V> {
    losers: Option<LoserPolicy<Arc<V>>>,
    wait: Option<Duration>,
    at_least: Option<Version>,
}

impl<V> Default for ReadOptions<V> {
    fn default() -> Self {
        ReadOptions {
            losers: None,
            wait: None,
            at_least: None,
        }
    }
}

impl<V> ReadOptions<V> {
    /// No option set: the table's settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// The loser policy of a flight this read starts, instead of the table's.
    pub fn losers(mut self, policy: LoserPolicy<V>) -> Self {
        self.losers = Some(policy);
        self
    }

    /// Answer within `bound` (at most [`MAX_DURATION`]), or fail with [`Error::WaitTimeout`].
    pub fn wait_at_most(mut self, bound: Duration) -> Self {
        self.wait = Some(bound);
        self
    }

    /// Never answer a copy older than `version` (a [`Written`](crate::Written)'s, from this
    /// process or another): the read skips an L1 copy it cannot show is that recent and reads on,
    /// from Valkey, then from the source under the lock, as a miss does. With `.version_by` the
    /// answer's own version is checked: an older one drops Valkey's copy (its value, never the
    /// lock; a copy that shows the version, landed meanwhile, stays) and the read tries again
    /// (every 10 ms), from the source, while it still answers an older one, failing with
    /// [`Error::VersionUnavailable`] past its bound ([`wait_at_most`](Self::wait_at_most), else
    /// the loser policy's `up_to`, else `lock_ttl`). An L1 copy that is a `None` (a deletion: a
    /// write after it re-creates the row, whatever its version) or whose `version_by` panics
    /// shows no version, and is read past; a `None` read afresh is taken. Without `.version_by`
    /// an L1 copy's version is not known, so such a read always goes past L1 (one Valkey read,
    /// and this process's copy is replaced by what it reads). It rests on what every write-through use
    /// of a table does: the source holds a write before its `put` is made.
    pub fn at_least(mut self, version: Version) -> Self {
        self.at_least = Some(version);
        self
    }

    /// Checks the options as `build()` checks the table's.
    fn checked(self) -> Result<Checked<V>> {
        let too_long = |d: Duration| d > MAX_DURATION;
        let poll_too_long = matches!(
            &self.losers,
            Some(LoserPolicy::Poll { every, up_to }) if too_long(*every) || too_long(*up_to) || every.is_zero()
        );
        if poll_too_long || self.wait.is_some_and(too_long) {
            return Err(Error::InvalidConfig(format!(
                "read options: durations must be within 0..={MAX_DURATION:?} (a poll's `every` above zero)"
            )));
        }
        Ok(Checked {
            losers: self.losers.map(LoserPolicy::shared),
            wait: self.wait,
            at_least: self.at_least,
        })
    }
}

impl<K: Key, V: Value> Table<K, V> {
    /// [`get`](Self::get) with per-call [`ReadOptions`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use std::time::Duration;
    /// use echostore::{LoserPolicy, ReadOptions, Store};
    ///
    /// let store = Store::builder().build().await?;
    /// let users = store
    ///     .table::<u64, String>("users")
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("user {id}")) })
    ///     .build()
    ///     .await?;
    /// // A health check must not wait on another process's rebuild, nor for long at all.
    /// let fast = ReadOptions::new()
    ///     .losers(LoserPolicy::FailFast)
    ///     .wait_at_most(Duration::from_millis(50));
    /// assert_eq!(*users.get_with(&7, fast).await?, "user 7");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get_with<Q>(&self, id: &Q, options: ReadOptions<V>) -> Result<Arc<V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + Sync + ?Sized,
    {
        self.fetch_with(id, options).await.map(|f| f.value)
    }

    /// [`fetch`](Self::fetch) with per-call [`ReadOptions`].
    pub async fn fetch_with<Q>(&self, id: &Q, options: ReadOptions<V>) -> Result<Fetched<V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + Sync + ?Sized,
    {
        let Checked {
            losers,
            wait,
            at_least,
        } = options.checked()?;
        let (core, owner) = self.parts();
        if let Some(wanted) = at_least {
            return crate::handle::at_least::read(core, owner, id, wanted, (losers, wait)).await;
        }
        if let Some(hit) = crate::handle::lookup::hit(core, owner, id) {
            return Ok(hit);
        }
        let read = crate::handle::miss::miss(core, owner, id, losers);
        let answer = match wait {
            None => read.await,
            Some(bound) => tokio::time::timeout(bound, read)
                .await
                .unwrap_or(Err(Error::WaitTimeout { waited: bound })),
        };
        answer.map(crate::fetched::Answered::shown)
    }
}
