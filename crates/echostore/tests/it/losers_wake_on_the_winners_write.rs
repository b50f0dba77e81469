//! Push wake-up: a polling loser waits on Valkey's pushes for its value and lock keys, so it
//! answers on the winner's write (or the crashed winner's lock expiry) rather than at its next
//! safety poll. The safety polls here are half a minute: a loser that answers without one was
//! woken by a push.

use crate::common;

use std::time::Duration;

use common::{
    Source, builder_on, coherent_store, raw, settled, spawn_fetch, table_on, until, until_stats,
    valkey,
};
use echostore::{LoserPolicy, Origin, Store, Table};

/// A loser whose safety poll would come after 30 s.
const SLOW_SAFETY_POLL: LoserPolicy<String> = LoserPolicy::Poll {
    every: Duration::from_secs(30),
    up_to: Duration::from_secs(60),
};

async fn loser_table(store: &Store, source: &Source) -> Table<u64, String> {
    table_on(store, "wake", source, |t| t.losers(SLOW_SAFETY_POLL)).await
}

/// The winner's write wakes the loser in another store: no safety poll, no second source read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loser_answers_on_the_winners_write() {
    let valkey = valkey();
    let source = Source::gated();
    let winner = loser_table(&coherent_store(&valkey.url(), None).await, &source).await;
    let loser = loser_table(&coherent_store(&valkey.url(), None).await, &source).await;
    let won = spawn_fetch(&winner, 1);
    until("the winner reads the source", || source.calls() == 1).await;
    let lost = spawn_fetch(&loser, 1);
    until_stats(&loser, "the loser lost the lock", |s| s.lock_lost == 1).await;
    source.release();

    let answer = lost.await.expect("task").expect("the winner's value");
    assert_eq!(
        (answer.origin, answer.value.as_str()),
        (Origin::L2, "value-1-1")
    );
    assert_eq!(
        won.await.expect("task").expect("loaded").origin,
        Origin::Loaded
    );
    let s = loser.stats();
    assert!(s.push_wakeups >= 1, "woken by a push: {s:?}");
    assert_eq!(s.poll_waits, 0, "no safety poll was needed");
    assert_eq!(source.calls(), 1);
    settled(&loser).await;
}

/// A crashed winner's lock expires; the expiry's push wakes the loser, which contends again,
/// wins and reads the source itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_winners_lock_expiry_wakes_the_loser() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let loser = loser_table(&coherent_store(&valkey.url(), None).await, &source).await;
    // The crashed winner: a lock with no process behind it, gone after 300 ms.
    let planted: Option<String> = redis::cmd("SET")
        .arg("lock:wake:{1}")
        .arg("token-of-a-crashed-winner")
        .arg("NX")
        .arg("PX")
        .arg(300)
        .query_async(&mut conn)
        .await
        .expect("SET NX PX");
    assert_eq!(planted.as_deref(), Some("OK"));

    let answer = loser.fetch(&1).await.expect("loaded after the expiry");
    assert_eq!(
        (answer.origin, answer.value.as_str()),
        (Origin::Loaded, "value-1-1")
    );
    let s = loser.stats();
    assert_eq!((s.lock_lost, s.lock_won), (1, 1));
    assert!(s.push_wakeups >= 1, "woken by the expiry's push: {s:?}");
    assert_eq!(s.poll_waits, 0, "no safety poll was needed");
    settled(&loser).await;
}

/// Without coherence the same loser waits for its safety poll (here a short one): it still
/// answers with the winner's value, woken by polling only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_coherence_losers_poll() {
    let valkey = valkey();
    let source = Source::gated();
    let polling = builder_on(&valkey.url())
        .coherence(false)
        .require_valkey(true)
        .build()
        .await
        .expect("store");
    let winner = loser_table(&coherent_store(&valkey.url(), None).await, &source).await;
    let loser = table_on(&polling, "wake", &source, |t| {
        t.losers(LoserPolicy::Poll {
            every: Duration::from_millis(5),
            up_to: Duration::from_secs(60),
        })
    })
    .await;
    let won = spawn_fetch(&winner, 1);
    until("the winner reads the source", || source.calls() == 1).await;
    let lost = spawn_fetch(&loser, 1);
    until_stats(&loser, "the loser polls", |s| s.poll_waits >= 1).await;
    source.release();
    assert_eq!(
        lost.await.expect("task").expect("value").value.as_str(),
        "value-1-1"
    );
    won.await.expect("task").expect("loaded");
    assert_eq!(loser.stats().push_wakeups, 0);
    assert_eq!(source.calls(), 1);
    settled(&loser).await;
}
