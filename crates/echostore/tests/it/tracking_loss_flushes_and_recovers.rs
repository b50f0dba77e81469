//! Losing coherence: a killed, silent or restarted tracking connection leaves every L1 of the
//! store keeping what it holds for at most `unconfirmed_l1_life` (from the moment the connection
//! was last known to deliver), as it keeps what it loads meanwhile; when tracking is back, L1 is
//! flushed, and tracking works again. (A single server: these tests kill and restart it.)

use crate::common;

use std::time::Duration;

use common::{
    Proxy, Source, coherent_store, kill_tracking_connections, long_lived, patient_store, raw,
    settled, table_on, until, until_stats, valkey, warm,
};
use echostore::{Origin, Tracking};

/// Killing the tracking connection leaves L1 serving what it holds, briefly (no reload at once);
/// once tracking is back, L1 is flushed, and pushes work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_tracking_connection_caps_l1_and_flushes_it_once_back() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let store = coherent_store(&valkey.url(), None).await;
    let reader = long_lived(&store, &source).await;
    let writer = long_lived(&coherent_store(&valkey.url(), None).await, &source).await;
    warm(&reader).await;

    let killed = kill_tracking_connections(&mut conn).await;
    assert_eq!(killed, 2, "both stores' tracking connections were killed");
    until_stats(&reader, "the loss capped L1", |s| s.coherence_caps >= 1).await;
    assert_eq!(
        reader.stats().coherence_flushes,
        0,
        "nothing flushed at the loss"
    );
    until("tracking is back", || store.is_coherent()).await;
    until_stats(&reader, "flushed once back", |s| s.coherence_flushes >= 1).await;
    assert_eq!(
        reader.stats().l1_len,
        0,
        "nothing from before the loss is trusted"
    );

    assert_eq!(
        warm(&reader).await,
        "value-1-1",
        "re-read from Valkey, not the source"
    );
    let before = reader.stats().invalidations;
    writer.put(&1, "after the loss".into()).await.expect("put");
    until_stats(&reader, "pushes flow again", |s| s.invalidations > before).await;
    assert_eq!(*reader.get(&1).await.expect("re-read"), "after the loss");
    assert_eq!(source.calls(), 1);
    settled(&reader).await;
}

/// A tracking link that goes silent (the connection stays open, nothing comes back: a
/// black-holed network) is noticed by its health PING going unanswered, within
/// `SILENT_LINK_BOUND`: L1 keeps its entries for at most `unconfirmed_l1_life` from the last
/// answered PING, and tracking comes back (and flushes L1) once the link does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_tracking_link_is_noticed_and_caps_l1() {
    let valkey = valkey();
    let proxy = Proxy::start(&valkey.url()).await;
    let source = Source::open();
    let store = coherent_store(&proxy.url(), None).await;
    let reader = long_lived(&store, &source).await;
    warm(&reader).await;

    proxy.hold_pushes();
    until("the silence is noticed", || !store.is_coherent()).await;
    until_stats(&reader, "the loss capped L1", |s| s.coherence_caps >= 1).await;
    proxy.release_pushes();
    until("tracking is back", || store.is_coherent()).await;
    until_stats(&reader, "flushed once back", |s| s.coherence_flushes >= 1).await;
    let writer = long_lived(&coherent_store(&valkey.url(), None).await, &source).await;
    warm(&reader).await;
    let before = reader.stats().invalidations;
    writer
        .put(&1, "after the silence".into())
        .await
        .expect("put");
    until_stats(&reader, "pushes flow again", |s| s.invalidations > before).await;
    assert_eq!(*reader.get(&1).await.expect("re-read"), "after the silence");
    settled(&reader).await;
}

/// A round trip the tracking connection's loop waits on (here the subscription of a table that
/// starts while the link is silent) is held to the same bound as the health PING, not to
/// `valkey_timeout`: the silence is noticed although the store waits an hour for each reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_silent_while_a_table_starts_is_noticed() {
    let valkey = valkey();
    let proxy = Proxy::start(&valkey.url()).await;
    let source = Source::open();
    let store = patient_store(&proxy.url(), Duration::from_secs(3600)).await;
    until("tracking is up", || store.is_coherent()).await;
    let reader = long_lived(&store, &source).await;
    warm(&reader).await;

    proxy.hold_pushes();
    let started = tokio::spawn({
        let (store, source) = (store.clone(), source.clone());
        async move { table_on(&store, "started-late", &source, |t| t).await }
    });
    until("the silence is noticed", || !store.is_coherent()).await;
    until_stats(&reader, "the loss capped L1", |s| s.coherence_caps >= 1).await;
    proxy.release_pushes();
    until("tracking is back", || store.is_coherent()).await;
    let late = started.await.expect("the table started");
    assert_eq!(*late.get(&1).await.expect("read"), "value-1-2");
    settled(&late).await;
}

/// A Valkey restart (empty) is a lost connection too: L1 is capped, then flushed once tracking
/// is back, and reads reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valkey_restart_flushes_l1() {
    let mut valkey = valkey();
    let source = Source::open();
    let store = coherent_store(&valkey.url(), None).await;
    let reader = long_lived(&store, &source).await;
    warm(&reader).await;
    valkey.restart().expect("restart");
    until_stats(&reader, "the loss capped L1", |s| s.coherence_caps >= 1).await;
    until("tracking is back", || store.is_coherent()).await;
    let f = reader.fetch(&1).await.expect("reload");
    assert_eq!((f.origin, f.value.as_str()), (Origin::Loaded, "value-1-2"));
    settled(&reader).await;
}

/// While Valkey is away, the tracker's failed reconnect attempts cap and flush nothing more: L1
/// was capped once when tracking was lost, and tracking comes back once Valkey does. The attempts
/// are seen at a listener that takes the server's port and closes every connection it is given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_reconnect_attempts_flush_nothing_more() {
    let mut valkey = valkey();
    let source = Source::open();
    let store = coherent_store(&valkey.url(), None).await;
    let reader = long_lived(&store, &source).await;
    warm(&reader).await;
    let port = valkey.port();
    valkey.stop();
    until_stats(&reader, "the loss capped L1", |s| s.coherence_caps == 1).await;

    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_reuseaddr(true).expect("SO_REUSEADDR");
    socket
        .bind(([127, 0, 0, 1], port).into())
        .expect("the stopped server's port");
    let refuser = socket.listen(16).expect("listen");
    for _ in 0..3 {
        let (attempt, _) = refuser.accept().await.expect("a reconnect attempt");
        drop(attempt);
    }
    drop(refuser);
    assert!(!store.is_coherent());
    let s = reader.stats();
    assert_eq!(
        (s.coherence_caps, s.coherence_flushes),
        (1, 0),
        "three failed attempts, no cap nor flush"
    );

    valkey.restart().expect("restart");
    until("tracking is back", || store.is_coherent()).await;
    settled(&reader).await;
}

/// A lost tracking connection leaves L1 serving what it held (here for as long as a minute):
/// the next read is an L1 hit, not a load, until tracking is back and flushes it. (A flush at
/// the loss made every id a load at once, and again once its capped copy expired.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_tracking_connection_loads_nothing_at_once() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let store = common::builder_on(&valkey.url())
        .require_valkey(true)
        .unconfirmed_l1_life(std::time::Duration::from_secs(60))
        .build()
        .await
        .expect("store");
    until("tracking is up", || store.is_coherent()).await;
    let reader = long_lived(&store, &source).await;
    warm(&reader).await;
    kill_tracking_connections(&mut conn).await;
    until_stats(&reader, "the loss capped L1", |s| s.coherence_caps >= 1).await;
    let read = reader.fetch(&1).await.expect("read");
    assert_eq!(
        (read.origin, source.calls()),
        (Origin::L1, 1),
        "the copy from before the loss was dropped"
    );
}

/// A tag invalidated while a store's tracking was down, whose read of the marks then failed once
/// tracking was back (its data path still away), is heard of all the same: the failed read is
/// retried until one lands, and the copies the tag retired are no longer served. Before, the
/// store served them for the rest of their life (or until the table's next mark), and stamped
/// what it wrote below the mark, a miss to every other store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_missed_while_tracking_was_down_is_heard_though_its_read_failed() {
    let valkey = valkey();
    let proxy = Proxy::start(&valkey.url()).await;
    let source = Source::open();
    // No poll of the marks while tracking is down (a minute apart): the one read after the loss
    // is the read once tracking is back.
    let store = minute_unconfirmed(&proxy.url()).await;
    let reader = table_on(&store, "marked", &source, tagged).await;
    let other = coherent_store(&valkey.url(), None).await;
    let writer = table_on(&other, "marked", &source, tagged).await;
    assert_eq!(warm(&reader).await, "value-1-1");

    proxy.hold_pushes();
    until("the silence is noticed", || !store.is_coherent()).await;
    // The reader's data connection hangs from now (its read of the marks will fail), while its
    // next tracking connection, a new one, comes through.
    proxy.hold_open_connections();
    writer.invalidate_tag("t").await.expect("invalidate");
    proxy.release_pushes();
    until("tracking is back", || store.is_coherent()).await;
    until_stats(&reader, "the read of the marks failed", |s| {
        s.marks_read_failures >= 1
    })
    .await;
    proxy.release();

    until_stats(&reader, "the retried read hears the mark", |s| {
        s.marks_taken >= 1
    })
    .await;
    assert_eq!(
        *reader.get(&1).await.expect("read"),
        "value-1-2",
        "the copy the mark retired is not served"
    );
    settled(&reader).await;
}

/// A tag one store heard of and another missed, then lost with Valkey's data (a restart, empty),
/// is put back by the store that knew it: the other hears of it, and what either writes after is
/// current for both. Before, the two stayed divided until the table's next mark: each copy the
/// store that missed it wrote was stamped below it, a miss to the other, one more source read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_valkey_lost_is_put_back_by_a_store_that_knew_it() {
    let mut valkey = valkey();
    let proxy = Proxy::start(&valkey.url()).await;
    let source = Source::open();
    let unaware = minute_unconfirmed(&proxy.url()).await;
    let missed = table_on(&unaware, "marked", &source, tagged).await;
    let knew = table_on(
        &coherent_store(&valkey.url(), None).await,
        "marked",
        &source,
        tagged,
    )
    .await;
    warm(&knew).await;

    proxy.hold_pushes();
    until("the silence is noticed", || !unaware.is_coherent()).await;
    knew.invalidate_tag("t").await.expect("invalidate");
    valkey.restart().expect("restart"); // Valkey forgets the mark
    until_stats(&knew, "the other store saw the loss", |s| {
        s.coherence_caps >= 1
    })
    .await;
    proxy.release_pushes();
    until_stats(&missed, "the store that missed the mark hears it", |s| {
        s.marks_taken >= 1
    })
    .await;

    let loads = source.calls();
    missed.get(&2).await.expect("a load, written to Valkey");
    let read = knew.fetch(&2).await.expect("read");
    assert_eq!(
        (read.origin, source.calls()),
        (Origin::L2, loads + 1),
        "the copy the store that missed the mark wrote is current for the other"
    );
    settled(&missed).await;
}

/// A minute's life, no jitter, every entry under tag `t`.
fn tagged(t: echostore::TableBuilder<u64, String>) -> echostore::TableBuilder<u64, String> {
    t.ttl(std::time::Duration::from_secs(60))
        .jitter(0.0)
        .tags(|_: &u64, _: &String| ["t"])
}

/// A store on `url` whose L1 keeps what it holds for a minute while tracking is down, and which
/// polls the marks that seldom: nothing but tracking tells it of a mark.
async fn minute_unconfirmed(url: &str) -> echostore::Store {
    let store = common::builder_on(url)
        .require_valkey(true)
        .unconfirmed_l1_life(std::time::Duration::from_secs(60))
        .build()
        .await
        .expect("store");
    until("tracking is up", || store.is_coherent()).await;
    store
}

/// The marks key lost alone, while Valkey keeps the copies a tag retired (the key evicted under
/// `maxmemory`, deleted by hand, or a failover to a replica that missed the latest mark): a store
/// that knew the marks hears the change, sees its latest mark gone and puts the marks back, so a
/// store started after it takes the retired copy for a miss. Before, only a store's full read of
/// the marks (at its start, or when tracking came back) noticed a loss: the store that knew kept
/// judging by its own copy of the marks, and the newcomer, finding none, served the retired copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marks_key_lost_alone_is_put_back_before_a_newcomer_reads_a_retired_copy() {
    marks_key_lost_alone(Tracking::Broadcast).await;
}

/// The same under key tracking: the store that knew the marks read them on its data connection,
/// so the key's loss is pushed to it as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marks_key_lost_alone_is_put_back_under_key_tracking() {
    marks_key_lost_alone(Tracking::Keys).await;
}

async fn marks_key_lost_alone(tracking: Tracking) {
    let valkey = valkey();
    let source = Source::open();
    let store = common::builder_on(&valkey.url())
        .require_valkey(true)
        .tracking(tracking)
        .build()
        .await
        .expect("store");
    until("tracking is up", || store.is_coherent()).await;
    let knew = table_on(&store, "lost_marks", &source, tagged).await;
    let retired = knew.get(&1).await.expect("loaded").to_string();
    knew.invalidate_tag("t").await.expect("invalidate");

    let mut conn = raw(&valkey.url()).await;
    let marks = "lost_marks:{}marks";
    let _: () = redis::cmd("DEL")
        .arg(marks)
        .query_async(&mut conn)
        .await
        .expect("DEL");
    common::until_async("the store that knew the marks put them back", async || {
        common::exists(&mut conn, marks).await
    })
    .await;

    let newcomer = table_on(
        &coherent_store(&valkey.url(), None).await,
        "lost_marks",
        &source,
        tagged,
    )
    .await;
    let read = newcomer.fetch(&1).await.expect("the newcomer's read");
    assert_ne!(
        (read.origin, read.value.to_string()),
        (Origin::L2, retired),
        "the newcomer served the copy the tag retired"
    );
    settled(&knew).await;
}
