//! Stores and tables for the tests, in-process or on a private real Valkey, and a lock held as
//! another process would hold it.

use std::time::Duration;

use echostore::{L1Backend, Origin, Store, Table, TableBuilder};
use redis::AsyncCommands;

use super::Source;

/// Both L1 backends, for suites that must hold over each.
#[cfg(feature = "moka")]
pub const BACKENDS: [L1Backend; 2] = [L1Backend::QuickCache, L1Backend::Moka];
#[cfg(not(feature = "moka"))]
pub const BACKENDS: [L1Backend; 1] = [L1Backend::QuickCache];

/// DESIGN.md's example id; [`set_table`] stores it under the two keys below.
pub const SET_ID: &str = "EMS0ODMggk1d5N";
/// The value key of [`SET_ID`] in table `set`.
pub const SET_VALUE: &str = "set:{EMS0ODMggk1d5N}";
/// The regeneration lock of [`SET_ID`] in table `set`.
pub const SET_LOCK: &str = "lock:set:{EMS0ODMggk1d5N}";

/// A store builder on `url`: a server's URL, or a `cluster:` one (see `target.rs`).
pub fn builder_on(url: &str) -> echostore::StoreBuilder {
    match super::target::cluster_seeds(url) {
        Some(seeds) => Store::builder().valkey_cluster(seeds),
        None => Store::builder().valkey(url),
    }
}

/// A store on `url` (namespaced when `namespace` is given) whose coherence is up: its tracking
/// connection is subscribed, so other stores' writes reach its L1 from now on.
pub async fn coherent_store(url: &str, namespace: Option<&str>) -> Store {
    let mut builder = builder_on(url).require_valkey(true);
    if let Some(namespace) = namespace {
        builder = builder.namespace(namespace);
    }
    let store = builder.build().await.expect("store");
    super::until("tracking is up", || store.is_coherent()).await;
    store
}

/// A store on `url`, once its coherence is up. A store serves before its tracking connection
/// has subscribed, and the subscription then drops what the store holds and overtakes its
/// flights (what they read may have changed unseen): a herd a test starts meanwhile would meet a
/// second flight of its id, which loses the lock to the first (one source read still, but not
/// the one flight the test counts on).
pub async fn store_on(url: &str) -> Store {
    coherent_store(url, None).await
}

/// A store on `url` that waits `timeout` for each reply: a long one makes a hold at a proxy a
/// delay, not an outage.
pub async fn patient_store(url: &str, timeout: Duration) -> Store {
    builder_on(url)
        .require_valkey(true)
        .valkey_timeout(timeout)
        .build()
        .await
        .expect("store")
}

/// A `u64 -> String` table named `name` on `store`, reading `source`, with `tune`'s settings
/// (`|t| t` for the defaults; `tune` may also replace the loader).
pub async fn table_on(
    store: &Store,
    name: &str,
    source: &Source,
    tune: impl FnOnce(TableBuilder<u64, String>) -> TableBuilder<u64, String>,
) -> Table<u64, String> {
    tune(store.table::<u64, String>(name).loader(source.loader()))
        .build()
        .await
        .expect("table")
}

/// [`table_on`] a store of its own without Valkey.
pub async fn local_table(
    name: &str,
    source: &Source,
    tune: impl FnOnce(TableBuilder<u64, String>) -> TableBuilder<u64, String>,
) -> Table<u64, String> {
    let store = Store::builder().build().await.expect("store");
    table_on(&store, name, source, tune).await
}

/// [`table_on`] a [`coherent_store`] of its own on the Valkey at `url`.
pub async fn coherent_table(
    url: &str,
    name: &str,
    source: &Source,
    tune: impl FnOnce(TableBuilder<u64, String>) -> TableBuilder<u64, String>,
) -> Table<u64, String> {
    table_on(&coherent_store(url, None).await, name, source, tune).await
}

/// [`table_on`] a store of its own on the Valkey at `url`.
pub async fn valkey_table(
    url: &str,
    name: &str,
    source: &Source,
    tune: impl FnOnce(TableBuilder<u64, String>) -> TableBuilder<u64, String>,
) -> Table<u64, String> {
    table_on(&store_on(url).await, name, source, tune).await
}

/// DESIGN.md's example table `set` (`String -> String`) on a store of its own on `url`: ttl
/// 60 s, stale for 300 s, no jitter, every id read from `source` as its id 1; then `tune`.
pub async fn set_table(
    url: &str,
    source: &Source,
    tune: impl FnOnce(TableBuilder<String, String>) -> TableBuilder<String, String>,
) -> Table<String, String> {
    let loader = source.loader();
    let builder = store_on(url)
        .await
        .table::<String, String>("set")
        .ttl(Duration::from_secs(60))
        .stale_for(Duration::from_secs(300))
        .jitter(0.0)
        .loader(move |_id: String| loader(1));
    tune(builder).build().await.expect("table")
}

/// Whether the envelope under `key` is past its logical life: its `fresh_until` (unix ms, bytes
/// 1..9) checked against Valkey's clock, as EchoStore checks it, by more than EchoStore's
/// estimate of that clock can be off (a few ms: docs/consistency.md, rule 7). A missing key is
/// not stale.
pub async fn stale_on_valkey(conn: &mut super::RawConn, key: &str) -> bool {
    /// More than the estimate's error: half a round trip and a millisecond of rounding.
    const PAST_BY_MS: u64 = 50;
    let Some(bytes) = conn.get::<_, Option<Vec<u8>>>(key).await.expect("GET") else {
        return false;
    };
    let header = bytes.get(1..9).expect("an envelope header");
    let fresh_until_ms = u64::from_le_bytes(header.try_into().expect("8 bytes"));
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.expect("TIME");
    secs * 1000 + micros / 1000 >= fresh_until_ms + PAST_BY_MS
}

/// Takes `lock` with `token` as another process would (`SET … NX PX 30000`, longer than any
/// test waits); panics unless it was free.
pub async fn hold_lock(conn: &mut super::RawConn, lock: &str, token: &str) {
    let set: Option<String> = redis::cmd("SET")
        .arg(lock)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(conn)
        .await
        .expect("SET NX PX");
    assert_eq!(set.as_deref(), Some("OK"), "the test holds {lock}");
}

/// The table `coh` on `store`, whose L1 keeps values a minute: only coherence can make it drop
/// one sooner. Its ids are spread over four owners, so what coherence does (a push, a flush)
/// must reach each, and a flush counts once for the table.
pub async fn long_lived(store: &Store, source: &Source) -> Table<u64, String> {
    table_on(store, "coh", source, |t| {
        t.ttl(Duration::from_secs(60)).jitter(0.0).shards(4)
    })
    .await
}

/// Loads id 1 into `table`'s L1, checks that the next read is an L1 hit, and returns its value.
pub async fn warm(table: &Table<u64, String>) -> String {
    table.get(&1).await.expect("loaded");
    let hit = table.fetch(&1).await.expect("hit");
    assert_eq!(hit.origin, Origin::L1);
    hit.value.to_string()
}
