//! `StoreBuilder::namespace`: every key a store writes is prefixed, so two applications sharing
//! one Valkey and one table name never read each other's values, locks or pushes.

use crate::common;

use std::time::Duration;

use common::{Source, coherent_store, raw, settled, table_on, until_stats, valkey};
use echostore::{Error, Origin, Store, Table, TableBuilder};
use redis::AsyncCommands;

/// Table `users` on a coherent store of its own in `namespace`, reading `source`, then `tune`.
async fn users_in(
    url: &str,
    namespace: &str,
    source: &Source,
    tune: impl FnOnce(TableBuilder<u64, String>) -> TableBuilder<u64, String>,
) -> Table<u64, String> {
    table_on(
        &coherent_store(url, Some(namespace)).await,
        "users",
        source,
        tune,
    )
    .await
}

/// Two namespaces, one table name: two values, two source reads, every key under its prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_namespaces_share_nothing() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let (billing_source, shop_source) = (Source::open(), Source::open());
    let billing = users_in(&valkey.url(), "billing", &billing_source, |t| t).await;
    let shop = users_in(&valkey.url(), "shop", &shop_source, |t| t).await;
    billing.get(&1).await.expect("billing's value");
    shop.get(&1).await.expect("shop's value");
    assert_eq!((billing_source.calls(), shop_source.calls()), (1, 1));

    let mut keys: Vec<String> = conn.keys("*").await.expect("KEYS");
    keys.sort();
    // Each table's value, and its live schemas (one lease per process), under its namespace.
    assert_eq!(
        keys,
        [
            "billing:schemas:users",
            "billing:users:{1}",
            "shop:schemas:users",
            "shop:users:{1}"
        ]
    );
    settled(&billing).await;
    settled(&shop).await;
}

/// Coherence stays inside the namespace: a put in one reaches its own other stores only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_stay_inside_the_namespace() {
    let valkey = valkey();
    let source = Source::open();
    let long = |t: TableBuilder<u64, String>| t.ttl(Duration::from_secs(60));
    let writer = users_in(&valkey.url(), "billing", &source, long).await;
    let same = users_in(&valkey.url(), "billing", &source, long).await;
    let other = users_in(&valkey.url(), "shop", &source, long).await;
    same.get(&1).await.expect("load");
    other.get(&1).await.expect("load");
    writer.put(&1, "new".into()).await.expect("put");
    until_stats(&same, "the push reached the same namespace", |s| {
        s.invalidations >= 1
    })
    .await;
    assert_eq!(*same.get(&1).await.expect("re-read"), "new");
    let f = other.fetch(&1).await.expect("untouched");
    assert_eq!((f.origin, f.value.as_str()), (Origin::L1, "value-1-2"));
    assert_eq!(other.stats().invalidations, 0);
    settled(&same).await;
}

/// A namespace outside the table-name alphabet is refused at build, and so is `lock`: its value
/// keys `lock:<table>:{<id>}` would be the lock keys of a store without a namespace (whose reads
/// then waited on them as on a held lock, and whose puts deleted them).
#[tokio::test]
async fn a_bad_namespace_is_refused() {
    for bad in ["", "has space", "colon:", "brace{", "lock"] {
        let built = Store::builder().namespace(bad).build().await;
        assert!(matches!(built, Err(Error::InvalidConfig(_))), "{bad:?}");
    }
    let lock = Store::builder().namespace("lock").build().await;
    let Err(Error::InvalidConfig(why)) = lock else {
        panic!("refused")
    };
    assert!(why.contains("lock keys"), "the error says why: {why}");
    assert!(Store::builder().namespace("locks").build().await.is_ok());
}
