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
//!   loader in `config::loading` and `config::batching`, the owners' count in `config::sharding`).
//! - `core` — the table's shared state: settings, L1, Valkey, loader, counters; a write's `Life`.
//! - `table` — [`Table`]: the typed handle a user calls; `read_options` — [`ReadOptions`], a
//!   read's per-call loser policy and wait bound (`get_with`, `fetch_with`).
//! - `lookup` — the future a read returns: the L1 hit on the caller's task (the ETS read path);
//!   `miss` — a miss on the caller's task: it joins the flight the `board` lists for the id, or
//!   reads Valkey itself, and goes to the owner for everything else (the lock, a load, a write on
//!   the wire); however it reaches a flight, it waits on the flight's cell (`miss::follow`, the
//!   one way to wait); `board` — the current flights and reads, where a miss finds them without a
//!   message, each flight's cell, and the ids being written (`board::running`: a running write's
//!   mark, held by its own task).
//! - `batch` — `get_many` and `fetch_many` on the caller's side: L1, the board, one pipelined read
//!   per slot group, the rest to the owner in one message; `batch_fill` — the flights a batch
//!   started, run together (one acquire-many, one batch loader call, one write-many), with the
//!   source call and its lease in `batch_fill::source` and each loaded id's write and landing in
//!   `batch_fill::landing`; `batch_fill::on_valkey` — those round trips.
//! - `owner` — the table's actors (the table GenServer), one per shard of its ids (`.shards`,
//!   `config::sharding`): each orders its ids' misses, puts and invalidations
//!   (`owner::launches` starts flights, `owner::landings` takes them back, `owner::ordered_writes` runs
//!   the Valkey writes and takes pushes, `owner::marked` clears and tag marks, `owner::batches`
//!   batch misses, gathered from every shard into one batch); `owner::owner_ref` — where the
//!   handles find each shard's owner across restarts, and what every shard does once for the
//!   table (a flush, a mark: counted once, `owner_ref::EveryShard`).
//!
//! The modules sit in one folder per layer and import downwards only
//! (`../shared/tools/module-cycles`: no cycle; `docs/architecture.md` draws the layers):
//! `handle` (`table`, `config`, `store`, `lookup`, `miss`, `batch`, `peek`, `delete`, `tags`,
//! `at_least`, `read_options`: the caller's task) over `shard` (`owner`, `flights`,
//! `supervisor`, `own_writes`) over `flight` (`fill`, `batch_fill`, `load`, `losers`,
//! `l2_write`: one flight's or one write's protocol, on its task) over `state` (`core`, the
//! table's shared state, with `board`, `l1`, `stats`, `metrics`, `marks`, `unsettled`,
//! `schemas`, `budget`, `stale`, `reload`, `loser_policy`, `audit`, `absence`) over `coherence`
//! over `valkey` (`l2`, `lock`, `envelope`, `header`, `codec`, `depth`) over `wire` (`connect`,
//! `healing`, `breaker`, `key`, `scripts`, `natives`, `server_clock`); `core` reaches the owners
//! only through a trait it defines (`core::EveryOwner`).
//! - `events` — [`Event`]: what happened to a table's ids, on a bounded broadcast (`Table::events`).
//! - `peek` — `peek_local` and `peek`: cache-only reads, never the loader nor the lock.
//! - `absence` — a value type's own "not found" (`None`), asked of the type through serde.
//! - `delete` — `delete`, for a row gone at the source: `None` written everywhere for an
//!   `Option` value, else an invalidation.
//! - `tags` — `invalidate_tag` and `clear`: a group, or the whole table, invalidated everywhere
//!   in one command; `marks` — the generations they set, which every copy read from Valkey is
//!   checked against (the tags themselves: `config::tagging`).
//! - `l2_write` — a `put`'s or `invalidate`'s way to Valkey, and what it leaves in L1;
//!   `unsettled` — marks, counts and repairs the ids whose Valkey copy may be behind what this
//!   process wrote or answered (a failed write, a load answered in-process).
//! - `coherence` — the store's tracking connection: Valkey's invalidation pushes reach every L1
//!   and wake losers (client-side caching, by prefix with `BCAST` or by key: [`Tracking`]);
//!   `own_writes` — the pushes a process's own writes cause, told apart from others'.
//! - `board` — per shard, everything this process holds of each id as one state
//!   (`board::id_state`: a caller's read, the current flight's phase, the writes' phase, the
//!   overtaken flights, the running writes, the own-write fingerprints, the unsettled mark, the
//!   L1 entry awaiting key tracking's confirmation, the losers' wake-ups);
//!   `flights` — the owner's hand on it: the one load misses join, the writes it waits for
//!   (`flights::write_queue`); the per-id ordering rule lives there.
//! - `fill` — one flight's protocol: L2, the lock, the lease (`fill::lease`), the fenced write;
//!   `fill::copies` — what it makes of the bytes it reads.
//! - `reload` — [`Reload`]: refresh with the old value, "unchanged" renewing the copy in place.
//! - `load` — the source read: loader, timeouts, soft timeout, fail-safe.
//! - `stale` — what a flight answers with, and stale copies within their window.
//! - `loser_policy` — [`LoserPolicy`] and its decision; `losers` — the poll loop of a loser.
//! - `lock` — the regeneration lock; `scripts` — every Lua script and the rule for which write
//!   wins ([`protocol`] shows them); `natives` — which of Valkey's native lock commands
//!   (`DELIFEQ`, `SET … IFEQ`) the server has.
//! - `l1` — L1, quick_cache or moka (ETS with read concurrency), bounded by entries or, with a
//!   weigher, by bytes (`l1::weigher`); `l1::entry` — a value with its freshness, stale window
//!   and early refresh (under key tracking an entry waits for Valkey's confirmation in its id's
//!   state on the board, `board::id_state`); `clock` tells its entries' freshness without a serialising clock read.
//! - `connect` — where the Valkey is (one server or a cluster, TLS roots) and the connections to it.
//! - `coherence::tracking` — coherence's tracking connections (one per server or cluster primary);
//!   `coherence::tracking::keys` — under key tracking, the keys they read and what they found there.
//! - `l2` — the shared Valkey connection, behind the circuit breaker (`breaker`);
//!   `server_clock` — Valkey's clock as estimated here: the "now" every envelope's life is read
//!   against, and a put's deadline.
//! - `envelope` — the bytes on Valkey: the header (`header`: format, `fresh_until`,
//!   `written_at`, the load's `delta`, the source's version, the generation; published in
//!   [`protocol`]), then the entry's tags and the postcard payload, decoded within a nesting
//!   bound (`depth`).
//! - `audit` — the online staleness audit: a sample of L1 hits compared with Valkey off the hit path.
//! - `stats` — counters and the [`TableStats`] snapshot (the `:coalesced` counter and friends);
//!   `metrics` — the same figures exported through the `metrics` facade.
//! - `spans` — the tracing spans' stable names and attributes (OpenTelemetry through `tracing-opentelemetry`).
//! - `supervisor` — restarts a crashed owner.
//! - `key` — [`Key`], [`Value`] and the Valkey key names `<table>:{<id>}`, `lock:<table>:{<id>}`,
//!   `<table>:{}marks`.
//! - `fetched` — [`Fetched`] and [`Origin`]: what a read returns (`:hit | :l2 | :fill`).
//! - `error` — the one [`Error`].
//! - [`recipes`] — documentation only: the everyday recipes, each a doc test.
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
//!     .build()
//!     .await?;
//! let name = users.get(&42).await?;
//! # Ok(()) }
//! ```
//!
//! # Traces
//!
//! A miss that reaches the table's owner opens INFO spans with stable names and attributes:
//! `echostore.fill` (`echostore.table`, `echostore.id_hash`, `echostore.lock`, `echostore.origin`,
//! `echostore.load_ms`), `echostore.batch_fill` and, inside a fill, `echostore.load` (the source
//! read); an L1 hit opens none. A `tracing-opentelemetry` layer exports them as OpenTelemetry
//! spans: the recipe is in `docs/guide.md` ("Traces"), and the test `a_cold_miss_is_traced` runs
//! it against a real Valkey with an in-memory exporter.
//!
//! A whole service, an axum handler whose loader queries SQLite, is
//! `examples/users_service.rs` (`cargo run -p echostore --example users_service -- --self-check`).
//!
//! # Recipes
//!
//! In [`recipes`]: values of any serde type, caching "not found", borrowed keys, loader errors
//! and getting yours back, `delete` beside `put` and `invalidate`, tags and `clear`, reading the
//! counters; each with an example that runs as a doc test.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

mod clock;
mod coherence;
mod error;
mod events;
mod fetched;
mod flight;
mod handle;
mod shard;
mod spans;
mod state;
mod valkey;
mod version;
mod wire;

pub mod recipes;

pub use crate::state::metrics::{METRICS_EXPORT_EVERY, describe_metrics};
pub use coherence::Tracking;
pub use valkey::codec::{Codec, CodecError, CustomCodec};

/// Renamed [`Tracking::SILENT_LINK_BOUND`]: the constant lives with the tracking it bounds.
#[deprecated(since = "0.1.0", note = "use `Tracking::SILENT_LINK_BOUND`")]
pub const SILENT_LINK_BOUND: std::time::Duration = Tracking::SILENT_LINK_BOUND;

/// Renamed [`StoreBuilder::DEFAULT_UNCONFIRMED_L1_LIFE`]: the default lives with its setting.
#[deprecated(
    since = "0.1.0",
    note = "use `StoreBuilder::DEFAULT_UNCONFIRMED_L1_LIFE`"
)]
pub const DOWN_L1_LIFE: std::time::Duration = StoreBuilder::DEFAULT_UNCONFIRMED_L1_LIFE;
pub use error::{Error, Result, SharedError, ValkeyError};
pub use events::{EVENTS_CAPACITY, Event, EventKind, EvictionCause, InvalidatedBy};
pub use fetched::{Fetched, Origin};
pub use handle::config::{MAX_EARLY_REFRESH_BETA, TableBuilder};
pub use handle::read_options::ReadOptions;
pub use handle::store::{Store, StoreBuilder};
pub use handle::table::Table;
pub use state::core::MAX_DURATION;
pub use state::l1::L1Backend;
pub use state::loser_policy::LoserPolicy;
pub use state::marks::MAX_TAG_BYTES;
pub use state::reload::Reload;
pub use state::stats::TableStats;
pub use version::{Version, VersionParseError, Written};
pub use wire::key::{IntoId, Key, MAX_ID_BYTES, Value};

/// The README's Rust snippets, compiled as doctests so that they keep up with the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The guide's Rust snippets (`docs/guide.md`), compiled as doctests for the same reason.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide.md")]
pub struct GuideDoctests;

/// The wire protocol, for tools that speak to Valkey beside EchoStore: a connection made as a
/// store makes its own, the key names a table uses, how it makes a lock token and releases a lock
/// (token-checked), and the envelope header's decoder. Not needed to use a cache; see
/// `docs/lock-protocol.md` for the protocol, script by script.
pub mod protocol {
    pub use crate::state::schemas::RENEW_EVERY as SCHEMA_RENEW_EVERY;
    pub use crate::state::schemas::{schema_key_names, schemas_key};
    pub use crate::valkey::header::{Header, HeaderError, LONGEST_HEADER, decode_header};
    pub use crate::valkey::lock::new_token;
    pub use crate::wire::connect::Connection;
    pub use crate::wire::key::{KeyNames, key_names, marks_key};
    pub use crate::wire::natives::{DELIFEQ_SINCE, NativeCommands, SET_IFEQ_SINCE};
    pub use crate::wire::scripts::{MAX_CLOCK_SKEW_MS, RELEASE_SCRIPT};
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub use crate::wire::server_clock::offset_wall_clock;

    /// The library's own scripts, named once: every one for the tests that run one against a
    /// real Valkey beside it (`protocol::scripts`, the `fault-injection` feature), and under
    /// `protocol` itself the names once published there, deprecated for one release (a tool needs
    /// only the release, `RELEASE_SCRIPT`).
    macro_rules! library_scripts {
        ($($name:ident),* $(,)?) => {
            /// Every Lua script EchoStore runs, for tests that run one against a real Valkey.
            #[cfg(feature = "fault-injection")]
            #[doc(hidden)]
            pub mod scripts {
                pub use crate::wire::scripts::RELEASE_SCRIPT;
                $(pub const $name: &str = crate::wire::scripts::$name;)*
            }
            $(
                #[deprecated(since = "0.1.0", note = "the library's own script: no longer published")]
                #[doc(hidden)]
                pub const $name: &str = crate::wire::scripts::$name;
            )*
        };
    }
    library_scripts!(
        ACQUIRE_MANY_SCRIPT,
        ACQUIRE_OR_READ_SCRIPT,
        EXTEND_MANY_SCRIPT,
        EXTEND_SCRIPT,
        FENCED_WRITE_SCRIPT,
        MARK_SCRIPT,
        POLL_MANY_SCRIPT,
        POLL_SCRIPT,
        PUT_SCRIPT,
        RENEW_SCRIPT,
        WRITE_MANY_SCRIPT,
    );
}
