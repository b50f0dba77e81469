//! `.l1_capacity_bytes(n)` with `.l1_weigher(|k, v| bytes)`: L1 keeps at most `n` bytes of
//! entries as the weigher counts them, on both backends, where a count bound would keep them all;
//! and the two settings go together.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use common::{BACKENDS, Source};
use echostore::{Error, Store};

const VALUE_BYTES: usize = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_keeps_no_more_bytes_than_its_bound() {
    for backend in BACKENDS {
        let store = Store::builder().build().await.expect("store");
        let source = Source::open();
        let loader = source.loader();
        let table = store
            .table::<u64, String>("pages")
            .ttl(Duration::from_secs(60))
            .l1_backend(backend)
            .l1_capacity_bytes(10 * VALUE_BYTES as u64)
            .l1_weigher(|_id: &u64, page: &String| page.len() as u64)
            .loader(move |id: u64| {
                let load = loader(id);
                async move { load.await.map(|v| format!("{v:<VALUE_BYTES$}")) }
            })
            .build()
            .await
            .expect("table");
        for id in 0..100 {
            assert_eq!(table.get(&id).await.expect("load").len(), VALUE_BYTES);
        }
        let kept = table.stats().l1_len;
        assert!(
            (1..=10).contains(&kept),
            "{backend:?}: {kept} entries of {VALUE_BYTES} bytes under a 10-entry byte bound"
        );
        assert_eq!(source.calls(), 100);

        let unbounded = store
            .table::<u64, String>("counted")
            .l1_backend(backend)
            .loader(source.loader())
            .build()
            .await
            .expect("table");
        for id in 0..100 {
            unbounded.get(&id).await.expect("load");
        }
        assert_eq!(
            unbounded.stats().l1_len,
            100,
            "{backend:?}: a count bound keeps them all"
        );
    }
}

#[tokio::test]
async fn the_byte_bound_and_the_weigher_go_together() {
    let store = Store::builder().build().await.expect("store");
    let source = Source::open();
    let no_weigher = store
        .table::<u64, String>("a")
        .l1_capacity_bytes(1 << 20)
        .loader(source.loader())
        .build()
        .await;
    assert!(matches!(no_weigher, Err(Error::InvalidConfig(e)) if e.contains("l1_weigher")));
    let no_bound = store
        .table::<u64, String>("b")
        .l1_weigher(|_: &u64, v: &String| v.len() as u64)
        .loader(source.loader())
        .build()
        .await;
    assert!(matches!(no_bound, Err(Error::InvalidConfig(e)) if e.contains("l1_capacity_bytes")));
}

/// A table of `u64 -> String` on `backend` whose values are 1,000 bytes, bounded to `bytes` by
/// `weigher`.
async fn weighed(
    backend: echostore::L1Backend,
    bytes: u64,
    weigher: impl Fn(&u64, &String) -> u64 + Send + Sync + 'static,
) -> echostore::Table<u64, String> {
    Store::builder()
        .build()
        .await
        .expect("store")
        .table::<u64, String>("weighed")
        .ttl(Duration::from_secs(60))
        .l1_backend(backend)
        .l1_capacity_bytes(bytes)
        .l1_weigher(weigher)
        .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("{id:<VALUE_BYTES$}")) })
        .build()
        .await
        .expect("table")
}

/// The weigher is asked once per stored entry, as documented, on both backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_weigher_is_asked_once_per_entry() {
    for backend in BACKENDS {
        let asked = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&asked);
        let table = weighed(backend, 100 * VALUE_BYTES as u64, move |_, v| {
            counted.fetch_add(1, Relaxed);
            v.len() as u64
        })
        .await;
        for id in 0..500 {
            table.get(&id).await.expect("load");
        }
        assert_eq!(
            asked.load(Relaxed),
            500,
            "{backend:?}: 500 entries stored, 100 kept"
        );
    }
}

/// A weigher that panics now and then (its entry then weighs one byte: here every second time it
/// is asked about the same id) leaves L1 within its bound (at most 200 entries of 1,000 bytes, and
/// those that weigh one byte) and still holding a hot set that fits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weigher_that_panics_now_and_then_keeps_the_bound_and_the_hot_set() {
    for backend in BACKENDS {
        let asked = std::sync::Mutex::new(std::collections::HashMap::<u64, u64>::new());
        let panicked = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&panicked);
        let table = weighed(backend, 200 * VALUE_BYTES as u64, move |id, v| {
            let mut asked = asked.lock().unwrap_or_else(|p| p.into_inner());
            let times = asked.entry(*id).or_default();
            *times += 1;
            if (*times).is_multiple_of(2) {
                counted.fetch_add(1, Relaxed);
                panic!("a weigher that panics now and then");
            }
            v.len() as u64
        })
        .await;
        for id in 1_000..2_000 {
            table.get(&id).await.expect("load");
        }
        let kept = table.stats().l1_len;
        let light = panicked.load(Relaxed);
        assert!(
            kept <= 200 + light,
            "{backend:?}: {kept} entries under a bound of 200 of 1,000 bytes and {light} of one"
        );
        for _ in 0..3 {
            for id in 0..100 {
                table.get(&id).await.expect("read");
            }
        }
        let before = table.stats().l1_hits;
        for id in 0..100 {
            table.get(&id).await.expect("read");
        }
        let hits = table.stats().l1_hits - before;
        // quick_cache keeps all of it; moka admits by frequency, so most of it.
        let least = if backend == echostore::L1Backend::QuickCache {
            100
        } else {
            50
        };
        assert!(
            hits >= least,
            "{backend:?}: {hits} hits on a hot set of 100 in an L1 of 200"
        );
    }
}
