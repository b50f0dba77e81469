//! `.reloader`: called instead of the loader with the copy in its stale window. `Unchanged`
//! renews the copy's life on Valkey and in L1 without sending its bytes, and is still the one
//! source read of its expiry; `Changed` is stored like a load; `Gone` deletes the copy.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{coherent_store, round_trips_of, until_async, valkey};
use echostore::{Error, Origin, Reload, Table};

const MARKER: &str = "VALUE-BYTES-MARKER";
const ROUNDS: usize = 100;

/// Counts of the table's source calls, shared by its stores.
#[derive(Default)]
struct Calls {
    loads: AtomicUsize,
    reloads: AtomicUsize,
}

async fn table(
    url: &str,
    calls: &Arc<Calls>,
    answer: fn(u64) -> Reload<String>,
) -> Table<u64, String> {
    let (loads, reloads) = (Arc::clone(calls), Arc::clone(calls));
    coherent_store(url, None)
        .await
        .table::<u64, String>("reloaded")
        .ttl(Duration::from_millis(40))
        .jitter(0.0)
        .early_refresh(0.0)
        .stale_for(Duration::from_secs(60))
        .loader(move |id: u64| {
            loads.loads.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, std::io::Error>(format!("{MARKER}-{id}")) }
        })
        .reloader(move |id: u64, old: Arc<String>| {
            reloads.reloads.fetch_add(1, Ordering::SeqCst);
            assert_eq!(
                *old,
                format!("{MARKER}-{id}"),
                "the reloader is given the copy"
            );
            async move { Ok::<_, std::io::Error>(answer(id)) }
        })
        .build()
        .await
        .expect("table")
}

/// Three stores, a hundred expiries: each expiry is one reloader call in all, every store reads
/// the same value throughout, and no command sent to Valkey carries the value's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_renews_the_copy_with_no_value_bytes_and_one_read_per_expiry() {
    let valkey = valkey();
    let url = valkey.url();
    let calls = Arc::new(Calls::default());
    let mut tables = Vec::new();
    for _ in 0..3 {
        tables.push(table(&url, &calls, |_| Reload::Unchanged).await);
    }
    assert_eq!(
        *tables[0].get(&1).await.expect("load"),
        format!("{MARKER}-1")
    );
    let rounds = async {
        for round in 1..=ROUNDS {
            until_async("the copy's freshness ended", async || {
                tables[0].peek(&1).await.expect("peek").is_none()
            })
            .await;
            let reads = tables.iter().map(|t| {
                let t = t.clone();
                tokio::spawn(async move { t.get(&1).await })
            });
            for read in futures::future::join_all(reads).await {
                assert_eq!(*read.expect("task").expect("read"), format!("{MARKER}-1"));
            }
            assert_eq!(
                calls.reloads.load(Ordering::SeqCst),
                round,
                "one reload per expiry"
            );
        }
    };
    let commands = round_trips_of(&url, rounds).await;
    assert_eq!(
        calls.loads.load(Ordering::SeqCst),
        1,
        "the loader ran once, at the cold miss"
    );
    let sent_bytes: Vec<&String> = commands.iter().filter(|c| c.contains(MARKER)).collect();
    assert!(sent_bytes.is_empty(), "value bytes sent: {sent_bytes:?}");
    let stats: echostore::TableStats = tables.iter().map(Table::stats).sum();
    assert_eq!(stats.reloads_unchanged, ROUNDS as u64);
    assert_eq!(stats.source_reads, ROUNDS as u64 + 1);
}

/// `Changed` is stored as a load's value; `Gone` deletes the copy and the read answers `Absent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_is_stored_and_gone_is_deleted() {
    let valkey = valkey();
    let url = valkey.url();
    let calls = Arc::new(Calls::default());
    let answer = |id: u64| match id {
        1 => Reload::Changed(format!("{MARKER}-1")),
        _ => Reload::Gone,
    };
    let a = table(&url, &calls, answer).await;
    let b = table(&url, &calls, answer).await;
    a.get(&1).await.expect("load");
    a.get(&2).await.expect("load");
    until_async("both copies' freshness ended", async || {
        a.peek(&1).await.expect("peek").is_none() && a.peek(&2).await.expect("peek").is_none()
    })
    .await;
    let changed = a.fetch(&1).await.expect("reloaded");
    assert_eq!(changed.origin, Origin::Loaded);
    assert_eq!(
        b.fetch(&1).await.expect("read").origin,
        Origin::L2,
        "stored on Valkey"
    );
    assert!(
        matches!(a.get(&2).await, Err(Error::Absent)),
        "gone at the source"
    );
    assert!(
        b.peek(&2).await.expect("peek").is_none(),
        "the copy is deleted"
    );
    assert_eq!(calls.reloads.load(Ordering::SeqCst), 2);
    assert_eq!(
        calls.loads.load(Ordering::SeqCst),
        2,
        "only the cold misses loaded"
    );
}
