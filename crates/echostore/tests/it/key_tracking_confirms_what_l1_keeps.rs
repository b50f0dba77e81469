//! Key tracking (`Tracking::Keys`): Valkey pushes a change only to the connections that read the
//! key, and a value enters L1 from the data connection, which Valkey does not track. So an L1
//! entry lives past `unconfirmed_l1_life` only once the store's tracking connection has read the
//! key and found the same bytes; a change made before that read is found by the comparison, one
//! made after is pushed.

use crate::common;

use std::time::Duration;

use common::{Proxy, Source, command_calls, raw, table_on, until, until_async, valkey};
use echostore::{Origin, Store, Table, Tracking};

/// A table `kt` (ttl a minute) on a store with key tracking on `url`, keeping what Valkey has not
/// confirmed for `unconfirmed`.
async fn keyed_table(url: &str, source: &Source, unconfirmed: Duration) -> Table<u64, String> {
    let store = Store::builder()
        .valkey(url)
        .require_valkey(true)
        .tracking(Tracking::Keys)
        .unconfirmed_l1_life(unconfirmed)
        .build()
        .await
        .expect("store");
    until("tracking is up", || store.is_coherent()).await;
    table_on(&store, "kt", source, |t| {
        t.ttl(Duration::from_secs(60)).jitter(0.0)
    })
    .await
}

/// With no unconfirmed life at all, a value read from Valkey is an L1 hit only once the tracking
/// connection confirmed it; from then on another store's put reaches this L1 through a push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_value_lives_its_ttl_and_hears_of_changes() {
    let valkey = valkey();
    let url = valkey.url();
    let source = Source::open();
    let here = keyed_table(&url, &source, Duration::ZERO).await;
    let there = keyed_table(&url, &source, Duration::ZERO).await;
    there.put(&7, "v1".into()).await.expect("put v1");

    until_async("the value is an L1 hit once confirmed", async || {
        let fetched = here.fetch(&7).await.expect("fetch");
        assert_eq!(*fetched.value, "v1");
        fetched.origin == Origin::L1
    })
    .await;
    let pushed = here.stats().invalidations;
    there.put(&7, "v2".into()).await.expect("put v2");
    until_async("the put reached this L1", async || {
        *here.fetch(&7).await.expect("fetch").value == "v2"
    })
    .await;
    assert!(
        here.stats().invalidations > pushed,
        "the change came by a push"
    );
    assert_eq!(source.calls(), 0, "every value came from a put");
}

/// A store `here`, behind a proxy, reads v1 of id 7 from Valkey; before the answer comes back,
/// another store writes v2 and `meanwhile` acts on the proxy. Returns `here`, its proxy and the
/// read's answer, which is what Valkey held when the read ran.
async fn a_read_overtaken_by_a_write(
    url: &str,
    source: &Source,
    meanwhile: impl FnOnce(&Proxy),
) -> (Table<u64, String>, Proxy) {
    let proxy = Proxy::start(url).await;
    let here = keyed_table(&proxy.url(), source, Duration::from_secs(60)).await;
    let there = keyed_table(url, source, Duration::from_secs(60)).await;
    there.put(&7, "v1".into()).await.expect("put v1");

    // The read runs on Valkey, its answer is held on the way back: v2 lands after it.
    let mut conn = raw(url).await;
    let reads = command_calls(&mut conn, "getrange").await;
    proxy.hold_replies();
    let read = tokio::spawn({
        let here = here.clone();
        async move { here.fetch(&7).await }
    });
    until_async("the read ran on Valkey", async || {
        command_calls(&mut conn, "getrange").await > reads
    })
    .await;
    there.put(&7, "v2".into()).await.expect("put v2");
    meanwhile(&proxy);
    proxy.release_replies();
    let first = read.await.expect("task").expect("fetch");
    assert_eq!(
        *first.value, "v1",
        "the read answers what Valkey held when it ran"
    );
    (here, proxy)
}

/// A store reads v1, and before its tracking connection reads the key, another store writes v2:
/// Valkey pushes nothing to the first store (it tracked nothing yet). Its confirmation finds v2
/// instead of v1, and the entry leaves L1 (which would otherwise keep it as a stale copy for a
/// minute, the ttl).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_before_the_key_is_tracked_is_found_by_the_confirmation() {
    let valkey = valkey();
    let source = Source::open();
    let (here, _proxy) = a_read_overtaken_by_a_write(&valkey.url(), &source, |_| {}).await;
    until_async("this L1 let go of v1", async || {
        *here.fetch(&7).await.expect("fetch").value == "v2"
    })
    .await;
    assert_eq!(source.calls(), 0, "every value came from a put");
}

/// As above, with the tracking connection unable to confirm v1 yet (what Valkey sends it waits
/// at the proxy): until that read, Valkey would push no change of the key, so the entry answers
/// no read meanwhile. A read begun after v2's put returned reads v2 from Valkey, not v1 from L1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_after_a_write_never_takes_an_entry_awaiting_confirmation() {
    let valkey = valkey();
    let source = Source::open();
    // The confirmation's answer waits at the proxy from before the read's answer comes back.
    let (here, proxy) =
        a_read_overtaken_by_a_write(&valkey.url(), &source, Proxy::hold_pushes).await;
    let after = here.fetch(&7).await.expect("fetch");
    assert_eq!(
        *after.value, "v2",
        "a read begun after the put returned reads it"
    );
    assert_eq!(after.origin, Origin::L2);
    proxy.release_pushes();
    assert_eq!(source.calls(), 0, "every value came from a put");
}

/// A store reads v1, and its tracking connection reads the key before another store writes v2:
/// the confirmation (v1 held) and the push of v2 are both on their way (waiting at the proxy).
/// A `peek` meanwhile answers nothing rather than Valkey's v2: the confirmation makes v1 fresh
/// in L1 again until the push lands, so a read then would answer v1 after the peek's v2, going
/// back. Found by `echostore check` (a batch read's L1 hit older than what the process had
/// answered before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peek_answers_nothing_newer_than_an_entry_awaiting_confirmation() {
    let valkey = valkey();
    let url = valkey.url();
    let source = Source::open();
    let proxy = Proxy::start(&url).await;
    let here = keyed_table(&proxy.url(), &source, Duration::from_secs(60)).await;
    let there = keyed_table(&url, &source, Duration::from_secs(60)).await;
    there.put(&7, "v1".into()).await.expect("put v1");

    let mut conn = raw(&url).await;
    let tracking_reads = command_calls(&mut conn, "get").await;
    proxy.hold_pushes();
    let read = here.fetch(&7).await.expect("fetch");
    assert_eq!((read.value.as_str(), read.origin), ("v1", Origin::L2));
    until_async("the tracking connection read the key", async || {
        command_calls(&mut conn, "get").await > tracking_reads
    })
    .await;
    there.put(&7, "v2".into()).await.expect("put v2");

    let peeked = here.peek(&7).await.expect("peek");
    assert_eq!(
        peeked.map(|f| f.value.to_string()),
        None,
        "the peek answers nothing while v1 may become fresh again"
    );
    proxy.release_pushes();
    until_async("the push reached this L1", async || {
        *here.fetch(&7).await.expect("fetch").value == "v2"
    })
    .await;
    assert_eq!(source.calls(), 0, "every value came from a put");
}

/// A key type with the default `from_rendered`: a confirmation of its key cannot be told apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Sku(u32);

impl echostore::Key for Sku {
    fn render(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Owned(self.0.to_string().into_bytes())
    }
}

/// An id of a key type that cannot be parsed back (the default `from_rendered`) is confirmed
/// too: the confirmation, which names only the key, finds it among the ids waiting. Else the value
/// a put kept would wait not fresh until a read of Valkey kept it again (a local peek answering
/// nothing meanwhile); kept for `unconfirmed_l1_life` unconfirmed instead, it would miss the
/// pushes of a key the tracking connection never read (`echostore check --tracking keys` found
/// reads 735 ms stale that way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_that_cannot_be_parsed_back_is_confirmed() {
    let valkey = valkey();
    let store = Store::builder()
        .valkey(valkey.url())
        .require_valkey(true)
        .tracking(Tracking::Keys)
        .unconfirmed_l1_life(Duration::ZERO)
        .build()
        .await
        .expect("store");
    until("tracking is up", || store.is_coherent()).await;
    let skus = store
        .table::<Sku, String>("sku")
        .ttl(Duration::from_secs(60))
        .loader(|sku: Sku| async move { Ok::<_, std::io::Error>(format!("sku {}", sku.0)) })
        .build()
        .await
        .expect("table");

    // A put, not a load: a miss also has the tracking connection read the id's keys (for a
    // loser's wake-ups), and the push of its own write would then flush the whole table.
    skus.put(&Sku(1), "sku 1".to_owned()).await.expect("put");
    until("the put's value is confirmed, with no read since", || {
        skus.peek_local(&Sku(1)).is_some()
    })
    .await;
    let read = skus.fetch(&Sku(1)).await.expect("fetched");
    assert_eq!((read.origin, read.value.as_str()), (Origin::L1, "sku 1"));
    assert_eq!(skus.stats().source_reads, 0);
}
