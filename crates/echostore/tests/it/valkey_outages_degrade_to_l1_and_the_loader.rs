//! A Valkey that is down at build, dies mid-run or comes back empty never becomes the outage:
//! tables serve from L1 and the loader (single-flight per process), a circuit breaker keeps a dead
//! Valkey to one connection attempt per cooldown, and a returning Valkey is picked up by itself.

use crate::common;

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{
    Source, answers, exists, herd, on_task, raw, settled, table_on, until, until_async,
    until_stats, valkey,
};
use echostore::{Error, Origin, Store, Table};

async fn degraded_store(url: &str, cooldown: Duration) -> Store {
    Store::builder()
        .valkey(url)
        .valkey_timeout(Duration::from_millis(500))
        .breaker_cooldown(cooldown)
        .build()
        .await
        .expect("build succeeds in degraded mode")
}

async fn table(store: &Store, source: &Source) -> Table<u64, String> {
    table_on(store, "out", source, |t| t).await
}

/// Nothing listens on the port: `build()` succeeds degraded, and a herd is still one source read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_valkey_at_build_serves_from_the_loader() {
    // Port 1, where nothing listens: a port that was merely free a moment ago (bind to port 0,
    // close) can be handed to the Valkey another test of this binary starts at the same time.
    let url = "redis://127.0.0.1:1/";
    let store = degraded_store(url, Duration::from_secs(3600)).await;
    assert!(store.is_degraded());
    let source = Source::gated();
    let t = table(&store, &source).await;

    let callers = herd(&t, 100, 1);
    until_stats(&t, "the herd joined one flight", |s| s.coalesced == 99).await;
    source.release();
    for answer in answers(callers).await {
        assert_eq!(*answer.expect("served").value, "value-1-1");
    }
    let s = t.stats();
    assert_eq!(
        s.source_reads, 1,
        "single-flight in-process while Valkey is away"
    );
    assert!(s.l2_errors >= 1);
    assert_eq!(t.fetch(&1).await.expect("hit").origin, Origin::L1);
    settled(&t).await;

    let required = Store::builder()
        .valkey(url)
        .require_valkey(true)
        .build()
        .await;
    assert!(
        matches!(required, Err(Error::Valkey { .. })),
        "require_valkey refuses to start degraded"
    );
}

/// A dead endpoint (accepts, then hangs up) costs the breaker's trials (a first cooldown of
/// 50 ms, each next twice the last, up to one per `breaker_cooldown`), not one attempt per request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_valkey_costs_one_connection_attempt_per_cooldown() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("redis://{}/", listener.local_addr().expect("addr"));
    let accepted = Arc::new(AtomicUsize::new(0));
    std::thread::spawn({
        let accepted = Arc::clone(&accepted);
        move || {
            for conn in listener.incoming() {
                accepted.fetch_add(1, Ordering::SeqCst);
                drop(conn); // hang up at once
            }
        }
    });
    let store = degraded_store(&url, Duration::from_secs(3600)).await;
    let source = Source::open();
    let t = table(&store, &source).await;
    let after_build = accepted.load(Ordering::SeqCst);
    assert!(after_build >= 1, "build tried once");

    let began = std::time::Instant::now();
    for id in 0..2000 {
        t.get(&id).await.expect("served by the loader");
    }
    let took = began.elapsed();
    assert_eq!(source.calls(), 2000);
    // The client's own background reconnect after the failed PING (one attempt, no retry) may
    // still land; the 2,000 misses add only the breaker's trials, each after a cooldown twice
    // the last (50 ms, 100 ms, …): as many as fit in the time the misses took (a loaded machine
    // makes them slower, and gives the breaker more trials), each an attempt on a connection of
    // its own and that connection's one reconnect once it failed.
    let trials = trials_within(took, Duration::from_millis(50));
    let attempts = accepted.load(Ordering::SeqCst) - after_build;
    assert!(
        attempts <= 1 + 2 * trials,
        "{attempts} connection attempts for 2,000 misses in {took:?} ({trials} trials fit)"
    );
    assert!(t.stats().l2_errors >= 2000);
    settled(&t).await;
}

/// Valkey dies and comes back (empty) mid-run: the waiter in flight is answered, and the store
/// uses Valkey again without a restart of the application.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_restarted_empty_mid_run_is_picked_up_again() {
    let mut valkey = valkey();
    let url = valkey.url();
    let store = degraded_store(&url, Duration::from_millis(50)).await;
    assert!(!store.is_degraded());
    let source = Source::gated();
    let t = table(&store, &source).await;

    let in_flight = on_task(&t, |t| async move { t.get(&1).await });
    until("the winner reads the source", || source.calls() == 1).await;
    valkey.stop();
    valkey.restart().expect("an empty Valkey on the same port");
    source.release();
    let answer = in_flight.await.expect("task");
    assert_eq!(
        *answer.expect("the waiter is answered, not hung"),
        "value-1-1"
    );

    // The next misses go back to Valkey once the breaker lets a trial through: a new id each
    // try, until one of them is filled on the restarted Valkey.
    let mut conn = raw(&url).await;
    let mut id = 99;
    until_async("a miss refilled the restarted Valkey", async || {
        id += 1;
        t.get(&id).await.expect("served");
        exists(&mut conn, format!("out:{{{id}}}")).await
    })
    .await;
    assert!(!store.is_degraded());
    settled(&t).await;
    let other = Store::builder()
        .valkey(&url)
        .require_valkey(true)
        .build()
        .await
        .expect("store");
    let reader = table(&other, &Source::open()).await;
    let seen = reader.fetch(&id).await.expect("L2 hit");
    assert_eq!(
        seen.origin,
        Origin::L2,
        "the refill landed in the new Valkey"
    );
    settled(&reader).await;
}

/// How many trials a breaker whose cooldown starts at `first` and doubles can make in `span`:
/// one at each of `first`, `first·3`, `first·7`, … (the sum of the cooldowns so far).
fn trials_within(span: Duration, first: Duration) -> usize {
    let mut at = first;
    let mut cooldown = first;
    let mut trials = 0;
    while at <= span {
        trials += 1;
        cooldown *= 2;
        at += cooldown;
    }
    trials + 1
}
