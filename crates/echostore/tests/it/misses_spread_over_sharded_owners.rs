//! `.shards(n)`: a table's ids spread over `n` owner actors by hash. Every per-id rule holds as
//! with one owner (one source read per id across stores), what concerns every id (a mark) reaches
//! every shard, a batch read's source call is one for the table (a flush is counted once: see
//! `tracking_loss_flushes_and_recovers.rs`, whose tables have four shards), and a crash restarts only the shard it happened in.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{
    POISON, Source, Touchy, answers, coherent_store, herd_across, on_task, settled, table_on,
    until, until_stats, valkey,
};
use echostore::{Error, Origin, Store, Table};

/// Two stores, four shards each, a herd per id over many ids: one source read per id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_id_is_read_once_across_sharded_owners() {
    let valkey = valkey();
    let url = valkey.url();
    let source = Source::open();
    let mut tables: Vec<Table<u64, String>> = Vec::new();
    for _ in 0..2 {
        let store = coherent_store(&url, None).await;
        tables.push(table_on(&store, "sh", &source, |t| t.shards(4)).await);
    }
    for id in 1..=16 {
        for answer in answers(herd_across(&tables, 20, id)).await {
            assert_eq!(*answer.expect("a value").value, format!("value-{id}-{id}"));
        }
        assert_eq!(source.calls(), id as usize, "id {id}: one source read");
    }
    for table in &tables {
        settled(table).await; // the shards' in_flight gauges add up to none
    }
}

/// Another process's `invalidate_tag` reaches this process's every shard: each drops the
/// entries it holds with the tag, not only the shard that read the new mark; the mark is counted
/// once per table, not once per shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_reaches_every_shard() {
    let valkey = valkey();
    let url = valkey.url();
    let source = Source::open();
    let tagged = |t: echostore::TableBuilder<u64, String>| {
        t.shards(4)
            .ttl(Duration::from_secs(60))
            .tags(|_: &u64, _: &String| ["all"])
    };
    let here = table_on(&coherent_store(&url, None).await, "mk", &source, tagged).await;
    let there = table_on(&coherent_store(&url, None).await, "mk", &source, tagged).await;
    let ids: Vec<u64> = (1..=12).collect();
    for id in &ids {
        here.get(id).await.expect("load");
        assert_eq!(here.fetch(id).await.expect("hit").origin, Origin::L1);
    }
    there.invalidate_tag("all").await.expect("invalidate_tag");
    // Every shard of `there` has taken the mark by now, and it counts once for the table (twice
    // at most: its own push may bring it again).
    let taken = there.stats().marks_taken;
    assert!((1..=2).contains(&taken), "marks_taken {taken}");
    // Counted once every shard has taken the mark (and dropped what it covers): from then on no
    // id is an L1 hit until it is read again. (Polling reads instead would refill the ids a
    // pass read before the mark landed, and never see a pass without hits.)
    until_stats(&here, "every shard took the mark", |s| s.marks_taken >= 1).await;
    for id in &ids {
        let origin = here.fetch(id).await.expect("read").origin;
        assert_ne!(origin, Origin::L1, "id {id} was still in L1");
    }
}

/// The `touchy` table, its ids over two owners, on a store without Valkey.
async fn two_shards(source: &Source) -> Table<Touchy, String> {
    let store = Store::builder().build().await.expect("store");
    let loader = source.loader();
    store
        .table::<Touchy, String>("touchy")
        .shards(2)
        .loader(move |id: Touchy| loader(id.0))
        .build()
        .await
        .expect("table")
}

/// How many of `answers` (by id number) are the id's own value, and how many `Stopped`; any
/// other answer fails the test.
fn tally(
    answers: impl IntoIterator<Item = (u64, echostore::Result<Arc<String>>)>,
) -> (usize, usize) {
    let (mut answered, mut stopped) = (0, 0);
    for (n, answer) in answers {
        match answer {
            Ok(value) => {
                assert!(value.starts_with(&format!("value-{n}-")), "id {n}: {value}");
                answered += 1;
            }
            Err(Error::Stopped) => stopped += 1,
            Err(e) => panic!("id {n}: {e}"),
        }
    }
    (answered, stopped)
}

/// A crash in one shard answers that shard's waiters `Stopped`; the other shard's flights run
/// on and answer their values, and only one owner is restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_restarts_only_its_shard() {
    let source = Source::gated();
    let table = two_shards(&source).await;
    let others: Vec<_> = (1..=8)
        .map(|n| {
            let table = table.clone();
            tokio::spawn(async move { table.get(&Touchy(n, 0)).await })
        })
        .collect();
    let first = on_task(&table, |t| async move { t.get(&Touchy(POISON, 1)).await });
    until_stats(&table, "nine flights run", |s| s.in_flight == 9).await;
    let second = table.get(&Touchy(POISON, 2)).await;
    assert!(matches!(second, Err(Error::Stopped)), "{second:?}");
    until("the supervisor restarted the shard", || {
        table.stats().owner_restarts == 1
    })
    .await;
    source.release();
    assert!(matches!(first.await.expect("task"), Err(Error::Stopped)));
    let mut answers = Vec::new();
    for (n, other) in (1..=8u64).zip(others) {
        answers.push((n, other.await.expect("task")));
    }
    let (answered, stopped) = tally(answers);
    assert!(
        answered > 0 && stopped > 0,
        "the crashed shard's ids answered Stopped ({stopped}), the other's their values \
         ({answered})"
    );
    assert_eq!(table.stats().owner_restarts, 1, "one shard restarted");
    settled(&table).await;
}

/// A batch read whose ids fall in every shard is one batch loader call with all of them, not one
/// per shard: the flights each shard admitted run as one batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_spanning_shards_is_one_source_call() {
    let valkey = valkey();
    let calls: Arc<Mutex<Vec<Vec<u64>>>> = Arc::default();
    let store = coherent_store(&valkey.url(), None).await;
    let recorded = Arc::clone(&calls);
    let table = store
        .table::<u64, String>("spread")
        .shards(4)
        .ttl(Duration::from_secs(60))
        .batch_loader(move |ids: Vec<u64>| {
            let mut sorted = ids.clone();
            sorted.sort_unstable();
            recorded.lock().expect("calls").push(sorted);
            async move {
                let rows = ids.into_iter().map(|id| (id, format!("row {id}")));
                Ok::<_, std::io::Error>(rows.collect::<HashMap<_, _>>())
            }
        })
        .build()
        .await
        .expect("table");
    let ids: Vec<u64> = (1..=64).collect();
    let found = table.get_many(&ids).await.expect("a batch");
    assert_eq!(found.len(), 64);
    assert_eq!(*found[&33], "row 33");
    assert_eq!(
        *calls.lock().expect("calls"),
        vec![ids],
        "one call, every id"
    );
    let s = table.stats();
    assert_eq!((s.batches, s.batch_loads, s.source_reads), (1, 1, 64));
    settled(&table).await;
}

/// A batch read spanning shards while one of them crashes on it: that shard's ids answer
/// `Stopped`, and the flights the other shard admitted still run (the crashed owner's share of
/// the batch was dropped with it, which launches the rest) and answer their values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_survives_a_crash_in_one_of_its_shards() {
    let source = Source::gated();
    let table = two_shards(&source).await;
    let first = on_task(&table, |t| async move { t.get(&Touchy(POISON, 1)).await });
    until_stats(&table, "the poisoned id's flight runs", |s| {
        s.in_flight == 1
    })
    .await;
    let mut ids: Vec<Touchy> = (1..=8).map(|n| Touchy(n, 0)).collect();
    ids.push(Touchy(POISON, 2)); // meets the running flight's copy in its shard: a crash
    let batch = tokio::spawn({
        let table = table.clone();
        async move { table.fetch_many(ids).await }
    });
    until("the supervisor restarted the shard", || {
        table.stats().owner_restarts == 1
    })
    .await;
    source.release();
    assert!(matches!(first.await.expect("task"), Err(Error::Stopped)));
    let answers = batch.await.expect("task");
    let (answered, stopped) = tally(
        answers
            .into_iter()
            .map(|(id, a)| (id.0, a.map(|f| f.value))),
    );
    assert!(
        answered > 0 && stopped > 1,
        "the crashed shard's ids answered Stopped ({stopped}), the other's their values \
         ({answered})"
    );
    assert_eq!(answered + stopped, 9);
    settled(&table).await;
}
