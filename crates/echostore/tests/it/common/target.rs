//! The Valkey a test runs against: one private server, or — with `ECHOSTORE_TEST_TARGET=cluster`
//! and the `cluster` feature — a private three-primary cluster, so that the same lock and
//! coherence tests run on both (`.ci/run` runs them twice). A cluster's URL for the helpers is
//! `cluster:<seed>,<seed>,…`; [`raw`] and the store builders understand both forms. Through a
//! [`raw`] connection, [`exists`] asks whether a key is there, [`pause_writes`] holds writes,
//! [`config_set`] changes a setting and [`kill_tracking_connections`] kills the stores' tracking
//! connections.

use std::ops::{Deref, DerefMut};

use embedded_valkey::EmbeddedValkey;

/// The environment variable that sends the tests to a cluster.
pub const TARGET_ENV: &str = "ECHOSTORE_TEST_TARGET";

/// A private, real Valkey for one test (killed on drop): a server, or a cluster when asked.
pub enum Valkey {
    Single(EmbeddedValkey),
    #[cfg(feature = "cluster")]
    Cluster(embedded_valkey::EmbeddedCluster),
}

/// Starts the test's Valkey.
pub fn valkey() -> Valkey {
    #[cfg(feature = "cluster")]
    if std::env::var(TARGET_ENV).as_deref() == Ok("cluster") {
        return Valkey::Cluster(
            embedded_valkey::EmbeddedCluster::start(3).expect("a local cluster"),
        );
    }
    Valkey::Single(EmbeddedValkey::start().expect("a real valkey-server for the test"))
}

impl Valkey {
    /// The URL the helpers take: a server's, or `cluster:` and the seeds.
    pub fn url(&self) -> String {
        match self {
            Valkey::Single(v) => v.url(),
            #[cfg(feature = "cluster")]
            Valkey::Cluster(c) => format!("cluster:{}", c.urls().join(",")),
        }
    }
}

/// The server, for the tests that stop, restart or reconfigure it (they run on one server only).
impl Deref for Valkey {
    type Target = EmbeddedValkey;

    fn deref(&self) -> &EmbeddedValkey {
        match self {
            Valkey::Single(v) => v,
            #[cfg(feature = "cluster")]
            Valkey::Cluster(_) => panic!("this test needs a single server, not a cluster"),
        }
    }
}

impl DerefMut for Valkey {
    fn deref_mut(&mut self) -> &mut EmbeddedValkey {
        match self {
            Valkey::Single(v) => v,
            #[cfg(feature = "cluster")]
            Valkey::Cluster(_) => panic!("this test needs a single server, not a cluster"),
        }
    }
}

/// The seeds of a `cluster:` URL, or `None` for a server's URL.
pub fn cluster_seeds(url: &str) -> Option<Vec<String>> {
    url.strip_prefix("cluster:")
        .map(|seeds| seeds.split(',').map(str::to_owned).collect())
}

#[path = "../../../examples/support/mod.rs"]
mod support;

/// A plain client connection, standing in for another process or an operator: to the server, or
/// a cluster client that routes each key to its shard (the node examples' own connection).
pub(crate) use support::Conn as RawConn;

/// Connects a [`RawConn`] to `url`.
pub(crate) async fn raw(url: &str) -> RawConn {
    support::connect(url).await.expect("connect")
}

/// Whether `key` exists, as `EXISTS` answers it.
pub async fn exists(conn: &mut RawConn, key: impl redis::ToRedisArgs) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query_async(conn)
        .await
        .expect("EXISTS")
}

/// `CLIENT PAUSE <ms> WRITE`: every client's writes wait at the server until [`unpause`].
pub async fn pause_writes(conn: &mut RawConn, ms: u64) {
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg("WRITE")
        .query_async(conn)
        .await
        .expect("CLIENT PAUSE WRITE");
}

/// `CONFIG SET <name> <value>` on the server `conn` reaches.
pub async fn config_set(conn: &mut RawConn, name: &str, value: impl redis::ToRedisArgs) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query_async(conn)
        .await
        .expect("CONFIG SET");
}

/// `ACL SETUSER <user> <rules>` on the server `conn` reaches: a connection logged in as `user`
/// feels the new rights at once.
pub async fn acl_setuser(conn: &mut RawConn, user: &str, rules: &[&str]) {
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(user)
        .arg(rules)
        .query_async(conn)
        .await
        .expect("ACL SETUSER");
}

/// `CLIENT UNPAUSE`.
pub async fn unpause(conn: &mut RawConn) {
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query_async(conn)
        .await
        .expect("CLIENT UNPAUSE");
}

/// Kills every store's tracking connection (named `echostore-tracking`), and only those.
pub async fn kill_tracking_connections(conn: &mut RawConn) -> usize {
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(conn)
        .await
        .expect("CLIENT LIST");
    let ids: Vec<String> = clients
        .lines()
        .filter(|line| {
            line.split(' ')
                .any(|field| field == "name=echostore-tracking")
        })
        .filter_map(|line| {
            line.split(' ')
                .find_map(|f| f.strip_prefix("id="))
                .map(str::to_owned)
        })
        .collect();
    for id in &ids {
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(id)
            .query_async(conn)
            .await
            .expect("CLIENT KILL ID");
    }
    ids.len()
}
