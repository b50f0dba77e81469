//! `delete`: the recipe for a row that is gone at the source, and how a value type says it has a
//! "not found" of its own.
//!
//! A table whose values are `Option<T>` caches "not found" as `None` (the crate docs' recipe), so
//! a deleted row is best written as `None` everywhere: no replica reads the source again for it.
//! Any other value type has no such value, and the row is invalidated: the next read loads (and
//! the loader says what "gone" means). Which of the two applies is asked of the type itself,
//! through serde: [`crate::state::absence::absent`] hands `V::deserialize` a deserializer that answers only
//! `deserialize_option`, with `None`. `Option<T>` (and a transparent newtype around one) takes it;
//! every other type asks for something else and is refused.
//!
//! A `None` is a **tombstone**: it carries no `.version_by` version, so it is ordered by when it
//! reaches Valkey. A delete wins over every write before it and loses to every write after it,
//! whatever version the user's `version_by` gives `None` (0 would make every delete a no-op
//! against the row it deletes; `u64::MAX` would refuse the row's re-creation forever).

use std::borrow::Borrow;

use crate::error::Result;
use crate::events::InvalidatedBy;
use crate::handle::table::Table;
use crate::wire::key::{Key, Value};

impl<K: Key, V: Value> Table<K, V> {
    /// The row `id` is gone at the source (a `DELETE` endpoint): with `V = Option<_>`, `None` is
    /// written through L1 and Valkey (a [`put`](Self::put)), so every process answers "not found"
    /// from its cache; for any other value type, the id is [`invalidate`](Self::invalidate)d, so
    /// the next read anywhere asks the loader. Either way no process keeps serving the old row,
    /// and a fill in flight cannot write it back.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::{Origin, Store};
    ///
    /// let store = Store::builder().build().await?;
    /// let users = store
    ///     .table::<u64, Option<String>>("users")
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(Some(format!("user {id}"))) })
    ///     .build()
    ///     .await?;
    /// users.get(&7).await?;
    /// users.delete(&7).await?; // DELETE FROM users WHERE id = 7, then this
    /// let read = users.fetch(&7).await?;
    /// assert_eq!((read.value.as_ref(), read.origin), (&None, Origin::L1)); // no reload
    /// # Ok(())
    /// # }
    /// ```
    pub async fn delete<Q>(&self, id: &Q) -> Result<()>
    where
        K: Borrow<Q>,
        Q: ToOwned<Owned = K> + ?Sized,
    {
        let (id, by) = (id.to_owned(), InvalidatedBy::Delete);
        match crate::state::absence::absent::<V>() {
            Some(none) => self.write(id, none, by).await.map(drop),
            None => self.drop_id(id, by).await,
        }
    }
}
