//! A caller that drops its future neither cancels the flight for the others nor leaves a waiter
//! behind.

use crate::common;

use common::{BACKENDS, Source, herd, local_table, settled, spawn_fetch, until_stats};
use echostore::Origin;

/// Nine of ten callers give up; the tenth gets the value, and the flight leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_callers_do_not_cancel_the_flight() {
    for backend in BACKENDS {
        let source = Source::gated();
        let table = local_table("cancel", &source, |t| t.l1_backend(backend)).await;

        let callers = herd(&table, 10, 3);
        until_stats(&table, "all ten are waiting", |s| s.coalesced == 9).await;
        let mut callers = callers.into_iter();
        let stayer = callers.next().expect("ten callers");
        for quitter in callers {
            quitter.abort();
            assert!(quitter.await.expect_err("aborted").is_cancelled());
        }
        source.release();

        assert_eq!(
            *stayer.await.expect("task").expect("value").value,
            "value-3-1"
        );
        assert_eq!(source.calls(), 1);
        // No flight or waiter left, once the owner has ended the flight that answered.
        settled(&table).await;
    }
}

/// Even when every caller gives up, the flight finishes and fills L1 for the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flight_everyone_left_still_fills_the_cache() {
    let source = Source::gated();
    let table = local_table("abandoned", &source, |t| t).await;

    let caller = spawn_fetch(&table, 5);
    until_stats(&table, "the fill is in flight", |s| s.in_flight == 1).await;
    caller.abort();
    let _ = caller.await;
    source.release();
    settled(&table).await; // the abandoned flight landed

    let next = table.fetch(&5).await.expect("value");
    assert_eq!(next.origin, Origin::L1, "the abandoned flight filled L1");
    assert_eq!(source.calls(), 1);
}

/// A caller who joins after the flight's leader gave up still learns that it joined: `Coalesced`,
/// never the flight's own origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_stays_a_joiner_when_the_leader_leaves() {
    let source = Source::gated();
    let table = local_table("leader-left", &source, |t| t).await;

    let leader = spawn_fetch(&table, 4);
    until_stats(&table, "the leader's flight runs", |s| s.in_flight == 1).await;
    leader.abort();
    assert!(leader.await.expect_err("aborted").is_cancelled());
    let joiner = spawn_fetch(&table, 4);
    until_stats(&table, "the joiner joined", |s| s.coalesced == 1).await;
    source.release();

    let answer = joiner.await.expect("task").expect("value");
    assert_eq!(
        answer.origin,
        Origin::Coalesced,
        "it joined a running flight"
    );
    assert_eq!(*answer.value, "value-4-1");
    assert_eq!(source.calls(), 1, "the loader ran once");
    settled(&table).await;
}
