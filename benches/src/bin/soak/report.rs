//! The report: the figures of the run, its faults and the check, the stores' [`TableStats`] side by
//! side, and the [`Verdict`] with every condition the soak's exit code rests on.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use echostore::TableStats;
use echostore_testkit::measure::peak_rss_kib;

use crate::args::Args;
use crate::chaos::Chaos;
use crate::check::{Bucket, Check, Findings};
use crate::load::{Node, Run, Tally};
use crate::settings::*;
use crate::source::{Fault, INJECTED_PANICS, OTHER_PANICS, Outcome, Read};

pub(crate) fn row(label: &str, value: impl std::fmt::Display) {
    println!("  {label:<40} {value}");
}

pub(crate) fn list(map: &BTreeMap<&'static str, u64>) -> String {
    if map.is_empty() {
        return "none".into();
    }
    map.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// The stores' counters side by side, and their sum: one row per [`TableStats::counters`] entry.
pub(crate) fn print_stats(stats: &[TableStats]) {
    let mut header = format!("  {:<24}", "TableStats");
    for i in 0..stats.len() {
        header.push_str(&format!(" {:>12}", format!("store {i}")));
    }
    header.push_str(&format!(" {:>12}", "sum"));
    println!("{header}");
    let per_store: Vec<_> = stats.iter().map(TableStats::counters).collect();
    let sum = stats.iter().copied().sum::<TableStats>().counters();
    for (k, (name, total)) in sum.iter().enumerate() {
        let mut line = format!("  {name:<24}");
        for c in &per_store {
            line.push_str(&format!(" {:>12}", c[k].1));
        }
        line.push_str(&format!(" {total:>12}"));
        println!("{line}");
    }
}

/// Everything the verdict rests on, each `true` when it held.
pub(crate) struct Verdict(pub(crate) Vec<(String, bool)>);

impl Verdict {
    pub(crate) fn passed(&self) -> bool {
        self.0.iter().all(|(_, held)| *held)
    }
}

/// Prints the figures; returns the verdict.
pub(crate) fn report(
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
    let sum: TableStats = run.stats.iter().copied().sum();
    let reads_in_stats = sum.source_reads;

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
        format!("{outlived_up} / {}", sum.fenced_write_skipped),
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
        peak_rss_kib().map_or("unknown".into(), |k| {
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
