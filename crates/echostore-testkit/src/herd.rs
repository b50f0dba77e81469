//! Herds: many callers of one id at once. For the tests, [`herd`] and [`herd_across`] spawn
//! `fetch`es released together by one barrier ([`together`], which the `race` readout and the
//! node examples use too), [`answers`] collects them, and [`on_task`] runs one call on a task. For the benches, one [`Herd`] times
//! `callers` tasks spawned at once on one fresh id whose source takes a few milliseconds, from
//! the first spawn until every caller has the value, answered through tables (one store's owner,
//! or several stores dealt round-robin), through the bare [`SingleFlight`] baseline, or through
//! moka's `get_with`; its [`Source`] counts the reads, so [`Herd::rounds`] checks that each herd
//! read the source once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use echostore::{Fetched, Key, Result, Store, Table, Value};
use tokio::runtime::Runtime;
use tokio::sync::Barrier;
use tokio::task::JoinHandle;

use crate::BoxError;
use crate::single_flight::SingleFlight;
use crate::source::Source;

/// A caller's task: its `fetch` answer.
pub type Caller<V> = JoinHandle<Result<Fetched<V>>>;

/// `n` tasks, the i-th running `call(i)`, let go together by one barrier once all are spawned.
pub fn together<T, F>(n: usize, mut call: impl FnMut(usize) -> F) -> Vec<JoinHandle<T>>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(n));
    (0..n)
        .map(|i| {
            let (barrier, call) = (Arc::clone(&barrier), call(i));
            tokio::spawn(async move {
                barrier.wait().await;
                call.await
            })
        })
        .collect()
}

/// `call` given a clone of `handle` (a table, a store), on a task of its own.
pub fn on_task<H: Clone, T, F>(handle: &H, call: impl FnOnce(H) -> F) -> JoinHandle<T>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    tokio::spawn(call(handle.clone()))
}

/// `table.fetch(&id)` on a task of its own.
pub fn spawn_fetch<K: Key, V: Value>(table: &Table<K, V>, id: K) -> Caller<V> {
    on_task(table, |table| async move { table.fetch(&id).await })
}

/// `n` fetches of `id` on `table`, each on a task of its own, let go together by a barrier.
pub fn herd<K: Key, V: Value>(table: &Table<K, V>, n: usize, id: K) -> Vec<Caller<V>> {
    herd_across(std::slice::from_ref(table), n, id)
}

/// `per_table` fetches of `id` on each of `tables`, let go together by one barrier.
pub fn herd_across<K: Key, V: Value>(
    tables: &[Table<K, V>],
    per_table: usize,
    id: K,
) -> Vec<Caller<V>> {
    together(tables.len() * per_table, |i| {
        let (table, id) = (tables[i / per_table].clone(), id.clone());
        async move { table.fetch(&id).await }
    })
}

/// Every caller's answer, in the callers' order (a caller's task must not have failed).
pub async fn answers<V: Value>(callers: Vec<Caller<V>>) -> Vec<Result<Fetched<V>>> {
    let mut answers = Vec::with_capacity(callers.len());
    for caller in callers {
        answers.push(caller.await.expect("caller task"));
    }
    answers
}

/// How long the herd's one source read takes.
pub const SOURCE_LATENCY: Duration = Duration::from_millis(5);

/// A table named `name` on `store` whose loader reads `source` (ttl one minute).
pub async fn herd_table(
    store: &Store,
    name: &str,
    source: &Source,
) -> Result<Table<u64, String>, echostore::Error> {
    store
        .table::<u64, String>(name)
        .ttl(Duration::from_secs(60))
        .loader(source.loader())
        .build()
        .await
}

/// Who answers a herd, and the source behind it.
pub struct Herd {
    answerer: Answerer,
    source: Source,
}

enum Answerer {
    /// Tables (one per store), dealt the callers round-robin.
    Tables(Vec<Table<u64, String>>),
    Baseline(Arc<SingleFlight<u64, String>>),
    /// moka's own single-flight: `future::Cache::get_with`.
    Moka(moka::future::Cache<u64, Arc<String>>),
}

impl Herd {
    /// A herd answered by `tables`, whose loaders read `source`.
    pub fn tables(tables: Vec<Table<u64, String>>, source: Source) -> Herd {
        assert!(!tables.is_empty(), "a herd needs a table to answer it");
        Herd {
            answerer: Answerer::Tables(tables),
            source,
        }
    }

    /// A herd answered by a fresh bare single-flight that reads `source`.
    pub fn baseline(source: Source) -> Herd {
        Herd {
            answerer: Answerer::Baseline(Arc::default()),
            source,
        }
    }

    /// A herd answered by moka's `future::Cache::get_with` (the peer the owner's flights are
    /// compared with), reading `source`.
    pub fn moka(source: Source) -> Herd {
        Herd {
            answerer: Answerer::Moka(moka::future::Cache::new(1 << 20)),
            source,
        }
    }

    /// Source reads so far.
    pub fn reads(&self) -> u64 {
        self.source.calls() as u64
    }

    /// Spawns `callers` tasks that each get `id`; the time until all of them have the value.
    pub async fn run(&self, id: u64, callers: usize) -> Result<Duration, BoxError> {
        let started = Instant::now();
        let tasks: Vec<_> = (0..callers)
            .map(|i| match &self.answerer {
                Answerer::Tables(tables) => {
                    let table = tables[i % tables.len()].clone();
                    tokio::spawn(async move { table.get(&id).await.map(drop).map_err(Into::into) })
                }
                Answerer::Baseline(flight) => {
                    let (flight, source) = (Arc::clone(flight), self.source.clone());
                    tokio::spawn(
                        async move { flight.get(&id, || source.value(id)).await.map(drop) },
                    )
                }
                Answerer::Moka(cache) => {
                    let (cache, source) = (cache.clone(), self.source.clone());
                    tokio::spawn(async move {
                        let read = async move { Arc::new(source.value(id).await) };
                        drop(cache.get_with(id, read).await);
                        Ok(())
                    })
                }
            })
            .collect();
        for joined in futures::future::join_all(tasks).await {
            joined.map_err(|e| format!("a herd task failed: {e}"))??;
        }
        Ok(started.elapsed())
    }

    /// `iters` herds of `callers`, each on a fresh id drawn from `ids`: their summed time (a
    /// criterion `iter_custom` figure). Panics unless each herd read the source exactly once,
    /// which is checked outside the timing.
    pub fn rounds(&self, rt: &Runtime, ids: &AtomicU64, callers: usize, iters: u64) -> Duration {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let id = ids.fetch_add(1, Ordering::Relaxed);
            let before = self.reads();
            total += rt
                .block_on(self.run(id, callers))
                .unwrap_or_else(|e| panic!("a herd of {callers} on id {id}: {e}"));
            let reads = self.reads() - before;
            assert_eq!(
                reads, 1,
                "a herd of {callers} on id {id} read the source {reads} times"
            );
        }
        total
    }
}
