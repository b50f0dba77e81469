//! `.l1_idle(d)`: an L1 entry no read touched for `d` leaves this process's L1, on both backends,
//! counted in `l1_idle_evictions`; Valkey's copy stays, and an entry being read stays.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{BACKENDS, Source, store_on, table_on, until, valkey};
use echostore::{Origin, Table};

const IDLE: Duration = Duration::from_secs(1);

/// Ten entries, one of them read all along: the nine others leave L1 (the idle sweep drops them,
/// unread), the read one stays; the nine are read again from Valkey, not from the source, by
/// this store and by a second one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_entries_leave_l1_on_both_backends() {
    let valkey = valkey();
    for backend in BACKENDS {
        let name = format!("idle-{backend:?}").to_lowercase();
        let source = Source::open();
        let tune = |t: echostore::TableBuilder<u64, String>| {
            t.l1_backend(backend)
                .ttl(Duration::from_secs(3600))
                .l1_idle(IDLE)
        };
        let a = table_on(&store_on(&valkey.url()).await, &name, &source, tune).await;
        for id in 0..10 {
            a.get(&id).await.expect("load");
        }
        let reading = Arc::new(AtomicBool::new(true));
        let reader = keep_reading(&a, 0, &reading);

        until("the nine unread entries left L1", || {
            let stats = a.stats();
            stats.l1_idle_evictions == 9 && stats.l1_len == 1
        })
        .await;
        assert!(
            a.peek_local(&0).is_some(),
            "{backend:?}: the read entry stays"
        );
        assert!(
            a.peek_local(&5).is_none(),
            "{backend:?}: an unread one left"
        );
        reading.store(false, Ordering::SeqCst);
        reader.await.expect("reader");

        let again = a.fetch(&5).await.expect("read");
        assert_eq!(
            again.origin,
            Origin::L2,
            "{backend:?}: Valkey kept its copy"
        );
        let b = table_on(&store_on(&valkey.url()).await, &name, &source, tune).await;
        assert_eq!(b.fetch(&6).await.expect("read").origin, Origin::L2);
        assert_eq!(
            source.calls(),
            10,
            "{backend:?}: no id read from the source twice"
        );
    }
}

/// Reads `id` from `table` until `reading` turns false.
fn keep_reading(
    table: &Table<u64, String>,
    id: u64,
    reading: &Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let (table, reading) = (table.clone(), Arc::clone(reading));
    tokio::spawn(async move {
        while reading.load(Ordering::SeqCst) {
            table.get(&id).await.expect("hit");
            // The workload's pace, far inside the idle time: not a wait for anything.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}

/// An `l1_idle` under a millisecond is refused.
#[tokio::test]
async fn a_zero_idle_is_refused() {
    let store = echostore::Store::builder().build().await.expect("store");
    let refused = store
        .table::<u64, u64>("idle")
        .l1_idle(Duration::ZERO)
        .loader(|id: u64| async move { Ok::<_, std::io::Error>(id) })
        .build()
        .await
        .expect_err("refused");
    assert!(refused.to_string().contains("l1_idle"), "{refused}");
}
