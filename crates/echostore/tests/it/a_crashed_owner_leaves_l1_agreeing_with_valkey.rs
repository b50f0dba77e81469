//! An owner that crashes with Valkey writes queued loses those writes — and L1 loses them too:
//! a `put` drops its id from L1 at once and enters L1 only once its write has landed on Valkey,
//! so after a crash and restart L1 never holds a value that Valkey does not.

use crate::common;

use common::{
    POISON, Source, Touchy, on_task, pause_writes, raw, read_envelope, settled, store_on, touchy,
    unpause, until, until_async, valkey,
};
use echostore::{Error, Origin};

/// `INFO clients`' `blocked_clients`: a client postponed by `CLIENT PAUSE` is counted there.
async fn blocked_clients(conn: &mut common::RawConn) -> u64 {
    common::info_count(conn, "clients", "blocked_clients").await
}

/// Valkey holds writes (`CLIENT PAUSE WRITE`): put `v1` of the id is running (held at Valkey),
/// put `v2` of the id is queued behind it in the owner. The owner crashes (a miss on a poisoned
/// copy of the id does it). `v2`'s caller gets `Stopped` and its write never happens; `v1` lands once Valkey resumes. The restarted owner's
/// L1 does not hold `v2` (issue #9: it did, while Valkey held `v1`): the next get reads `v1`
/// from Valkey.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_lost_in_a_crash_are_lost_from_l1_too() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let t = touchy(&store_on(&valkey.url()).await, &source).await;
    let id = Touchy(POISON, 0);
    t.put(&id, "v0".into()).await.expect("put v0"); // also loads the put script

    pause_writes(&mut conn, 60_000).await;
    let v1 = tokio::spawn({
        let (t, id) = (t.clone(), id.clone());
        async move { t.put(&id, "v1".into()).await }
    });
    until_async("put v1 is held at Valkey", async || {
        blocked_clients(&mut conn).await >= 1
    })
    .await;
    // Put v2 reaches the owner (queued behind v1): polling it once sends its message. Then a
    // miss on a poisoned copy of the id being written goes to the owner (no read of an id being
    // written), whose flights map compares it with the id's writes: it panics.
    let mut v2 = std::pin::pin!(t.put(&id, "v2".into()));
    assert!(futures::poll!(v2.as_mut()).is_pending());
    let crashed = t.get(&Touchy(POISON, 1)).await;
    assert!(matches!(crashed, Err(Error::Stopped)), "{crashed:?}");
    assert!(
        matches!(v2.await, Err(Error::Stopped)),
        "v2's caller learns"
    );
    until("the supervisor restarted the owner", || {
        t.stats().owner_restarts == 1
    })
    .await;

    unpause(&mut conn).await;
    v1.await.expect("task").expect("v1 landed on Valkey");
    let stored = read_envelope::<String>(&mut conn, "touchy:{666}")
        .await
        .expect("stored");
    assert_eq!(stored.value, "v1", "v2's write was lost with the owner");

    let seen = t.fetch(&id).await.expect("a value");
    assert_eq!(
        (seen.origin, seen.value.as_str()),
        (Origin::L2, "v1"),
        "L1 held nothing Valkey does not"
    );
    assert_eq!(t.fetch(&id).await.expect("L1").value.as_str(), "v1");
    settled(&t).await;
}

/// A restarted owner treats every id as unknown: L1 is dropped once the handles point at it,
/// so nothing the dead owner kept outlives it (a push sent to the dead owner was lost with it,
/// and its writes on the wire land with nobody to take them). The next read of an id the dead
/// owner held in L1 reads Valkey.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_owner_keeps_nothing_of_the_dead_ones_l1() {
    let valkey = valkey();
    let source = Source::open();
    // Coherent first: tracking coming up flushes L1, which would drop the load too.
    let t = touchy(&common::coherent_store(&valkey.url(), None).await, &source).await;
    let flushes = t.stats().coherence_flushes;
    t.get(&Touchy(1, 0)).await.expect("load");
    // This key type cannot be parsed back: the load's own push flushes L1; read it in again.
    common::until_stats(&t, "the load's push arrived", |s| {
        s.coherence_flushes > flushes
    })
    .await;
    assert_eq!(
        t.fetch(&Touchy(1, 0)).await.expect("read").origin,
        Origin::L2
    );
    assert_eq!(
        t.fetch(&Touchy(1, 0)).await.expect("read").origin,
        Origin::L1
    );
    // The reads' flights answered on their own tasks: the count below is of the next one only.
    common::settled(&t).await;
    source.hold();
    let first = on_task(&t, |t| async move { t.get(&Touchy(POISON, 1)).await });
    common::until_stats(&t, "the poisoned flight runs", |s| s.in_flight == 1).await;
    let crashed = t.get(&Touchy(POISON, 2)).await;
    assert!(matches!(crashed, Err(Error::Stopped)), "{crashed:?}");
    assert!(matches!(first.await.expect("task"), Err(Error::Stopped)));
    until("the supervisor restarted the owner", || {
        t.stats().owner_restarts == 1
    })
    .await;
    common::until_stats(&t, "the restarted owner dropped L1", |s| s.l1_len == 0).await;
    source.release();
    let read = t.fetch(&Touchy(1, 0)).await.expect("read");
    assert_eq!(
        (read.value.as_str(), read.origin),
        ("value-1-1", Origin::L2)
    );
}
