//! The winner's use of its [`HeldLock`]: the lease that extends it while the loader runs, one
//! extension, and the release, each counted and logged.

use super::*;

impl<K: Key, V: Value> Fill<'_, K, V> {
    /// The lease: every `lock_ttl / 3`, extend the lock while it is ours. Never returns: it stops
    /// extending (and waits forever) once the lock is not ours; the load ending drops it.
    pub(super) async fn lease(&self, held: &HeldLock<'_>) -> Infallible {
        let every = (self.core.config.lock_ttl / 3).max(Duration::from_millis(1));
        loop {
            tokio::time::sleep(every).await;
            if self.extend(held).await == Some(false) {
                return std::future::pending().await;
            }
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
}
