//! How a table is configured: [`TableBuilder`], its defaults, and the checks `build()` makes.
//!
//! | setting | default | meaning |
//! | --- | --- | --- |
//! | `ttl` | 60 s | logical life: fresh for `ttl ± ttl·jitter` |
//! | `ttl_for` | none | a value's own ttl, chosen from the value (jitter, stale window and early refresh follow it) |
//! | `tags` | none | an entry's tags, for `invalidate_tag` |
//! | `jitter` | 0.1 | spread of expiries, `0.0..=0.5`, so a cohort filled together never expires together |
//! | `stale_for` | 0 | kept past `ttl` (Valkey `PX` = life + `stale_for`) for serve-stale and fail-safe |
//! | `lock_ttl` | 5 s | `PX` of the regeneration lock |
//! | `losers` | `Poll { every: 10 ms, up_to: 5 s }` | what a request does when another process holds the lock |
//! | `source_budget` | none | at most this many source reads of the table at once across every process on the Valkey |
//! | `l1_capacity` | 100 000 | entries kept in L1 |
//! | `l1_backend` | quick_cache | or moka |
//! | `codec`, `compress_above` | postcard, never | how values are coded on Valkey; LZ4 above the size |
//! | `schema` | 0 | the values' schema: each has its own copies, and every write reaches all live ones (rolling deploys) |
//! | `reloader` | none | called instead of the loader with a copy in its stale window; may answer "unchanged" |
//! | `audit_sample` | none | compare this fraction of L1 hits with Valkey, off the hit path |
//! | `l1_idle` | none | an L1 entry not read for this long leaves L1 |
//! | `l1_capacity_bytes`, `l1_weigher` | none | L1 bounded by bytes, each entry weighed by the weigher, instead of by `l1_capacity` entries |
//! | `load_timeout` | 30 s (`no_load_timeout()` for none) | waiters get `LoadTimeout` and the lock is released when the loader runs longer |
//! | `soft_timeout` | none | past it, waiters get the stale copy (if any) while the load goes on |
//! | `fail_safe` | off | serve a stale copy instead of a loader error |
//! | `early_refresh` | 1.0 | XFetch beta, `0.0..=10.0`: a read in a value's last stretch rebuilds it in the background before it expires; `0.0` off (`docs/early-refresh.md`) |
//! | `max_value_bytes` | 16 MiB | larger encodings are refused with `TooLarge` and nothing is written; larger values read from Valkey are a counted miss |
//! | `shards` | the cores | owner actors sharing the table's ids by hash, each ordering its ids' misses and writes |
//!
//! Every duration is at most [`MAX_DURATION`] and every count has a range, so no setting can make
//! later arithmetic overflow: `build()` answers [`Error::InvalidConfig`] naming the setting.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result, SharedError};
use crate::handle::store::Store;
use crate::handle::table::Table;
use crate::state::core::{BatchLoader, Loader, TableConfig, TableCore};
use crate::state::l1::{Bound, L1, L1Backend};
use crate::state::loser_policy::LoserPolicy;
use crate::state::stats::Stats;
use crate::wire::key::{Key, Value, validate_table_name};

mod batching;
mod life;
mod loading;
mod reloading;
mod sharding;
mod start;
mod tagging;

pub(crate) use crate::state::core::MAX_DURATION;

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
/// [`loader`](Self::loader); each is checked by `build()`.
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
///     .build()
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
    version_by: Option<crate::state::core::VersionBy<V>>,
    ttl_for: Option<crate::state::core::TtlFor<V>>,
    tags: Option<crate::state::core::TagsOf<K, V>>,
    l1_capacity_bytes: Option<u64>,
    l1_weigher: Option<crate::state::l1::Weigher<K, V>>,
    l1_idle: Option<Duration>,
    audit_sample: Option<f64>,
    source_budget: Option<u32>,
    schema: u32,
    coding: crate::valkey::codec::Coding,
    loader: Option<Loader<K, V>>,
    reloader: Option<crate::state::reload::Reloader<K, V>>,
    batch_loader: Option<BatchLoader<K, V>>,
    shards: Option<usize>,
    _key: PhantomData<fn() -> K>,
}

impl Store {
    /// Starts configuring a table named `name` with ids `K` and values `V`.
    pub fn table<K: Key, V: Value>(&self, name: &str) -> TableBuilder<K, V> {
        TableBuilder::new(self.clone(), name)
    }
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
            version_by: None,
            ttl_for: None,
            tags: None,
            l1_capacity_bytes: None,
            l1_weigher: None,
            l1_idle: None,
            audit_sample: None,
            source_budget: None,
            schema: 0,
            coding: crate::valkey::codec::Coding::default(),
            loader: None,
            reloader: None,
            batch_loader: None,
            shards: None,
            _key: PhantomData,
        }
    }
}
