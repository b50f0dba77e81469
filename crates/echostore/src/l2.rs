//! L2: the store's one shared, reconnecting connection to Valkey, behind the circuit breaker.
//!
//! Every table of a store shares one redis-rs `ConnectionManager` (multiplexed, reconnects by
//! itself). Each call first asks the [`Breaker`]; connection-level failures (refused, dropped, timed
//! out) open it, error replies from a live server do not. This module owns the plain value
//! commands — read, write-through `put`, `invalidate` — and the poll read; the regeneration lock's
//! scripts live in [`crate::lock`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, RedisResult, Script};

use crate::breaker::Breaker;
use crate::error::{Error, Result};
use crate::key::KeyNames;
use crate::lock::LockScripts;

/// Write-through: the new value replaces whatever is stored, and the lock of any fill in flight is
/// dropped so that its fenced write cannot land over this newer value.
const PUT: &str = r#"
-- KEYS[1] = value key, KEYS[2] = lock key; ARGV[1] = envelope, ARGV[2] = physical life ms
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[2])
return 1
"#;

/// How a store reaches Valkey.
#[derive(Clone)]
pub(crate) struct L2 {
    conn: ConnectionManager,
    breaker: Arc<Breaker>,
    put: Arc<Script>,
    /// The regeneration lock's scripts, hashed once per store.
    pub(crate) lock_scripts: Arc<LockScripts>,
}

impl L2 {
    /// Builds the connection without waiting for it; `require` makes the first PING mandatory.
    /// Without `require`, an unreachable Valkey leaves the store degraded (breaker open, logged).
    pub(crate) async fn connect(
        url: &str,
        timeout: Duration,
        cooldown: Duration,
        require: bool,
    ) -> Result<L2> {
        let client = redis::Client::open(url).map_err(|e| Error::valkey("parsing the url", e))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_max_delay(timeout);
        let conn = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| Error::valkey("creating the connection", e))?;
        let l2 = L2 {
            conn,
            breaker: Arc::new(Breaker::new(cooldown)),
            put: Arc::new(Script::new(PUT)),
            lock_scripts: Arc::new(LockScripts::new()),
        };
        let ping = l2
            .run("PING at build", |mut c| async move {
                redis::cmd("PING").query_async::<String>(&mut c).await
            })
            .await;
        match ping {
            Ok(_) => {}
            Err(e) if require => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "valkey unreachable at build; serving degraded (L1 + loader) until it answers")
            }
        }
        Ok(l2)
    }

    /// Runs one Valkey call through the breaker, mapping failures to [`Error`].
    pub(crate) async fn run<T, F, Fut>(&self, context: &'static str, call: F) -> Result<T>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        if !self.breaker.allow() {
            return Err(Error::ValkeyUnavailable);
        }
        match call(self.conn.clone()).await {
            Ok(v) => {
                self.breaker.succeeded();
                Ok(v)
            }
            Err(e) => {
                if is_connection_failure(&e) {
                    self.breaker.failed();
                }
                Err(Error::valkey(context, e))
            }
        }
    }

    /// Runs a script through the breaker (EVALSHA, reloaded on NOSCRIPT by redis-rs).
    pub(crate) async fn script<T: redis::FromRedisValue>(
        &self,
        context: &'static str,
        invocation: redis::ScriptInvocation<'_>,
    ) -> Result<T> {
        self.run(context, |mut c| async move {
            invocation.invoke_async(&mut c).await
        })
        .await
    }

    /// `GET <value key>`.
    pub(crate) async fn get(&self, names: &KeyNames) -> Result<Option<Vec<u8>>> {
        self.run(
            "GET value",
            |mut c| async move { c.get(&names.value).await },
        )
        .await
    }

    /// `GET <value key>` and `EXISTS <lock key>` in one pipeline: what a polling loser looks at.
    pub(crate) async fn poll(&self, names: &KeyNames) -> Result<(Option<Vec<u8>>, bool)> {
        self.run("poll (GET value, EXISTS lock)", |mut c| async move {
            redis::pipe()
                .get(&names.value)
                .exists(&names.lock)
                .query_async(&mut c)
                .await
        })
        .await
    }

    /// Write-through: set the value with its physical life and drop any fill's lock, atomically.
    pub(crate) async fn put(&self, names: &KeyNames, envelope: Vec<u8>, px: u64) -> Result<()> {
        let mut inv = self.put.prepare_invoke();
        inv.key(&names.value).key(&names.lock).arg(envelope).arg(px);
        self.script::<i64>("put (SET value, DEL lock)", inv)
            .await
            .map(drop)
    }

    /// Drops the value and the lock: a fill in flight can no longer write its older value back.
    pub(crate) async fn invalidate(&self, names: &KeyNames) -> Result<()> {
        self.run("invalidate (DEL value lock)", |mut c| async move {
            c.del::<_, i64>(&[&names.value, &names.lock]).await
        })
        .await
        .map(drop)
    }

    /// `true` while the breaker makes L2 calls fail fast.
    pub(crate) fn is_degraded(&self) -> bool {
        self.breaker.is_open()
    }
}

/// Failures that say the server is not there, as opposed to an error reply from a live server.
fn is_connection_failure(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal()
}
