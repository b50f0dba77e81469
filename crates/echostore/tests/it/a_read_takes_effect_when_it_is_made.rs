//! A read takes effect when `get`/`fetch` is called: an L1 hit is read then, and a miss reaches
//! the owner when its future is first polled.

use crate::common;

use common::{Source, local_table, settled};
use echostore::Origin;

/// A hit's future, awaited after a put, answers with L1 as it was at the call; the next read
/// sees the put.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hit_answers_with_l1_as_it_was_at_the_call() {
    let source = Source::open();
    let table = local_table("read-at-call", &source, |t| t).await;
    table.get(&1).await.expect("fill");

    let read = table.fetch(&1);
    table.put(&1, "put".to_owned()).await.expect("put");
    let earlier = read.await.expect("hit");
    assert_eq!(
        (earlier.origin, earlier.value.as_str()),
        (Origin::L1, "value-1-1"),
        "the read was made before the put"
    );
    let later = table.fetch(&1).await.expect("hit");
    assert_eq!((later.origin, later.value.as_str()), (Origin::L1, "put"));
    assert_eq!(table.stats().l1_hits, 2);
    assert_eq!(source.calls(), 1);
    settled(&table).await;
}

/// A miss's future sends nothing until it is polled: dropped unpolled, it starts no flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpolled_miss_starts_no_flight() {
    let source = Source::gated();
    let table = local_table("unpolled", &source, |t| t).await;

    drop(table.get(&1));
    // The owner takes messages in order: once this put is answered, a fill sent before it would
    // have registered its flight (held at the gated source).
    table.put(&2, "put".to_owned()).await.expect("put");
    let stats = table.stats();
    assert_eq!(stats.in_flight, 0, "no flight was started");
    assert_eq!(stats.coalesced, 0);
    assert_eq!(source.calls(), 0, "the loader never ran");
}
