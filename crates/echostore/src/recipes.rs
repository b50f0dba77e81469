//! Recipes: the everyday uses of a table, each with an example that runs as a doc test. This
//! module holds documentation only; the crate's map is at the [crate root](crate).
//!
//! # Values: any serde type
//!
//! A table's values are kept in L1 as they are and written to Valkey with serde, so a value type
//! derives `Serialize` and `Deserialize` (and is `Send + Sync + 'static`); see [`Value`]. Keys
//! are `String`, `u64`, `i64`, `u32`, `&'static str` (and `uuid::Uuid` with the `uuid` feature);
//! see [`Key`].
//!
//! # Caching "not found"
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
//!     .build()
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
//! # Borrowed keys
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
//!     .build()
//!     .await?;
//! assert_eq!(*greetings.get("alice").await?, "hello, alice");
//! let owned = String::from("alice");
//! assert_eq!(*greetings.get(&owned).await?, "hello, alice");
//! greetings.invalidate("alice").await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Loader errors: any error type, and getting yours back
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
//!     .build()
//!     .await?;
//! match users.get(&1).await {
//!     Err(e) if matches!(e.source_as::<DbError>(), Some(DbError::Down)) => { /* 503 */ }
//!     other => panic!("unexpected: {other:?}"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # A row gone at the source: `delete`, beside `put` and `invalidate`
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
//!     .build()
//!     .await?;
//! rows.put(&1, Some("row 1, edited".into())).await?; // UPDATE rows SET … WHERE id = 1
//! rows.delete(&2).await?;                             // DELETE FROM rows WHERE id = 2
//! assert_eq!(rows.fetch(&2).await?.origin, Origin::L1); // "not found", from the cache
//! # Ok(())
//! # }
//! ```
//!
//! # Invalidating a group: tags and `clear`
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
//!     .build()
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
//! # Reading the counters
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
//!     .build()
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
//!
//! # Read your writes across replicas: a session token
//!
//! A user saves a form on replica A; the next request lands on replica B, which may not have
//! heard of the write yet (its push is milliseconds away, longer under faults). A's
//! [`Table::put_versioned`] answers the write's [`Version`]; A hands it to the client (a cookie,
//! a header), and B reads with [`ReadOptions::at_least`]: it never answers a copy older than
//! that, whatever its L1 holds. Keep the token only as long as a push can be late (seconds): a
//! read with one is a Valkey read at least.
//!
//! ```
//! # use std::sync::{Arc, Mutex};
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> echostore::Result<()> {
//! use echostore::{ReadOptions, Store, Table, Version};
//!
//! // The database both replicas read (say, PostgreSQL).
//! let db = Arc::new(Mutex::new(String::from("draft 1")));
//! async fn replica(db: &Arc<Mutex<String>>) -> echostore::Result<Table<u64, String>> {
//!     let db = Arc::clone(db);
//!     let store = Store::builder().build().await?; // with `.valkey(url)` in production
//!     store
//!         .table::<u64, String>("forms")
//!         .loader(move |_id: u64| {
//!             let row = db.lock().unwrap().clone();
//!             async move { Ok::<_, std::io::Error>(row) }
//!         })
//!         .build()
//!         .await
//! }
//! let (a, b) = (replica(&db).await?, replica(&db).await?);
//! assert_eq!(*b.get(&1).await?, "draft 1"); // B caches draft 1
//!
//! // Replica A handles the form: the database first, then the cache; the token to the client.
//! *db.lock().unwrap() = "draft 2".to_owned();
//! let written = a.put_versioned(&1, "draft 2".to_owned()).await?;
//! let cookie = format!("echostore-v={}; Max-Age=10", written.version);
//!
//! // The next request lands on B with the cookie: B answers draft 2, not its cached draft 1.
//! let token = cookie.trim_start_matches("echostore-v=").split(';').next().unwrap_or("");
//! let read = match token.parse::<Version>() {
//!     Ok(v) => b.get_with(&1, ReadOptions::new().at_least(v)).await?,
//!     Err(_) => b.get(&1).await?, // no token, or a forged one: an ordinary read
//! };
//! assert_eq!(*read, "draft 2");
//! # Ok(())
//! # }
//! ```
//!
//! [`Table::put_versioned`]: crate::Table::put_versioned
//! [`Version`]: crate::Version
//! [`ReadOptions::at_least`]: crate::ReadOptions::at_least
//! [`Key`]: crate::Key
//! [`Value`]: crate::Value
//! [`Error::Source`]: crate::Error::Source
//! [`Error::source_as`]: crate::Error::source_as
//! [`Table::delete`]: crate::Table::delete
//! [`Table::put`]: crate::Table::put
//! [`Table::invalidate`]: crate::Table::invalidate
//! [`Table::invalidate_tag`]: crate::Table::invalidate_tag
//! [`Table::clear`]: crate::Table::clear
//! [`Table::stats`]: crate::Table::stats
//! [`TableBuilder::tags`]: crate::TableBuilder::tags
//! [`TableStats`]: crate::TableStats
