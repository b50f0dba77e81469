//! The data connection as it is now: the one a breaker's trial is made on, and the watchdog
//! that replaces a cluster connection that stays broken.
//!
//! **A trial needs a connection of its own.** redis-rs's connection manager, after losing its
//! connection, reconnects in the background and answers its next call with that reconnect's
//! outcome. While Valkey is away, that outcome is a failure settled before Valkey came back: a
//! breaker's trial made on that connection would fail for a Valkey already back, and keep the
//! breaker open one cooldown more. So a trial on one server is made on a new connection
//! ([`Live::for_trial`]), which becomes the current one when the trial succeeds: a trial is one
//! real connection attempt, made when it is let through.
//!
//! redis-rs's cluster client repairs itself after most faults, but not after all: a primary that
//! restarts under load can leave it failing every command on every slot (a slot refresh that
//! cannot finish, connections it no longer holds), while a new client reaches every node at once.
//! So while calls keep failing at the connection level (refused, dropped, timed out: not an
//! error reply, and not a breaker that is open), a [`watch`] task makes a new connection at most
//! once per [`REBUILD_EVERY`] and swaps it in if it can do what the current one could not: read
//! the key the last failed call was about. A node that is really away fails the new connection
//! too, and nothing is swapped. Calls in flight finish on the connection they started on.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use crate::wire::connect::{Connection, Endpoint, Kind};

/// How often the watchdog looks.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// How long calls must have been failing, with none succeeding, before a new connection is tried;
/// and the least time between two tries.
const REBUILD_EVERY: Duration = Duration::from_secs(1);

/// The store's data connection, replaceable, and what its calls have been meeting.
pub(crate) struct Live {
    current: RwLock<Connection>,
    endpoint: Endpoint,
    epoch: Instant,
    /// Ms since `epoch` (plus one) of the first connection-level failure since the last call
    /// that succeeded (0: none).
    failing_since: AtomicU64,
    /// The value key (or none: a call about no key) of the last call that failed.
    last_failed: Mutex<Option<Vec<u8>>>,
    /// How many times the connection was replaced.
    rebuilt: AtomicU64,
}

impl Live {
    pub(crate) fn new(conn: Connection, endpoint: Endpoint) -> Arc<Self> {
        Arc::new(Live {
            current: RwLock::new(conn),
            endpoint,
            epoch: Instant::now(),
            failing_since: AtomicU64::new(0),
            last_failed: Mutex::new(None),
            rebuilt: AtomicU64::new(0),
        })
    }

    /// The connection to make a call on.
    pub(crate) fn get(&self) -> Connection {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A new connection for the breaker's trial, on one server (see the module's header); `None`
    /// on a cluster, whose client reconnects each node itself (and [`watch`] replaces it when it
    /// does not), or when no client can be made.
    pub(crate) fn for_trial(&self) -> Option<Connection> {
        match &self.endpoint.kind {
            Kind::Single(url) => self.endpoint.single(url).ok(),
            Kind::Cluster(_) => None,
        }
    }

    /// A trial on `conn` (from [`Self::for_trial`]) succeeded: it is the connection from now on.
    pub(crate) fn adopt(&self, conn: Connection) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = conn;
        self.succeeded();
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX) + 1
    }

    /// A call succeeded.
    pub(crate) fn succeeded(&self) {
        self.failing_since.store(0, Relaxed);
    }

    /// A call about `key` (a value key, or none) failed at the connection level.
    pub(crate) fn failed(&self, key: Option<&[u8]>) {
        let _ = self
            .failing_since
            .compare_exchange(0, self.now(), Relaxed, Relaxed);
        *self
            .last_failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = key.map(<[u8]>::to_vec);
    }

    /// How many times the connection was replaced.
    pub(crate) fn rebuilt(&self) -> u64 {
        self.rebuilt.load(Relaxed)
    }

    /// Calls have failed for [`REBUILD_EVERY`] and none succeeded since (a success clears
    /// `failing_since`).
    fn stuck(&self) -> bool {
        let since = self.failing_since.load(Relaxed);
        since != 0 && self.now().saturating_sub(since) >= millis(REBUILD_EVERY)
    }
}

/// Watches `live` while the store holds it: when its calls have been failing, tries a new
/// connection from `endpoint` (each try bounded by the endpoint's timeout) and swaps it in if it
/// reads what the current one could not.
pub(crate) async fn watch(live: Weak<Live>, endpoint: Endpoint) {
    let mut last_try: Option<Instant> = None;
    loop {
        tokio::time::sleep(LOOK_EVERY).await;
        let Some(this) = live.upgrade() else {
            return;
        };
        if !this.stuck() || last_try.is_some_and(|t| t.elapsed() < REBUILD_EVERY) {
            continue;
        }
        last_try = Some(Instant::now());
        let key = this
            .last_failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        drop(this); // a try may take a while: the store may go meanwhile
        let Some(fresh) = try_new(&endpoint, key).await else {
            continue;
        };
        let Some(this) = live.upgrade() else {
            return;
        };
        *this.current.write().unwrap_or_else(PoisonError::into_inner) = fresh;
        this.rebuilt.fetch_add(1, Relaxed);
        this.succeeded();
        tracing::info!("valkey: the data connection kept failing; replaced it with a new one");
    }
}

/// A new connection, if one can be made and can read `key` (or answer a `PING`) in time.
async fn try_new(endpoint: &Endpoint, key: Option<Vec<u8>>) -> Option<Connection> {
    let attempt = async {
        let mut fresh = endpoint.connect().await.ok()?;
        let probe = match &key {
            Some(key) => {
                let mut read = redis::cmd("GETRANGE");
                read.arg(key.as_slice()).arg(0).arg(0);
                read
            }
            None => redis::cmd("PING"),
        };
        probe.query_async::<redis::Value>(&mut fresh).await.ok()?;
        Some(fresh)
    };
    // A cluster's connection reaches every primary: give it two of the endpoint's timeouts.
    tokio::time::timeout(endpoint.timeout.saturating_mul(2), attempt)
        .await
        .ok()
        .flatten()
}

fn millis(span: Duration) -> u64 {
    u64::try_from(span.as_millis()).unwrap_or(u64::MAX)
}
