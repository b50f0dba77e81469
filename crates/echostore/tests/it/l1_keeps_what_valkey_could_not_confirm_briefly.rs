//! While either connection to Valkey is unhealthy, L1 keeps what Valkey could not confirm for at
//! most the store's `unconfirmed_l1_life`: a value loaded while the data connection fails was
//! never written to Valkey, so no push will ever retire it, and a value kept while tracking is
//! down would miss every other process's writes.

use crate::common;

use std::time::Duration;

use common::{Proxy, Source, table_on, until, until_async, valkey};
use echostore::{Error, Store};

/// Loads answered while Valkey cannot confirm them are kept for `life`, then read again.
async fn reloaded_after(store: &Store, source: &Source) {
    let table = table_on(store, "unconfirmed", source, |t| {
        t.ttl(Duration::from_secs(3600)).jitter(0.0)
    })
    .await;
    assert_eq!(
        *table.get(&1).await.expect("served by the loader"),
        "value-1-1"
    );
    assert_eq!(source.calls(), 1);
    until_async(
        "the unconfirmed entry ended and the id was loaded again",
        async || {
            table.get(&1).await.expect("served by the loader");
            source.calls() >= 2
        },
    )
    .await;
    assert!(
        table.stats().l2_errors >= 2,
        "each load says Valkey failed it"
    );
}

/// The data connection's requests hang (its breaker opens) while tracking stays up: the value
/// loaded then lives the unconfirmed life, not the table's hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_while_the_data_connection_fails_is_kept_briefly() {
    let valkey = valkey();
    let proxy = Proxy::start(&valkey.url()).await;
    let store = Store::builder()
        .valkey(proxy.url())
        .require_valkey(true)
        .valkey_timeout(Duration::from_millis(100))
        .breaker_cooldown(Duration::from_secs(3600))
        .unconfirmed_l1_life(Duration::from_millis(50))
        .build()
        .await
        .expect("store");
    until("tracking is up", || store.is_coherent()).await;
    proxy.hold();
    let source = Source::open();
    reloaded_after(&store, &source).await;
    assert!(store.is_coherent(), "tracking stayed up throughout");
    assert!(store.is_degraded(), "the data connection's breaker is open");
    proxy.release();
}

/// No Valkey answers at all: the same life holds with tracking down too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_with_valkey_unreachable_is_kept_briefly() {
    let store = Store::builder()
        .valkey("redis://127.0.0.1:1/")
        .breaker_cooldown(Duration::from_secs(3600))
        .unconfirmed_l1_life(Duration::from_millis(50))
        .build()
        .await
        .expect("store, degraded");
    let source = Source::open();
    reloaded_after(&store, &source).await;
}

/// The life is bounded like every other duration.
#[tokio::test]
async fn an_unconfirmed_life_beyond_max_duration_is_refused() {
    let built = Store::builder()
        .unconfirmed_l1_life(echostore::MAX_DURATION + Duration::from_secs(1))
        .build()
        .await;
    assert!(
        matches!(&built, Err(Error::InvalidConfig(m)) if m.contains("unconfirmed_l1_life")),
        "{:?}",
        built.err()
    );
}
