//! Keeps this process's schema among its table's live schemas (`crate::state::schemas`): the lease
//! renewed every [`RENEW_EVERY`]; when the table's keys move to its schema's generation (its lease
//! had lapsed, or it could not join at `build()`), L1 flushed and the move settled; the lease given
//! back once the table is dropped.

use std::sync::{Arc, Weak};

use crate::coherence::Sink;
use crate::shard::owner::owner_ref::OwnerRef;
use crate::state::core::TableCore;
use crate::state::schemas::RENEW_EVERY;
use crate::wire::key::{Key, Value};

/// Renews the lease of `core`'s schema until `owner` is gone, then gives it back.
pub(crate) fn keep_schema<K: Key, V: Value>(
    core: &Arc<TableCore<K, V>>,
    owner: Weak<OwnerRef<K, V>>,
) {
    let Some(l2) = core.l2.clone() else {
        return;
    };
    let (schemas, table) = (Arc::clone(&core.schemas), Arc::clone(&core.name));
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(RENEW_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await; // the first tick is at once, and the table has just joined
        loop {
            ticks.tick().await;
            if owner.strong_count() == 0 {
                return schemas.leave(&l2).await;
            }
            match schemas.renew(&l2).await {
                Ok(renewed) if renewed.moved => {
                    tracing::warn!(%table, "this process's keys move to its schema's generation (its lease had lapsed, or it had not joined): L1 is flushed");
                    // Flushed once as the keys move to this process's own suffix, and again as
                    // they settle on the generation: nothing read meanwhile outlives the move.
                    flush(&owner);
                    schemas.settle(&renewed, &table).await;
                    flush(&owner);
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(%table, error = %e, "renewing the schema's lease failed"),
            }
        }
    });
}

/// Drops the table's L1 and detaches its running flights, if the table is still there.
fn flush<K: Key, V: Value>(owner: &Weak<OwnerRef<K, V>>) {
    if let Some(owner) = owner.upgrade() {
        owner.flush(false);
    }
}
