//! A stale copy is servable only until `fresh_until + stale_for`, checked when it is *served*, not
//! when it was read; and a copy that another process has since invalidated is never served.
//! Fail-safe and the soft timeout are the two paths that serve a copy read long before.

use crate::common;

use std::time::Duration;

use common::{
    Source, exists, hold_lock, raw, read_envelope, settled, spawn_fetch, stale_on_valkey, unix_ms,
    until, until_async, until_stats, valkey, valkey_table,
};
use echostore::{Error, LoserPolicy, Origin, Table, TableBuilder};

const TTL: Duration = Duration::from_millis(50);
const VALUE: &str = "win:{1}";
const LOCK: &str = "lock:win:{1}";

/// The shared settings: ttl 50 ms, no jitter, fail-safe, and `stale_for`.
fn window(
    stale_for: Duration,
) -> impl FnOnce(TableBuilder<u64, String>) -> TableBuilder<u64, String> {
    move |t| t.ttl(TTL).jitter(0.0).stale_for(stale_for).fail_safe(true)
}

/// A loader that fails (once its gate opens), as a source that is down.
fn failing(source: &Source) -> impl FnOnce(TableBuilder<u64, String>) -> TableBuilder<u64, String> {
    let loader = source.answering(|_, _| Err(std::io::Error::other("the source is down")));
    move |t| t.loader(loader)
}

/// Another store puts `"old"` and waits until the copy on Valkey is past its freshness. Returns
/// the end of its stale window (unix ms) and the writer.
async fn a_stale_copy(url: &str, stale_for: Duration) -> (u64, Table<u64, String>) {
    let writer = valkey_table(url, "win", &Source::open(), window(stale_for)).await;
    writer.put(&1, "old".into()).await.expect("put");
    let mut conn = raw(url).await;
    let stored = read_envelope::<String>(&mut conn, VALUE)
        .await
        .expect("stored");
    until_async("the copy on Valkey is stale", async || {
        stale_on_valkey(&mut conn, VALUE).await
    })
    .await;
    let window_end = stored.fresh_until_ms + stale_for.as_millis() as u64;
    (window_end, writer)
}

/// Waits until a copy's stale window has closed: its key has expired on Valkey (its physical
/// life, `ttl + stale_for`, is over) and the wall clock is past `fresh_until + stale_for` (the
/// serve-time check runs on the monotonic clock from a wall reading truncated to the ms: one ms
/// later at most).
async fn until_the_window_closed(conn: &mut common::RawConn, window_end: u64) {
    until_async("the stale copy expired on Valkey", async || {
        !exists(conn, VALUE).await
    })
    .await;
    until("the stale window is over", || unix_ms() > window_end + 1).await;
}

/// Fail-safe with `stale_for` 300 ms and a load that fails after the window: the copy read at the
/// start of the load is not served (issue #9: it was, 1.06 s stale); the waiter gets the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_safe_serves_no_copy_past_its_window() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let stale_for = Duration::from_millis(300);
    let (window_end, _writer) = a_stale_copy(&valkey.url(), stale_for).await;
    let source = Source::gated();
    let failing_loader = failing(&source);
    let t = valkey_table(&valkey.url(), "win", &source, |t| {
        failing_loader(window(stale_for)(t))
    })
    .await;

    let waiting = spawn_fetch(&t, 1);
    until("the winner reads the source", || source.calls() == 1).await;
    until_the_window_closed(&mut conn, window_end).await;
    source.release();
    let answer = waiting.await.expect("task");
    assert!(matches!(answer, Err(Error::Source(_))), "{answer:?}");
    let s = t.stats();
    assert_eq!((s.fail_safe_served, s.stale_served, s.errors), (0, 0, 1));
    settled(&t).await;
}

/// The soft timeout (1 s) fires after the copy's window (300 ms) has closed: the waiters are not
/// answered with it (issue #9: they were); they wait for the load and get its value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soft_timeout_serves_no_copy_past_its_window() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let stale_for = Duration::from_millis(300);
    let soft = Duration::from_secs(1);
    let (window_end, _writer) = a_stale_copy(&valkey.url(), stale_for).await;
    let source = Source::gated();
    let t = valkey_table(&valkey.url(), "win", &source, |t| {
        window(stale_for)(t).soft_timeout(soft)
    })
    .await;

    let waiting = spawn_fetch(&t, 1);
    until("the winner reads the source", || source.calls() == 1).await;
    until_the_window_closed(&mut conn, window_end).await;
    // The behaviour under test: the soft timeout passing (its timer started before the source
    // read was counted) while the load is still held at the gate.
    tokio::time::sleep(soft).await;
    assert!(
        !waiting.is_finished(),
        "no early answer with an expired copy"
    );
    source.release();
    let answer = waiting.await.expect("task").expect("the load's value");
    assert_eq!(
        (answer.origin, answer.value.as_str(), answer.stale_by),
        (Origin::Loaded, "value-1-1", None)
    );
    let s = t.stats();
    assert_eq!((s.soft_timeouts, s.stale_served, s.source_reads), (0, 0, 1));
    settled(&t).await;
}

/// A poller holding a stale copy sees the value and the lock vanish (another process
/// invalidated the id), contends again and wins; its load fails. Fail-safe serves nothing: the
/// copy it read before the invalidation is gone (issue #9: it served the invalidated value).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poller_drops_its_copy_when_the_id_is_invalidated() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let stale_for = Duration::from_secs(60);
    let (_, writer) = a_stale_copy(&valkey.url(), stale_for).await;
    hold_lock(&mut conn, LOCK, "another-process").await; // another process rebuilds
    let source = Source::open();
    let failing_loader = failing(&source);
    let t = valkey_table(&valkey.url(), "win", &source, |t| {
        failing_loader(window(stale_for)(t)).losers(LoserPolicy::Poll {
            every: Duration::from_millis(10),
            up_to: Duration::from_secs(30),
        })
    })
    .await;

    let waiting = spawn_fetch(&t, 1);
    until_stats(&t, "the loser polls with its stale copy", |s| {
        s.poll_waits > 0
    })
    .await;
    writer.invalidate(&1).await.expect("invalidate");
    let answer = waiting.await.expect("task");
    assert!(matches!(answer, Err(Error::Source(_))), "{answer:?}");
    let s = t.stats();
    assert_eq!((s.lock_lost, s.lock_won, s.source_reads), (1, 1, 1));
    assert_eq!((s.fail_safe_served, s.stale_served), (0, 0));
    settled(&t).await;
}

/// The same in a batch read of two ids (one id alone reads as a `get`): the batch's load fails
/// after another process invalidated id 1, so id 1's release finds the lock not its own and
/// fail-safe serves it nothing, while id 2, whose lock held, gets its stale copy. Before, the
/// batch answered fail-safe before its release and served id 1's invalidated copy, even without
/// coherence to hear of the invalidate (as here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_safe_in_a_batch_serves_nothing_after_the_id_was_invalidated_mid_load() {
    let valkey = valkey();
    let stale_for = Duration::from_secs(60);
    let (_, writer) = a_stale_copy(&valkey.url(), stale_for).await;
    writer.put(&2, "old 2".into()).await.expect("put");
    let mut conn = raw(&valkey.url()).await;
    until_async("id 2's copy on Valkey is stale", async || {
        stale_on_valkey(&mut conn, "win:{2}").await
    })
    .await;
    let source = Source::gated();
    let gate = source.clone();
    // Without coherence: the invalidate is not heard here, only the lock tells.
    let store = common::builder_on(&valkey.url()).coherence(false).build();
    let t = store
        .await
        .expect("store")
        .table::<u64, String>("win")
        .batch_loader(move |_ids: Vec<u64>| {
            let gate = gate.clone();
            async move {
                gate.read().await;
                Err::<std::collections::HashMap<u64, String>, _>(std::io::Error::other("down"))
            }
        });
    let t = window(stale_for)(t).build().await.expect("table");

    let waiting = tokio::spawn({
        let t = t.clone();
        async move { t.fetch_many([1_u64, 2]).await }
    });
    until("the batch reads the source", || source.calls() == 1).await;
    writer.invalidate(&1).await.expect("invalidate");
    source.release();
    let answers: std::collections::HashMap<u64, _> =
        waiting.await.expect("task").into_iter().collect();
    assert!(
        matches!(answers[&1], Err(Error::Source(_))),
        "{:?}",
        answers[&1]
    );
    let kept = answers[&2].as_ref().expect("id 2's stale copy");
    assert_eq!((kept.value.as_str(), kept.origin), ("old 2", Origin::Stale));
    let s = t.stats();
    assert_eq!((s.fail_safe_served, s.release_skipped), (1, 1), "{s:?}");
    settled(&t).await;
}

/// A winner holding a stale copy loads; meanwhile another process invalidates the id (dropping
/// the lock). The load fails: the release finds the lock not its own, so fail-safe serves
/// nothing (issue #9: it served the invalidated copy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_safe_serves_nothing_after_the_id_was_invalidated_mid_load() {
    let valkey = valkey();
    let stale_for = Duration::from_secs(60);
    let (_, writer) = a_stale_copy(&valkey.url(), stale_for).await;
    let source = Source::gated();
    let failing_loader = failing(&source);
    let t = valkey_table(&valkey.url(), "win", &source, |t| {
        failing_loader(window(stale_for)(t))
    })
    .await;

    let waiting = spawn_fetch(&t, 1);
    until("the winner reads the source", || source.calls() == 1).await;
    writer.invalidate(&1).await.expect("invalidate");
    source.release();
    let answer = waiting.await.expect("task");
    assert!(matches!(answer, Err(Error::Source(_))), "{answer:?}");
    let s = t.stats();
    assert_eq!(
        (s.release_skipped, s.released),
        (1, 0),
        "the lock was not ours"
    );
    assert_eq!((s.fail_safe_served, s.stale_served), (0, 0));
    settled(&t).await;
}
