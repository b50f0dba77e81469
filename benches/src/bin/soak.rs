//! The soak: several stores (4 by default, standing in for 4 processes) share one embedded Valkey
//! and one table of hot keys with a short ttl, while random faults run for a minute: Valkey killed
//! and restarted empty, loader errors, loader panics, slow loads (a few outliving the regeneration
//! lock, a few cut off by the load timeout). At the end it checks that no waiter hung, that nothing
//! panicked outside the loader, that every flight landed (`in_flight == 0`), that every answer was
//! for the key asked, and that source reads per key per expiry window stayed at one — except where
//! a close pair of reads is explained by a failed load, a lock that expired mid-rebuild, a
//! fenced-out write or a Valkey outage; each explanation is counted and printed, and a pair that
//! none explains fails the soak. It prints the figures and exits 0 only if every check held.
//!
//! ```sh
//! cargo run --release -p echostore-benches --bin soak -- --seconds 60
//! ```
//!
//! It is not part of CI's default run. `docs/soak.md` describes the run and says exactly what
//! counts as an explained pair.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use echostore::{Error, Fetched, LoserPolicy, Origin, Store, Table, TableStats};
use embedded_valkey::EmbeddedValkey;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

// ---------------------------------------------------------------------------------------------
// Settings. The command line sets the load; these set the library and the faults.
// ---------------------------------------------------------------------------------------------

/// The one table name every store opens, so that the stores share its keys and locks on Valkey.
const TABLE: &str = "soak";
/// Stale copies stay on Valkey this long past their ttl (the serve-stale store uses them).
const STALE_FOR: Duration = Duration::from_secs(1);
/// `PX` of the regeneration lock. Shorter than [`LOAD_TIMEOUT`] on purpose: were it longer, every
/// load slow enough to outlive its lock would be cut off first, and no lock could ever expire
/// mid-rebuild.
const LOCK_TTL: Duration = Duration::from_millis(600);
/// Loads running longer are cut off: their waiters get `LoadTimeout`, the lock is released.
const LOAD_TIMEOUT: Duration = Duration::from_millis(1500);
/// The polling losers' pace and patience.
const POLL_EVERY: Duration = Duration::from_millis(5);
const POLL_UP_TO: Duration = Duration::from_secs(3);
/// Valkey calls and the circuit breaker: short, so that an outage is noticed and left quickly.
const VALKEY_TIMEOUT: Duration = Duration::from_millis(500);
const BREAKER_COOLDOWN: Duration = Duration::from_millis(100);
/// A get that has not answered after this long is a hung waiter. Every wait inside the library is
/// bounded far below it (poll 3 s, load 1.5 s, Valkey calls 0.5 s each).
const GET_DEADLINE: Duration = Duration::from_secs(10);
/// After the workers stop: how long the last flights have to land.
const SETTLE: Duration = Duration::from_secs(10);
/// How often each store's breaker and Valkey error counter are sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(2);
/// Share of gets that go to the hot tenth of the keys.
const HOT_SHARE: f64 = 0.8;
/// What the `Default` loser policy answers; it is no key's value.
const PLACEHOLDER: Payload = (u64::MAX, 0, 0);

/// A value: (key, version, store that loaded it). The version counts source reads, so that two
/// answers can be told apart; the key lets every answer be checked against the key asked.
type Payload = (u64, u64, u64);

/// Fault odds per source read.
const P_ERROR: f64 = 0.02;
const P_PANIC: f64 = 0.005;
const P_SLOW: f64 = 0.02;
/// Of the slow reads: the share that outlives the lock (but not the load timeout), and the share
/// that outlives the load timeout. The rest stay well inside the lock.
const SLOW_PAST_LOCK: f64 = 0.2;
const SLOW_PAST_TIMEOUT: f64 = 0.05;

/// The check's tolerances (see docs/soak.md). A value loaded at `end` is fresh on Valkey until
/// `end + ttl` minus at most 1 ms (whole unix milliseconds): pairs closer than `ttl - EXPIRY_SLACK`
/// are close.
const EXPIRY_SLACK: Duration = Duration::from_millis(5);
/// The lock is taken a little before the loader starts: a takeover may start this much before
/// `start + LOCK_TTL` of the read it took over from.
const LOCK_SLACK: Duration = Duration::from_millis(50);
/// Each window in which a store could not use Valkey is widened by this much on both sides: a
/// degraded read starts an instant after the failed call that made it degraded.
const WINDOW_MARGIN: Duration = Duration::from_millis(50);

// ---------------------------------------------------------------------------------------------
// The command line.
// ---------------------------------------------------------------------------------------------

const USAGE: &str = "usage: soak [--seconds 60] [--keys 1000] [--stores 4] [--ttl 200ms] \
                     [--workers 64] [--seed N] [--pause 1ms] [--dump FILE]

  --seconds N   how long the faults run (fractions allowed)
  --keys N      keys in the table; the hottest tenth gets 80% of the gets
  --stores N    independent stores (as processes) sharing the Valkey
  --ttl D       the table's ttl, no jitter (D: 250us, 200ms, 1.5s, 2m)
  --workers N   tasks per store, each looping get after get
  --seed N      seeds the faults, the chaos and the key choice (default: random, printed)
  --pause D     each worker's pause between two gets (0: only yield)
  --dump FILE   also write every source read to FILE as CSV, for a closer look";

/// What to run.
#[derive(Debug, Clone)]
struct Args {
    run_for: Duration,
    keys: u64,
    stores: usize,
    ttl: Duration,
    workers: usize,
    seed: u64,
    pause: Duration,
    dump: Option<String>,
}

/// `Ok(None)` asks for the usage text.
fn parse_args(mut argv: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut args = Args {
        run_for: Duration::from_secs(60),
        keys: 1000,
        stores: 4,
        ttl: Duration::from_millis(200),
        workers: 64,
        seed: rand::random(),
        pause: Duration::from_millis(1),
        dump: None,
    };
    while let Some(flag) = argv.next() {
        if flag == "--help" || flag == "-h" {
            return Ok(None);
        }
        let (name, value) = match flag.split_once('=') {
            Some((name, value)) => (name.to_owned(), value.to_owned()),
            None => {
                let value = argv.next().ok_or_else(|| format!("{flag} needs a value"))?;
                (flag, value)
            }
        };
        match name.as_str() {
            "--seconds" => {
                let secs: f64 = number(&name, &value)?;
                args.run_for = Duration::try_from_secs_f64(secs)
                    .map_err(|e| format!("--seconds {value}: {e}"))?;
            }
            "--keys" => args.keys = number(&name, &value)?,
            "--stores" => args.stores = number(&name, &value)?,
            "--ttl" => args.ttl = duration(&name, &value)?,
            "--workers" => args.workers = number(&name, &value)?,
            "--seed" => args.seed = number(&name, &value)?,
            "--pause" => args.pause = duration(&name, &value)?,
            "--dump" => args.dump = Some(value),
            _ => return Err(format!("unknown flag {name}")),
        }
    }
    if args.keys == 0 || args.stores == 0 || args.workers == 0 {
        return Err("--keys, --stores and --workers must be at least 1".into());
    }
    if args.ttl < Duration::from_millis(10) {
        return Err("--ttl must be at least 10ms (the check's slack is 5ms)".into());
    }
    Ok(Some(args))
}

fn number<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{name}: {value:?} is not a valid number"))
}

/// `250us`, `200ms`, `1.5s`, `2m`; a unit is required, except for a plain `0`.
fn duration(name: &str, value: &str) -> Result<Duration, String> {
    if value == "0" {
        return Ok(Duration::ZERO);
    }
    let split = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{name}: {value:?} needs a unit (us, ms, s, m)"))?;
    let (amount, unit) = value.split_at(split);
    let amount: f64 = number(name, amount)?;
    let secs = match unit {
        "us" => amount / 1e6,
        "ms" => amount / 1e3,
        "s" => amount,
        "m" => amount * 60.0,
        _ => return Err(format!("{name}: unknown unit {unit:?} (us, ms, s, m)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{name} {value}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// The source: the loader of every store. It logs each read and injects the faults.
// ---------------------------------------------------------------------------------------------

/// What a source read was told to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    /// A quick, healthy read (0–2 ms).
    None,
    /// Fails with an error after 0–20 ms.
    Error,
    /// Panics after 0–20 ms.
    Panic,
    /// 20–250 ms: slow, but well inside the lock.
    Slow,
    /// 700–1300 ms: outlives the lock, finishes inside the load timeout.
    PastLock,
    /// 1.7–2.3 s: cut off by the load timeout at 1.5 s.
    PastTimeout,
}

impl Fault {
    const ALL: [Fault; 6] = [
        Fault::None,
        Fault::Error,
        Fault::Panic,
        Fault::Slow,
        Fault::PastLock,
        Fault::PastTimeout,
    ];

    fn name(self) -> &'static str {
        match self {
            Fault::None => "healthy",
            Fault::Error => "error",
            Fault::Panic => "panic",
            Fault::Slow => "slow (inside the lock)",
            Fault::PastLock => "slow past lock_ttl",
            Fault::PastTimeout => "slow past load_timeout",
        }
    }
}

/// How a source read ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Returned a value.
    Loaded,
    /// Returned an error.
    Failed,
    /// Panicked.
    Panicked,
    /// Dropped unfinished: the load timeout cut it off.
    CutOff,
}

/// One source read, as the loader saw it; instants are offsets from the start of the run.
#[derive(Debug, Clone, Copy)]
struct Read {
    key: u64,
    store: usize,
    fault: Fault,
    start: Duration,
    end: Duration,
    outcome: Outcome,
}

/// The loader's error: an injected failure.
#[derive(Debug)]
struct InjectedError {
    key: u64,
}

impl std::fmt::Display for InjectedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "injected source error for key {}", self.key)
    }
}

impl std::error::Error for InjectedError {}

/// The message every injected panic starts with; the panic hook keeps those quiet.
const INJECTED_PANIC: &str = "soak: injected loader panic";

/// The source of truth every store's loader reads.
struct Source {
    t0: Instant,
    faults: Mutex<StdRng>,
    reads: Mutex<Vec<Read>>,
    versions: AtomicU64,
}

impl Source {
    fn new(t0: Instant, seed: u64) -> Self {
        Source {
            t0,
            faults: Mutex::new(StdRng::seed_from_u64(seed)),
            reads: Mutex::new(Vec::new()),
            versions: AtomicU64::new(0),
        }
    }

    /// Draws the next read's fault and how long it takes before it ends (or is cut off).
    fn draw(&self) -> (Fault, Duration) {
        let mut rng = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
        let between =
            |rng: &mut StdRng, lo: u64, hi: u64| Duration::from_millis(rng.random_range(lo..=hi));
        let lock = LOCK_TTL.as_millis() as u64;
        let cut = LOAD_TIMEOUT.as_millis() as u64;
        let roll: f64 = rng.random();
        if roll < P_ERROR {
            (Fault::Error, between(&mut rng, 0, 20))
        } else if roll < P_ERROR + P_PANIC {
            (Fault::Panic, between(&mut rng, 0, 20))
        } else if roll < P_ERROR + P_PANIC + P_SLOW {
            let kind: f64 = rng.random();
            if kind < SLOW_PAST_TIMEOUT {
                (Fault::PastTimeout, between(&mut rng, cut + 200, cut + 800))
            } else if kind < SLOW_PAST_TIMEOUT + SLOW_PAST_LOCK {
                // Clear of both limits by 100+ ms, so the check can tell which side a read is on.
                (Fault::PastLock, between(&mut rng, lock + 100, cut - 200))
            } else {
                (Fault::Slow, between(&mut rng, 20, 250))
            }
        } else {
            (Fault::None, between(&mut rng, 0, 2))
        }
    }

    /// One source read of `key` by `store`'s loader.
    async fn read(self: Arc<Self>, store: usize, key: u64) -> Result<Payload, InjectedError> {
        let (fault, takes) = self.draw();
        let mut log = ReadLog::begin(Arc::clone(&self), key, store, fault);
        if !takes.is_zero() {
            tokio::time::sleep(takes).await;
        }
        match fault {
            Fault::Error => {
                log.finish(Outcome::Failed);
                Err(InjectedError { key })
            }
            Fault::Panic => {
                log.finish(Outcome::Panicked);
                panic!("{INJECTED_PANIC} (key {key}, store {store})");
            }
            _ => {
                let version = self.versions.fetch_add(1, Relaxed);
                log.finish(Outcome::Loaded);
                Ok((key, version, store as u64))
            }
        }
    }

    fn reads_so_far(&self) -> usize {
        self.reads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn take_reads(&self) -> Vec<Read> {
        std::mem::take(&mut *self.reads.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Logs one read when dropped. A read that did not [`finish`](ReadLog::finish) was dropped by the
/// library mid-load, which only the load timeout does: it is logged as cut off, at that instant.
struct ReadLog {
    source: Arc<Source>,
    read: Read,
}

impl ReadLog {
    fn begin(source: Arc<Source>, key: u64, store: usize, fault: Fault) -> Self {
        let start = source.t0.elapsed();
        ReadLog {
            source,
            read: Read {
                key,
                store,
                fault,
                start,
                end: Duration::ZERO,
                outcome: Outcome::CutOff,
            },
        }
    }

    fn finish(&mut self, outcome: Outcome) {
        self.read.end = self.source.t0.elapsed();
        self.read.outcome = outcome;
    }
}

impl Drop for ReadLog {
    fn drop(&mut self) {
        if self.read.outcome == Outcome::CutOff {
            self.read.end = self.source.t0.elapsed();
        }
        self.source
            .reads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(self.read);
    }
}

// ---------------------------------------------------------------------------------------------
// Panics: the injected ones are expected (the library turns them into `LoaderPanicked`) and kept
// quiet; any other one is counted and fails the soak.
// ---------------------------------------------------------------------------------------------

static INJECTED_PANICS: AtomicU64 = AtomicU64::new(0);
static OTHER_PANICS: AtomicU64 = AtomicU64::new(0);

fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
        if message.is_some_and(|m| m.starts_with(INJECTED_PANIC)) {
            INJECTED_PANICS.fetch_add(1, Relaxed);
        } else {
            OTHER_PANICS.fetch_add(1, Relaxed);
            default(info);
        }
    }));
}

// ---------------------------------------------------------------------------------------------
// Chaos: a plain thread (restarting Valkey blocks) that kills Valkey every 3–8 s, keeps it down
// 0.5–2 s and brings it back empty on the same port.
// ---------------------------------------------------------------------------------------------

/// One time Valkey was down: from the kill to the moment the new, empty server answered PING
/// (`None`: it never came back).
#[derive(Debug, Clone, Copy)]
struct Outage {
    down: Duration,
    up: Option<Duration>,
}

/// What the chaos thread did.
#[derive(Debug, Default)]
struct Chaos {
    outages: Vec<Outage>,
    /// Why Valkey could not be brought back, if it could not.
    failure: Option<String>,
}

/// What the chaos thread and the soak share.
struct Shared {
    t0: Instant,
    /// Set when the run is over: the chaos thread brings Valkey back (if down) and ends.
    stop_chaos: AtomicBool,
    restarts: AtomicU64,
}

fn run_chaos(valkey: &mut EmbeddedValkey, shared: &Shared, seed: u64) -> Chaos {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xC4A0_5C4A_05C4_A05C);
    let mut done = Chaos::default();
    loop {
        let calm = Duration::from_millis(rng.random_range(3000..=8000));
        if !nap(calm, &shared.stop_chaos) {
            return done;
        }
        let down_for = Duration::from_millis(rng.random_range(500..=2000));
        let down = shared.t0.elapsed();
        valkey.stop();
        // Cut short when the run ends; Valkey comes back either way.
        nap(down_for, &shared.stop_chaos);
        match bring_back(valkey) {
            Ok(()) => {
                shared.restarts.fetch_add(1, Relaxed);
                let up = Some(shared.t0.elapsed());
                done.outages.push(Outage { down, up });
            }
            Err(why) => {
                done.outages.push(Outage { down, up: None });
                done.failure = Some(why);
                return done;
            }
        }
    }
}

/// Sleeps `span` in short steps; `false` if the run ended meanwhile.
fn nap(span: Duration, stop: &AtomicBool) -> bool {
    let until = Instant::now() + span;
    while Instant::now() < until {
        if stop.load(Relaxed) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10).min(until - Instant::now()));
    }
    !stop.load(Relaxed)
}

/// `restart()`, a few times if need be.
fn bring_back(valkey: &mut EmbeddedValkey) -> Result<(), String> {
    let mut last = String::new();
    for _ in 0..5 {
        match valkey.restart() {
            Ok(()) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(last)
}

// ---------------------------------------------------------------------------------------------
// When could a store not use Valkey? Sampled from outside: its breaker open, or its Valkey error
// counter grown since the previous sample. Every degraded read counts an error just before it
// starts, so these windows hold every degraded read, whatever caused it (a chaos kill, or a call
// that timed out on a busy machine).
// ---------------------------------------------------------------------------------------------

/// A span of the run.
#[derive(Debug, Clone, Copy)]
struct Span {
    from: Duration,
    to: Duration,
}

/// Sorted, disjoint spans.
#[derive(Debug, Default)]
struct Windows(Vec<Span>);

impl Windows {
    /// Widens every span by `margin` on both sides, sorts and merges them.
    fn new(mut spans: Vec<Span>, margin: Duration) -> Self {
        spans.sort_by_key(|s| s.from);
        let mut merged: Vec<Span> = Vec::with_capacity(spans.len());
        for s in spans {
            let wide = Span {
                from: s.from.saturating_sub(margin),
                to: s.to.saturating_add(margin),
            };
            match merged.last_mut() {
                Some(last) if wide.from <= last.to => last.to = last.to.max(wide.to),
                _ => merged.push(wide),
            }
        }
        Windows(merged)
    }

    /// `true` if some window meets `[from, to]`.
    fn meets(&self, from: Duration, to: Duration) -> bool {
        let first_not_before = self.0.partition_point(|w| w.to < from);
        self.0.get(first_not_before).is_some_and(|w| w.from <= to)
    }

    /// Time covered, clipped to `[0, end]`.
    fn covered(&self, end: Duration) -> Duration {
        self.0
            .iter()
            .map(|w| w.to.min(end).saturating_sub(w.from))
            .sum()
    }
}

/// Per store, the raw spans in which it could not use Valkey.
async fn watch_valkey(nodes: Vec<Node>, t0: Instant, stop: Arc<AtomicBool>) -> Vec<Vec<Span>> {
    let mut spans = vec![Vec::<Span>::new(); nodes.len()];
    let mut errors_seen: Vec<u64> = nodes.iter().map(|n| n.table.stats().l2_errors).collect();
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut previous = t0.elapsed();
    while !stop.load(Relaxed) {
        tick.tick().await;
        let now = t0.elapsed();
        for (i, node) in nodes.iter().enumerate() {
            let errors = node.table.stats().l2_errors;
            if node.store.is_degraded() || errors != errors_seen[i] {
                // The trouble began after the previous sample at the earliest.
                push_span(
                    &mut spans[i],
                    Span {
                        from: previous,
                        to: now,
                    },
                );
            }
            errors_seen[i] = errors;
        }
        previous = now;
    }
    spans
}

fn push_span(spans: &mut Vec<Span>, span: Span) {
    match spans.last_mut() {
        Some(last) if span.from <= last.to => last.to = span.to,
        _ => spans.push(span),
    }
}

// ---------------------------------------------------------------------------------------------
// The stores and their workers.
// ---------------------------------------------------------------------------------------------

/// One store (one "process") and its table.
#[derive(Clone)]
struct Node {
    store: Store,
    table: Table<u64, Payload>,
    policy: &'static str,
}

/// Loser policies rotate over the stores: none of them may read the source while another store
/// holds the lock, so the invariant is the same for all; each adds its own answers (stale copies,
/// placeholders, `LockBusy`).
fn loser_policy(store: usize) -> (LoserPolicy<Payload>, &'static str) {
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

async fn start_nodes(args: &Args, url: &str, source: &Arc<Source>) -> Result<Vec<Node>, Error> {
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
struct Tally {
    gets: u64,
    hung: u64,
    wrong: u64,
    slowest: Duration,
    origins: BTreeMap<&'static str, u64>,
    errors: BTreeMap<&'static str, u64>,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
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

fn origin_name(origin: Origin) -> &'static str {
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

fn error_name(error: &Error) -> &'static str {
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
fn answer_fits(id: u64, fetched: &Fetched<Payload>) -> bool {
    match fetched.origin {
        Origin::Default => *fetched.value == PLACEHOLDER,
        _ => fetched.value.0 == id,
    }
}

/// How one worker picks its keys and paces itself.
#[derive(Debug, Clone, Copy)]
struct Plan {
    seed: u64,
    keys: u64,
    hot: u64,
    pause: Duration,
}

/// Gets keys until told to stop; a get that outlasts [`GET_DEADLINE`] is a hung waiter.
async fn worker(
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
struct Run {
    ran_for: Duration,
    per_store: Vec<Tally>,
    worker_panics: u64,
    settled: bool,
    stats: Vec<TableStats>,
    troubled: Vec<Vec<Span>>,
}

async fn run_load(nodes: &[Node], args: &Args, shared: &Shared, source: &Source) -> Run {
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
async fn progress(run_for: Duration, shared: &Shared, source: &Source, gets: &AtomicU64) {
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
async fn settle(nodes: &[Node]) -> bool {
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

// ---------------------------------------------------------------------------------------------
// The check: source reads per key per expiry window.
//
// A value loaded by a read that ended at `end` is fresh on Valkey (and in L1) until `end + ttl`
// (jitter is 0). So for every key, a later read that starts before an earlier read's
// `end + ttl - EXPIRY_SLACK` makes a *close pair*: either the later read should have found the
// value, or the later read started while the earlier one held the lock. Each close pair is put in
// the first bucket that explains it; docs/soak.md gives the reasoning for each.
// ---------------------------------------------------------------------------------------------

/// Why a close pair of reads is legitimate, or that it is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Bucket {
    /// The earlier read failed (error, panic, cut off): nothing was cached; the later one began
    /// after it ended.
    FailedLoad,
    /// The later read began, in another store, while the earlier one was still loading but past
    /// its lock's `PX`: the lock expired mid-rebuild and the later read took it over.
    LockExpired,
    /// The earlier read outlived its lock and then loaded: its fenced write was refused, so its
    /// value was stored nowhere; the later read began after it ended.
    FencedOut,
    /// Valkey could not coordinate: it was killed (and came back empty) between the two reads, or
    /// one of the two stores could not reach it. For two reads of one store: the earlier read
    /// took its lock on the killed server and ended after the new one was up (fenced out).
    Outage,
    /// Nothing explains it: the invariant failed.
    Unexplained,
}

impl Bucket {
    const ALL: [Bucket; 5] = [
        Bucket::FailedLoad,
        Bucket::LockExpired,
        Bucket::FencedOut,
        Bucket::Outage,
        Bucket::Unexplained,
    ];

    fn name(self) -> &'static str {
        match self {
            Bucket::FailedLoad => "(c) after a failed load",
            Bucket::LockExpired => "(b) lock expired mid-rebuild",
            Bucket::FencedOut => "(d) after a fenced-out write",
            Bucket::Outage => "(a) Valkey outage",
            Bucket::Unexplained => "UNEXPLAINED",
        }
    }
}

/// What the check needs besides the reads.
struct Check {
    ttl: Duration,
    /// Per store: when it could not use Valkey (widened by WINDOW_MARGIN).
    troubled: Vec<Windows>,
    /// When Valkey was down, kill to PING (widened by WINDOW_MARGIN).
    down: Windows,
    outages: Vec<Outage>,
}

impl Check {
    fn new(ttl: Duration, troubled: Vec<Vec<Span>>, outages: &[Outage], end: Duration) -> Self {
        let down = outages
            .iter()
            .map(|o| Span {
                from: o.down,
                to: o.up.unwrap_or(end.max(o.down)),
            })
            .collect();
        Check {
            ttl,
            troubled: troubled
                .into_iter()
                .map(|spans| Windows::new(spans, WINDOW_MARGIN))
                .collect(),
            down: Windows::new(down, WINDOW_MARGIN),
            outages: outages.to_vec(),
        }
    }

    /// `later` started before `earlier`'s value (had it been stored) expired.
    fn close(&self, earlier: &Read, later: &Read) -> bool {
        later.start + EXPIRY_SLACK < earlier.end + self.ttl
    }

    fn classify(&self, earlier: &Read, later: &Read) -> Bucket {
        let during = later.start < earlier.end;
        let same_store = earlier.store == later.store;
        let outlived_lock = earlier.end - earlier.start + LOCK_SLACK >= LOCK_TTL;
        if !during && earlier.outcome != Outcome::Loaded {
            return Bucket::FailedLoad;
        }
        if during && !same_store && later.start - earlier.start + LOCK_SLACK >= LOCK_TTL {
            return Bucket::LockExpired;
        }
        if !during && earlier.outcome == Outcome::Loaded && outlived_lock {
            return Bucket::FencedOut;
        }
        let outage = if same_store {
            // One store never runs two flights for a key, and keeps what it loads in L1; only a
            // load whose lock vanished with a killed Valkey is stored nowhere.
            !during && self.spanned_restart(earlier)
        } else {
            self.down.meets(earlier.start, later.start)
                || self.troubled[earlier.store].meets(earlier.start, later.start)
                || self.troubled[later.store].meets(later.start, later.start)
        };
        if outage {
            Bucket::Outage
        } else {
            Bucket::Unexplained
        }
    }

    /// The read loaded for longer than its lock lived, and its store could use Valkey all along:
    /// its fenced write must have been refused.
    fn outlived_lock_with_valkey_up(&self, read: &Read) -> bool {
        read.end - read.start >= LOCK_TTL + LOCK_SLACK
            && !self.down.meets(read.start, read.end + WINDOW_MARGIN)
            && !self.troubled[read.store].meets(read.start, read.end + WINDOW_MARGIN)
    }

    /// The read took its lock on a server that was then killed, and ended once the new one was up.
    fn spanned_restart(&self, read: &Read) -> bool {
        self.outages.iter().any(|o| {
            o.up.is_some_and(|up| {
                read.start <= o.down + WINDOW_MARGIN && read.end + WINDOW_MARGIN >= up
            })
        })
    }
}

/// The check's findings.
#[derive(Debug, Default)]
struct Findings {
    /// Close pairs by bucket: (all, within one store).
    pairs: BTreeMap<Bucket, (u64, u64)>,
    /// A few unexplained pairs, to show.
    examples: Vec<(Read, Read)>,
    /// Gaps from a read's end to the start of the key's next read, where the first read stored its
    /// value and nothing would have excused a close pair: the gaps the check has teeth on.
    watched: Gaps,
}

/// A summary of watched gaps.
#[derive(Debug, Default)]
struct Gaps {
    count: u64,
    /// Within 20 ms past `ttl`: reads that came right at the end of the window.
    at_the_edge: u64,
    tightest: Option<Duration>,
}

impl Gaps {
    fn add(&mut self, gap: Duration, ttl: Duration) {
        self.count += 1;
        if gap < ttl + Duration::from_millis(20) {
            self.at_the_edge += 1;
        }
        self.tightest = Some(self.tightest.map_or(gap, |g| g.min(gap)));
    }
}

/// How far back a read looks for earlier reads that could make a close pair with it; far longer
/// than any load plus the ttl.
const LOOKBACK: Duration = Duration::from_secs(30);

fn check_reads(mut reads: Vec<Read>, check: &Check) -> Findings {
    reads.sort_by_key(|r| (r.key, r.start));
    let mut found = Findings::default();
    for key_reads in reads.chunk_by(|a, b| a.key == b.key) {
        for (j, later) in key_reads.iter().enumerate() {
            if let Some(previous) = j.checked_sub(1).map(|i| &key_reads[i])
                && previous.outcome == Outcome::Loaded
                && check.classify(previous, later) == Bucket::Unexplained
            {
                found
                    .watched
                    .add(later.start.saturating_sub(previous.end), check.ttl);
            }
            for earlier in key_reads[..j].iter().rev() {
                if earlier.start + check.ttl + LOOKBACK < later.start {
                    break;
                }
                if !check.close(earlier, later) {
                    continue;
                }
                let bucket = check.classify(earlier, later);
                let counts = found.pairs.entry(bucket).or_default();
                counts.0 += 1;
                if earlier.store == later.store {
                    counts.1 += 1;
                }
                if bucket == Bucket::Unexplained && found.examples.len() < 10 {
                    found.examples.push((*earlier, *later));
                }
            }
        }
    }
    found
}

// ---------------------------------------------------------------------------------------------
// The report.
// ---------------------------------------------------------------------------------------------

fn row(label: &str, value: impl std::fmt::Display) {
    println!("  {label:<40} {value}");
}

fn list(map: &BTreeMap<&'static str, u64>) -> String {
    if map.is_empty() {
        return "none".into();
    }
    map.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Peak resident set size in KiB (`VmHWM`), if /proc says.
fn max_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Every counter of a [`TableStats`], by name.
fn counters(s: &TableStats) -> [(&'static str, u64); 22] {
    [
        ("l1_hits", s.l1_hits),
        ("l2_hits", s.l2_hits),
        ("source_reads", s.source_reads),
        ("coalesced", s.coalesced),
        ("lock_won", s.lock_won),
        ("lock_lost", s.lock_lost),
        ("stale_served", s.stale_served),
        ("defaults_served", s.defaults_served),
        ("failed_fast", s.failed_fast),
        ("poll_waits", s.poll_waits),
        ("released", s.released),
        ("release_skipped", s.release_skipped),
        ("fenced_write_skipped", s.fenced_write_skipped),
        ("errors", s.errors),
        ("l2_errors", s.l2_errors),
        ("decode_errors", s.decode_errors),
        ("load_timeouts", s.load_timeouts),
        ("fail_safe_served", s.fail_safe_served),
        ("soft_timeouts", s.soft_timeouts),
        ("owner_restarts", s.owner_restarts),
        ("in_flight (gauge)", s.in_flight),
        ("l1_len (gauge)", s.l1_len),
    ]
}

fn sum_of(stats: &[TableStats], name: &str) -> u64 {
    stats
        .iter()
        .flat_map(|s| counters(s).into_iter())
        .filter(|(n, _)| *n == name)
        .map(|(_, v)| v)
        .sum()
}

fn print_stats(stats: &[TableStats]) {
    let mut header = format!("  {:<24}", "TableStats");
    for i in 0..stats.len() {
        header.push_str(&format!(" {:>12}", format!("store {i}")));
    }
    header.push_str(&format!(" {:>12}", "sum"));
    println!("{header}");
    let per_store: Vec<_> = stats.iter().map(counters).collect();
    for (k, (name, _)) in counters(&TableStats::default()).iter().enumerate() {
        let mut line = format!("  {name:<24}");
        let mut sum = 0;
        for c in &per_store {
            line.push_str(&format!(" {:>12}", c[k].1));
            sum += c[k].1;
        }
        line.push_str(&format!(" {sum:>12}"));
        println!("{line}");
    }
}

/// Everything the verdict rests on, each `true` when it held.
struct Verdict(Vec<(String, bool)>);

impl Verdict {
    fn passed(&self) -> bool {
        self.0.iter().all(|(_, held)| *held)
    }
}

/// Prints the figures; returns the verdict.
fn report(
    args: &Args,
    nodes: &[Node],
    run: &Run,
    chaos: &Chaos,
    reads: &[Read],
    check: &Check,
    found: &Findings,
) -> Verdict {
    let mut total = Tally::default();
    for t in &run.per_store {
        total.add(t);
    }
    let reads_in_stats = sum_of(&run.stats, "source_reads");

    println!();
    println!("== the run");
    row("duration", secs(run.ran_for));
    row(
        "stores × workers",
        format!(
            "{} × {} (pause {})",
            args.stores,
            args.workers,
            ms(args.pause)
        ),
    );
    row(
        "keys (hot)",
        format!(
            "{} ({} get {:.0}%)",
            args.keys,
            (args.keys / 10).max(1),
            HOT_SHARE * 100.0
        ),
    );
    row(
        "ttl, jitter, stale_for",
        format!("{}, 0, {}", ms(args.ttl), ms(STALE_FOR)),
    );
    row(
        "lock_ttl, load_timeout",
        format!("{}, {}", ms(LOCK_TTL), ms(LOAD_TIMEOUT)),
    );
    row(
        "valkey_timeout, breaker_cooldown",
        format!("{}, {}", ms(VALKEY_TIMEOUT), ms(BREAKER_COOLDOWN)),
    );
    row("seed", args.seed);
    for (i, node) in nodes.iter().enumerate() {
        row(
            &format!("store {i} losers"),
            format!("{} ({} gets)", node.policy, run.per_store[i].gets),
        );
    }

    println!("== gets");
    row("gets", total.gets);
    row(
        "gets/s",
        format!("{:.0}", total.gets as f64 / run.ran_for.as_secs_f64()),
    );
    row("answers by origin", list(&total.origins));
    row("errors by kind", list(&total.errors));
    row("slowest get", ms(total.slowest));
    row("hung waiters (get > 10 s)", total.hung);
    row("wrong answers (another key's value)", total.wrong);

    println!("== the source");
    row(
        "source reads (logged / TableStats)",
        format!("{} / {}", reads.len(), reads_in_stats),
    );
    let mut by_fault: BTreeMap<Fault, u64> = BTreeMap::new();
    for r in reads {
        *by_fault.entry(r.fault).or_default() += 1;
    }
    for fault in Fault::ALL {
        row(
            &format!("  {}", fault.name()),
            by_fault.get(&fault).copied().unwrap_or(0),
        );
    }
    let count = |o: Outcome| reads.iter().filter(|r| r.outcome == o).count();
    row(
        "outcomes",
        format!(
            "loaded {}, failed {}, panicked {}, cut off {}",
            count(Outcome::Loaded),
            count(Outcome::Failed),
            count(Outcome::Panicked),
            count(Outcome::CutOff)
        ),
    );
    row(
        "injected panics seen by the hook",
        INJECTED_PANICS.load(Relaxed),
    );

    println!("== chaos");
    row("Valkey restarts", chaos.outages.len());
    let down: Duration = chaos
        .outages
        .iter()
        .map(|o| o.up.unwrap_or(run.ran_for).saturating_sub(o.down))
        .sum();
    row("Valkey down, in all", secs(down));
    if let Some(why) = &chaos.failure {
        row("Valkey could not be restarted", why);
    }
    for (i, w) in check.troubled.iter().enumerate() {
        row(
            &format!("store {i} could not use Valkey"),
            format!(
                "{} windows, {} with the ±{} margin ({:.0}% of the run)",
                w.0.len(),
                secs(w.covered(run.ran_for)),
                ms(WINDOW_MARGIN),
                100.0 * w.covered(run.ran_for).as_secs_f64() / run.ran_for.as_secs_f64()
            ),
        );
    }

    println!("== source reads per key per expiry window");
    let pairs = |b: Bucket| found.pairs.get(&b).copied().unwrap_or((0, 0));
    let close = found
        .pairs
        .values()
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    row(
        "close pairs (within one store)",
        format!("{} ({})", close.0, close.1),
    );
    for bucket in Bucket::ALL {
        let (all, same) = pairs(bucket);
        row(&format!("  {}", bucket.name()), format!("{all} ({same})"));
    }
    let outlived_up = reads
        .iter()
        .filter(|r| r.outcome == Outcome::Loaded && check.outlived_lock_with_valkey_up(r))
        .count();
    row(
        "loads past lock_ttl, Valkey up / fenced_write_skipped",
        format!(
            "{outlived_up} / {}",
            sum_of(&run.stats, "fenced_write_skipped")
        ),
    );
    row(
        "watched gaps (stored load -> next read)",
        found.watched.count,
    );
    row("  of which within ttl + 20 ms", found.watched.at_the_edge);
    row(
        "  tightest",
        found.watched.tightest.map_or("none".into(), ms),
    );
    for (earlier, later) in &found.examples {
        println!("  unexplained: {earlier:?}\n           then {later:?}");
    }

    println!("== the end");
    let in_flight: Vec<u64> = run.stats.iter().map(|s| s.in_flight).collect();
    row(
        "in_flight per table after settling",
        format!("{in_flight:?}"),
    );
    row("panics outside the loader", OTHER_PANICS.load(Relaxed));
    row("worker tasks that died", run.worker_panics);
    row(
        "max RSS (VmHWM)",
        max_rss_kib().map_or("unknown".into(), |k| {
            format!("{:.1} MiB", k as f64 / 1024.0)
        }),
    );
    println!();
    print_stats(&run.stats);

    Verdict(vec![
        ("no hung waiter".into(), total.hung == 0),
        (
            "no unexplained close pair".into(),
            pairs(Bucket::Unexplained).0 == 0,
        ),
        (
            "every table's in_flight is 0".into(),
            run.settled && in_flight.iter().all(|&n| n == 0),
        ),
        (
            "no panic outside the loader".into(),
            OTHER_PANICS.load(Relaxed) == 0 && run.worker_panics == 0,
        ),
        ("every answer is its key's".into(), total.wrong == 0),
        (
            "every source read was logged".into(),
            reads.len() as u64 == reads_in_stats,
        ),
        (
            "Valkey came back after every kill".into(),
            chaos.failure.is_none(),
        ),
    ])
}

// ---------------------------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------------------------

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(why) => {
            eprintln!("soak: {why}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    install_panic_hook();
    match soak(&args) {
        Ok(verdict) => {
            println!();
            for (what, held) in &verdict.0 {
                println!("  [{}] {what}", if *held { "ok" } else { "FAILED" });
            }
            if verdict.passed() {
                println!("soak: PASS");
                ExitCode::SUCCESS
            } else {
                println!("soak: FAIL");
                ExitCode::FAILURE
            }
        }
        Err(why) => {
            eprintln!("soak: {why}");
            ExitCode::from(2)
        }
    }
}

/// Sets up, runs and checks; `Err` only when the soak could not run at all.
fn soak(args: &Args) -> Result<Verdict, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    // Dropped last (at the end of this function, also on an early return): kills the server.
    let mut valkey = EmbeddedValkey::start().map_err(|e| format!("cannot start Valkey: {e}"))?;
    let url = valkey.url();
    let t0 = Instant::now();
    let source = Arc::new(Source::new(t0, args.seed));
    let nodes = runtime
        .block_on(start_nodes(args, &url, &source))
        .map_err(|e| format!("cannot start the stores: {e}"))?;
    let shared = Shared {
        t0,
        stop_chaos: AtomicBool::new(false),
        restarts: AtomicU64::new(0),
    };
    eprintln!(
        "soak: {} stores × {} workers, {} keys, ttl {}, seed {}, {} s, Valkey at {url}",
        args.stores,
        args.workers,
        args.keys,
        ms(args.ttl),
        args.seed,
        args.run_for.as_secs_f64()
    );
    let (run, chaos) = std::thread::scope(|scope| {
        let chaos = scope.spawn(|| run_chaos(&mut valkey, &shared, args.seed));
        // Ends the chaos thread even if the run below panics, so that the scope can join it.
        let _stop = StopOnDrop(&shared.stop_chaos);
        let run = runtime.block_on(run_load(&nodes, args, &shared, &source));
        let chaos = chaos.join().unwrap_or_else(|_| Chaos {
            failure: Some("the chaos thread panicked".into()),
            ..Chaos::default()
        });
        (run, chaos)
    });
    let reads = source.take_reads();
    if let Some(path) = &args.dump {
        dump(path, &reads, &run, &chaos).map_err(|e| format!("cannot write {path}: {e}"))?;
    }
    let check = Check::new(args.ttl, run.troubled.clone(), &chaos.outages, run.ran_for);
    let found = check_reads(reads.clone(), &check);
    Ok(report(args, &nodes, &run, &chaos, &reads, &check, &found))
}

/// Sets the flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Relaxed);
    }
}

/// Writes the reads (and the windows the check used) as CSV: one line per read, then one per
/// window. Instants are microseconds since the start of the run.
fn dump(path: &str, reads: &[Read], run: &Run, chaos: &Chaos) -> std::io::Result<()> {
    use std::io::Write;
    let us = |d: Duration| d.as_micros();
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(out, "kind,key_or_store,store,start_us,end_us,outcome,fault")?;
    for r in reads {
        writeln!(
            out,
            "read,{},{},{},{},{:?},{:?}",
            r.key,
            r.store,
            us(r.start),
            us(r.end),
            r.outcome,
            r.fault
        )?;
    }
    for o in &chaos.outages {
        let up = o.up.map_or(String::from("never"), |u| us(u).to_string());
        writeln!(out, "valkey_down,,,{},{up},,", us(o.down))?;
    }
    for (store, spans) in run.troubled.iter().enumerate() {
        for s in spans {
            writeln!(out, "troubled,,{store},{},{},,", us(s.from), us(s.to))?;
        }
    }
    out.flush()
}
