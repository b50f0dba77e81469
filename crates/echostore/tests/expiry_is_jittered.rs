//! Entries expire at `ttl ± ttl·jitter`, never before, so a cohort filled together never expires
//! together. L1 keeps real (monotonic) time, so these tests let real time pass: they wait on the
//! condition "the entry reloaded", and assert only what the design promises (never early; spread).

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{BACKENDS, Source};
use echostore::{Origin, Store};

/// With no jitter, a value is an L1 hit until its ttl, and reloads after it — never before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_expires_at_its_ttl_and_never_before() {
    let ttl = Duration::from_millis(500);
    for backend in BACKENDS {
        let source = Source::open();
        let store = Store::builder().build().await.expect("store");
        let table = store
            .table::<u64, String>("ttl")
            .ttl(ttl)
            .jitter(0.0)
            .l1_backend(backend)
            .loader(source.loader())
            .start()
            .await
            .expect("table");

        let before = Instant::now();
        assert_eq!(table.fetch(&1).await.expect("load").origin, Origin::Loaded);
        // Gets are L1 hits until the ttl has passed: the first that is not must end after it.
        // (Not "the next get is a hit": on a loaded machine the next get may itself come after
        // the ttl and rightly reload. Without L1, the first get here would reload at once.)
        let mut hits = 0;
        let reloaded = loop {
            let f = table.fetch(&1).await.expect("value");
            if f.origin != Origin::L1 {
                break f;
            }
            hits += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        assert!(
            before.elapsed() >= ttl,
            "{backend:?}: expired early, after {hits} L1 hits"
        );
        assert_eq!(
            (reloaded.origin, reloaded.value.as_str()),
            (Origin::Loaded, "value-1-2")
        );
        assert_eq!(source.calls(), 2);
    }
}

/// A cohort of 1,000 ids filled at once expires spread over `ttl ± 10%`, none before `ttl - 10%`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cohort_expires_spread_over_the_jitter_window() {
    const COHORT: u64 = 1000;
    let ttl = Duration::from_secs(1);
    let source = Source::open();
    let store = Store::builder().build().await.expect("store");
    let table = store
        .table::<u64, String>("jitter")
        .ttl(ttl)
        .jitter(0.1)
        .loader(source.loader())
        .start()
        .await
        .expect("table");
    let before = Instant::now();
    for id in 0..COHORT {
        table.get(&id).await.expect("fill");
    }

    // When each id was first seen reloaded, measured from before the cohort was filled.
    let mut expired: HashMap<u64, Duration> = HashMap::new();
    while expired.len() < COHORT as usize {
        for id in 0..COHORT {
            if expired.contains_key(&id) {
                continue;
            }
            if table.fetch(&id).await.expect("value").origin != Origin::L1 {
                expired.insert(id, before.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let earliest = expired.values().min().copied().unwrap_or_default();
    let latest = expired.values().max().copied().unwrap_or_default();
    assert!(
        earliest >= ttl.mul_f64(0.9),
        "an id expired before ttl - 10%: {earliest:?}"
    );
    assert!(
        latest - earliest >= ttl.mul_f64(0.1),
        "the cohort expired together: {earliest:?}..{latest:?}"
    );
}
