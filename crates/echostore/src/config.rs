//! How a table is configured: [`TableBuilder`], its defaults, and the checks `start()` makes.
//!
//! | setting | default | meaning |
//! | --- | --- | --- |
//! | `ttl` | 60 s | logical life: fresh for `ttl ± ttl·jitter` |
//! | `jitter` | 0.1 | spread of expiries, `0.0..=0.5`, so a cohort filled together never expires together |
//! | `stale_for` | 0 | kept past `ttl` (Valkey `PX` = life + `stale_for`) for serve-stale and fail-safe |
//! | `lock_ttl` | 5 s | `PX` of the regeneration lock |
//! | `losers` | `Poll { every: 10 ms, up_to: 5 s }` | what a request does when another process holds the lock |
//! | `l1_capacity` | 100 000 | entries kept in L1 |
//! | `l1_backend` | quick_cache | or moka |
//! | `load_timeout` | none | waiters get `LoadTimeout` and the lock is released when the loader runs longer |
//! | `soft_timeout` | none | past it, waiters get the stale copy (if any) while the load goes on |
//! | `fail_safe` | off | serve a stale copy instead of a loader error |
//! | `max_value_bytes` | 16 MiB | larger encodings are refused with `TooLarge` and nothing is written |

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::error::{Error, Result, SharedError};
use crate::key::{Key, Value, validate_table_name};
use crate::l1::{Entry, L1Backend};
use crate::losers::LoserPolicy;
use crate::store::Store;
use crate::table::Table;

/// The source of truth for one table: called once per id per expiry.
pub(crate) type Loader<K, V> =
    Arc<dyn Fn(K) -> BoxFuture<'static, Result<V, SharedError>> + Send + Sync>;

/// Settings of a started table, checked by `start()`.
pub(crate) struct TableConfig<V> {
    pub(crate) ttl: Duration,
    pub(crate) jitter: f64,
    pub(crate) stale_for: Duration,
    pub(crate) lock_ttl: Duration,
    pub(crate) losers: LoserPolicy<Arc<V>>,
    pub(crate) load_timeout: Option<Duration>,
    pub(crate) soft_timeout: Option<Duration>,
    pub(crate) fail_safe: bool,
    pub(crate) max_value_bytes: usize,
}

/// The life of one value being written now.
pub(crate) struct Life {
    /// `ttl`, jittered.
    pub(crate) fresh_for: Duration,
    pub(crate) stale_for: Duration,
}

impl Life {
    /// The L1 entry of a value stored now.
    pub(crate) fn entry<V>(&self, value: Arc<V>) -> Entry<V> {
        Entry::new(value, self.fresh_for, self.stale_for)
    }

    /// Valkey's `PX`: the physical life, fresh plus stale.
    pub(crate) fn physical_ms(&self) -> u64 {
        ((self.fresh_for + self.stale_for).as_millis() as u64).max(1)
    }
}

impl<V> TableConfig<V> {
    /// A new value's life: `ttl ± ttl·jitter`, drawn afresh for every write.
    pub(crate) fn life(&self) -> Life {
        let spread = if self.jitter > 0.0 {
            rand::random_range(-self.jitter..=self.jitter)
        } else {
            0.0
        };
        Life {
            fresh_for: self.ttl.mul_f64(1.0 + spread),
            stale_for: self.stale_for,
        }
    }
}

/// Configures one table; from [`Store::table`]. Ends with [`start`](TableBuilder::start).
#[must_use = "a table does nothing until start() is awaited"]
pub struct TableBuilder<K, V> {
    store: Store,
    name: String,
    ttl: Duration,
    jitter: f64,
    stale_for: Duration,
    lock_ttl: Duration,
    losers: LoserPolicy<V>,
    l1_capacity: usize,
    l1_backend: L1Backend,
    load_timeout: Option<Duration>,
    soft_timeout: Option<Duration>,
    fail_safe: bool,
    max_value_bytes: usize,
    loader: Option<Loader<K, V>>,
    _key: PhantomData<fn() -> K>,
}

impl<K: Key, V: Value> TableBuilder<K, V> {
    pub(crate) fn new(store: Store, name: &str) -> Self {
        TableBuilder {
            store,
            name: name.to_owned(),
            ttl: Duration::from_secs(60),
            jitter: 0.1,
            stale_for: Duration::ZERO,
            lock_ttl: Duration::from_secs(5),
            losers: LoserPolicy::DEFAULT_POLL,
            l1_capacity: 100_000,
            l1_backend: L1Backend::default(),
            load_timeout: None,
            soft_timeout: None,
            fail_safe: false,
            max_value_bytes: 16 << 20,
            loader: None,
            _key: PhantomData,
        }
    }

    /// Logical life of a value (default 60 s), spread by [`jitter`](Self::jitter).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Spread of expiries as a fraction of `ttl`, `0.0..=0.5` (default 0.1).
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// How long a value is kept past its logical life for serve-stale and fail-safe (default 0).
    pub fn stale_for(mut self, stale_for: Duration) -> Self {
        self.stale_for = stale_for;
        self
    }

    /// `PX` of the regeneration lock (default 5 s): how long a crashed winner can block others.
    pub fn lock_ttl(mut self, lock_ttl: Duration) -> Self {
        self.lock_ttl = lock_ttl;
        self
    }

    /// What a request does when another process holds the lock (default: poll every 10 ms up to 5 s).
    pub fn losers(mut self, policy: LoserPolicy<V>) -> Self {
        self.losers = policy;
        self
    }

    /// Entries kept in L1 (default 100 000).
    pub fn l1_capacity(mut self, capacity: usize) -> Self {
        self.l1_capacity = capacity;
        self
    }

    /// The cache library behind L1 (default quick_cache).
    pub fn l1_backend(mut self, backend: L1Backend) -> Self {
        self.l1_backend = backend;
        self
    }

    /// Cut a load off after `limit`: its waiters get `Error::LoadTimeout`, the lock is released.
    pub fn load_timeout(mut self, limit: Duration) -> Self {
        self.load_timeout = Some(limit);
        self
    }

    /// After `after`, answer the waiters with the stale copy (Valkey's, else L1's) if there is one,
    /// while the load goes on and fills the cache when it finishes. Shorter than `load_timeout`.
    pub fn soft_timeout(mut self, after: Duration) -> Self {
        self.soft_timeout = Some(after);
        self
    }

    /// Answer a failed load with a stale copy (Valkey's, else L1's) when one is within `stale_for`.
    pub fn fail_safe(mut self, on: bool) -> Self {
        self.fail_safe = on;
        self
    }

    /// Largest encoded value accepted (default 16 MiB); larger ones fail with `Error::TooLarge`.
    pub fn max_value_bytes(mut self, max: usize) -> Self {
        self.max_value_bytes = max;
        self
    }

    /// The source of truth: `Fn(K) -> Future<Output = Result<V, E>>`. Required.
    pub fn loader<F, Fut, E>(mut self, loader: F) -> Self
    where
        F: Fn(K) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        self.loader = Some(Arc::new(move |id: K| {
            let load = loader(id);
            Box::pin(async move { load.await.map_err(|e| Arc::new(e) as SharedError) })
        }));
        self
    }

    /// Checks the settings and starts the table's owner under the store's supervisor.
    ///
    /// Fails with [`Error::InvalidName`] for a name outside `[A-Za-z0-9_.-]{1,64}` and with
    /// [`Error::InvalidConfig`] for a missing loader or a setting that cannot work.
    pub async fn start(self) -> Result<Table<K, V>> {
        validate_table_name(&self.name)?;
        let loader = self
            .loader
            .ok_or_else(|| Error::InvalidConfig(format!("table {:?} has no loader", self.name)))?;
        let invalid = |what: String| {
            Err(Error::InvalidConfig(format!(
                "table {:?}: {what}",
                self.name
            )))
        };
        if !(0.0..=0.5).contains(&self.jitter) {
            return invalid(format!("jitter {} is outside 0.0..=0.5", self.jitter));
        }
        if self.ttl.is_zero() {
            return invalid("ttl must be above zero".into());
        }
        if self.lock_ttl < Duration::from_millis(1) {
            return invalid("lock_ttl must be at least 1 ms".into());
        }
        if self.l1_capacity == 0 {
            return invalid("l1_capacity must be at least 1".into());
        }
        if self.max_value_bytes == 0 {
            return invalid("max_value_bytes must be at least 1".into());
        }
        if self.load_timeout.is_some_and(|t| t.is_zero()) {
            return invalid("load_timeout must be above zero".into());
        }
        if let Some(soft) = self.soft_timeout
            && (soft.is_zero() || self.load_timeout.is_some_and(|hard| soft >= hard))
        {
            return invalid("soft_timeout must be above zero and below load_timeout".into());
        }
        let losers = match self.losers {
            LoserPolicy::Poll { every, .. } if every.is_zero() => {
                return invalid("LoserPolicy::Poll needs every > 0".into());
            }
            LoserPolicy::Poll { every, up_to } => LoserPolicy::Poll { every, up_to },
            LoserPolicy::ServeStale => LoserPolicy::ServeStale,
            LoserPolicy::Default(v) => LoserPolicy::Default(Arc::new(v)),
            LoserPolicy::FailFast => LoserPolicy::FailFast,
        };
        let config = TableConfig {
            ttl: self.ttl,
            jitter: self.jitter,
            stale_for: self.stale_for,
            lock_ttl: self.lock_ttl,
            losers,
            load_timeout: self.load_timeout,
            soft_timeout: self.soft_timeout,
            fail_safe: self.fail_safe,
            max_value_bytes: self.max_value_bytes,
        };
        Table::start(
            self.store,
            &self.name,
            config,
            self.l1_backend,
            self.l1_capacity,
            loader,
        )
        .await
    }
}
