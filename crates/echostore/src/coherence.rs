//! Coherence across processes: one RESP3 connection per store on which Valkey pushes an
//! invalidation whenever a key under the store's tables' prefixes changes — whoever changed it
//! (another process, a script, an operator, an expiry).
//!
//! By default ([`Tracking::Broadcast`]) the connection runs
//! `CLIENT TRACKING ON BCAST PREFIX <table>: PREFIX lock:<table>:` for every table of the store, registered as tables start. With
//! [`Tracking::Keys`] it runs `CLIENT TRACKING ON`, and Valkey pushes only the keys it read
//! (`crate::coherence::tracking::keys`): each value L1 takes is read there once more before it lives its
//! full life. An invalidation of a **value key** reaches the
//! table's owner, which drops the id from L1 and detaches a running flight for it (a fill that read
//! the old bytes cannot store them): ordered with fills and writes, like a local `invalidate`. An
//! invalidation of a value key **or a lock key** also wakes a loser waiting on that id, which then
//! re-reads at once instead of at its next safety poll.
//!
//! **When the connection is lost** (killed, Valkey restarted, a failed health PING), invalidations
//! may have been missed: every table of the store caps its L1 (what it holds lives at most
//! `unconfirmed_l1_life` from when the link's last answered round trip was sent) and detaches its running
//! flights at once, and flushes its L1 when tracking is re-established. While tracking is down, values enter L1 for at
//! most the store's `unconfirmed_l1_life` (default [`DOWN_L1_LIFE`]), and losers fall back to
//! their safety poll.
//!
//! The pushes this process causes itself (its own fills and puts) also arrive. They are told apart
//! ([`OwnWrites`](crate::shard::own_writes::OwnWrites)): before writing, the writer tells the
//! owner the envelope's fingerprint, kept in the id's state on its board; a push for that id is
//! then checked by reading the value back and comparing, instead of dropping the entry this
//! process just stored. `docs/coherence.md` has the argument and the cost.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};

use crate::coherence::tracking::keys::{Found, Read, Registry};
pub(crate) use crate::coherence::vouch::Vouch;
use crate::valkey::envelope::Fingerprint;
use crate::wire::key::{KeyKind, parse_key, split_schema};

/// How Valkey tells a store which keys changed ([`StoreBuilder::tracking`](crate::StoreBuilder::tracking)).
/// Both keep the guarantees of `docs/consistency.md`; they differ in what they cost Valkey and
/// the store (`docs/scale.md` has the measurements and the rule of thumb).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tracking {
    /// `CLIENT TRACKING ON BCAST PREFIX …`: every change under the store's tables is pushed to
    /// every store, whether it holds the key or not. The default: the cheaper mode while each
    /// process holds much of what is written.
    #[default]
    Broadcast,
    /// `CLIENT TRACKING ON`, Valkey's default mode: Valkey remembers the keys each store's
    /// tracking connection read and pushes only their changes, so a push costs nothing on the
    /// processes that do not hold the key. Each value L1 takes is read once more on that
    /// connection (the bytes compared with L1's), and answers no read until then (reads in that
    /// round trip read Valkey); Valkey keeps a record per key and store. For fleets where each
    /// process holds a small share of the keys.
    Keys,
}

impl Tracking {
    /// The longest a silent tracking link (pushes and replies no longer arriving, the
    /// connection still open) goes unnoticed before the store caps its L1 and reconnects:
    /// one health interval, then one PING's time. Until then, another process's write may not
    /// reach this L1.
    pub const SILENT_LINK_BOUND: std::time::Duration = tracking::SILENT_LINK_BOUND;

    /// The mode's name: `"broadcast"` or `"keys"`.
    pub fn name(self) -> &'static str {
        match self {
            Tracking::Broadcast => "broadcast",
            Tracking::Keys => "keys",
        }
    }
}

/// The default of [`StoreBuilder::unconfirmed_l1_life`](crate::StoreBuilder::unconfirmed_l1_life):
/// how long a value Valkey could not confirm stays in L1 (tracking down, or the data connection
/// failing).
pub(crate) const DOWN_L1_LIFE: Duration = Duration::from_secs(1);

/// What a table does with the pushes that concern it.
pub(crate) trait Sink: Send + Sync {
    /// `true` if keys with this schema suffix (`crate::state::schemas`; empty for schema 0) are this
    /// table's own: a push for another schema's copy is none of its business.
    fn owns(&self, schema: &[u8]) -> bool;
    /// The value key of this rendered id changed.
    fn invalidated(&self, id: &[u8]);
    /// Invalidations may have been missed: drop L1 and detach running flights. Counted in
    /// `coherence_flushes` unless `when_held` and the table holds nothing to drop.
    fn flush(&self, when_held: bool);
    /// A tracking connection is lost, and was last known healthy at `since`: invalidations may
    /// have been missed from then on. Detach running flights, and keep what L1 holds for at most
    /// the unconfirmed life from `since`, as what it takes from now on.
    fn cap(&self, since: Instant);
    /// The table's marks changed (a clear or a tag invalidation somewhere).
    fn marks_changed(&self);
    /// Key tracking read the value key of this rendered id for an entry made from
    /// `fingerprint`'s bytes, and found them (or not).
    fn confirmed(&self, id: &[u8], fingerprint: Fingerprint, found: Found);
    /// The value or lock key of this rendered id changed: wake the id's losers in this process.
    fn pushed(&self, id: &[u8]);
    /// Pushes may have been missed: wake every loser of the table.
    fn wake_losers(&self);
    /// Done once every shard has dealt with what was routed to it before this call (a push
    /// routed is a message on its way to the id's owner, which drops the id from L1 in its turn).
    fn caught_up(&self) -> futures::future::BoxFuture<'_, ()>;
}

/// The store's coherence: the tables to tell (which wake their own losers), and whether tracking
/// is up.
pub(crate) struct Tracker {
    tables: Mutex<HashMap<String, Vec<Weak<dyn Sink>>>>,
    /// The store's key namespace (`""` or `"<ns>:"`).
    namespace: String,
    /// The tables to track, for the tracking tasks (one per server, or per cluster primary).
    tables_tx: watch::Sender<Vec<String>>,
    /// What each tracking connection has subscribed; `up` only when every one is up.
    nodes: Mutex<Nodes>,
    /// Wakes `add_table` when a connection subscribed something.
    subscribed: Notify,
    /// What the tracking connections read, under key tracking.
    keys: Option<Registry>,
    /// How long L1 may answer before the tracking connections are heard again.
    vouch: Arc<Vouch>,
}

/// The tracking connections of a store, by server address.
#[derive(Default)]
struct Nodes {
    /// How many connections the store needs (1, or the cluster's primaries).
    expected: usize,
    /// The tables each connected one tracks now.
    tracking: HashMap<String, HashSet<String>>,
}

impl Tracker {
    /// A tracker for a store's tables; `tracking::start` runs its connections.
    pub(crate) fn new(namespace: &str, mode: Tracking) -> Arc<Tracker> {
        let (tables_tx, _) = watch::channel(Vec::new());
        Arc::new(Tracker {
            tables: Mutex::new(HashMap::new()),
            namespace: namespace.to_owned(),
            tables_tx,
            nodes: Mutex::new(Nodes::default()),
            subscribed: Notify::new(),
            keys: (mode == Tracking::Keys).then(Registry::default),
            vouch: Arc::new(Vouch::new()),
        })
    }

    /// How the store tracks.
    pub(crate) fn mode(&self) -> Tracking {
        match self.keys {
            Some(_) => Tracking::Keys,
            None => Tracking::Broadcast,
        }
    }

    /// How long L1 may answer before the tracking connections are heard again.
    pub(crate) fn vouch(&self) -> &Arc<Vouch> {
        &self.vouch
    }

    /// What the tracking connections read, under key tracking; `None` for broadcast.
    pub(crate) fn keys(&self) -> Option<&Registry> {
        self.keys.as_ref()
    }

    /// Tells `sink` about the pushes for `table`'s keys from now on; returns once every tracking
    /// connection tracks the table's prefixes, or after `wait` (tracking down: L1 then keeps
    /// values only briefly, and the flush when tracking comes back covers the gap).
    pub(crate) async fn add_table(&self, table: &str, sink: Weak<dyn Sink>, wait: Duration) {
        {
            let mut tables = lock(&self.tables);
            let sinks = tables.entry(table.to_owned()).or_default();
            sinks.retain(|s| s.strong_count() > 0);
            sinks.push(sink);
            let names: Vec<String> = tables.keys().cloned().collect();
            self.tables_tx.send_replace(names);
        }
        let tracked = async {
            loop {
                let notified = self.subscribed.notified();
                if self.tracks(table) {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(wait, tracked).await;
    }

    /// `sink`'s table is gone: its owner hears no more pushes, and once no table of that name is
    /// left in the store, the tracking connections drop its prefixes (so starting and dropping
    /// tables does not pile prefixes up on Valkey).
    pub(crate) fn remove_table(&self, table: &str, sink: &Weak<dyn Sink>) {
        let mut tables = lock(&self.tables);
        let Some(sinks) = tables.get_mut(table) else {
            return;
        };
        sinks.retain(|s| s.strong_count() > 0 && !Weak::ptr_eq(s, sink));
        if sinks.is_empty() {
            tables.remove(table);
            let names: Vec<String> = tables.keys().cloned().collect();
            self.tables_tx.send_replace(names);
        }
    }

    /// `true` when every tracking connection is up and tracks `table`.
    fn tracks(&self, table: &str) -> bool {
        let nodes = lock(&self.nodes);
        nodes.expected > 0
            && nodes.tracking.len() == nodes.expected
            && nodes.tracking.values().all(|t| t.contains(table))
    }

    /// The tables to track, as the tracking tasks follow them.
    pub(crate) fn tables(&self) -> watch::Receiver<Vec<String>> {
        self.tables_tx.subscribe()
    }

    /// The store's key namespace.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The store now needs `expected` tracking connections (a cluster's topology changed):
    /// forget the old ones.
    pub(crate) fn expect_nodes(&self, expected: usize) {
        let mut nodes = lock(&self.nodes);
        nodes.expected = expected;
        nodes.tracking.clear();
        self.vouch.clear();
    }

    /// The connection to `node` tracks `tables` now.
    pub(crate) fn node_tracks(&self, node: &str, tables: &HashSet<String>) {
        lock(&self.nodes)
            .tracking
            .insert(node.to_owned(), tables.clone());
        self.subscribed.notify_waiters();
    }

    /// The connection to `node` is gone. It goes on bounding the vouch until
    /// [`Tracker::unvouch`].
    pub(crate) fn node_lost(&self, node: &str) {
        lock(&self.nodes).tracking.remove(node);
        if let Some(registry) = &self.keys {
            registry.node_down(node);
        }
    }

    /// The lost connection to `node` stops bounding the vouch once every owner has dealt with
    /// what was sent to it before (the cap, the pushes routed): a connection down holds nothing
    /// up, since L1 is capped then, but only once it is. Letting go before would let a lapsed
    /// vouch (this process behind on its pushes) answer from L1, until the owners catch up, what
    /// those pushes and the cap drop. Owners that do not catch up within `limit` leave the vouch
    /// as it is, to lapse; the next reconnect attempt tries again.
    pub(crate) async fn unvouch(&self, node: &str, limit: Duration) {
        if tokio::time::timeout(limit, self.caught_up()).await.is_ok() {
            self.vouch.down(node);
        }
    }

    /// `true` while every tracking connection is up and subscribed.
    pub(crate) fn is_up(&self) -> bool {
        let nodes = lock(&self.nodes);
        nodes.expected > 0 && nodes.tracking.len() == nodes.expected
    }

    /// A loser waits on `keys` (an id's value and lock keys; its wake-up is kept in the id's
    /// state, `TableCore::watch`): under key tracking Valkey pushes these keys' changes only once
    /// its connection has read them, so they are read now; a change before that is found by the
    /// loser's next safety poll.
    pub(crate) fn track(&self, keys: &[&[u8]]) {
        if let Some(registry) = &self.keys {
            for &key in keys {
                registry.read(Read {
                    key: key.to_vec(),
                    expect: None,
                });
            }
        }
    }

    fn sinks(&self, table: &str) -> Vec<Arc<dyn Sink>> {
        let tables = lock(&self.tables);
        let sinks = tables.get(table).map(Vec::as_slice).unwrap_or_default();
        sinks.iter().filter_map(Weak::upgrade).collect()
    }

    /// Done once every table has dealt with the pushes routed to it so far.
    pub(crate) async fn caught_up(&self) {
        let sinks = self.all_sinks();
        futures::future::join_all(sinks.iter().map(|sink| sink.caught_up())).await;
    }

    fn all_sinks(&self) -> Vec<Arc<dyn Sink>> {
        let tables = lock(&self.tables);
        tables
            .values()
            .flatten()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// One pushed key changed (key tracking's registry heard of it as the push arrived:
    /// [`Registry::arrived`]).
    pub(crate) fn changed(&self, key: &[u8]) {
        tracing::trace!(key = %String::from_utf8_lossy(key), "pushed");
        // The owner hears of the change before the loser wakes: a woken loser's next message to
        // its owner (it stops waiting) then comes after the invalidation, which leaves it attached.
        let (plain, schema) = split_schema(key);
        match parse_key(&self.namespace, plain) {
            Some((KeyKind::Value, table, id)) => {
                for sink in self.sinks(table).iter().filter(|s| s.owns(schema)) {
                    sink.invalidated(id);
                    sink.pushed(id);
                }
            }
            Some((KeyKind::Lock, table, id)) => {
                for sink in self.sinks(table).iter().filter(|s| s.owns(schema)) {
                    sink.pushed(id);
                }
            }
            Some((KeyKind::Marks, table, _)) => {
                for sink in self.sinks(table) {
                    sink.marks_changed();
                }
            }
            None => {
                tracing::debug!(key = %String::from_utf8_lossy(key), "a push for a key of no table")
            }
        }
    }

    /// Key tracking read `key` for an entry made from `fingerprint`'s bytes.
    pub(crate) fn confirmed(&self, key: &[u8], fingerprint: Fingerprint, found: Found) {
        let (plain, schema) = split_schema(key);
        if let Some((KeyKind::Value, table, id)) = parse_key(&self.namespace, plain) {
            for sink in self.sinks(table).iter().filter(|s| s.owns(schema)) {
                sink.confirmed(id, fingerprint, found);
            }
        }
    }

    /// A tracking connection was lost: every table keeps what its L1 holds for at most the
    /// store's `unconfirmed_l1_life`, as it keeps what it loads until tracking is back (which
    /// then flushes). The staleness bound is the same as a flush's and the cost half of it:
    /// no id is loaded twice while Valkey is away.
    pub(crate) fn cap_all(&self, why: &str, since: Instant) {
        tracing::info!(
            why,
            "coherence: every L1 of the store keeps its entries briefly"
        );
        if let Some(registry) = &self.keys {
            registry.forget();
        }
        for sink in self.all_sinks() {
            sink.cap(since);
            sink.wake_losers();
        }
    }

    pub(crate) fn flush_all(&self, why: &str) {
        self.flush_sinks(why, false);
    }

    /// A tracking connection is up and subscribed: what was held while it was not may be out of
    /// date, and is dropped (a table that holds nothing has nothing to count).
    pub(crate) fn flush_established(&self, why: &str) {
        self.flush_sinks(why, true);
    }

    fn flush_sinks(&self, why: &str, when_held: bool) {
        tracing::info!(why, "coherence: flushing every L1 of the store");
        if let Some(registry) = &self.keys {
            registry.forget();
        }
        for sink in self.all_sinks() {
            sink.flush(when_held);
            sink.wake_losers();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub(crate) mod tracking;
pub(crate) mod vouch;
