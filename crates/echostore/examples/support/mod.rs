//! What the node examples (`race_node`, `batch_node`, `tags_node`) share: a store and a plain connection for a
//! Valkey URL, or for a cluster given as `cluster:<seed>,<seed>,…` (with the `cluster` feature),
//! the check-in that makes every node's herd start together, and the herd itself.
// Each node uses a part of this.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::time::Duration;

use echostore::{Store, StoreBuilder, Table};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncCommands, Cmd, Pipeline, RedisFuture, Value};

/// A store builder on `url` (a server, or `cluster:` and the seeds).
pub(crate) fn store_builder(url: &str) -> StoreBuilder {
    match url.strip_prefix("cluster:") {
        Some(seeds) => Store::builder().valkey_cluster(seeds.split(',')),
        None => Store::builder().valkey(url),
    }
}

/// A plain connection to the server, or a cluster client that routes each key to its shard.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(MultiplexedConnection),
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
}

/// Connects to `url`.
pub(crate) async fn connect(url: &str) -> redis::RedisResult<Conn> {
    if let Some(_seeds) = url.strip_prefix("cluster:") {
        #[cfg(feature = "cluster")]
        return Ok(Conn::Cluster(
            redis::cluster::ClusterClient::new(_seeds.split(',').collect::<Vec<_>>())?
                .get_async_connection()
                .await?,
        ));
    }
    Ok(Conn::Single(
        redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?,
    ))
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

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => c.get_db(),
        }
    }
}
