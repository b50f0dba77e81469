//! The online staleness audit (`.audit_sample(f)`): a fraction of L1 hits is compared with
//! Valkey's copy off the hit path, to see in production whether what L1 serves is what Valkey
//! holds. A sampled hit costs the caller one random draw and a `try_send` to the table's auditor
//! task (a full queue drops the sample); the auditor reads the value key and counts
//! `audited_hits`, `stale_hits` and the largest staleness seen (`audit_max_staleness_ms`).
//!
//! A hit is **stale** when Valkey held a different fresh value written before the hit was served:
//! its staleness is how long before the hit that value landed (Valkey's clock). A copy written
//! after the hit, no copy, or an unreadable one audits nothing.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::state::stats::{Counters, bump};
use crate::valkey::envelope;
use crate::valkey::l2::L2;
use crate::wire::key::{Key, KeyNames, Value};

/// Sampled hits waiting for the auditor; more are dropped.
const QUEUE: usize = 1024;

/// One sampled hit: what L1 served for `id`, at `served_ms` on Valkey's clock.
pub(crate) struct Sampled<K, V> {
    pub(crate) id: K,
    value: Arc<V>,
    served_ms: u64,
}

/// A table's audit: the fraction of hits sampled, and the queue to its auditor.
pub(crate) struct Audit<K, V> {
    fraction: f64,
    queue: mpsc::Sender<Sampled<K, V>>,
    /// The auditor's end, until the table starts it.
    pending: Mutex<Option<mpsc::Receiver<Sampled<K, V>>>>,
}

impl<K: Key, V: Value> Audit<K, V> {
    /// An audit of `fraction` of the hits (checked within `0.0..=1.0` at `build()`).
    pub(crate) fn new(fraction: f64) -> Self {
        let (queue, pending) = mpsc::channel(QUEUE);
        Audit {
            fraction,
            queue,
            pending: Mutex::new(Some(pending)),
        }
    }

    /// A hit of `id` served `value` at `served_ms` (Valkey's clock, read only when sampled):
    /// sampled with the audit's chance.
    #[inline(never)]
    pub(crate) fn hit<Q>(&self, id: &Q, value: &Arc<V>, served_ms: impl FnOnce() -> u64)
    where
        Q: ToOwned<Owned = K> + ?Sized,
    {
        if rand::random::<f64>() >= self.fraction {
            return;
        }
        let sampled = Sampled {
            id: id.to_owned(),
            value: Arc::clone(value),
            served_ms: served_ms(),
        };
        let _ = self.queue.try_send(sampled);
    }

    /// The sampled hits, for the table's auditor task (once).
    pub(crate) fn samples(&self) -> Option<mpsc::Receiver<Sampled<K, V>>> {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

/// Where an audit reads and counts: the table's Valkey, its value limit and its counters.
pub(crate) struct Auditor<'a> {
    pub(crate) l2: &'a L2,
    pub(crate) max_bytes: usize,
    pub(crate) counters: &'a Counters,
    /// The table's custom codec, if any.
    pub(crate) custom: Option<&'a crate::valkey::codec::CustomCodec>,
}

/// Compares one sampled hit with Valkey's copy under `names`, counting what it finds.
pub(crate) async fn check<K: Key, V: Value>(
    at: &Auditor<'_>,
    names: &KeyNames,
    sampled: Sampled<K, V>,
) {
    let max = at.max_bytes;
    let Ok(Some(bytes)) = at.l2.get(names, max).await else {
        return;
    };
    let Ok(env) = envelope::decode::<V>(&bytes, max, at.custom) else {
        return;
    };
    if !env.is_fresh(sampled.served_ms) || env.written_at_ms > sampled.served_ms {
        return; // no fresh copy then, or written after the hit: nothing to hold the hit to
    }
    // Compared by their bytes (a value type need not be `PartialEq`), so a value whose bytes
    // are not canonical (a `HashMap`'s order) may be counted stale; a `Serialize` that fails or
    // panics leaves the hit unaudited.
    let bytes = |value: &V| {
        std::panic::catch_unwind(AssertUnwindSafe(|| postcard::to_allocvec(value).ok()))
            .ok()
            .flatten()
    };
    let (Some(held), Some(served)) = (bytes(&env.value), bytes(&sampled.value)) else {
        return;
    };
    bump(&at.counters.audited_hits);
    if held != served {
        bump(&at.counters.stale_hits);
        let staleness = sampled.served_ms - env.written_at_ms;
        at.counters
            .audit_max_staleness_ms
            .fetch_max(staleness, std::sync::atomic::Ordering::Relaxed);
    }
}
