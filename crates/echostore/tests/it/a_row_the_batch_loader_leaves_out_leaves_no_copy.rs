//! An id the batch loader leaves out is gone at the source (`Error::Absent`). Its copies go with
//! it: L1's stale stand-in and, under the won lock, Valkey's copy, as a reloader's `Gone` deletes
//! it. Else, once the read has answered `Absent`, a later read whose load fails would serve the
//! gone row from a stale copy (fail-safe), here or in another process: back in time.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{store_on, until_async, valkey};
use echostore::{Error, Store, Table};

/// A life short enough to end within a test; the stale window long enough to outlive it.
const SHORT: Duration = Duration::from_millis(40);
const STALE_FOR: Duration = Duration::from_secs(60);

/// The rows at the source, and whether the source is down (every call fails).
#[derive(Default)]
struct Source {
    rows: Mutex<HashMap<u64, String>>,
    down: AtomicBool,
}

impl Source {
    fn with(ids: &[u64]) -> Arc<Source> {
        let source = Source::default();
        let rows = ids.iter().map(|&id| (id, format!("row {id}")));
        source.rows.lock().expect("rows").extend(rows);
        Arc::new(source)
    }

    fn remove(&self, id: u64) {
        self.rows.lock().expect("rows").remove(&id);
    }

    fn go_down(&self) {
        self.down.store(true, Ordering::SeqCst);
    }
}

/// `gone` on `store`, loaded only by a batch loader over `source`, its copies stale for a minute
/// past a short life and served when a load fails (fail-safe).
async fn table(store: &Store, source: &Arc<Source>) -> Table<u64, String> {
    let source = Arc::clone(source);
    store
        .table::<u64, String>("gone")
        .batch_loader(move |ids: Vec<u64>| {
            let source = Arc::clone(&source);
            async move {
                if source.down.load(Ordering::SeqCst) {
                    return Err(std::io::Error::other("the source is down"));
                }
                let rows = source.rows.lock().expect("rows");
                let found = ids
                    .iter()
                    .filter_map(|id| Some((*id, rows.get(id)?.clone())));
                Ok(found.collect::<HashMap<_, _>>())
            }
        })
        .ttl(SHORT)
        .jitter(0.0)
        .stale_for(STALE_FOR)
        .fail_safe(true)
        .build()
        .await
        .expect("table")
}

/// Waits until `ids`' copies are past their freshness, here and on Valkey.
async fn until_stale(table: &Table<u64, String>, ids: &[u64]) {
    until_async("the copies' freshness ended", async || {
        let mut none = true;
        for id in ids {
            none &= table.peek(id).await.expect("peek").is_none();
        }
        none
    })
    .await;
}

fn is_source_error(read: &echostore::Result<String>) -> bool {
    matches!(read, Err(Error::Source(_)))
}

/// A `get` (a batch of one) that finds its row gone: neither this process's stale copy nor
/// Valkey's is served once the source is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_that_found_the_row_gone_leaves_no_stale_copy() {
    let valkey = valkey();
    let source = Source::with(&[1]);
    let here = table(&store_on(&valkey.url()).await, &source).await;
    let there = table(&store_on(&valkey.url()).await, &source).await;
    assert_eq!(here.get(&1).await.expect("load").as_str(), "row 1");
    source.remove(1);
    until_stale(&here, &[1]).await;
    assert!(matches!(here.get(&1).await, Err(Error::Absent)));
    source.go_down();
    let again = here.get(&1).await.map(|v| (*v).clone());
    assert!(is_source_error(&again), "served after Absent: {again:?}");
    let elsewhere = there.get(&1).await.map(|v| (*v).clone());
    assert!(
        is_source_error(&elsewhere),
        "served from Valkey: {elsewhere:?}"
    );
}

/// A batch read that finds one of its rows gone: the same for that row, while the other's copy
/// is still served by fail-safe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_found_a_row_gone_leaves_no_stale_copy_of_it() {
    let valkey = valkey();
    let source = Source::with(&[1, 2]);
    let here = table(&store_on(&valkey.url()).await, &source).await;
    let there = table(&store_on(&valkey.url()).await, &source).await;
    assert_eq!(here.get_many(&[1, 2]).await.expect("load").len(), 2);
    source.remove(1);
    until_stale(&here, &[1, 2]).await;
    let found = here.get_many(&[1, 2]).await.expect("batch");
    assert_eq!(
        found.keys().copied().collect::<Vec<_>>(),
        vec![2],
        "1 absent"
    );
    source.go_down();
    for table in [&here, &there] {
        let read = table.get(&1).await.map(|v| (*v).clone());
        assert!(is_source_error(&read), "served after Absent: {read:?}");
        let other = table.get(&2).await.expect("fail-safe serves the live row");
        assert_eq!(other.as_str(), "row 2");
    }
}

/// Without Valkey: L1's stale copy goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_valkey_l1_keeps_no_stale_copy_of_a_gone_row() {
    let source = Source::with(&[1]);
    let here = table(&Store::builder().build().await.expect("store"), &source).await;
    assert_eq!(here.get(&1).await.expect("load").as_str(), "row 1");
    source.remove(1);
    until_stale(&here, &[1]).await;
    assert!(matches!(here.get(&1).await, Err(Error::Absent)));
    source.go_down();
    let again = here.get(&1).await.map(|v| (*v).clone());
    assert!(is_source_error(&again), "served after Absent: {again:?}");
}
