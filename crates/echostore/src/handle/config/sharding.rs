//! `.shards(n)`: how many owner actors share a table's ids.

use super::*;

/// The most owners one table may have.
pub(super) const MAX_SHARDS: usize = 1024;

/// The default number of owners: one per core the process may run on (at most [`MAX_SHARDS`]),
/// so that misses on distinct ids are spread over as many actors as can run at once.
pub(super) fn default_shards() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_SHARDS)
}

impl<K: Key, V: Value> TableBuilder<K, V> {
    /// Spreads the table's ids over `n` owner actors by hash (default: the cores available to
    /// the process, [`std::thread::available_parallelism`]; at most 1,024). Each owner has its
    /// ids' flights, writes and ordering to itself, so every per-id rule holds as with one
    /// owner, while misses on distinct ids no longer queue behind one actor. A crash restarts
    /// only the shard it happened in. What concerns the table stays the table's: `TableStats`
    /// is one snapshot, a flush or a mark is counted once, and a `get_many` makes one batch loader call
    /// for all the ids it has to load, whichever shards they are in.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::{Error, Store};
    ///
    /// let store = Store::builder().build().await?;
    /// let loader = |id: u64| async move { Ok::<_, std::io::Error>(id * 2) };
    /// let doubled = store.table::<u64, u64>("doubled").shards(4).loader(loader).build().await?;
    /// assert_eq!(*doubled.get(&21).await?, 42);
    /// let none = store.table::<u64, u64>("none").shards(0).loader(loader).build().await;
    /// assert!(matches!(none, Err(Error::InvalidConfig(_))));
    /// # Ok(())
    /// # }
    /// ```
    pub fn shards(mut self, n: usize) -> Self {
        self.shards = Some(n);
        self
    }
}
