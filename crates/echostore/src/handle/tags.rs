//! `invalidate_tag` and `clear`: a group of entries, or the whole table, invalidated in every
//! process at once, in one Valkey command whatever the group's size.
//!
//! Neither touches the entries' own keys. Each sets a mark (`crate::state::marks`): a generation that
//! every copy written before it is checked against when it is read, here and in every other
//! process, which Valkey pushes the change to. L1 drops the entries at once (`shard/owner/marked.rs`);
//! the copies on Valkey stay where they are, misses now, until a fill overwrites them or they
//! expire. `docs/tags-and-clear.md` has the argument.

use crate::error::Result;
use crate::handle::table::Table;
use crate::state::marks::{Scope, validate_tag};
use crate::wire::key::{Key, Value};

impl<K: Key, V: Value> Table<K, V> {
    /// Invalidates every entry that carries `tag` (its [`tags`](crate::TableBuilder::tags)), in
    /// every process: when this returns, no read started after it in this process answers an
    /// entry that carried the tag before it, and no process does once Valkey's push has reached
    /// it. A fill that read the source before this does not store its value after it. Costs one
    /// Valkey command here, and one more in each process that hears of it, however many entries
    /// carry the tag. Each entry is loaded again when next read (once per id across processes,
    /// as for any miss).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::{Origin, Store};
    ///
    /// let store = Store::builder().build().await?;
    /// let prices = store
    ///     .table::<String, u64>("prices")
    ///     .tags(|sku: &String, _price: &u64| [format!("brand:{}", &sku[..3])])
    ///     .loader(|sku: String| async move { Ok::<_, std::io::Error>(sku.len() as u64) })
    ///     .build()
    ///     .await?;
    /// prices.get("acme-1").await?;
    /// prices.get("zeta-1").await?;
    /// prices.invalidate_tag("brand:acm").await?; // after repricing every acme product
    /// assert_eq!(prices.fetch("acme-1").await?.origin, Origin::Loaded);
    /// assert_eq!(prices.fetch("zeta-1").await?.origin, Origin::L1);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for a tag over
    /// [`MAX_TAG_BYTES`](crate::MAX_TAG_BYTES); a Valkey error if the mark could not be set (this
    /// process has dropped the entries anyway; other processes may not have: try again).
    pub async fn invalidate_tag(&self, tag: &str) -> Result<()> {
        validate_tag(tag)?;
        self.mark(Some(&[tag.to_owned()])).await
    }

    /// Invalidates every entry of the table, in every process, as
    /// [`invalidate_tag`](Self::invalidate_tag) does for a tag: after a migration, or when the
    /// source changed in ways no tag names.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::{Origin, Store};
    ///
    /// let store = Store::builder().build().await?;
    /// let users = store
    ///     .table::<u64, String>("users")
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("user {id}")) })
    ///     .build()
    ///     .await?;
    /// users.get(&1).await?;
    /// users.clear().await?;
    /// assert_eq!(users.fetch(&1).await?.origin, Origin::Loaded);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// A Valkey error if the mark could not be set (this process has dropped its entries anyway;
    /// other processes may not have: try again).
    pub async fn clear(&self) -> Result<()> {
        self.mark(None).await
    }

    /// Sets the mark (`tags: None` for a clear), then has the owner drop what it covers here,
    /// even when Valkey could not be told: what this process holds may be what was meant.
    async fn mark(&self, tags: Option<&[String]>) -> Result<()> {
        let (core, owner) = self.parts();
        let marked = core.marks.mark(core.l2.as_ref(), tags).await;
        if marked.is_err() {
            // Only Valkey can refuse a mark: a failed write like a put's.
            crate::state::stats::bump(&core.stats.counters.l2_errors);
        }
        let scope = match (&marked, tags) {
            (Ok(scope), _) => scope.clone(),
            (Err(_), None) => Scope::All,
            (Err(_), Some(tags)) => Scope::Tags(tags.iter().cloned().collect()),
        };
        owner.marked(&scope, true).await?;
        marked.map(drop)
    }
}
