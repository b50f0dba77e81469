//! What a request does when another process holds the regeneration lock: each policy, and the
//! promise they share — the loser never reads the source while the lock is held.

use crate::common;

use std::time::Duration;

use common::{
    Source, hold_lock, raw, settled, spawn_fetch, stale_on_valkey, until_async, until_stats,
    valkey, valkey_table,
};
use echostore::{Error, LoserPolicy, Origin, Table};
use redis::AsyncCommands;

const LOCK: &str = "lock:pol:{1}";
const VALUE: &str = "pol:{1}";

/// The token of "another process" that holds the lock.
const OTHER: &str = "other-process-token";

async fn table(url: &str, source: &Source, policy: LoserPolicy<String>) -> Table<u64, String> {
    valkey_table(url, "pol", source, |t| {
        t.ttl(Duration::from_secs(60))
            .stale_for(Duration::from_secs(60))
            .jitter(0.0)
            // A serve-stale loser without a copy polls for up to lock_ttl: 60 s rather than the
            // default 5 s, so that it outlasts the test's own waits (`until` allows 30 s).
            .lock_ttl(Duration::from_secs(60))
            .losers(policy)
    })
    .await
}

/// Holds the lock as another process, starts a fetch on a table with `policy`, waits until it
/// polls, then has the "winner" (another store) write the value — a put also drops its lock.
/// Returns the loser's answer and its table.
async fn lose_then_see_the_winner_write(
    policy: LoserPolicy<String>,
    source: &Source,
) -> (echostore::Fetched<String>, Table<u64, String>) {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    hold_lock(&mut conn, LOCK, OTHER).await;
    let t = table(&valkey.url(), source, policy).await;

    let waiting = spawn_fetch(&t, 1);
    until_stats(&t, "the loser is polling", |s| s.poll_waits > 0).await;
    let winner = table(&valkey.url(), &Source::open(), LoserPolicy::FailFast).await;
    winner.put(&1, "from-the-winner".into()).await.expect("put");
    let answer = waiting.await.expect("task").expect("value");
    settled(&t).await;
    (answer, t)
}

/// Fail fast: `LockBusy` at once, the other holder's lock untouched, no source read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_fast_returns_lock_busy() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    hold_lock(&mut conn, LOCK, OTHER).await;
    let source = Source::open();
    let t = table(&valkey.url(), &source, LoserPolicy::FailFast).await;

    let err = t.get(&1).await.expect_err("busy");
    assert!(matches!(err, Error::LockBusy), "{err}");
    assert!(err.is_lock_busy());
    let s = t.stats();
    assert_eq!((s.failed_fast, s.lock_lost, s.source_reads), (1, 1, 0));
    let lock: Option<String> = conn.get(LOCK).await.expect("GET");
    assert_eq!(
        lock.as_deref(),
        Some(OTHER),
        "the other holder's lock still exists"
    );
    settled(&t).await;
}

/// Default: the placeholder at once, written to no cache (not L1, not Valkey).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_is_served_and_never_cached() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    hold_lock(&mut conn, LOCK, OTHER).await;
    let source = Source::open();
    let t = table(
        &valkey.url(),
        &source,
        LoserPolicy::Default("placeholder".into()),
    )
    .await;

    for _ in 0..2 {
        let f = t.fetch(&1).await.expect("default");
        assert_eq!(
            (f.origin, f.value.as_str()),
            (Origin::Default, "placeholder")
        );
    }
    let s = t.stats();
    assert_eq!(
        (s.defaults_served, s.l1_hits, s.source_reads),
        (2, 0, 0),
        "not in L1"
    );
    assert_eq!(s.l1_len, 0);
    let stored: Option<Vec<u8>> = conn.get(VALUE).await.expect("GET");
    assert_eq!(stored, None, "not on Valkey");
    settled(&t).await;
}

/// Serve stale: while another process rebuilds, the stale copy is served at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_stale_serves_the_stale_copy_while_the_winner_rebuilds() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    // An earlier fill with a short logical life and a long stale window.
    let writer = valkey_table(&valkey.url(), "pol", &source, |t| {
        t.ttl(Duration::from_millis(30))
            .stale_for(Duration::from_secs(60))
            .jitter(0.0)
    })
    .await;
    writer.get(&1).await.expect("first fill");
    settled(&writer).await;
    // The loser below starts with an empty L1: the only copy is Valkey's, stale once its
    // envelope says so.
    until_async("the copy's logical life is over", async || {
        stale_on_valkey(&mut conn, VALUE).await
    })
    .await;
    hold_lock(&mut conn, LOCK, OTHER).await; // another process is rebuilding

    let t = table(&valkey.url(), &source, LoserPolicy::ServeStale).await;
    let f = t.fetch(&1).await.expect("stale");
    assert_eq!((f.origin, f.value.as_str()), (Origin::Stale, "value-1-1"));
    assert!(
        f.stale_by.is_some_and(|d| d > Duration::ZERO),
        "{:?}",
        f.stale_by
    );
    let s = t.stats();
    assert_eq!((s.stale_served, s.lock_lost, s.source_reads), (1, 1, 0));
    assert_eq!(source.calls(), 1, "only the earlier fill read the source");
    settled(&t).await;
}

/// Serve stale with no stale copy polls, and returns the winner's value once it lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_stale_without_a_copy_polls_for_the_winner() {
    let source = Source::open();
    let (f, _) = lose_then_see_the_winner_write(LoserPolicy::ServeStale, &source).await;
    assert_eq!(
        (f.origin, f.value.as_str()),
        (Origin::L2, "from-the-winner")
    );
    assert_eq!(source.calls(), 0, "the loser never read the source");
}

/// Poll: re-reads until the winner's value is fresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_returns_the_winners_value() {
    let source = Source::open();
    let policy = LoserPolicy::Poll {
        every: Duration::from_millis(5),
        up_to: Duration::from_secs(30),
    };
    let (f, t) = lose_then_see_the_winner_write(policy, &source).await;
    assert_eq!(
        (f.origin, f.value.as_str()),
        (Origin::L2, "from-the-winner")
    );
    let s = t.stats();
    assert_eq!((s.source_reads, s.lock_lost, s.lock_won), (0, 1, 0));
    assert_eq!(s.l2_hits, 1);
    assert_eq!(source.calls(), 0);
}

/// Poll gives up after `up_to` with `WaitTimeout`, without reading the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_times_out_with_wait_timeout() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    hold_lock(&mut conn, LOCK, OTHER).await;
    let source = Source::open();
    let up_to = Duration::from_millis(50);
    let policy = LoserPolicy::Poll {
        every: Duration::from_millis(5),
        up_to,
    };
    let t = table(&valkey.url(), &source, policy).await;

    let err = t.get(&1).await.expect_err("timed out");
    assert!(
        matches!(err, Error::WaitTimeout { waited } if waited == up_to),
        "{err}"
    );
    assert!(t.stats().poll_waits >= 1);
    assert_eq!(source.calls(), 0);
    settled(&t).await;
}

/// A winner that crashed (its lock expires, nothing written): a polling loser takes over and
/// reads the source once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_winner_is_taken_over_by_a_poller() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    hold_lock(&mut conn, LOCK, OTHER).await; // the "crashed" winner's lock
    let source = Source::open();
    let policy = LoserPolicy::Poll {
        every: Duration::from_millis(10),
        up_to: Duration::from_secs(30),
    };
    let t = table(&valkey.url(), &source, policy).await;

    let taking_over = spawn_fetch(&t, 1);
    until_stats(&t, "the loser is polling", |s| s.poll_waits > 0).await;
    // Only now does the crashed winner's lock expire (nothing written): a lock that expired on
    // a timer of its own could be gone before a slow test's fetch ever met it.
    let expiring: bool = conn.pexpire(LOCK, 1).await.expect("PEXPIRE");
    assert!(expiring, "the crashed winner's lock was still there");
    let f = taking_over.await.expect("task").expect("taken over");
    assert_eq!((f.origin, f.value.as_str()), (Origin::Loaded, "value-1-1"));
    let s = t.stats();
    assert_eq!((s.lock_lost, s.lock_won, s.source_reads), (1, 1, 1));
    assert_eq!(source.calls(), 1);
    let lock: Option<String> = conn.get(LOCK).await.expect("GET");
    assert_eq!(lock, None, "the taker released its own lock");
    settled(&t).await;
}
