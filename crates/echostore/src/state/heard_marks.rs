//! The marks a copy on Valkey is judged by, in a process behind on its pushes.
//!
//! A mark set elsewhere reaches a process as a push of the marks key, which its owner follows
//! with a read of the marks; a copy the mark made a miss is a miss here from then on. A process
//! behind on its pushes (paused whole, or starved: its tracking connections do not vouch for it,
//! `crate::coherence::vouch`) may hold that push unread for as long as it stays behind, and would
//! meanwhile take a copy of an invalidated tag for current, answering from Valkey what every
//! other process has stopped answering. So while the vouch does not hold, a read of copies is
//! preceded by a read of the marks (one round trip, which the reads of a table then share), and
//! a new mark it finds is dropped from L1 and the flights as a pushed one is.

use std::sync::Weak;

use crate::clock::coarse_ticks;
use crate::state::core::TableCore;
use crate::state::marks::Scope;
use crate::state::stats::bump;
use crate::wire::key::{Key, Value};

impl<K: Key, V: Value> TableCore<K, V> {
    /// Before a read of copies on Valkey: while the vouch does not hold, reads the marks (above
    /// the latest known, or in full while a full read is owed), unless a read of them sent since
    /// this call began has landed. A read that fails leaves the copies to the marks known, as
    /// while a full read is owed (`crate::state::marks`).
    pub(crate) async fn hear_marks(&self) {
        let since = coarse_ticks();
        let Some(l2) = &self.l2 else {
            return;
        };
        if self.vouch.holds_at(since) {
            return;
        }
        let _one = self.marks.one_behind().lock().await;
        if self.marks.read_since(since) {
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
