//! Where a store's Valkey is and how to reach it: one server or a cluster's seed nodes, and the
//! roots a `rediss://` connection trusts. [`Endpoint`] makes the data connection ([`Connection`])
//! and the clients of coherence's tracking connections; nothing else parses URLs. Tools and tests
//! beside EchoStore open the same kind of connection (`protocol::Connection`).
//!
//! - `redis://[user:password@]host:port[/db]` — plain TCP; ACL user and password from the URL.
//! - `rediss://…` — TLS (the `tls` feature), trusting the platform's roots, or only the CA given
//!   with `StoreBuilder::valkey_ca`.
//! - A cluster (the `cluster` feature): the seeds' URLs; the client finds every primary, follows
//!   `MOVED`/`ASK` and reconnects. Every key of one id carries the `{id}` hash tag, so every
//!   script EchoStore runs touches one slot.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::error::{Error, Result};

/// A store's Valkey: one server or a cluster, and the CA its TLS connections trust.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub(crate) kind: Kind,
    /// PEM roots for `rediss://` (none: the platform's).
    pub(crate) ca: Option<Vec<u8>>,
    pub(crate) timeout: Duration,
}

/// One server, or a cluster's seeds.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    Single(String),
    Cluster(Vec<String>),
}

impl Endpoint {
    /// How many circuit breakers the store keeps: one, or one per hash slot of a cluster.
    pub(crate) fn breaker_count(&self) -> usize {
        match self.kind {
            Kind::Single(_) => 1,
            Kind::Cluster(_) => 16384,
        }
    }

    /// A client for one server's URL, with this endpoint's TLS roots.
    pub(crate) fn client(&self, url: &str) -> Result<redis::Client> {
        let opened = match &self.ca {
            #[cfg(feature = "tls")]
            Some(ca) => redis::Client::build_with_tls(
                url,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(ca.clone()),
                },
            ),
            _ => redis::Client::open(url),
        };
        opened.map_err(|e| url_error(url, e))
    }

    /// The data connection, without waiting for it where the client allows (a single server
    /// connects lazily; a cluster needs one seed to answer).
    pub(crate) async fn connect(&self) -> Result<Connection> {
        match &self.kind {
            Kind::Single(url) => self.single(url),
            Kind::Cluster(seeds) => self.cluster(seeds).await,
        }
    }

    /// A new connection to the one server at `url`, made when first used. A lost connection
    /// is made again with one attempt, no retry: the circuit breaker is what tries again (each
    /// trial on a connection of its own), so a dead server costs a trial per cooldown (its
    /// attempt, and the one reconnect its client starts once it failed). Its calls are timed by
    /// their caller (`L2::run`, [`crate::wire::timeout`]), which a pause of the process does not
    /// trip; the client's own timer would.
    pub(crate) fn single(&self, url: &str) -> Result<Connection> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(None)
            .set_number_of_retries(0);
        let conn = ConnectionManager::new_lazy_with_config(self.client(url)?, config)
            .map_err(|e| Error::valkey("creating the connection", e))?;
        Ok(Connection::Single(conn))
    }

    #[cfg(feature = "cluster")]
    async fn cluster(&self, seeds: &[String]) -> Result<Connection> {
        let builder = redis::cluster::ClusterClientBuilder::new(seeds.to_vec())
            .connection_timeout(self.timeout)
            // Each node's timer lets the client try a silent node again and keeps its slot
            // refreshes from waiting on one forever. The call as a whole is timed by its caller
            // (`L2::run`), which a pause of the process does not trip: the client's overall timer
            // would fail every call in flight at a pause, though Valkey answered.
            .response_timeout(self.timeout)
            .overall_response_timeout(None)
            .retries(2)
            // A `TRYAGAIN` (a slot being migrated) lasts milliseconds: the client's retries of
            // it wait a few ms, not its default 1.28 s and more, which outlasts every timeout.
            // L2's scripts go on retrying it until their timeout.
            .min_retry_wait(2)
            .max_retry_wait(20)
            .retry_wait_formula(5, 2);
        #[cfg(feature = "tls")]
        let builder = match &self.ca {
            Some(ca) => builder.certs(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca.clone()),
            }),
            None => builder,
        };
        let client = builder
            .build()
            .map_err(|e| url_error(&seeds.join(","), e))?;
        let conn = client
            .get_async_connection()
            .await
            .map_err(|e| Error::valkey("connecting to the cluster", e))?;
        Ok(Connection::Cluster(conn))
    }

    #[cfg(not(feature = "cluster"))]
    async fn cluster(&self, _seeds: &[String]) -> Result<Connection> {
        Err(Error::InvalidConfig(
            "valkey_cluster needs echostore's `cluster` feature".into(),
        ))
    }
}

/// A URL the client refused: say which feature is missing when that is the cause.
fn url_error(url: &str, e: redis::RedisError) -> Error {
    let shown = url.split('@').next_back().unwrap_or(url);
    if url.starts_with("rediss://") && cfg!(not(feature = "tls")) {
        return Error::InvalidConfig(format!(
            "{shown}: rediss:// needs echostore's `tls` feature"
        ));
    }
    Error::valkey("parsing the url", e)
}

/// A connection to Valkey as a store makes its data connection: to one server, a reconnecting
/// multiplexed connection; to a cluster, redis-rs's cluster connection, which routes each command
/// by its keys' slot. A cheap `Clone` (clones share the connection), and a redis-rs
/// [`ConnectionLike`], so every redis-rs command runs on it.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use echostore::protocol::Connection;
/// use redis::AsyncCommands;
///
/// let mut conn = Connection::open("redis://127.0.0.1:6379", Duration::from_secs(5)).await?;
/// let held: Option<Vec<u8>> = conn.get("users:{42}").await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub enum Connection {
    /// One server.
    Single(ConnectionManager),
    /// A cluster (the `cluster` feature).
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Connection {
    /// A connection to the server at `url` (`redis://` or, with the `tls` feature, `rediss://`
    /// trusting the platform's roots), made when first used; `timeout` bounds connecting and
    /// each reply.
    pub async fn open(url: &str, timeout: Duration) -> Result<Connection> {
        Endpoint {
            kind: Kind::Single(url.to_owned()),
            ca: None,
            timeout,
        }
        .connect()
        .await
    }

    /// A connection to the cluster that `seeds` lead to (needs the `cluster` feature; without
    /// it, [`Error::InvalidConfig`]); `timeout` bounds connecting and each reply.
    pub async fn open_cluster<S: Into<String>>(
        seeds: impl IntoIterator<Item = S>,
        timeout: Duration,
    ) -> Result<Connection> {
        Endpoint {
            kind: Kind::Cluster(seeds.into_iter().map(Into::into).collect()),
            ca: None,
            timeout,
        }
        .connect()
        .await
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
            #[cfg(feature = "cluster")]
            Connection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "cluster")]
            Connection::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            #[cfg(feature = "cluster")]
            Connection::Cluster(c) => c.get_db(),
        }
    }
}
