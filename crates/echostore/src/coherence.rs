//! Coherence across processes: one RESP3 connection per store on which Valkey pushes an
//! invalidation whenever a key under the store's tables' prefixes changes — whoever changed it
//! (another process, a script, an operator, an expiry).
//!
//! The connection runs `CLIENT TRACKING ON BCAST PREFIX <table>: PREFIX lock:<table>:` for every
//! table of the store, registered as tables start. An invalidation of a **value key** reaches the
//! table's owner, which drops the id from L1 and detaches a running flight for it (a fill that read
//! the old bytes cannot store them): ordered with fills and writes, like a local `invalidate`. An
//! invalidation of a value key **or a lock key** also wakes a loser waiting on that id, which then
//! re-reads at once instead of at its next safety poll.
//!
//! **When the connection is lost** (killed, Valkey restarted, a failed health PING), invalidations
//! may have been missed: every table of the store flushes its L1 and detaches its running flights at
//! once, and again when tracking is re-established. While tracking is down, values enter L1 for at
//! most [`DOWN_L1_LIFE`], and losers fall back to their safety poll.
//!
//! The pushes this process causes itself (its own fills and puts) also arrive. They are told apart
//! ([`OwnWrites`]): before writing, the writer tells the owner the envelope's fingerprint; a push
//! for that id is then checked by reading the value back and comparing, instead of dropping the
//! entry this process just stored. `docs/coherence.md` has the argument and the cost.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::{AsyncConnectionConfig, ProtocolVersion, PushInfo, PushKind};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::envelope::Fingerprint;
use crate::error::{Error, Result};
use crate::key::{KeyKind, parse_key};

/// How long a value may stay in L1 while tracking is down.
pub const DOWN_L1_LIFE: Duration = Duration::from_secs(1);

/// How often the tracking connection is checked with a PING.
const HEALTH_EVERY: Duration = Duration::from_secs(1);

/// The longest pause between reconnect attempts.
const MAX_RECONNECT_PAUSE: Duration = Duration::from_secs(2);

/// The envelopes this process is writing, per id: the pushes they cause are its own. A push
/// taken for one is not trusted blindly — the owner reads the value back and drops L1 only
/// if Valkey holds something else (another write may have landed in the same event-loop turn,
/// and Valkey sends one push for both).
pub(crate) struct OwnWrites<K> {
    pending: HashMap<K, VecDeque<Fingerprint>>,
}

impl<K: Eq + Hash + Clone> OwnWrites<K> {
    pub(crate) fn new() -> Self {
        OwnWrites {
            pending: HashMap::new(),
        }
    }

    /// This process is about to write an envelope with `fingerprint` under `id`.
    pub(crate) fn expect(&mut self, id: &K, fingerprint: Fingerprint) {
        self.pending
            .entry(id.clone())
            .or_default()
            .push_back(fingerprint);
    }

    /// A push for `id` arrived: the oldest own write it may stand for, if any.
    pub(crate) fn take(&mut self, id: &K) -> Option<Fingerprint> {
        let queue = self.pending.get_mut(id)?;
        let fingerprint = queue.pop_front();
        if queue.is_empty() {
            self.pending.remove(id);
        }
        fingerprint
    }

    /// Pushes were lost: nothing is expected any more.
    pub(crate) fn clear(&mut self) {
        self.pending.clear();
    }
}

/// What a table does with the pushes that concern it.
pub(crate) trait Sink: Send + Sync {
    /// The value key of this rendered id changed.
    fn invalidated(&self, id: &[u8]);
    /// Invalidations may have been missed: drop L1 and detach running flights.
    fn flush(&self);
}

/// The store's coherence: the tables to tell, the losers to wake, and whether tracking is up.
pub(crate) struct Tracker {
    tables: Mutex<HashMap<String, Vec<Weak<dyn Sink>>>>,
    /// Losers waiting on a key (value or lock), by key bytes.
    waiters: Mutex<HashMap<Vec<u8>, Weak<Notify>>>,
    up: AtomicBool,
    /// The store's key namespace (`""` or `"<ns>:"`).
    namespace: String,
    /// New tables' prefixes for the tracking task, each with a note to send once subscribed.
    register: mpsc::UnboundedSender<(String, oneshot::Sender<()>)>,
}

impl Tracker {
    /// Starts the tracking task for the Valkey at `url`; it connects (and reconnects) by itself.
    pub(crate) fn start(url: &str, namespace: &str, timeout: Duration) -> Result<Arc<Tracker>> {
        let client = redis::Client::open(url).map_err(|e| Error::valkey("parsing the url", e))?;
        let info = client.get_connection_info().clone();
        let resp3 = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let client = redis::Client::open(info.set_redis_settings(resp3))
            .map_err(|e| Error::valkey("configuring RESP3", e))?;
        let (register, registered) = mpsc::unbounded_channel();
        let tracker = Arc::new(Tracker {
            tables: Mutex::new(HashMap::new()),
            waiters: Mutex::new(HashMap::new()),
            up: AtomicBool::new(false),
            namespace: namespace.to_owned(),
            register,
        });
        tokio::spawn(run(Arc::downgrade(&tracker), client, timeout, registered));
        Ok(tracker)
    }

    /// Tells `sink` about the pushes for `table`'s keys from now on; returns once Valkey tracks
    /// the table's prefixes, or after `wait` (tracking down: L1 then keeps values only briefly,
    /// and the flush when tracking comes back covers the gap).
    pub(crate) async fn add_table(&self, table: &str, sink: Weak<dyn Sink>, wait: Duration) {
        let (done, subscribed) = oneshot::channel();
        {
            let mut tables = lock(&self.tables);
            let sinks = tables.entry(table.to_owned()).or_default();
            sinks.retain(|s| s.strong_count() > 0);
            sinks.push(sink);
            let _ = self.register.send((table.to_owned(), done));
        }
        let _ = tokio::time::timeout(wait, subscribed).await;
    }

    /// `true` while the tracking connection is up and subscribed.
    pub(crate) fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// A wake-up for the loser of one id: notified when its value key or its lock key changes
    /// (and whenever tracking is lost). Hold it while waiting; it unregisters when dropped.
    pub(crate) fn watch(&self, keys: [&[u8]; 2]) -> Arc<Notify> {
        let notify = Arc::new(Notify::new());
        let mut waiters = lock(&self.waiters);
        waiters.retain(|_, w| w.strong_count() > 0);
        for key in keys {
            waiters.insert(key.to_vec(), Arc::downgrade(&notify));
        }
        notify
    }

    fn sinks(&self, table: &str) -> Vec<Arc<dyn Sink>> {
        let tables = lock(&self.tables);
        let sinks = tables.get(table).map(Vec::as_slice).unwrap_or_default();
        sinks.iter().filter_map(Weak::upgrade).collect()
    }

    fn all_sinks(&self) -> Vec<Arc<dyn Sink>> {
        let tables = lock(&self.tables);
        tables
            .values()
            .flatten()
            .filter_map(Weak::upgrade)
            .collect()
    }

    fn prefixes(&self) -> Vec<String> {
        lock(&self.tables).keys().cloned().collect()
    }

    /// One pushed key changed.
    fn changed(&self, key: &[u8]) {
        if let Some(notify) = lock(&self.waiters).get(key).and_then(Weak::upgrade) {
            notify.notify_one();
        }
        match parse_key(&self.namespace, key) {
            Some((KeyKind::Value, table, id)) => {
                for sink in self.sinks(table) {
                    sink.invalidated(id);
                }
            }
            Some((KeyKind::Lock, ..)) => {}
            None => {
                tracing::debug!(key = %String::from_utf8_lossy(key), "a push for a key of no table")
            }
        }
    }

    /// Tracking went down or came back: flush every table, wake every loser.
    fn flush_all(&self, why: &str) {
        tracing::info!(why, "coherence: flushing every L1 of the store");
        for sink in self.all_sinks() {
            sink.flush();
        }
        for notify in lock(&self.waiters).values().filter_map(Weak::upgrade) {
            notify.notify_one();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The tracking task: connect, subscribe, route pushes; on any loss flush, and reconnect. Ends
/// when the store (and so the tracker) is gone.
async fn run(
    tracker: Weak<Tracker>,
    client: redis::Client,
    timeout: Duration,
    mut registered: mpsc::UnboundedReceiver<(String, oneshot::Sender<()>)>,
) {
    let mut pause = Duration::from_millis(50);
    loop {
        let (pushes_tx, mut pushes) = mpsc::unbounded_channel::<PushInfo>();
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_push_sender(pushes_tx);
        let connected = client
            .get_multiplexed_async_connection_with_config(&config)
            .await;
        let Some(this) = tracker.upgrade() else {
            return;
        };
        let mut conn = match connected {
            Ok(conn) => conn,
            Err(e) => {
                tracing::debug!(error = %e, "coherence: tracking connection failed; retrying");
                drop(this);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_RECONNECT_PAUSE);
                continue;
            }
        };
        let _: redis::RedisResult<()> = redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg("echostore-tracking")
            .query_async(&mut conn)
            .await;
        // Every table registered so far is subscribed here, in one command.
        let mut waiting = Vec::new();
        while let Ok((_, done)) = registered.try_recv() {
            waiting.push(done);
        }
        let mut subscribed: HashSet<String> = HashSet::new();
        let tables = this.prefixes();
        let subscribed_now = subscribe(&mut conn, &this.namespace, &tables).await;
        subscribed.extend(tables);
        if let Err(e) = subscribed_now {
            tracing::warn!(error = %e, "coherence: CLIENT TRACKING refused; retrying");
            drop(this);
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_RECONNECT_PAUSE);
            continue;
        }
        pause = Duration::from_millis(50);
        this.up.store(true, Ordering::Release);
        this.flush_all("tracking established");
        for done in waiting {
            let _ = done.send(());
        }
        drop(this);
        let mut health = tokio::time::interval(HEALTH_EVERY);
        health.tick().await;
        let lost = loop {
            tokio::select! {
                push = pushes.recv() => match push {
                    Some(push) if push.kind == PushKind::Disconnection => break "disconnected",
                    Some(push) => {
                        let Some(this) = tracker.upgrade() else { return };
                        route(&this, push);
                    }
                    None => break "push channel closed",
                },
                table = registered.recv() => match table {
                    Some((table, done)) if subscribed.contains(&table) => {
                        let _ = done.send(());
                    }
                    Some((table, done)) => {
                        subscribed.insert(table.clone());
                        let namespace = tracker.upgrade().map(|t| t.namespace.clone()).unwrap_or_default();
                        if let Err(e) = subscribe(&mut conn, &namespace, &[table]).await {
                            tracing::warn!(error = %e, "coherence: subscribing a table failed");
                            break "subscribe failed";
                        }
                        let _ = done.send(());
                    }
                    None => return, // the tracker is gone
                },
                _ = health.tick() => {
                    let ping: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut conn).await;
                    if ping.is_err() {
                        break "health PING failed";
                    }
                }
            }
        };
        let Some(this) = tracker.upgrade() else {
            return;
        };
        this.up.store(false, Ordering::Release);
        this.flush_all(lost);
    }
}

/// `CLIENT TRACKING ON BCAST` with the value and lock prefixes of `tables`.
async fn subscribe(
    conn: &mut redis::aio::MultiplexedConnection,
    namespace: &str,
    tables: &[String],
) -> redis::RedisResult<()> {
    if tables.is_empty() {
        return Ok(());
    }
    let mut cmd = redis::cmd("CLIENT");
    cmd.arg("TRACKING").arg("ON").arg("BCAST");
    for table in tables {
        cmd.arg("PREFIX")
            .arg(format!("{namespace}{table}:"))
            .arg("PREFIX")
            .arg(format!("{namespace}lock:{table}:"));
    }
    cmd.query_async(conn).await
}

/// An `invalidate` push: its keys changed; a nil payload means the whole database was flushed.
fn route(tracker: &Tracker, push: PushInfo) {
    if push.kind != PushKind::Invalidate {
        return;
    }
    match push.data.first() {
        Some(redis::Value::Array(keys)) => {
            for key in keys {
                if let redis::Value::BulkString(key) = key {
                    tracker.changed(key);
                }
            }
        }
        _ => tracker.flush_all("the database was flushed"),
    }
}
