//! Early refresh (XFetch, docs/early-refresh.md): a key read steadily is rebuilt in the last
//! stretch of its life, in the background, by one flight in one process at a time, so no reader
//! waits on a load at its expiry; a key nobody reads, a table with beta 0 and a value without a
//! recorded load time (an envelope of format 1) are never refreshed early; a failed refresh leaves
//! the current value served until its freshness ends.
//!
//! "Waited on a load" here: a read answered `Loaded` (it started the load) or `Coalesced` (it
//! joined a flight). Each store has one reader, so a `Coalesced` answer can only be a reader
//! joining a load; an `L2` answer is one Valkey read (after another store's refresh was pushed),
//! never a load.

use crate::common;

use std::time::{Duration, Instant};

use common::{Source, SourceLoader, envelope, raw, store_on, unix_ms, until, valkey};
use echostore::{Origin, Store, Table, TableBuilder, TableStats};
use redis::AsyncCommands;

/// How long a test's readers may read before the test gives up (a healthy run needs seconds).
const GIVE_UP: Duration = Duration::from_secs(30);

/// The hot id, in table `hot` (value key `hot:{7}`).
const ID: u64 = 7;

/// The `u64 -> String` table `hot` on `store`, loading with `loader`, then `tune`.
async fn hot(
    store: &Store,
    loader: SourceLoader,
    tune: impl FnOnce(TableBuilder<u64, String>) -> TableBuilder<u64, String>,
) -> Table<u64, String> {
    tune(store.table::<u64, String>("hot").loader(loader))
        .build()
        .await
        .expect("table")
}

/// A loader answering the source's n-th read (1-based) with `value-<n>`.
fn nth(source: &Source) -> SourceLoader {
    source.answering(|_id, n| Ok(format!("value-{n}")))
}

/// A reader: fetches `ID` every millisecond until `stop` says so; every answer (origin and
/// value, or the error), in order.
fn reader(
    table: &Table<u64, String>,
    stop: impl Fn() -> bool + Send + 'static,
) -> tokio::task::JoinHandle<Vec<Result<(Origin, String), echostore::Error>>> {
    let table = table.clone();
    tokio::spawn(async move {
        let deadline = Instant::now() + GIVE_UP;
        let mut seen = Vec::new();
        while !stop() {
            assert!(Instant::now() < deadline, "the readers gave up");
            let read = table.fetch(&ID).await;
            seen.push(read.map(|f| (f.origin, (*f.value).clone())));
            tokio::time::sleep(Duration::from_millis(1)).await; // a steady reader's pace
        }
        seen
    })
}

fn total(tables: &[Table<u64, String>]) -> TableStats {
    tables.iter().map(Table::stats).sum()
}

/// Two stores, one steady reader each, over several lives of the key: after the warm-up every
/// answer is an L1 hit or one Valkey read, never a load; the key was rebuilt early, one load at
/// a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hot_key_read_steadily_never_waits_on_a_load() {
    let valkey = valkey();
    let source = Source::taking(Duration::from_millis(30));
    // beta 2: the window opens 4·30·2 = 240 ms before expiry, far more than a load takes.
    let tune = |t: TableBuilder<u64, String>| t.ttl(Duration::from_millis(600)).early_refresh(2.0);
    let tables = [
        hot(&store_on(&valkey.url()).await, nth(&source), tune).await,
        hot(&store_on(&valkey.url()).await, nth(&source), tune).await,
    ];
    // Warm-up: the first store loads, the second reads it from Valkey.
    assert_eq!(
        tables[0].fetch(&ID).await.expect("load").origin,
        Origin::Loaded
    );
    assert_eq!(tables[1].fetch(&ID).await.expect("l2").origin, Origin::L2);

    // Three rebuilds after the warm-up's load: the readers span three expiries of the key.
    let readers: Vec<_> = tables
        .iter()
        .map(|t| {
            let source = source.clone();
            reader(t, move || source.calls() >= 4)
        })
        .collect();
    for seen in futures::future::join_all(readers).await {
        for answer in seen.expect("reader") {
            let (origin, value) = answer.expect("every read answers");
            assert!(
                matches!(origin, Origin::L1 | Origin::L2),
                "a reader waited on a load ({origin}, {value})"
            );
        }
    }
    let s = total(&tables);
    assert_eq!(source.most_at_once(), 1, "one load at a time");
    assert!(s.early_refreshes >= 3, "{s:?}");
    assert_eq!(s.early_refresh_failures, 0);
}

/// Many readers in each of three stores, and one store without Valkey: the loader never runs
/// twice at once. In a process the flights map admits one refresh per id; across stores the
/// regeneration lock does, and a refresh that loses it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_refresh_per_id_at_a_time_in_a_process_and_across_stores() {
    let valkey = valkey();
    let tune = |t: TableBuilder<u64, String>| t.ttl(Duration::from_millis(300)).early_refresh(1.0);

    let across = Source::taking(Duration::from_millis(20));
    let mut tables = Vec::new();
    for _ in 0..3 {
        tables.push(hot(&store_on(&valkey.url()).await, nth(&across), tune).await);
    }
    let alone = Source::taking(Duration::from_millis(20));
    let local = Store::builder().build().await.expect("store");
    let in_process = hot(&local, nth(&alone), tune).await;

    let mut readers = Vec::new();
    for table in tables.iter().chain([&in_process]) {
        for _ in 0..4 {
            let (across, alone) = (across.clone(), alone.clone());
            readers.push(reader(table, move || {
                across.calls() >= 6 && alone.calls() >= 6
            }));
        }
    }
    for seen in futures::future::join_all(readers).await {
        for answer in seen.expect("reader") {
            answer.expect("every read answers");
        }
    }
    assert_eq!(across.most_at_once(), 1, "across stores");
    assert_eq!(alone.most_at_once(), 1, "in one process");
    let (s, l) = (total(&tables), in_process.stats());
    assert!(
        s.early_refreshes >= 1 && l.early_refreshes >= 1,
        "{s:?} {l:?}"
    );
    assert!(
        s.lock_won as usize >= across.calls() - 1,
        "every load across stores held the lock: {s:?}"
    );
}

/// Reads steadily until the first answer that came from neither L1 nor Valkey (a load), and
/// returns it.
async fn read_until_a_miss(
    table: &Table<u64, String>,
) -> Result<(Origin, String), echostore::Error> {
    let deadline = Instant::now() + GIVE_UP;
    loop {
        assert!(Instant::now() < deadline, "the key never expired");
        match table.fetch(&ID).await {
            // A copy from Valkey is no wait on a load either: with coherence, a push (a planted
            // write, an invalidate) may drop L1 and send a read to Valkey before the expiry.
            Ok(f) if matches!(f.origin, Origin::L1 | Origin::L2) => {}
            other => return other.map(|f| (f.origin, (*f.value).clone())),
        }
        tokio::time::sleep(Duration::from_millis(1)).await; // a steady reader's pace
    }
}

/// With beta 0 a steadily read key is not refreshed: at its expiry the reader waits on the load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beta_zero_turns_it_off() {
    let valkey = valkey();
    let source = Source::taking(Duration::from_millis(20));
    let table = hot(&store_on(&valkey.url()).await, nth(&source), |t| {
        t.ttl(Duration::from_millis(300)).early_refresh(0.0)
    })
    .await;
    table.get(&ID).await.expect("warm-up");
    let (origin, value) = read_until_a_miss(&table).await.expect("the reload");
    assert_eq!((origin, value.as_str()), (Origin::Loaded, "value-2"));
    assert_eq!(table.stats().early_refreshes, 0);
    assert_eq!(source.calls(), 2);
}

/// A key read once and then left alone is not refreshed: it expires, and the next read loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_key_is_not_refreshed() {
    let valkey = valkey();
    let source = Source::taking(Duration::from_millis(20));
    let ttl = Duration::from_millis(200);
    let table = hot(&store_on(&valkey.url()).await, nth(&source), |t| {
        t.ttl(ttl).jitter(0.0)
    })
    .await;
    table.get(&ID).await.expect("warm-up");
    // The behaviour under test: nobody reads the key while it ages past its whole life.
    tokio::time::sleep(ttl * 2).await;
    assert_eq!((table.stats().early_refreshes, source.calls()), (0, 1));
    let again = table.fetch(&ID).await.expect("reload");
    assert_eq!(
        (again.origin, again.value.as_str()),
        (Origin::Loaded, "value-2")
    );
}

/// A refresh whose load fails is counted once; the reader keeps the current value from L1 until
/// its freshness ends (checked against the envelope's `fresh_until`), and only then sees the
/// source's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_early_refresh_serves_the_current_value_until_it_expires() {
    let valkey = valkey();
    let source = Source::taking(Duration::from_millis(20));
    let first_then_down = source.answering(|_id, n| match n {
        1 => Ok("first".to_owned()),
        _ => Err(std::io::Error::other("the source is down")),
    });
    let table = hot(&store_on(&valkey.url()).await, first_then_down, |t| {
        t.ttl(Duration::from_millis(400)).early_refresh(2.0)
    })
    .await;
    table.get(&ID).await.expect("warm-up");
    let mut conn = raw(&valkey.url()).await;
    let bytes: Vec<u8> = conn.get("hot:{7}").await.expect("GET");
    let fresh_until_ms = u64::from_le_bytes(bytes[1..9].try_into().expect("8 bytes"));

    let mut failures_seen = false;
    let deadline = Instant::now() + GIVE_UP;
    let end = loop {
        assert!(Instant::now() < deadline, "the key never expired");
        let read = table.fetch(&ID).await;
        match read {
            Ok(f) if f.origin == Origin::L1 => {
                assert_eq!(f.value.as_str(), "first", "the current value, from L1");
                failures_seen |= table.stats().early_refresh_failures > 0;
            }
            other => break other,
        }
        tokio::time::sleep(Duration::from_millis(1)).await; // a steady reader's pace
    };
    assert!(
        failures_seen,
        "the failed refresh was counted while the value was still served"
    );
    let error = end.expect_err("the reload at expiry fails too");
    assert!(error.is_source(), "{error}");
    assert!(
        unix_ms() >= fresh_until_ms,
        "served from L1 until its freshness ended"
    );
    let s = table.stats();
    assert_eq!(
        (s.early_refreshes, s.early_refresh_failures),
        (1, 1),
        "{s:?}"
    );
    assert_eq!(
        source.calls(),
        3,
        "the first load, the refresh, the reload at expiry"
    );
}

/// The envelope a load writes is format 2 and records how long the load took; an envelope of
/// format 1 (an older EchoStore's) still decodes, as a value with no load time: it is never
/// refreshed early, and at its expiry the reader loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelopes_record_the_load_and_format_1_still_decodes() {
    let valkey = valkey();
    let source = Source::taking(Duration::from_millis(20));
    let store = store_on(&valkey.url()).await;
    let table = hot(&store, nth(&source), |t| {
        t.ttl(Duration::from_millis(300)).early_refresh(1.0)
    })
    .await;
    let mut conn = raw(&valkey.url()).await;

    table.get(&ID).await.expect("load");
    let bytes: Vec<u8> = conn.get("hot:{7}").await.expect("GET");
    assert_eq!(bytes[0], 2, "format 2");
    let delta_us = u32::from_le_bytes(bytes[17..21].try_into().expect("4 bytes"));
    assert!(
        delta_us >= 20_000,
        "the load's 20 ms are recorded: {delta_us} µs"
    );
    table.invalidate(&ID).await.expect("invalidate");

    let now = unix_ms();
    let old = envelope(now + 300, now, &"planted, format 1".to_owned());
    let _: () = conn.set_ex("hot:{7}", old, 60).await.expect("SET");
    let read = table.fetch(&ID).await.expect("decodes");
    assert_eq!(
        (read.origin, read.value.as_str()),
        (Origin::L2, "planted, format 1")
    );
    let (origin, _) = read_until_a_miss(&table).await.expect("the reload");
    assert_eq!(
        origin,
        Origin::Loaded,
        "no early refresh without a load time"
    );
    assert_eq!(table.stats().early_refreshes, 0);
    until("settled", || table.stats().in_flight == 0).await;
}
