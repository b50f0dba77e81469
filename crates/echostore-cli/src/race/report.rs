//! What `echostore race` reports: the answers tallied by origin, the nodes' summed
//! [`TableStats`], the latency (winner's node apart), the verdict, and the human readout.

use std::time::Duration;

use echostore::{Origin, TableStats};
use echostore_testkit::duration;
use echostore_testkit::measure::Latencies;
use serde::Serialize;

use super::{Answer, Losers, RaceArgs, TABLE};
use crate::output::{self, Latency};
use crate::valkey::Target;

/// The answers of the herd by where they came from.
#[derive(Debug, Default, Serialize)]
pub(super) struct Answers {
    pub(super) l1: u64,
    pub(super) l2: u64,
    pub(super) loaded: u64,
    pub(super) coalesced: u64,
    pub(super) stale: u64,
    pub(super) default: u64,
    /// Origins this readout does not know by name (the enum may grow).
    pub(super) other: u64,
    pub(super) lock_busy: u64,
    pub(super) other_errors: u64,
}

/// One node's share of the race.
#[derive(Debug, Serialize)]
pub(super) struct NodeReport {
    pub(super) node: u32,
    pub(super) requests: u64,
    pub(super) latency_ms: Latency,
    pub(super) stats: TableStats,
}

/// The readout, as printed with `--json`.
#[derive(Debug, Serialize)]
pub(super) struct RaceReport {
    pub(super) readout: &'static str,
    pub(super) losers: &'static str,
    pub(super) nodes: u32,
    pub(super) requests: u32,
    /// Hot keys each request reads (`--batch`): the source reads expected.
    pub(super) batch: u32,
    pub(super) source_latency_ms: f64,
    pub(super) valkey: String,
    pub(super) key: String,
    pub(super) source_reads: u64,
    pub(super) invariant_held: bool,
    pub(super) coalesced: u64,
    pub(super) lock_won: u64,
    pub(super) lock_lost: u64,
    /// Loser wake-ups by their safety poll (the interval ran out).
    pub(super) poll_waits: u64,
    /// Loser wake-ups by a Valkey push (the winner's write, or its lock going away).
    pub(super) push_wakeups: u64,
    /// The polls the losers sent (one script call per wake-up, pushed or timed): their sum.
    pub(super) poll_commands: u64,
    pub(super) l2_hits: u64,
    pub(super) stale_served: u64,
    pub(super) defaults_served: u64,
    pub(super) failed_fast: u64,
    pub(super) released: u64,
    pub(super) release_skipped: u64,
    pub(super) errors: u64,
    pub(super) max_staleness_ms: f64,
    pub(super) answers: Answers,
    pub(super) first_error: Option<String>,
    pub(super) latency_ms: Latency,
    pub(super) winner_node: Option<u32>,
    pub(super) latency_winner_node_ms: Latency,
    pub(super) latency_other_nodes_ms: Latency,
    pub(super) per_node: Vec<NodeReport>,
    pub(super) verdict: String,
}

pub(super) fn summarise(
    target: &Target,
    args: &RaceArgs,
    key: String,
    source_reads: u64,
    stats: &[TableStats],
    answers: &[Answer],
) -> RaceReport {
    let sum: TableStats = stats.iter().copied().sum();
    let winner_node = stats.iter().position(|s| s.lock_won >= 1).map(|i| i as u32);

    let mut tally = Answers::default();
    let mut first_error = None;
    let mut max_stale = Duration::ZERO;
    let mut all = Latencies::default();
    let mut winner_side = Latencies::default();
    let mut other_side = Latencies::default();
    let mut per_node: Vec<_> = (0..args.nodes).map(|_| Latencies::default()).collect();
    for answer in answers {
        all.record(answer.latency);
        per_node[answer.node as usize].record(answer.latency);
        if Some(answer.node) == winner_node {
            winner_side.record(answer.latency);
        } else {
            other_side.record(answer.latency);
        }
        match &answer.result {
            Ok((origin, stale_by)) => {
                match origin {
                    Origin::L1 => tally.l1 += 1,
                    Origin::L2 => tally.l2 += 1,
                    Origin::Loaded => tally.loaded += 1,
                    Origin::Coalesced => tally.coalesced += 1,
                    Origin::Stale => tally.stale += 1,
                    Origin::Default => tally.default += 1,
                    _ => tally.other += 1,
                }
                if let Some(by) = stale_by {
                    max_stale = max_stale.max(*by);
                }
            }
            Err(e) if e.is_lock_busy() => tally.lock_busy += 1,
            Err(e) => {
                tally.other_errors += 1;
                first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }

    // One source read per hot key.
    let invariant_held = source_reads == u64::from(args.batch);
    let mut report = RaceReport {
        readout: "race",
        losers: args.losers.name(),
        nodes: args.nodes,
        requests: args.requests,
        batch: args.batch,
        source_latency_ms: output::round3(args.source_latency.as_secs_f64() * 1000.0),
        valkey: target.shown_url(),
        key,
        source_reads,
        invariant_held,
        coalesced: sum.coalesced,
        lock_won: sum.lock_won,
        lock_lost: sum.lock_lost,
        poll_waits: sum.poll_waits,
        push_wakeups: sum.push_wakeups,
        poll_commands: sum.poll_waits + sum.push_wakeups,
        l2_hits: sum.l2_hits,
        stale_served: sum.stale_served,
        defaults_served: sum.defaults_served,
        failed_fast: sum.failed_fast,
        released: sum.released,
        release_skipped: sum.release_skipped,
        errors: sum.errors,
        max_staleness_ms: output::round3(max_stale.as_secs_f64() * 1000.0),
        answers: tally,
        first_error,
        latency_ms: Latency::of(&all),
        winner_node,
        latency_winner_node_ms: Latency::of(&winner_side),
        latency_other_nodes_ms: Latency::of(&other_side),
        per_node: stats
            .iter()
            .zip(&per_node)
            .enumerate()
            .map(|(node, (stats, h))| NodeReport {
                node: node as u32,
                // One answer per key read: a batch request gave `batch` of them.
                requests: h.len() / u64::from(args.batch),
                latency_ms: Latency::of(h),
                stats: *stats,
            })
            .collect(),
        verdict: String::new(),
    };
    report.verdict = verdict(&report, args.losers);
    report
}

/// The one-line verdict: did the stampede become one read, and what did the losers get.
fn verdict(r: &RaceReport, losers: Losers) -> String {
    let reads = |n: u64| {
        if n == 1 {
            "source read"
        } else {
            "source reads"
        }
    };
    if !r.invariant_held {
        return format!(
            "INVARIANT FAILED: {} {} for {} requests (exactly {} expected: one per hot key)",
            r.source_reads,
            reads(r.source_reads),
            r.requests,
            r.batch
        );
    }
    let losers_got = if r.nodes == 1 {
        "one node alone: every other request coalesced onto its flight".to_owned()
    } else {
        match losers {
            Losers::Poll => format!(
                "the losers waited and read the winner's fresh value ({} polls: {} woken by a \
                 push, {} by the safety poll)",
                r.poll_commands, r.push_wakeups, r.poll_waits
            ),
            Losers::Stale => format!(
                "the losers served the stale copy at once, at most {} ms stale",
                output::ms(r.max_staleness_ms)
            ),
            Losers::Default => "the losers got the placeholder at once".to_owned(),
            Losers::FailFast => "the losers failed fast with LockBusy".to_owned(),
        }
    };
    if r.batch > 1 {
        return format!(
            "{} source reads for {} batch requests of {} keys each: one read per key; {losers_got}.",
            r.source_reads, r.requests, r.batch
        );
    }
    format!(
        "1 source read for {} requests: the stampede became one read; {losers_got}.",
        r.requests
    )
}

pub(super) fn print_human(r: &RaceReport, args: &RaceArgs, target: &Target) {
    let a = &r.answers;
    println!(
        "lock race · losers: {} · {} requests on {} nodes miss {} at once · source {}",
        r.losers,
        r.requests,
        r.nodes,
        if r.batch == 1 {
            "one hot key".to_owned()
        } else {
            format!("{} hot keys (a get_many each)", r.batch)
        },
        duration::render(args.source_latency)
    );
    println!("  {} · key {TABLE}:{{{}}}", target.describe(), r.key);
    println!();
    let winner = match r.winner_node {
        Some(n) => format!("← the winner, node {n} (lock_won = 1)"),
        None => "← no node won the lock".to_owned(),
    };
    println!("  source reads        {:<10} {winner}", r.source_reads);
    println!(
        "  the losers          {:<10} coalesced in-process onto their node's one flight",
        r.coalesced
    );
    println!(
        "                      {:<10} flights on the other nodes lost the lock (SET NX → nil)",
        r.lock_lost
    );
    println!(
        "                      {:<10} polls sent: {} woken by a push (push_wakeups) · {} by the safety poll (poll_waits)",
        r.poll_commands, r.push_wakeups, r.poll_waits
    );
    println!(
        "                      {:<10} read the winner's value from Valkey (l2_hits)",
        r.l2_hits
    );
    println!(
        "                      {:<10} served stale · {} got the default · {} failed fast",
        r.stale_served, r.defaults_served, r.failed_fast
    );
    let staleness = if a.stale == 0 {
        "none: no answer was stale".to_owned()
    } else {
        format!(
            "{} ms at most ({} answers were the stale copy)",
            output::ms(r.max_staleness_ms),
            a.stale
        )
    };
    println!("  staleness served    {staleness}");
    println!(
        "  latency             {}   (all {})",
        r.latency_ms.line(),
        r.latency_ms.count / u64::from(r.batch)
    );
    if let Some(n) = r.winner_node {
        println!(
            "    winner's node {n:<3} {}   ({} requests)",
            r.latency_winner_node_ms.line(),
            r.latency_winner_node_ms.count / u64::from(r.batch)
        );
    }
    if r.latency_other_nodes_ms.count > 0 {
        println!(
            "    other nodes       {}   ({} requests)",
            r.latency_other_nodes_ms.line(),
            r.latency_other_nodes_ms.count / u64::from(r.batch)
        );
    }
    let mut got = vec![
        format!("{} loaded", a.loaded),
        format!("{} coalesced", a.coalesced),
    ];
    for (n, what) in [
        (a.l1, "from L1"),
        (a.l2, "from Valkey"),
        (a.stale, "stale"),
        (a.default, "placeholder"),
        (a.other, "from elsewhere"),
        (a.lock_busy, "LockBusy"),
        (a.other_errors, "other errors"),
    ] {
        if n > 0 {
            got.push(format!("{n} {what}"));
        }
    }
    println!("  answers             {}", got.join(" · "));
    if let Some(e) = &r.first_error {
        println!("  first error         {e}");
    }
    println!();
    println!("{}", r.verdict);
}
