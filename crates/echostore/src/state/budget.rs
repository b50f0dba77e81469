//! `.source_budget(n)`: at most `n` source reads of a table at once across every process on the
//! Valkey.
//!
//! Each source read holds a *lease*: a member of the sorted set `[<ns>:]budget:<table>`, scored
//! by when it ends on Valkey's clock. A lease that is not renewed (its process crashed or lost
//! Valkey) ends by itself, and every acquire first drops the ended ones, so a crash leaks nothing
//! for longer than one lease. The key sits outside the table's tracked prefix (no push for it)
//! and carries a TTL of its own. A process also holds at most `n` leases at once through a local
//! semaphore, so that only that many of its waiting loads ask Valkey. Without Valkey (none, or
//! unreachable) the local semaphore alone bounds the process's reads to `n`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::valkey::l2::L2;
use crate::wire::scripts::SCRIPTS;

/// The shortest pause between two asks of a waiting load; doubled after each refusal.
const FIRST_PAUSE: Duration = Duration::from_millis(1);
/// The longest pause between two asks (so a freed lease waits at most this long for a taker).
const LONGEST_PAUSE: Duration = Duration::from_millis(20);

/// The Valkey name of a table's budget: `[<namespace>:]budget:<table>`. No value, lock or marks
/// key takes that name: theirs all hold a `{…}` hash tag after the table's name.
pub(crate) fn budget_key(namespace: &str, table: &str) -> Vec<u8> {
    format!("{namespace}budget:{table}").into_bytes()
}

/// A table's source budget, as this process holds it.
pub(crate) struct Budget {
    key: Arc<[u8]>,
    limit: u32,
    /// How long a lease lives unless renewed (the table's `lock_ttl`); renewed every third.
    lease: Duration,
    local: Arc<Semaphore>,
}

/// One source read's lease: renewed while it lives, given back when dropped.
pub(crate) struct Permit {
    _local: OwnedSemaphorePermit,
    /// The lease on Valkey, if Valkey granted one (none when it was unreachable).
    _on_valkey: Option<Lease>,
}

struct Lease {
    l2: L2,
    key: Arc<[u8]>,
    token: String,
    /// How long the lease lives unrenewed.
    lease: Duration,
    renewing: tokio::task::JoinHandle<()>,
}

impl Budget {
    pub(crate) fn new(key: Vec<u8>, limit: u32, lease: Duration) -> Self {
        Budget {
            key: Arc::from(key),
            limit,
            lease,
            local: Arc::new(Semaphore::new(limit as usize)),
        }
    }

    /// A lease now, or `None` if the budget is spent (here or across the fleet).
    pub(crate) async fn try_admit(&self, l2: Option<&L2>) -> Option<Permit> {
        let local = Arc::clone(&self.local).try_acquire_owned().ok()?;
        self.on_valkey(l2, local).await.ok()
    }

    /// Waits for a lease, asking Valkey again after pauses that double up to
    /// [`LONGEST_PAUSE`]; [`Error::BudgetExhausted`] when none came within `up_to`.
    pub(crate) async fn wait(&self, l2: Option<&L2>, up_to: Duration) -> Result<Permit> {
        let until = Instant::now() + up_to;
        let exhausted = || Error::BudgetExhausted { waited: up_to };
        let local = tokio::time::timeout_at(until, Arc::clone(&self.local).acquire_owned())
            .await
            .map_err(|_| exhausted())?
            .map_err(|_| exhausted())?;
        let mut local = local;
        let mut pause = FIRST_PAUSE;
        loop {
            match self.on_valkey(l2, local).await {
                Ok(permit) => return Ok(permit),
                Err(back) => local = back,
            }
            let jittered = pause.mul_f64(rand::random_range(0.5..1.5));
            if Instant::now() + jittered >= until {
                return Err(exhausted());
            }
            tokio::time::sleep(jittered).await;
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
    }

    /// Asks Valkey for a lease under the local permit: the permit back if the fleet's budget is
    /// spent; a permit with no lease if Valkey did not answer (the local bound still holds).
    async fn on_valkey(
        &self,
        l2: Option<&L2>,
        local: OwnedSemaphorePermit,
    ) -> std::result::Result<Permit, OwnedSemaphorePermit> {
        let unleased = |local| Permit {
            _local: local,
            _on_valkey: None,
        };
        let Some(l2) = l2 else {
            return Ok(unleased(local));
        };
        let token = crate::valkey::lock::new_token();
        match ask(l2, &self.key, &token, self.limit, self.lease).await {
            Ok(true) => Ok(Permit {
                _local: local,
                _on_valkey: Some(self.renewed(l2, token)),
            }),
            Ok(false) => Err(local),
            Err(e) => {
                tracing::debug!(error = %e, "source budget: valkey did not answer; this process's bound alone holds");
                Ok(unleased(local))
            }
        }
    }

    /// A granted lease, renewed every third of its life until the permit is dropped.
    fn renewed(&self, l2: &L2, token: String) -> Lease {
        let (l2c, key, tok, lease, limit) = (
            l2.clone(),
            Arc::clone(&self.key),
            token.clone(),
            self.lease,
            self.limit,
        );
        let renewing = tokio::spawn(async move {
            loop {
                tokio::time::sleep(lease / 3).await;
                let _ = ask(&l2c, &key, &tok, limit, lease).await;
            }
        });
        Lease {
            l2: l2.clone(),
            key: Arc::clone(&self.key),
            token,
            lease: self.lease,
            renewing,
        }
    }
}

impl Drop for Lease {
    /// Gives the lease back; one that cannot be given back now (the connection reset, the
    /// breaker open) is tried again until it lands or the lease would have ended anyway: left
    /// to its end, it would hold a share of the fleet's budget that long after a blip, and with
    /// every share held so, every load of the table would wait.
    fn drop(&mut self) {
        self.renewing.abort();
        let (l2, key, token) = (self.l2.clone(), Arc::clone(&self.key), self.token.clone());
        let lease = self.lease;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (counts, retries) = (Arc::clone(l2.under_way()), Arc::clone(l2.under_way()));
            let give = async move {
                if give_back(&l2, &key, &token).await.is_ok() {
                    return;
                }
                let pauses = (FIRST_PAUSE, LONGEST_PAUSE);
                crate::wire::retry::in_background((lease, &retries), pauses, move || {
                    let (l2, key, token) = (l2.clone(), Arc::clone(&key), token.clone());
                    async move { give_back(&l2, &key, &token).await.is_ok() }
                });
            };
            runtime.spawn(crate::wire::under_way::tracked(Some(&counts), give));
        }
    }
}

/// One ask: a new lease if fewer than `limit` are live, or the renewal of `token`'s.
async fn ask(l2: &L2, key: &[u8], token: &str, limit: u32, lease: Duration) -> Result<bool> {
    let mut invocation = SCRIPTS.budget.prepare_invoke();
    invocation
        .key(key)
        .arg(token)
        .arg(limit)
        .arg(lease.as_millis().max(1) as u64);
    let invocation = &invocation;
    let granted: i64 = l2
        .run("source budget", None, |mut c| async move {
            invocation.invoke_async(&mut c).await
        })
        .await?;
    Ok(granted == 1)
}

/// Gives a lease back before it ends.
async fn give_back(l2: &L2, key: &[u8], token: &str) -> Result<()> {
    l2.run("source budget release", None, |mut c| async move {
        redis::cmd("ZREM")
            .arg(key)
            .arg(token)
            .query_async::<i64>(&mut c)
            .await
    })
    .await
    .map(drop)
}
