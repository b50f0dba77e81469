//! What `echostore early-refresh` reports: per mode (off, on) the reads by origin, the reads that
//! waited on a load, the read latency, the source reads per expiry and the overlapping loads; the
//! targets, the verdict, and the human readout.

use std::time::Duration;

use echostore::{Error, Origin, TableStats};
use echostore_testkit::duration;
use echostore_testkit::measure::Latencies;
use serde::Serialize;

use super::{EarlyRefreshArgs, TABLE};
use crate::output::{self, Latency, round3};
use crate::valkey::Target;

/// The source reads "on" may make, at most, against "off" over the same run.
const MAX_SOURCE_READS_RATIO: f64 = 1.5;

/// The reads of one mode by where they came from.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub(super) struct Origins {
    pub(super) l1: u64,
    pub(super) l2: u64,
    pub(super) loaded: u64,
    pub(super) coalesced: u64,
    /// Stale, default or an origin this readout does not know by name.
    pub(super) other: u64,
    pub(super) errors: u64,
}

impl Origins {
    pub(super) fn count(&mut self, read: Result<Origin, &Error>) {
        match read {
            Ok(Origin::L1) => self.l1 += 1,
            Ok(Origin::L2) => self.l2 += 1,
            Ok(Origin::Loaded) => self.loaded += 1,
            Ok(Origin::Coalesced) => self.coalesced += 1,
            Ok(_) => self.other += 1,
            Err(_) => self.errors += 1,
        }
    }

    /// Every read counted, whatever its origin.
    pub(super) fn total(&self) -> u64 {
        self.l1 + self.l2 + self.loaded + self.coalesced + self.other + self.errors
    }

    pub(super) fn add(&mut self, o: &Origins) {
        self.l1 += o.l1;
        self.l2 += o.l2;
        self.loaded += o.loaded;
        self.coalesced += o.coalesced;
        self.other += o.other;
        self.errors += o.errors;
    }
}

/// One mode's run.
#[derive(Debug, Serialize)]
pub(super) struct ModeReport {
    pub(super) early_refresh: bool,
    pub(super) beta: f64,
    pub(super) reads: u64,
    /// Reads that were not L1 hits and overlapped a source read (see the module doc).
    pub(super) reads_waited_on_load: u64,
    pub(super) origins: Origins,
    pub(super) latency_ms: Latency,
    /// Source reads during the run (the warm-up's excluded).
    pub(super) source_reads: u64,
    /// The run over the ttl.
    pub(super) nominal_expiries: f64,
    pub(super) source_reads_per_expiry: f64,
    pub(super) source_reads_per_minute: f64,
    /// Source reads that started while another was running: must be 0.
    pub(super) overlapping_loads: u64,
    /// The stores' counters during the run, summed.
    pub(super) early_refreshes: u64,
    pub(super) early_refresh_failures: u64,
    pub(super) lock_won: u64,
    pub(super) lock_lost: u64,
    pub(super) l2_hits: u64,
    pub(super) invalidations: u64,
}

/// Whether the "on" run met each target.
#[derive(Debug, Serialize)]
pub(super) struct Targets {
    /// No read of the "on" run waited on a load.
    pub(super) on_no_read_waited: bool,
    /// The "on" run's p99 read latency is under the L2 round trip.
    pub(super) on_p99_under_l2_round_trip: bool,
    /// The "on" run read the source at most 1.5× as often as the "off" run.
    pub(super) on_source_reads_at_most_1_5x: bool,
    /// The "off" run shows reads that waited on a load.
    pub(super) off_waits_visible: bool,
}

/// The readout, as printed with `--json`.
#[derive(Debug, Serialize)]
pub(super) struct EarlyRefreshReport {
    pub(super) readout: &'static str,
    pub(super) valkey: String,
    pub(super) ttl_ms: f64,
    pub(super) load_ms: f64,
    pub(super) stores: u32,
    pub(super) readers_per_store: u32,
    pub(super) run_ms: f64,
    pub(super) gap_ms: f64,
    /// Median of sequential `GET`s of a small value.
    pub(super) l2_round_trip_ms: f64,
    pub(super) off: ModeReport,
    pub(super) on: ModeReport,
    /// `on.source_reads / off.source_reads`.
    pub(super) source_reads_ratio: f64,
    pub(super) targets: Targets,
    /// No overlapping loads in either run.
    pub(super) invariant_held: bool,
    pub(super) verdict: String,
}

fn ms(d: Duration) -> f64 {
    round3(d.as_secs_f64() * 1000.0)
}

/// What one mode's run measured.
pub(super) struct Measured {
    pub(super) latencies: Latencies,
    pub(super) origins: Origins,
    pub(super) waited_on_load: u64,
    /// Source reads after the warm-up.
    pub(super) source_reads: u64,
    pub(super) overlapping_loads: u64,
    /// The stores' counters at the end, summed.
    pub(super) stats: TableStats,
    /// The same after the warm-up.
    pub(super) warm: TableStats,
}

/// One mode's figures.
pub(super) fn mode(args: &EarlyRefreshArgs, beta: f64, m: Measured) -> ModeReport {
    let Measured {
        latencies,
        origins,
        waited_on_load,
        source_reads,
        overlapping_loads,
        stats,
        warm,
    } = m;
    let expiries = args.run.as_secs_f64() / args.ttl.as_secs_f64();
    let reads = origins.total();
    let during = |f: fn(&TableStats) -> u64| f(&stats).saturating_sub(f(&warm));
    ModeReport {
        early_refresh: beta > 0.0,
        beta,
        reads,
        reads_waited_on_load: waited_on_load,
        origins,
        latency_ms: Latency::of(&latencies),
        source_reads,
        nominal_expiries: round3(expiries),
        source_reads_per_expiry: round3(source_reads as f64 / expiries),
        source_reads_per_minute: round3(source_reads as f64 * 60.0 / args.run.as_secs_f64()),
        overlapping_loads,
        early_refreshes: during(|s| s.early_refreshes),
        early_refresh_failures: during(|s| s.early_refresh_failures),
        lock_won: during(|s| s.lock_won),
        lock_lost: during(|s| s.lock_lost),
        l2_hits: during(|s| s.l2_hits),
        invalidations: during(|s| s.invalidations),
    }
}

pub(super) fn summarise(
    target: &Target,
    args: &EarlyRefreshArgs,
    l2: Duration,
    off: ModeReport,
    on: ModeReport,
) -> EarlyRefreshReport {
    let l2_ms = ms(l2);
    let ratio = if off.source_reads == 0 {
        0.0
    } else {
        round3(on.source_reads as f64 / off.source_reads as f64)
    };
    let targets = Targets {
        on_no_read_waited: on.reads_waited_on_load == 0,
        on_p99_under_l2_round_trip: on.latency_ms.p99 < l2_ms,
        on_source_reads_at_most_1_5x: ratio <= MAX_SOURCE_READS_RATIO,
        off_waits_visible: off.reads_waited_on_load > 0,
    };
    let invariant_held = off.overlapping_loads == 0 && on.overlapping_loads == 0;
    let met = [
        targets.on_no_read_waited,
        targets.on_p99_under_l2_round_trip,
        targets.on_source_reads_at_most_1_5x,
        targets.off_waits_visible,
    ]
    .iter()
    .filter(|t| **t)
    .count();
    let verdict = if invariant_held {
        format!("one load at a time in both runs; {met} of 4 targets met")
    } else {
        "INVARIANT FAILED: two source reads of the key overlapped".to_owned()
    };
    EarlyRefreshReport {
        readout: "early-refresh",
        valkey: target.shown_url(),
        ttl_ms: ms(args.ttl),
        load_ms: ms(args.load),
        stores: args.stores,
        readers_per_store: args.readers,
        run_ms: ms(args.run),
        gap_ms: ms(args.gap),
        l2_round_trip_ms: l2_ms,
        off,
        on,
        source_reads_ratio: ratio,
        targets,
        invariant_held,
        verdict,
    }
}

/// One figure of a mode, as the human readout shows it.
type Cell = fn(&ModeReport) -> String;

fn yes(ok: bool) -> &'static str {
    if ok { "yes" } else { "NO" }
}

pub(super) fn print_human(r: &EarlyRefreshReport, target: &Target) {
    println!(
        "early refresh (XFetch) · one hot key, ttl {} ms · source {} ms · {} stores × {} readers · {} per mode",
        output::ms(r.ttl_ms),
        output::ms(r.load_ms),
        r.stores,
        r.readers_per_store,
        duration::render(Duration::from_secs_f64(r.run_ms / 1000.0)),
    );
    println!(
        "  {} · table {TABLE} · L2 round trip {} ms (median GET)",
        target.describe(),
        output::ms(r.l2_round_trip_ms)
    );
    println!();
    println!(
        "                              {:>14}   {:>14}",
        "off (beta 0)",
        format!("on (beta {})", r.on.beta)
    );
    // Each row is one figure of a mode, shown for off beside on.
    let rows: [(&str, Cell); 13] = [
        ("reads", |m| output::grouped(m.reads)),
        ("  waited on a load", |m| m.reads_waited_on_load.to_string()),
        ("  l1 · l2", |m| {
            format!("{} · {}", m.origins.l1, m.origins.l2)
        }),
        ("  loaded · coalesced", |m| {
            format!("{} · {}", m.origins.loaded, m.origins.coalesced)
        }),
        ("read p50 ms", |m| output::ms(m.latency_ms.p50)),
        ("read p99 ms", |m| output::ms(m.latency_ms.p99)),
        ("read max ms", |m| output::ms(m.latency_ms.max)),
        ("source reads", |m| m.source_reads.to_string()),
        ("  per expiry", |m| {
            format!("{:.2}", m.source_reads_per_expiry)
        }),
        ("  per minute", |m| {
            format!("{:.0}", m.source_reads_per_minute)
        }),
        ("overlapping loads", |m| m.overlapping_loads.to_string()),
        ("early refreshes (failed)", |m| {
            format!("{} ({})", m.early_refreshes, m.early_refresh_failures)
        }),
        ("locks won · lost", |m| {
            format!("{} · {}", m.lock_won, m.lock_lost)
        }),
    ];
    for (what, cell) in rows {
        println!("  {what:<28}{:>14}   {:>14}", cell(&r.off), cell(&r.on));
    }
    println!();
    let t = &r.targets;
    let ratio = format!(" ({}×)", r.source_reads_ratio);
    for (what, met, also) in [
        ("on: no read waited on a load", t.on_no_read_waited, ""),
        (
            "on: p99 read under the L2 round trip",
            t.on_p99_under_l2_round_trip,
            "",
        ),
        (
            "on: source reads ≤ 1.5× off",
            t.on_source_reads_at_most_1_5x,
            &ratio,
        ),
        ("off: reads waited on a load", t.off_waits_visible, ""),
    ] {
        println!("  {what:<39} {}{also}", yes(met));
    }
    println!();
    println!("  verdict: {}", r.verdict);
}
