//! A read that must see at least a version ([`ReadOptions::at_least`](crate::ReadOptions::at_least)):
//! read-your-writes across replicas, before or without the write's push.
//!
//! Valkey holds the write (or a later one) once `put_versioned` has returned, and the source holds
//! it before the put was made: only this process's L1 and a flight that read before the write can
//! be behind. So the read takes an L1 copy only when its version shows it is recent enough (with
//! `.version_by`); otherwise it has the id's owner drop that copy and overtake a running flight,
//! as the write's push would, and misses: the miss reads Valkey, or the source under the lock,
//! afresh. With `.version_by` the answer's version is checked too: an older answer, or one with
//! no version to tell (a `None`) that the source did not give this read, drops Valkey's copy (its
//! value, never the lock) and the read tries again, reading the source, while the source is
//! still behind (a lagging read replica), up to its bound.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::fetched::{Fetched, Origin};
use crate::shard::owner::OwnerMsg;
use crate::shard::owner::owner_ref::OwnerRef;
use crate::state::core::{TableCore, Versioned};
use crate::state::l1::L1Cache;
use crate::state::loser_policy::LoserPolicy;
use crate::version::Version;
use crate::wire::key::{Key, Value};

/// How long a read waits before asking again a source that answered an older version.
const AGAIN_AFTER: Duration = Duration::from_millis(10);

/// The read's own loser policy, if any, and its wait bound.
pub(crate) type Bounds<V> = (Option<LoserPolicy<Arc<V>>>, Option<Duration>);

/// `id`'s value, at least `wanted`; [`Error::VersionUnavailable`] past the read's bound.
pub(crate) async fn read<K, V, Q>(
    core: &TableCore<K, V>,
    owner: &OwnerRef<K, V>,
    id: &Q,
    wanted: Version,
    (losers, wait): Bounds<V>,
) -> Result<Fetched<V>>
where
    K: Key + Borrow<Q>,
    V: Value,
    Q: Hash + Eq + ToOwned<Owned = K> + Sync + ?Sized,
{
    // Looked at before it is taken as a hit, and that very copy taken: a copy passed over is no
    // hit (not counted, not audited, and no early refresh of it asked).
    if let Some(entry) = core.l1.get(id)
        && shows(core, &entry.value, wanted)
        && let Some(hit) = crate::handle::lookup::hit_of(core, owner, id, entry)
    {
        return Ok(hit);
    }
    let bound = wait.unwrap_or_else(|| match losers.as_ref().unwrap_or(&core.config.losers) {
        LoserPolicy::Poll { up_to, .. } => *up_to,
        _ => core.config.lock_ttl,
    });
    let behind = AtomicBool::new(false);
    let reads = async {
        // Whether this read has dropped Valkey's copy: every answer since was read afresh.
        let mut dropped = false;
        loop {
            let key = id.to_owned();
            owner
                .call(&key.clone(), move |reply| OwnerMsg::Behind {
                    id: key,
                    reply,
                })
                .await?;
            let fetched = crate::handle::miss::miss(core, owner, id, losers.clone()).await?;
            if recent_enough(core, &fetched, wanted, dropped) {
                return Ok(fetched);
            }
            behind.store(true, Relaxed);
            drop_older_copy(core, &id.to_owned()).await;
            dropped = true;
            tokio::time::sleep(AGAIN_AFTER).await;
        }
    };
    match tokio::time::timeout(bound, reads).await {
        Ok(answer) => answer,
        // Only older copies were found: the version is not to be had. Otherwise the read's own
        // wait ran out, as any read's may.
        Err(_) if behind.load(Relaxed) || wait.is_none() => {
            Err(Error::VersionUnavailable { wanted })
        }
        Err(_) => Err(Error::WaitTimeout { waited: bound }),
    }
}

/// The answer was older than the read must see, so Valkey's copy may be too (written before the
/// source moved on, by a process that never heard of it): it goes, its value only (a lock stays its
/// holder's), so that the next miss reads the source. A newer copy landed meanwhile costs one load.
async fn drop_older_copy<K: Key, V>(core: &TableCore<K, V>, id: &K) {
    let (Some(l2), Ok(names)) = (&core.l2, core.names(id)) else {
        return;
    };
    if let Err(e) = l2.delete_value(&names).await {
        tracing::debug!(table = %core.name, error = %e, "at_least: Valkey's older copy stays; reading on");
    }
}

/// `value` is known to be at least `wanted`: with `.version_by` and a source token, its own
/// version says so. A deletion (`None`) carries no version, and a write after it re-creates the
/// row whatever its version, so a `None` shows nothing; nor does a version that cannot be told
/// (`.version_by` panicked).
fn shows<K, V: Value>(core: &TableCore<K, V>, value: &V, wanted: Version) -> bool {
    let Some(n) = wanted.as_source() else {
        return false;
    };
    match core.config.versioned(value) {
        Versioned::At(have) => have >= n,
        Versioned::Absent | Versioned::Unknown => false,
    }
}

/// What a miss that followed the owner's drop answered is at least `wanted`: read afresh from
/// Valkey or the source, it is, unless its version (with `.version_by`) says it is older.
///
/// For a source token, an answer with no version to tell (a `None`, or a `.version_by` that
/// panicked) says nothing from Valkey: the source may have moved to `wanted` after a delete
/// wrote that `None` there, with the write that re-creates the row still on its way. Only the
/// source can tell: the answer counts if this read's flight loaded it, or if this read has
/// already dropped Valkey's copy (`dropped_valkeys`), so that it was read from the source or
/// written there since.
fn recent_enough<K, V: Value>(
    core: &TableCore<K, V>,
    fetched: &Fetched<V>,
    wanted: Version,
    dropped_valkeys: bool,
) -> bool {
    match (wanted.as_source(), core.config.versioned(&fetched.value)) {
        (Some(n), Versioned::At(have)) => have >= n,
        (Some(_), Versioned::Absent | Versioned::Unknown) => {
            dropped_valkeys || fetched.origin == Origin::Loaded
        }
        _ => true,
    }
}
