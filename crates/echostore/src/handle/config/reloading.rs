//! `.reloader`: a refresh that is given the value it refreshes, and may answer "unchanged".

use super::*;

use crate::state::reload::Reload;

impl<K: Key, V: Value> TableBuilder<K, V> {
    /// Refresh with the old value (Caffeine's `reload`, an HTTP `If-None-Match`): when the id's
    /// copy on Valkey is past its freshness but within its stale window, the lock's winner calls
    /// `reloader(id, old)` instead of the loader. [`Reload::Unchanged`] renews the copy's life on
    /// Valkey (a 16-byte restamp: no value bytes are sent) and in L1, and is still the one source
    /// read of that expiry, counted in `source_reads` and `reloads_unchanged`;
    /// [`Reload::Changed`] is stored as a loaded value would be; [`Reload::Gone`] deletes the copy
    /// and the read answers [`Error::Absent`](crate::Error::Absent) (an `Option` table answers
    /// `Changed(None)` instead, to cache "not found"). With no copy to reload (a cold miss, a copy
    /// past its stale window, no Valkey) the loader runs, and a batch read's misses load as a
    /// batch. A copy that leaves Valkey while the reloader runs is written in full on
    /// `Unchanged`, as a load's value. An error, a panic or a timeout is the reloader's as it
    /// would be the loader's.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use echostore::{Reload, Store};
    ///
    /// #[derive(Clone, serde::Serialize, serde::Deserialize)]
    /// struct Page { etag: u64, html: String }
    ///
    /// let store = Store::builder().build().await?;
    /// let pages = store
    ///     .table::<u64, Page>("pages")
    ///     .ttl(Duration::from_secs(60))
    ///     .stale_for(Duration::from_secs(600)) // the window in which a copy can be reloaded
    ///     .loader(|id: u64| async move {
    ///         Ok::<_, std::io::Error>(Page { etag: 1, html: format!("<p>{id}</p>") })
    ///     })
    ///     .reloader(|_id: u64, old: Arc<Page>| async move {
    ///         // e.g. a conditional GET with If-None-Match: old.etag
    ///         let etag_now = 1;
    ///         Ok::<_, std::io::Error>(if etag_now == old.etag {
    ///             Reload::Unchanged
    ///         } else {
    ///             Reload::Changed(Page { etag: etag_now, html: String::new() })
    ///         })
    ///     })
    ///     .build()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn reloader<F, Fut, E>(mut self, reloader: F) -> Self
    where
        F: Fn(K, Arc<V>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Reload<V>, E>> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.reloader = Some(Arc::new(move |id: K, old: Arc<V>| {
            let reload = reloader(id, old);
            Box::pin(async move { reload.await.map_err(|e| SharedError::from(e.into())) })
        }));
        self
    }
}
