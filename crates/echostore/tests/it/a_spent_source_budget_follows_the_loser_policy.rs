//! A source read over the table's `source_budget`: the budget is spent by a lease a crashed
//! process left on Valkey (planted here, as such a process leaves it), which ends by itself; a
//! read meanwhile serves its stale copy, fails fast, or waits, as the loser policy says.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use common::{raw, valkey};
use echostore::{Error, LoserPolicy, Origin, Store, Table};
use redis::AsyncCommands;

/// How long the crashed process's lease has left when planted.
const DEAD_LEASE: Duration = Duration::from_millis(300);

/// Spends the budget of table `name` (a budget of one) with the lease of a process that crashed:
/// it ends [`DEAD_LEASE`] from now on Valkey's clock, and nobody renews it.
async fn plant_dead_lease(url: &str, name: &str) {
    let mut conn = raw(url).await;
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut conn)
        .await
        .expect("TIME");
    let ends = secs * 1000 + micros / 1000 + DEAD_LEASE.as_millis() as u64;
    let _: u64 = conn
        .zadd(format!("budget:{name}"), "a-crashed-process", ends)
        .await
        .expect("ZADD");
}

/// A table of budget one whose loader answers the number of source reads so far.
async fn table(
    store: &Store,
    name: &str,
    policy: LoserPolicy<u64>,
) -> (Table<u64, u64>, Arc<AtomicU64>) {
    let reads = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&reads);
    let table = store
        .table::<u64, u64>(name)
        .ttl(Duration::from_millis(100))
        .stale_for(Duration::from_secs(60))
        .source_budget(1)
        .losers(policy)
        .loader(move |_id: u64| {
            let reads = Arc::clone(&counted);
            async move { Ok::<_, std::io::Error>(reads.fetch_add(1, SeqCst) + 1) }
        })
        .build()
        .await
        .expect("table");
    (table, reads)
}

#[tokio::test]
async fn a_crashed_processs_lease_ends_by_itself() {
    let valkey = valkey();
    let store = common::builder_on(&valkey.url())
        .build()
        .await
        .expect("store");
    let (table, reads) = table(&store, "crashed", LoserPolicy::DEFAULT_POLL).await;
    plant_dead_lease(&valkey.url(), "crashed").await;
    assert_eq!(
        *table.get(&1).await.expect("a load once the lease ended"),
        1
    );
    let stats = table.stats();
    assert_eq!((stats.budget_waits, stats.budget_exhausted), (1, 0));
    assert_eq!(reads.load(SeqCst), 1);
}

#[tokio::test]
async fn over_budget_a_stale_copy_is_served_at_once_and_the_load_follows() {
    let valkey = valkey();
    let store = common::builder_on(&valkey.url())
        .build()
        .await
        .expect("store");
    let (table, _reads) = table(&store, "stale", LoserPolicy::DEFAULT_POLL).await;
    assert_eq!(*table.get(&1).await.expect("first load"), 1);
    common::until("the copy is past its freshness", || {
        table.peek_local(&1).is_none()
    })
    .await;
    plant_dead_lease(&valkey.url(), "stale").await;
    let served = table.fetch(&1).await.expect("the stale copy");
    assert_eq!((*served.value, served.origin), (1, Origin::Stale));
    common::until_async("the load that waited for the lease landed", async || {
        table.get(&1).await.is_ok_and(|v| *v == 2)
    })
    .await;
    assert_eq!(table.stats().budget_waits, 1);
}

#[tokio::test]
async fn over_budget_a_fail_fast_table_fails_at_once() {
    let valkey = valkey();
    let store = common::builder_on(&valkey.url())
        .build()
        .await
        .expect("store");
    let (table, reads) = table(&store, "fast", LoserPolicy::FailFast).await;
    plant_dead_lease(&valkey.url(), "fast").await;
    let refused = table.get(&1).await.expect_err("over budget");
    assert!(
        matches!(refused, Error::BudgetExhausted { waited } if waited.is_zero()),
        "{refused}"
    );
    assert_eq!(reads.load(SeqCst), 0, "the source was not read");
    assert_eq!(table.stats().budget_exhausted, 1);
}

#[tokio::test]
async fn over_budget_a_batchs_stale_copies_are_served_at_once() {
    let valkey = valkey();
    let store = common::builder_on(&valkey.url())
        .build()
        .await
        .expect("store");
    let calls = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&calls);
    let table = store
        .table::<u64, u64>("batch")
        .ttl(Duration::from_millis(100))
        .stale_for(Duration::from_secs(60))
        .source_budget(1)
        .batch_loader(move |ids: Vec<u64>| {
            let call = counted.fetch_add(1, SeqCst) + 1;
            async move {
                Ok::<_, std::io::Error>(
                    ids.into_iter()
                        .map(|id| (id, call))
                        .collect::<std::collections::HashMap<_, _>>(),
                )
            }
        })
        .build()
        .await
        .expect("table");
    let ids = [1, 2];
    assert_eq!(table.get_many(&ids).await.expect("first load").len(), 2);
    common::until("the copies are past their freshness", || {
        ids.iter().all(|id| table.peek_local(id).is_none())
    })
    .await;
    plant_dead_lease(&valkey.url(), "batch").await;
    for (id, answer) in table.fetch_many(&ids).await {
        let f = answer.expect("the stale copy");
        assert_eq!((*f.value, f.origin), (1, Origin::Stale), "id {id}");
    }
    common::until_async("the batch that waited for the lease landed", async || {
        table
            .get_many(&ids)
            .await
            .is_ok_and(|m| m.values().all(|v| **v == 2))
    })
    .await;
    assert_eq!(calls.load(SeqCst), 2, "one call per batch: one lease");
}
