//! Cache-only reads: `peek_local` (this process's L1) and `peek` (L1, then Valkey's copy). Neither
//! ever calls the loader, takes or waits on the regeneration lock, joins a flight or waits for a
//! push: a peek answers what the caches hold now, or `None`.
//!
//! A peek changes nothing: it draws no early refresh, counts no hit or miss, and does not put what
//! it read from Valkey into L1. Filling L1 is a write ordered by the id's owner (a put or a push
//! racing the read must win), and a peek never reaches the owner. With `l1_idle`, a peek reads
//! the entry as a hit does, so it keeps the entry from idling out (both backends' lookups do).

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;

use crate::error::Result;
use crate::fetched::{Fetched, Origin};
use crate::handle::table::Table;
use crate::state::core::TableCore;
use crate::state::l1::L1Cache;
use crate::valkey::envelope;
use crate::wire::key::{Key, Value};

impl<K: Key, V: Value> Table<K, V> {
    /// This process's fresh L1 copy of `id`, or `None`: synchronous, never the loader, the lock
    /// or Valkey.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::Store;
    ///
    /// let store = Store::builder().build().await?;
    /// let names = store
    ///     .table::<u64, String>("names")
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("name {id}")) })
    ///     .build()
    ///     .await?;
    /// assert!(names.peek_local(&7).is_none()); // nothing cached: the loader is not called
    /// names.get(&7).await?;
    /// assert_eq!(names.peek_local(&7).as_deref().map(String::as_str), Some("name 7"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn peek_local<Q>(&self, id: &Q) -> Option<Arc<V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (core, _) = self.parts();
        local(core, id)
    }

    /// `id`'s fresh copy from L1, else from Valkey, with its origin ([`Origin::L1`] or
    /// [`Origin::L2`]); `Ok(None)` when neither holds one. Never the loader, the lock, a flight or a
    /// loser's wait, and it leaves L1 as it was.
    ///
    /// Valkey's copy is refused (`None`) as a read would refuse it: past its freshness on Valkey's
    /// clock, made a miss by a `clear` or a tag invalidation, oversized, undecodable — and while
    /// this process's own failed write of `id` is not yet repaired on Valkey, a load or write of
    /// `id` is under way in this process (it may land an older value than Valkey's), or, under
    /// key tracking, L1's copy of `id` waits for its confirmation (which makes that copy fresh
    /// again until the push of a later change lands): a process never answers newer than what
    /// it serves next. A Valkey error is the error.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::{Origin, Store};
    ///
    /// let store = Store::builder().build().await?;
    /// let names = store
    ///     .table::<u64, String>("names")
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("name {id}")) })
    ///     .build()
    ///     .await?;
    /// assert!(names.peek(&7).await?.is_none());
    /// names.put(&7, "Ada".to_owned()).await?;
    /// let seen = names.peek(&7).await?.expect("cached");
    /// assert_eq!((seen.value.as_str(), seen.origin), ("Ada", Origin::L1));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn peek<Q>(&self, id: &Q) -> Result<Option<Fetched<V>>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (core, _) = self.parts();
        if let Some(value) = local(core, id) {
            return Ok(Some(Fetched::new(value, Origin::L1)));
        }
        on_valkey(core, &id.to_owned()).await
    }
}

/// L1's entry for `id` while it is fresh; no refresh drawn, nothing counted.
fn local<K, V, Q>(core: &TableCore<K, V>, id: &Q) -> Option<Arc<V>>
where
    K: Key + Borrow<Q>,
    V: Value,
    Q: Hash + Eq + ?Sized,
{
    core.l1
        .get(id)
        .filter(|entry| core.trusts(entry))
        .map(|entry| entry.value)
}

/// Valkey's copy of `id`, if a read would take it as fresh.
async fn on_valkey<K: Key, V: Value>(core: &TableCore<K, V>, id: &K) -> Result<Option<Fetched<V>>> {
    let Some(l2) = &core.l2 else {
        return Ok(None);
    };
    // A flight or a write of the id in this process may still land an older value than Valkey
    // holds now, and a confirmation make L1's older copy fresh again: a peek then answers
    // nothing rather than something newer than the next read.
    if core.unsettled.holds(id) || !core.board(id).quiet(id) {
        return Ok(None);
    }
    let names = core.names(id)?;
    let max = core.config.max_value_bytes;
    core.hear_marks().await;
    let Some(bytes) = l2.get(&names, max).await? else {
        return Ok(None);
    };
    if bytes.len() > max {
        return Ok(None);
    }
    // Undecodable bytes (a user `Deserialize` panicking on them among the causes): a peek
    // answers nothing then.
    let decoded = envelope::decode::<V>(&bytes, max, core.config.coding.custom());
    let Some(env) = decoded.ok().filter(|env| core.is_current(env)) else {
        return Ok(None);
    };
    let longest = core.config.longest_life(&env.value);
    let env = env.capped(longest);
    if !env.is_fresh(core.now_ms()) || !core.board(id).quiet(id) {
        return Ok(None);
    }
    Ok(Some(Fetched::new(Arc::new(env.value), Origin::L2)))
}
