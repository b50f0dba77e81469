//! The settings of what a table keeps and for how long: `ttl`, `jitter`, `stale_for`,
//! `early_refresh`, and L1's size and backend, with the largest value accepted.

use super::*;

impl<K: Key, V: Value> TableBuilder<K, V> {
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
    ///     .build()
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

    /// A value's own logical life, chosen from the value: `Fn(&V) -> Duration`, in place of
    /// [`ttl`](Self::ttl) (a product on sale for 5 s, the rest for 5 min). Everything that
    /// follows a value's ttl follows it: the [`jitter`](Self::jitter) spreads it, the stale window
    /// ([`stale_for`](Self::stale_for)) starts where it ends, an early refresh comes in its last
    /// stretch, and a copy read from Valkey is held to it. It is asked for each write (a load or
    /// a `put`) and each copy read from Valkey; its answer is held within 1 ms and
    /// [`MAX_DURATION`](crate::MAX_DURATION), and if it panics the value gets `ttl`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use std::time::Duration;
    /// use echostore::{Origin, Store};
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Product { price: u64, on_sale: bool }
    ///
    /// let store = Store::builder().build().await?;
    /// let products = store
    ///     .table::<u64, Product>("products")
    ///     .ttl_for(|p: &Product| {
    ///         if p.on_sale { Duration::from_millis(50) } else { Duration::from_secs(300) }
    ///     })
    ///     .jitter(0.0)
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(Product { price: 10, on_sale: id == 1 }) })
    ///     .build()
    ///     .await?;
    /// products.get(&1).await?; // on sale: 50 ms
    /// products.get(&2).await?; // 5 min
    /// tokio::time::sleep(Duration::from_millis(80)).await;
    /// assert_eq!(products.fetch(&1).await?.origin, Origin::Loaded); // expired, read again
    /// assert_eq!(products.fetch(&2).await?.origin, Origin::L1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn ttl_for(mut self, ttl_for: impl Fn(&V) -> Duration + Send + Sync + 'static) -> Self {
        self.ttl_for = Some(Arc::new(ttl_for));
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
    ///     .build()
    ///     .await?;
    /// let too_wide = store
    ///     .table::<u64, String>("too_wide")
    ///     .jitter(0.8)
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("user {id}")) })
    ///     .build()
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
    ///     .build()
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
    ///     .build()
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
    ///     .build()
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

    /// Bound L1 by bytes instead of entries: the weights [`l1_weigher`](Self::l1_weigher) gives
    /// its entries add up to at most `bytes` (replacing [`l1_capacity`](Self::l1_capacity)), on
    /// either backend. Both settings go together.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::Store;
    ///
    /// let store = Store::builder().build().await?;
    /// let pages = store
    ///     .table::<String, String>("pages")
    ///     .l1_capacity_bytes(64 << 20) // 64 MiB of pages
    ///     .l1_weigher(|id: &String, page: &String| (id.len() + page.len()) as u64)
    ///     .loader(|id: String| async move { Ok::<_, std::io::Error>(format!("<h1>{id}</h1>")) })
    ///     .build()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn l1_capacity_bytes(mut self, bytes: u64) -> Self {
        self.l1_capacity_bytes = Some(bytes);
        self
    }

    /// What an L1 entry weighs, in bytes as you count them (the value's heap size, its encoded
    /// length), for [`l1_capacity_bytes`](Self::l1_capacity_bytes). Called once per entry as it
    /// is stored, never on a hit; an entry weighs at least 1, and 1 if the weigher panics.
    pub fn l1_weigher(mut self, weigher: impl Fn(&K, &V) -> u64 + Send + Sync + 'static) -> Self {
        self.l1_weigher = Some(Arc::new(weigher));
        self
    }

    /// An L1 entry not read for `idle` leaves this process's L1 (Valkey's copy is unchanged), on
    /// either backend, counted in `l1_idle_evictions`: memory goes to what this process reads.
    /// Without it (the default) an entry stays until it expires, is evicted for room or is
    /// invalidated. At least 1 ms.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use std::time::Duration;
    /// use echostore::Store;
    ///
    /// let store = Store::builder().build().await?;
    /// let sessions = store
    ///     .table::<u64, String>("sessions")
    ///     .ttl(Duration::from_secs(3600))
    ///     .l1_idle(Duration::from_secs(60)) // an hour on Valkey, a minute unread in memory
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("session {id}")) })
    ///     .build()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn l1_idle(mut self, idle: Duration) -> Self {
        self.l1_idle = Some(idle);
        self
    }

    /// How this table encodes values on Valkey: [`Codec::Postcard`](crate::Codec::Postcard)
    /// (the default, compact), [`Codec::Json`](crate::Codec::Json), or one of your own
    /// ([`Codec::custom`](crate::Codec::custom)). Every envelope records its codec, so a table
    /// reads postcard and JSON whatever its own setting: processes may differ; a custom codec's
    /// values are read by the tables that have it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::{Codec, Store};
    ///
    /// let store = Store::builder().build().await?;
    /// let pages = store
    ///     .table::<u64, String>("pages")
    ///     .codec(Codec::Json)
    ///     .compress_above(4096) // LZ4 for encodings over 4 KiB
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("page {id}")) })
    ///     .build()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn codec(mut self, codec: crate::Codec) -> Self {
        self.coding.codec = codec;
        self
    }

    /// Compress (LZ4) a value whose encoding is over `bytes`, when that makes it smaller. Every
    /// envelope records whether it is compressed; a reader decompresses at most
    /// `max_value_bytes`, so a planted "decompression bomb" is a counted miss, not an allocation.
    pub fn compress_above(mut self, bytes: usize) -> Self {
        self.coding.compress_above = Some(bytes);
        self
    }

    /// The schema of this table's values (default 0): bump it when a new version of the service
    /// changes the cached type, and old and new processes run side by side through a rolling
    /// deploy. Each schema keeps its own copies on Valkey, so no process decodes another's bytes;
    /// a `put`, `invalidate`, `delete`, tag or `clear` made under any schema reaches every live
    /// schema's copies and every process's L1; each schema loads an id once per expiry. The live
    /// schemas are known on Valkey and leave when their last process has gone (see the guide,
    /// "Rolling deploys").
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::Store;
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct UserV2 {
    ///     name: String,
    ///     emails: Vec<String>, // was `email: String` in schema 1
    /// }
    ///
    /// let store = Store::builder().build().await?;
    /// let users = store
    ///     .table::<u64, UserV2>("users")
    ///     .schema(2)
    ///     .loader(|id: u64| async move {
    ///         Ok::<_, std::io::Error>(UserV2 { name: format!("user {id}"), emails: vec![] })
    ///     })
    ///     .build()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn schema(mut self, schema: u32) -> Self {
        self.schema = schema;
        self
    }

    /// Audit this fraction of L1 hits (`0.0..=1.0`; `0.001` is one in a thousand) against Valkey's
    /// copy, off the hit path: `audited_hits`, `stale_hits` and `audit_max_staleness_ms` say
    /// whether what this process serves is what Valkey holds — in production, where a proxy, a
    /// failover or a bug could make L1 stale unseen. A sampled hit costs one random draw and a
    /// queue send; the comparison is a Valkey read on a task of its own. With a Valkey only.
    /// Values are compared by their encoded bytes: a type whose encoding of one value varies (a
    /// `HashMap`'s order) may be counted stale; use a `BTreeMap` in values you audit.
    pub fn audit_sample(mut self, fraction: f64) -> Self {
        self.audit_sample = Some(fraction);
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
    ///     .build()
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
    ///     .build()
    ///     .await?;
    /// assert_eq!(*prices.get(&3).await?, 300);
    /// let negative = store
    ///     .table::<u64, u64>("negative")
    ///     .early_refresh(-1.0)
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(id) })
    ///     .build()
    ///     .await;
    /// assert!(matches!(negative, Err(Error::InvalidConfig(_))));
    /// # Ok(())
    /// # }
    /// ```
    pub fn early_refresh(mut self, beta: f64) -> Self {
        self.early_refresh = beta;
        self
    }
}
