//! What `echostore check` prints: the counts per rule, the worst staleness beside the bound, the
//! faults injected (and skipped, with why) with the workers' recovery time after each, and the
//! verdict; `--json` prints the same as one object.

use serde::Serialize;

use super::faults::Fault;
use super::figures::{Figures, SLOW_READ_NS, figures, recovery_ns};
use super::history::{ABSENT, Action, FaultSpan, KILLED, Op};
use super::model::{Findings, Violations};
use super::rows::GONE;
use super::{CheckArgs, Verdict};

/// One injected fault: when, from the first operation, for how long, and how long after it the
/// workers were back to normal ([`recovery_ns`]).
#[derive(Debug, Serialize)]
pub(crate) struct FaultRow {
    name: String,
    at_s: f64,
    lasted_ms: f64,
    /// From the end of the harm (the cluster serving every slot again after `kill-primary`),
    /// when that came before the fault's end; else equal to `lasted_ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    healed_after_ms: Option<f64>,
    recovery_ms: f64,
}

/// A fault that was asked for and not injected.
#[derive(Debug, Serialize)]
pub(crate) struct Skipped {
    fault: String,
    why: String,
}

/// The check's outcome.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    verdict: &'static str,
    violations: Violations,
    /// Operations recorded (calls and source reads).
    events: usize,
    /// Reads, each id of a batch counted as one; how many of them were in batches, and the
    /// batch calls (`fetch_many`) they made.
    reads: usize,
    batch_reads: usize,
    batches: usize,
    /// Reads made with `at_least` (the source's version when they began).
    at_least_reads: usize,
    /// Reads that answered `None`: a row gone at the source, on the optional table.
    none_reads: usize,
    /// Of those, reads that answered `Error::Absent` (or that a batch left out) where the batch
    /// loader leaves gone rows out.
    absent_reads: usize,
    puts: usize,
    invalidates: usize,
    deletes: usize,
    source_reads: u64,
    /// Source reads made by the batch loader.
    batch_source_reads: usize,
    /// Calls that returned an error (or were cut off): no rule applies to them.
    failed_calls: usize,
    /// Writes a `kill-worker` cut off (begun, never ended): counted among the failed calls.
    cut_off_writes: usize,
    processes: u32,
    /// Schemas side by side (`--schemas`).
    schemas: u32,
    seconds: f64,
    coherence: &'static str,
    tracking: &'static str,
    /// `"server"` or `"cluster"`.
    valkey: &'static str,
    faults: Vec<FaultRow>,
    skipped: Vec<Skipped>,
    bound_ms: f64,
    worst_staleness_ms: f64,
    worst_staleness_under_faults_ms: f64,
    /// The read behind `worst_staleness_ms`, described (and whether its process reached Valkey
    /// through the `proxy` fault's proxy: a hop on every push and reply, the whole run).
    #[serde(skip_serializing_if = "Option::is_none")]
    stalest_read: Option<String>,
    excused_reads: u64,
    excused_source_reads: u64,
    #[serde(flatten)]
    figures: Figures,
    examples: Vec<String>,
}

impl Report {
    pub(crate) fn new(
        args: &CheckArgs,
        ops: &[Op],
        spans: &[FaultSpan],
        skipped: Vec<(String, String)>,
        findings: Findings,
    ) -> Report {
        let origin = ops.iter().map(|o| o.start).min().unwrap_or(0);
        let count = |action: Action| ops.iter().filter(|o| o.action == action).count();
        let count_batch = |action: Action| {
            let batch = ops.iter().filter(|o| o.batch && o.action == action);
            batch.count()
        };
        let verdict = match findings.violations.total() {
            0 => "pass",
            _ => "fail",
        };
        Report {
            verdict,
            violations: findings.violations,
            events: ops.len(),
            reads: count(Action::Read),
            batch_reads: count_batch(Action::Read),
            batches: batches(ops),
            at_least_reads: ops.iter().filter(|o| o.at_least > 0).count(),
            none_reads: (ops.iter())
                .filter(|o| o.action == Action::Read && o.ok && o.version == GONE)
                .count(),
            absent_reads: (ops.iter())
                .filter(|o| o.action == Action::Read && o.origin == ABSENT)
                .count(),
            puts: count(Action::Put),
            invalidates: count(Action::Invalidate),
            deletes: count(Action::Delete),
            source_reads: findings.source_reads,
            batch_source_reads: count_batch(Action::Load),
            failed_calls: ops.iter().filter(|o| !o.ok).count(),
            cut_off_writes: ops.iter().filter(|o| o.origin == KILLED).count(),
            processes: args.processes,
            schemas: args.schemas,
            seconds: args.run_for().as_secs_f64(),
            coherence: args.coherence.name(),
            tracking: args.tracking.name(),
            valkey: match args.cluster {
                true => "cluster",
                false => "server",
            },
            faults: fault_rows(ops, spans, origin),
            skipped: skipped
                .into_iter()
                .map(|(fault, why)| Skipped { fault, why })
                .collect(),
            bound_ms: args.bound.as_secs_f64() * 1e3,
            worst_staleness_ms: findings.worst_staleness_ns as f64 / 1e6,
            worst_staleness_under_faults_ms: findings.worst_staleness_under_faults_ns as f64 / 1e6,
            stalest_read: findings.stalest_read.map(|read| proxied(read, spans)),
            excused_reads: findings.excused_reads,
            excused_source_reads: findings.excused_source_reads,
            figures: figures(ops, spans),
            examples: findings.examples,
        }
    }

    /// The verdict reached.
    pub(crate) fn verdict(&self) -> Verdict {
        match self.verdict {
            "pass" => Verdict::Pass,
            _ => Verdict::Fail,
        }
    }

    /// The readout, for a person.
    pub(crate) fn print(&self) {
        let on = match self.valkey {
            "cluster" => ", on a local cluster",
            _ => "",
        };
        println!(
            "echostore check: {} processes, {} schemas, {:.0} s, coherence {} ({} tracking){on}",
            self.processes, self.schemas, self.seconds, self.coherence, self.tracking
        );
        println!(
            "  events        {} ({} reads, {} of them in {} batches, {} at least a version, {} \
             None ({} absent); {} puts, {} invalidates, {} deletes; {} source reads, {} by the batch \
             loader; {} calls failed, {} of them writes cut off by a kill)",
            self.events,
            self.reads,
            self.batch_reads,
            self.batches,
            self.at_least_reads,
            self.none_reads,
            self.absent_reads,
            self.puts,
            self.invalidates,
            self.deletes,
            self.source_reads,
            self.batch_source_reads,
            self.failed_calls,
            self.cut_off_writes
        );
        self.print_faults();
        let v = &self.violations;
        for (rule, n) in [
            ("stale_after_write", v.stale_after_write),
            ("divergent", v.divergent),
            ("non_monotonic", v.non_monotonic),
            ("phantom", v.phantom),
            ("read_your_writes", v.read_your_writes),
            ("at_least", v.at_least),
            ("extra_source_reads", v.extra_source_reads),
            ("lost_answer", v.lost_answer),
            ("failed_call", v.failed_call),
        ] {
            println!("  {rule:<20} {n}");
        }
        self.print_figures();
        for e in &self.examples {
            println!("  e.g. {e}");
        }
        println!("verdict: {}", self.verdict);
    }

    /// The faults injected, one a line with its recovery time, and those skipped.
    fn print_faults(&self) {
        if self.faults.is_empty() {
            println!("  faults        none");
        }
        for (i, f) in self.faults.iter().enumerate() {
            let healed = f.healed_after_ms.map_or_else(String::new, |h| {
                format!(", every slot served again at {h:.0} ms")
            });
            println!(
                "  {:<14}{} at {:.1} s ({:.0} ms{healed}): recovered {:.0} ms after",
                if i == 0 { "faults" } else { "" },
                f.name,
                f.at_s,
                f.lasted_ms,
                f.recovery_ms
            );
        }
        if !self.faults.is_empty() {
            println!(
                "  {:<14}(recovered: from the fault's end, or every slot served again, to the end \
                 of the last failed call, or read over {:.0} ms, that began after it and ended \
                 before the next fault)",
                "",
                SLOW_READ_NS as f64 / 1e6
            );
        }
        for s in &self.skipped {
            println!("  skipped       {}: {}", s.fault, s.why);
        }
    }

    /// The staleness, the excuses and the figures no rule judges.
    fn print_figures(&self) {
        println!(
            "  worst staleness   {:.1} ms outside faults (B = {:.0} ms), {:.1} ms under faults",
            self.worst_staleness_ms, self.bound_ms, self.worst_staleness_under_faults_ms
        );
        if let Some(read) = &self.stalest_read {
            println!("  {:<18}{read}", "");
        }
        println!(
            "  excused by faults {} reads, {} source reads",
            self.excused_reads, self.excused_source_reads
        );
        let f = &self.figures;
        let during = f
            .source_reads_per_s_during_outages
            .map_or_else(String::new, |r| format!(", {r:.0}/s during outages"));
        println!(
            "  source reads  {:.0}/s outside faults{during}",
            f.source_reads_per_s_outside_faults
        );
        if f.stale_after_failed_writes_ms > 0.0 {
            println!(
                "  after a failed write, an older version was read up to {:.0} ms later",
                f.stale_after_failed_writes_ms
            );
        }
    }
}

/// How many `fetch_many` calls the batch reads came from: one per process, table and start.
fn batches(ops: &[Op]) -> usize {
    let calls: std::collections::HashSet<(u32, u8, u64)> = ops
        .iter()
        .filter(|o| o.batch && o.action == Action::Read)
        .map(|o| (o.process, o.table, o.start))
        .collect();
    calls.len()
}

/// The faults' rows: when each began (from the run's first operation), how long it lasted, and
/// the recovery time after it.
fn fault_rows(ops: &[Op], spans: &[FaultSpan], origin: u64) -> Vec<FaultRow> {
    let ms = |ns: u64| ns as f64 / 1e6;
    spans
        .iter()
        .zip(recovery_ns(ops, spans))
        .map(|(s, recovery)| FaultRow {
            name: s.name.clone(),
            at_s: s.start.saturating_sub(origin) as f64 / 1e9,
            lasted_ms: ms(s.end.saturating_sub(s.start)),
            healed_after_ms: s.healed.map(|h| ms(h.saturating_sub(s.start))),
            recovery_ms: ms(recovery),
        })
        .collect()
}

/// The stalest read's description, with a word on the proxy when its process reached Valkey
/// through it: that process's pushes and replies cross one more hop, in the checker's own
/// process, for the whole run, not only within the fault's span.
fn proxied((process, read): (u32, String), spans: &[FaultSpan]) -> String {
    let behind = spans
        .iter()
        .any(|s| s.name == Fault::Proxy.name() && s.processes.contains(&process));
    match behind {
        true => format!("{read} (p{process} reaches Valkey through the proxy)"),
        false => read,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stalest read of a process behind the proxy says so; another process's does not.
    #[test]
    fn the_stalest_read_names_the_proxy_only_for_its_process() {
        let spans = [
            FaultSpan::new(Fault::Proxy.name(), 10, 20).on(vec![0]),
            FaultSpan::new(Fault::Freeze.name(), 30, 40).on(vec![1]),
        ];
        let read = |p: u32| (p, format!("read by p{p}"));
        assert_eq!(
            proxied(read(0), &spans),
            "read by p0 (p0 reaches Valkey through the proxy)"
        );
        assert_eq!(proxied(read(1), &spans), "read by p1");
    }
}
