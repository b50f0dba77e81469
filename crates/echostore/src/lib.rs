//! EchoStore for Rust: an actor-based, in-process cache that never lets a herd of misses
//! stampede the source of truth.
//!
//! Each table has an **owner** actor whose **flights** map admits one load per id: concurrent
//! misses on one id join the flight already running and all receive its one answer. Reads hit a
//! caller-side **L1** first, without touching the owner. Behind L1 sits **Valkey as L2**, where a
//! **regeneration lock** (`SET lock:… <token> NX PX <ms>`) elects one process to read the source;
//! the others follow the table's [`LoserPolicy`]. The invariant: exactly one source read per key
//! per expiry, across every process sharing the Valkey.
//!
//! # Map (and the Elixir EchoStore counterpart)
//!
//! - `store` — [`Store`]: the Valkey connection and the supervisor (the application tree).
//! - `config` — [`TableBuilder`]: a table's settings and their checks.
//! - `core` — the table's shared state: settings, L1, Valkey, loader, counters; a write's `Life`.
//! - `table` — [`Table`]: the typed handle a user calls.
//! - `lookup` — the future a read returns: the L1 hit on the caller's task (the ETS read path),
//!   the owner only on a miss.
//! - `owner` — the table's actor (the table GenServer): orders misses, puts and invalidations;
//!   `owner_ref` — where the handles find it across restarts.
//! - `writes` — a `put`'s or `invalidate`'s way to Valkey, and what it leaves in L1.
//! - `coherence` — the store's tracking connection: Valkey's invalidation pushes reach every L1
//!   and wake losers (`BCAST` client-side caching).
//! - `flights` — the flights map: per id, the one load, its waiters (`coalesced`), the writes it
//!   waits for; the per-id ordering rule lives here.
//! - `fill` — one flight's protocol: L2, the lock, the lease, the fenced write.
//! - `load` — the source read: loader, timeouts, soft timeout, fail-safe.
//! - `stale` — what a flight answers with, and stale copies within their window.
//! - `losers` — [`LoserPolicy`], its decision and the poll loop.
//! - `lock` — the regeneration lock and every Lua script ([`protocol`] shows them).
//! - `l1` — L1, quick_cache or moka (ETS with read concurrency); `clock` tells its entries'
//!   freshness without a serialising clock read.
//! - `l2` — the shared Valkey connection, behind the circuit breaker (`breaker`).
//! - `envelope` — the bytes on Valkey: format, `fresh_until`, `written_at`, postcard payload.
//! - `stats` — counters and the [`TableStats`] snapshot (the `:coalesced` counter and friends).
//! - `supervisor` — restarts a crashed owner.
//! - `key` — [`Key`], [`Value`] and the Valkey key names `<table>:{<id>}`, `lock:<table>:{<id>}`.
//! - `fetched` — [`Fetched`] and [`Origin`]: what a read returns (`:hit | :l2 | :fill`).
//! - `error` — the one [`Error`].
//!
//! # Example
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> echostore::Result<()> {
//! use std::time::Duration;
//! use echostore::{LoserPolicy, Store};
//!
//! let store = Store::builder().valkey("redis://127.0.0.1:6379").build().await?;
//! let users = store
//!     .table::<u64, String>("users")
//!     .ttl(Duration::from_secs(60))
//!     .stale_for(Duration::from_secs(300))
//!     .losers(LoserPolicy::ServeStale)
//!     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("user {id}")) })
//!     .start()
//!     .await?;
//! let name = users.get(&42).await?;
//! # Ok(()) }
//! ```
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

mod breaker;
mod clock;
mod coherence;
mod config;
mod core;
mod depth;
mod envelope;
mod error;
mod fetched;
mod fill;
mod flights;
mod key;
mod l1;
mod l2;
mod load;
mod lock;
mod lookup;
mod losers;
mod metrics;
mod owner;
mod owner_ref;
mod stale;
mod stats;
mod store;
mod supervisor;
mod table;
mod writes;

pub use crate::metrics::{METRICS_EXPORT_EVERY, describe_metrics};
pub use coherence::DOWN_L1_LIFE;
pub use config::{MAX_DURATION, TableBuilder};
pub use error::{Error, Result, SharedError};
pub use fetched::{Fetched, Origin};
pub use key::{Key, MAX_ID_BYTES, Value};
pub use l1::L1Backend;
pub use losers::LoserPolicy;
pub use stats::TableStats;
pub use store::{Store, StoreBuilder};
pub use table::Table;

/// The wire protocol, for tools and tests that speak to Valkey beside EchoStore: every Lua script
/// EchoStore runs, and how it makes a lock token. Not needed to use a cache; see
/// `docs/lock-protocol.md` for each script's part in the protocol.
pub mod protocol {
    pub use crate::lock::{
        ACQUIRE_OR_READ_SCRIPT, EXTEND_SCRIPT, FENCED_WRITE_SCRIPT, MAX_CLOCK_SKEW_MS, POLL_SCRIPT,
        PUT_SCRIPT, RELEASE_SCRIPT, new_token,
    };
}
