//! `put` and `invalidate` that arrive while a fill is in flight win over it: its value is stored
//! nowhere, and its waiters take the put's value where one landed (in L1 here, on Valkey from
//! another process).

use crate::common;

use common::{
    BACKENDS, Source, coherent_store, hold_lock, local_table, on_task, pause_writes, raw, settled,
    spawn_fetch, unpause, until, until_stats, valkey, valkey_table,
};
use echostore::Origin;
use redis::AsyncCommands;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A put during a fill: the fill's value is stored nowhere, and its caller, like everyone after,
/// gets the put's (what L1 holds when the overtaken fill lands).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_during_a_fill_wins() {
    for backend in BACKENDS {
        let source = Source::gated();
        let table = local_table("put-wins", &source, |t| t.l1_backend(backend)).await;

        let leader = spawn_fetch(&table, 1);
        until_stats(&table, "the fill is in flight", |s| s.in_flight == 1).await;
        table.put(&1, "from-put".into()).await.expect("put");
        source.release();

        let led = leader.await.expect("task").expect("answer");
        assert_eq!(
            (led.value.as_str(), led.origin),
            ("from-put", Origin::L1),
            "{backend:?}: the fill's caller takes what L1 holds"
        );
        let after = table.fetch(&1).await.expect("get");
        assert_eq!(*after.value, "from-put", "{backend:?}: the put won");
        assert_eq!(after.origin, Origin::L1);
        assert_eq!(source.calls(), 1);
        common::settled(&table).await;
    }
}

/// A put in another process during a fill drops the fill's lock, so its write is refused: the
/// fill's caller takes the put's value, which Valkey now holds, not the one it loaded. Every
/// later read finds the put's value there, and answering the loaded one first would make them go
/// back whenever it is the newer row (the source moved on again before its next write reached
/// Valkey: a hot `echostore check` found a read of v4505 followed by one of v4504 this way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_fenced_out_by_another_processs_put_answers_the_put() {
    let valkey = valkey();
    let source = Source::gated();
    let here = valkey_table(&valkey.url(), "fenced", &source, |t| t).await;
    let elsewhere = valkey_table(&valkey.url(), "fenced", &source, |t| t).await;

    let leader = spawn_fetch(&here, 1);
    // In flight is not yet locked: a put that lands before the fill's lock attempt is an L2 hit,
    // with nothing to fence out.
    until("the fill holds the lock and reads the source", || {
        source.calls() == 1
    })
    .await;
    elsewhere
        .put(&1, "from-elsewhere".into())
        .await
        .expect("put");
    source.release();

    let led = leader.await.expect("task").expect("answer");
    assert_eq!(
        here.stats().fenced_write_skipped,
        1,
        "the fill was fenced out"
    );
    assert_eq!(
        (led.value.as_str(), led.origin),
        ("from-elsewhere", Origin::L2),
        "the caller takes what Valkey holds"
    );
    let after = here.fetch(&1).await.expect("get");
    assert_eq!(*after.value, "from-elsewhere");
    settled(&here).await;
}

/// An invalidate in another process during a fill, with no copy of the id on Valkey: its `DEL`
/// changes no key, so this process hears nothing of it, and the fill's write is fenced out with
/// nothing on Valkey to answer instead. A caller that joined the fill after the invalidate
/// returned must not take the row read before it: it flies again, and takes a row read after.
/// The leader, whose read began before the invalidate, takes the loaded row. Before, both took
/// the older row (`echostore check`, three schemas side by side: a batch read joined a batch
/// member whose lock another schema's put had dropped 145 ms earlier, unheard, as that schema's
/// copy did not exist).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_fenced_out_by_an_unheard_invalidate_answers_only_its_earlier_callers() {
    let valkey = valkey();
    let source = Source::gated();
    let here = valkey_table(&valkey.url(), "unheard", &source, |t| t).await;
    let elsewhere = valkey_table(&valkey.url(), "unheard", &source, |t| t).await;

    let leader = spawn_fetch(&here, 1);
    until("the fill holds the lock and reads the source", || {
        source.calls() == 1
    })
    .await;
    elsewhere.invalidate(&1).await.expect("invalidate");
    let joiner = spawn_fetch(&here, 1);
    until_stats(&here, "the later read joined the fill", |s| {
        s.coalesced == 1
    })
    .await;
    source.release();

    let joined = joiner.await.expect("task").expect("answer");
    assert_eq!(
        *joined.value, "value-1-2",
        "the read that began after the invalidate takes a row read after it"
    );
    let led = leader.await.expect("task").expect("answer");
    assert_eq!(*led.value, "value-1-1", "the leader's read began before it");
    assert_eq!(
        (here.stats().fenced_write_skipped, source.calls()),
        (1, 2),
        "fenced out once, and one more source read, for the later caller"
    );
    settled(&here).await;
    // The fenced-out write's push, expected, never comes: it is withdrawn, not taken for the
    // later flight's.
    #[cfg(feature = "fault-injection")]
    until("nothing of the id is held", || here.ids_held() == 0).await;
}

/// Writes landing during every load cannot keep a caller loading: a caller that flies again
/// leads (or joins early) a flight of its own, which answers it even when fenced out in turn.
/// Each caller loads at most twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_fenced_out_again_and_again_loads_at_most_twice() {
    let valkey = valkey();
    let (permits, calls) = (
        Arc::new(tokio::sync::Semaphore::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let loader = {
        let (permits, calls) = (Arc::clone(&permits), Arc::clone(&calls));
        move |id: u64| {
            let (permits, calls) = (Arc::clone(&permits), Arc::clone(&calls));
            async move {
                let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                permits.acquire().await.expect("open").forget();
                Ok::<_, std::io::Error>(format!("value-{id}-{n}"))
            }
        }
    };
    let here = valkey_table(&valkey.url(), "again", &Source::open(), |t| {
        t.loader(loader)
    })
    .await;
    let elsewhere = valkey_table(&valkey.url(), "again", &Source::open(), |t| t).await;
    let loading = |n| {
        let calls = Arc::clone(&calls);
        move || calls.load(Ordering::SeqCst) == n
    };

    // Each round: a load, an invalidate elsewhere during it, a caller joining after that.
    let mut callers = vec![spawn_fetch(&here, 1)];
    for round in 1..=2 {
        until("a fill holds the lock and reads the source", loading(round)).await;
        elsewhere.invalidate(&1).await.expect("invalidate");
        callers.push(spawn_fetch(&here, 1));
        until_stats(&here, "the later read joined the fill", |s| {
            s.coalesced == round as u64
        })
        .await;
        permits.add_permits(1);
    }
    until("the last caller's own fill reads", loading(3)).await;
    permits.add_permits(1);

    let mut answers = Vec::new();
    for caller in callers {
        answers.push(caller.await.expect("task").expect("answer").value);
    }
    let answers: Vec<&str> = answers.iter().map(|v| v.as_str()).collect();
    assert_eq!(
        answers,
        ["value-1-1", "value-1-2", "value-1-3"],
        "each takes the first row read after its read began"
    );
    assert_eq!(
        (
            here.stats().fenced_write_skipped,
            calls.load(Ordering::SeqCst)
        ),
        (2, 3),
        "fenced out twice, one load per caller"
    );
    settled(&here).await;
}

/// As above, with a new holder between: the invalidate dropped the fill's lock and another
/// process took it. The fenced-out fill waits for that holder's copy (up to `lock_ttl`); with
/// none, whether the holder gave up or still loads, its row answers the callers who joined before
/// it asked for its lock, and the later ones fly again (here to wait on that holder's lock, until
/// it goes). Before, every caller took the older row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_fenced_out_while_another_holds_the_lock_answers_only_its_earlier_callers() {
    const LOCK: &str = "lock:holder:{1}";
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::gated();
    let fast_lock =
        |t: echostore::TableBuilder<u64, String>| t.lock_ttl(std::time::Duration::from_millis(200));
    let here = valkey_table(&valkey.url(), "holder", &source, fast_lock).await;
    let elsewhere = valkey_table(&valkey.url(), "holder", &source, |t| t).await;

    let leader = spawn_fetch(&here, 1);
    until("the fill holds the lock and reads the source", || {
        source.calls() == 1
    })
    .await;
    elsewhere.invalidate(&1).await.expect("invalidate");
    hold_lock(&mut conn, LOCK, "token-of-B").await;
    let joiner = spawn_fetch(&here, 1);
    until_stats(&here, "the later read joined the fill", |s| {
        s.coalesced == 1
    })
    .await;
    source.release();

    let led = leader.await.expect("task").expect("answer");
    assert_eq!(*led.value, "value-1-1", "the leader's read began before it");
    until_stats(&here, "the later caller waits on B's lock", |s| {
        s.lock_lost >= 1
    })
    .await;
    let deleted: i64 = conn.del(LOCK).await.expect("DEL");
    assert_eq!(deleted, 1, "B gives up, with nothing written");
    let joined = joiner.await.expect("task").expect("answer");
    assert_eq!(
        *joined.value, "value-1-2",
        "the read that began after the invalidate takes a row read after it"
    );
    assert_eq!(
        source.calls(),
        2,
        "one more source read, for the later caller"
    );
    settled(&here).await;
}

/// An invalidate during a fill: the fill's value is not stored, so the next get reads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidate_during_a_fill_keeps_its_value_out() {
    for backend in BACKENDS {
        let source = Source::gated();
        let table = local_table("invalidate-wins", &source, |t| t.l1_backend(backend)).await;

        let leader = spawn_fetch(&table, 1);
        until_stats(&table, "the fill is in flight", |s| s.in_flight == 1).await;
        table.invalidate(&1).await.expect("invalidate");
        source.release();

        assert_eq!(
            *leader.await.expect("task").expect("answer").value,
            "value-1-1"
        );
        let after = table.fetch(&1).await.expect("get");
        assert_eq!(
            after.origin,
            Origin::Loaded,
            "{backend:?}: the old fill was not stored"
        );
        assert_eq!(*after.value, "value-1-2");
        assert_eq!(source.calls(), 2);
        settled(&table).await;
    }
}

/// A miss after an invalidate does not join the overtaken flight: it starts its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_miss_after_an_invalidate_starts_a_new_flight() {
    let source = Source::gated();
    let table = local_table("fresh-flight", &source, |t| t).await;

    let old = spawn_fetch(&table, 1);
    until_stats(&table, "the first fill is in flight", |s| s.in_flight == 1).await;
    table.invalidate(&1).await.expect("invalidate");
    let new = spawn_fetch(&table, 1);
    until_stats(&table, "both flights exist", |s| s.in_flight == 2).await;
    assert_eq!(
        table.stats().coalesced,
        0,
        "the new miss did not join the old flight"
    );
    source.release();
    old.await.expect("task").expect("old answer");
    new.await.expect("task").expect("new answer");
    assert_eq!(source.calls(), 2);
    common::settled(&table).await; // a flight answers on its own task; its owner ends it
}

/// A miss queued behind an invalidation's Valkey write, then overtaken by a put, is not lost: it
/// launches once both writes have landed and answers with the put's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_miss_queued_behind_writes_is_answered_after_them() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let table = valkey_table(&valkey.url(), "queued", &source, |t| t).await;
    // An earlier value in L1 (and on Valkey): `l1_len` then shows when the owner has taken each
    // write below, which is all the ordering this test may rely on.
    table.put(&1, "earlier".into()).await.expect("earlier put");

    // Hold every write on Valkey, so the invalidation stays pending.
    pause_writes(&mut conn, 30_000).await;
    let invalidate = on_task(&table, |table| async move { table.invalidate(&1).await });
    // Two spawned tasks reach the owner in no fixed order: the miss goes only once the owner has
    // taken the invalidation (L1 emptied, its Valkey write pending), so that it is queued.
    until_stats(&table, "the owner took the invalidation", |s| s.l1_len == 0).await;
    let miss = spawn_fetch(&table, 1);
    until_stats(&table, "the miss is queued", |s| s.in_flight == 1).await;
    // The put's first poll sends it to the owner; a second miss sent after it joins the queued
    // flight (`coalesced`) only once the owner has taken the put, since a mailbox keeps order.
    // Valkey resumes only then, or the queued miss could launch between the two writes and read
    // the source.
    let mut put = Box::pin(table.put(&1, "from-put".into()));
    assert!(futures::poll!(&mut put).is_pending(), "Valkey is paused");
    let joiner = spawn_fetch(&table, 1);
    until_stats(&table, "the owner took the put, then the joiner", |s| {
        s.coalesced == 1
    })
    .await;
    unpause(&mut conn).await;

    invalidate.await.expect("task").expect("invalidate");
    put.await.expect("put");
    let joined = joiner.await.expect("task").expect("value");
    assert_eq!(joined.value.as_str(), "from-put");
    let answer = tokio::time::timeout(std::time::Duration::from_secs(30), miss)
        .await
        .expect("the queued miss is answered, not left hanging")
        .expect("task")
        .expect("value");
    assert_eq!(answer.value.as_str(), "from-put");
    assert_eq!(source.calls(), 0, "it read the put's value, not the source");
    common::settled(&table).await; // a flight answers on its own task; its owner ends it
}

/// A put that has returned has its value in L1: the next read is an L1 hit, every time (the
/// put's caller hears back before the owner takes the landing, and reads at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returned_put_is_in_l1_for_the_next_read() {
    let valkey = valkey();
    let source = Source::open();
    let store = coherent_store(&valkey.url(), None).await;
    let table = common::table_on(&store, "put-l1", &source, |t| t).await;
    for n in 0..200u64 {
        table.put(&n, format!("put {n}")).await.expect("put");
        let read = table.fetch(&n).await.expect("read");
        assert_eq!(
            (read.origin, read.value.as_str()),
            (Origin::L1, format!("put {n}").as_str()),
            "put {n}"
        );
    }
    assert_eq!(source.calls(), 0);
}
