//! An id the batch loader leaves out is gone at the source (`Error::Absent`). Its copies go with
//! it: L1's stale stand-in and, under the won lock, Valkey's copy, as a reloader's `Gone` deletes
//! it. Else, once the read has answered `Absent`, a later read whose load fails would serve the
//! gone row from a stale copy (fail-safe), here or in another process: back in time.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{builder_on, store_on, until, until_async, until_stats, valkey};
use echostore::{Error, Store, Table, Tracking};

/// A life short enough to end within a test; the stale window long enough to outlive it.
const SHORT: Duration = Duration::from_millis(40);
const STALE_FOR: Duration = Duration::from_secs(60);

/// The rows at the source, and whether the source is down (every call fails). A call reads the
/// rows, then answers once `gate` lets it (a test holds the gate to keep a load in flight).
#[derive(Default)]
struct Source {
    rows: Mutex<HashMap<u64, String>>,
    down: AtomicBool,
    gate: tokio::sync::RwLock<()>,
    calls: AtomicUsize,
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
                let found: HashMap<_, _> = {
                    let rows = source.rows.lock().expect("rows");
                    let found = ids
                        .iter()
                        .filter_map(|id| Some((*id, rows.get(id)?.clone())));
                    found.collect()
                };
                source.calls.fetch_add(1, Ordering::SeqCst);
                let _answer = source.gate.read().await;
                Ok(found)
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

/// A row found gone while a write elsewhere re-created it: that write dropped the batch's lock
/// of the row, so the batch's `Absent` answers no caller who joined after it, and they take the
/// write's copy. Under key tracking no push of that write reaches a process whose tracking
/// connection never read the key, so the batch's flight of the row stays joinable after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_re_created_while_a_batch_found_it_gone_is_answered_after_the_write() {
    let valkey = valkey();
    let source = Source::with(&[2]);
    let untracked = builder_on(&valkey.url())
        .require_valkey(true)
        .tracking(Tracking::Keys)
        .build()
        .await
        .expect("store");
    until("tracking is up", || untracked.is_coherent()).await;
    let here = table(&untracked, &source).await;
    let there = table(&store_on(&valkey.url()).await, &source).await;
    let hold = source.gate.write().await;
    let read = |here: &Table<u64, String>| {
        let here = here.clone();
        tokio::spawn(async move {
            here.get_many(&[1, 2])
                .await
                .map(|found| found.get(&1).map(|v| (**v).clone()))
        })
    };
    let first = read(&here);
    until("the batch found row 1 gone", || {
        source.calls.load(Ordering::SeqCst) == 1
    })
    .await;
    there.put(&1, "re-created".to_owned()).await.expect("put");
    let second = read(&here);
    until_stats(&here, "the second batch joined the first", |s| {
        s.coalesced >= 1
    })
    .await;
    drop(hold);
    let second = second
        .await
        .expect("the second batch's task")
        .expect("batch");
    assert_eq!(
        second.as_deref(),
        Some("re-created"),
        "row 1 to a batch begun after the write"
    );
    let first = first.await.expect("the first batch's task").expect("batch");
    assert!(
        matches!(first.as_deref(), Some("re-created") | None),
        "row 1 to the batch begun before the write: {first:?}"
    );
}
