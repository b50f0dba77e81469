//! What the node examples (`race_node`, `batch_node`, `tags_node`) share: a store and a connection for a
//! Valkey URL, or for a cluster given as `cluster:<seed>,<seed>,…` (with the `cluster` feature),
//! the check-in that makes every node's herd start together, and the herd itself.
// Each node uses a part of this.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::time::Duration;

use echostore::{Store, StoreBuilder, Table};
use redis::AsyncCommands;

/// A store builder on `url` (a server, or `cluster:` and the seeds).
pub(crate) fn store_builder(url: &str) -> StoreBuilder {
    match url.strip_prefix("cluster:") {
        Some(seeds) => Store::builder().valkey_cluster(seeds.split(',')),
        None => Store::builder().valkey(url),
    }
}

/// A connection to the server, or a cluster connection that routes each key to its slot: the
/// library's own kind ([`echostore::protocol::Connection`]).
pub(crate) use echostore::protocol::Connection as Conn;

/// How long a node or a test waits for Valkey to answer one command.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// Connects to `url` (a server, or `cluster:` and the seeds).
pub(crate) async fn connect(url: &str) -> echostore::Result<Conn> {
    match url.strip_prefix("cluster:") {
        Some(seeds) => Conn::open_cluster(seeds.split(','), REPLY_TIMEOUT).await,
        None => Conn::open(url, REPLY_TIMEOUT).await,
    }
}

/// Checks this node in under `ready`, then waits until `nodes` nodes have.
pub(crate) async fn check_in(conn: &mut Conn, ready: &str, nodes: u64) -> redis::RedisResult<()> {
    let _: u64 = conn.incr(ready, 1).await?;
    while conn.get::<_, u64>(ready).await? < nodes {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

/// `requests` gets of `key` released at once (a barrier), and the distinct answers they got.
pub(crate) async fn herd(
    table: &Table<String, String>,
    key: &str,
    requests: usize,
) -> Result<BTreeSet<String>, Box<dyn std::error::Error>> {
    let gets = echostore_testkit::together(requests, |_| {
        let (table, key) = (table.clone(), key.to_owned());
        async move { table.get(&key).await }
    });
    let mut answers = BTreeSet::new();
    for get in gets {
        answers.insert(get.await?.map(|v| v.to_string())?);
    }
    Ok(answers)
}

/// Waits until `table` has no flight left: a flight answers its callers on its own task and its
/// owner ends it a moment later, so a node settles before it prints its counters.
pub(crate) async fn settled<K: echostore::Key, V: echostore::Value>(table: &Table<K, V>) {
    while table.stats().in_flight > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
