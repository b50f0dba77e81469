//! The tracking connections behind coherence: one RESP3 connection per server (per primary of a
//! cluster), each running `CLIENT TRACKING ON BCAST PREFIX <table>: PREFIX lock:<table>:` for the
//! store's tables (or `CLIENT TRACKING ON` under key tracking, [`keys`], reading the keys it is
//! asked to) and handing the pushes to the [`Tracker`].
//!
//! A connection that fails (a read error, a disconnection push, a health `PING` or any other round
//! trip of its loop that fails or goes unanswered in a PING's time, so a silent link is noticed
//! within [`SILENT_LINK_BOUND`], or a PING's time after a round trip it went silent during) tells the tracker, which caps every L1 of the store (entries live at
//! most `unconfirmed_l1_life` from when the last round trip it answered was sent); it reconnects with
//! backoff, resubscribes, and the tracker flushes every L1 once it is back. A dropped table's
//! prefixes are removed (tracking turned off and on again with the rest, atomically). On a
//! cluster, a watcher re-reads `CLUSTER SLOTS` every second: when the set of primaries changes (a
//! failover, a node added or gone), it caps and starts tracking the new set. Each primary's
//! connection caps and flushes on its own: N primaries lost at once are N caps and N flushes.

use std::collections::HashSet;
use std::sync::Weak;
use std::time::Duration;

use futures::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ProtocolVersion, PushInfo, PushKind};
use tokio::sync::{mpsc, watch};

use crate::coherence::Tracker;
use crate::wire::connect::{Endpoint, Kind};
use crate::wire::timeout::within;
use keys::{Answer, Read};
use subscribe::{Mode, reread_marks, subscribe};

/// How often each tracking connection is checked with a PING.
const HEALTH_EVERY: Duration = Duration::from_millis(250);

/// How long a health PING may take before the connection counts as lost (at most the store's
/// `valkey_timeout`). A link that goes silent — a black-holed network, a frozen proxy — is so
/// noticed within [`SILENT_LINK_BOUND`], and every L1 of the store capped.
const HEALTH_TIMEOUT: Duration = Duration::from_millis(500);

/// The longest a silent tracking link (pushes and replies no longer arriving, the connection
/// still open) goes unnoticed before the store caps its L1 and reconnects: one health interval,
/// then one PING's time. Until then, another process's write may not reach this L1. Every other
/// round trip the connection's loop waits on is held to a PING's time as well
/// ([`limit`]): a link that goes silent during one is noticed at most a PING's time
/// after that round trip was sent.
pub(crate) const SILENT_LINK_BOUND: Duration = HEALTH_EVERY.saturating_add(HEALTH_TIMEOUT);

/// How often a cluster's topology is re-read.
const TOPOLOGY_EVERY: Duration = Duration::from_secs(1);

/// The longest pause between reconnect attempts.
const MAX_RECONNECT_PAUSE: Duration = Duration::from_millis(500);

/// Starts the tracking tasks of a store.
pub(crate) fn start(tracker: Weak<Tracker>, endpoint: Endpoint) {
    match endpoint.kind.clone() {
        Kind::Single(url) => {
            if let Some(t) = tracker.upgrade() {
                t.expect_nodes(1);
            }
            tokio::spawn(node(tracker, endpoint, url, Vec::new()));
        }
        Kind::Cluster(seeds) => {
            tokio::spawn(cluster::track(tracker, endpoint, seeds));
        }
    }
}

/// One tracking connection, to the server at `url` (a cluster primary serving `slots`): connect,
/// subscribe, route pushes; on any loss cap, and reconnect. Ends when the store (and so the
/// tracker) is gone.
async fn node(tracker: Weak<Tracker>, endpoint: Endpoint, url: String, slots: Vec<(u16, u16)>) {
    let Some(mut tables) = tracker.upgrade().map(|t| t.tables()) else {
        return;
    };
    let first = Duration::from_millis(50);
    let mut pause = first;
    loop {
        let mut established = false;
        let mut healthy_at = std::time::Instant::now();
        let life = Life {
            url: &url,
            slots: &slots,
            established: &mut established,
            healthy_at: &mut healthy_at,
        };
        let Some(lost) = track(&tracker, &endpoint, &mut tables, life).await else {
            return; // the tracker is gone
        };
        let Some(this) = tracker.upgrade() else {
            return;
        };
        this.node_lost(&url);
        // A connection that was tracking may have missed invalidations: cap. An attempt that
        // never got that far missed nothing more (L1 was capped when tracking was lost, and
        // keeps entries only briefly meanwhile); the flush when tracking is back follows.
        if established {
            this.cap_all(lost, healthy_at);
        }
        this.unvouch(&url, limit(&endpoint)).await;
        drop(this);
        pause = if established {
            first
        } else {
            (pause * 2).min(MAX_RECONNECT_PAUSE)
        };
        tokio::time::sleep(pause).await;
    }
}

/// Which connection a [`track`] is, and what it tells its caller.
struct Life<'a> {
    url: &'a str,
    /// A cluster primary's slots (empty for a single server).
    slots: &'a [(u16, u16)],
    /// Set once the connection tracked the store's tables.
    established: &'a mut bool,
    /// When the last round trip answered (a health PING, a subscribe) was sent: every push
    /// Valkey sent before then has been read. A push taken says only that it came, not when it
    /// was sent: behind a backlog, or read after a pause, long before, with the pushes after it
    /// lost with the connection. A loss caps L1 from here.
    healthy_at: &'a mut std::time::Instant,
}

/// One life of a tracking connection; returns why it ended (`None`: the tracker is gone).
async fn track(
    tracker: &Weak<Tracker>,
    endpoint: &Endpoint,
    tables: &mut watch::Receiver<Vec<String>>,
    life: Life<'_>,
) -> Option<&'static str> {
    let (namespace, by_keys) = {
        let this = tracker.upgrade()?;
        (this.namespace().to_owned(), this.keys().is_some())
    };
    let arrivals = by_keys.then(|| tracker.clone());
    let (conn, pushes) = match connect(endpoint, life.url, arrivals).await {
        Ok(connected) => connected,
        Err(why) => return Some(why),
    };
    let mut session = Session {
        tracker,
        endpoint,
        conn,
        pushes,
        reads: None,
        reading: futures::stream::FuturesOrdered::new(),
        namespace,
        by_keys,
        subscribed: HashSet::new(),
    };
    let subscribing = crate::clock::coarse_ticks();
    if let Some(why) = session.establish(tables, &life).await? {
        return Some(why);
    }
    // Set up and answering (and every L1 flushed on the way): a loss from now on caps L1 from
    // here at the earliest. L1 is vouched for once the owners have dropped what it held.
    *life.healthy_at = std::time::Instant::now();
    *life.established = true;
    session.vouch(life.url, subscribing)?;
    session.serve(tables, life).await
}

/// A RESP3 connection to `url` whose pushes arrive on the receiver, named
/// `echostore-tracking`; or why there is none. Under key tracking, `arrivals`' registry hears
/// of each push as the connection reads it ([`keys::Registry::arrived`]), ahead of the receiver.
async fn connect(
    endpoint: &Endpoint,
    url: &str,
    arrivals: Option<Weak<Tracker>>,
) -> Result<(MultiplexedConnection, mpsc::UnboundedReceiver<PushInfo>), &'static str> {
    let client = resp3_client(endpoint, url).map_err(|e| {
        tracing::warn!(error = %e, "coherence: cannot make a tracking client");
        "no client"
    })?;
    let (pushes_tx, pushes) = mpsc::unbounded_channel::<PushInfo>();
    let sender = move |push: PushInfo| {
        let tracker = arrivals.as_ref().and_then(Weak::upgrade);
        if let Some(registry) = tracker.as_deref().and_then(Tracker::keys) {
            registry.arrived(&push);
        }
        pushes_tx.send(push)
    };
    // Every round trip is timed by the loop that waits on it ([`within`]): the client's own
    // timer would take a pause of the process for a silent link.
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(endpoint.timeout))
        .set_response_timeout(None)
        .set_push_sender(sender);
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| {
            tracing::debug!(error = %e, "coherence: tracking connection failed; retrying");
            "connect failed"
        })?;
    let mut name = redis::cmd("CLIENT");
    name.arg("SETNAME").arg("echostore-tracking");
    let named = within(limit(endpoint), name.query_async::<()>(&mut conn)).await;
    if named.is_err() {
        return Err("silent while naming the connection");
    }
    Ok((conn, pushes))
}

/// Key tracking's reads on their way, answered in the order they were sent.
type Reading =
    futures::stream::FuturesOrdered<futures::future::BoxFuture<'static, (Vec<Read>, Vec<Answer>)>>;

/// A connected tracking connection, what it subscribed, and key tracking's reads.
struct Session<'a> {
    tracker: &'a Weak<Tracker>,
    endpoint: &'a Endpoint,
    conn: MultiplexedConnection,
    pushes: mpsc::UnboundedReceiver<PushInfo>,
    /// Under key tracking, the reads the store asks this connection for.
    reads: Option<mpsc::UnboundedReceiver<Read>>,
    reading: Reading,
    namespace: String,
    by_keys: bool,
    subscribed: HashSet<String>,
}

impl Session<'_> {
    /// Subscribes the tables wanted now, flushes, and announces the connection. `None`: the
    /// tracker is gone; `Some(Some(why))`: refused.
    async fn establish(
        &mut self,
        tables: &mut watch::Receiver<Vec<String>>,
        life: &Life<'_>,
    ) -> Option<Option<&'static str>> {
        let wanted = tables.borrow_and_update().clone();
        let (mode, conn) = (
            Mode {
                namespace: &self.namespace,
                by_keys: self.by_keys,
            },
            &mut self.conn,
        );
        let subscribed = subscribe(conn, mode, &wanted, &mut self.subscribed);
        match within(limit(self.endpoint), subscribed).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "coherence: CLIENT TRACKING refused; retrying");
                return Some(Some("CLIENT TRACKING refused"));
            }
            Err(_) => return Some(Some("silent while subscribing")),
        }
        let this = self.tracker.upgrade()?;
        // Up, and vouching for nothing until the flush is dealt with (`track`).
        this.vouch().pending(life.url);
        // Flush before announcing: a table waiting in `add_table` starts only after this, so the
        // flush reaches its owner before any value the table loads next.
        this.flush_established("tracking established");
        if let Some(registry) = this.keys() {
            let (tx, rx) = mpsc::unbounded_channel();
            registry.node_up(life.url, life.slots.to_vec(), tx);
            self.reads = Some(rx);
        }
        this.node_tracks(life.url, &self.subscribed);
        Some(None)
    }

    /// Routes pushes, runs key tracking's reads, follows the tables wanted and checks the
    /// connection's health, until it fails (why) or the tracker is gone (`None`).
    async fn serve(
        mut self,
        tables: &mut watch::Receiver<Vec<String>>,
        mut life: Life<'_>,
    ) -> Option<&'static str> {
        let mut health = tokio::time::interval(HEALTH_EVERY);
        // After a pause, one PING, not one for every interval the pause spanned.
        health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        health.tick().await;
        loop {
            tokio::select! {
                push = self.pushes.recv() => {
                    if let Some(why) = self.pushed(push).await? {
                        return Some(why);
                    }
                },
                Some(read) = next_read(&mut self.reads) => self.read(read)?,
                Some((batch, answers)) = self.reading.next(), if !self.reading.is_empty() => {
                    keys::answered(&*self.tracker.upgrade()?, batch, answers);
                },
                changed = tables.changed() => {
                    // The tracker is gone (its store was dropped, and its tables with it):
                    // nothing to track, and the server may be going away too.
                    if changed.is_err() || self.tracker.strong_count() == 0 {
                        return None;
                    }
                    if let Some(why) = self.resubscribe(tables, &mut life).await? {
                        return Some(why);
                    }
                },
                _ = health.tick() => {
                    if let Some(why) = self.health(&mut life).await? {
                        return Some(why);
                    }
                }
            }
        }
    }

    /// A health PING. Its answer says every push Valkey sent before it came: healthy when
    /// sent, and once the pushes ahead of the answer are routed, L1 is vouched for from then.
    /// `None`: the tracker is gone; `Some(Some(why))`: the connection is lost.
    async fn health(&mut self, life: &mut Life<'_>) -> Option<Option<&'static str>> {
        let (sent, sent_ticks) = (std::time::Instant::now(), crate::clock::coarse_ticks());
        let (cmd, limit) = (redis::cmd("PING"), limit(self.endpoint));
        let ping = cmd.query_async::<String>(&mut self.conn);
        if !matches!(within(limit, ping).await, Ok(Ok(_))) {
            return Some(Some("health PING failed"));
        }
        *life.healthy_at = sent;
        // The connection hands a push over before the reply read after it.
        while let Ok(push) = self.pushes.try_recv() {
            if let Some(why) = self.pushed(Some(push)).await? {
                return Some(Some(why));
            }
        }
        self.vouch(life.url, sent_ticks)?;
        Some(None)
    }

    /// Vouches for L1 from coarse-clock time `sent` once every push routed so far is dealt with:
    /// routed, a push is only a message on its way to its owner, and an owner behind on its
    /// messages would leave L1 answering what the push replaced. Owners that do not catch up
    /// within the health bound leave the vouch as it was, to lapse: reads go to Valkey meanwhile.
    /// The wait runs beside this task, which goes on routing pushes (each one it held back
    /// would be a change L1 goes on answering). `None`: the tracker is gone.
    fn vouch(&self, url: &str, sent: u64) -> Option<()> {
        let (this, limit, url) = (
            self.tracker.upgrade()?,
            limit(self.endpoint),
            url.to_owned(),
        );
        tokio::spawn(async move {
            if tokio::time::timeout(limit, this.caught_up()).await.is_ok() {
                this.vouch().renew_if_up(&url, sent);
            }
        });
        Some(())
    }

    /// A push (or the channel's end). `None`: the tracker is gone; `Some(Some(why))`: the
    /// connection is lost.
    async fn pushed(&mut self, push: Option<PushInfo>) -> Option<Option<&'static str>> {
        let push = match push {
            None => return Some(Some("push channel closed")),
            Some(push) if push.kind == PushKind::Disconnection => {
                return Some(Some("disconnected"));
            }
            Some(push) => push,
        };
        let this = self.tracker.upgrade()?;
        if self.by_keys {
            let limit = limit(self.endpoint);
            let reread = reread_marks(&mut self.conn, &this, &push);
            if within(limit, reread).await.is_err() {
                return Some(Some("silent while re-reading the marks"));
            }
        }
        route(&this, push);
        Some(None)
    }

    /// Sends a round trip of key tracking's reads. `None`: the tracker is gone.
    fn read(&mut self, read: Read) -> Option<()> {
        if let (Some(queued), Some(registry)) =
            (self.reads.as_mut(), self.tracker.upgrade()?.keys())
        {
            let batch = keys::batch(read, queued);
            registry.sent(&batch);
            self.reading
                .push_back(Box::pin(keys::query(self.conn.clone(), batch)));
        }
        Some(())
    }

    /// The tables wanted changed: subscribe them. `None`: the tracker is gone.
    async fn resubscribe(
        &mut self,
        tables: &mut watch::Receiver<Vec<String>>,
        life: &mut Life<'_>,
    ) -> Option<Option<&'static str>> {
        let wanted = tables.borrow_and_update().clone();
        let (mode, conn) = (
            Mode {
                namespace: &self.namespace,
                by_keys: self.by_keys,
            },
            &mut self.conn,
        );
        let (sent, limit) = (std::time::Instant::now(), limit(self.endpoint));
        let subscribed = subscribe(conn, mode, &wanted, &mut self.subscribed);
        let Ok(subscribed) = within(limit, subscribed).await else {
            return Some(Some("silent while subscribing"));
        };
        if let Err(e) = subscribed {
            if self.tracker.strong_count() == 0 {
                return None; // the store went away meanwhile, its connection with it
            }
            return Some(Some(subscribe_failed(&e)));
        }
        // Its replies say every push Valkey sent before them came, as a PING's would.
        *life.healthy_at = sent;
        self.tracker
            .upgrade()?
            .node_tracks(life.url, &self.subscribed);
        Some(None)
    }
}

/// How long a round trip the loop waits on may take, with the process running ([`within`]),
/// before the link counts as silent: while the loop waits, no push is routed and no PING sent,
/// so `valkey_timeout` alone would leave a silent link unnoticed that long.
fn limit(endpoint: &Endpoint) -> Duration {
    HEALTH_TIMEOUT.min(endpoint.timeout)
}

/// Why a resubscribe failed. A connection that broke meanwhile is lost like any other (and at a
/// store's shutdown, expected); only a server that refuses is worth a warning.
fn subscribe_failed(e: &redis::RedisError) -> &'static str {
    if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
        tracing::debug!(error = %e, "coherence: the tracking connection broke while subscribing");
        return "disconnected";
    }
    tracing::warn!(error = %e, "coherence: subscribing a table failed");
    "subscribe failed"
}

/// A RESP3 client for `url` (pushes need RESP3), with the endpoint's TLS roots.
fn resp3_client(endpoint: &Endpoint, url: &str) -> crate::error::Result<redis::Client> {
    let client = endpoint.client(url)?;
    let info = client.get_connection_info().clone();
    let resp3 = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let info = info.set_redis_settings(resp3);
    match &endpoint.ca {
        #[cfg(feature = "tls")]
        Some(ca) => redis::Client::build_with_tls(
            info,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca.clone()),
            },
        ),
        _ => redis::Client::open(info),
    }
    .map_err(|e| crate::error::Error::valkey("configuring RESP3", e))
}

/// The next read asked of this connection; never, when it takes none (broadcast).
async fn next_read(reads: &mut Option<mpsc::UnboundedReceiver<Read>>) -> Option<Read> {
    match reads {
        Some(reads) => reads.recv().await,
        None => std::future::pending().await,
    }
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

mod cluster;
pub(crate) mod keys;
mod subscribe;
#[cfg(test)]
mod tests;
