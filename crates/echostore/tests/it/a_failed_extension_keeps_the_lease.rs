//! A lease whose extension fails (refused here; in the field, a call that timed out on a loaded
//! machine) tries again sooner than its period: the lock then lives only on what is left of its
//! life since the last extension that landed, and a full period's wait left it one more try at
//! most. Before, the lock lapsed behind a few failed rounds while the load still ran, and
//! another process won it and read the source a second time (a batch of 2,000 ids on a loaded
//! cluster lost 226 of its locks that way).

use crate::common;

use std::time::Duration;

use common::{Source, on_task, raw, store_on, until_stats, valkey};
use echostore::{LoserPolicy, Table};

/// Long enough that the test's own steps (a poll, an `ACL SETUSER`), even on a loaded machine,
/// fit many times in what is left of the lock's life after three failed extensions (3 s).
const LOCK_TTL: Duration = Duration::from_secs(6);

/// A table of `url`'s store reading `source` under a lock of [`LOCK_TTL`], whose losers wait as
/// long as the test does.
async fn table(url: &str, source: &Source) -> Table<u64, String> {
    store_on(url)
        .await
        .table::<u64, String>("leased")
        .lock_ttl(LOCK_TTL)
        .losers(LoserPolicy::Poll {
            every: Duration::from_millis(10),
            up_to: Duration::from_secs(30),
        })
        .loader(source.loader())
        .build()
        .await
        .expect("table")
}

/// The winner's lease extends its lock once, then three extensions are refused (the lease's
/// commands taken from its user), then allowed again: the lease holds, so a read in another
/// store waits for the winner's load rather than reading the source again. Before, the three
/// refusals took three periods, the lock lapsed with the third, and the other store's read won
/// it (`source.calls()` 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_refused_three_times_still_holds_the_lock() {
    refused_three_times(false).await;
}

/// The same for a batch read's lease, which extends every lock it won in one round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_lease_refused_three_times_still_holds_the_locks() {
    refused_three_times(true).await;
}

async fn refused_three_times(batch: bool) {
    let valkey = valkey();
    let mut admin = raw(&valkey.url()).await;
    common::acl_setuser(
        &mut admin,
        "winner",
        &["on", ">secret", "~*", "&*", "+@all"],
    )
    .await;
    let source = Source::gated();
    let winner_url = valkey
        .url()
        .replacen("redis://", "redis://winner:secret@", 1);
    let (winner, other) = (
        table(&winner_url, &source).await,
        table(&valkey.url(), &source).await,
    );

    let won = on_task(&winner, move |t| async move {
        match batch {
            true => t.get_many([1, 2]).await.map(|rows| rows[&1].clone()),
            false => t.get(&1).await,
        }
    });
    let locks = if batch { 2 } else { 1 };
    until_stats(&winner, "the lease extended the locks", |s| {
        s.lease_extended >= locks
    })
    .await;
    let extended = winner.stats().lease_extended;
    common::acl_setuser(&mut admin, "winner", &["-set", "-eval", "-evalsha"]).await;
    // A refused round counts an error for each lock.
    let refused = 3 * locks;
    until_stats(&winner, "three rounds refused", |s| s.l2_errors >= refused).await;
    common::acl_setuser(&mut admin, "winner", &["+set", "+eval", "+evalsha"]).await;
    until_stats(
        &winner,
        "the next extension landed or found the lock gone",
        |s| s.lease_extended > extended || s.lease_lost >= 1,
    )
    .await;

    let waited = on_task(&other, |t| async move { t.get(&1).await });
    until_stats(
        &other,
        "the other store's read met the lock or won it",
        |s| s.lock_lost >= 1 || s.lock_won >= 1,
    )
    .await;
    source.release();
    let (won, waited) = (won.await.expect("task"), waited.await.expect("task"));
    assert_eq!(
        won.expect("the winner's read"),
        waited.expect("the other read")
    );
    assert_eq!(
        (source.calls(), winner.stats().lease_lost),
        (if batch { 2 } else { 1 }, 0),
        "the lock lapsed and the other store read the source again"
    );
}
