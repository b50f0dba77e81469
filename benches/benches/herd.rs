//! What a herd costs: N concurrent misses on one key (10 000, or 1 000 under `CI`) whose source
//! takes 5 ms, timed from the first spawn until every caller has the value.
//!
//! Four ways, each iteration on a fresh key: one store without Valkey (the owner's flights alone),
//! beside a bare tokio single-flight baseline with the same task spawning (what the owner must
//! not cost much more than); one store with Valkey (the fill adds `GET`, `SET NX PX`, the fenced
//! write and the release); four stores on one Valkey with the herd dealt round-robin across them
//! (three lose the lock and poll, every 10 ms by default, until the winner's value is on Valkey).
//! After every herd, outside the timing, the bench asserts the source was read exactly once, so
//! a build that broke single-flight cannot produce a pretty number.
#![allow(missing_docs)] // criterion_group! generates an undocumented function

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use echostore::{Store, Table};
use echostore_benches::{
    Samples, measurement_time, print_ratio, print_summary, runtime, size, under_ci,
};
use embedded_valkey::EmbeddedValkey;
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

/// How long the herd's one source read takes.
const SOURCE_LATENCY: Duration = Duration::from_millis(5);

/// Criterion's minimum; each sample holds many herds.
const SAMPLE_SIZE: usize = 10;

/// The source: counts its reads, sleeps, answers.
async fn source(reads: &AtomicU64, id: u64) -> String {
    reads.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(SOURCE_LATENCY).await;
    format!("value of {id}")
}

/// A table named `name` on `store` whose loader is [`source`], counted in `reads`.
async fn herd_table(store: &Store, name: &str, reads: &Arc<AtomicU64>) -> Table<u64, String> {
    let reads = Arc::clone(reads);
    store
        .table::<u64, String>(name)
        .ttl(Duration::from_secs(60))
        .loader(move |id: u64| {
            let reads = Arc::clone(&reads);
            async move { Ok::<_, std::io::Error>(source(&reads, id).await) }
        })
        .start()
        .await
        .expect("herd table")
}

/// One slot of the bare single-flight: a load in progress with its parked callers, or its value.
enum Slot {
    Loading(Vec<oneshot::Sender<Arc<String>>>),
    /// Kept so that a caller spawned after the load finished does not start a second one, as the
    /// table's L1 would answer it.
    Ready(Arc<String>),
}

/// The baseline, as in `echostore hit-cost`: the least single-flight tokio allows, a mutex over a
/// map of parked callers. The first caller of a key reads the source and wakes the others through
/// their oneshots.
#[derive(Default)]
struct SingleFlight {
    slots: Mutex<HashMap<u64, Slot>>,
    reads: AtomicU64,
}

impl SingleFlight {
    async fn get(&self, id: u64) -> Arc<String> {
        let parked = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            match slots.get_mut(&id) {
                Some(Slot::Ready(value)) => return Arc::clone(value),
                Some(Slot::Loading(waiters)) => {
                    let (tx, rx) = oneshot::channel();
                    waiters.push(tx);
                    Some(rx)
                }
                None => {
                    slots.insert(id, Slot::Loading(Vec::new()));
                    None
                }
            }
        };
        if let Some(rx) = parked {
            return rx.await.expect("the loading caller answers");
        }
        let value = Arc::new(source(&self.reads, id).await);
        let previous = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, Slot::Ready(Arc::clone(&value)));
        if let Some(Slot::Loading(waiters)) = previous {
            for tx in waiters {
                let _ = tx.send(Arc::clone(&value));
            }
        }
        value
    }
}

/// Who answers the herd.
enum Answerer {
    /// Tables (one per store), dealt the callers round-robin; their loaders count in `reads`.
    Tables {
        tables: Vec<Table<u64, String>>,
        reads: Arc<AtomicU64>,
    },
    Baseline(Arc<SingleFlight>),
}

impl Answerer {
    fn reads(&self) -> u64 {
        match self {
            Answerer::Tables { reads, .. } => reads.load(Ordering::SeqCst),
            Answerer::Baseline(flight) => flight.reads.load(Ordering::SeqCst),
        }
    }

    /// Spawns `callers` tasks that each get `id`; the time until all of them have the value.
    async fn herd(&self, id: u64, callers: usize) -> Duration {
        let started = Instant::now();
        let tasks: Vec<_> = (0..callers)
            .map(|i| match self {
                Answerer::Tables { tables, .. } => {
                    let table = tables[i % tables.len()].clone();
                    tokio::spawn(async move { drop(table.get(&id).await.expect("a value")) })
                }
                Answerer::Baseline(flight) => {
                    let flight = Arc::clone(flight);
                    tokio::spawn(async move { drop(flight.get(id).await) })
                }
            })
            .collect();
        for joined in futures::future::join_all(tasks).await {
            joined.expect("a herd task");
        }
        started.elapsed()
    }
}

/// `iters` herds, each on a fresh id; asserts one source read per herd, outside the timing.
fn herds(
    rt: &Runtime,
    answerer: &Answerer,
    ids: &AtomicU64,
    callers: usize,
    iters: u64,
) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let id = ids.fetch_add(1, Ordering::Relaxed);
        let before = answerer.reads();
        total += rt.block_on(answerer.herd(id, callers));
        let reads = answerer.reads() - before;
        assert_eq!(
            reads, 1,
            "a herd of {callers} on id {id} read the source {reads} times"
        );
    }
    total
}

fn herd(c: &mut Criterion) {
    let rt = runtime();
    let callers = size(10_000, 1_000);
    let valkey = EmbeddedValkey::start().expect("an embedded valkey-server");
    let url = valkey.url();
    let with_valkey = || async {
        Store::builder()
            .valkey(url.as_str())
            .require_valkey(true)
            .build()
            .await
            .expect("store with valkey")
    };

    let answerers: Vec<(&str, Answerer)> = rt.block_on(async {
        let local_reads = Arc::new(AtomicU64::new(0));
        let local = Store::builder().build().await.expect("store");
        let one_reads = Arc::new(AtomicU64::new(0));
        let one = with_valkey().await;
        let four_reads = Arc::new(AtomicU64::new(0));
        let mut four = Vec::new();
        for _ in 0..4 {
            four.push(herd_table(&with_valkey().await, "herd-four", &four_reads).await);
        }
        vec![
            (
                "one store without Valkey: the owner's flights",
                Answerer::Tables {
                    tables: vec![herd_table(&local, "herd-local", &local_reads).await],
                    reads: local_reads,
                },
            ),
            (
                "a bare oneshot single-flight: the baseline",
                Answerer::Baseline(Arc::default()),
            ),
            (
                "one store with Valkey",
                Answerer::Tables {
                    tables: vec![herd_table(&one, "herd-one", &one_reads).await],
                    reads: one_reads,
                },
            ),
            (
                "four stores on one Valkey, the herd dealt round-robin",
                Answerer::Tables {
                    tables: four,
                    reads: four_reads,
                },
            ),
        ]
    });

    let ids = AtomicU64::new(0);
    let samples: Vec<Samples> = answerers.iter().map(|_| Samples::default()).collect();
    let mut group = c.benchmark_group(format!(
        "a herd of {callers} misses on one key, 5 ms source"
    ));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(SAMPLE_SIZE);
    group.warm_up_time(if under_ci() {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(1)
    });
    group.measurement_time(measurement_time() * 2);
    for ((name, answerer), recorded) in answerers.iter().zip(&samples) {
        group.bench_function(*name, |b| {
            b.iter_custom(|iters| {
                recorded.record(herds(&rt, answerer, &ids, callers, iters), iters)
            })
        });
    }
    group.finish();

    println!("\nthe herd, this run ({callers} callers, one source read per herd checked):");
    let summaries: Vec<_> = samples.iter().map(|s| s.summary(SAMPLE_SIZE)).collect();
    for ((name, _), summary) in answerers.iter().zip(&summaries) {
        print_summary(name, *summary);
    }
    print_ratio(
        "through the owner against the bare baseline",
        ("one store without Valkey", summaries[0]),
        ("bare oneshot", summaries[1]),
    );
    print_ratio(
        "with Valkey against the bare baseline",
        ("one store with Valkey", summaries[2]),
        ("bare oneshot", summaries[1]),
    );
    print_ratio(
        "four stores against the bare baseline",
        ("four stores on one Valkey", summaries[3]),
        ("bare oneshot", summaries[1]),
    );
    drop(answerers);
    drop(valkey);
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = herd
}
criterion_main!(benches);
