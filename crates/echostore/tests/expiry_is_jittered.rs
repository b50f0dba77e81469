//! Entries expire at `ttl ± ttl·jitter`, so a cohort filled together never expires together.

mod common;

use std::time::Duration;

use common::{BACKENDS, Source};
use echostore::{Origin, Store};

/// With no jitter, a value is an L1 hit until its ttl and a fresh load after it.
#[tokio::test(start_paused = true)]
async fn a_value_expires_at_its_ttl() {
    for backend in BACKENDS {
        let source = Source::open();
        let store = Store::builder().build().await.expect("store");
        let table = store
            .table::<u64, String>("ttl")
            .ttl(Duration::from_secs(10))
            .jitter(0.0)
            .l1_backend(backend)
            .loader(source.loader())
            .start()
            .await
            .expect("table");

        assert_eq!(table.fetch(&1).await.expect("load").origin, Origin::Loaded);
        tokio::time::advance(Duration::from_millis(9_999)).await;
        assert_eq!(table.fetch(&1).await.expect("hit").origin, Origin::L1, "{backend:?}");
        tokio::time::advance(Duration::from_millis(1)).await;
        let reloaded = table.fetch(&1).await.expect("reload");
        assert_eq!(reloaded.origin, Origin::Loaded, "{backend:?}: expired at the ttl");
        assert_eq!(*reloaded.value, "value-1-2");
        assert_eq!(source.calls(), 2);
    }
}

/// A cohort of 1,000 ids filled at once expires spread over `ttl ± 10%`, not at one instant.
#[tokio::test(start_paused = true)]
async fn a_cohort_expires_spread_over_the_jitter_window() {
    const COHORT: u64 = 1000;
    let source = Source::open();
    let store = Store::builder().build().await.expect("store");
    // Three identical cohorts filled at the same instant, one per checkpoint: a check reloads the
    // ids it finds expired, so each cohort is looked at once.
    let mut cohorts = Vec::new();
    for name in ["before", "during", "after"] {
        let table = store
            .table::<u64, String>(name)
            .ttl(Duration::from_secs(100))
            .jitter(0.1)
            .loader(source.loader())
            .start()
            .await
            .expect("table");
        for id in 0..COHORT {
            table.get(&id).await.expect("fill");
        }
        cohorts.push(table);
    }
    // How many of a cohort are still L1 hits.
    async fn fresh(table: &echostore::Table<u64, String>) -> u64 {
        let before = table.stats().l1_hits;
        for id in 0..COHORT {
            table.fetch(&id).await.expect("value");
        }
        table.stats().l1_hits - before
    }

    tokio::time::advance(Duration::from_millis(89_999)).await;
    assert_eq!(fresh(&cohorts[0]).await, COHORT, "nothing expires before ttl - 10%");

    tokio::time::advance(Duration::from_millis(10_001)).await;
    let still_fresh = fresh(&cohorts[1]).await;
    assert!(
        still_fresh > 0 && still_fresh < COHORT,
        "at the ttl the cohort is split, not expired together: {still_fresh} of {COHORT} fresh"
    );

    tokio::time::advance(Duration::from_millis(10_001)).await;
    assert_eq!(fresh(&cohorts[2]).await, 0, "everything expires by ttl + 10%");
}
