//! `.l1_capacity_bytes(n)` with `.l1_weigher(|k, v| bytes)`: L1 keeps at most `n` bytes of
//! entries as the weigher counts them, on both backends, where a count bound would keep them all;
//! and the two settings go together.

use crate::common;

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
            .start()
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
            .start()
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
        .start()
        .await;
    assert!(matches!(no_weigher, Err(Error::InvalidConfig(e)) if e.contains("l1_weigher")));
    let no_bound = store
        .table::<u64, String>("b")
        .l1_weigher(|_: &u64, v: &String| v.len() as u64)
        .loader(source.loader())
        .start()
        .await;
    assert!(matches!(no_bound, Err(Error::InvalidConfig(e)) if e.contains("l1_capacity_bytes")));
}
