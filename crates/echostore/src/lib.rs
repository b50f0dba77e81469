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
//! - `config` — [`TableBuilder`]: a table's settings and their checks (the loader and the batch
//!   loader in `config::loading` and `config::batching`).
//! - `core` — the table's shared state: settings, L1, Valkey, loader, counters; a write's `Life`.
//! - `table` — [`Table`]: the typed handle a user calls; `read_options` — [`ReadOptions`], a
//!   read's per-call loser policy and wait bound (`get_with`, `fetch_with`).
//! - `lookup` — the future a read returns: the L1 hit on the caller's task (the ETS read path);
//!   `miss` — a miss on the caller's task: it joins the flight the `board` lists for the id, or
//!   reads Valkey itself, and goes to the owner for everything else (the lock, a load, a write on
//!   the wire); `board` — the current flights and reads, where a miss finds them without a message.
//! - `batch` — `get_many` and `fetch_many` on the caller's side: L1, the board, one `MGET` per
//!   slot group, the rest to the owner in one message; `batch::fill` — the flights a batch
//!   started, run together (one acquire-many, one batch loader call, one write-many), with the
//!   source call and its lease in `batch::fill::source` and each loaded id's write and landing in
//!   `batch::fill::landing`; `batch::on_valkey` — those round trips.
//! - `owner` — the table's actor (the table GenServer): orders misses, puts and invalidations;
//!   `owner_ref` — where the handles find it across restarts.
//! - `delete` — `delete`, for a row gone at the source: `None` written everywhere for an
//!   `Option` value, else an invalidation.
//! - `tags` — `invalidate_tag` and `clear`: a group, or the whole table, invalidated everywhere
//!   in one command; `marks` — the generations they set, which every copy read from Valkey is
//!   checked against (the tags themselves: `config::tagging`).
//! - `writes` — a `put`'s or `invalidate`'s way to Valkey, and what it leaves in L1;
//!   `unsettled` — the ids whose Valkey copy may be behind what this process wrote or answered
//!   (a failed write, a load answered in-process), until it is repaired.
//! - `coherence` — the store's tracking connection: Valkey's invalidation pushes reach every L1
//!   and wake losers (`BCAST` client-side caching).
//! - `flights` — the flights map: per id, the one load, its waiters (`coalesced`), the writes it
//!   waits for; the per-id ordering rule lives here.
//! - `fill` — one flight's protocol: L2, the lock, the lease, the fenced write.
//! - `load` — the source read: loader, timeouts, soft timeout, fail-safe.
//! - `stale` — what a flight answers with, and stale copies within their window.
//! - `losers` — [`LoserPolicy`], its decision and the poll loop.
//! - `lock` — the regeneration lock; `scripts` — every Lua script and the rule for which write
//!   wins ([`protocol`] shows them); `natives` — which of Valkey's native lock commands
//!   (`DELIFEQ`, `SET … IFEQ`) the server has.
//! - `l1` — L1, quick_cache or moka (ETS with read concurrency), bounded by entries or, with a
//!   weigher, by bytes (`l1::weigher`); `l1::entry` — a value with its freshness, stale window
//!   and early refresh; `clock` tells its entries' freshness without a serialising clock read.
//! - `connect` — where the Valkey is (one server or a cluster, TLS roots) and the connections to it.
//! - `tracking` — coherence's tracking connections (one per server or cluster primary).
//! - `l2` — the shared Valkey connection, behind the circuit breaker (`breaker`);
//!   `server_clock` — Valkey's clock as estimated here: the "now" every envelope's life is read
//!   against, and a put's deadline.
//! - `envelope` — the bytes on Valkey: the header (`header`: format, `fresh_until`,
//!   `written_at`, the load's `delta`, the source's version, the generation; published in
//!   [`protocol`]), then the entry's tags and the postcard payload, decoded within a nesting
//!   bound (`depth`).
//! - `stats` — counters and the [`TableStats`] snapshot (the `:coalesced` counter and friends);
//!   `metrics` — the same figures exported through the `metrics` facade.
//! - `supervisor` — restarts a crashed owner.
//! - `key` — [`Key`], [`Value`] and the Valkey key names `<table>:{<id>}`, `lock:<table>:{<id>}`,
//!   `<table>:{}marks`.
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
//!
//! A whole service, an axum handler whose loader queries SQLite, is
//! `examples/users_service.rs` (`cargo run -p echostore --example users_service -- --self-check`).
//!
//! # Recipes
//!
//! ## Values: any serde type
//!
//! A table's values are kept in L1 as they are and written to Valkey with serde, so a value type
//! derives `Serialize` and `Deserialize` (and is `Send + Sync + 'static`); see [`Value`]. Keys
//! are `String`, `u64`, `i64`, `u32`, `&'static str` (and `uuid::Uuid` with the `uuid` feature);
//! see [`Key`].
//!
//! ## Caching "not found"
//!
//! A miss on the source that is not an error — no such row — is worth caching too, or every
//! request for a missing id reads the source. Make the value an `Option`: `None` is cached,
//! coalesced and expired like any value. (A loader *error* is never cached: every waiter of that
//! flight gets it, and the next read tries again.) When the row is deleted at the source,
//! [`Table::delete`] writes `None` everywhere, so no process reads the source for it again.
//!
//! ```
//! # use std::sync::Arc;
//! # use std::sync::atomic::{AtomicUsize, Ordering};
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> echostore::Result<()> {
//! use echostore::{Origin, Store};
//!
//! #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
//! struct User {
//!     name: String,
//! }
//!
//! let reads = Arc::new(AtomicUsize::new(0));
//! let store = Store::builder().build().await?;
//! let users = store
//!     .table::<u64, Option<User>>("users")
//!     .loader({
//!         let reads = Arc::clone(&reads);
//!         move |id: u64| {
//!             reads.fetch_add(1, Ordering::SeqCst);
//!             // Say, `SELECT name FROM users WHERE id = ?`, with `.optional()`.
//!             let row = (id == 1).then(|| User { name: "alice".into() });
//!             async move { Ok::<_, std::io::Error>(row) }
//!         }
//!     })
//!     .start()
//!     .await?;
//!
//! assert_eq!(*users.get(&1).await?, Some(User { name: "alice".into() }));
//! assert_eq!(*users.get(&2).await?, None); // no such user: read once...
//! let again = users.fetch(&2).await?;
//! assert_eq!((again.value.as_ref(), again.origin), (&None, Origin::L1)); // ...then cached
//! assert_eq!(reads.load(Ordering::SeqCst), 2);
//! # Ok(())
//! # }
//! ```
//!
//! ## Borrowed keys
//!
//! Reads, writes and invalidations take the key by reference in any form it borrows as, as
//! `HashMap::get` does: a `Table<String, _>` answers `get("alice")` with no `String` made on an
//! L1 hit (a miss makes one, for the flight).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> echostore::Result<()> {
//! let store = echostore::Store::builder().build().await?;
//! let greetings = store
//!     .table::<String, String>("greetings")
//!     .loader(|name: String| async move { Ok::<_, std::io::Error>(format!("hello, {name}")) })
//!     .start()
//!     .await?;
//! assert_eq!(*greetings.get("alice").await?, "hello, alice");
//! let owned = String::from("alice");
//! assert_eq!(*greetings.get(&owned).await?, "hello, alice");
//! greetings.invalidate("alice").await?;
//! # Ok(())
//! # }
//! ```
//!
//! ## Loader errors: any error type, and getting yours back
//!
//! A loader may fail with any `E: Into<Box<dyn Error + Send + Sync>>`: an error type of your own,
//! `std::io::Error`, `anyhow::Error`, a `Box<dyn Error + Send + Sync>`, even a `String`. Every
//! waiter of the failed flight receives the same [`Error::Source`]; its
//! [`std::error::Error::source`] is the loader's error, and [`Error::source_as`] gives it back
//! typed.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> echostore::Result<()> {
//! use echostore::{Error, Store};
//!
//! #[derive(Debug, thiserror::Error)]
//! enum DbError {
//!     #[error("the database is down")]
//!     Down,
//! }
//!
//! let store = Store::builder().build().await?;
//! let users = store
//!     .table::<u64, String>("users")
//!     .loader(|_id: u64| async { Err::<String, _>(DbError::Down) })
//!     .start()
//!     .await?;
//! match users.get(&1).await {
//!     Err(e) if matches!(e.source_as::<DbError>(), Some(DbError::Down)) => { /* 503 */ }
//!     other => panic!("unexpected: {other:?}"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! ## A row gone at the source: `delete`, beside `put` and `invalidate`
//!
//! After an `UPDATE`, [`Table::put`] the new row (every process serves it, nobody reads the
//! source). After a change you would rather have read back, [`Table::invalidate`] (the next read
//! anywhere loads it once). After a `DELETE`, [`Table::delete`]: with `V = Option<Row>` it writes
//! `None` everywhere, so no process asks the source for the row again; for any other value type
//! it invalidates.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> echostore::Result<()> {
//! use echostore::{Origin, Store};
//!
//! let store = Store::builder().build().await?;
//! let rows = store
//!     .table::<u64, Option<String>>("rows")
//!     .loader(|id: u64| async move { Ok::<_, std::io::Error>(Some(format!("row {id}"))) })
//!     .start()
//!     .await?;
//! rows.put(&1, Some("row 1, edited".into())).await?; // UPDATE rows SET … WHERE id = 1
//! rows.delete(&2).await?;                             // DELETE FROM rows WHERE id = 2
//! assert_eq!(rows.fetch(&2).await?.origin, Origin::L1); // "not found", from the cache
//! # Ok(())
//! # }
//! ```
//!
//! ## Invalidating a group: tags and `clear`
//!
//! Give entries tags with [`TableBuilder::tags`], then [`Table::invalidate_tag`] invalidates
//! every entry carrying one, and [`Table::clear`] every entry of the table, in every process, in
//! one Valkey command whatever the group's size (`docs/tags-and-clear.md`).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> echostore::Result<()> {
//! use echostore::{Origin, Store};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Invoice { tenant: u32, total: u64 }
//!
//! let store = Store::builder().build().await?;
//! let invoices = store
//!     .table::<u64, Invoice>("invoices")
//!     .tags(|_id: &u64, i: &Invoice| [format!("tenant:{}", i.tenant)])
//!     .loader(|id: u64| async move { Ok::<_, std::io::Error>(Invoice { tenant: (id % 3) as u32, total: id }) })
//!     .start()
//!     .await?;
//! invoices.get(&3).await?; // tenant 0
//! invoices.get(&4).await?; // tenant 1
//! invoices.invalidate_tag("tenant:0").await?; // after tenant 0's invoices were recomputed
//! assert_eq!(invoices.fetch(&3).await?.origin, Origin::Loaded);
//! assert_eq!(invoices.fetch(&4).await?.origin, Origin::L1);
//! invoices.clear().await?;
//! assert_eq!(invoices.fetch(&4).await?.origin, Origin::Loaded);
//! # Ok(())
//! # }
//! ```
//!
//! ## Reading the counters
//!
//! [`Table::stats`] is a snapshot of the table's [`TableStats`]: plain numbers, `Serialize`, and
//! addable across tables or stores. The ones that tell a cache is working: `l1_hits` and
//! `l2_hits` against `source_reads` (the hit ratio); `coalesced` (misses that joined a flight
//! instead of reading the source); `lock_won` / `lock_lost` (which process rebuilt a key);
//! `stale_served`, `defaults_served`, `failed_fast`, `poll_waits` (what losers did); `errors`,
//! `l2_errors`, `load_timeouts` (what went wrong).
//!
//! Some counters move in a healthy system, because two writers raced and the protocol settled it:
//! `fenced_write_skipped` (a fill's lock was taken over by a `put` or `invalidate`, or expired
//! while Valkey was away, so the fill stored nothing), `release_skipped` (the same fill then
//! found someone else's lock, or none, and deleted nothing). A steady rise of them along with
//! `lease_lost` says writes and reads of the same ids overlap often; it is never data loss.
//! `writes_superseded` (a write found a value stamped ahead of Valkey's own clock) should stay at
//! zero: it means planted bytes, or a server clock stepped back.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> echostore::Result<()> {
//! let store = echostore::Store::builder().build().await?;
//! let squares = store
//!     .table::<u64, u64>("squares")
//!     .loader(|id: u64| async move { Ok::<_, std::io::Error>(id * id) })
//!     .start()
//!     .await?;
//! for _ in 0..3 {
//!     squares.get(&7).await?;
//! }
//! let stats = squares.stats();
//! assert_eq!((stats.source_reads, stats.l1_hits), (1, 2));
//! for (name, value) in stats.counters() {
//!     println!("echostore_{name}{{table=\"squares\"}} {value}");
//! }
//! # Ok(())
//! # }
//! ```
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

mod batch;
mod board;
mod breaker;
mod clock;
mod coherence;
mod config;
mod connect;
mod core;
mod delete;
mod depth;
mod envelope;
mod error;
mod fetched;
mod fill;
mod flights;
mod header;
mod key;
mod l1;
mod l2;
mod load;
mod lock;
mod lookup;
mod losers;
mod marks;
mod metrics;
mod miss;
mod natives;
mod owner;
mod owner_ref;
mod read_options;
mod scripts;
mod server_clock;
mod stale;
mod stats;
mod store;
mod supervisor;
mod table;
mod tags;
mod tracking;
mod unsettled;
mod writes;

pub use crate::metrics::{METRICS_EXPORT_EVERY, describe_metrics};
pub use coherence::DOWN_L1_LIFE;
pub use config::{MAX_DURATION, MAX_EARLY_REFRESH_BETA, TableBuilder};
pub use error::{Error, Result, SharedError, ValkeyError};
pub use fetched::{Fetched, Origin};
pub use key::{IntoId, Key, MAX_ID_BYTES, Value};
pub use l1::L1Backend;
pub use losers::LoserPolicy;
pub use marks::MAX_TAG_BYTES;
pub use read_options::ReadOptions;
pub use stats::TableStats;
pub use store::{Store, StoreBuilder};
pub use table::Table;
pub use tracking::SILENT_LINK_BOUND;

/// The README's Rust snippets, compiled as doctests so that they keep up with the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The wire protocol, for tools and tests that speak to Valkey beside EchoStore: every Lua script
/// EchoStore runs, how it makes a lock token, and the envelope header's decoder. Not needed to use a cache; see
/// `docs/lock-protocol.md` for each script's part in the protocol.
pub mod protocol {
    pub use crate::header::{Header, HeaderError, LONGEST_HEADER, decode_header};
    pub use crate::key::{KeyNames, key_names, marks_key};
    pub use crate::lock::new_token;
    pub use crate::natives::{DELIFEQ_SINCE, NativeCommands, SET_IFEQ_SINCE};
    pub use crate::scripts::{
        ACQUIRE_MANY_SCRIPT, ACQUIRE_OR_READ_SCRIPT, EXTEND_SCRIPT, FENCED_WRITE_SCRIPT,
        MARK_SCRIPT, MAX_CLOCK_SKEW_MS, POLL_SCRIPT, PUT_SCRIPT, RELEASE_SCRIPT, WRITE_MANY_SCRIPT,
    };
    #[doc(hidden)]
    pub use crate::server_clock::offset_wall_clock;
}
