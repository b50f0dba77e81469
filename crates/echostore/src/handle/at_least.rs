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
//! value, never the lock, and only if it does not show the version by then: a recent copy that
//! landed meanwhile stays) and the read tries again, reading the source, while the source is
//! still behind (a lagging read replica), up to its bound. A `None` another process wrote counts
//! only past a drop made once every put sent before the read began has landed or been refused
//! (one and a half `valkey_timeout`s): a put sent before the read may land after an earlier drop.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::fetched::{Answered, Fetched, Origin};
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
        let mut dropped = Dropped::Not;
        let aim = Aim {
            wanted: wanted.as_source().unwrap_or(u64::MAX),
            late_puts_settled: Instant::now() + late_puts_land_within(core),
        };
        loop {
            let key = id.to_owned();
            owner
                .call(&key.clone(), move |reply| OwnerMsg::Behind {
                    id: key,
                    reply,
                })
                .await?;
            let answered = crate::handle::miss::miss(core, owner, id, losers.clone()).await?;
            if recent_enough(core, &answered, wanted, dropped == Dropped::AfterLatePuts) {
                return Ok(answered.shown());
            }
            behind.store(true, Relaxed);
            let id = id.to_owned();
            dropped = drop_older_copy(core, &id, &answered.flight.value, dropped, &aim).await;
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

/// Whether, and when, the read has dropped Valkey's copy.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dropped {
    Not,
    /// Before every put sent before the read began had landed or been refused: one of those
    /// may have written a copy since.
    Early,
    /// After: every copy on Valkey since was written by a write sent after the read began, or
    /// read from the source by a flight that did.
    AfterLatePuts,
}

/// What the read's drops go by.
struct Aim {
    /// The source version the read must see. A token that is not one never drops (any answer
    /// is recent enough for it, [`recent_enough`]); `u64::MAX` stands in for it.
    wanted: u64,
    /// When every put sent before the read began has landed or been refused.
    late_puts_settled: Instant,
}

/// How long after it is sent a put may still land: its deadline is its sender's estimate of
/// Valkey's clock plus `valkey_timeout`, and that estimate is off by under half a round trip,
/// itself under `valkey_timeout` (a longer one timed out and gave no sample).
fn late_puts_land_within<K, V>(core: &TableCore<K, V>) -> Duration {
    core.l2
        .as_ref()
        .map_or(Duration::ZERO, |l2| l2.timeout().saturating_mul(3) / 2)
}

/// The answer was older than the read must see, so Valkey's copy may be too (written before the
/// source moved on, by a process that never heard of it): it goes, its value only (a lock stays its
/// holder's), so that the next miss reads the source. Only a copy that does not show the wanted
/// version goes, checked on Valkey as it is dropped: a recent enough copy that landed since the
/// answer was read stays, and the next miss reads it rather than the source.
///
/// An answer with no version read after an early drop may be a late put's: nothing is dropped
/// until every put sent before the read began has landed or been refused; the read waits for that
/// and reads again (a copy that shows the version may be there by then). Says which drop this was
/// (a drop that failed or was put off changes nothing; a copy that stayed counts as a drop: what
/// Valkey holds since was written after it).
async fn drop_older_copy<K: Key, V: Value>(
    core: &TableCore<K, V>,
    id: &K,
    answer: &V,
    before: Dropped,
    aim: &Aim,
) -> Dropped {
    let settled = aim.late_puts_settled;
    if before == Dropped::Early && !has_version(core, answer) && Instant::now() < settled {
        tokio::time::sleep_until(settled).await;
        return before;
    }
    let dropped = if Instant::now() >= settled {
        Dropped::AfterLatePuts
    } else {
        Dropped::Early
    };
    let (Some(l2), Ok(names)) = (&core.l2, core.names(id)) else {
        return dropped;
    };
    match l2.drop_older(&names, aim.wanted).await {
        Ok(true) => {
            tracing::debug!(table = %core.name, id = ?id, "at_least: Valkey's copy did not show the version; dropped");
            dropped
        }
        Ok(false) => {
            tracing::debug!(table = %core.name, id = ?id, "at_least: a copy that shows the version landed meanwhile; kept");
            dropped
        }
        Err(e) => {
            tracing::debug!(table = %core.name, error = %e, "at_least: Valkey's older copy stays; reading on");
            before
        }
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

/// `value`'s version can be told (with `.version_by`: not a deletion, and no panic).
fn has_version<K, V: Value>(core: &TableCore<K, V>, value: &V) -> bool {
    matches!(core.config.versioned(value), Versioned::At(_))
}

/// What a miss that followed the owner's drop answered is at least `wanted`: read afresh from
/// Valkey or the source, it is, unless its version (with `.version_by`) says it is older.
///
/// For a source token, an answer with no version to tell (a `None`, or a `.version_by` that
/// panicked) says nothing from Valkey: the source may have moved to `wanted` after a delete
/// wrote that `None` there, with the write that re-creates the row still on its way. Only the
/// source can tell: the answer counts if the flight it came from loaded it (this read's, or one
/// it joined: a flight the read's drop of L1 left running is overtaken, so any it joins began
/// after that drop, and read the source after it), or if this read dropped Valkey's copy once
/// every put sent before it began had landed or been refused (`dropped_valkeys`), so that it was
/// read from the source or written there since. A drop made sooner does not do: a put sent
/// before the read may land after it (up to its deadline), and a `None` carries no version to
/// refuse it by.
fn recent_enough<K, V: Value>(
    core: &TableCore<K, V>,
    answered: &Answered<V>,
    wanted: Version,
    dropped_valkeys: bool,
) -> bool {
    let flight = &answered.flight;
    match (wanted.as_source(), core.config.versioned(&flight.value)) {
        (Some(n), Versioned::At(have)) => have >= n,
        (Some(_), Versioned::Absent | Versioned::Unknown) => {
            dropped_valkeys || flight.origin == Origin::Loaded
        }
        _ => true,
    }
}
