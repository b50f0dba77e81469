//! `get_with` / `fetch_with`: a read's own loser policy for the flight it starts, and its own
//! wait bound; the table's settings for every other read.

use crate::common;

use std::time::Duration;

use common::{Source, on_task, settled, store_on, table_on, until_stats, valkey};
use echostore::{Error, LoserPolicy, ReadOptions};

/// While another store holds an id's lock (its load held at the source), a read with
/// `FailFast` fails at once with `LockBusy`, while a plain read on the same table polls and gets
/// the winner's value; the source is read once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_fast_read_does_not_wait_for_another_process() {
    let valkey = valkey();
    let source = Source::gated();
    let winner = table_on(&store_on(&valkey.url()).await, "opts", &source, |t| t).await;
    let loser = table_on(&store_on(&valkey.url()).await, "opts", &source, |t| t).await;
    let won = on_task(&winner, |t| async move { t.get(&1).await });
    until_stats(&winner, "the winner holds the lock", |s| s.lock_won == 1).await;
    let fast = ReadOptions::new().losers(LoserPolicy::FailFast);
    let answer = loser.get_with(&1, fast).await;
    assert!(matches!(answer, Err(Error::LockBusy)), "{answer:?}");
    let polling = on_task(&loser, |t| async move { t.get(&1).await });
    until_stats(&loser, "the plain read lost the lock too", |s| {
        s.lock_lost == 2
    })
    .await;
    source.release();
    assert_eq!(*won.await.expect("task").expect("value"), "value-1-1");
    assert_eq!(*polling.await.expect("task").expect("polled"), "value-1-1");
    assert_eq!(source.calls(), 1);
    settled(&loser).await;
}

/// A read bounded by `wait_at_most` answers `WaitTimeout` when its load is slower; the load goes
/// on and fills the cache for the next read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_wait_gives_up_while_the_load_goes_on() {
    let valkey = valkey();
    let source = Source::gated();
    let table = table_on(&store_on(&valkey.url()).await, "opts", &source, |t| t).await;
    let bounded = ReadOptions::new().wait_at_most(Duration::from_millis(20));
    let answer = table.get_with(&2, bounded).await;
    assert!(
        matches!(answer, Err(Error::WaitTimeout { .. })),
        "{answer:?}"
    );
    assert_eq!(table.stats().in_flight, 1, "the load goes on");
    source.release();
    settled(&table).await;
    assert_eq!(*table.get(&2).await.expect("cached"), "value-2-1");
    assert_eq!(source.calls(), 1);
}

/// Options out of range are refused, as the table's own are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_out_of_range_are_refused() {
    let valkey = valkey();
    let table = table_on(
        &store_on(&valkey.url()).await,
        "opts",
        &Source::open(),
        |t| t,
    )
    .await;
    let zero_poll = ReadOptions::new().losers(LoserPolicy::Poll {
        every: Duration::ZERO,
        up_to: Duration::from_secs(1),
    });
    assert!(matches!(
        table.get_with(&3, zero_poll).await,
        Err(Error::InvalidConfig(_))
    ));
}
