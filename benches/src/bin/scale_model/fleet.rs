//! The fleet as a discrete-event simulation: nodes with an L1 each, a sharded Valkey whose shards
//! serve one operation at a time, a source behind a regeneration lock, and the invalidation
//! pushes of one tracking mode. Time is simulated (nanoseconds on a heap of events) and every
//! random choice comes from one seeded generator, so a run is a function of its [`Fleet`].
//!
//! What a node does on a read: an L1 hit costs Valkey nothing; a miss is a `GET` on the key's
//! shard; a `GET` that finds no fresh value takes the lock (`SET NX`), and only its winner reads
//! the source; the losers wait for the winner's write, whose push wakes them, and read it again.
//! A write (`SET`) and a winner's fill are pushed to every node (BCAST) or to the nodes that read
//! the key since its last push (default mode). A node's L1 copy is retired by the push; the
//! simulation applies it at the write (lag is measured, not acted on).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A tracking mode, as the bench names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Mode {
    Bcast,
    Default,
}

impl Mode {
    pub(crate) const ALL: [Mode; 2] = [Mode::Bcast, Mode::Default];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Bcast => "bcast",
            Mode::Default => "default",
        }
    }
}

/// What one shard's operations cost, in µs of server time (from the bench, [`crate::calibrate`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Costs {
    /// A write (`SET`) with no tracking connection to tell.
    pub(crate) write_us: f64,
    /// What a shard spends per second whatever it serves.
    pub(crate) idle_us_per_s: f64,
    /// Each push a write sends, per mode (for BCAST: each key a push carries).
    pub(crate) push_us: [f64; 2],
    /// BCAST: each push message, to one client at the end of an event-loop turn, whatever
    /// number of keys it carries.
    pub(crate) message_us: f64,
    /// A read (`GET`, a lock `SET NX`, a `DEL`).
    pub(crate) read_us: f64,
    /// A push message's bytes on the wire besides its keys, and each key's.
    pub(crate) message_bytes: f64,
    pub(crate) key_bytes: f64,
    /// Lag from the write's reply to the first recipient's push, and per recipient after it (µs).
    pub(crate) lag0_us: [f64; 2],
    pub(crate) lag_per_recipient_us: [f64; 2],
}

/// One fleet to simulate.
#[derive(Debug, Clone)]
pub(crate) struct Fleet {
    pub(crate) mode: Mode,
    pub(crate) nodes: usize,
    pub(crate) keys: u32,
    /// Zipf exponent of reads and writes (0: uniform).
    pub(crate) zipf: f64,
    pub(crate) reads_per_node: f64,
    pub(crate) writes_per_s: f64,
    /// A value's life in Valkey (and so in L1); `f64::INFINITY` for none.
    pub(crate) ttl_s: f64,
    pub(crate) load_s: f64,
    pub(crate) shards: usize,
    pub(crate) seconds: f64,
    /// Keys each node holds at the start (read and tracked), and refills at once after a push:
    /// the bench's workload. 0 for a fleet that reads by Zipf only.
    pub(crate) held: u32,
    /// Writes arrive on ticks of this many ns (the bench's pacing), or 0 for a Poisson stream.
    pub(crate) tick_ns: u64,
    pub(crate) seed: u64,
}

/// What a run predicts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outcome {
    pub(crate) app_writes: u64,
    /// App writes and the winners' fills: every write that pushes.
    pub(crate) writes: u64,
    pub(crate) reads: u64,
    pub(crate) l1_hits: u64,
    pub(crate) source_reads: u64,
    /// Reads that found no fresh value in Valkey: what would read the source without the lock.
    pub(crate) expired_misses: u64,
    /// The most source reads any key had within one expiry (the invariant says 1).
    pub(crate) max_reads_per_expiry: u32,
    /// Expiries that a source read ended.
    pub(crate) expiries_loaded: u64,
    pub(crate) ops_per_shard: Vec<u64>,
    /// Keys pushed (one per recipient per write).
    pub(crate) pushes_per_shard: Vec<u64>,
    /// Push messages: BCAST sends one per client per event-loop turn with every key of the turn.
    pub(crate) messages_per_shard: Vec<u64>,
    pub(crate) busy_us_per_shard: Vec<f64>,
    pub(crate) lag_p50_us: f64,
    pub(crate) lag_p99_us: f64,
    /// Keys the default mode's tracking table held at the end, over all shards.
    pub(crate) tracked_keys: u64,
    pub(crate) seconds: f64,
}

impl Outcome {
    /// Nothing counted yet, with a counter per shard of `fleet`.
    fn empty(fleet: &Fleet) -> Self {
        Outcome {
            ops_per_shard: vec![0; fleet.shards],
            pushes_per_shard: vec![0; fleet.shards],
            messages_per_shard: vec![0; fleet.shards],
            busy_us_per_shard: vec![0.0; fleet.shards],
            seconds: fleet.seconds,
            ..Outcome::default()
        }
    }
}

impl Outcome {
    pub(crate) fn pushes(&self) -> u64 {
        self.pushes_per_shard.iter().sum()
    }

    pub(crate) fn messages(&self) -> u64 {
        self.messages_per_shard.iter().sum()
    }

    /// Bytes pushed, over all shards.
    pub(crate) fn push_bytes(&self, c: &Costs) -> f64 {
        self.messages() as f64 * c.message_bytes + self.pushes() as f64 * c.key_bytes
    }

    pub(crate) fn busy_us(&self) -> f64 {
        self.busy_us_per_shard.iter().sum()
    }

    /// The busiest shard's share of one core.
    pub(crate) fn max_utilisation(&self) -> f64 {
        self.busy_us_per_shard.iter().copied().fold(0.0, f64::max) / (self.seconds * 1e6)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Read { node: u32 },
    Write,
    Loaded { key: u32 },
}

/// The cumulative distribution of a Zipf law over `keys` ranks, drawn from by binary search.
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(keys: u32, s: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(keys as usize);
        let mut sum = 0.0;
        for rank in 1..=keys {
            sum += 1.0 / f64::from(rank).powf(s);
            cdf.push(sum);
        }
        cdf.iter_mut().for_each(|c| *c /= sum);
        Zipf { cdf }
    }

    fn draw(&self, rng: &mut StdRng) -> u32 {
        let u: f64 = rng.random();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1) as u32
    }
}

/// A key's shard: a fixed scramble of the id, as a hash slot spreads names.
fn shard_of(key: u32, shards: usize) -> usize {
    ((u64::from(key).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33) % shards as u64) as usize
}

/// Exponential gap of a Poisson process of `rate` per second, in ns.
fn gap(rng: &mut StdRng, rate: f64) -> u64 {
    let u: f64 = rng.random_range(f64::EPSILON..1.0);
    (-u.ln() / rate * 1e9) as u64
}

struct Sim<'a> {
    f: &'a Fleet,
    c: &'a Costs,
    m: usize,
    now: u64,
    rng: StdRng,
    /// Per key: fresh until (ns, 0 = absent), last write (ns), a load in flight, its waiters.
    fresh_until: Vec<u64>,
    last_write: Vec<u64>,
    loading: Vec<bool>,
    reads_this_expiry: Vec<u8>,
    waiters: HashMap<u32, Vec<u32>>,
    /// Default mode: who read each key since its last push.
    holders: HashMap<u32, Vec<u32>>,
    /// Per node: key → (loaded at, valid until).
    l1: Vec<HashMap<u32, (u64, u64)>>,
    held: Vec<Vec<u32>>,
    busy_until: Vec<u64>,
    /// Per shard: the end of the event-loop turn whose BCAST pushes are still being gathered
    /// (a write that arrives while the shard is busy joins them).
    turn_until: Vec<u64>,
    lag: Histogram<u64>,
    heap: BinaryHeap<Reverse<(u64, u64, Event)>>,
    seq: u64,
    out: Outcome,
}

impl Sim<'_> {
    /// One operation on a shard: it queues behind the shard's earlier ones. Returns when the
    /// operation starts (ns).
    fn serve(&mut self, shard: usize, service_us: f64) -> u64 {
        let start = self.now.max(self.busy_until[shard]);
        self.busy_until[shard] = start + (service_us * 1e3) as u64;
        self.out.ops_per_shard[shard] += 1;
        self.out.busy_us_per_shard[shard] += service_us;
        start
    }

    fn read_op(&mut self, key: u32) {
        let shard = shard_of(key, self.f.shards);
        self.serve(shard, self.c.read_us);
    }

    /// Whether `node` has a current copy of `key`.
    fn l1_hit(&self, node: u32, key: u32) -> bool {
        self.l1[node as usize]
            .get(&key)
            .is_some_and(|&(at, until)| at >= self.last_write[key as usize] && self.now < until)
    }

    /// `node` reads `key` from Valkey and keeps what it found.
    fn fill(&mut self, node: u32, key: u32) {
        self.read_op(key);
        let until = self.fresh_until[key as usize];
        self.l1[node as usize].insert(key, (self.now.max(1), until));
        if self.f.mode == Mode::Default {
            let h = self.holders.entry(key).or_default();
            if !h.contains(&node) {
                h.push(node);
            }
        }
    }

    fn read(&mut self, node: u32, key: u32) {
        self.out.reads += 1;
        if self.l1_hit(node, key) {
            self.out.l1_hits += 1;
            return;
        }
        let k = key as usize;
        if self.now < self.fresh_until[k] {
            self.fill(node, key);
            return;
        }
        // The miss's GET found nothing fresh (default mode tracks the key all the same).
        self.read_op(key);
        self.out.expired_misses += 1;
        if self.f.mode == Mode::Default {
            let h = self.holders.entry(key).or_default();
            if !h.contains(&node) {
                h.push(node);
            }
        }
        self.read_op(key); // SET lock NX
        if self.loading[k] {
            self.waiters.entry(key).or_default().push(node);
            return;
        }
        self.loading[k] = true;
        self.out.source_reads += 1;
        self.reads_this_expiry[k] = self.reads_this_expiry[k].saturating_add(1);
        self.out.max_reads_per_expiry = self
            .out
            .max_reads_per_expiry
            .max(u32::from(self.reads_this_expiry[k]));
        let at = self.now + (self.f.load_s * 1e9) as u64;
        self.push_event(at, Event::Loaded { key });
        self.waiters.entry(key).or_default().push(node);
    }

    /// A `SET` of `key` and its pushes.
    fn write(&mut self, key: u32) {
        let k = key as usize;
        self.out.writes += 1;
        self.last_write[k] = self.now;
        self.fresh_until[k] = if self.f.ttl_s.is_finite() {
            self.now + (self.f.ttl_s * 1e9) as u64
        } else {
            u64::MAX
        };
        let shard = shard_of(key, self.f.shards);
        let recipients: Vec<u32> = match self.f.mode {
            Mode::Bcast => (0..self.f.nodes as u32).collect(),
            Mode::Default => self.holders.remove(&key).unwrap_or_default(),
        };
        let fanout = recipients.len();
        // BCAST: a write that finds its shard busy is served in the turn gathering pushes, which
        // sends each client one message for all its keys; one that finds it idle opens a turn.
        let new_turn = self.f.mode == Mode::Default || self.now >= self.turn_until[shard];
        let messages = if new_turn { fanout } else { 0 };
        let message_us = if self.f.mode == Mode::Bcast {
            self.c.message_us
        } else {
            0.0
        };
        let service =
            self.c.write_us + fanout as f64 * self.c.push_us[self.m] + messages as f64 * message_us;
        let start = self.serve(shard, service);
        if new_turn {
            self.turn_until[shard] = self.busy_until[shard];
        }
        self.out.pushes_per_shard[shard] += fanout as u64;
        self.out.messages_per_shard[shard] += messages as u64;
        // The recipients' lags: the wait behind the shard's queue, then each in turn. Eight
        // points stand for them, each weighted by the recipients it represents.
        if fanout > 0 {
            let wait_us = (start - self.now) as f64 / 1e3;
            let points = fanout.min(8);
            for i in 0..points {
                let rank = (i as f64 + 0.5) / points as f64 * fanout as f64;
                let lag =
                    wait_us + self.c.lag0_us[self.m] + rank * self.c.lag_per_recipient_us[self.m];
                let weight = (fanout / points + usize::from(i < fanout % points)) as u64;
                let _ = self.lag.record_n(lag.max(1.0) as u64, weight);
            }
        }
        if self.f.held > 0 {
            for node in recipients {
                if self.held[node as usize].binary_search(&key).is_ok() {
                    self.fill(node, key);
                }
            }
        }
    }

    fn loaded(&mut self, key: u32) {
        let k = key as usize;
        self.write(key);
        self.read_op(key); // DEL lock
        self.loading[k] = false;
        self.out.expiries_loaded += 1;
        self.reads_this_expiry[k] = 0;
        for node in self.waiters.remove(&key).unwrap_or_default() {
            self.fill(node, key);
        }
    }

    fn push_event(&mut self, at: u64, event: Event) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, event)));
    }
}

/// Runs `fleet` with `costs` and returns what it predicts.
pub(crate) fn run(fleet: &Fleet, costs: &Costs) -> Outcome {
    let keys = fleet.keys as usize;
    let zipf = Zipf::new(fleet.keys, fleet.zipf);
    let mut sim = Sim {
        f: fleet,
        c: costs,
        m: Mode::ALL.iter().position(|&m| m == fleet.mode).unwrap_or(0),
        now: 0,
        rng: StdRng::seed_from_u64(fleet.seed),
        fresh_until: vec![0; keys],
        last_write: vec![0; keys],
        loading: vec![false; keys],
        reads_this_expiry: vec![0; keys],
        waiters: HashMap::new(),
        holders: HashMap::new(),
        l1: vec![HashMap::new(); fleet.nodes],
        held: vec![Vec::new(); fleet.nodes],
        busy_until: vec![0; fleet.shards],
        turn_until: vec![0; fleet.shards],
        lag: Histogram::new(3).expect("a histogram"),
        heap: BinaryHeap::new(),
        seq: 0,
        out: Outcome::empty(fleet),
    };
    // The bench's workload: every key has a value, each node holds its keys from the start.
    if fleet.held > 0 {
        sim.fresh_until.fill(u64::MAX);
        for node in 0..fleet.nodes {
            let mut held: Vec<u32> =
                rand::seq::index::sample(&mut sim.rng, keys, (fleet.held as usize).min(keys))
                    .into_iter()
                    .map(|i| i as u32)
                    .collect();
            held.sort_unstable();
            for &key in &held {
                sim.fill(node as u32, key);
            }
            sim.held[node] = held;
        }
        sim.out = Outcome::empty(fleet);
        sim.busy_until.fill(0);
        sim.turn_until.fill(0);
    }
    if fleet.reads_per_node > 0.0 {
        for node in 0..fleet.nodes as u32 {
            let at = gap(&mut sim.rng, fleet.reads_per_node);
            sim.push_event(at, Event::Read { node });
        }
    }
    let on_tick = |at: u64| match fleet.tick_ns {
        0 => at,
        tick => at.div_ceil(tick) * tick,
    };
    let mut next_write = 0;
    if fleet.writes_per_s > 0.0 {
        next_write = gap(&mut sim.rng, fleet.writes_per_s);
        sim.push_event(on_tick(next_write), Event::Write);
    }
    let end = (fleet.seconds * 1e9) as u64;
    while let Some(Reverse((at, _, event))) = sim.heap.pop() {
        if at > end {
            break;
        }
        sim.now = at;
        match event {
            Event::Read { node } => {
                let key = zipf.draw(&mut sim.rng);
                sim.read(node, key);
                let next = at + gap(&mut sim.rng, fleet.reads_per_node);
                sim.push_event(next, Event::Read { node });
            }
            Event::Write => {
                let key = zipf.draw(&mut sim.rng);
                sim.out.app_writes += 1;
                sim.write(key);
                next_write += gap(&mut sim.rng, fleet.writes_per_s);
                sim.push_event(on_tick(next_write), Event::Write);
            }
            Event::Loaded { key } => sim.loaded(key),
        }
    }
    if !sim.lag.is_empty() {
        sim.out.lag_p50_us = sim.lag.value_at_quantile(0.5) as f64;
        sim.out.lag_p99_us = sim.lag.value_at_quantile(0.99) as f64;
    }
    for busy in &mut sim.out.busy_us_per_shard {
        *busy += costs.idle_us_per_s * fleet.seconds;
    }
    sim.out.tracked_keys = sim.holders.values().filter(|h| !h.is_empty()).count() as u64;
    sim.out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs() -> Costs {
        Costs {
            write_us: 2.0,
            idle_us_per_s: 100.0,
            push_us: [0.5, 0.7],
            message_us: 1.0,
            read_us: 1.5,
            message_bytes: 25.0,
            key_bytes: 12.0,
            lag0_us: [50.0, 50.0],
            lag_per_recipient_us: [1.0, 1.0],
        }
    }

    fn fleet(mode: Mode) -> Fleet {
        Fleet {
            mode,
            nodes: 10,
            keys: 2_000,
            zipf: 0.99,
            reads_per_node: 500.0,
            writes_per_s: 50.0,
            ttl_s: 0.5,
            load_s: 0.05,
            shards: 6,
            seconds: 2.0,
            held: 0,
            tick_ns: 0,
            seed: 7,
        }
    }

    /// The regeneration lock elects one loader per key per expiry across the fleet, in each mode,
    /// while many more reads than that find the value expired.
    #[test]
    fn one_source_read_per_key_per_expiry() {
        for mode in Mode::ALL {
            let out = run(&fleet(mode), &costs());
            assert_eq!(out.max_reads_per_expiry, 1, "{mode:?}");
            assert!(
                out.source_reads > 0 && out.expired_misses > out.source_reads,
                "{out:?}"
            );
        }
    }

    /// BCAST pushes every write to every node; the default mode pushes no more than that.
    #[test]
    fn bcast_pushes_every_write_to_every_node() {
        let bcast = run(&fleet(Mode::Bcast), &costs());
        assert_eq!(bcast.pushes(), bcast.writes * 10);
        let default = run(&fleet(Mode::Default), &costs());
        assert!(default.pushes() < default.writes * 10, "{default:?}");
    }

    /// The same fleet and seed give the same prediction.
    #[test]
    fn a_run_is_a_function_of_its_fleet() {
        let (a, b) = (
            run(&fleet(Mode::Default), &costs()),
            run(&fleet(Mode::Default), &costs()),
        );
        assert_eq!(
            (a.reads, a.pushes(), a.source_reads),
            (b.reads, b.pushes(), b.source_reads)
        );
    }
}
