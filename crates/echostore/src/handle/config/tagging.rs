//! The tags of an entry: what [`Table::invalidate_tag`] finds it by.

use super::*;

impl<K: Key, V: Value> TableBuilder<K, V> {
    /// The tags of an entry, `Fn(&K, &V) -> impl IntoIterator<Item = impl Into<String>>`: every
    /// write of the entry (a load or a `put`) carries them to Valkey, and
    /// [`Table::invalidate_tag`] makes every entry that carries a tag a miss in every process
    /// (`docs/tags-and-clear.md`). Tags are asked of the value as it is written; an entry's tags
    /// may change from one write to the next. A tag is at most
    /// [`MAX_TAG_BYTES`](crate::MAX_TAG_BYTES). With a Valkey, a longer one, or tags that panic,
    /// fail the write with [`Error::Codec`] as a value too large does: a `put` writes nothing, a
    /// load's callers get the error and nothing is cached. Without one, tags are asked only by
    /// [`Table::invalidate_tag`], which drops an entry whose tags panic.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::{Origin, Store};
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Product { tenant: u32, name: String }
    ///
    /// let store = Store::builder().build().await?;
    /// let products = store
    ///     .table::<u64, Product>("products")
    ///     .tags(|_id: &u64, p: &Product| [format!("tenant:{}", p.tenant)])
    ///     .loader(|id: u64| async move {
    ///         Ok::<_, std::io::Error>(Product { tenant: (id % 2) as u32, name: format!("product {id}") })
    ///     })
    ///     .build()
    ///     .await?;
    /// products.get(&1).await?;
    /// products.get(&2).await?;
    /// products.invalidate_tag("tenant:1").await?; // product 1 only
    /// assert_eq!(products.fetch(&1).await?.origin, Origin::Loaded);
    /// assert_eq!(products.fetch(&2).await?.origin, Origin::L1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn tags<F, I>(mut self, tags: F) -> Self
    where
        F: Fn(&K, &V) -> I + Send + Sync + 'static,
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.tags = Some(Arc::new(move |id: &K, value: &V| {
            tags(id, value).into_iter().map(Into::into).collect()
        }));
        self
    }
}
