//! A loader may fail with any error type (its own, `anyhow`, a boxed error, a string); every
//! waiter gets it as `Error::Source`, and the caller gets the loader's error back: through
//! `std::error::Error::source` and, typed, through `Error::source_as`. No type of the Valkey client
//! shows in `Error`.

use crate::common;

use std::error::Error as _;
use std::sync::Arc;

use common::{answers, herd, until_stats};
use echostore::{Error, Store, Table, ValkeyError};

/// The loader's own error type, as a service would define it.
#[derive(Debug, PartialEq)]
enum DbError {
    Down { host: String },
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DbError::Down { host } => write!(f, "the database at {host} is down"),
        }
    }
}

impl std::error::Error for DbError {}

/// A `u64 -> String` table whose loader always fails with `fail(id)`.
async fn failing<E>(fail: fn(u64) -> E) -> Table<u64, String>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    let store = Store::builder().build().await.expect("store");
    store
        .table::<u64, String>("failing")
        .loader(move |id: u64| async move { Err::<String, _>(fail(id)) })
        .build()
        .await
        .expect("table")
}

/// A custom error type comes back as itself, by `source_as` and by `source()`.
#[tokio::test]
async fn a_custom_error_comes_back_typed() {
    let table = failing(|_| DbError::Down { host: "db1".into() }).await;
    let err = table.get(&1).await.expect_err("the loader fails");
    assert!(err.is_source());
    assert_eq!(
        err.source_as::<DbError>(),
        Some(&DbError::Down { host: "db1".into() })
    );
    assert!(err.source_as::<std::io::Error>().is_none());
    let source = err.source().expect("the loader's error is the source");
    assert_eq!(
        source.downcast_ref::<DbError>(),
        Some(&DbError::Down { host: "db1".into() })
    );
    assert_eq!(
        err.to_string(),
        "the loader failed: the database at db1 is down"
    );
}

/// Every waiter of a failed flight gets the same shared error, and each can downcast it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_waiter_can_downcast_the_one_error() {
    let (release, gate) = tokio::sync::watch::channel(false);
    let store = Store::builder().build().await.expect("store");
    let table = store
        .table::<u64, String>("gated")
        .loader(move |_id: u64| {
            let mut gate = gate.clone();
            async move {
                let _ = gate.wait_for(|open| *open).await;
                Err::<String, _>(DbError::Down { host: "db2".into() })
            }
        })
        .build()
        .await
        .expect("table");
    let waiters = herd(&table, 5, 1);
    until_stats(&table, "five wait", |s| s.coalesced == 4).await;
    release.send(true).expect("the loader waits");
    let errors: Vec<Error> = answers(waiters)
        .await
        .into_iter()
        .map(|a| a.expect_err("failed"))
        .collect();
    let Error::Source(first) = &errors[0] else {
        panic!("not a source error: {}", errors[0]);
    };
    for e in &errors {
        assert!(matches!(e, Error::Source(s) if Arc::ptr_eq(s, first)));
        assert!(matches!(
            e.source_as::<DbError>(),
            Some(DbError::Down { .. })
        ));
    }
}

/// `anyhow::Error` is accepted; its message and chain are kept, and a typed cause under context
/// is found by `source_as`.
#[tokio::test]
async fn anyhow_errors_are_accepted() {
    let plain = failing(|id| anyhow::anyhow!("no row for {id}")).await;
    let err = plain.get(&3).await.expect_err("fails");
    assert_eq!(err.to_string(), "the loader failed: no row for 3");
    assert_eq!(err.source().expect("a source").to_string(), "no row for 3");

    let with_context = failing(|id| {
        anyhow::Error::new(DbError::Down { host: "db3".into() })
            .context(format!("loading user {id}"))
    })
    .await;
    let err = with_context.get(&4).await.expect_err("fails");
    assert_eq!(err.to_string(), "the loader failed: loading user 4");
    assert_eq!(
        err.source_as::<DbError>(),
        Some(&DbError::Down { host: "db3".into() })
    );
}

/// A boxed error and a plain string are loader errors too; the boxed one downcasts to what it
/// holds.
#[tokio::test]
async fn boxed_and_string_errors_are_accepted() {
    let boxed = failing(|_| -> Box<dyn std::error::Error + Send + Sync> {
        Box::new(DbError::Down { host: "db4".into() })
    })
    .await;
    let err = boxed.get(&5).await.expect_err("fails");
    assert_eq!(
        err.source_as::<DbError>(),
        Some(&DbError::Down { host: "db4".into() })
    );

    let text = failing(|id| format!("user {id} is locked")).await;
    let err = text.get(&6).await.expect_err("fails");
    assert_eq!(err.to_string(), "the loader failed: user 6 is locked");
    assert!(err.source_as::<DbError>().is_none());
}

/// `source_as` answers `None` for errors that are not the loader's.
#[test]
fn source_as_is_only_for_loader_errors() {
    assert!(Error::LockBusy.source_as::<DbError>().is_none());
    assert!(Error::Stopped.source().is_none());
}

/// A Valkey failure is `Error::Valkey` with EchoStore's own `ValkeyError`: a code when Valkey
/// answered, the connection failure told apart, and the whole `Error` still `Clone`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_errors_are_wrapped() {
    fn clone_send_sync<T: Clone + Send + Sync + 'static>() {}
    clone_send_sync::<Error>();
    clone_send_sync::<ValkeyError>();

    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let err = Store::builder()
        .valkey(format!("redis://127.0.0.1:{port}"))
        .require_valkey(true)
        .build()
        .await
        .expect_err("no Valkey there");
    let Error::Valkey { context, source } = &err else {
        panic!("not a Valkey error: {err}");
    };
    assert!(!context.is_empty());
    assert_eq!(source.code(), None, "{source}");
    assert!(source.is_connection_failure(), "{source:?}");
    let reported = err.source().expect("the Valkey error is the source");
    assert!(reported.downcast_ref::<ValkeyError>().is_some());
    assert!(err.clone().is_valkey());

    // Valkey's own error replies carry their code: a Valkey out of memory refuses a put.
    let valkey = common::valkey();
    let mut conn = common::raw(&valkey.url()).await;
    let store = common::store_on(&valkey.url()).await;
    let table = store
        .table::<u64, String>("typed")
        .loader(|id: u64| async move { Ok::<_, std::io::Error>(id.to_string()) })
        .build()
        .await
        .expect("table");
    for (setting, value) in [("maxmemory-policy", "noeviction"), ("maxmemory", "1")] {
        common::config_set(&mut conn, setting, value).await;
    }
    let err = table.put(&1, "v".to_owned()).await.expect_err("OOM");
    let Error::Valkey { source, .. } = &err else {
        panic!("not a Valkey error: {err}");
    };
    assert_eq!(source.code(), Some("OOM"), "{source}");
    assert!(!source.is_connection_failure());
}
