//! How long this store's L1 may answer on its own word: until [`VOUCH_FOR`] after the last
//! moment every tracking connection that is up was known to have delivered every push sent
//! before it (a health PING's answer, read after the pushes ahead of it), and every owner to
//! have dealt with them (`Tracker::caught_up`).
//!
//! The tracking task drops what other processes changed; it only does so while it runs. A
//! process paused whole (a VM descheduled, `SIGSTOP`) or a runtime starved of the task wakes to
//! pushes waiting unread in its socket, and its L1 would answer, until they are read, what they
//! would drop. Past the vouch, an L1 entry is no hit: the read goes to Valkey, as a miss does,
//! until the task has caught up and vouches again. A connection that is down holds nothing up
//! once L1 is capped (`Tracker::cap_all`, `Tracker::unvouch`), and its entries live on their
//! capped lives; one that comes up vouches once L1 is flushed ([`Vouch::pending`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::clock::{coarse_ticks, ticks_of};

/// How long after a health PING was sent its answer vouches for L1: the silent-link bound, so
/// that a tracking task on time (a PING every 250 ms) always has half a second in hand.
pub(crate) const VOUCH_FOR: Duration = crate::coherence::tracking::SILENT_LINK_BOUND;

/// The store's vouch: one coarse-clock deadline the hit path reads, the earliest of the
/// connections that are up.
pub(crate) struct Vouch {
    /// Coarse-clock ticks until which L1 may answer; `u64::MAX` while no connection is up
    /// (no tracking, or every connection down and L1 capped).
    until: AtomicU64,
    /// Each connection that is up, by server address: until when it vouches.
    up: Mutex<HashMap<String, u64>>,
}

impl Vouch {
    /// A vouch no connection holds up yet.
    pub(crate) fn new() -> Vouch {
        Vouch {
            until: AtomicU64::new(u64::MAX),
            up: Mutex::new(HashMap::new()),
        }
    }

    /// `true` while L1 may answer at coarse-clock time `now` ([`coarse_ticks`]).
    #[inline]
    pub(crate) fn holds_at(&self, now: u64) -> bool {
        now < self.until.load(Ordering::Relaxed)
    }

    /// [`Vouch::holds_at`] now.
    #[inline]
    pub(crate) fn holds(&self) -> bool {
        self.holds_at(coarse_ticks())
    }

    /// The connection to `node`, if still up, vouches from coarse-clock time `sent`, never
    /// moving its vouch back (renewals made once the owners caught up may finish out of order;
    /// one for a connection since lost must not count it up again).
    pub(crate) fn renew_if_up(&self, node: &str, sent: u64) {
        let until = sent.saturating_add(ticks_of(VOUCH_FOR));
        self.change(|up| {
            if let Some(vouched) = up.get_mut(node) {
                *vouched = (*vouched).max(until);
            }
        });
    }

    /// The connection to `node` is up and vouches for nothing yet: it has just subscribed, and
    /// flushed what L1 held while it was not, which the owners have yet to deal with
    /// ([`Vouch::renew_if_up`] once they have).
    pub(crate) fn pending(&self, node: &str) {
        self.change(|up| {
            up.insert(node.to_owned(), 0);
        });
    }

    /// The connection to `node` is down (its tables' L1 capped) or gone from the topology.
    pub(crate) fn down(&self, node: &str) {
        self.change(|up| {
            up.remove(node);
        });
    }

    /// Every connection forgotten (a cluster's new topology: each reconnects and renews).
    pub(crate) fn clear(&self) {
        self.change(HashMap::clear);
    }

    fn change(&self, change: impl FnOnce(&mut HashMap<String, u64>)) {
        let mut up = self.up.lock().unwrap_or_else(|p| p.into_inner());
        change(&mut up);
        let until = up.values().copied().min().unwrap_or(u64::MAX);
        self.until.store(until, Ordering::Relaxed);
    }
}

impl Default for Vouch {
    fn default() -> Self {
        Vouch::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No connection up vouches forever; each one up bounds it, from nothing until renewed, the
    /// earliest wins, one not up is not renewed, and one that goes down bounds it no more.
    #[test]
    fn the_earliest_connection_up_bounds_the_vouch() {
        let vouch = Vouch::new();
        let now = coarse_ticks();
        assert!(vouch.holds_at(now) && vouch.holds_at(u64::MAX - 1));
        vouch.pending("a");
        assert!(
            !vouch.holds_at(now),
            "a connection just up vouches for nothing"
        );
        vouch.renew_if_up("a", now);
        vouch.renew_if_up("c", now);
        vouch.pending("b");
        vouch.renew_if_up("b", now + ticks_of(Duration::from_secs(60)));
        let lapse = now + ticks_of(VOUCH_FOR);
        assert!(vouch.holds_at(lapse - 1));
        assert!(!vouch.holds_at(lapse), "a's vouch ran out");
        vouch.down("a");
        assert!(vouch.holds_at(lapse), "b's is later");
        vouch.clear();
        assert!(vouch.holds_at(u64::MAX - 1));
    }

    /// Renewals made once the owners caught up may finish out of order: one for an earlier
    /// PING never moves the vouch back, and one for a connection lost meanwhile does not count
    /// it up again (it would bound L1 by a connection that delivers nothing).
    #[test]
    fn a_late_renewal_moves_no_vouch_back_nor_counts_a_lost_connection_up() {
        let vouch = Vouch::new();
        let now = coarse_ticks();
        let later = now + ticks_of(Duration::from_millis(250));
        vouch.pending("a");
        vouch.renew_if_up("a", later);
        vouch.renew_if_up("a", now);
        assert!(
            vouch.holds_at(later + ticks_of(VOUCH_FOR) - 1),
            "the earlier PING's renewal moved the vouch back"
        );
        vouch.down("a");
        vouch.renew_if_up("a", later);
        assert!(
            vouch.holds_at(u64::MAX - 1),
            "a renewal counted a lost connection up again"
        );
    }
}
