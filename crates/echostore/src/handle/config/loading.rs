//! The settings of how a miss is loaded: the loader, its timeouts and fail-safe, the
//! regeneration lock's `PX` and what losing requests do.

use super::*;

impl<K: Key, V: Value> TableBuilder<K, V> {
    /// `PX` of the regeneration lock (default 5 s, at least 3 ms): how long a crashed winner can
    /// block others. A live winner extends it every `lock_ttl / 3` while it loads (the lease), so
    /// a slow loader keeps its lock; this bounds only the wait after a winner's process dies.
    /// Used with a Valkey, and without one only as the longest a read waits for the table's
    /// [`source_budget`](Self::source_budget) under a policy that does not poll.
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
    ///     .build()
    ///     .await?;
    /// let too_short = store
    ///     .table::<u64, String>("too_short")
    ///     .lock_ttl(Duration::from_millis(1))
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("user {id}")) })
    ///     .build()
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
    /// Losers of the lock exist only with a Valkey (without one, misses in a process already
    /// coalesce); the policy also says what a read over the table's
    /// [`source_budget`](Self::source_budget) does, with a Valkey or without.
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
    ///     .build()
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
    ///     .build()
    ///     .await?;
    /// assert!(matches!(fail_fast.get(&1).await, Err(Error::LockBusy)));
    ///
    /// let c = Store::builder().valkey(valkey.url()).build().await?;
    /// let placeholder = c
    ///     .table::<u64, String>("reports")
    ///     .losers(LoserPolicy::Default("(being prepared)".to_owned()))
    ///     .loader(never)
    ///     .build()
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

    /// At most `n` source reads of this table at once across every process on the Valkey (a
    /// batch loader's call counts as one, whatever its ids): after a `clear()`, a tag over many
    /// entries, a fleet's cold start or a mass expiry, the source sees `n` loads at a time, not
    /// every key at once. Each read holds a lease on Valkey that lives `lock_ttl` unless renewed,
    /// so a process that crashes leaks none. A read over budget (a load or a reload) follows the
    /// loser policy, its call's own if it set one: its callers take the stale copy at once if
    /// there is one (whatever the policy), or the `Default` placeholder, while the load waits for
    /// a lease; `FailFast` answers [`Error::BudgetExhausted`](crate::Error::BudgetExhausted) at
    /// once; otherwise the callers wait with the load, for up to the policy's `up_to`
    /// (`lock_ttl` for `ServeStale`). A batch read's ids with a stale copy take it at once, and
    /// the others wait with the batch's call, up to the table's policy's `up_to` (`lock_ttl` for
    /// a policy that does not poll). Without Valkey the budget bounds this process's reads
    /// alone. Counted in `budget_waits` and `budget_exhausted`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::Store;
    ///
    /// let store = Store::builder().build().await?;
    /// let users = store
    ///     .table::<u64, String>("users")
    ///     .source_budget(16)
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("user {id}")) })
    ///     .build()
    ///     .await?;
    /// let all = users.get_many(&(0..100).collect::<Vec<u64>>()).await?;
    /// assert_eq!(all.len(), 100);
    /// # Ok(())
    /// # }
    /// ```
    pub fn source_budget(mut self, n: u32) -> Self {
        self.source_budget = Some(n);
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
    ///     .build()
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
    ///     .build()
    ///     .await?;
    /// assert_eq!(*reports.get(&1).await?, "report 1");
    /// # Ok(())
    /// # }
    /// ```
    pub fn no_load_timeout(mut self) -> Self {
        self.load_timeout = None;
        self
    }

    /// After `after`, answer the waiters with the stale copy if there is one (Valkey's with a
    /// Valkey, L1's without), while the load goes on and fills the cache when it finishes.
    /// Shorter than `load_timeout`. A reloader's call (`.reloader`) has no soft timeout.
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
    ///     .build()
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
    /// (default off: the waiters get the loader's error). Counted as `fail_safe_served`. A row the
    /// batch loader leaves out is gone, not failed: that read answers [`Error::Absent`] whatever
    /// copy is at hand, and the copies go (no later read serves the gone row).
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
    ///     .build()
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

    /// The source of truth, called once per id per expiry (across processes, with a Valkey):
    /// `Fn(K) -> Future<Output = Result<V, E>>`. Required, unless a
    /// [`batch_loader`](Self::batch_loader) is set.
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
    ///     .build()
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

    /// Order this table's writes by the value's own version from the source of truth (a row's
    /// `updated_at`, a sequence number) instead of by when they reach Valkey. A `put` or a fill
    /// whose value's version is below the one Valkey holds changes nothing (the put answers
    /// [`Error::Superseded`](crate::Error::Superseded)), in whatever order the writes land: a put
    /// that timed out and reaches Valkey late cannot bring an older row back, nor can a slow load
    /// that read the row before it changed. Equal versions: the later write lands.
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> echostore::Result<()> {
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Product { name: String, updated_at_ms: u64 }
    ///
    /// let store = echostore::Store::builder().build().await?;
    /// let products = store
    ///     .table::<u64, Product>("products")
    ///     .version_by(|p: &Product| p.updated_at_ms)
    ///     .loader(|id: u64| async move {
    ///         Ok::<_, std::io::Error>(Product { name: format!("product {id}"), updated_at_ms: 1 })
    ///     })
    ///     .build()
    ///     .await?;
    /// # let _ = products;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Envelopes then carry the version (format 3, `docs/lock-protocol.md`); a `version_by` that
    /// panics leaves that write ordered by Valkey's clock, logged.
    pub fn version_by(mut self, version: impl Fn(&V) -> u64 + Send + Sync + 'static) -> Self {
        self.version_by = Some(Arc::new(version));
        self
    }
}
