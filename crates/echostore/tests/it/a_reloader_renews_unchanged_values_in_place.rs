//! `.reloader`: called instead of the loader with the copy in its stale window. `Unchanged`
//! renews the copy's life on Valkey and in L1 without sending its bytes, and is still the one
//! source read of its expiry; `Changed` is stored like a load; `Gone` deletes the copy.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{coherent_store, raw, read_envelope, round_trips_of, until, until_async, valkey};
use echostore::{Error, Origin, Reload, Table};

const MARKER: &str = "VALUE-BYTES-MARKER";
const ROUNDS: usize = 100;
/// A life short enough for many expiries in a test.
const SHORT: Duration = Duration::from_millis(40);

/// Counts of the table's source calls, shared by its stores, and the permits each reloader call
/// waits for when the test holds them back (`gated`).
#[derive(Default)]
struct Calls {
    loads: AtomicUsize,
    reloads: AtomicUsize,
    gated: Option<tokio::sync::Semaphore>,
}

impl Calls {
    /// Counts whose reloader calls each wait for [`Calls::open_gate`].
    fn gated() -> Arc<Calls> {
        Arc::new(Calls {
            gated: Some(tokio::sync::Semaphore::new(0)),
            ..Calls::default()
        })
    }

    /// Lets one held reloader call answer.
    fn open_gate(&self) {
        self.gated.as_ref().expect("gated").add_permits(1);
    }
}

/// Id 1 of `here` loaded, past its freshness, and read again: the read's reloader has been called
/// and waits at the gate of `calls`, so that a test can act while the reload holds the lock.
async fn reload_held(
    here: &Table<u64, String>,
    calls: &Calls,
) -> tokio::task::JoinHandle<echostore::Result<echostore::Fetched<String>>> {
    here.get(&1).await.expect("load");
    until_async("the copy's freshness ended", async || {
        here.peek(&1).await.expect("peek").is_none()
    })
    .await;
    let reload = tokio::spawn({
        let here = here.clone();
        async move { here.fetch(&1).await }
    });
    until("the reloader was called", || {
        calls.reloads.load(Ordering::SeqCst) == 1
    })
    .await;
    reload
}

/// The table on a store of its own, values fresh for `ttl`.
async fn table(
    url: &str,
    calls: &Arc<Calls>,
    ttl: Duration,
    answer: fn(u64) -> Reload<String>,
) -> Table<u64, String> {
    let (loads, reloads) = (Arc::clone(calls), Arc::clone(calls));
    coherent_store(url, None)
        .await
        .table::<u64, String>("reloaded")
        .ttl(ttl)
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
            let calls = Arc::clone(&reloads);
            async move {
                if let Some(gate) = &calls.gated {
                    gate.acquire().await.expect("open").forget();
                }
                Ok::<_, std::io::Error>(answer(id))
            }
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
        tables.push(table(&url, &calls, SHORT, |_| Reload::Unchanged).await);
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
    let a = table(&url, &calls, SHORT, answer).await;
    let b = table(&url, &calls, SHORT, answer).await;
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

/// A copy that leaves Valkey while the reloader runs (its stale window ended, or it was evicted)
/// cannot be renewed in place: "unchanged" then writes the value as a load would, under the same
/// lock, and the reload is still the expiry's one source read. Before, the value answered its
/// callers and was kept nowhere, so the next read of every process loaded again (`echostore
/// check` with reloaders: a reload that waited for the source budget past its copy's stale
/// window, and another process of its schema loaded 44 ms later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_writes_the_value_when_its_copy_left_valkey_meanwhile() {
    let valkey = valkey();
    let url = valkey.url();
    let calls = Calls::gated();
    let here = table(&url, &calls, SHORT, |_| Reload::Unchanged).await;
    let reload = reload_held(&here, &calls).await;
    let mut conn = raw(&url).await;
    let _: () = redis::AsyncCommands::del(&mut conn, "reloaded:{1}")
        .await
        .expect("DEL");
    calls.open_gate();

    let reloaded = reload.await.expect("task").expect("reloaded");
    assert_eq!(*reloaded.value, format!("{MARKER}-1"));
    let copy = read_envelope::<String>(&mut conn, "reloaded:{1}").await;
    assert_eq!(
        copy.map(|c| c.value),
        Some(format!("{MARKER}-1")),
        "the value is on Valkey again, for every process's next read"
    );
    assert_eq!(
        (
            calls.loads.load(Ordering::SeqCst),
            calls.reloads.load(Ordering::SeqCst)
        ),
        (1, 1),
        "the cold miss and the reload: one source read each"
    );
}

/// A write that drops the lock while the reloader runs fences the renewal out, as it fences a
/// load out: the read answers the copy the write left on Valkey (here a `put`'s), not the older
/// one it reloaded, and nothing is renewed over it. Before, the reloaded copy answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_fenced_out_by_a_put_answers_the_puts_copy() {
    let valkey = valkey();
    let url = valkey.url();
    let calls = Calls::gated();
    let here = table(&url, &calls, SHORT, |_| Reload::Unchanged).await;
    let elsewhere = table(&url, &calls, Duration::from_secs(60), |_| Reload::Unchanged).await;
    let reload = reload_held(&here, &calls).await;
    elsewhere.put(&1, "put".to_owned()).await.expect("put");
    calls.open_gate();

    let reloaded = reload.await.expect("task").expect("reloaded");
    assert_eq!(
        *reloaded.value, "put",
        "the put's copy, not the reloaded one"
    );
    let mut conn = raw(&url).await;
    let copy = read_envelope::<String>(&mut conn, "reloaded:{1}").await;
    assert_eq!(
        copy.map(|c| c.value).as_deref(),
        Some("put"),
        "nothing renewed over it"
    );
    assert_eq!(here.stats().fenced_write_skipped, 1);
    // The renewal's push, expected, never comes: it is withdrawn, not left for the id's next own
    // write's push to be taken for.
    #[cfg(feature = "fault-injection")]
    until("nothing of the id is held", || here.ids_held() == 0).await;
}
