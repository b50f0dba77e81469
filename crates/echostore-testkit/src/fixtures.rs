//! What a measurement starts from: sizes and criterion times that shrink under `CI`, a
//! two-worker runtime, ids, a table whose every key is already in L1, and one whose every get is
//! an L2 hit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use echostore::{Key, L1Backend, Store, Table, Value};
use futures::StreamExt;

/// `true` when the `CI` environment variable is set: benches then run smaller and shorter.
pub fn under_ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// `full` normally, `ci` under CI.
pub fn size(full: usize, ci: usize) -> usize {
    if under_ci() { ci } else { full }
}

/// Criterion's measurement time: shorter under CI.
pub fn measurement_time() -> Duration {
    if under_ci() {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(3)
    }
}

/// Criterion's warm-up for the benches whose samples hold many herds: shorter under CI.
pub fn warm_up_time() -> Duration {
    if under_ci() {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(1)
    }
}

/// A multi-thread runtime with two workers, like the machine the figures are recorded on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A table named `name` on `backend` (no expiry within an hour) holding `value(id)` for every id
/// of `ids`, each already in L1: the fill gets every id once before it returns.
pub async fn filled_table<K: Key, V: Value>(
    store: &Store,
    name: &str,
    backend: L1Backend,
    ids: &[K],
    value: fn(K) -> V,
) -> Result<Table<K, V>, echostore::Error> {
    let table = store
        .table::<K, V>(name)
        .ttl(Duration::from_secs(3600))
        .l1_backend(backend)
        .l1_capacity(ids.len() * 2 + 1024)
        .loader(move |id: K| async move { Ok::<_, std::io::Error>(value(id)) })
        .build()
        .await?;
    let mut fills = futures::stream::iter(ids)
        .map(|id| table.get(id))
        .buffer_unordered(256);
    while let Some(filled) = fills.next().await {
        filled?;
    }
    drop(fills);
    Ok(table)
}

/// `n` ids drawn uniformly from `0..keys`, in a fixed order for the whole bench.
pub fn random_ids(keys: u64, n: usize) -> Vec<u64> {
    (0..n).map(|_| rand::random_range(0..keys)).collect()
}

/// Bytes of the values the L2 benches read; the raw `GET` reads the same envelopes.
pub const VALUE_BYTES: usize = 64;

/// The value of `id` in the L2 benches: `value of <id> vvv…`, [`VALUE_BYTES`] long.
pub fn value_of(id: u64) -> String {
    let mut value = format!("value of {id} ");
    value.extend(std::iter::repeat_n(
        'v',
        VALUE_BYTES.saturating_sub(value.len()),
    ));
    value
}

/// A table named `name` on the Valkey at `url` whose every `get` is an L1 miss and an L2 hit.
///
/// Its L1 holds one entry, so a bench that cycles through `keys` ids never asks for the one L1
/// kept. The values were `put` beforehand through another store (as another process would have
/// filled Valkey), so this table's own L1 never saw them. Its loader counts its calls in `loads`
/// and fails: a get that reached the source shows up there.
pub async fn l2_only_table(
    url: &str,
    name: &str,
    keys: u64,
    loads: Arc<AtomicU64>,
) -> Result<Table<u64, String>, echostore::Error> {
    let store = || Store::builder().valkey(url).require_valkey(true).build();
    let filler = store()
        .await?
        .table::<u64, String>(name)
        .ttl(Duration::from_secs(3600))
        .loader(|_id: u64| async move { Err::<String, _>(std::io::Error::other("never loaded")) })
        .build()
        .await?;
    for id in 0..keys {
        filler.put(&id, value_of(id)).await?;
    }
    store()
        .await?
        .table::<u64, String>(name)
        .ttl(Duration::from_secs(3600))
        .l1_capacity(1)
        .loader(move |_id: u64| {
            let loads = Arc::clone(&loads);
            async move {
                loads.fetch_add(1, Ordering::SeqCst);
                Err::<String, _>(std::io::Error::other("an L2 bench must never load"))
            }
        })
        .build()
        .await
}
