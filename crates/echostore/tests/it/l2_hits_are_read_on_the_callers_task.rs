//! A miss whose value is fresh on Valkey is read on the caller's own task: L1 keeps the value, the
//! source is never read, and a herd costs one read and one flight at most. No caller waits on
//! another's read, so one that stops polling holds up nobody; a write or a push that overtakes a
//! read keeps its value out of L1.

use crate::common;

use std::time::Duration;

use common::{
    Proxy, Source, answers, coherent_table, herd, on_task, patient_store, settled, table_on, until,
    until_stats, valkey, valkey_table,
};
use echostore::{Origin, Table};

/// Table `reads` on a store that reaches Valkey through `proxy` (which holds only the data
/// connection, never the tracking one), reading `source`; its coherence is up.
async fn through(proxy: &Proxy, source: &Source) -> Table<u64, String> {
    let store = patient_store(&proxy.url(), Duration::from_secs(30)).await; // a hold is a delay
    until("its tracking is up", || store.is_coherent()).await;
    table_on(&store, "reads", source, |t| t).await
}

/// Another store wrote id 5; a herd of 50 on this store misses it together. All 50 get the
/// value, Valkey was read at most twice for them (the first caller's read, and the flight the
/// others joined meanwhile), each get is counted once, the loader never ran, and the value stays
/// in L1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_herd_on_a_value_on_valkey_reads_it_once() {
    let valkey = valkey();
    let source = Source::open();
    let writer = valkey_table(&valkey.url(), "reads", &source, |t| t).await;
    writer.put(&5, "written".into()).await.expect("put");
    // Coherent before it reads: the flush that comes with tracking going up withdraws reads.
    let reader = coherent_table(&valkey.url(), "reads", &source, |t| t).await;

    for answer in answers(herd(&reader, 50, 5)).await {
        assert_eq!(*answer.expect("a value").value, "written");
    }
    let stats = reader.stats();
    assert!((1..=2).contains(&stats.l2_hits), "{stats:?}");
    assert_eq!(
        stats.l2_hits + stats.coalesced + stats.l1_hits,
        50,
        "{stats:?}"
    );
    assert_eq!((source.calls(), stats.source_reads), (0, 0));
    assert_eq!(reader.fetch(&5).await.expect("kept").origin, Origin::L1);
    settled(&reader).await;
}

/// The first caller of id 7 is polled once (it lists a read and sends its `GET`, which a proxy
/// holds) and then kept but never polled again — a `select!` arm that lost, a stream nobody
/// drives. Another caller of id 7 gets its value all the same once the proxy lets requests
/// through (the owner's flight answers it), and the first caller's read is withdrawn when its
/// future is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_stops_polling_holds_up_nobody() {
    let valkey = valkey();
    let source = Source::open();
    let writer = valkey_table(&valkey.url(), "reads", &source, |t| t).await;
    writer.put(&7, "written".into()).await.expect("put");
    let proxy = Proxy::start(&valkey.url()).await;
    let reader = through(&proxy, &source).await;
    reader
        .fetch(&1)
        .await
        .expect("a first read, through the proxy");
    // Its flight answered on its own task; the count below is of the next one only.
    crate::common::settled(&reader).await;

    proxy.hold();
    let mut first = Box::pin(reader.fetch(&7));
    assert!(
        futures::poll!(first.as_mut()).is_pending(),
        "its GET is held"
    );
    let other = on_task(&reader, |reader| async move {
        tokio::time::timeout(Duration::from_secs(30), reader.fetch(&7)).await
    });
    until_stats(&reader, "the other caller's flight is out", |s| {
        s.in_flight == 1
    })
    .await;
    proxy.release();
    let fetched = other
        .await
        .expect("task")
        .expect("not held up")
        .expect("a value");
    assert_eq!(*fetched.value, "written");
    drop(first);
    assert_eq!(reader.fetch(&7).await.expect("L1").origin, Origin::L1);
    assert_eq!(source.calls(), 1, "only id 1 was ever loaded");
    settled(&reader).await;
}

/// A put of id 3 is held on its way to Valkey; a get of id 3 made meanwhile does not read
/// Valkey's older value into L1: it waits behind the write (the owner queues it) and answers the
/// put's value, and L1 then holds the put's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_never_starts_while_its_id_is_written() {
    let valkey = valkey();
    let source = Source::open();
    let proxy = Proxy::start(&valkey.url()).await;
    let table = through(&proxy, &source).await;
    table.put(&3, "before".into()).await.expect("first put");
    table.invalidate(&1).await.expect("warms the connection");

    proxy.hold();
    let put = on_task(&table, |table| async move {
        table.put(&3, "after".into()).await
    });
    until("the put reached the owner", || table.stats().l1_len == 0).await;
    let get = on_task(&table, |table| async move { table.fetch(&3).await });
    until_stats(&table, "the get waits in the owner", |s| s.in_flight == 1).await;
    proxy.release();
    put.await.expect("task").expect("the put landed");
    let fetched = get.await.expect("task").expect("a value");
    assert_eq!(*fetched.value, "after", "{fetched:?}");
    assert_eq!(*table.get(&3).await.expect("L1"), "after");
    assert_eq!(source.calls(), 0);
    settled(&table).await;
}

/// Store A's read of id 9 is held on its way to Valkey (a proxy holds A's requests, not the
/// pushes coming back); store B writes id 9 meanwhile, and the push reaches A while the read is
/// out. The read neither keeps nor answers what it finds: a read that a push overtook may have
/// read the older value. The owner's flight, ordered after the push, answers and keeps B's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_overtaken_by_a_push_is_not_kept() {
    let valkey = valkey();
    let source = Source::open();
    let proxy = Proxy::start(&valkey.url()).await;
    let a = through(&proxy, &source).await;
    let b = valkey_table(&valkey.url(), "reads", &source, |t| t).await;
    b.put(&9, "v1".into()).await.expect("B's first put");
    until_stats(&a, "A heard of B's first put", |s| s.invalidations == 1).await;
    a.fetch(&1).await.expect("a first read, through the proxy");

    proxy.hold();
    let reader = on_task(&a, |a| async move { a.fetch(&9).await });
    until("A's read of id 9 is held at the proxy", || {
        proxy.waiting() == 1
    })
    .await;
    b.put(&9, "v2".into()).await.expect("B's second put");
    until_stats(&a, "A heard of it while its read is out", |s| {
        s.invalidations == 2
    })
    .await;
    proxy.release();

    let fetched = reader.await.expect("task").expect("a value");
    assert_eq!(
        (fetched.origin, fetched.value.as_str()),
        (Origin::L2, "v2"),
        "the flight read Valkey after B's write"
    );
    let next = a.fetch(&9).await.expect("a value");
    assert_eq!(
        (next.origin, next.value.as_str()),
        (Origin::L1, "v2"),
        "the flight after the push kept B's value"
    );
    assert_eq!(source.calls(), 1, "only id 1 was ever loaded");
}
