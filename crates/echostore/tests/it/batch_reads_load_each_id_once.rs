//! `get_many` and `fetch_many` against a real Valkey (or a cluster, with
//! `ECHOSTORE_TEST_TARGET=cluster`): one batch loader call for a cold batch, overlapping batches
//! in several stores reading each id once, a `get` joining a batch and a batch joining a `get`,
//! absent ids left out, a batch loader error reaching exactly the ids it was asked for, and the
//! per-id loader standing in when there is no batch loader.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{
    Source, on_task, round_trips_of, settled, spawn_fetch, store_on, table_on, until, until_stats,
    valkey,
};
use echostore::{LoserPolicy, Origin, Store, Table, TableBuilder};
use tokio::sync::watch;

/// A batch source: it records every call's ids, can hold calls at a gate, leaves out the ids
/// over `exists_up_to`, and fails while `failing` is set. `value(id)` is `"row <id>"`.
#[derive(Clone)]
struct Rows {
    calls: Arc<Mutex<Vec<Vec<u64>>>>,
    gate: watch::Sender<bool>,
    exists_up_to: u64,
    failing: Arc<std::sync::atomic::AtomicBool>,
}

impl Rows {
    fn new(open: bool) -> Rows {
        Rows {
            calls: Arc::default(),
            gate: watch::channel(open).0,
            exists_up_to: u64::MAX,
            failing: Arc::default(),
        }
    }

    fn calls(&self) -> Vec<Vec<u64>> {
        self.calls.lock().expect("calls").clone()
    }

    /// How many times each id was read from the source, over every call.
    fn reads_per_id(&self) -> BTreeMap<u64, usize> {
        let mut per_id = BTreeMap::new();
        for call in self.calls() {
            for id in call {
                *per_id.entry(id).or_default() += 1;
            }
        }
        per_id
    }

    /// The table `rows` on `store` with this source as its batch loader.
    async fn table(&self, store: &Store) -> Table<u64, String> {
        self.tuned(store, |t| t).await
    }

    /// [`Rows::table`], then `tune`.
    async fn tuned(
        &self,
        store: &Store,
        tune: impl FnOnce(TableBuilder<u64, String>) -> TableBuilder<u64, String>,
    ) -> Table<u64, String> {
        let rows = self.clone();
        let builder = store
            .table::<u64, String>("rows")
            .ttl(Duration::from_secs(60))
            .batch_loader(move |ids: Vec<u64>| {
                let rows = rows.clone();
                async move {
                    let mut sorted = ids.clone();
                    sorted.sort_unstable();
                    rows.calls.lock().expect("calls").push(sorted);
                    let mut open = rows.gate.subscribe();
                    let _ = open.wait_for(|open| *open).await;
                    if rows.failing.load(std::sync::atomic::Ordering::SeqCst) {
                        return Err(std::io::Error::other("the database is down"));
                    }
                    Ok(ids
                        .into_iter()
                        .filter(|&id| id <= rows.exists_up_to)
                        .map(|id| (id, format!("row {id}")))
                        .collect::<HashMap<_, _>>())
                }
            });
        tune(builder).build().await.expect("table")
    }
}

/// A cold batch of 100 ids: one batch loader call with all of them; every value answered and
/// written to Valkey, where a second store reads them all without the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_batch_is_one_batch_loader_call() {
    let valkey = valkey();
    let rows = Rows::new(true);
    let table = rows.table(&store_on(&valkey.url()).await).await;
    let ids: Vec<u64> = (1..=100).collect();
    let found = table.get_many(&ids).await.expect("a batch");
    assert_eq!(found.len(), 100);
    assert_eq!(*found[&42], "row 42");
    assert_eq!(rows.calls(), vec![ids.clone()], "one call, every id");
    let s = table.stats();
    assert_eq!(
        (s.batch_loads, s.batch_loaded_ids, s.source_reads),
        (1, 100, 100)
    );
    assert_eq!(
        (s.lock_won, s.released, s.release_skipped),
        (100, 100, 0),
        "each won lock released by its write, counted as a single fill counts it"
    );

    let other = rows.table(&store_on(&valkey.url()).await).await;
    let again = other.fetch_many(&ids).await;
    assert!(
        again
            .iter()
            .all(|(_, f)| matches!(f, Ok(f) if f.origin == Origin::L2)),
        "every id from Valkey"
    );
    let hits = other.fetch_many(&ids).await;
    assert!(
        hits.iter()
            .all(|(_, f)| matches!(f, Ok(f) if f.origin == Origin::L1)),
        "then every id from L1"
    );
    assert_eq!(rows.calls().len(), 1, "no more source calls");
}

/// Four stores, four overlapping batches at once, the source held until all have reached it:
/// each id is read from the source once across the stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_batches_in_several_stores_read_each_id_once() {
    let valkey = valkey();
    let rows = Rows::new(false);
    let mut tables = Vec::new();
    for _ in 0..4 {
        tables.push(rows.table(&store_on(&valkey.url()).await).await);
    }
    let batches: [Vec<u64>; 4] = [
        (1..=30).collect(),
        (10..=40).collect(),
        (20..=50).collect(),
        (1..=50).rev().collect(),
    ];
    let tasks: Vec<_> = tables
        .iter()
        .zip(batches.clone())
        .map(|(t, ids)| on_task(t, |t| async move { t.get_many(&ids).await }))
        .collect();
    // Every store has either called the source or is waiting on another's lock.
    common::until("the first batch reached the source", || {
        !rows.calls().is_empty()
    })
    .await;
    rows.gate.send_replace(true);
    for (task, ids) in tasks.into_iter().zip(&batches) {
        let found = task.await.expect("task").expect("a batch");
        assert_eq!(found.len(), ids.len());
        assert!(ids.iter().all(|id| *found[id] == format!("row {id}")));
    }
    let per_id = rows.reads_per_id();
    assert_eq!(per_id.len(), 50, "every id was read");
    assert!(
        per_id.values().all(|&n| n == 1),
        "each id read once: {per_id:?}"
    );
    for t in &tables {
        settled(t).await;
    }
}

/// A `get` of an id a batch is loading joins the batch's flight; a batch of ids one of which a
/// `get` is loading joins that flight and loads only the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_joins_a_batch_and_a_batch_joins_a_get() {
    let valkey = valkey();
    let rows = Rows::new(false);
    let table = rows.table(&store_on(&valkey.url()).await).await;
    let batch = on_task(&table, |t| async move { t.get_many([1, 2, 3]).await });
    common::until("the batch reached the source", || rows.calls().len() == 1).await;
    let single = on_task(&table, |t| async move { t.get(&2).await });
    until_stats(&table, "the get joined the batch", |s| s.coalesced >= 1).await;
    rows.gate.send_replace(true);
    assert_eq!(batch.await.expect("task").expect("batch").len(), 3);
    assert_eq!(*single.await.expect("task").expect("get"), "row 2");
    assert_eq!(
        rows.calls(),
        vec![vec![1, 2, 3]],
        "one source call for both"
    );

    // Now a get first (a batch of one, held), then a batch over its id.
    rows.gate.send_replace(false);
    let single = on_task(&table, |t| async move { t.get(&5).await });
    common::until("the get reached the source", || rows.calls().len() == 2).await;
    let coalesced = table.stats().coalesced;
    let batch = on_task(&table, |t| async move { t.fetch_many([4, 5, 6]).await });
    common::until("the batch reached the source", || rows.calls().len() == 3).await;
    assert_eq!(
        table.stats().coalesced,
        coalesced + 1,
        "id 5 joined the get"
    );
    rows.gate.send_replace(true);
    let answers = batch.await.expect("task");
    assert_eq!(answers.len(), 3);
    assert_eq!(*single.await.expect("task").expect("get"), "row 5");
    assert_eq!(
        rows.calls()[1..],
        [vec![5], vec![4, 6]],
        "5 was loaded once"
    );
    settled(&table).await;
}

/// Ids the batch loader leaves out are absent (`get`: `Error::Absent`), cached nowhere; a
/// failing batch loader answers its own ids with its error while ids from L1 are unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absent_ids_are_left_out_and_an_error_reaches_only_the_loaded_ids() {
    let valkey = valkey();
    let mut rows = Rows::new(true);
    rows.exists_up_to = 10;
    let table = rows.table(&store_on(&valkey.url()).await).await;
    let found = table.get_many(5..=15).await.expect("a batch");
    let mut keys: Vec<u64> = found.keys().copied().collect();
    keys.sort_unstable();
    assert_eq!(keys, (5..=10).collect::<Vec<_>>(), "11..=15 are absent");
    let fetched: Vec<u64> = table
        .fetch_many(5..=15)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(fetched.len(), 6, "fetch_many leaves them out too");
    assert!(table.get(&12).await.expect_err("absent").is_absent());
    assert_eq!(table.stats().errors, 0, "absent is an answer, not a fault");

    rows.failing
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let answers = table.fetch_many([5, 6, 20, 21]).await;
    let by_id: HashMap<u64, _> = answers.into_iter().collect();
    assert_eq!(by_id[&5].as_ref().expect("L1").origin, Origin::L1);
    assert_eq!(by_id[&6].as_ref().expect("L1").origin, Origin::L1);
    for id in [20, 21] {
        let e = by_id[&id].as_ref().expect_err("the loader's error");
        assert!(e.source_as::<std::io::Error>().is_some(), "{e}");
    }
    assert_eq!(
        rows.calls().last(),
        Some(&vec![20, 21]),
        "asked for the misses only"
    );
    assert!(
        table.get_many([5, 20]).await.is_err(),
        "get_many answers the first error"
    );
}

/// Without a batch loader, a batch's misses are loaded by the per-id loader, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_batch_loader_each_miss_is_loaded_by_the_loader() {
    let valkey = valkey();
    let source = Source::open();
    let table = table_on(&store_on(&valkey.url()).await, "single", &source, |t| t).await;
    let found = table.get_many(1..=40).await.expect("a batch");
    assert_eq!(found.len(), 40);
    assert_eq!(source.calls(), 40, "one loader call per id");
    assert_eq!(table.stats().batch_loads, 0);
    let again = table.fetch_many(1..=40).await;
    assert!(
        again
            .iter()
            .all(|(_, f)| matches!(f, Ok(f) if f.origin == Origin::L1))
    );
    assert_eq!(source.calls(), 40);
}

/// A cold batch of 100 ids on one server costs three round trips: one pipeline of bounded reads
/// (a `GETRANGE` per id), one acquire-many and one write-many (each script one `EVALSHA`), and
/// one batch loader call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_batch_costs_three_round_trips() {
    let valkey = embedded_valkey::EmbeddedValkey::start().expect("a valkey-server");
    let rows = Rows::new(true);
    let store = Store::builder()
        .valkey(valkey.url())
        .coherence(false) // no tracking connection and its health pings in the count
        .require_valkey(true)
        .build()
        .await
        .expect("store");
    let table = rows.table(&store).await;
    table
        .get_many(1000..1010)
        .await
        .expect("warm: the scripts are loaded");
    let commands = round_trips_of(&valkey.url(), async {
        let found = table.get_many(1..=100).await.expect("a batch");
        assert_eq!(found.len(), 100);
    })
    .await;
    let reads = ["GETRANGE"; 100];
    assert_eq!(commands[..100], reads, "the reads: {commands:?}");
    assert_eq!(commands[100..], ["EVALSHA", "EVALSHA"], "{commands:?}");
    assert_eq!(
        rows.calls().len(),
        2,
        "one batch loader call for the cold batch"
    );
}

/// A `put` of an id while a batch is loading it drops the id's lock: the batch's write for that id
/// is refused (fenced), so Valkey and L1 keep the put's value, and the batch answers that value,
/// which every later read finds (answering what it loaded, when newer than the put's, would make
/// those reads go back); the batch's other ids are written as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_during_a_batch_load_fences_that_ids_write() {
    let valkey = valkey();
    let rows = Rows::new(false);
    let table = rows.table(&store_on(&valkey.url()).await).await;
    let writer = rows.table(&store_on(&valkey.url()).await).await;
    let batch = on_task(&table, |t| async move { t.get_many([1, 2]).await });
    common::until("the batch reached the source", || rows.calls().len() == 1).await;
    writer
        .put(&2, "put while loading".into())
        .await
        .expect("put");
    rows.gate.send_replace(true);
    let found = batch.await.expect("task").expect("batch");
    assert_eq!(
        *found[&2], "put while loading",
        "the batch answers what Valkey holds"
    );
    assert_eq!(
        table.stats().fenced_write_skipped,
        1,
        "its write of 2 was refused"
    );
    let other = rows.table(&store_on(&valkey.url()).await).await;
    let read = other.fetch_many([1, 2]).await;
    let by_id: HashMap<u64, _> = read.into_iter().collect();
    assert_eq!(*by_id[&1].as_ref().expect("1").value, "row 1");
    assert_eq!(*by_id[&2].as_ref().expect("2").value, "put while loading");
    settled(&table).await;
}

/// A batch member whose lock another process's invalidate dropped while the batch loaded, with no
/// copy of the id on Valkey: nothing here hears of it, and the member's write is fenced out with
/// nothing to answer instead. A `get` that joined the member's flight after the invalidate
/// returned takes a row read after it; the batch, whose read began before the invalidate, takes
/// the row it loaded. Before, both took the row read before the invalidate (`echostore check`
/// with three schemas found a batch read served so, 145 ms after another schema's put had
/// dropped the lock), and then, for a while, both read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_member_fenced_out_by_an_unheard_invalidate_answers_only_its_earlier_callers() {
    let valkey = valkey();
    let source = Source::gated();
    let here = numbered(&store_on(&valkey.url()).await, &source).await;
    let elsewhere = numbered(&store_on(&valkey.url()).await, &source).await;
    let batch = on_task(&here, |t| async move { t.get_many([1, 2]).await });
    until("the batch holds its locks and reads the source", || {
        source.calls() == 2
    })
    .await;
    elsewhere.invalidate(&2).await.expect("invalidate");
    let joiner = spawn_fetch(&here, 2);
    until_stats(&here, "the get joined the batch's flight of 2", |s| {
        s.coalesced == 1
    })
    .await;
    source.release();

    let joined = joiner.await.expect("task").expect("answer");
    assert_eq!(
        *joined.value, "value-2-3",
        "the get that began after the invalidate takes a row read after it"
    );
    let found = batch.await.expect("task").expect("batch");
    assert_eq!(
        (found[&1].as_str(), found[&2].as_str()),
        ("value-1-2", "value-2-2"),
        "the batch began before the invalidate: the rows it loaded"
    );
    assert_eq!(
        (here.stats().fenced_write_skipped, source.calls()),
        (1, 3),
        "one member fenced out, and one more source read, for the later get"
    );
    settled(&here).await;
    // The fenced-out member's write, expected to push, never does: its push is withdrawn, not
    // left expected (where the id's next own write would have been taken for someone else's).
    #[cfg(feature = "fault-injection")]
    until("nothing of either id is held", || here.ids_held() == 0).await;
}

/// A table `numbered` on `store` whose batch loader reads `source`: each id's row is
/// `value-<id>-<n>`, `n` the source's read count at the end of the call.
async fn numbered(store: &Store, source: &Source) -> Table<u64, String> {
    let source = source.clone();
    store
        .table::<u64, String>("numbered")
        .ttl(Duration::from_secs(60))
        .batch_loader(move |ids: Vec<u64>| {
            let source = source.clone();
            async move {
                let n = source.read_many(ids.len()).await;
                let rows = ids.into_iter().map(|id| (id, format!("value-{id}-{n}")));
                Ok::<_, std::io::Error>(rows.collect::<HashMap<_, _>>())
            }
        })
        .build()
        .await
        .expect("table")
}

/// A batch load that outlasts the lock's ttl keeps every lock it won (the lease): another
/// store's read of one of its ids waits for it instead of reading the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_batch_keeps_its_locks() {
    let valkey = valkey();
    let rows = Rows::new(false);
    let short_lock = |t: TableBuilder<u64, String>| t.lock_ttl(Duration::from_millis(30));
    let slow = rows.tuned(&store_on(&valkey.url()).await, short_lock).await;
    let other = rows.tuned(&store_on(&valkey.url()).await, short_lock).await;
    let batch = on_task(&slow, |t| async move { t.get_many([1, 2, 3]).await });
    until_stats(&slow, "the lease extended the locks", |s| {
        s.lease_extended >= 12
    })
    .await;
    let read = on_task(&other, |t| async move { t.get(&2).await });
    until_stats(&other, "the other store met the lock", |s| s.lock_lost >= 1).await;
    rows.gate.send_replace(true);
    assert_eq!(batch.await.expect("task").expect("batch").len(), 3);
    assert_eq!(*read.await.expect("task").expect("get"), "row 2");
    assert_eq!(
        rows.calls(),
        vec![vec![1, 2, 3]],
        "the other store never read the source"
    );
}

/// A large batch whose ids another store's batch is loading waits for it as one group (one poll
/// per slot group each round, the winner's lease one command per slot group), though the load
/// outlasts the lock (5 s): every id is read from the source once, and both batches get every
/// row.
/// (10,000 ids on one server; 2,000 on a cluster, where each hash slot is a group of its own.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_batch_waits_for_another_stores_batch_as_one() {
    let _turn = common::heavy().await;
    let valkey = valkey();
    let ids_in_all = match common::cluster_seeds(&valkey.url()) {
        Some(_) => 2_000,
        None => 10_000,
    };
    let (ids, n) = ((0..ids_in_all).collect::<Vec<u64>>(), ids_in_all as usize);
    let rows = Rows::new(false);
    let here = rows
        .table(&common::coherent_store(&valkey.url(), None).await)
        .await;
    // The second batch waits through two leases and then the load: far past the default
    // policy's 5 s on a loaded machine, so it waits for as long as the test does.
    let patient = LoserPolicy::Poll {
        every: Duration::from_millis(10),
        up_to: Duration::from_secs(600),
    };
    let there = rows
        .tuned(&common::coherent_store(&valkey.url(), None).await, |t| {
            t.losers(patient)
        })
        .await;
    let loading = on_task(&here, |t| {
        let ids = ids.clone();
        async move { t.get_many(&ids).await }
    });
    common::until("the first batch is loading", || rows.calls().len() == 1).await;
    let waiting = on_task(&there, |t| {
        let ids = ids.clone();
        async move { t.get_many(&ids).await }
    });
    until_stats(&there, "the second batch lost every lock", |s| {
        s.lock_lost >= ids_in_all
    })
    .await;
    until_stats(&here, "the load outlasted the lock's first life", |s| {
        s.lease_extended >= 2 * ids_in_all
    })
    .await;
    rows.gate.send_replace(true);
    let (loaded, waited) = (loading.await.expect("task"), waiting.await.expect("task"));
    assert_eq!(loaded.expect("the first batch").len(), n);
    assert_eq!(waited.expect("the second batch").len(), n);
    let reads = rows.reads_per_id();
    assert_eq!(reads.len(), n);
    let calls: Vec<usize> = rows.calls().iter().map(Vec::len).collect();
    assert!(
        reads.values().all(|&n| n == 1),
        "an id was read twice: calls of {calls:?} ids; {:?} / {:?}",
        here.stats(),
        there.stats()
    );
}

/// A batch of more misses than the per-id loader runs at once (16: docs/batch-reads.md): an id
/// whose call waited for a free slot asks whether its lock is still its own before it reads the
/// source, so a put meanwhile (which drops the lock) costs no source read, and the batch answers
/// the put's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_queued_behind_the_per_id_loaders_calls_reads_no_source_after_a_put() {
    const AT_ONCE: u64 = 16;
    let valkey = valkey();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let gate = watch::channel(false).0;
    let loader = {
        let (asked, gate) = (Arc::clone(&asked), gate.clone());
        move |id: u64| {
            asked.lock().expect("asked").push(id);
            let mut open = gate.subscribe();
            async move {
                let _ = open.wait_for(|open| *open).await;
                Ok::<_, std::io::Error>(format!("row {id}"))
            }
        }
    };
    let table = store_on(&valkey.url()).await.table::<u64, String>("queued");
    let table = table.ttl(Duration::from_secs(60)).loader(loader);
    let table = table.build().await.expect("table");
    let writer = table_on(
        &store_on(&valkey.url()).await,
        "queued",
        &Source::open(),
        |t| t,
    )
    .await;
    let batch = on_task(&table, |t| async move { t.get_many(1..=AT_ONCE + 1).await });
    let started = || asked.lock().expect("asked").clone();
    common::until("the first calls reached the source", || {
        started().len() as u64 == AT_ONCE
    })
    .await;
    let queued = (1..=AT_ONCE + 1)
        .find(|id| !started().contains(id))
        .expect("one id waits for a slot");
    writer
        .put(&queued, "put while queued".into())
        .await
        .expect("put");
    gate.send_replace(true);
    let found = batch.await.expect("task").expect("batch");
    assert_eq!(*found[&queued], "put while queued", "the put's value");
    assert_eq!(
        started().len() as u64,
        AT_ONCE,
        "the queued id read no source: {:?}",
        started()
    );
}
