//! L2: the store's one shared, reconnecting connection to Valkey, behind the circuit breaker.
//!
//! Every table of a store shares one data connection ([`Connection`]: a redis-rs
//! `ConnectionManager`, multiplexed and reconnecting by itself, or a cluster connection). Each
//! call first asks the [`Breaker`], whose trial on one server is made on a new connection
//! ([`healing`] says why). A refused or dropped connection opens it, a timeout only when nothing
//! else was answered meanwhile (a slow call is not a dead connection), and an error reply from a
//! live server never does. This module owns the plain value commands — read, write-through `put`,
//! `invalidate` — and the poll read; the regeneration lock's scripts live in
//! [`crate::valkey::lock`].

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use redis::{AsyncCommands, RedisResult};

use crate::error::{Error, Result};
use crate::valkey::envelope::{self, Fingerprint};
use crate::wire::breaker::{Breaker, Permit};
use crate::wire::connect::{Connection, Endpoint, Kind};
use crate::wire::healing::{self, Live};
use crate::wire::key::KeyNames;
use crate::wire::natives::{self, Natives};
use crate::wire::scripts::SCRIPTS;
use crate::wire::server_clock::{ServerClock, wall_ms};
use crate::wire::under_way::UnderWay;

/// How long a script refused with `TRYAGAIN` (a slot being migrated) waits before it is sent
/// again.
const TRY_AGAIN_EVERY: Duration = Duration::from_millis(10);

/// How a store reaches Valkey.
#[derive(Clone)]
pub(crate) struct L2 {
    /// The data connection: replaced by a successful trial's on one server, and by
    /// [`healing::watch`] if a cluster's stays broken.
    conn: Arc<Live>,
    /// One breaker for a single server; one per hash slot on a cluster, so a dead primary
    /// degrades only its own slots' keys.
    breakers: Arc<[Breaker]>,
    /// The native lock commands in use.
    natives: Arc<Natives>,
    /// Valkey's clock as estimated here: a put's deadline is set on it.
    clock: Arc<ServerClock>,
    /// How long a caller waits for a reply (`valkey_timeout`).
    timeout: Duration,
    /// Calls that failed at the connection level (refused, reset, dropped; not a timeout): what
    /// this process learned of Valkey before such a loss may be out of date, since Valkey may have
    /// come back empty.
    losses: Arc<AtomicU64>,
    /// What the store has under way on Valkey (fills, writes, retried releases): what
    /// `Store::shutdown` waits for.
    under_way: Arc<UnderWay>,
}

impl L2 {
    /// Builds the connection (lazily for one server); `require` makes the first PING mandatory.
    /// Without `require`, an unreachable server leaves the store degraded (breaker open, logged).
    /// `natives` allows the native lock commands where `INFO server` shows them.
    pub(crate) async fn connect(
        endpoint: &Endpoint,
        cooldown: Duration,
        require: bool,
        natives: bool,
    ) -> Result<L2> {
        let l2 = L2 {
            breakers: (0..endpoint.breaker_count())
                .map(|_| Breaker::new(cooldown))
                .collect(),
            conn: Live::new(endpoint.connect().await?, endpoint.clone()),
            natives: Arc::new(Natives::default()),
            clock: Arc::new(ServerClock::new()),
            timeout: endpoint.timeout,
            losses: Arc::default(),
            under_way: Arc::default(),
        };
        if let Kind::Cluster(_) = endpoint.kind {
            tokio::spawn(healing::watch(Arc::downgrade(&l2.conn), endpoint.clone()));
        }
        let ping = l2
            .run("PING at build", None, |mut c| async move {
                redis::cmd("PING").query_async::<String>(&mut c).await
            })
            .await;
        if ping.is_ok() {
            l2.read_clock().await;
        }
        match ping {
            Ok(_) if natives => {
                let info = l2
                    .run("INFO server at build", None, |mut c| async move {
                        redis::cmd("INFO")
                            .arg("server")
                            .query_async::<redis::Value>(&mut c)
                            .await
                    })
                    .await;
                if let Ok(info) = info {
                    l2.natives.set(natives::of_every_node(&info));
                }
            }
            Ok(_) => {}
            Err(e) if require => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "valkey unreachable at build; serving degraded (L1 + loader) until it answers")
            }
        }
        Ok(l2)
    }

    /// Reads the server's `TIME` into the clock estimate (at build, and when it has grown old).
    async fn read_clock(&self) {
        let sent = self.clock.send();
        let time = self
            .run("TIME", None, |mut c| async move {
                redis::cmd("TIME").query_async::<(u64, u64)>(&mut c).await
            })
            .await;
        if let Ok((secs, micros)) = time {
            self.clock.read(
                sent,
                secs.saturating_mul(1000).saturating_add(micros / 1000),
            );
        }
    }

    /// Valkey's clock as estimated here.
    pub(crate) fn clock(&self) -> &ServerClock {
        &self.clock
    }

    /// Now, in unix ms on Valkey's clock as estimated here (this process's wall clock before
    /// any reading): the one "now" that envelopes' `fresh_until` is compared with. A reading
    /// grown old is renewed in the background.
    pub(crate) fn now_ms(&self) -> u64 {
        if self.clock.claim_renewal() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    let l2 = self.clone();
                    runtime.spawn(async move {
                        l2.read_clock().await;
                        l2.clock.renewed();
                    });
                }
                Err(_) => self.clock.renewed(),
            }
        }
        self.clock.now_ms().unwrap_or_else(wall_ms)
    }

    /// Times the data connection was replaced ([`healing::watch`]).
    pub(crate) fn connections_replaced(&self) -> u64 {
        self.conn.rebuilt()
    }

    /// Calls so far that failed at the connection level ([`L2::losses`]'s count).
    pub(crate) fn connection_losses(&self) -> u64 {
        self.losses.load(Relaxed)
    }

    /// How long a caller waits for a reply (`valkey_timeout`).
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs one Valkey call through the breaker, mapping failures to [`Error`]. It times out
    /// once `valkey_timeout` has passed with this process running ([`crate::wire::timeout`]).
    pub(crate) async fn run<T, F, Fut>(
        &self,
        context: &'static str,
        names: Option<&KeyNames>,
        call: F,
    ) -> Result<T>
    where
        F: FnOnce(Connection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let breaker = self.breaker(names);
        let Some(permit) = breaker.allow() else {
            return Err(Error::ValkeyUnavailable);
        };
        let began = breaker.begin();
        let fresh = match permit {
            Permit::Trial => self.conn.for_trial(),
            Permit::Closed => None,
        };
        let conn = fresh.clone().unwrap_or_else(|| self.conn.get());
        match crate::wire::timeout::call_within(self.timeout, call(conn)).await {
            Ok(v) => {
                // The new connection first: a call let through once the breaker closes must not
                // meet the old one's failed reconnect.
                match fresh {
                    Some(fresh) => self.conn.adopt(fresh),
                    None => self.conn.succeeded(),
                }
                breaker.succeeded(permit);
                Ok(v)
            }
            Err(e) => {
                if e.is_timeout() {
                    breaker.timed_out(began, permit);
                } else if is_connection_failure(&e) {
                    breaker.failed(permit);
                    self.losses.fetch_add(1, Relaxed);
                }
                if e.is_timeout() || is_connection_failure(&e) {
                    self.conn.failed(names.map(|n| n.value.as_slice()));
                }
                Err(Error::valkey(context, e))
            }
        }
    }

    /// The breaker for calls about `names` (the first for calls about no key).
    fn breaker(&self, names: Option<&KeyNames>) -> &Breaker {
        #[cfg(feature = "cluster")]
        if self.breakers.len() > 1
            && let Some(names) = names
        {
            return &self.breakers[usize::from(names.slot()) % self.breakers.len()];
        }
        let _ = names;
        &self.breakers[0]
    }

    /// Runs a script through the breaker (EVALSHA, reloaded on NOSCRIPT by redis-rs).
    ///
    /// A cluster slot being migrated refuses a script over an id's two keys with `TRYAGAIN`
    /// while one key has moved and the other has not: a pause of that slot, not a failure, so the
    /// script is sent again every [`TRY_AGAIN_EVERY`] until the call's timeout (the client's own
    /// retries, a few ms apart, come first). When the slot has moved by the time those retries
    /// are spent, the last answer is `MOVED` (or `ASK`): the script was not run, and is sent
    /// again the same way, to the slot's new node. These are error replies from a live server,
    /// which never count against the breaker.
    pub(crate) async fn script<T: redis::FromRedisValue>(
        &self,
        context: &'static str,
        names: &KeyNames,
        invocation: crate::wire::scripts::Invocation<'_>,
    ) -> Result<T> {
        let until = tokio::time::Instant::now() + self.timeout;
        loop {
            let invocation = &invocation;
            let ran = self
                .run(context, Some(names), |mut c| async move {
                    invocation.invoke_async(&mut c).await
                })
                .await;
            match ran {
                Err(Error::Valkey { source, .. })
                    if source.is_migrating()
                        && tokio::time::Instant::now() + TRY_AGAIN_EVERY < until =>
                {
                    tokio::time::sleep(TRY_AGAIN_EVERY).await;
                }
                ran => return ran,
            }
        }
    }

    /// `GETRANGE <value key> 0 <max_bytes>`: the value, or at most one byte more than the limit.
    /// An empty or missing value is `None`.
    pub(crate) async fn get(&self, names: &KeyNames, max_bytes: usize) -> Result<Option<Vec<u8>>> {
        let bytes: Vec<u8> = self
            .run("GETRANGE value", Some(names), |mut c| async move {
                redis::cmd("GETRANGE")
                    .arg(&names.value)
                    .arg(0)
                    .arg(max_bytes)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Ok(Some(bytes).filter(|b| !b.is_empty()))
    }

    /// The fingerprint of what the value key holds now (read whole, up to `max_bytes + 1`), or
    /// `None` when it holds nothing.
    pub(crate) async fn fingerprint(
        &self,
        names: &KeyNames,
        max_bytes: usize,
    ) -> Result<Option<Fingerprint>> {
        let bytes = self.get(names, max_bytes).await?;
        Ok(bytes.as_deref().map(envelope::fingerprint))
    }

    /// Drops the value and the lock: a fill in flight can no longer write its older value back.
    pub(crate) async fn invalidate(&self, names: &KeyNames) -> Result<()> {
        self.run(
            "invalidate (DEL value lock)",
            Some(names),
            |mut c| async move { c.del::<_, i64>(names.all().collect::<Vec<_>>()).await },
        )
        .await
        .map(drop)
    }

    /// Drops the value only: the lock, if any, stays its holder's.
    pub(crate) async fn delete_value(&self, names: &KeyNames) -> Result<()> {
        self.run("repair (DEL value)", Some(names), |mut c| async move {
            c.del::<_, i64>(&names.value).await
        })
        .await
        .map(drop)
    }

    /// Drops the value unless it carries a source version of at least `wanted`
    /// ([`crate::wire::scripts::DROP_OLDER_SCRIPT`]); the lock, if any, stays its holder's.
    /// `Ok(false)`: a recent enough copy is there and stays.
    pub(crate) async fn drop_older(&self, names: &KeyNames, wanted: u64) -> Result<bool> {
        let mut inv = SCRIPTS.drop_older.prepare_invoke();
        inv.key(&names.value).arg(wanted.to_le_bytes().as_slice());
        let dropped: i64 = self.script("drop older copy", names, inv).await?;
        Ok(dropped == 1)
    }

    /// The native lock commands this store uses now.
    pub(crate) fn natives(&self) -> &Natives {
        &self.natives
    }

    /// Whether this is a cluster (one breaker per hash slot): a command's keys must share a slot.
    pub(crate) fn is_cluster(&self) -> bool {
        self.breakers.len() > 1
    }

    /// `true` while the breaker makes L2 calls fail fast.
    pub(crate) fn is_degraded(&self) -> bool {
        self.breakers.iter().any(Breaker::is_open)
    }

    /// What the store has under way on Valkey.
    pub(crate) fn under_way(&self) -> &Arc<UnderWay> {
        &self.under_way
    }
}

/// Failures that say the server is not there, as opposed to an error reply from a live server
/// (a timeout is weighed apart: [`Breaker::timed_out`]).
fn is_connection_failure(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal()
}

#[cfg(test)]
mod tests;
