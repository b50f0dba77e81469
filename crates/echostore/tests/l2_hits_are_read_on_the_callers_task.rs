//! A miss whose value is fresh on Valkey is read on the caller's own task, once for however many
//! callers miss it together: the others join that read, L1 keeps the value, the source is never
//! read. A reader that gives up leaves its joiners answered (through the owner), and a write
//! that starts while a read is out keeps the read's value out of L1.

mod common;

use std::time::Duration;

use common::{Proxy, Source, answers, herd, settled, until, until_stats, valkey, valkey_table};
use echostore::{Origin, Store, Table};

/// Table `reads` on a store whose data connection goes through `proxy` (coherence off: only the
/// data connection passes the proxy), reading `source`.
async fn through(proxy: &Proxy, source: &Source) -> Table<u64, String> {
    let store = Store::builder()
        .valkey(proxy.url())
        .require_valkey(true)
        .coherence(false)
        .valkey_timeout(Duration::from_secs(30)) // a hold is a delay, not an outage
        .build()
        .await
        .expect("store through the proxy");
    store
        .table::<u64, String>("reads")
        .loader(source.loader())
        .start()
        .await
        .expect("table")
}

/// Another store wrote id 5; a herd of 50 on this store misses it together. All 50 get the
/// value, Valkey was read once for them (`l2_hits` 1: the others joined that read or hit L1),
/// the loader never ran, and the value stays in L1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_herd_on_a_value_on_valkey_reads_it_once() {
    let valkey = valkey();
    let source = Source::open();
    let writer = valkey_table(&valkey.url(), "reads", &source, |t| t).await;
    writer.put(&5, "written".into()).await.expect("put");
    let reader = valkey_table(&valkey.url(), "reads", &source, |t| t).await;

    for answer in answers(herd(&reader, 50, 5)).await {
        assert_eq!(*answer.expect("a value").value, "written");
    }
    let stats = reader.stats();
    assert_eq!(stats.l2_hits, 1, "one read of Valkey for the herd");
    assert_eq!(stats.coalesced + stats.l1_hits, 49, "{stats:?}");
    assert_eq!((source.calls(), stats.source_reads), (0, 0));
    assert_eq!(reader.fetch(&5).await.expect("kept").origin, Origin::L1);
    settled(&reader).await;
}

/// The first caller's read of id 7 is held on its way to Valkey (a proxy holds the requests);
/// nine more callers join it; then the first gives up (its task is aborted). The nine are told
/// to miss again, through the owner, and once Valkey answers they all get the value: no source
/// read, nothing left in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_gives_up_leaves_its_joiners_answered() {
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

    proxy.hold();
    let first = tokio::spawn({
        let reader = reader.clone();
        async move { reader.fetch(&7).await }
    });
    let joiners: Vec<_> = (0..9)
        .map(|_| {
            let reader = reader.clone();
            tokio::spawn(async move { reader.fetch(&7).await })
        })
        .collect();
    until_stats(&reader, "nine callers joined the read", |s| {
        s.coalesced == 9
    })
    .await;
    first.abort();
    assert!(first.await.expect_err("aborted").is_cancelled());
    proxy.release();

    for joiner in joiners {
        let fetched = joiner.await.expect("task").expect("a value");
        assert_eq!(*fetched.value, "written");
    }
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
    let put = tokio::spawn({
        let table = table.clone();
        async move { table.put(&3, "after".into()).await }
    });
    until("the put reached the owner", || table.stats().l1_len == 0).await;
    let get = tokio::spawn({
        let table = table.clone();
        async move { table.fetch(&3).await }
    });
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
/// out. The read answers what it then finds, but A does not keep it in L1: a read that a push
/// overtook may have read the older value, so the next fetch reads Valkey again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_overtaken_by_a_push_is_not_kept() {
    let valkey = valkey();
    let source = Source::open();
    let proxy = Proxy::start(&valkey.url()).await;
    let a_store = Store::builder()
        .valkey(proxy.url())
        .require_valkey(true)
        .valkey_timeout(Duration::from_secs(30)) // a hold is a delay, not an outage
        .build()
        .await
        .expect("store A through the proxy");
    until("A's tracking is up", || a_store.is_coherent()).await;
    let a = a_store
        .table::<u64, String>("reads")
        .loader(source.loader())
        .start()
        .await
        .expect("table A");
    let b = valkey_table(&valkey.url(), "reads", &source, |t| t).await;
    b.put(&9, "v1".into()).await.expect("B's first put");
    until_stats(&a, "A heard of B's first put", |s| s.invalidations == 1).await;
    a.fetch(&1).await.expect("a first read, through the proxy");

    proxy.hold();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let a = a.clone();
            tokio::spawn(async move { a.fetch(&9).await })
        })
        .collect();
    until_stats(&a, "one read of id 9 is out, one caller joined it", |s| {
        s.coalesced == 1
    })
    .await;
    b.put(&9, "v2".into()).await.expect("B's second put");
    until_stats(&a, "A heard of it while its read is out", |s| {
        s.invalidations == 2
    })
    .await;
    proxy.release();

    for reader in readers {
        let fetched = reader.await.expect("task").expect("a value");
        assert_eq!(*fetched.value, "v2", "the held GET ran after B's write");
    }
    let next = a.fetch(&9).await.expect("a value");
    assert_eq!(
        (next.origin, next.value.as_str()),
        (Origin::L2, "v2"),
        "the overtaken read was not kept in L1"
    );
    assert_eq!(source.calls(), 1, "only id 1 was ever loaded");
}
