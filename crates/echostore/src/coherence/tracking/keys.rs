//! Key tracking ([`Tracking::Keys`](crate::Tracking::Keys)): Valkey pushes a change only to the
//! connections that read the key since its last change, so a store's tracking connection must
//! read every key it wants to hear about. This module owns what those connections have read
//! ([`Registry`]) and the reads themselves ([`batch`], [`query`], [`answered`]).
//!
//! A value enters L1 from the data connection, which Valkey does not track. Until the tracking
//! connection has read the same key and found the same bytes (the envelope's fingerprint), a
//! change made between the two reads would never be pushed: so L1 keeps the value not fresh until
//! then, and reads of it read Valkey. Once found, Valkey tracks the key from that read on, and
//! every later change is pushed on the same connection, after the read's reply. A key whose
//! bytes were found and not pushed since is *held*: a value with those bytes is confirmed
//! without another read.
//!
//! The reads run beside the connection's pushes, not before them, so that a push is never late
//! behind a round trip. A push may then be taken before the answer of a read that Valkey ran
//! before it: the registry then does not count that key as held (it may no longer be tracked),
//! and the owner keeps an entry only while L1 still holds it, which such a push has dropped.

use std::collections::HashMap;
use std::sync::Mutex;

use redis::{PushInfo, PushKind};
use tokio::sync::mpsc;

use crate::coherence::Tracker;
use crate::valkey::envelope::{self, Fingerprint};
use crate::wire::key::{KeyKind, parse_key, split_schema};

/// How many held keys the registry remembers before it forgets them all: it only saves reads,
/// so forgetting costs one read per key held, never a missed push.
const MAX_HELD: usize = 1 << 20;

/// How many reads one round trip of a tracking connection carries at most.
const READS_PER_TRIP: usize = 256;

/// A read for a tracking connection: Valkey tracks `key` for it from then on. `expect`: the
/// fingerprint an L1 entry was read or written as, to be confirmed or found changed.
#[derive(Debug)]
pub(crate) struct Read {
    pub(crate) key: Vec<u8>,
    pub(crate) expect: Option<Fingerprint>,
}

/// What a tracking connection found for an L1 entry waiting to be confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// The bytes the entry was made from: Valkey tracks the key since, the entry lives its life.
    Held,
    /// Other bytes (or none): the entry is out of date.
    Changed,
    /// The read failed: the entry keeps its short life.
    Unknown,
}

/// What the store's tracking connections have read, and where each takes its reads.
#[derive(Default)]
pub(crate) struct Registry {
    keys: Mutex<Keys>,
    /// The connections up now.
    nodes: Mutex<Vec<Node>>,
}

/// The keys the tracking connections read, and those being read.
#[derive(Default)]
struct Keys {
    /// Value keys read on a tracking connection and not pushed since, with the bytes found.
    held: HashMap<Vec<u8>, Fingerprint>,
    /// Keys with reads on the way: how many, and whether a push of the key came meanwhile.
    reading: HashMap<Vec<u8>, (usize, bool)>,
}

impl Keys {
    /// Valkey pushed a change of `key`: it no longer tracks the key for this store.
    fn changed(&mut self, key: &[u8]) {
        self.held.remove(key);
        if let Some((_, pushed)) = self.reading.get_mut(key) {
            *pushed = true;
        }
    }
}

/// A tracking connection that takes reads: a single server's, or a cluster primary's with the
/// slots it serves.
struct Node {
    url: String,
    /// Empty for a single server: every key.
    slots: Vec<(u16, u16)>,
    reads: mpsc::UnboundedSender<Read>,
}

impl Registry {
    /// `true` if the tracking connection found `key` holding `fingerprint`'s bytes and Valkey
    /// has pushed no change of it since.
    pub(crate) fn holds(&self, key: &[u8], fingerprint: Fingerprint) -> bool {
        lock(&self.keys).held.get(key) == Some(&fingerprint)
    }

    /// Sends `read` to the connection that serves its key; `false` when none is up.
    pub(crate) fn read(&self, read: Read) -> bool {
        let nodes = lock(&self.nodes);
        let node = match nodes.as_slice() {
            [only] if only.slots.is_empty() => Some(only),
            nodes => serving(nodes, &read.key),
        };
        node.is_some_and(|node| node.reads.send(read).is_ok())
    }

    /// A push arrived on a tracking connection. The keys it names are no longer held from this
    /// moment, not from when the tracking task takes the push: an entry made in between (from
    /// bytes read before the change) would otherwise be confirmed without a read and answer until
    /// the push is routed, however late the task comes to it. A flush holds nothing.
    pub(super) fn arrived(&self, push: &PushInfo) {
        if push.kind != PushKind::Invalidate {
            return;
        }
        let Some(redis::Value::Array(pushed)) = push.data.first() else {
            self.forget();
            return;
        };
        let mut keys = lock(&self.keys);
        for key in pushed {
            if let redis::Value::BulkString(key) = key {
                keys.changed(key);
            }
        }
    }

    /// Pushes may have been lost: nothing is known to be held, and no read on the way counts.
    pub(crate) fn forget(&self) {
        let mut keys = lock(&self.keys);
        keys.held.clear();
        keys.reading.clear();
    }

    /// The connection to `url`, serving `slots`, takes reads on `reads` from now on.
    pub(crate) fn node_up(
        &self,
        url: &str,
        slots: Vec<(u16, u16)>,
        reads: mpsc::UnboundedSender<Read>,
    ) {
        let mut nodes = lock(&self.nodes);
        nodes.retain(|n| n.url != url);
        nodes.push(Node {
            url: url.to_owned(),
            slots,
            reads,
        });
    }

    /// The connection to `url` is gone.
    pub(crate) fn node_down(&self, url: &str) {
        lock(&self.nodes).retain(|n| n.url != url);
    }

    /// `reads` are on their way.
    pub(super) fn sent(&self, reads: &[Read]) {
        let mut keys = lock(&self.keys);
        for read in reads {
            keys.reading.entry(read.key.clone()).or_default().0 += 1;
        }
    }

    /// A read of `key` found the bytes of `fingerprint` (`None`: nothing). The key counts as
    /// held only if no push of it came since the read was sent: that push may be of a change
    /// after the read, which Valkey no longer tracks for this store.
    fn found(&self, key: &[u8], fingerprint: Option<Fingerprint>, is_value: bool) {
        let mut keys = lock(&self.keys);
        let pushed = match keys.reading.get_mut(key) {
            Some((reading, pushed)) => {
                let was = *pushed;
                *reading -= 1;
                if *reading == 0 {
                    keys.reading.remove(key);
                }
                was
            }
            None => true, // forgotten meanwhile
        };
        match fingerprint {
            Some(fingerprint) if is_value && !pushed => {
                if keys.held.len() >= MAX_HELD {
                    keys.held.clear();
                }
                keys.held.insert(key.to_vec(), fingerprint);
            }
            _ => {
                keys.held.remove(key);
            }
        }
    }
}

/// The cluster node whose slots hold `key`.
#[cfg(feature = "cluster")]
fn serving<'n>(nodes: &'n [Node], key: &[u8]) -> Option<&'n Node> {
    let slot = crate::wire::key::slot(key);
    nodes.iter().find(|n| {
        n.slots
            .iter()
            .any(|&(from, to)| (from..=to).contains(&slot))
    })
}

#[cfg(not(feature = "cluster"))]
fn serving<'n>(_: &'n [Node], _: &[u8]) -> Option<&'n Node> {
    None
}

/// `first` and whatever else is queued, up to [`READS_PER_TRIP`]: one round trip's reads.
pub(super) fn batch(first: Read, queued: &mut mpsc::UnboundedReceiver<Read>) -> Vec<Read> {
    let mut reads = vec![first];
    while reads.len() < READS_PER_TRIP {
        match queued.try_recv() {
            Ok(read) => reads.push(read),
            Err(_) => break,
        }
    }
    reads
}

/// What one read found: the key's bytes (`None`: nothing there), or `Err` when it failed.
pub(super) type Answer = redis::RedisResult<Option<Vec<u8>>>;

/// Sends `reads` on the tracking connection `conn` in one round trip; the answers, in order.
pub(super) async fn query(
    mut conn: redis::aio::MultiplexedConnection,
    reads: Vec<Read>,
) -> (Vec<Read>, Vec<Answer>) {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for read in &reads {
        pipe.cmd("GET").arg(&read.key);
    }
    let answers = pipe.query_async(&mut conn).await.unwrap_or_default();
    (reads, answers)
}

/// Tells the tracker what each of `reads` found.
pub(super) fn answered(tracker: &Tracker, reads: Vec<Read>, answers: Vec<Answer>) {
    let Some(registry) = tracker.keys() else {
        return;
    };
    for (i, read) in reads.into_iter().enumerate() {
        // `None`: the round trip failed, or this key's read did (a cluster's MOVED).
        let found = match answers.get(i) {
            Some(Ok(bytes)) => Some(bytes.as_deref().map(envelope::fingerprint)),
            _ => None,
        };
        let is_value = matches!(
            parse_key(tracker.namespace(), split_schema(&read.key).0),
            Some((KeyKind::Value, ..))
        );
        registry.found(&read.key, found.flatten(), is_value && found.is_some());
        if let Some(expect) = read.expect {
            let outcome = match found {
                Some(found) if found == Some(expect) => Found::Held,
                Some(_) => Found::Changed,
                None => Found::Unknown,
            };
            tracker.confirmed(&read.key, expect, outcome);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
