//! The load: the stores (one per "process") with their tables and loser policies, the workers
//! that get key after key, and the run that starts them, stops them and lets the flights land.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use echostore::{Error, Fetched, LoserPolicy, Origin, Store, Table, TableStats};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::args::Args;
use crate::chaos::{Shared, Span, watch_valkey};
use crate::settings::*;
use crate::source::Source;

/// One store (one "process") and its table.
#[derive(Clone)]
pub(crate) struct Node {
    pub(crate) store: Store,
    pub(crate) table: Table<u64, Payload>,
    pub(crate) policy: &'static str,
}

/// Loser policies rotate over the stores: none of them may read the source while another store
/// holds the lock, so the invariant is the same for all; each adds its own answers (stale copies,
/// placeholders, `LockBusy`).
pub(crate) fn loser_policy(store: usize) -> (LoserPolicy<Payload>, &'static str) {
    match store % 4 {
        0 => (
            LoserPolicy::Poll {
                every: POLL_EVERY,
                up_to: POLL_UP_TO,
            },
            "poll every 5ms up to 3s",
        ),
        1 => (LoserPolicy::ServeStale, "serve stale"),
        2 => (LoserPolicy::Default(PLACEHOLDER), "default placeholder"),
        _ => (LoserPolicy::FailFast, "fail fast"),
    }
}

pub(crate) async fn start_nodes(
    args: &Args,
    url: &str,
    source: &Arc<Source>,
) -> Result<Vec<Node>, Error> {
    let mut nodes = Vec::with_capacity(args.stores);
    for i in 0..args.stores {
        let store = Store::builder()
            .valkey(url)
            .valkey_timeout(VALKEY_TIMEOUT)
            .breaker_cooldown(BREAKER_COOLDOWN)
            .require_valkey(true)
            .build()
            .await?;
        let (policy, name) = loser_policy(i);
        let source = Arc::clone(source);
        let table = store
            .table::<u64, Payload>(TABLE)
            .ttl(args.ttl)
            .jitter(0.0) // expiry windows must be exact for the check
            // Early refresh reads a hot key again *before* it expires, by design; the check
            // counts reads per expiry window, so it runs with the rule off.
            .early_refresh(0.0)
            .stale_for(STALE_FOR)
            .lock_ttl(LOCK_TTL)
            .load_timeout(LOAD_TIMEOUT)
            .losers(policy)
            // Far above the key count: an eviction would be a legitimate extra read.
            .l1_capacity((args.keys as usize).saturating_mul(4).max(100_000))
            .loader(move |id: u64| Arc::clone(&source).read(i, id))
            .start()
            .await?;
        nodes.push(Node {
            store,
            table,
            policy: name,
        });
    }
    Ok(nodes)
}

/// What one worker (or, summed, one store or the whole run) saw.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) gets: u64,
    pub(crate) hung: u64,
    pub(crate) wrong: u64,
    pub(crate) slowest: Duration,
    pub(crate) origins: BTreeMap<&'static str, u64>,
    pub(crate) errors: BTreeMap<&'static str, u64>,
}

impl Tally {
    pub(crate) fn add(&mut self, other: &Tally) {
        self.gets += other.gets;
        self.hung += other.hung;
        self.wrong += other.wrong;
        self.slowest = self.slowest.max(other.slowest);
        for (&k, &v) in &other.origins {
            *self.origins.entry(k).or_default() += v;
        }
        for (&k, &v) in &other.errors {
            *self.errors.entry(k).or_default() += v;
        }
    }
}

pub(crate) fn origin_name(origin: Origin) -> &'static str {
    match origin {
        Origin::L1 => "L1",
        Origin::L2 => "L2",
        Origin::Loaded => "Loaded",
        Origin::Coalesced => "Coalesced",
        Origin::Stale => "Stale",
        Origin::Default => "Default",
        _ => "other",
    }
}

pub(crate) fn error_name(error: &Error) -> &'static str {
    match error {
        Error::Source(_) => "Source",
        Error::LoaderPanicked(_) => "LoaderPanicked",
        Error::LoadTimeout(_) => "LoadTimeout",
        Error::WaitTimeout { .. } => "WaitTimeout",
        Error::LockBusy => "LockBusy",
        Error::Stopped => "Stopped",
        Error::Valkey { .. } => "Valkey",
        Error::ValkeyUnavailable => "ValkeyUnavailable",
        _ => "other",
    }
}

/// An answer is right if it is the key's value, or the placeholder where the origin says so.
pub(crate) fn answer_fits(id: u64, fetched: &Fetched<Payload>) -> bool {
    match fetched.origin {
        Origin::Default => *fetched.value == PLACEHOLDER,
        _ => fetched.value.0 == id,
    }
}

/// How one worker picks its keys and paces itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) seed: u64,
    pub(crate) keys: u64,
    pub(crate) hot: u64,
    pub(crate) pause: Duration,
}

/// Gets keys until told to stop; a get that outlasts [`GET_DEADLINE`] is a hung waiter.
pub(crate) async fn worker(
    table: Table<u64, Payload>,
    plan: Plan,
    stop: Arc<AtomicBool>,
    gets: Arc<AtomicU64>,
) -> Tally {
    let mut rng = StdRng::seed_from_u64(plan.seed);
    let mut tally = Tally::default();
    while !stop.load(Relaxed) {
        let id = if rng.random_bool(HOT_SHARE) {
            rng.random_range(0..plan.hot)
        } else {
            rng.random_range(0..plan.keys)
        };
        let began = Instant::now();
        let answer = tokio::time::timeout(GET_DEADLINE, table.fetch(&id)).await;
        tally.slowest = tally.slowest.max(began.elapsed());
        tally.gets += 1;
        gets.fetch_add(1, Relaxed);
        match answer {
            Err(_) => tally.hung += 1,
            Ok(Ok(fetched)) => {
                *tally
                    .origins
                    .entry(origin_name(fetched.origin))
                    .or_default() += 1;
                if !answer_fits(id, &fetched) {
                    tally.wrong += 1;
                }
            }
            Ok(Err(e)) => *tally.errors.entry(error_name(&e)).or_default() += 1,
        }
        if plan.pause.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(plan.pause).await;
        }
    }
    tally
}

/// What the run left behind for the check and the report.
pub(crate) struct Run {
    pub(crate) ran_for: Duration,
    pub(crate) per_store: Vec<Tally>,
    pub(crate) worker_panics: u64,
    pub(crate) settled: bool,
    pub(crate) stats: Vec<TableStats>,
    pub(crate) troubled: Vec<Vec<Span>>,
}

pub(crate) async fn run_load(nodes: &[Node], args: &Args, shared: &Shared, source: &Source) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let stop_watch = Arc::new(AtomicBool::new(false));
    let gets = Arc::new(AtomicU64::new(0));
    let watcher = tokio::spawn(watch_valkey(
        nodes.to_vec(),
        shared.t0,
        Arc::clone(&stop_watch),
    ));
    let hot = (args.keys / 10).max(1);
    let mut workers = Vec::new();
    for (s, node) in nodes.iter().enumerate() {
        for w in 0..args.workers {
            let plan = Plan {
                seed: args.seed
                    ^ (((s as u64) << 32) | (w as u64)).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                keys: args.keys,
                hot,
                pause: args.pause,
            };
            let task = worker(
                node.table.clone(),
                plan,
                Arc::clone(&stop),
                Arc::clone(&gets),
            );
            workers.push((s, tokio::spawn(task)));
        }
    }
    progress(args.run_for, shared, source, &gets).await;
    // The end: no new gets, and the chaos thread brings Valkey back (if down) and ends.
    stop.store(true, Relaxed);
    shared.stop_chaos.store(true, Relaxed);
    let ran_for = shared.t0.elapsed();

    // Every get finishes on its own: each is bounded by GET_DEADLINE.
    let mut per_store: Vec<Tally> = (0..nodes.len()).map(|_| Tally::default()).collect();
    let mut worker_panics = 0;
    for (s, task) in workers {
        match task.await {
            Ok(tally) => per_store[s].add(&tally),
            Err(_) => worker_panics += 1,
        }
    }
    let settled = settle(nodes).await;
    stop_watch.store(true, Relaxed);
    let troubled = watcher.await.unwrap_or_default();
    Run {
        ran_for,
        per_store,
        worker_panics,
        settled,
        stats: nodes.iter().map(|n| n.table.stats()).collect(),
        troubled,
    }
}

/// Sleeps through the run, with a line on stderr every 10 s.
pub(crate) async fn progress(
    run_for: Duration,
    shared: &Shared,
    source: &Source,
    gets: &AtomicU64,
) {
    let end = shared.t0 + run_for;
    loop {
        let now = Instant::now();
        if now >= end {
            return;
        }
        tokio::time::sleep((end - now).min(Duration::from_secs(10))).await;
        eprintln!(
            "soak: {:>5.1}s  gets {:>10}  source reads {:>7}  valkey restarts {}",
            shared.t0.elapsed().as_secs_f64(),
            gets.load(Relaxed),
            source.reads_so_far(),
            shared.restarts.load(Relaxed),
        );
    }
}

/// Waits until no table has a flight left, up to [`SETTLE`]; `false` if one is still there.
pub(crate) async fn settle(nodes: &[Node]) -> bool {
    let until = Instant::now() + SETTLE;
    loop {
        if nodes.iter().all(|n| n.table.stats().in_flight == 0) {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
