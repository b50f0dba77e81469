//! `Table::events()`: every kind of event reaches a subscriber, from this process's own calls and
//! from another store's writes on the same Valkey.

use crate::common;

use std::time::Duration;

use common::{BACKENDS, Source, coherent_store, raw, table_on, until, until_async, valkey};
use echostore::{Event, EventKind, EvictionCause, InvalidatedBy, Table};
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::TryRecvError;

/// Receives until an event equal to `wanted` arrives (others are skipped); panics after 30 s.
async fn seen(events: &mut Receiver<Event<u64>>, wanted: Event<u64>) {
    let found = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match events.recv().await {
                Ok(event) if event == wanted => return,
                Ok(_) => {}
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    assert!(found.is_ok(), "never saw {wanted:?}");
}

fn event(id: Option<u64>, kind: EventKind) -> Event<u64> {
    Event { id, kind }
}

fn by(id: Option<u64>, by: InvalidatedBy) -> Event<u64> {
    event(id, EventKind::Invalidated { by })
}

/// Loads, a failed load, writes and every kind of invalidation, one store subscribed and a
/// second one writing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loads_writes_and_invalidations_reach_a_subscriber() {
    let valkey = valkey();
    let source = Source::open();
    let tagged = |t: echostore::TableBuilder<u64, String>| {
        t.tags(|_: &u64, _: &String| ["all"])
            .loader(|id: u64| async move {
                match id {
                    99 => Err(std::io::Error::other("the source is down")),
                    _ => Ok(format!("value-{id}")),
                }
            })
    };
    let a = table_on(
        &coherent_store(&valkey.url(), None).await,
        "ev",
        &source,
        tagged,
    )
    .await;
    let b = table_on(
        &coherent_store(&valkey.url(), None).await,
        "ev",
        &source,
        tagged,
    )
    .await;
    let mut events = a.events();

    a.get(&1).await.expect("load");
    seen(&mut events, event(Some(1), EventKind::Loaded)).await;
    a.get(&99).await.expect_err("fails");
    seen(&mut events, event(Some(99), EventKind::LoadFailed)).await;
    a.put(&1, "edited".to_owned()).await.expect("put");
    seen(&mut events, by(Some(1), InvalidatedBy::Put)).await;
    seen(&mut events, event(Some(1), EventKind::Written)).await;
    a.invalidate(&1).await.expect("invalidate");
    seen(&mut events, by(Some(1), InvalidatedBy::Invalidate)).await;
    a.delete(&2).await.expect("delete");
    seen(&mut events, by(Some(2), InvalidatedBy::Delete)).await;

    a.get(&3).await.expect("load");
    b.put(&3, "from b".to_owned()).await.expect("put");
    seen(&mut events, by(Some(3), InvalidatedBy::Push)).await;
    b.invalidate_tag("all").await.expect("tag");
    seen(&mut events, by(None, InvalidatedBy::Tag("all".into()))).await;
    b.clear().await.expect("clear");
    seen(&mut events, by(None, InvalidatedBy::Clear)).await;

    a.get(&4).await.expect("load");
    let mut conn = raw(&valkey.url()).await;
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut conn)
        .await
        .expect("FLUSHALL");
    seen(&mut events, by(None, InvalidatedBy::Flush)).await;
}

/// Evictions for room, on expiry and for idleness, on both backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evictions_reach_a_subscriber_on_both_backends() {
    for backend in BACKENDS {
        let source = Source::open();
        let small =
            common::local_table("small", &source, |t| t.l1_backend(backend).l1_capacity(16)).await;
        let mut events = small.events();
        for id in 0..200 {
            small.get(&id).await.expect("load");
        }
        small.stats(); // moka evicts in its upkeep, which a snapshot runs
        seen_kind(&mut events, EvictionCause::Size).await;

        let short = common::local_table("short", &source, |t| {
            t.l1_backend(backend)
                .ttl(Duration::from_millis(50))
                .jitter(0.0)
        })
        .await;
        let mut events = short.events();
        short.get(&1).await.expect("load");
        until_async("the entry expired and was read again", async || {
            short.get(&1).await.expect("read");
            matches!(next(&mut events), Some(e) if e.kind == expired())
        })
        .await;

        let idle = idle_table(backend, &source).await;
        let mut events = idle.events();
        idle.get(&1).await.expect("load");
        until("the entry idled out", || {
            idle.stats(); // moka evicts in its upkeep, which a snapshot runs
            idle.stats().l1_idle_evictions == 1
        })
        .await;
        seen_kind(&mut events, EvictionCause::Idle).await;
    }
}

fn expired() -> EventKind {
    EventKind::Evicted {
        cause: EvictionCause::Expired,
    }
}

fn next(events: &mut Receiver<Event<u64>>) -> Option<Event<u64>> {
    loop {
        match events.try_recv() {
            Ok(event) if event.kind == expired() => return Some(event),
            Ok(_) | Err(TryRecvError::Lagged(_)) => {}
            Err(_) => return None,
        }
    }
}

async fn seen_kind(events: &mut Receiver<Event<u64>>, cause: EvictionCause) {
    let found = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match events.recv().await {
                Ok(event) if event.kind == (EventKind::Evicted { cause }) => return,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    assert!(found.is_ok(), "never saw an eviction for {cause:?}");
}

async fn idle_table(backend: echostore::L1Backend, source: &Source) -> Table<u64, String> {
    common::local_table("idle", source, |t| {
        t.l1_backend(backend).l1_idle(Duration::from_millis(20))
    })
    .await
}

/// A subscriber that falls behind loses the oldest events and is told how many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_subscriber_loses_events_and_is_told() {
    let source = Source::open();
    let table = common::local_table("busy", &source, |t| t).await;
    let mut events = table.events();
    let loads = echostore::EVENTS_CAPACITY as u64 + 100;
    for id in 0..loads {
        table.get(&id).await.expect("load");
    }
    match events.recv().await {
        Err(tokio::sync::broadcast::error::RecvError::Lagged(lost)) => assert_eq!(lost, 100),
        other => panic!("expected a lag, got {other:?}"),
    }
    assert_eq!(
        table.stats().source_reads,
        loads,
        "every read answered all the same"
    );
}
