//! What `echostore check` prints: the counts per rule, the worst staleness beside the bound, the
//! faults injected (and skipped, with why), and the verdict; `--json` prints the same as one
//! object.

use serde::Serialize;

use super::figures::{Figures, figures};
use super::history::{Action, FaultSpan, Op};
use super::model::{Findings, Violations};
use super::{CheckArgs, Verdict};

/// One injected fault: when, from the first operation, and for how long.
#[derive(Debug, Serialize)]
pub(crate) struct FaultRow {
    name: String,
    at_s: f64,
    lasted_ms: f64,
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
    reads: usize,
    puts: usize,
    invalidates: usize,
    source_reads: u64,
    /// Calls that returned an error (or were cut off): no rule applies to them.
    failed_calls: usize,
    processes: u32,
    seconds: f64,
    coherence: &'static str,
    tracking: &'static str,
    faults: Vec<FaultRow>,
    skipped: Vec<Skipped>,
    bound_ms: f64,
    worst_staleness_ms: f64,
    worst_staleness_under_faults_ms: f64,
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
        let verdict = match findings.violations.total() {
            0 => "pass",
            _ => "fail",
        };
        Report {
            verdict,
            violations: findings.violations,
            events: ops.len(),
            reads: count(Action::Read),
            puts: count(Action::Put),
            invalidates: count(Action::Invalidate),
            source_reads: findings.source_reads,
            failed_calls: ops.iter().filter(|o| !o.ok).count(),
            processes: args.processes,
            seconds: args.seconds.as_secs_f64(),
            coherence: args.coherence.name(),
            tracking: args.tracking.name(),
            faults: spans
                .iter()
                .map(|s| FaultRow {
                    name: s.name.clone(),
                    at_s: s.start.saturating_sub(origin) as f64 / 1e9,
                    lasted_ms: s.end.saturating_sub(s.start) as f64 / 1e6,
                })
                .collect(),
            skipped: skipped
                .into_iter()
                .map(|(fault, why)| Skipped { fault, why })
                .collect(),
            bound_ms: args.bound.as_secs_f64() * 1e3,
            worst_staleness_ms: findings.worst_staleness_ns as f64 / 1e6,
            worst_staleness_under_faults_ms: findings.worst_staleness_under_faults_ns as f64 / 1e6,
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
        println!(
            "echostore check: {} processes, {:.0} s, coherence {} ({} tracking)",
            self.processes, self.seconds, self.coherence, self.tracking
        );
        println!(
            "  events        {} ({} reads, {} puts, {} invalidates, {} source reads; {} calls failed)",
            self.events,
            self.reads,
            self.puts,
            self.invalidates,
            self.source_reads,
            self.failed_calls
        );
        let injected: Vec<String> = self
            .faults
            .iter()
            .map(|f| format!("{} at {:.1} s ({:.0} ms)", f.name, f.at_s, f.lasted_ms))
            .collect();
        println!(
            "  faults        {}",
            match injected.is_empty() {
                true => "none".to_owned(),
                false => injected.join(", "),
            }
        );
        for s in &self.skipped {
            println!("  skipped       {}: {}", s.fault, s.why);
        }
        let v = &self.violations;
        for (rule, n) in [
            ("stale_after_write", v.stale_after_write),
            ("divergent", v.divergent),
            ("non_monotonic", v.non_monotonic),
            ("phantom", v.phantom),
            ("read_your_writes", v.read_your_writes),
            ("extra_source_reads", v.extra_source_reads),
        ] {
            println!("  {rule:<20} {n}");
        }
        println!(
            "  worst staleness   {:.1} ms outside faults (B = {:.0} ms), {:.1} ms under faults",
            self.worst_staleness_ms, self.bound_ms, self.worst_staleness_under_faults_ms
        );
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
        for e in &self.examples {
            println!("  e.g. {e}");
        }
        println!("verdict: {}", self.verdict);
    }
}
