//! How the losers of a herd learn the winner's value: the `herd` bench's four-store row (N
//! concurrent misses on one key, 10 000 or 1 000 under `CI`, dealt round-robin over four stores on
//! one Valkey) with **push wake-up** (coherence on, a safety poll of 1 s) against **polling**
//! (coherence off, every 1 ms — the finest interval tokio's timer keeps — and every 10 ms, the
//! default), in the same run, for a 5 ms source (the `herd` bench's) and a 50 ms one (the `race`
//! readout's).
//!
//! Besides criterion's time per herd, every herd is measured for:
//! - **Valkey commands**: `total_commands_processed` from `INFO stats` before and after it (less
//!   the first `INFO` itself), and the losers' polls (`poll_waits + push_wakeups`);
//! - **the losers' wake-up**: for each store that lost the lock, the instant its first caller had
//!   the value, from the instant the winner's loader returned (the winner's write starts then, so
//!   this includes that write's round trip); and the same for every caller of those stores (which
//!   adds the scheduling of their thousands of tasks);
//! - **source reads**: exactly one per herd, asserted outside the timing.
#![allow(missing_docs)] // criterion_group! generates an undocumented function

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use echostore::{LoserPolicy, Store, Table, TableStats};
use echostore_testkit::Source;
use echostore_testkit::info::commands_processed;
use echostore_testkit::measure::Latencies;
use echostore_testkit::{measurement_time, runtime, size, warm_up_time};
use embedded_valkey::EmbeddedValkey;
use redis::aio::MultiplexedConnection;

const SAMPLE_SIZE: usize = 10;
const STORES: usize = 4;

/// One way of waking the losers, on four stores of its own, and what its herds measured.
struct Mode {
    name: String,
    tables: Vec<Table<u64, String>>,
    source: Source,
    /// When the winner's loader returned, for the herd running now.
    loaded_at: Arc<Mutex<Option<Instant>>>,
    first_answer: Mutex<Latencies>,
    every_answer: Mutex<Latencies>,
    herds: AtomicU64,
    commands: AtomicU64,
    polls: AtomicU64,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Mode {
    async fn start(
        url: &str,
        table: &str,
        name: String,
        coherence: bool,
        every: Duration,
        source: Duration,
    ) -> Mode {
        let source = Source::taking(source);
        let loaded_at = Arc::new(Mutex::new(None));
        let mut tables = Vec::new();
        for _ in 0..STORES {
            let store = Store::builder()
                .valkey(url)
                .require_valkey(true)
                .coherence(coherence)
                .build()
                .await
                .expect("store with valkey");
            let (source, loaded_at) = (source.clone(), Arc::clone(&loaded_at));
            let table = store
                .table::<u64, String>(table)
                .ttl(Duration::from_secs(60))
                .losers(LoserPolicy::Poll {
                    every,
                    up_to: Duration::from_secs(30),
                })
                .loader(move |id: u64| {
                    let (source, loaded_at) = (source.clone(), Arc::clone(&loaded_at));
                    async move {
                        let value = source.value(id).await;
                        *locked(&loaded_at) = Some(Instant::now());
                        Ok::<_, std::io::Error>(value)
                    }
                })
                .build()
                .await
                .expect("table");
            tables.push(table);
        }
        Mode {
            name,
            tables,
            source,
            loaded_at,
            first_answer: Mutex::default(),
            every_answer: Mutex::default(),
            herds: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            polls: AtomicU64::new(0),
        }
    }

    /// One herd of `callers` on `id`: its time; its commands, polls and wake-ups recorded.
    async fn herd(&self, conn: &mut MultiplexedConnection, id: u64, callers: usize) -> Duration {
        let before: Vec<TableStats> = self.tables.iter().map(Table::stats).collect();
        let (reads, commands) = (self.source.calls(), commands_processed(conn).await);
        let started = Instant::now();
        let tasks: Vec<_> = (0..callers)
            .map(|i| {
                let table = self.tables[i % STORES].clone();
                tokio::spawn(async move {
                    table.get(&id).await.expect("a herd caller's get");
                    (i % STORES, Instant::now())
                })
            })
            .collect();
        let answers: Vec<(usize, Instant)> = futures::future::join_all(tasks)
            .await
            .into_iter()
            .map(|joined| joined.expect("a herd task"))
            .collect();
        let elapsed = started.elapsed();

        let commands = commands_processed(conn).await - commands - 1;
        assert_eq!(
            self.source.calls() - reads,
            1,
            "{}: one source read per herd",
            self.name
        );
        let after: Vec<TableStats> = self.tables.iter().map(Table::stats).collect();
        let winner = (0..STORES).find(|&s| after[s].lock_won > before[s].lock_won);
        let polls: u64 = (0..STORES)
            .map(|s| {
                (after[s].poll_waits + after[s].push_wakeups)
                    - (before[s].poll_waits + before[s].push_wakeups)
            })
            .sum();
        let loaded_at = locked(&self.loaded_at)
            .take()
            .expect("the winner's load ended");
        let (mut first, mut every) = (locked(&self.first_answer), locked(&self.every_answer));
        for store in
            (0..STORES).filter(|&s| Some(s) != winner && after[s].lock_lost > before[s].lock_lost)
        {
            let mine = answers
                .iter()
                .filter(|(s, _)| *s == store)
                .map(|(_, at)| *at);
            let since = |at: Instant| at.saturating_duration_since(loaded_at);
            if let Some(earliest) = mine.clone().min() {
                first.record(since(earliest));
            }
            for at in mine {
                every.record(since(at));
            }
        }
        self.herds.fetch_add(1, Ordering::Relaxed);
        self.commands.fetch_add(commands, Ordering::Relaxed);
        self.polls.fetch_add(polls, Ordering::Relaxed);
        elapsed
    }

    fn print(&self) {
        let herds = self.herds.load(Ordering::Relaxed).max(1) as f64;
        let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
        let (first, every) = (locked(&self.first_answer), locked(&self.every_answer));
        println!(
            "  {:<32} {:>6.1} commands/herd · {:>6.1} polls/herd · losing stores' first answer \
             after the winner's load: p50 {} p99 {} max {} · every loser caller: p50 {} p99 {} \
             ({} herds)",
            self.name,
            self.commands.load(Ordering::Relaxed) as f64 / herds,
            self.polls.load(Ordering::Relaxed) as f64 / herds,
            ms(first.quantile(0.5)),
            ms(first.quantile(0.99)),
            ms(first.max()),
            ms(every.quantile(0.5)),
            ms(every.quantile(0.99)),
            herds
        );
    }
}

fn wakeup(c: &mut Criterion) {
    let rt = runtime();
    let callers = size(10_000, 1_000);
    let valkey = EmbeddedValkey::start().expect("an embedded valkey-server");
    let url = valkey.url();
    let mut conn = rt.block_on(async {
        redis::Client::open(url.as_str())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("a connection for INFO")
    });
    let ids = AtomicU64::new(0);
    for source in [Duration::from_millis(5), Duration::from_millis(50)] {
        let modes: Vec<Mode> = rt.block_on(async {
            let ms = source.as_millis();
            let mut modes = Vec::new();
            for (slug, how, coherence, every) in [
                (
                    "push",
                    "push, safety poll 1 s",
                    true,
                    Duration::from_secs(1),
                ),
                ("poll1", "poll every 1 ms", false, Duration::from_millis(1)),
                (
                    "poll10",
                    "poll every 10 ms",
                    false,
                    Duration::from_millis(10),
                ),
            ] {
                let (table, name) = (format!("wake-{slug}-{ms}"), format!("{how}, {ms} ms src"));
                modes.push(Mode::start(&url, &table, name, coherence, every, source).await);
            }
            modes
        });
        let mut group = c.benchmark_group(format!(
            "a herd of {callers} misses over four stores, {} ms source",
            source.as_millis()
        ));
        group.sampling_mode(SamplingMode::Flat);
        group.sample_size(SAMPLE_SIZE);
        group.warm_up_time(warm_up_time());
        group.measurement_time(measurement_time() * 2);
        for mode in &modes {
            group.bench_function(mode.name.as_str(), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let id = ids.fetch_add(1, Ordering::Relaxed);
                        total += rt.block_on(mode.herd(&mut conn, id, callers));
                    }
                    total
                })
            });
        }
        group.finish();
        println!(
            "\nhow the losers woke, this run ({callers} callers, one source read per herd checked):"
        );
        for mode in &modes {
            mode.print();
        }
        drop(modes);
    }
    drop(valkey);
}

criterion_group!(benches, wakeup);
criterion_main!(benches);
