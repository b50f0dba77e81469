//! Helpers shared by the integration tests: counting loaders with a gate, and condition waits.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use echostore::{L1Backend, TableStats};
use tokio::sync::watch;

/// Both L1 backends, for suites that must hold over each.
pub const BACKENDS: [L1Backend; 2] = [L1Backend::QuickCache, L1Backend::Moka];

/// A loader's test double on the *source* side only: it counts calls and can hold every call
/// until the test opens the gate. Everything between the caller and this source is real.
#[derive(Clone)]
pub struct Source {
    calls: Arc<AtomicUsize>,
    gate: watch::Sender<bool>,
}

impl Source {
    /// A source whose gate starts open.
    pub fn open() -> Self {
        let (gate, _) = watch::channel(true);
        Source {
            calls: Arc::new(AtomicUsize::new(0)),
            gate,
        }
    }

    /// A source whose calls wait until [`Source::release`].
    pub fn gated() -> Self {
        let (gate, _) = watch::channel(false);
        Source {
            calls: Arc::new(AtomicUsize::new(0)),
            gate,
        }
    }

    /// How many times the source was read.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Lets every waiting and future call through.
    pub fn release(&self) {
        self.gate.send_replace(true);
    }

    /// Closes the gate again.
    pub fn hold(&self) {
        self.gate.send_replace(false);
    }

    /// Counts a call and waits at the gate.
    pub async fn read(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let mut open = self.gate.subscribe();
        let _ = open.wait_for(|open| *open).await;
    }

    /// A loader for `u64 -> String` tables: `"value-<id>-<call number>"`.
    pub fn loader(
        &self,
    ) -> impl Fn(u64) -> futures::future::BoxFuture<'static, Result<String, std::io::Error>>
    + Send
    + Sync
    + 'static {
        let source = self.clone();
        move |id| {
            let source = source.clone();
            Box::pin(async move {
                source.read().await;
                Ok(format!("value-{id}-{}", source.calls()))
            })
        }
    }
}

/// Waits (yielding, never sleeping a fixed time) until `cond` holds; panics after 30 s so a
/// broken implementation fails instead of hanging the suite.
pub async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Waits until a table's stats satisfy `cond`.
pub async fn until_stats(
    what: &str,
    stats: impl Fn() -> TableStats,
    cond: impl Fn(&TableStats) -> bool,
) {
    until(what, || cond(&stats())).await
}

/// A private, real Valkey for one test (killed on drop).
pub fn valkey() -> embedded_valkey::EmbeddedValkey {
    embedded_valkey::EmbeddedValkey::start().expect("a real valkey-server for the test")
}

/// A plain client connection, standing in for another process or an operator.
pub async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// A store on `url`.
pub async fn store_on(url: &str) -> echostore::Store {
    echostore::Store::builder()
        .valkey(url)
        .require_valkey(true)
        .build()
        .await
        .expect("store on valkey")
}

/// A table `u64 -> String` on a store without Valkey, over `source`, on `backend`.
pub async fn local_table(
    name: &str,
    backend: L1Backend,
    source: &Source,
) -> echostore::Table<u64, String> {
    echostore::Store::builder()
        .build()
        .await
        .expect("store")
        .table::<u64, String>(name)
        .l1_backend(backend)
        .loader(source.loader())
        .start()
        .await
        .expect("table")
}

/// `table.fetch(&id)` on a task of its own.
pub fn spawn_fetch<V: echostore::Value>(
    table: &echostore::Table<u64, V>,
    id: u64,
) -> tokio::task::JoinHandle<echostore::Result<echostore::Fetched<V>>> {
    let table = table.clone();
    tokio::spawn(async move { table.fetch(&id).await })
}
