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
//! | `load_timeout` | 30 s (`no_load_timeout()` for none) | waiters get `LoadTimeout` and the lock is released when the loader runs longer |
//! | `soft_timeout` | none | past it, waiters get the stale copy (if any) while the load goes on |
//! | `fail_safe` | off | serve a stale copy instead of a loader error |
//! | `max_value_bytes` | 16 MiB | larger encodings are refused with `TooLarge` and nothing is written; larger values read from Valkey are a counted miss |
//!
//! Every duration is at most [`MAX_DURATION`] and every count has a range, so no setting can make
//! later arithmetic overflow: `start()` answers [`Error::InvalidConfig`] naming the setting.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::core::{Loader, TableConfig, TableCore};
use crate::error::{Error, Result, SharedError};
use crate::key::{Key, Value, validate_table_name};
use crate::l1::{L1, L1Backend};
use crate::losers::LoserPolicy;
use crate::stats::Stats;
use crate::store::Store;
use crate::table::Table;

/// The longest duration any setting accepts (a year): longer ones are refused at `start()`.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// The largest `max_value_bytes` (Valkey's own limit for one string is 512 MiB).
const MAX_VALUE_BYTES_LIMIT: usize = 512 << 20;

/// The largest `l1_capacity`.
const MAX_L1_CAPACITY: usize = 1 << 32;

/// The shortest `lock_ttl`: the lease extends it every third of it.
const MIN_LOCK_TTL: Duration = Duration::from_millis(3);

/// The default `load_timeout`: a hung loader frees its id after this long.
const DEFAULT_LOAD_TIMEOUT: Duration = Duration::from_secs(30);

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
            load_timeout: Some(DEFAULT_LOAD_TIMEOUT),
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

    /// `PX` of the regeneration lock (default 5 s, at least 3 ms): how long a crashed winner can
    /// block others. A live winner extends it every `lock_ttl / 3` while it loads (the lease).
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

    /// Cut a load off after `limit` (default 30 s): its waiters get `Error::LoadTimeout`, the
    /// lock is released, and the next miss starts a new load.
    pub fn load_timeout(mut self, limit: Duration) -> Self {
        self.load_timeout = Some(limit);
        self
    }

    /// Let loads run for as long as they take. A loader that hangs then holds its id in this
    /// process until the table is dropped (a second load starts only after a write overtakes it,
    /// and at most two run at once per id).
    pub fn no_load_timeout(mut self) -> Self {
        self.load_timeout = None;
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
    /// [`Error::InvalidConfig`] for a missing loader or a setting out of its range.
    pub async fn start(self) -> Result<Table<K, V>> {
        validate_table_name(&self.name)?;
        let invalid = |what: String| Error::InvalidConfig(format!("table {:?}: {what}", self.name));
        let loader = self.loader.ok_or_else(|| invalid("no loader".into()))?;
        let durations = [
            ("ttl", Some(self.ttl)),
            ("stale_for", Some(self.stale_for)),
            ("lock_ttl", Some(self.lock_ttl)),
            ("load_timeout", self.load_timeout),
            ("soft_timeout", self.soft_timeout),
        ];
        let poll = match &self.losers {
            LoserPolicy::Poll { every, up_to } => {
                [("Poll.every", Some(*every)), ("Poll.up_to", Some(*up_to))]
            }
            _ => [("Poll.every", None), ("Poll.up_to", None)],
        };
        for (setting, value) in durations.into_iter().chain(poll) {
            if let Some(value) = value
                && value > MAX_DURATION
            {
                return Err(invalid(format!(
                    "{setting} {value:?} is over the limit of {MAX_DURATION:?}"
                )));
            }
        }
        let checks = [
            (
                (0.0..=0.5).contains(&self.jitter),
                format!("jitter {} is outside 0.0..=0.5", self.jitter),
            ),
            (!self.ttl.is_zero(), "ttl must be above zero".into()),
            (
                self.lock_ttl >= MIN_LOCK_TTL,
                format!("lock_ttl must be at least {MIN_LOCK_TTL:?}"),
            ),
            (
                (1..=MAX_L1_CAPACITY).contains(&self.l1_capacity),
                format!("l1_capacity must be within 1..={MAX_L1_CAPACITY}"),
            ),
            (
                (1..=MAX_VALUE_BYTES_LIMIT).contains(&self.max_value_bytes),
                format!("max_value_bytes must be within 1..={MAX_VALUE_BYTES_LIMIT}"),
            ),
            (
                self.load_timeout.is_none_or(|t| !t.is_zero()),
                "load_timeout must be above zero".into(),
            ),
            (
                self.soft_timeout.is_none_or(|soft| {
                    !soft.is_zero() && self.load_timeout.is_none_or(|hard| soft < hard)
                }),
                "soft_timeout must be above zero and below load_timeout".into(),
            ),
            (
                !matches!(self.losers, LoserPolicy::Poll { every, .. } if every.is_zero()),
                "LoserPolicy::Poll needs every > 0".into(),
            ),
        ];
        if let Some((_, what)) = checks.into_iter().find(|(ok, _)| !ok) {
            return Err(invalid(what));
        }
        let losers = match self.losers {
            LoserPolicy::Poll { every, up_to } => LoserPolicy::Poll { every, up_to },
            LoserPolicy::ServeStale => LoserPolicy::ServeStale,
            LoserPolicy::Default(v) => LoserPolicy::Default(Arc::new(v)),
            LoserPolicy::FailFast => LoserPolicy::FailFast,
        };
        let core = TableCore {
            name: Arc::from(self.name.as_str()),
            namespace: Arc::from(self.store.namespace()),
            config: TableConfig {
                ttl: self.ttl,
                jitter: self.jitter,
                stale_for: self.stale_for,
                lock_ttl: self.lock_ttl,
                losers,
                load_timeout: self.load_timeout,
                soft_timeout: self.soft_timeout,
                fail_safe: self.fail_safe,
                max_value_bytes: self.max_value_bytes,
            },
            l1: L1::new(self.l1_backend, self.l1_capacity),
            l2: self.store.l2().cloned(),
            loader,
            stats: Stats::new(),
            tracker: self.store.tracker().cloned(),
        };
        Table::start(self.store, core).await
    }
}
