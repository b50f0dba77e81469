//! What `echostore coherence` reports: the lag from each write to each reader's first read of it
//! (p50, p99, max, by kind of write, and a small histogram), the invalidations the readers
//! received, the L1 hit rate they kept, the writer's self-push, the verdict and the human readout.

use std::time::Duration;

use echostore::TableStats;
use echostore_testkit::duration;
use echostore_testkit::measure::Latencies;
use serde::Serialize;

use super::reader::ReaderStats;
use super::{BUCKETS_MS, CoherenceArgs, Switch, TABLE, Tallies, record_ns};
use crate::output::{self, Latency};
use crate::valkey::Target;

/// The lag target with coherence on: every reader has a write within this, at the 99th percentile.
const TARGET_P99_MS: f64 = 5.0;

/// One write of the writer.
pub(super) struct Write {
    /// A put (else an invalidate).
    pub(super) put: bool,
    /// Unix ns just before the call.
    pub(super) issued_ns: u64,
}

/// What the run collected, for [`summarise`].
pub(super) struct Run {
    pub(super) writes: Vec<Write>,
    /// Per reader, per write (index `seq - 1`): the Unix ns it first saw that write.
    pub(super) first_seen: Vec<Vec<u64>>,
    /// Per reader, the newest write seen.
    pub(super) latest: Vec<u64>,
    pub(super) stats: Vec<Option<ReaderStats>>,
    pub(super) writer: TableStats,
    pub(super) self_reads: Tallies,
    pub(super) self_read_latency: Latencies,
    /// Puts whose own push did not arrive within 5 s (coherence on): must be 0.
    pub(super) self_push_missing: u64,
    pub(super) capped: bool,
    pub(super) elapsed: Duration,
}

impl Run {
    pub(super) fn new(readers: usize) -> Run {
        Run {
            writes: Vec::new(),
            first_seen: vec![Vec::new(); readers],
            latest: vec![0; readers],
            stats: vec![None; readers],
            writer: TableStats::default(),
            self_reads: Tallies::default(),
            self_read_latency: Latencies::default(),
            self_push_missing: 0,
            capped: false,
            elapsed: Duration::ZERO,
        }
    }

    /// Reader `reader` first saw write `seq` at `at_ns`; any write it skipped was superseded by
    /// it, and is counted as seen at the same instant.
    pub(super) fn seen(&mut self, reader: usize, seq: u64, at_ns: u64) {
        let seen = &mut self.first_seen[reader];
        while (seen.len() as u64) < seq {
            seen.push(at_ns);
        }
        self.latest[reader] = self.latest[reader].max(seq);
    }
}

/// One bucket of the lag histogram.
#[derive(Debug, Serialize)]
pub(super) struct Bucket {
    /// Upper bound in ms; `None` for the last bucket (everything above).
    pub(super) up_to_ms: Option<f64>,
    pub(super) count: u64,
}

/// One reader's share.
#[derive(Debug, Serialize)]
pub(super) struct ReaderReport {
    pub(super) reader: usize,
    pub(super) lag_ms: Latency,
    pub(super) l1_hit_rate: f64,
    pub(super) stats: ReaderStats,
}

/// The writer's reads of its own id after its own puts.
#[derive(Debug, Serialize)]
pub(super) struct SelfPush {
    /// Invalidation pushes the writer received during the run (its own writes, and the readers'
    /// reloads after each invalidate).
    pub(super) writer_invalidations: u64,
    /// Where the read after each put was answered.
    pub(super) read_after_own_put: Tallies,
    pub(super) read_after_own_put_ms: Latency,
    /// Puts whose own push never came (coherence on): must be 0.
    pub(super) missing: u64,
}

/// The readout, as printed with `--json`.
#[derive(Debug, Serialize)]
pub(super) struct CoherenceReport {
    pub(super) readout: &'static str,
    pub(super) coherence: &'static str,
    /// How the stores tracked: `broadcast` or `keys`.
    pub(super) tracking: &'static str,
    pub(super) valkey: String,
    pub(super) key: String,
    pub(super) readers: usize,
    pub(super) writes: u64,
    pub(super) puts: u64,
    pub(super) invalidates: u64,
    pub(super) ttl_ms: f64,
    pub(super) gap_ms: f64,
    /// Each reader's pause between reads: the resolution of the lag.
    pub(super) read_every_ms: f64,
    pub(super) capped: bool,
    pub(super) run_ms: f64,
    /// Writes × readers: each reader must see each write.
    pub(super) expected_sightings: u64,
    pub(super) sightings: u64,
    pub(super) every_write_seen: bool,
    /// Reads that returned an older write than one already seen: must be 0.
    pub(super) went_back: u64,
    pub(super) invariant_held: bool,
    pub(super) lag_ms: Latency,
    pub(super) lag_put_ms: Latency,
    pub(super) lag_invalidate_ms: Latency,
    pub(super) histogram: Vec<Bucket>,
    pub(super) invalidations: u64,
    pub(super) coherence_flushes: u64,
    pub(super) reads: u64,
    pub(super) l1_hits: u64,
    pub(super) l1_hit_rate: f64,
    pub(super) l2_hits: u64,
    pub(super) source_reads: u64,
    pub(super) self_push: SelfPush,
    pub(super) per_reader: Vec<ReaderReport>,
    pub(super) verdict: String,
}

pub(super) fn summarise(
    target: &Target,
    args: &CoherenceArgs,
    ttl: Duration,
    run: String,
    r: Run,
) -> CoherenceReport {
    let ms = |d: Duration| output::round3(d.as_secs_f64() * 1000.0);
    let (mut all, mut puts, mut invalidates) = Default::default();
    let mut buckets = vec![0u64; BUCKETS_MS.len() + 1];
    let mut per_reader = Vec::new();
    let mut sightings = 0;
    for (reader, seen) in r.first_seen.iter().enumerate() {
        let mut mine = Latencies::default();
        for (write, &at_ns) in r.writes.iter().zip(seen) {
            let lag = at_ns.saturating_sub(write.issued_ns);
            sightings += 1;
            record_ns(&mut all, lag);
            record_ns(&mut mine, lag);
            record_ns(
                if write.put {
                    &mut puts
                } else {
                    &mut invalidates
                },
                lag,
            );
            let lag_ms = lag as f64 / 1e6;
            let bucket = BUCKETS_MS
                .iter()
                .position(|&up_to| lag_ms <= up_to)
                .unwrap_or(BUCKETS_MS.len());
            buckets[bucket] += 1;
        }
        let stats = r.stats[reader].unwrap_or_default();
        per_reader.push(ReaderReport {
            reader,
            lag_ms: Latency::of(&mine),
            l1_hit_rate: rate(stats.l1_hits, stats.reads),
            stats,
        });
    }
    let readers: Vec<ReaderStats> = r.stats.iter().map(|s| s.unwrap_or_default()).collect();
    let sum = |f: fn(&ReaderStats) -> u64| readers.iter().map(f).sum::<u64>();
    let writes = r.writes.len() as u64;
    let puts_made = r.writes.iter().filter(|w| w.put).count() as u64;
    let expected = writes * readers.len() as u64;
    let went_back = sum(|s| s.went_back);
    let every_write_seen = sightings == expected;
    let missing = r.self_push_missing;
    let (reads, l1_hits) = (sum(|s| s.reads), sum(|s| s.l1_hits));
    let mut report = CoherenceReport {
        readout: "coherence",
        coherence: args.coherence.name(),
        tracking: args.tracking.name(),
        valkey: target.shown_url(),
        key: format!("{TABLE}:{{{}}}", super::hot_id(&run)),
        readers: readers.len(),
        writes,
        puts: puts_made,
        invalidates: writes - puts_made,
        ttl_ms: ms(ttl),
        gap_ms: ms(args.gap),
        read_every_ms: ms(args.read_every),
        capped: r.capped,
        run_ms: ms(r.elapsed),
        expected_sightings: expected,
        sightings,
        every_write_seen,
        went_back,
        invariant_held: every_write_seen && went_back == 0,
        lag_ms: Latency::of(&all),
        lag_put_ms: Latency::of(&puts),
        lag_invalidate_ms: Latency::of(&invalidates),
        histogram: buckets
            .iter()
            .enumerate()
            .map(|(i, &count)| Bucket {
                up_to_ms: BUCKETS_MS.get(i).copied(),
                count,
            })
            .collect(),
        invalidations: sum(|s| s.invalidations),
        coherence_flushes: sum(|s| s.coherence_flushes),
        reads,
        l1_hits,
        l1_hit_rate: rate(l1_hits, reads),
        l2_hits: sum(|s| s.l2_hits),
        source_reads: sum(|s| s.source_reads),
        self_push: SelfPush {
            writer_invalidations: r.writer.invalidations,
            read_after_own_put: r.self_reads,
            read_after_own_put_ms: Latency::of(&r.self_read_latency),
            missing,
        },
        per_reader,
        verdict: String::new(),
    };
    report.verdict = verdict(&report, args.coherence);
    report
}

/// `part / whole`, to six decimals; 0 for none.
fn rate(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        return 0.0;
    }
    (part as f64 / whole as f64 * 1e6).round() / 1e6
}

fn verdict(r: &CoherenceReport, coherence: Switch) -> String {
    if !r.every_write_seen {
        return format!(
            "INVARIANT FAILED: {} of {} (write, reader) pairs were seen",
            r.sightings, r.expected_sightings
        );
    }
    if r.went_back > 0 {
        return format!(
            "INVARIANT FAILED: {} reads returned an older write after a newer one",
            r.went_back
        );
    }
    let seen = format!(
        "every write reached every reader ({} writes × {} readers), none went back",
        r.writes, r.readers
    );
    match coherence {
        Switch::On => {
            let met = if r.lag_ms.p99 <= TARGET_P99_MS {
                "met"
            } else {
                "NOT met"
            };
            format!(
                "{seen}; lag p99 {} ms (target ≤ {TARGET_P99_MS} ms: {met}) with a {} ttl, \
                 {:.2}% of reads still L1 hits.",
                output::ms(r.lag_ms.p99),
                duration::render(Duration::from_secs_f64(r.ttl_ms / 1000.0)),
                r.l1_hit_rate * 100.0
            )
        }
        Switch::Off => format!(
            "{seen}, but only as copies expired: lag p99 {} ms against a ttl of {} ms.",
            output::ms(r.lag_ms.p99),
            output::ms(r.ttl_ms)
        ),
    }
}

pub(super) fn print_human(r: &CoherenceReport, target: &Target) {
    println!(
        "coherence {} ({} tracking) · {} writes (puts and invalidates, alternating) in one store, \
         read in a loop by {} reader processes · ttl {} ms",
        r.coherence,
        r.tracking,
        r.writes,
        r.readers,
        output::ms(r.ttl_ms)
    );
    println!(
        "  {} · key {} · readers read every {} ms",
        target.describe(),
        r.key,
        output::ms(r.read_every_ms)
    );
    if r.capped {
        println!("  (capped: the run stopped writing after --max-run)");
    }
    println!();
    println!(
        "  lag, write → reader   {}   ({} sightings)",
        r.lag_ms.line(),
        r.lag_ms.count
    );
    println!("    after a put         {}", r.lag_put_ms.line());
    println!(
        "    after an invalidate {}   (includes the reload)",
        r.lag_invalidate_ms.line()
    );
    let most = r
        .histogram
        .iter()
        .map(|b| b.count)
        .max()
        .unwrap_or(0)
        .max(1);
    let mut lower = 0.0;
    for bucket in &r.histogram {
        let label = match bucket.up_to_ms {
            Some(up_to) => format!("{} – {} ms", output::ms(lower), output::ms(up_to)),
            None => format!("> {} ms", output::ms(lower)),
        };
        lower = bucket.up_to_ms.unwrap_or(lower);
        if bucket.count == 0 {
            continue;
        }
        let bar = "█".repeat(((bucket.count * 40).div_ceil(most)) as usize);
        println!("      {label:>18} {:>7} {bar}", bucket.count);
    }
    println!(
        "  invalidations         {} pushes reached the readers · {} L1 flushes",
        r.invalidations, r.coherence_flushes
    );
    println!(
        "  L1 hit rate kept      {:.4}%   ({} of {} reads; {} from Valkey, {} source reads)",
        r.l1_hit_rate * 100.0,
        output::grouped(r.l1_hits),
        output::grouped(r.reads),
        r.l2_hits,
        r.source_reads
    );
    let s = &r.self_push;
    println!(
        "  self-push             the writer's read after its own put: {} from L1, {} from Valkey \
         ({}) · {} pushes reached the writer",
        s.read_after_own_put.l1,
        s.read_after_own_put.l2,
        s.read_after_own_put_ms.line(),
        s.writer_invalidations
    );
    for reader in &r.per_reader {
        println!(
            "    reader {}  lag {} · {} invalidations · L1 hits {:.4}%",
            reader.reader,
            reader.lag_ms.line(),
            reader.stats.invalidations,
            reader.l1_hit_rate * 100.0
        );
    }
    println!();
    println!("{}", r.verdict);
}
