//! What `echostore hit-cost` reports: the figures (printed as one JSON object with `--json`) and
//! the human readout beside the seed's frozen figures.

use echostore_testkit::duration;
use echostore_testkit::herd::SOURCE_LATENCY;
use serde::Serialize;

use crate::output;
use crate::valkey::Target;

/// One backend's L1 hit figure.
#[derive(Debug, Serialize)]
pub(super) struct L1Figure {
    /// Median nanoseconds per hit over the rounds.
    pub(super) ns: f64,
    /// Hits per second at that median.
    pub(super) reads_per_sec: u64,
    /// Each round's nanoseconds per hit.
    pub(super) rounds_ns: Vec<f64>,
    /// Gets timed per round.
    pub(super) gets_per_round: usize,
}

/// Both backends' L1 figures.
#[derive(Debug, Serialize)]
pub(super) struct L1Figures {
    pub(super) quick_cache: L1Figure,
    pub(super) moka: L1Figure,
}

/// The L2 GET round trip.
#[derive(Debug, Serialize)]
pub(super) struct L2Figure {
    /// Median microseconds per GET.
    pub(super) median: f64,
    /// 99th percentile microseconds.
    pub(super) p99: f64,
    pub(super) samples: u64,
    pub(super) value_bytes: usize,
}

/// The in-process herd against the bare single-flight.
#[derive(Debug, Serialize)]
pub(super) struct HerdFigure {
    pub(super) callers: u64,
    pub(super) source_latency_ms: f64,
    pub(super) rounds: u64,
    /// Median ms until every caller had the value, through `Table::get` (no Valkey).
    pub(super) store_ms: f64,
    /// The same for the bare oneshot single-flight.
    pub(super) baseline_ms: f64,
    pub(super) ratio_store_over_baseline: f64,
    /// Loader calls over all rounds (one per round expected).
    pub(super) store_source_reads: u64,
    pub(super) baseline_source_reads: u64,
    pub(super) store_rounds_ms: Vec<f64>,
    pub(super) baseline_rounds_ms: Vec<f64>,
}

/// The seed's frozen figures (its `bcs.4.md` page: the cache hit cost, against live Valkey).
pub(super) const SEED: SeedFigures = SeedFigures {
    l1_reads_per_sec: 1_311_621,
    l1_hit_ns: 762,
    l2_get_us: 31,
    ratio: 40,
};

/// The seed's frozen figures, printed beside ours.
#[derive(Debug, Serialize)]
pub(super) struct SeedFigures {
    pub(super) l1_reads_per_sec: u64,
    pub(super) l1_hit_ns: u64,
    pub(super) l2_get_us: u64,
    pub(super) ratio: u64,
}

/// The readout, as printed with `--json`.
#[derive(Debug, Serialize)]
pub(super) struct HitCostReport {
    pub(super) readout: &'static str,
    pub(super) valkey: String,
    pub(super) keys: u64,
    pub(super) rounds: u64,
    pub(super) l1_hit: L1Figures,
    pub(super) l2_get_us: L2Figure,
    /// L2 GET median over the quick_cache L1 hit median.
    pub(super) ratio_l2_over_l1: f64,
    pub(super) herd: HerdFigure,
    pub(super) seed: SeedFigures,
}

pub(super) fn print_human(r: &HitCostReport, target: &Target) {
    let q = &r.l1_hit.quick_cache;
    let m = &r.l1_hit.moka;
    let h = &r.herd;
    println!(
        "the cache hit cost · {} keys · median of {} rounds · against the {}",
        output::grouped(r.keys),
        r.rounds,
        target.describe()
    );
    println!();
    let row = |label: &str, now: String, seed: String| {
        let line = format!("  {label:<30} {now:<34} {seed}");
        println!("{}", line.trim_end());
    };
    row("", "measured now".into(), "seed (bcs.4.md, frozen)".into());
    row(
        "L1 hit reads/s, quick_cache",
        format!(
            "{:>11}   {} ns each",
            output::grouped(q.reads_per_sec),
            ns(q.ns)
        ),
        format!(
            "{}   ← {} ns each, caller-side ETS",
            output::grouped(r.seed.l1_reads_per_sec),
            r.seed.l1_hit_ns
        ),
    );
    row(
        "L1 hit reads/s, moka",
        format!(
            "{:>11}   {} ns each",
            output::grouped(m.reads_per_sec),
            ns(m.ns)
        ),
        String::new(),
    );
    row(
        "L2 GET",
        format!(
            "{} µs   (p99 {} µs)",
            us(r.l2_get_us.median),
            us(r.l2_get_us.p99)
        ),
        format!("{} us   ← the round trip the herd avoids", r.seed.l2_get_us),
    );
    row(
        "the L1 hit is",
        format!("{} times cheaper", times(r.ratio_l2_over_l1)),
        format!(
            "{} times   cheaper than the round trip it replaces",
            r.seed.ratio
        ),
    );
    println!(
        "  {:<30} {} times cheaper than the L2 GET",
        "  (moka's L1 hit)",
        times(r.l2_get_us.median * 1000.0 / m.ns)
    );
    println!();
    println!(
        "  the herd: {} concurrent misses on one key, {} source, in-process (no Valkey)",
        output::grouped(h.callers),
        duration::render(SOURCE_LATENCY)
    );
    println!(
        "    {:<28} {:>8} ms until every caller had the value · {} source reads in {} rounds",
        "echostore Table::get",
        output::ms(h.store_ms),
        h.store_source_reads,
        h.rounds
    );
    println!(
        "    {:<28} {:>8} ms                                   · {} source reads in {} rounds",
        "bare oneshot single-flight",
        output::ms(h.baseline_ms),
        h.baseline_source_reads,
        h.rounds
    );
    println!(
        "    {:<28} {:>8}×",
        "store / baseline",
        format!("{:.2}", h.ratio_store_over_baseline)
    );
    println!();
    println!(
        "An L1 hit costs {} ns against a {} µs round trip: {} times cheaper (the seed measured {} ns, {} µs, {}×).",
        ns(q.ns),
        us(r.l2_get_us.median),
        times(r.ratio_l2_over_l1),
        r.seed.l1_hit_ns,
        r.seed.l2_get_us,
        r.seed.ratio
    );
}

/// Nanoseconds with one decimal under a hundred.
fn ns(value: f64) -> String {
    if value < 100.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.0}")
    }
}

/// Microseconds with one decimal.
fn us(value: f64) -> String {
    format!("{value:.1}")
}

/// A ratio as a whole number when it is large.
fn times(value: f64) -> String {
    if value >= 10.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}
