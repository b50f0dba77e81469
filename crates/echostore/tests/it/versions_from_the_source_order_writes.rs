//! With `.version_by`, the source's own version orders writes, not the order they reach Valkey:
//! a put of an older row that lands late (it was held on a slow link, or timed out and was
//! delivered when the link healed) changes nothing and says so, and a slow fill that read the row
//! before it changed cannot write it back over a newer one. Without `.version_by`, the last write
//! to land wins (`newer_writes_win.rs`).

use crate::common;

use std::time::Duration;

use common::{
    Proxy, Source, on_task, patient_store, raw, read_envelope, unix_ms, until, valkey,
    versioned_envelope,
};
use echostore::{Error, Store, Table};
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};

const VALUE: &str = "rows:{1}";

/// A row as the source holds it: its version is its `updated_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Row {
    version: u64,
    name: String,
}

fn row(version: u64) -> Row {
    Row {
        version,
        name: format!("row at {version}"),
    }
}

/// Table `rows`, ordered by the row's version, on `store`: each read of `source` answers
/// `row(version)`.
async fn rows(store: &Store, source: &Source, version: u64) -> Table<u64, Row> {
    let source = source.clone();
    store
        .table::<u64, Row>("rows")
        .ttl(Duration::from_secs(60))
        .version_by(|r: &Row| r.version)
        .loader(move |_id: u64| {
            let source = source.clone();
            async move {
                source.read().await;
                Ok::<_, std::io::Error>(row(version))
            }
        })
        .build()
        .await
        .expect("table")
}

/// A store on `url` for which a hold is a delay here, not an outage.
async fn store_on(url: &str) -> Store {
    patient_store(url, Duration::from_secs(30)).await
}

/// Store A's put of version 1 is held on its way; store B's put of version 2 lands first. When
/// A's put lands, it is refused: A hears `Superseded`, Valkey keeps version 2, both stores read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_of_an_older_row_that_lands_late_changes_nothing() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let proxy = Proxy::start(&valkey.url()).await;
    let source = Source::gated();
    let a = rows(&store_on(&proxy.url()).await, &source, 0).await;
    let b = rows(&store_on(&valkey.url()).await, &source, 0).await;
    a.put(&1, row(0)).await.expect("A's first put"); // loads the script through the proxy

    proxy.hold();
    let mut held = std::pin::pin!(a.put(&1, row(1)));
    assert!(futures::poll!(held.as_mut()).is_pending(), "held");
    b.put(&1, row(2)).await.expect("B's newer row lands first");
    proxy.release();
    let late = held.await;
    assert!(
        matches!(late, Err(Error::Superseded)),
        "the older row is refused: {late:?}"
    );

    let stored = read_envelope::<Row>(&mut conn, VALUE)
        .await
        .expect("stored");
    assert_eq!((stored.version, stored.value), (Some(2), row(2)));
    assert_eq!(a.stats().writes_superseded, 1);
    until("A's L1 holds nothing older", || a.stats().l1_len == 0).await;
    assert_eq!(*a.get(&1).await.expect("read"), row(2));
    assert_eq!(*b.get(&1).await.expect("read"), row(2));
    assert_eq!(source.calls(), 0);
}

/// A fill reads version 1 from a slow source; meanwhile version 5 reaches Valkey (written as
/// another process's fill would, leaving this fill's lock alone). The fill's fenced write is
/// refused: Valkey keeps version 5, and the next read here answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_fill_of_an_older_row_does_not_overwrite_a_newer_one() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::gated();
    let t = rows(&store_on(&valkey.url()).await, &source, 1).await;
    let fill = on_task(&t, |t| async move { t.get(&1).await });
    until("the fill reads the source", || source.calls() == 1).await;
    let now = unix_ms();
    let newer = versioned_envelope(now + 60_000, now, 5, &row(5));
    let _: () = conn.set(VALUE, &newer).await.expect("plant version 5");
    source.release();
    assert_eq!(*fill.await.expect("task").expect("answered"), row(1));

    let stored = read_envelope::<Row>(&mut conn, VALUE)
        .await
        .expect("stored");
    assert_eq!(stored.version, Some(5), "the older row was not written");
    assert_eq!(t.stats().writes_superseded, 1);
    assert_eq!(*t.get(&1).await.expect("read"), row(5));
    assert_eq!(source.calls(), 1);
}

/// Versions are compared exactly, past 2^53 too (where a Lua number would round two versions
/// to one): nanosecond timestamps order like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_past_two_to_the_53_compare_exactly() {
    let valkey = valkey();
    let source = Source::gated();
    let t = rows(&store_on(&valkey.url()).await, &source, 0).await;
    let big = (1u64 << 60) + 2;
    t.put(&1, row(big)).await.expect("the newer row");
    let older = t.put(&1, row(big - 1)).await;
    assert!(matches!(older, Err(Error::Superseded)), "{older:?}");
    t.put(&1, row(big + 1)).await.expect("a newer one lands");
    assert_eq!(*t.get(&1).await.expect("read"), row(big + 1));
}

/// A put refused for an older version stores nothing, so no push of it comes: the push this
/// process expected of it is withdrawn once the refusal is known. Left expected, it kept the id's
/// state and was taken for the next write's push, whose value, read back as another, left L1.
#[cfg(feature = "fault-injection")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_put_leaves_no_push_expected() {
    let valkey = valkey();
    let source = Source::open();
    let here = rows(
        &common::coherent_store(&valkey.url(), None).await,
        &source,
        1,
    )
    .await;
    let there = rows(
        &common::coherent_store(&valkey.url(), None).await,
        &source,
        1,
    )
    .await;

    there.put(&1, row(5)).await.expect("a newer row elsewhere");
    let refused = here.put(&1, row(3)).await.expect_err("an older row");
    assert!(matches!(refused, Error::Superseded), "{refused}");
    until("nothing of the id is held here", || here.ids_held() == 0).await;
    assert_eq!(source.calls(), 0);
}
