//! The marks a copy on Valkey is judged by, in a process behind on its pushes.
//!
//! A mark set elsewhere reaches a process as a push of the marks key, which it follows
//! with a read of the marks; a copy the mark made a miss is a miss here from then on. A process
//! behind on its pushes (paused whole, or starved: its tracking connections do not vouch for it,
//! `crate::coherence::vouch`) may hold that push unread for as long as it stays behind, and would
//! meanwhile take a copy of an invalidated tag for current, answering from Valkey what every
//! other process has stopped answering. So while the vouch does not hold, a read of copies is
//! preceded by a read of the marks (one round trip, which the reads of a table then share), and
//! a new mark it finds is dropped from L1 and the flights as a pushed one is.
//!
//! The same read precedes a read of copies, and a put's stamp, while a push of the marks has
//! come and no read sent after it has landed (the read the push set off is on its way): the
//! mark was set before the push came, and a copy judged without it is taken for current, or
//! a put stamped below it is a miss, and a second source read, to every process that knows it.

use std::sync::Weak;

use crate::clock::coarse_ticks;
use crate::state::core::TableCore;
use crate::state::marks::Scope;
use crate::state::stats::bump;
use crate::wire::key::{Key, Value};

impl<K: Key, V: Value> TableCore<K, V> {
    /// Before a read of copies on Valkey, or a put's stamp: while the vouch does not hold, or a
    /// push of the marks has had no read land after it, reads the marks (above the latest
    /// known, or in full while a full read is owed), unless a read of them sent since this call
    /// began has landed and no push is unread. A read that fails leaves the copies to the marks
    /// known, as while a full read is owed (`crate::state::marks`).
    pub(crate) async fn hear_marks(&self) {
        let since = coarse_ticks();
        let Some(l2) = &self.l2 else {
            return;
        };
        let unread = || self.marks.push_unread();
        if self.vouch.holds_at(since) && !unread() {
            return;
        }
        let _one = self.marks.one_behind().lock().await;
        if self.marks.read_since(since) && !unread() {
            return;
        }
        match self.marks.refresh(l2, self.marks.owes_full_read()).await {
            Ok(Some(scope)) => self.tell_owners(scope),
            Ok(None) => {}
            Err(error) => {
                bump(&self.stats.counters.marks_read_failures);
                tracing::debug!(table = %self.name, %error, "reading the marks behind the pushes failed");
            }
        }
    }

    /// Every shard drops what a mark read here covers, as after a push of it; off this read,
    /// which the owners may be behind.
    fn tell_owners(&self, scope: Scope) {
        if let Some(owners) = self.owners.get().and_then(Weak::upgrade) {
            tokio::spawn(async move { owners.marked(scope).await });
        }
    }
}
