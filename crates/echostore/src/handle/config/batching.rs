//! The batch loader: every id a batch read could not serve from the cache, in one source call.

use std::collections::HashMap;

use super::*;

impl<K: Key, V: Value> TableBuilder<K, V> {
    /// A loader for many ids at once, `Fn(Vec<K>) -> Future<Output = Result<HashMap<K, V>, E>>`:
    /// [`Table::get_many`] and [`Table::fetch_many`] call it once for all the ids of a batch that
    /// neither L1 nor Valkey could answer and whose regeneration locks this process won (one
    /// `WHERE id = ANY(..)` instead of one query per id). An id the map leaves out is absent at the
    /// source: nothing is cached for it, its copies go (L1's, and Valkey's with the won lock, so
    /// that no later failed load serves the gone row stale), and the batch answers without it
    /// ([`Error::Absent`] for a single `get`). To cache "not found", make the value an `Option`
    /// and answer `None` for it.
    /// An error answers every id of that call with the same [`Error::Source`].
    ///
    /// With a batch loader, [`loader`](Self::loader) is optional: a `get` that misses then loads
    /// its id as a batch of one.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use std::collections::HashMap;
    /// use echostore::Store;
    ///
    /// let store = Store::builder().build().await?;
    /// let users = store
    ///     .table::<u64, String>("users")
    ///     .batch_loader(|ids: Vec<u64>| async move {
    ///         // SELECT id, name FROM users WHERE id = ANY($1): ids over 100 do not exist.
    ///         let rows = ids.into_iter().filter(|&id| id <= 100).map(|id| (id, format!("user {id}")));
    ///         Ok::<_, std::io::Error>(rows.collect::<HashMap<_, _>>())
    ///     })
    ///     .build()
    ///     .await?;
    /// let found = users.get_many([1, 2, 500]).await?;
    /// assert_eq!(found.len(), 2); // 500 is absent
    /// assert_eq!(*found[&2], "user 2");
    /// assert!(users.get(&500).await.expect_err("absent").is_absent());
    /// # Ok(())
    /// # }
    /// ```
    pub fn batch_loader<F, Fut, E>(mut self, batch_loader: F) -> Self
    where
        F: Fn(Vec<K>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<HashMap<K, V>, E>> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.batch_loader = Some(Arc::new(move |ids: Vec<K>| {
            let load = batch_loader(ids);
            Box::pin(async move { load.await.map_err(|e| SharedError::from(e.into())) })
        }));
        self
    }
}
