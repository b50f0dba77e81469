//! `.ttl_for(|v| ..)`: a value's own logical life, on Valkey and in L1. A value that lives
//! briefly expires and is read again while the others stay; the stale window starts where the
//! value's own life ends; a copy on Valkey is held to the value's ttl, not the table's.

use crate::common;

use std::time::Duration;

use common::{
    Source, raw, read_envelope, stale_on_valkey, store_on, table_on, until_async, valkey,
};
use echostore::Origin;

/// Ids over 100 are "on sale": their values live 40 ms; the others an hour.
fn on_sale(value: &str) -> bool {
    value
        .split('-')
        .nth(1)
        .and_then(|id| id.parse::<u64>().ok())
        .is_some_and(|id| id > 100)
}

fn brief_or_long(value: &str) -> Duration {
    if on_sale(value) {
        Duration::from_millis(40)
    } else {
        Duration::from_secs(3600)
    }
}

/// Each value's envelope carries its own life; the brief one expires on Valkey and in L1 and is
/// read again, the long one is still an L1 hit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_brief_value_expires_while_a_long_one_stays() {
    let valkey = valkey();
    let source = Source::open();
    // A stale window keeps the brief copy's key on Valkey past its life, to be seen going stale.
    let table = table_on(&store_on(&valkey.url()).await, "sale", &source, |t| {
        t.ttl_for(|v: &String| brief_or_long(v))
            .jitter(0.0)
            .stale_for(Duration::from_secs(60))
    })
    .await;
    table.get(&1).await.expect("long");
    table.get(&101).await.expect("brief");
    let mut conn = raw(&valkey.url()).await;
    for (key, life) in [("sale:{1}", 3_600_000), ("sale:{101}", 40)] {
        let stored = read_envelope::<String>(&mut conn, key)
            .await
            .expect("stored");
        assert_eq!(
            stored.fresh_until_ms - stored.written_at_ms,
            life,
            "{key}: the value's own life"
        );
    }
    until_async("the brief copy went stale on Valkey", async || {
        stale_on_valkey(&mut conn, "sale:{101}").await
    })
    .await;
    assert_eq!(
        table.fetch(&101).await.expect("again").origin,
        Origin::Loaded
    );
    assert_eq!(table.fetch(&1).await.expect("hit").origin, Origin::L1);
    assert_eq!(source.calls(), 3);
}

/// A copy on Valkey whose `fresh_until` is past the value's own ttl (planted, or written before
/// the ttl was shortened) is held to the value's ttl when read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_is_held_to_the_values_own_ttl() {
    let valkey = valkey();
    let source = Source::open();
    let long = table_on(&store_on(&valkey.url()).await, "sale", &source, |t| {
        t.ttl(Duration::from_secs(3600)).jitter(0.0)
    })
    .await;
    long.get(&102).await.expect("written with an hour's life");
    let brief = table_on(&store_on(&valkey.url()).await, "sale", &source, |t| {
        t.ttl_for(|v: &String| brief_or_long(v)).jitter(0.0)
    })
    .await;
    let mut conn = raw(&valkey.url()).await;
    let stored = read_envelope::<String>(&mut conn, "sale:{102}")
        .await
        .expect("stored");
    assert_eq!(stored.fresh_until_ms - stored.written_at_ms, 3_600_000);
    // Held to 40 ms from its written_at: once that has passed (by Valkey's clock), it is stale.
    until_async("40 ms past the copy's written_at", async || {
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut conn)
            .await
            .expect("TIME");
        secs * 1000 + micros / 1000 > stored.written_at_ms + 40 + 50
    })
    .await;
    assert_eq!(
        brief.fetch(&102).await.expect("read").origin,
        Origin::Loaded,
        "the copy was held to the value's 40 ms, so it was stale"
    );
    assert_eq!(source.calls(), 2);
}
