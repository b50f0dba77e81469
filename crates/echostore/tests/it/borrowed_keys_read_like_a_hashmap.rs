//! A `String`-keyed table is read, written and invalidated with a `&str`, as a `HashMap` is; a
//! `put` returns the `Arc` it stored; an `Origin` prints as a lowercase word.

use crate::common;

use std::sync::Arc;

use common::{BACKENDS, Source, store_on, valkey};
use echostore::{Origin, Store, Table};

/// A `String -> String` table on `store` whose loader reads `source`.
async fn names(
    store: &Store,
    source: &Source,
    tune: echostore::L1Backend,
) -> Table<String, String> {
    let source = source.clone();
    store
        .table::<String, String>("names")
        .l1_backend(tune)
        .loader(move |id: String| {
            let source = source.clone();
            async move {
                source.read().await;
                Ok::<_, std::io::Error>(format!("loaded {id}"))
            }
        })
        .build()
        .await
        .expect("table")
}

/// `get`, `fetch`, `put` and `invalidate` take `&str`, and hit the same entries as `&String`.
#[tokio::test]
async fn a_str_reads_a_string_keyed_table() {
    for backend in BACKENDS {
        let source = Source::open();
        let store = Store::builder().build().await.expect("store");
        let table = names(&store, &source, backend).await;

        assert_eq!(*table.get("alice").await.expect("get"), "loaded alice");
        let owned = String::from("alice");
        let again = table.fetch(&owned).await.expect("fetch");
        assert_eq!(again.origin, Origin::L1, "{backend:?}");
        assert_eq!(
            table.fetch("alice").await.expect("fetch").origin,
            Origin::L1
        );
        assert_eq!(source.calls(), 1, "{backend:?}");

        let stored = table.put("bob", "Bob".to_owned()).await.expect("put");
        let read = table.fetch("bob").await.expect("fetch");
        assert!(
            Arc::ptr_eq(&stored, &read.value),
            "{backend:?}: put returns what L1 holds"
        );
        assert_eq!(read.origin, Origin::L1);

        table.invalidate("bob").await.expect("invalidate");
        let reloaded = table.fetch("bob").await.expect("fetch");
        assert_eq!(
            (reloaded.value.as_str(), reloaded.origin),
            ("loaded bob", Origin::Loaded)
        );
        assert_eq!(source.calls(), 2, "{backend:?}");
    }
}

/// A borrowed key names the same Valkey keys as the owned one: another store reads what a
/// `put("…")` wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrowed_key_names_the_same_valkey_keys() {
    let valkey = valkey();
    let source = Source::open();
    let writer = names(&store_on(&valkey.url()).await, &source, Default::default()).await;
    let reader = names(&store_on(&valkey.url()).await, &source, Default::default()).await;

    writer.put("carol", "Carol".to_owned()).await.expect("put");
    let read = reader.fetch(&String::from("carol")).await.expect("fetch");
    assert_eq!((read.value.as_str(), read.origin), ("Carol", Origin::L2));
    assert_eq!(source.calls(), 0);
}

/// Every origin prints as one lowercase word, ready for a log field or a metrics label.
#[test]
fn origins_print_as_lowercase_words() {
    let words = [
        (Origin::L1, "l1"),
        (Origin::L2, "l2"),
        (Origin::Loaded, "loaded"),
        (Origin::Coalesced, "coalesced"),
        (Origin::Stale, "stale"),
        (Origin::Default, "default"),
    ];
    for (origin, word) in words {
        assert_eq!(origin.to_string(), word);
        assert_eq!(origin.as_str(), word);
    }
}
