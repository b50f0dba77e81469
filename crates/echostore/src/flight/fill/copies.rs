//! What a flight makes of the bytes it reads from a value key: a decoded envelope held to the
//! value's longest life (or a counted miss), whether it answers the flight, a stale copy within
//! its window, an L2 hit.

use super::*;

/// Decodes bytes read from a value key into an envelope held to the value's longest life;
/// oversized or undecodable bytes are `None`, counted in `decode_errors` and logged, and so is a
/// copy a clear or a tag invalidation made a miss (`crate::state::marks`), uncounted.
pub(crate) fn decode_counted<K: Key, V: Value>(
    core: &TableCore<K, V>,
    bytes: &[u8],
) -> Option<Envelope<V>> {
    let max = core.config.max_value_bytes;
    let decoded = if bytes.len() > max {
        Err(format!("over the table's max_value_bytes ({max})"))
    } else {
        envelope::decode(bytes, max, core.config.coding.custom()).map_err(|e| e.to_string())
    };
    match decoded {
        Ok(env) if !core.is_current(&env) => {
            bump(&core.stats.counters.marked_misses);
            None
        }
        Ok(mut env) => {
            let longest = core.config.longest_life(&env.value);
            // A reloader's renewal keeps the copy's fingerprint: its push is known as our own.
            if core.tracks_keys() || core.reloader.is_some() {
                env.read_as = Some(envelope::fingerprint(bytes));
            }
            Some(env.capped(longest))
        }
        Err(e) => {
            bump(&core.stats.counters.decode_errors);
            tracing::warn!(table = %core.name, error = %e, "unreadable value on valkey: treated as a miss");
            None
        }
    }
}

/// How much later than the refreshed value's a value's `fresh_until` must be to count as newer:
/// more than the error of comparing a wall-clock deadline with a monotonic one (a millisecond of
/// rounding each way, and a thread descheduled between the two clock reads).
const NEWER_BY: Duration = Duration::from_millis(5);

impl<K: Key, V: Value> Fill<'_, K, V> {
    /// `true` if a value read from Valkey answers this flight: fresh, and for a refresh newer
    /// than the value being refreshed.
    pub(super) fn takes(&self, env: &Envelope<V>) -> bool {
        let now_ms = self.core.now_ms();
        if !env.is_fresh(now_ms) {
            return false;
        }
        let Some(until) = self.refreshing else {
            return true;
        };
        let left = Duration::from_millis(env.fresh_until_ms.saturating_sub(now_ms));
        Moment::now().after(left) > until.after(NEWER_BY)
    }

    /// Decodes what Valkey held; oversized or undecodable bytes are a counted, logged miss (once
    /// per flight for the same bytes).
    pub(super) fn decode(&self, bytes: Option<Vec<u8>>) -> Option<Envelope<V>> {
        let bytes = bytes?;
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        // Hashing costs a pass over the bytes: only once some bytes were refused.
        if refused.is_some() && *refused == Some(envelope::fingerprint(&bytes)) {
            return None;
        }
        let decoded = decode_counted(self.core, &bytes);
        if decoded.is_none() {
            *refused = Some(envelope::fingerprint(&bytes));
        }
        decoded
    }

    /// A stale copy from Valkey, if it is still within this table's `stale_for` (never for a
    /// refresh: its callers' value is fresh).
    pub(super) fn stale(&self, env: Envelope<V>) -> Option<Stale<V>> {
        if self.refreshing.is_some() {
            return None;
        }
        let now_ms = self.core.now_ms();
        tracing::trace!(table = %self.core.name, written_ms_ago = now_ms.saturating_sub(env.written_at_ms), "a stale copy on valkey");
        Stale::from_envelope(env, self.core.config.stale_for, now_ms)
    }

    /// A fresh copy from Valkey; L1 keeps it until the envelope's own `fresh_until`.
    pub(super) fn l2_hit(&self, env: Envelope<V>) -> Filled<V> {
        bump(&self.core.stats.counters.l2_hits);
        self.core.l2_filled(env)
    }
}
