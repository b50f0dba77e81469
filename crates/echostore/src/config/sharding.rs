//! `.shards(n)`: how many owner actors share a table's ids.

use super::*;

/// The most owners one table may have.
pub(super) const MAX_SHARDS: usize = 1024;

/// The default number of owners: one, until a batch read spanning shards is one batch loader
/// call again (today it is one call per shard it spans) and every counter is counted once per
/// table (a flush is counted by each shard).
pub(super) const DEFAULT_SHARDS: usize = 1;

impl<K: Key, V: Value> TableBuilder<K, V> {
    /// Spreads the table's ids over `n` owner actors by hash (default 1, at most 1,024). Each
    /// owner has its ids' flights, writes and ordering to itself, so every per-id rule holds as
    /// with one owner, while misses on distinct ids no longer queue behind one actor. A crash
    /// restarts only the shard it happened in. `TableStats` stays one snapshot for the table.
    ///
    /// Two costs with more than one: a `get_many` makes one batch loader call per shard its
    /// missing ids span (not one in all), and `coherence_flushes` counts a flush once per shard.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::{Error, Store};
    ///
    /// let store = Store::builder().build().await?;
    /// let loader = |id: u64| async move { Ok::<_, std::io::Error>(id * 2) };
    /// let doubled = store.table::<u64, u64>("doubled").shards(4).loader(loader).start().await?;
    /// assert_eq!(*doubled.get(&21).await?, 42);
    /// let none = store.table::<u64, u64>("none").shards(0).loader(loader).start().await;
    /// assert!(matches!(none, Err(Error::InvalidConfig(_))));
    /// # Ok(())
    /// # }
    /// ```
    pub fn shards(mut self, n: usize) -> Self {
        self.shards = Some(n);
        self
    }
}
