//! Shared helpers for the EchoStore benches: sizes that shrink under CI, and tables filled for a
//! bench to read.

use std::time::Duration;

use echostore::{L1Backend, Store, Table};

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

/// A multi-thread runtime with two workers, like the machine the figures are recorded on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A table of `keys` small values on `backend`, every key already in L1 (ttl one hour).
pub async fn filled_table(store: &Store, backend: L1Backend, keys: u64) -> Table<u64, u64> {
    let table = store
        .table::<u64, u64>(&format!("bench-{backend:?}-{keys}").to_lowercase())
        .ttl(Duration::from_secs(3600))
        .l1_backend(backend)
        .l1_capacity(keys as usize * 2)
        .loader(|id: u64| async move { Ok::<_, std::io::Error>(id.wrapping_mul(31)) })
        .start()
        .await
        .expect("bench table");
    for id in 0..keys {
        table.get(&id).await.expect("fill");
    }
    table
}

/// `n` ids drawn uniformly from `0..keys`, in a fixed order for the whole bench.
pub fn random_ids(keys: u64, n: usize) -> Vec<u64> {
    (0..n).map(|_| rand::random_range(0..keys)).collect()
}
