//! The winner's use of its [`HeldLock`]: the lease that extends it while the loader runs, one
//! extension, the release, and the release that deletes a gone row's copy, each counted and
//! logged.

use super::*;
use crate::valkey::lock::next_extension;

impl<K: Key, V: Value> Fill<'_, K, V> {
    /// The lease: every `lock_ttl / 3`, extend the lock while it is ours, and sooner after an
    /// extension that failed ([`next_extension`]). Never returns: it stops extending (and
    /// waits forever) once the lock is not ours; the load ending drops it.
    pub(super) async fn lease(&self, held: &HeldLock<'_>) -> Infallible {
        let every = (self.core.config.lock_ttl / 3).max(Duration::from_millis(1));
        let mut pause = every;
        loop {
            tokio::time::sleep(pause).await;
            pause = match self.extend(held).await {
                Some(false) => return std::future::pending().await,
                extended => next_extension(every, extended.is_none()),
            };
        }
    }

    /// One token-checked extension: `Some(false)` when the lock is not ours, `None` on an error.
    pub(super) async fn extend(&self, held: &HeldLock<'_>) -> Option<bool> {
        let counters = &self.core.stats.counters;
        match held.extend().await {
            Ok(true) => {
                bump(&counters.lease_extended);
                Some(true)
            }
            Ok(false) => {
                bump(&counters.lease_lost);
                tracing::debug!(table = %self.core.name, id = ?self.id, "lease lost: the lock is no longer ours");
                Some(false)
            }
            Err(e) => {
                bump(&counters.l2_errors);
                tracing::debug!(table = %self.core.name, error = %e, "lease extension failed; trying again");
                None
            }
        }
    }

    /// The token-checked release, counted: `Some(true)` if the lock was ours, `None` on an error
    /// (the release is then tried again in the background, until it lands or the lock's PX
    /// ends it).
    pub(super) async fn release(&self, held: &HeldLock<'_>) -> Option<bool> {
        let counters = &self.core.stats.counters;
        match held.release().await {
            Ok(true) => {
                bump(&counters.released);
                Some(true)
            }
            Ok(false) => {
                bump(&counters.release_skipped);
                Some(false)
            }
            Err(e) => {
                bump(&counters.l2_errors);
                tracing::warn!(table = %self.core.name, error = %e, "release failed; trying again in the background");
                held.release_later();
                None
            }
        }
    }

    /// The source said the row is gone ([`Error::Absent`]): Valkey's copy goes with the lock, as a
    /// reloader's `Gone` deletes it, so that no later read here or elsewhere serves it (a failed
    /// load's fail-safe, a loser's stale answer). Not ours (`false`): a write dropped the lock,
    /// and its value stands. Failed: the copy may still be there, so the id is unsettled (it goes
    /// before this process trusts Valkey for the id again) and the lock released later.
    pub(super) async fn delete_gone(&self, held: &HeldLock<'_>) -> bool {
        let counters = &self.core.stats.counters;
        match held.delete_copy().await {
            Ok(true) => bump(&counters.released),
            Ok(false) => {
                bump(&counters.release_skipped);
                return false;
            }
            Err(e) => {
                bump(&counters.l2_errors);
                tracing::warn!(table = %self.core.name, id = ?self.id, error = %e, "deleting a gone row's copy failed");
                held.release_later();
                self.unsettle(held, None);
            }
        }
        true
    }
}
