//! A storm of 1,000,000 distinct ids: L1 stays within its capacity, and the flights map and its
//! waiter lists return to empty. (Peak RSS of the same storm is recorded by the `storm` readout in
//! docs/benchmarks.md; here the promise is the bound, not the bytes.)

use crate::common;

use common::BACKENDS;
use echostore::Store;

const IDS: u64 = 1_000_000;
const CAPACITY: usize = 10_000;
const STREAMS: u64 = 16;

/// Both backends: after 1,000,000 misses on distinct ids, L1 holds at most its capacity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_and_the_flights_stay_bounded_under_a_million_distinct_ids() {
    for backend in BACKENDS {
        let store = Store::builder().build().await.expect("store");
        let table = store
            .table::<u64, u64>("storm")
            .l1_backend(backend)
            .l1_capacity(CAPACITY)
            .loader(|id: u64| async move { Ok::<_, std::io::Error>(id) })
            .build()
            .await
            .expect("table");
        let streams: Vec<_> = (0..STREAMS)
            .map(|s| {
                let table = table.clone();
                tokio::spawn(async move {
                    let mut peak = 0;
                    for id in (s..IDS).step_by(STREAMS as usize) {
                        assert_eq!(*table.get(&id).await.expect("value"), id);
                        if id % 4096 == s {
                            peak = peak.max(table.stats().l1_len);
                        }
                    }
                    peak
                })
            })
            .collect();
        let mut peak = 0;
        for stream in streams {
            peak = peak.max(stream.await.expect("stream"));
        }
        let s = table.stats();
        assert_eq!(
            s.source_reads, IDS,
            "{backend:?}: every distinct id read once"
        );
        assert!(peak <= CAPACITY as u64, "{backend:?}: L1 peaked at {peak}");
        assert!(
            s.l1_len <= CAPACITY as u64,
            "{backend:?}: L1 holds {}",
            s.l1_len
        );
        common::settled(&table).await;
    }
}
