//! A flight whose value L1 keeps nowhere (overtaken by a lost tracking connection, with Valkey
//! down) still answers its callers what it loaded; L1's older copy, no longer fresh, must not
//! outlive that answer as a stale stand-in, or the next read that serves a stale copy (fail-safe,
//! a soft timeout, a spent budget) takes the process back in time. Found by `echostore check
//! --faults all --tracking keys` (120 s, six processes): during an outage a process answered
//! v6123 from its own load and then v6120, L1's capped copy, as a stale answer.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{on_task, until, until_stats, valkey};
use echostore::{Store, Table};
use tokio::sync::watch;

/// A source whose n-th read answers `v<n>`; the second waits for the gate, the third fails.
#[derive(Clone)]
struct Rows {
    reads: Arc<AtomicUsize>,
    gate: watch::Sender<bool>,
}

impl Rows {
    fn new() -> Self {
        Rows {
            reads: Arc::new(AtomicUsize::new(0)),
            gate: watch::Sender::new(false),
        }
    }

    async fn read(self) -> Result<String, std::io::Error> {
        let n = self.reads.fetch_add(1, Ordering::SeqCst) + 1;
        if n == 2 {
            let mut open = self.gate.subscribe();
            let _ = open.wait_for(|open| *open).await;
        }
        match n {
            3 => Err(std::io::Error::other("the source is down")),
            n => Ok(format!("v{n}")),
        }
    }
}

async fn table(store: &Store, rows: &Rows) -> Table<u64, String> {
    let rows = rows.clone();
    store
        .table::<u64, String>("kept-nowhere")
        .ttl(Duration::from_millis(200))
        .stale_for(Duration::from_secs(3600))
        .jitter(0.0)
        .early_refresh(0.0)
        .fail_safe(true)
        .loader(move |_id: u64| rows.clone().read())
        .build()
        .await
        .expect("table")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_kept_nowhere_retires_the_older_stale_copy() {
    let mut valkey = valkey();
    let store = Store::builder()
        .valkey(valkey.url())
        .valkey_timeout(Duration::from_millis(500))
        .breaker_cooldown(Duration::from_secs(3600))
        .build()
        .await
        .expect("store");
    until("tracking is up", || store.is_coherent()).await;
    let rows = Rows::new();
    let t = table(&store, &rows).await;

    assert_eq!(*t.get(&1).await.expect("v1"), "v1");
    // v1's freshness ends; L1 keeps it as a stale copy (its window is an hour).
    until("v1 is no longer fresh", || t.peek_local(&1).is_none()).await;
    let second = on_task(&t, |t| async move { t.get(&1).await });
    until("the second read loads", || {
        rows.reads.load(Ordering::SeqCst) == 2
    })
    .await;
    // Valkey goes away under the flight: the tracking connection is lost, which overtakes it.
    valkey.stop();
    until("coherence is lost", || !store.is_coherent()).await;
    // Lost once the owners have taken the loss (every running flight overtaken), not only once
    // the tracking task has seen it: a flight landing between the two would keep v2 in L1.
    until_stats(&t, "the owners took the loss", |s| s.coherence_caps >= 1).await;
    rows.gate.send_replace(true);
    let second = second.await.expect("task").expect("the flight's own load");
    assert_eq!(*second, "v2", "the overtaken flight answers what it loaded");

    // The third read's load fails. Fail-safe serves a stale copy only if one at least as new as
    // v2 is at hand; v2 was kept nowhere and v1 is older, so the loader's error comes back.
    let served_before = t.stats().fail_safe_served;
    let third = t.get(&1).await;
    assert_eq!(
        rows.reads.load(Ordering::SeqCst),
        3,
        "the third read loaded"
    );
    match third {
        Ok(value) => panic!("answered {value} after v2: a stale copy older than the last answer"),
        Err(e) => assert!(e.to_string().contains("the source is down"), "{e}"),
    }
    assert_eq!(
        t.stats().fail_safe_served,
        served_before,
        "no stale copy served"
    );
}

/// The same for a stale answer read from Valkey: a read that serves Valkey's stale copy
/// (fail-safe) retires L1's older one, which would otherwise be served after it once Valkey is
/// gone, and L1 keeps the copy it answered as its stand-in instead. The reading store keeps no coherence, so its L1 still holds v1 when another store's put
/// lands on Valkey; the put's value is fresh for a millisecond only (`ttl_for`), so it is a stale
/// copy by the time v1 is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_answer_from_valkey_retires_the_older_stale_copy() {
    let mut valkey = valkey();
    let here = Store::builder()
        .valkey(valkey.url())
        .coherence(false)
        .valkey_timeout(Duration::from_millis(500))
        .breaker_cooldown(Duration::from_secs(3600))
        .build()
        .await
        .expect("store");
    let there = Store::builder()
        .valkey(valkey.url())
        .build()
        .await
        .expect("store");
    // The first read answers v1; every read after it fails.
    let reads = Arc::new(AtomicUsize::new(0));
    let here = stale_table(&here, &reads).await;
    let there = stale_table(&there, &Arc::new(AtomicUsize::new(1))).await;

    assert_eq!(*here.get(&1).await.expect("v1"), "v1");
    there.put(&1, "put".into()).await.expect("put");
    until("v1 is no longer fresh", || here.peek_local(&1).is_none()).await;
    let second = here
        .fetch(&1)
        .await
        .expect("fail-safe: Valkey's stale copy");
    assert_eq!(
        (second.value.as_str(), second.origin),
        ("put", echostore::Origin::Stale),
        "the load failed and Valkey's stale copy was served"
    );

    // With Valkey gone too, the next read's load fails and fail-safe serves L1's stand-in: the
    // copy last answered, never v1.
    valkey.stop();
    let third = here.fetch(&1).await.expect("fail-safe: L1's stand-in");
    assert_eq!(
        (third.value.as_str(), third.origin),
        ("put", echostore::Origin::Stale),
        "not back in time"
    );
    assert_eq!(reads.load(Ordering::SeqCst), 3, "every read loaded");
}

/// A fail-safe table whose source answers `v<n>` to its first read (counted in `reads`) and fails
/// every later one; a value written as `put` is fresh for a millisecond.
async fn stale_table(store: &Store, reads: &Arc<AtomicUsize>) -> Table<u64, String> {
    let reads = Arc::clone(reads);
    store
        .table::<u64, String>("stale-answer")
        .ttl(Duration::from_millis(200))
        .ttl_for(|value: &String| {
            let put = value == "put";
            Duration::from_millis(if put { 1 } else { 200 })
        })
        .stale_for(Duration::from_secs(3600))
        .jitter(0.0)
        .early_refresh(0.0)
        .fail_safe(true)
        .loader(move |_id: u64| {
            let n = reads.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                match n {
                    1 => Ok(format!("v{n}")),
                    _ => Err(std::io::Error::other("the source is down")),
                }
            }
        })
        .build()
        .await
        .expect("table")
}
