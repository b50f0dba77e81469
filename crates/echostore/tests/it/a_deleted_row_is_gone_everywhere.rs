//! `delete`: with `V = Option<_>` the row is written as `None` everywhere, so another store
//! answers "not found" from Valkey and then L1 without reading the source; with another value
//! type the row is invalidated everywhere and the next read loads it.

use crate::common;

use std::time::Duration;

use common::{Source, coherent_store, coherent_table, until_stats, valkey};
use echostore::{Origin, Store, Table};

async fn optional(store: &Store, source: &Source) -> Table<u64, Option<String>> {
    let source = source.clone();
    store
        .table::<u64, Option<String>>("maybe")
        .ttl(Duration::from_secs(60))
        .loader(move |id: u64| {
            let source = source.clone();
            async move {
                source.read().await;
                Ok::<_, std::io::Error>(Some(format!("row {id}")))
            }
        })
        .build()
        .await
        .expect("table")
}

/// `here` loads id 1 and `there` reads it from Valkey; then `here` deletes it, and this returns
/// once the delete's push has reached `there`.
async fn loaded_then_deleted<V: echostore::Value>(here: &Table<u64, V>, there: &Table<u64, V>) {
    here.get(&1).await.expect("load");
    // The load's own write pushes to the other store too: let it arrive before that store reads,
    // so that the push counted below is the delete's.
    until_stats(there, "the load's push reached the other store", |s| {
        s.invalidations >= 1
    })
    .await;
    assert_eq!(there.fetch(&1).await.expect("read").origin, Origin::L2);
    let before = there.stats().invalidations;
    here.delete(&1).await.expect("delete");
    until_stats(there, "the delete reached the other store", |s| {
        s.invalidations > before
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_optional_row_is_cached_as_none_everywhere() {
    let valkey = valkey();
    let source = Source::open();
    let here = optional(&coherent_store(&valkey.url(), None).await, &source).await;
    let there = optional(&coherent_store(&valkey.url(), None).await, &source).await;
    loaded_then_deleted(&here, &there).await;
    let read = there.fetch(&1).await.expect("read");
    assert_eq!((read.value.as_ref(), read.origin), (&None, Origin::L2));
    let read = here.fetch(&1).await.expect("read");
    assert_eq!((read.value.as_ref(), read.origin), (&None, Origin::L1));
    assert_eq!(source.calls(), 1, "no store read the source again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_other_row_is_invalidated_everywhere() {
    let valkey = valkey();
    let source = Source::open();
    let long = |t: echostore::TableBuilder<u64, String>| t.ttl(Duration::from_secs(60));
    let here = coherent_table(&valkey.url(), "plain", &source, long).await;
    let there = coherent_table(&valkey.url(), "plain", &source, long).await;
    loaded_then_deleted(&here, &there).await;
    assert_eq!(there.fetch(&1).await.expect("read").origin, Origin::Loaded);
    assert_eq!(source.calls(), 2, "the next read loaded the row");
}

/// A row of a `.version_by` table: its version is its `updated_at`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Row {
    updated_at: u64,
}

/// A versioned `Option<Row>` table whose `version_by` gives `None` the version `none_is`.
async fn versioned(store: &Store, none_is: u64) -> Table<u64, Option<Row>> {
    store
        .table::<u64, Option<Row>>("rows")
        .ttl(Duration::from_secs(60))
        .version_by(move |row: &Option<Row>| row.as_ref().map_or(none_is, |r| r.updated_at))
        .loader(|_id: u64| async { Ok::<_, std::io::Error>(None) })
        .build()
        .await
        .expect("table")
}

/// On a `.version_by` table a delete is a tombstone ordered by its arrival, whatever version
/// `version_by` gives `None` (0, or `u64::MAX`): it wins over the row written before it, and the
/// row re-created after it wins over it, in both stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_wins_over_every_version_before_it_and_loses_to_every_write_after_it() {
    let valkey = valkey();
    for none_is in [0, u64::MAX] {
        let here = versioned(&coherent_store(&valkey.url(), None).await, none_is).await;
        let there = versioned(&coherent_store(&valkey.url(), None).await, none_is).await;
        let id = none_is % 1000;
        here.put(&id, Some(Row { updated_at: 5 }))
            .await
            .expect("the row is written");
        there
            .delete(&id)
            .await
            .unwrap_or_else(|e| panic!("None as version {none_is}: the delete was refused: {e}"));
        let reread = store_read(&valkey.url(), none_is, id).await;
        assert_eq!(
            reread, None,
            "None as version {none_is}: the deleted row is served"
        );

        here.put(&id, Some(Row { updated_at: 1 }))
            .await
            .unwrap_or_else(|e| {
                panic!("None as version {none_is}: the re-created row was refused: {e}")
            });
        let reread = store_read(&valkey.url(), none_is, id).await;
        assert_eq!(
            reread,
            Some(Row { updated_at: 1 }),
            "None as version {none_is}: the re-created row is not served"
        );
    }
}

/// What a store of its own reads for `id` (from Valkey: it has nothing in L1).
async fn store_read(url: &str, none_is: u64, id: u64) -> Option<Row> {
    let fresh = versioned(&coherent_store(url, None).await, none_is).await;
    let read = fresh.fetch(&id).await.expect("read");
    assert_eq!(read.origin, Origin::L2, "the copy on Valkey is read");
    read.value.as_ref().clone()
}
