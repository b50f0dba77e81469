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
//! | `early_refresh` | 1.0 | XFetch beta, `0.0..=10.0`: a read in a value's last stretch rebuilds it in the background before it expires; `0.0` off (`docs/early-refresh.md`) |
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

/// The largest `early_refresh` beta: past it a value would be rebuilt more than `40·delta` before
/// it expires (the window is `4·delta·beta`), which no cache needs; the paper's default is 1.
pub const MAX_EARLY_REFRESH_BETA: f64 = 10.0;

/// The default `load_timeout`: a hung loader frees its id after this long.
const DEFAULT_LOAD_TIMEOUT: Duration = Duration::from_secs(30);

/// Configures one table; from [`Store::table`]. Ends with [`start`](TableBuilder::start).
///
/// `K` is the id ([`Key`]: `String`, `u64`, …); `V` is the cached value, any type serde can
/// encode and decode ([`Value`]): derive `serde::Serialize` and `serde::Deserialize` on it,
/// since Valkey holds values encoded. Every setting has a default but the
/// [`loader`](Self::loader); each is checked by `start()`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> echostore::Result<()> {
/// use std::time::Duration;
/// use echostore::Store;
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct User {
///     name: String,
/// }
///
/// let store = Store::builder().build().await?;
/// let users = store
///     .table::<u64, User>("users")
///     .ttl(Duration::from_secs(60))
///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(User { name: format!("user {id}") }) })
///     .start()
///     .await?;
/// assert_eq!(users.get(&1).await?.name, "user 1");
/// # Ok(())
/// # }
/// ```
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
    early_refresh: f64,
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
            early_refresh: 1.0,
            loader: None,
            _key: PhantomData,
        }
    }

    /// Logical life of a value (default 60 s), spread by [`jitter`](Self::jitter). Past it, a
    /// read loads afresh (or, with [`stale_for`](Self::stale_for), may still be served stale).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use std::time::Duration;
    /// use echostore::{Origin, Store};
    ///
    /// let store = Store::builder().build().await?;
    /// let users = store
    ///     .table::<u64, String>("users")
    ///     .ttl(Duration::from_millis(100))
    ///     .jitter(0.0) // exactly 100 ms, for the example
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("user {id}")) })
    ///     .start()
    ///     .await?;
    /// assert_eq!(users.fetch(&1).await?.origin, Origin::Loaded);
    /// assert_eq!(users.fetch(&1).await?.origin, Origin::L1);
    /// tokio::time::sleep(Duration::from_millis(150)).await;
    /// assert_eq!(users.fetch(&1).await?.origin, Origin::Loaded); // expired: read again
    /// # Ok(())
    /// # }
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Spread of expiries as a fraction of `ttl`, `0.0..=0.5` (default 0.1): each write lives
    /// `ttl ± ttl·jitter`, drawn afresh, so values filled together do not expire together.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use std::time::Duration;
    /// use echostore::{Error, Store};
    ///
    /// let store = Store::builder().build().await?;
    /// let users = store
    ///     .table::<u64, String>("users")
    ///     .ttl(Duration::from_secs(60))
    ///     .jitter(0.25) // each value lives 45 to 75 s
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("user {id}")) })
    ///     .start()
    ///     .await?;
    /// let too_wide = store
    ///     .table::<u64, String>("too_wide")
    ///     .jitter(0.8)
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("user {id}")) })
    ///     .start()
    ///     .await;
    /// assert!(matches!(too_wide, Err(Error::InvalidConfig(_))));
    /// # Ok(())
    /// # }
    /// ```
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// How long a value is kept past its logical life for serve-stale and fail-safe (default 0).
    /// On Valkey the key's `PX` is `ttl + stale_for`; a stale copy is never counted as fresh.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::time::Duration;
    /// use echostore::{Origin, Store};
    ///
    /// static DB_UP: AtomicBool = AtomicBool::new(true);
    /// let store = Store::builder().build().await?;
    /// let users = store
    ///     .table::<u64, String>("users")
    ///     .ttl(Duration::from_millis(50))
    ///     .stale_for(Duration::from_secs(3600))
    ///     .fail_safe(true) // a failed load answers with the stale copy
    ///     .loader(|id: u64| async move {
    ///         match DB_UP.load(Ordering::SeqCst) {
    ///             true => Ok(format!("user {id}")),
    ///             false => Err("the database is down"),
    ///         }
    ///     })
    ///     .start()
    ///     .await?;
    /// users.get(&1).await?;
    /// DB_UP.store(false, Ordering::SeqCst);
    /// tokio::time::sleep(Duration::from_millis(100)).await; // past ttl, within stale_for
    /// let served = users.fetch(&1).await?;
    /// assert_eq!((served.value.as_str(), served.origin), ("user 1", Origin::Stale));
    /// assert!(served.stale_by.is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn stale_for(mut self, stale_for: Duration) -> Self {
        self.stale_for = stale_for;
        self
    }

    /// `PX` of the regeneration lock (default 5 s, at least 3 ms): how long a crashed winner can
    /// block others. A live winner extends it every `lock_ttl / 3` while it loads (the lease), so
    /// a slow loader keeps its lock; this bounds only the wait after a winner's process dies.
    /// Used with a Valkey only.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use std::time::Duration;
    /// use echostore::{Error, Store};
    ///
    /// let store = Store::builder().build().await?; // add .valkey(url) for the lock to matter
    /// let users = store
    ///     .table::<u64, String>("users")
    ///     .lock_ttl(Duration::from_secs(10))
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("user {id}")) })
    ///     .start()
    ///     .await?;
    /// let too_short = store
    ///     .table::<u64, String>("too_short")
    ///     .lock_ttl(Duration::from_millis(1))
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("user {id}")) })
    ///     .start()
    ///     .await;
    /// assert!(matches!(too_short, Err(Error::InvalidConfig(_))));
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_ttl(mut self, lock_ttl: Duration) -> Self {
        self.lock_ttl = lock_ttl;
        self
    }

    /// What a request does when another process holds the lock (default: poll every 10 ms up to
    /// 5 s): poll, serve the stale copy, answer a placeholder, or fail fast. See [`LoserPolicy`].
    /// Losers exist only with a Valkey: without one, misses in a process already coalesce.
    ///
    /// Two stores on one Valkey, as two processes would be: while the first rebuilds a key, the
    /// second's tables answer by their policies without reading the source.
    ///
    /// ```
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> echostore::Result<()> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use echostore::{Error, LoserPolicy, Origin, Store};
    ///
    /// let valkey = embedded_valkey::EmbeddedValkey::start().expect("a valkey-server");
    /// let done = Arc::new(tokio::sync::Notify::new());
    ///
    /// // "Process" A: a slow rebuild (it waits for `done`) that holds the regeneration lock.
    /// let a = Store::builder().valkey(valkey.url()).build().await?;
    /// let rebuilding = a
    ///     .table::<u64, String>("reports")
    ///     .loader({
    ///         let done = Arc::clone(&done);
    ///         move |id: u64| {
    ///             let done = Arc::clone(&done);
    ///             async move {
    ///                 done.notified().await;
    ///                 Ok::<_, std::io::Error>(format!("report {id}"))
    ///             }
    ///         }
    ///     })
    ///     .start()
    ///     .await?;
    /// let winner = tokio::spawn({
    ///     let rebuilding = rebuilding.clone();
    ///     async move { rebuilding.get(&1).await }
    /// });
    /// while rebuilding.stats().lock_won == 0 {
    ///     tokio::time::sleep(Duration::from_millis(5)).await;
    /// }
    ///
    /// // "Process" B: the same table, failing fast or answering a placeholder meanwhile.
    /// let b = Store::builder().valkey(valkey.url()).build().await?;
    /// let never = |_: u64| async { Err::<String, _>("B never reads the source here") };
    /// let fail_fast = b
    ///     .table::<u64, String>("reports")
    ///     .losers(LoserPolicy::FailFast)
    ///     .loader(never)
    ///     .start()
    ///     .await?;
    /// assert!(matches!(fail_fast.get(&1).await, Err(Error::LockBusy)));
    ///
    /// let c = Store::builder().valkey(valkey.url()).build().await?;
    /// let placeholder = c
    ///     .table::<u64, String>("reports")
    ///     .losers(LoserPolicy::Default("(being prepared)".to_owned()))
    ///     .loader(never)
    ///     .start()
    ///     .await?;
    /// let answer = placeholder.fetch(&1).await?;
    /// assert_eq!((answer.value.as_str(), answer.origin), ("(being prepared)", Origin::Default));
    ///
    /// // A finishes: its value is on Valkey for everyone, read once from the source.
    /// done.notify_one();
    /// assert_eq!(*winner.await.expect("task")?, "report 1");
    /// assert_eq!(*fail_fast.get(&1).await?, "report 1");
    /// assert_eq!(rebuilding.stats().source_reads, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn losers(mut self, policy: LoserPolicy<V>) -> Self {
        self.losers = policy;
        self
    }

    /// Entries kept in L1 (default 100 000, at least 1). When L1 is full an older entry is
    /// evicted; a fill still answers its callers.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::Store;
    ///
    /// let store = Store::builder().build().await?;
    /// let users = store
    ///     .table::<u64, String>("users")
    ///     .l1_capacity(100)
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("user {id}")) })
    ///     .start()
    ///     .await?;
    /// for id in 0..1_000 {
    ///     users.get(&id).await?;
    /// }
    /// assert!(users.stats().l1_len <= 100);
    /// # Ok(())
    /// # }
    /// ```
    pub fn l1_capacity(mut self, capacity: usize) -> Self {
        self.l1_capacity = capacity;
        self
    }

    /// The cache library behind L1 (default quick_cache, the fastest hit; [`L1Backend::Moka`]
    /// for moka's TinyLFU admission).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::{L1Backend, Origin, Store};
    ///
    /// let store = Store::builder().build().await?;
    /// let users = store
    ///     .table::<u64, String>("users")
    ///     .l1_backend(L1Backend::Moka)
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("user {id}")) })
    ///     .start()
    ///     .await?;
    /// users.get(&1).await?;
    /// assert_eq!(users.fetch(&1).await?.origin, Origin::L1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn l1_backend(mut self, backend: L1Backend) -> Self {
        self.l1_backend = backend;
        self
    }

    /// Cut a load off after `limit` (default 30 s): its waiters get `Error::LoadTimeout`, the
    /// lock is released, and the next miss starts a new load.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use std::time::Duration;
    /// use echostore::{Error, Store};
    ///
    /// let store = Store::builder().build().await?;
    /// let users = store
    ///     .table::<u64, String>("users")
    ///     .load_timeout(Duration::from_millis(50))
    ///     .loader(|id: u64| async move {
    ///         tokio::time::sleep(Duration::from_secs(10)).await; // a hung query
    ///         Ok::<_, std::io::Error>(format!("user {id}"))
    ///     })
    ///     .start()
    ///     .await?;
    /// let err = users.get(&1).await.expect_err("cut off");
    /// assert!(matches!(err, Error::LoadTimeout(_)) && err.is_source());
    /// # Ok(())
    /// # }
    /// ```
    pub fn load_timeout(mut self, limit: Duration) -> Self {
        self.load_timeout = Some(limit);
        self
    }

    /// Let loads run for as long as they take. A loader that hangs then holds its id in this
    /// process until the table is dropped (a second load starts only after a write overtakes it,
    /// and at most two run at once per id).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use std::time::Duration;
    /// use echostore::Store;
    ///
    /// let store = Store::builder().build().await?;
    /// let reports = store
    ///     .table::<u64, String>("reports")
    ///     .no_load_timeout() // a report takes as long as it takes
    ///     .loader(|id: u64| async move {
    ///         tokio::time::sleep(Duration::from_millis(20)).await;
    ///         Ok::<_, std::io::Error>(format!("report {id}"))
    ///     })
    ///     .start()
    ///     .await?;
    /// assert_eq!(*reports.get(&1).await?, "report 1");
    /// # Ok(())
    /// # }
    /// ```
    pub fn no_load_timeout(mut self) -> Self {
        self.load_timeout = None;
        self
    }

    /// After `after`, answer the waiters with the stale copy (Valkey's, else L1's) if there is one,
    /// while the load goes on and fills the cache when it finishes. Shorter than `load_timeout`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::time::Duration;
    /// use echostore::{Origin, Store};
    ///
    /// static SLOW: AtomicBool = AtomicBool::new(false);
    /// let store = Store::builder().build().await?;
    /// let users = store
    ///     .table::<u64, String>("users")
    ///     .ttl(Duration::from_millis(50))
    ///     .stale_for(Duration::from_secs(3600))
    ///     .soft_timeout(Duration::from_millis(20))
    ///     .loader(|id: u64| async move {
    ///         if SLOW.load(Ordering::SeqCst) {
    ///             tokio::time::sleep(Duration::from_millis(300)).await;
    ///         }
    ///         Ok::<_, std::io::Error>(format!("user {id}"))
    ///     })
    ///     .start()
    ///     .await?;
    /// users.get(&1).await?;
    /// SLOW.store(true, Ordering::SeqCst);
    /// tokio::time::sleep(Duration::from_millis(100)).await; // expired; the next load is slow
    /// let answer = users.fetch(&1).await?; // after 20 ms: the stale copy, the load goes on
    /// assert_eq!(answer.origin, Origin::Stale);
    /// # Ok(())
    /// # }
    /// ```
    pub fn soft_timeout(mut self, after: Duration) -> Self {
        self.soft_timeout = Some(after);
        self
    }

    /// Answer a failed load with a stale copy (Valkey's, else L1's) when one is within `stale_for`
    /// (default off: the waiters get the loader's error). Counted as `fail_safe_served`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::time::Duration;
    /// use echostore::{Origin, Store};
    ///
    /// static LOADS: AtomicUsize = AtomicUsize::new(0);
    /// let store = Store::builder().build().await?;
    /// let prices = store
    ///     .table::<u64, u64>("prices")
    ///     .ttl(Duration::from_millis(50))
    ///     .stale_for(Duration::from_secs(60))
    ///     .fail_safe(true)
    ///     .loader(|id: u64| async move {
    ///         match LOADS.fetch_add(1, Ordering::SeqCst) {
    ///             0 => Ok(id * 100),
    ///             _ => Err(std::io::Error::other("the pricing service is down")),
    ///         }
    ///     })
    ///     .start()
    ///     .await?;
    /// assert_eq!(*prices.get(&3).await?, 300);
    /// tokio::time::sleep(Duration::from_millis(100)).await;
    /// let served = prices.fetch(&3).await?; // the load failed: last known price
    /// assert_eq!((*served.value, served.origin), (300, Origin::Stale));
    /// assert_eq!(prices.stats().fail_safe_served, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn fail_safe(mut self, on: bool) -> Self {
        self.fail_safe = on;
        self
    }

    /// Largest encoded value accepted (default 16 MiB, at most 512 MiB). With a Valkey, a `put`
    /// of a larger one fails with `Error::TooLarge` and writes nothing, and a fill that loads one
    /// answers its waiters with `TooLarge` and caches nothing; a larger value found on Valkey is a
    /// counted miss. Without a Valkey nothing is encoded and the limit does not apply.
    ///
    /// ```
    /// # #[tokio::main(flavor = "multi_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::{Error, Store};
    ///
    /// let valkey = embedded_valkey::EmbeddedValkey::start().expect("a valkey-server");
    /// let store = Store::builder().valkey(valkey.url()).build().await?;
    /// let notes = store
    ///     .table::<u64, String>("notes")
    ///     .max_value_bytes(1024)
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("note {id}")) })
    ///     .start()
    ///     .await?;
    /// notes.put(&1, "short".to_owned()).await?;
    /// let err = notes.put(&2, "x".repeat(4096)).await.expect_err("too large");
    /// assert!(matches!(err, Error::TooLarge { max: 1024, .. }));
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_value_bytes(mut self, max: usize) -> Self {
        self.max_value_bytes = max;
        self
    }

    /// Early refresh (XFetch, Vattani et al. 2015) with this `beta` (default 1.0; `0.0` turns it
    /// off; at most [`MAX_EARLY_REFRESH_BETA`]). Each value remembers how long its load took,
    /// `delta`; a read that hits it in its last stretch refreshes it early when
    /// `now − delta·beta·ln(U) ≥ fresh_until`, `U` uniform in (0, 1]. The reader gets the
    /// current value at once; the refresh runs in the background as the id's one flight, through
    /// the regeneration lock across processes (a refresh that loses the lock does nothing: the
    /// winner's write reaches the others). A hot key is rebuilt before it expires and no caller
    /// waits; a key nobody reads in its last stretch is not refreshed. A larger beta refreshes
    /// earlier (more source reads, more margin for slow loads). Counted as `early_refreshes`
    /// and `early_refresh_failures`; see `docs/early-refresh.md`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use std::time::Duration;
    /// use echostore::{Error, Store};
    ///
    /// let store = Store::builder().build().await?;
    /// let prices = store
    ///     .table::<u64, u64>("prices")
    ///     .ttl(Duration::from_secs(30))
    ///     .early_refresh(2.0) // rebuild hot prices a little sooner than the default
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(id * 100) })
    ///     .start()
    ///     .await?;
    /// assert_eq!(*prices.get(&3).await?, 300);
    /// let negative = store
    ///     .table::<u64, u64>("negative")
    ///     .early_refresh(-1.0)
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(id) })
    ///     .start()
    ///     .await;
    /// assert!(matches!(negative, Err(Error::InvalidConfig(_))));
    /// # Ok(())
    /// # }
    /// ```
    pub fn early_refresh(mut self, beta: f64) -> Self {
        self.early_refresh = beta;
        self
    }

    /// The source of truth, called once per id per expiry (across processes, with a Valkey):
    /// `Fn(K) -> Future<Output = Result<V, E>>`. Required.
    ///
    /// The error may be any `E: Into<Box<dyn Error + Send + Sync>>`: your own error type,
    /// `std::io::Error`, `anyhow::Error`, a boxed error, a `String` or `&'static str`. Every waiter
    /// of a failed load gets the same [`Error::Source`]; [`Error::source_as`] gives yours back.
    ///
    /// The loader is a `Fn` called for every load, and its future must be `'static`: a shared
    /// handle (a pool, an `Arc`) is moved into the closure once and cloned into each future.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// use std::sync::Arc;
    /// use echostore::Store;
    ///
    /// struct Db; // a connection pool, say
    /// impl Db {
    ///     async fn name_of(&self, id: u64) -> anyhow::Result<String> {
    ///         Ok(format!("user {id}"))
    ///     }
    /// }
    ///
    /// let db = Arc::new(Db);
    /// let store = Store::builder().build().await?;
    /// let users = store
    ///     .table::<u64, String>("users")
    ///     .loader(move |id: u64| {
    ///         let db = Arc::clone(&db); // one clone per load: the future owns it
    ///         async move { db.name_of(id).await }
    ///     })
    ///     .start()
    ///     .await?;
    /// assert_eq!(*users.get(&7).await?, "user 7");
    /// # Ok(())
    /// # }
    /// ```
    pub fn loader<F, Fut, E>(mut self, loader: F) -> Self
    where
        F: Fn(K) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.loader = Some(Arc::new(move |id: K| {
            let load = loader(id);
            Box::pin(async move { load.await.map_err(|e| SharedError::from(e.into())) })
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
                (0.0..=MAX_EARLY_REFRESH_BETA).contains(&self.early_refresh),
                format!(
                    "early_refresh {} is outside 0.0..={MAX_EARLY_REFRESH_BETA}",
                    self.early_refresh
                ),
            ),
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
                early_beta: self.early_refresh,
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
