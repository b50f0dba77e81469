//! A replica that shuts down (or a test, or a tenant's store) drops its `Store` and tables: every
//! task the store started ends and every connection it holds to Valkey closes, with no call from
//! the application (its data connection, its tracking connection, its tables' repair tasks).
//! Nothing keeps a process's runtime, or Valkey's `maxclients`, busy after it.

use crate::common;

use std::time::Duration;

use common::{Source, coherent_table, raw, until_async, valkey};

/// The clients Valkey has besides `conn` itself (`CLIENT LIST`).
async fn other_clients(conn: &mut common::RawConn) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(conn)
        .await
        .expect("CLIENT LIST");
    list.lines().count().saturating_sub(1)
}

/// Stores that were used (loads, puts, pushes between them, a held lock) and then dropped leave
/// no connection behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_store_closes_every_connection() {
    let valkey = valkey();
    let url = valkey.url();
    let mut conn = raw(&url).await;
    let before = other_clients(&mut conn).await;
    let source = Source::open();
    let long = |t: echostore::TableBuilder<u64, String>| t.ttl(Duration::from_secs(60));
    for _ in 0..3 {
        let a = coherent_table(&url, "bye", &source, long).await;
        let b = coherent_table(&url, "bye", &source, long).await;
        a.get(&1).await.expect("load");
        b.get(&1).await.expect("read");
        a.put(&1, "new".into()).await.expect("put");
        assert!(
            other_clients(&mut conn).await > before,
            "the stores are connected"
        );
        drop((a, b));
        until_async(
            "every connection of the dropped stores closed",
            async || other_clients(&mut conn).await == before,
        )
        .await;
    }
}
