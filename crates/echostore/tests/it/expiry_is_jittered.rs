//! Entries expire at `ttl ± ttl·jitter`, never before, so a cohort filled together never expires
//! together. L1 keeps real (monotonic) time and the ttl passing is the behaviour under test, so
//! these tests let real time pass: they wait, with a deadline, on the condition "the entry
//! reloaded", and assert only what the design promises (never early; spread). Early refresh is
//! off in them: a read in an entry's last stretch could otherwise rebuild it before it expires
//! (docs/early-refresh.md), a source read these tests do not count and an expiry they never see.

use crate::common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{BACKENDS, Source, local_table, settled, until_async};
use echostore::Origin;

/// With no jitter, a value is an L1 hit until its ttl, and reloads after it — never before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_expires_at_its_ttl_and_never_before() {
    let ttl = Duration::from_millis(500);
    for backend in BACKENDS {
        let source = Source::open();
        let table = local_table("ttl", &source, |t| {
            t.ttl(ttl)
                .jitter(0.0)
                .early_refresh(0.0)
                .l1_backend(backend)
        })
        .await;

        let before = Instant::now();
        assert_eq!(table.fetch(&1).await.expect("load").origin, Origin::Loaded);
        // Gets are L1 hits until the ttl has passed: the first that is not must end after it.
        // (Not "the next get is a hit": on a loaded machine the next get may itself come after
        // the ttl and rightly reload. Without L1, the first get here would reload at once.)
        let mut hits = 0;
        let mut reloaded = None;
        until_async("the value reloaded", async || {
            let f = table.fetch(&1).await.expect("value");
            if f.origin == Origin::L1 {
                hits += 1;
                return false;
            }
            reloaded = Some(f);
            true
        })
        .await;
        assert!(
            before.elapsed() >= ttl,
            "{backend:?}: expired early, after {hits} L1 hits"
        );
        let reloaded = reloaded.expect("the wait ended on a reload");
        assert_eq!(
            (reloaded.origin, reloaded.value.as_str()),
            (Origin::Loaded, "value-1-2")
        );
        assert_eq!(source.calls(), 2);
        settled(&table).await;
    }
}

/// A cohort of 1,000 ids filled at once expires spread over `ttl ± 10%`, none before `ttl - 10%`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cohort_expires_spread_over_the_jitter_window() {
    const COHORT: u64 = 1000;
    let ttl = Duration::from_secs(1);
    let source = Source::open();
    let table = local_table("jitter", &source, |t| {
        t.ttl(ttl).jitter(0.1).early_refresh(0.0)
    })
    .await;
    let before = Instant::now();
    for id in 0..COHORT {
        table.get(&id).await.expect("fill");
    }

    // When each id was first seen reloaded, measured from before the cohort was filled.
    let mut expired: HashMap<u64, Duration> = HashMap::new();
    until_async("every id of the cohort reloaded", async || {
        for id in 0..COHORT {
            if expired.contains_key(&id) {
                continue;
            }
            if table.fetch(&id).await.expect("value").origin != Origin::L1 {
                expired.insert(id, before.elapsed());
            }
        }
        expired.len() == COHORT as usize
    })
    .await;
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
    assert_eq!(source.calls(), 2 * COHORT as usize, "each id read twice");
    settled(&table).await;
}
