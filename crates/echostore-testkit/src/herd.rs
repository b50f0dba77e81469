//! The herd: `callers` tasks spawned at once all get one fresh id whose source takes a few
//! milliseconds, timed from the first spawn until every caller has the value. One [`Herd`]
//! answers through tables (one store's owner, or several stores dealt round-robin), through the
//! bare [`SingleFlight`] baseline, or through moka's `get_with`, with the same task spawning; its [`Source`] counts the reads, so
//! a caller can check that each herd read the source once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use echostore::{Store, Table};

use crate::BoxError;
use crate::single_flight::SingleFlight;

/// How long the herd's one source read takes.
pub const SOURCE_LATENCY: Duration = Duration::from_millis(5);

/// The source behind a herd: counts its reads, sleeps its latency, answers `value of <id>`.
#[derive(Debug)]
pub struct Source {
    reads: AtomicU64,
    latency: Duration,
}

impl Source {
    /// A source whose every read takes `latency`.
    pub fn new(latency: Duration) -> Arc<Source> {
        Arc::new(Source {
            reads: AtomicU64::new(0),
            latency,
        })
    }

    /// Reads so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }

    /// One read of `id`.
    pub async fn read(&self, id: u64) -> String {
        self.reads.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.latency).await;
        format!("value of {id}")
    }
}

/// A table named `name` on `store` whose loader reads `source` (ttl one minute).
pub async fn herd_table(
    store: &Store,
    name: &str,
    source: &Arc<Source>,
) -> Result<Table<u64, String>, echostore::Error> {
    let source = Arc::clone(source);
    store
        .table::<u64, String>(name)
        .ttl(Duration::from_secs(60))
        .loader(move |id: u64| {
            let source = Arc::clone(&source);
            async move { Ok::<_, std::io::Error>(source.read(id).await) }
        })
        .start()
        .await
}

/// Who answers a herd, and the source behind it.
pub struct Herd {
    answerer: Answerer,
    source: Arc<Source>,
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
    pub fn tables(tables: Vec<Table<u64, String>>, source: Arc<Source>) -> Herd {
        assert!(!tables.is_empty(), "a herd needs a table to answer it");
        Herd {
            answerer: Answerer::Tables(tables),
            source,
        }
    }

    /// A herd answered by a fresh bare single-flight that reads `source`.
    pub fn baseline(source: Arc<Source>) -> Herd {
        Herd {
            answerer: Answerer::Baseline(Arc::default()),
            source,
        }
    }

    /// A herd answered by moka's `future::Cache::get_with` (the peer the owner's flights are
    /// compared with), reading `source`.
    pub fn moka(source: Arc<Source>) -> Herd {
        Herd {
            answerer: Answerer::Moka(moka::future::Cache::new(1 << 20)),
            source,
        }
    }

    /// Source reads so far.
    pub fn reads(&self) -> u64 {
        self.source.reads()
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
                    let (flight, source) = (Arc::clone(flight), Arc::clone(&self.source));
                    tokio::spawn(async move { flight.get(&id, || source.read(id)).await.map(drop) })
                }
                Answerer::Moka(cache) => {
                    let (cache, source) = (cache.clone(), Arc::clone(&self.source));
                    tokio::spawn(async move {
                        let read = async move { Arc::new(source.read(id).await) };
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
}
