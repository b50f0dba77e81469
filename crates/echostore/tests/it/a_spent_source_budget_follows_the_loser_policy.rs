//! A source read over the table's `source_budget`: the budget is spent by a lease a crashed
//! process left on Valkey (planted here, as such a process leaves it), which ends by itself; a
//! read meanwhile serves its stale copy, fails fast, or waits, as the loser policy says.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use common::{raw, valkey};
use echostore::{Error, LoserPolicy, Origin, Store, Table, TableBuilder};
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

/// A table `name` of budget one loaded only by a batch loader, which answers each id with the
/// number of its call (counted in the returned cell); then `tune`.
async fn batch_table(
    store: &Store,
    name: &str,
    tune: impl FnOnce(TableBuilder<u64, u64>) -> TableBuilder<u64, u64>,
) -> (Table<u64, u64>, Arc<AtomicU64>) {
    let calls = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&calls);
    let builder = store.table::<u64, u64>(name).source_budget(1).batch_loader(
        move |ids: Vec<u64>| {
            let call = counted.fetch_add(1, SeqCst) + 1;
            let rows = ids.into_iter().map(move |id| (id, call));
            async move { Ok::<_, std::io::Error>(rows.collect::<std::collections::HashMap<_, _>>()) }
        },
    );
    (tune(builder).build().await.expect("table"), calls)
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

/// The budget never holds up a read that has a stale copy to serve, whatever the policy: a
/// `FailFast` or a `Default` table serves its copy at once too (before, the one failed with
/// `BudgetExhausted` and the other answered its placeholder, a copy at hand).
#[tokio::test]
async fn over_budget_a_stale_copy_is_served_at_once_whatever_the_policy() {
    let valkey = valkey();
    let store = common::builder_on(&valkey.url())
        .build()
        .await
        .expect("store");
    for (name, policy) in [
        ("stale-fast", LoserPolicy::FailFast),
        ("stale-default", LoserPolicy::Default(u64::MAX)),
    ] {
        let (table, _reads) = table(&store, name, policy).await;
        assert_eq!(*table.get(&1).await.expect("first load"), 1);
        common::until("the copy is past its freshness", || {
            table.peek_local(&1).is_none()
        })
        .await;
        plant_dead_lease(&valkey.url(), name).await;
        let served = table.fetch(&1).await.expect("the stale copy");
        assert_eq!((*served.value, served.origin), (1, Origin::Stale), "{name}");
        common::until_async("the load that waited for the lease landed", async || {
            table.get(&1).await.is_ok_and(|v| *v == 2)
        })
        .await;
        let s = table.stats();
        assert_eq!(
            (s.budget_waits, s.budget_exhausted),
            (1, 0),
            "{name}: {s:?}"
        );
    }
}

/// A read's own loser policy (`ReadOptions::losers`) is the one its load follows over budget
/// too: `FailFast` for this call fails at once on a table that polls (before, the call waited
/// for the lease with the table's policy and loaded).
#[tokio::test]
async fn over_budget_a_reads_own_policy_decides() {
    let valkey = valkey();
    let store = common::builder_on(&valkey.url())
        .build()
        .await
        .expect("store");
    let (table, reads) = table(&store, "own", LoserPolicy::DEFAULT_POLL).await;
    plant_dead_lease(&valkey.url(), "own").await;
    let options = echostore::ReadOptions::new().losers(LoserPolicy::FailFast);
    let refused = table.get_with(&1, options).await.expect_err("over budget");
    assert!(
        matches!(refused, Error::BudgetExhausted { waited } if waited.is_zero()),
        "{refused}"
    );
    assert_eq!(reads.load(SeqCst), 0, "the source was not read");
}

/// A reload over budget serves the copy it reloads at once, as a load does, and the reload
/// follows once the lease is had (before, the callers waited for the lease).
#[tokio::test]
async fn over_budget_a_reloads_copy_is_served_at_once() {
    let valkey = valkey();
    let store = common::builder_on(&valkey.url())
        .build()
        .await
        .expect("store");
    let (table, ..) = stale_over_budget(&valkey.url(), &store, "reloaded", |t| t).await;
    common::until_stats(
        &table,
        "the reload that waited for the lease renewed the copy",
        |s| s.reloads_unchanged == 1,
    )
    .await;
}

/// A reload the budget refuses (its wait for a lease runs out long before the crashed process's
/// lease ends) reads no source, counts none and reports no failed load: the callers had the copy
/// it would have reloaded.
#[tokio::test]
async fn over_budget_a_refused_reload_counts_no_read() {
    let valkey = valkey();
    let store = common::builder_on(&valkey.url())
        .build()
        .await
        .expect("store");
    let (table, asked, mut events) =
        stale_over_budget(&valkey.url(), &store, "refused-reload", |t| {
            t.losers(LoserPolicy::Poll {
                every: Duration::from_millis(10),
                up_to: Duration::from_millis(20),
            })
        })
        .await;
    common::settled(&table).await;
    assert_eq!(asked.load(SeqCst), 0, "the reloader was not called");
    let s = table.stats();
    assert_eq!((s.source_reads, s.budget_exhausted), (1, 1), "{s:?}");
    while let Ok(event) = events.try_recv() {
        assert_ne!(event.kind, echostore::EventKind::LoadFailed, "{event:?}");
    }
}

/// A table `name` of budget one on `store` (at `url`) whose reloader answers "unchanged" (its
/// calls counted in the returned cell), then `tune`: id 1 loaded, past its freshness, the
/// budget spent by a crashed process's lease, and a read of it served the stale copy at once;
/// with the table's events from just before that read.
async fn stale_over_budget(
    url: &str,
    store: &Store,
    name: &str,
    tune: impl FnOnce(TableBuilder<u64, u64>) -> TableBuilder<u64, u64>,
) -> (
    Table<u64, u64>,
    Arc<AtomicU64>,
    tokio::sync::broadcast::Receiver<echostore::Event<u64>>,
) {
    let asked = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&asked);
    let builder = store
        .table::<u64, u64>(name)
        .ttl(Duration::from_millis(100))
        .stale_for(Duration::from_secs(60))
        .source_budget(1)
        .loader(|_id: u64| async { Ok::<_, std::io::Error>(1) })
        .reloader(move |_id: u64, _old: Arc<u64>| {
            counted.fetch_add(1, SeqCst);
            async { Ok::<_, std::io::Error>(echostore::Reload::Unchanged) }
        });
    let table = tune(builder).build().await.expect("table");
    assert_eq!(*table.get(&1).await.expect("first load"), 1);
    common::until("the copy is past its freshness", || {
        table.peek_local(&1).is_none()
    })
    .await;
    plant_dead_lease(url, name).await;
    let events = table.events();
    let served = table.fetch(&1).await.expect("the stale copy");
    assert_eq!((*served.value, served.origin), (1, Origin::Stale));
    (table, asked, events)
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
    let s = table.stats();
    assert_eq!(
        (s.budget_exhausted, s.failed_fast),
        (1, 0),
        "a budget refusal, not a lock race lost: {s:?}"
    );
}

/// A batch whose wait for the budget runs out reads no source, and counts none: its ids get
/// `BudgetExhausted`, the batch loader is not called, and neither `batch_loads` nor
/// `source_reads` moves (before, both were counted before the wait).
#[tokio::test]
async fn over_budget_a_batch_refused_counts_no_read() {
    let valkey = valkey();
    let store = common::builder_on(&valkey.url())
        .build()
        .await
        .expect("store");
    // Waits for a lease far less than the crashed process's lease has left.
    let (table, calls) = batch_table(&store, "refused", |t| {
        t.losers(LoserPolicy::Poll {
            every: Duration::from_millis(10),
            up_to: Duration::from_millis(20),
        })
    })
    .await;
    plant_dead_lease(&valkey.url(), "refused").await;
    let mut events = table.events();
    for (id, answer) in table.fetch_many([1_u64, 2]).await {
        let refused = answer.expect_err("over budget");
        assert!(
            matches!(refused, Error::BudgetExhausted { .. }),
            "id {id}: {refused}"
        );
    }
    assert_eq!(calls.load(SeqCst), 0, "the batch loader was not called");
    let s = table.stats();
    assert_eq!(
        (s.batch_loads, s.batch_loaded_ids, s.source_reads),
        (0, 0, 0),
        "{s:?}"
    );
    let failed = std::iter::from_fn(|| events.try_recv().ok())
        .filter(|e| e.kind == echostore::EventKind::LoadFailed)
        .count();
    assert_eq!(failed, 0, "a refused batch reported failed loads");
}

#[tokio::test]
async fn over_budget_a_batchs_stale_copies_are_served_at_once() {
    let valkey = valkey();
    let store = common::builder_on(&valkey.url())
        .build()
        .await
        .expect("store");
    let (table, calls) = batch_table(&store, "batch", |t| {
        t.ttl(Duration::from_millis(100))
            .stale_for(Duration::from_secs(60))
    })
    .await;
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

/// A table `name` of budget one on its own store at `url`, with a long life (the put's copy stays
/// fresh) and the default loser policy; its per-id loader, or with `batch` its batch loader,
/// counts the ids it is asked for in `asked` and answers 0 for each.
async fn counted_table(
    url: &str,
    name: &str,
    batch: bool,
    asked: &Arc<AtomicU64>,
) -> Table<u64, u64> {
    let store = common::coherent_store(url, None).await;
    let builder = store
        .table::<u64, u64>(name)
        .ttl(Duration::from_secs(60))
        .source_budget(1);
    let asked = Arc::clone(asked);
    let table = if batch {
        builder
            .batch_loader(move |ids: Vec<u64>| {
                asked.fetch_add(ids.len() as u64, SeqCst);
                let rows = ids.into_iter().map(|id| (id, 0));
                async move { Ok::<_, std::io::Error>(rows.collect::<std::collections::HashMap<_, _>>()) }
            })
            .build()
            .await
    } else {
        builder
            .loader(move |_id: u64| {
                asked.fetch_add(1, SeqCst);
                async { Ok::<_, std::io::Error>(0) }
            })
            .build()
            .await
    };
    table.expect("table")
}

/// The race of the tests below: this process's read of ids 1 and 2 (with `batch`, one batch
/// read; else a get of id 1 alone) wins their locks and waits for a budget another process's
/// lease has spent; meanwhile another process puts id 1 (dropping its lock, its copy on
/// Valkey); then the lease ends. `batch_loader`: this process loads with a batch loader, else
/// with a per-id loader. Answers the read's answer for id 1 and how many ids this process's
/// loader was asked for.
async fn lock_dropped_while_queued(name: &str, batch: bool, batch_loader: bool) -> (u64, u64) {
    let valkey = valkey();
    let asked = Arc::new(AtomicU64::new(0));
    let here = counted_table(&valkey.url(), name, batch_loader, &asked).await;
    let there = counted_table(&valkey.url(), name, false, &Arc::new(AtomicU64::new(0))).await;
    let mut conn = raw(&valkey.url()).await;
    let _: u64 = conn
        .zadd(format!("budget:{name}"), "another-process", u64::MAX / 2)
        .await
        .expect("ZADD");
    let read = common::on_task(&here, move |here| async move {
        if batch {
            *here.get_many([1, 2]).await.expect("batch read")[&1]
        } else {
            *here.get(&1).await.expect("read")
        }
    });
    common::until_stats(&here, "the read waits for the budget", |s| {
        s.budget_waits >= 1
    })
    .await;
    there.put(&1, 7).await.expect("put");
    let _: u64 = conn
        .zrem(format!("budget:{name}"), "another-process")
        .await
        .expect("ZREM");
    (read.await.expect("task"), asked.load(SeqCst))
}

/// A winner whose lock a put dropped while it waited for the budget reads no source: the put's
/// copy is the id's value for this expiry, and the flight, contending again, takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_dropped_while_waiting_for_the_budget_reads_no_source() {
    assert_eq!(
        lock_dropped_while_queued("queued-one", false, false).await,
        (7, 0),
        "the put's value, and no source read"
    );
}

/// The same for a batch: the batch call leaves out the id whose lock was dropped, which
/// contends again and takes the put's copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_reads_no_source_for_an_id_whose_lock_was_dropped_while_it_waited() {
    assert_eq!(
        lock_dropped_while_queued("queued-many", true, true).await,
        (7, 1),
        "the put's value, and only id 2 read from the source"
    );
}

/// The same for a batch read of a table with only a per-id loader, whose calls each wait for a
/// lease of their own: the id whose lock was dropped reads no source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_without_a_batch_loader_reads_no_source_for_an_id_whose_lock_was_dropped() {
    assert_eq!(
        lock_dropped_while_queued("queued-each", true, false).await,
        (7, 1),
        "the put's value, and only id 2 read from the source"
    );
}

/// A table `name` of budget one, every id tagged `all`, on its own store at `url`; its loader
/// answers the number of source reads so far, counted in `reads`.
async fn tagged_table(url: &str, name: &str, reads: &Arc<AtomicU64>) -> Table<u64, u64> {
    let counted = Arc::clone(reads);
    common::coherent_store(url, None)
        .await
        .table::<u64, u64>(name)
        .ttl(Duration::from_secs(60))
        .source_budget(1)
        .tags(|_: &u64, _: &u64| ["all"])
        .loader(move |_id: u64| {
            let reads = Arc::clone(&counted);
            async move { Ok::<_, std::io::Error>(reads.fetch_add(1, SeqCst) + 1) }
        })
        .build()
        .await
        .expect("table")
}

/// A read that waited for a spent budget reflects every mark known when its load began: a tag
/// invalidated while it waited does not make its copy a miss, so another store takes the copy
/// from Valkey instead of reading the source again (a check run read the source twice so: the
/// copy was stamped with the generation from before the wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_waited_for_the_budget_is_stamped_when_it_loads() {
    stamped_after_the_wait("stamped-one", false).await;
}

/// The same for a batch read (a table with only a per-id loader, its calls each under a lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_waited_for_the_budget_is_stamped_when_it_loads() {
    stamped_after_the_wait("stamped-many", true).await;
}

/// Table `name`'s read of id 1 (with `batch`, a batch read of it alone) waits for a budget a
/// crashed process's lease spent; meanwhile the table's tag is invalidated; then another store
/// reads id 1, which must find the read's copy current on Valkey.
async fn stamped_after_the_wait(name: &str, batch: bool) {
    let valkey = valkey();
    let reads = Arc::new(AtomicU64::new(0));
    let here = tagged_table(&valkey.url(), name, &reads).await;
    plant_dead_lease(&valkey.url(), name).await;
    let read = common::on_task(&here, move |t| async move {
        match batch {
            true => *t.get_many([1]).await.expect("batch read")[&1],
            false => *t.get(&1).await.expect("read"),
        }
    });
    common::until_stats(&here, "the read waits for the budget", |s| {
        s.budget_waits >= 1
    })
    .await;
    here.invalidate_tag("all").await.expect("invalidate_tag");
    assert_eq!(read.await.expect("task"), 1, "the first source read");
    let there = tagged_table(&valkey.url(), name, &reads).await;
    let found = there.fetch(&1).await.expect("read");
    assert_eq!(
        (*found.value, found.origin),
        (1, Origin::L2),
        "the copy is current"
    );
    assert_eq!(reads.load(SeqCst), 1, "one source read");
}
