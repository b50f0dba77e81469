//! The consistency model of `docs/consistency.md`, checked over a merged history.
//!
//! Versions of one id are ordered by the real-time order of the writes that made them: `a` is
//! older than `b` when `a`'s write ended before `b`'s began. Two writes that overlap are not
//! ordered (either may land last on Valkey), so neither is older. Version 0 is the source's
//! initial row, older than every write. Every read is checked against the rules in this order
//! and counted under the first it breaks:
//!
//! - `phantom`: the version was never written, or its write began after the read ended;
//! - `at_least`: a read made with `ReadOptions::at_least(v)` returned a version older than `v`
//!   (the source's version when it began, or a put's written token: whatever the caches hold,
//!   such a read must see it). On a table ordered by `.version_by` a version is older than `v`
//!   when it is below it; on one ordered by Valkey's clock, when its write ended before `v`'s
//!   began (of two puts that overlapped, either may land last, and its token is then the older);
//! - `read_your_writes`: older than a write of the reader's own process that ended before the
//!   read began;
//! - `non_monotonic`: older than what an earlier read of the same process (ended before this one
//!   began) returned;
//! - `stale_after_write`: older than another process's write that ended more than `B` before the
//!   read began;
//! - `divergent`: in a quiet stretch after a group of overlapping writes (from `B` after the last
//!   ended to the next write, within one fresh life), a version other than the one the fleet
//!   settled on: one process kept a copy Valkey no longer holds. Each schema settles on its own,
//!   and moves up once after a load of the group's newest version (another schema's fill drops
//!   this schema's older copy; a read that must see at least that version drops an older copy
//!   and loads it); reads a fault excuses settle nothing.
//!
//! A read that answered `None` (a row gone at the source, on a table of `Option` values:
//! [`rows`](super::rows)) names no version. It is judged as the gone version most in its favour
//! ([`GoneWrites::resolve`]), and sets no floor for the reads after it; in a quiet stretch it
//! agrees with the other `None`s. A load of its schema made while a read that had to see at
//! least a version answered `None` is no extra source read: a `None` shows no version, so such a
//! read drops Valkey's copy and asks the source, and any process of the schema may be the one to
//! read it.
//!
//! And every source read is checked against the one-read rule: `extra_source_reads` counts loads
//! that began while an earlier load's or put's value of the id was still fresh, with no write
//! that could have dropped it in between (on a table that refreshes early, before the load's
//! value reached its early window: [`Bounds::early_by`]). A flight decides to load (takes its
//! lock) a little before its loader is called, so writes and puts within `B` of a load's start
//! (or of the start of a read of its process still waiting then, which may have begun the
//! flight) are given the benefit of the doubt.
//!
//! A fault excuses `stale_after_write`, `divergent` and `extra_source_reads` when the write (or
//! the earlier value) it concerns is no older than `B` before the fault began and the read began
//! before the fault's grace ran out. Nothing excuses the other three: they hold through every
//! fault. The `skew` fault excuses nothing: no rule may rest on a process's wall clock. The
//! `slow-source` and `failing-source` faults excuse only calls that fail: a troubled source makes
//! reads wait past their bounds or fail, and changes nothing an answer or a source read must obey.
//!
//! Beside the rules, every call must answer: `lost_answer` counts ids a batch read left out of
//! its answer (never excused), `failed_call` calls that returned an error with no fault (or its
//! grace) overlapping them.

use std::collections::HashMap;

use serde::Serialize;

use super::history::{ABSENT, Action, Excuses, FREEZE, FaultSpan, LEFT_OUT, Op};
use super::rows::{GONE, is_gone};

/// The bounds the model is checked with, in nanoseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// `B`: how long after a write returned a read in another process may still miss it.
    pub(crate) staleness: u64,
    /// How long after a fault ended its effects are excused.
    pub(crate) fault_grace: u64,
    /// The shortest fresh life a value can get: the ttl less its jitter, less a margin.
    pub(crate) fresh_for: u64,
    /// Schemas side by side: process `p` runs schema `p % schemas`, and loads only its own.
    pub(crate) schemas: u32,
    /// The tables' early refresh, which loads before expiry on purpose.
    pub(crate) early: Early,
    /// The tables whose values choose their own life (`ttl_for`).
    pub(crate) short: ShortLives,
}

/// A value's own life (`ttl_for`) as the tables choose it: on the tables marked, an odd version
/// lives half the ttl ([`tables::life`](super::tables::life)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShortLives {
    /// Which tables ([`TABLES`](super::tables::TABLES) order).
    pub(crate) tables: [bool; 3],
    /// The shortest fresh life of an odd version there.
    pub(crate) fresh_for: u64,
}

/// Early refresh (XFetch) as the tables run it: a value being read is rebuilt from
/// `4·delta·beta` before it expires (the library's early window, docs/early-refresh.md), `delta`
/// the time its load took.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Early {
    /// Each table's `beta` ([`TABLES`](super::tables::TABLES) order); 0 turns it off.
    pub(crate) beta: [f64; 3],
    /// How much sooner still a refresh may start: the hit path watches for the window on the
    /// coarse clock, set early by a margin and behind the precise clock by up to a tick.
    pub(crate) slack: u64,
}

impl Bounds {
    /// The shortest fresh life of `set`'s value: its own, where its table's values choose it.
    pub(crate) fn fresh_for_of(&self, set: &Op) -> u64 {
        let short = self.short.tables.get(usize::from(set.table)) == Some(&true);
        // A gone row's `None` names no version: it lives the table's ttl.
        if short && set.version % 2 == 1 && !is_gone(set.table, set.version) {
            self.short.fresh_for
        } else {
            self.fresh_for
        }
    }

    /// The shortest fresh life of any value of `table`.
    pub(crate) fn shortest_fresh_for(&self, table: u8) -> u64 {
        match self.short.tables.get(usize::from(table)) {
            Some(true) => self.short.fresh_for.min(self.fresh_for),
            _ => self.fresh_for,
        }
    }

    /// How long before its value's shortest fresh life ends a load may follow `set` by design:
    /// the early window of `set`'s table, for a load's value (a put's has no `delta`, so it is
    /// never refreshed early).
    pub(crate) fn early_by(&self, set: &Op) -> u64 {
        let beta = self.early.beta.get(usize::from(set.table)).copied();
        match beta {
            Some(beta) if beta > 0.0 && set.action == Action::Load => {
                let delta = set.end.saturating_sub(set.start) as f64;
                (EARLY_WINDOW * beta * delta) as u64 + self.early.slack
            }
            _ => 0,
        }
    }
}

/// The early window in units of `delta·beta`: the library's `EARLY_WINDOW_K`.
const EARLY_WINDOW: f64 = 4.0;

/// Violations per rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Violations {
    pub(crate) stale_after_write: u64,
    pub(crate) divergent: u64,
    pub(crate) non_monotonic: u64,
    pub(crate) phantom: u64,
    pub(crate) read_your_writes: u64,
    pub(crate) at_least: u64,
    pub(crate) extra_source_reads: u64,
    pub(crate) lost_answer: u64,
    pub(crate) failed_call: u64,
}

impl Violations {
    /// Every violation, summed.
    pub(crate) fn total(&self) -> u64 {
        self.stale_after_write
            + self.divergent
            + self.non_monotonic
            + self.phantom
            + self.read_your_writes
            + self.at_least
            + self.extra_source_reads
            + self.lost_answer
            + self.failed_call
    }
}

/// What the check found.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Findings {
    pub(crate) violations: Violations,
    /// Reads and source reads a fault excused from the rules above.
    pub(crate) excused_reads: u64,
    pub(crate) excused_source_reads: u64,
    /// Source reads in all.
    pub(crate) source_reads: u64,
    /// The longest a read in another process still returned a version older than a write that
    /// had returned, outside any fault's excuse, and under faults (ns).
    pub(crate) worst_staleness_ns: u64,
    pub(crate) worst_staleness_under_faults_ns: u64,
    /// The read behind `worst_staleness_ns`: its process, and the read described.
    pub(crate) stalest_read: Option<(u32, String)>,
    /// A few violations of each rule, described.
    pub(crate) examples: Vec<String>,
}

/// How many violations of one rule are described in [`Findings::examples`].
const EXAMPLES_PER_RULE: usize = 3;

/// The rule a read broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    Phantom,
    AtLeast,
    ReadYourWrites,
    NonMonotonic,
    StaleAfterWrite,
    Divergent,
    ExtraSourceRead,
    LostAnswer,
    FailedCall,
}

impl Rule {
    fn name(self) -> &'static str {
        match self {
            Rule::Phantom => "phantom",
            Rule::AtLeast => "at_least",
            Rule::ReadYourWrites => "read_your_writes",
            Rule::NonMonotonic => "non_monotonic",
            Rule::StaleAfterWrite => "stale_after_write",
            Rule::Divergent => "divergent",
            Rule::ExtraSourceRead => "extra_source_reads",
            Rule::LostAnswer => "lost_answer",
            Rule::FailedCall => "failed_call",
        }
    }
}

/// Checks `ops` (every process's, merged) against the model.
pub(crate) fn check(ops: &[Op], faults: &[FaultSpan], bounds: Bounds) -> Findings {
    let origin = ops.iter().map(|o| o.start).min().unwrap_or(0);
    let mut run = Run {
        bounds,
        faults,
        origin,
        findings: Findings::default(),
        described: HashMap::new(),
    };
    let mut by_key: HashMap<(u8, u32), Vec<&Op>> = HashMap::new();
    for op in ops {
        by_key.entry((op.table, op.id)).or_default().push(op);
    }
    let mut keys: Vec<_> = by_key.into_iter().collect();
    keys.sort_by_key(|(key, _)| *key);
    for (_, ops) in keys {
        run.key(&ops);
    }
    run.failed_calls(ops);
    run.findings
}

/// The interval of the write that made a version: `(start, end)`; version 0 is `(0, 0)`.
type Made = (u64, u64);

struct Run<'a> {
    bounds: Bounds,
    faults: &'a [FaultSpan],
    origin: u64,
    findings: Findings,
    described: HashMap<&'static str, usize>,
}

/// Per process, its successful writes of one id sorted by start, with the earliest end among the
/// writes from each position on: the first write that superseded a version, in one search.
struct Superseders {
    starts: Vec<u64>,
    min_end_from: Vec<u64>,
}

impl Superseders {
    fn new(mut writes: Vec<(u64, u64)>) -> Superseders {
        writes.sort_unstable();
        let starts = writes.iter().map(|w| w.0).collect();
        let mut min_end_from = vec![u64::MAX; writes.len()];
        let mut least = u64::MAX;
        for (i, w) in writes.iter().enumerate().rev() {
            least = least.min(w.1);
            min_end_from[i] = least;
        }
        Superseders {
            starts,
            min_end_from,
        }
    }

    /// The earliest end of a write that began after `made_end` (the version's write had ended):
    /// the moment the version was superseded, if it was.
    fn superseded_at(&self, made_end: u64) -> Option<u64> {
        let i = self.starts.partition_point(|&s| s <= made_end);
        self.min_end_from.get(i).copied()
    }
}

impl Run<'_> {
    /// Every rule over the operations of one id.
    fn key(&mut self, ops: &[&Op]) {
        let mut made: HashMap<u64, Made> = HashMap::new();
        made.insert(0, (0, 0));
        for w in ops.iter().filter(|o| o.is_write()) {
            made.insert(w.version, (w.start, w.end));
        }
        let processes: Vec<u32> = {
            let mut p: Vec<u32> = ops.iter().map(|o| o.process).collect();
            p.sort_unstable();
            p.dedup();
            p
        };
        let superseders: HashMap<u32, Superseders> = processes
            .iter()
            .map(|&p| {
                let writes = ops
                    .iter()
                    .filter(|o| o.is_write() && o.ok && o.process == p)
                    .map(|o| (o.start, o.end))
                    .collect();
                (p, Superseders::new(writes))
            })
            .collect();

        let mut reads: Vec<&Op> = ops
            .iter()
            .copied()
            .filter(|o| o.action == Action::Read && o.ok)
            .collect();
        reads.sort_by_key(|r| r.end);
        // Per process: the latest start of the write behind any version it has returned so far
        // (reads taken in order of their ends).
        let mut seen_up_to: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
        let mut flagged = vec![false; reads.len()];
        let gone = GoneWrites::new(&made, ops.first().map_or(0, |o| o.table));
        for (i, &read) in reads.iter().enumerate() {
            let judged = gone.resolve(read);
            let broke = self.read(&judged, &made, &superseders, &seen_up_to);
            if let Some(rule) = broke {
                flagged[i] = true;
                self.count(rule, &judged, &made);
            }
            // A `None` sets no floor: the gone version it was judged as is the one most in its
            // favour, and may be newer than the tombstone it read.
            if read.version == GONE {
                continue;
            }
            if let Some(&(start, _)) = made.get(&read.version) {
                let seen = seen_up_to.entry(read.process).or_default();
                let latest = seen.last().map_or(0, |s| s.1).max(start);
                seen.push((read.end, latest));
            }
        }
        self.divergence(ops, &reads, &flagged);
        self.source_reads(ops);
    }

    /// The first rule `read` breaks, if any (`stale_after_write` may be excused by a fault).
    fn read(
        &mut self,
        read: &Op,
        made: &HashMap<u64, Made>,
        superseders: &HashMap<u32, Superseders>,
        seen_up_to: &HashMap<u32, Vec<(u64, u64)>>,
    ) -> Option<Rule> {
        let Some(&(made_start, made_end)) = made.get(&read.version) else {
            return Some(Rule::Phantom);
        };
        if made_start > read.end {
            return Some(Rule::Phantom);
        }
        if self.older_than_wanted(read, made) {
            return Some(Rule::AtLeast);
        }
        if let Some(at) = superseders
            .get(&read.process)
            .and_then(|s| s.superseded_at(made_end))
            && at < read.start
        {
            return Some(Rule::ReadYourWrites);
        }
        if let Some(seen) = seen_up_to.get(&read.process) {
            let before = seen.partition_point(|s| s.0 < read.start);
            if before > 0 && made_end < seen[before - 1].1 {
                return Some(Rule::NonMonotonic);
            }
        }
        let (superseded, writer) = superseders
            .iter()
            .filter(|(p, _)| **p != read.process)
            .filter_map(|(p, s)| s.superseded_at(made_end).map(|at| (at, *p)))
            .min()?;
        if superseded >= read.start {
            return None;
        }
        let lag = read.start - superseded;
        if self.excused_for(superseded, read.start, &[read.process, writer]) {
            self.findings.worst_staleness_under_faults_ns =
                self.findings.worst_staleness_under_faults_ns.max(lag);
            if lag > self.bounds.staleness {
                self.findings.excused_reads += 1;
            }
            return None;
        }
        if lag > self.findings.worst_staleness_ns {
            self.findings.worst_staleness_ns = lag;
            self.findings.stalest_read = Some((read.process, self.stale(read, writer, superseded)));
        }
        (lag > self.bounds.staleness).then_some(Rule::StaleAfterWrite)
    }

    /// Whether `read`, made `at_least` a version, returned an older one: below it where the
    /// table orders writes by their version, else one whose write ended before the wanted
    /// version's write began.
    fn older_than_wanted(&self, read: &Op, made: &HashMap<u64, Made>) -> bool {
        if read.at_least == 0 || read.version >= read.at_least {
            return false;
        }
        if super::tables::VERSIONED.get(usize::from(read.table)) != Some(&false) {
            return true;
        }
        match (made.get(&read.version), made.get(&read.at_least)) {
            (Some(&(_, got_end)), Some(&(wanted_start, _))) => got_end < wanted_start,
            _ => true,
        }
    }

    /// Whether a fault excuses a read by `who[0]` that missed a write by one of the others in
    /// `who`: a fault done to some processes only (a freeze, a replacement, a proxied link)
    /// excuses it only if one of them is among them. A process that misses another's write
    /// while neither was touched has no excuse in a fault done elsewhere.
    ///
    /// A frozen process that woke answers nothing from L1 until its tracking task has caught up
    /// (the vouch, docs/coherence.md): its own reads begun after it woke have no excuse in the
    /// freeze, though the others' reads of what it wrote keep the grace.
    fn excused_for(&self, since: u64, until: u64, who: &[u32]) -> bool {
        self.faults.iter().any(|f| {
            let woke = f.name == FREEZE && f.processes.contains(&who[0]) && until > f.end;
            (f.processes.is_empty() || who.iter().any(|p| f.processes.contains(p)))
                && !woke
                && self.excuses_between(f, since, until)
        })
    }

    /// Whether `f` excuses missing what happened at `since` until `until`: it began no more
    /// than `B` after `since`, and its grace had not run out at `until`.
    fn excuses_between(&self, f: &FaultSpan, since: u64, until: u64) -> bool {
        f.excuses.effects()
            && since.saturating_add(self.bounds.staleness) >= f.start
            && until <= f.end.saturating_add(self.bounds.fault_grace)
    }

    /// The `divergent` rule: after each group of overlapping writes, the reads of the quiet
    /// stretch agree. `reads` are in the order of their ends, so each stretch's reads are found
    /// by bisection: a long run's history is checked in time linear in its reads, not in its
    /// reads times its writes.
    fn divergence(&mut self, ops: &[&Op], reads: &[&Op], flagged: &[bool]) {
        let mut writes: Vec<&Op> = ops.iter().copied().filter(|o| o.is_write()).collect();
        writes.sort_by_key(|w| w.start);
        let loads: Vec<&Op> = ops
            .iter()
            .copied()
            .filter(|o| o.action == Action::Load)
            .collect();
        let mut groups: Vec<Group> = Vec::new();
        for w in writes {
            match groups.last_mut() {
                Some(g) if w.start <= g.end => {
                    g.end = g.end.max(w.end);
                    g.top = g.top.max(w.version);
                    g.writers.push(w.process);
                }
                _ => groups.push(Group {
                    start: w.start,
                    end: w.end,
                    top: w.version,
                    writers: vec![w.process],
                }),
            }
        }
        let table = ops.first().map_or(0, |o| o.table);
        let fresh_for = self.bounds.shortest_fresh_for(table);
        for (i, g) in groups.iter().enumerate() {
            let from = g.end + self.bounds.staleness;
            let next = groups.get(i + 1).map_or(u64::MAX, |n| n.start);
            let to = next.min(g.start + fresh_for);
            // Each schema settles on its own: a late put of an older row lands in its schema's
            // copy, while the copies it drops in the others are loaded from the source, which a
            // write of the same group already moved on (docs/consistency.md, "Schemas").
            let schemas = self.bounds.schemas.max(1);
            for schema in 0..schemas {
                let quiet: Vec<usize> = ending_within(reads, from, to)
                    .filter(|&r| reads[r].process % schemas == schema)
                    .filter(|&r| !flagged[r] && reads[r].start > from && reads[r].end < to)
                    .collect();
                // Until a load of the group's newest version: another schema's fill drops this
                // schema's older copy, and a read that must see at least that version drops an
                // older copy and loads it; the schema may then move up to it. Which load did is
                // not in the history (one whose lock a write of the group dropped writes, and
                // drops, nothing): any of them may be the move.
                let moves: Vec<u64> = loads
                    .iter()
                    .filter(|l| l.version == g.top)
                    .filter(|l| l.start >= g.start && l.end < to)
                    .map(|l| l.end)
                    .collect();
                self.agree_around(&quiet, reads, g, &moves);
            }
        }
    }

    /// The quiet reads `quiet` (of `reads`) after the group of writes `g` agree:
    /// those that ended before a load of the group's newest version ended (one of `moves`, the
    /// one around which the fewest disagree), and those from `B` after it. A read under way when
    /// that load ended may have taken either version (it may be the read that made the load, or
    /// one that joined it).
    fn agree_around(&mut self, quiet: &[usize], reads: &[&Op], g: &Group, moves: &[u64]) {
        let split = |moved: u64| {
            let settled_by = moved.saturating_add(self.bounds.staleness);
            let before: Vec<usize> = quiet
                .iter()
                .copied()
                .filter(|&r| reads[r].end < moved)
                .collect();
            let after: Vec<usize> = quiet
                .iter()
                .copied()
                .filter(|&r| reads[r].start > settled_by)
                .collect();
            (before, after)
        };
        let best = moves.iter().copied().min_by_key(|&moved| {
            let (before, after) = split(moved);
            self.disagreeing(&before, reads, g) + self.disagreeing(&after, reads, g)
        });
        let Some(moved) = best else {
            return self.agree(quiet, reads, g);
        };
        let (before, after) = split(moved);
        self.agree(&before, reads, g);
        self.agree(&after, reads, g);
    }

    /// Whether a fault excuses `read`, in a quiet stretch after the group of writes `g`, for
    /// differing from the fleet: one done to the whole fleet, to the reader or to a writer of
    /// the group, as for a stale read ([`Run::excused_for`]). A fault done to other processes
    /// cannot have kept the copy it answered from.
    fn excused_after(&self, g: &Group, read: &Op) -> bool {
        let who: Vec<u32> = std::iter::once(read.process)
            .chain(g.writers.iter().copied())
            .collect();
        self.excused_for(g.end, read.start, &who)
    }

    /// How many of `quiet` (of `reads`) [`agree`](Self::agree) would find differing, excused
    /// or not.
    fn disagreeing(&self, quiet: &[usize], reads: &[&Op], g: &Group) -> usize {
        let judged = quiet
            .iter()
            .map(|&r| reads[r])
            .filter(|r| !self.excused_after(g, r));
        settled_version(judged).map_or(0, |settled| {
            quiet
                .iter()
                .filter(|&&r| reads[r].version != settled)
                .count()
        })
    }

    /// The quiet reads `quiet` (of `reads`) after the group of writes `g` agree. A read a
    /// fault excuses ([`Run::excused_after`]) settles nothing (its process may still hold what
    /// it took while the fault lasted), and differing from the rest it is counted as excused.
    fn agree(&mut self, quiet: &[usize], reads: &[&Op], g: &Group) {
        let judged = quiet
            .iter()
            .map(|&r| reads[r])
            .filter(|r| !self.excused_after(g, r));
        let Some(settled) = settled_version(judged) else {
            return;
        };
        for &r in quiet {
            let read = reads[r];
            if read.version == settled {
                continue;
            }
            if self.excused_after(g, read) {
                self.findings.excused_reads += 1;
            } else {
                self.count_divergent(read, settled);
            }
        }
    }

    /// The one-read rule over the loads of one id.
    fn source_reads(&mut self, ops: &[&Op]) {
        let mut loads: Vec<&Op> = ops
            .iter()
            .copied()
            .filter(|o| o.action == Action::Load)
            .collect();
        loads.sort_by_key(|l| l.start);
        self.findings.source_reads += loads.len() as u64;
        let setters = covering::Setters::new(ops);
        // A `None` shows no version, so a read that must see at least one drops Valkey's copy
        // of its schema and reads the source unless its own flight loaded it (`at_least`'s
        // `recent_enough`): a load by design, made by whichever process of the schema takes the
        // lock first after the drop. The drop is recorded nowhere; the read's span bounds it.
        let asked: Vec<&Op> = (ops.iter().copied())
            .filter(|o| o.action == Action::Read && o.at_least > 0 && o.version == GONE)
            .collect();
        let schemas = self.bounds.schemas.max(1);
        for load in loads {
            let by_asking = |r: &&Op| {
                r.process % schemas == load.process % schemas
                    && r.start <= load.start
                    && load.start <= r.end
            };
            if asked.iter().any(by_asking) {
                continue;
            }
            let Some(set) = setters.covering(load, &self.bounds) else {
                continue;
            };
            if self.excused_since(set.start, load.start, Excuses::effects) {
                self.findings.excused_source_reads += 1;
            } else {
                let what = if set.action == Action::Load {
                    "load"
                } else {
                    "put"
                };
                // The write before the setter: a clear or a tag invalidated just before it (an
                // invalidate of many ids at once) is where a process that heard of it late stamps
                // below it.
                let before = (ops.iter())
                    .filter(|w| w.is_write() && w.end <= set.start)
                    .max_by_key(|w| w.end)
                    .map_or(String::new(), |w| {
                        format!(
                            " (after p{}'s {:?} ended at {})",
                            w.process,
                            w.action,
                            self.at(w.end)
                        )
                    });
                // When its flight may have begun: a log with no history left still tells a
                // process held up after its lock from a flight that ignored a copy.
                let waiting = setters.waiting_since(load).map_or(String::new(), |since| {
                    format!(
                        ", p{}'s read waiting since {}",
                        load.process,
                        self.at(since)
                    )
                });
                let why = format!(
                    "load by {} while p{}'s {what} of v{} at {} was fresh{before}{waiting}",
                    self.who(load),
                    set.process,
                    set.version,
                    self.at(set.end),
                );
                self.tally(Rule::ExtraSourceRead, why);
            }
        }
    }

    /// Calls that failed: an id left out of a batch's answer under any fault (a fault may fail an
    /// answer, never drop it), any other failure only where a fault (with its grace) overlapped
    /// the call. Every id of the check exists at the source, the source never fails, and a
    /// declined answer (a placeholder, `LockBusy`) is not recorded: with Valkey healthy a call
    /// has no reason to fail.
    fn failed_calls(&mut self, ops: &[Op]) {
        for op in ops.iter().filter(|o| !o.ok) {
            if op.origin == LEFT_OUT {
                let why = format!("{} was {LEFT_OUT}", self.who(op));
                self.tally(Rule::LostAnswer, why);
            } else if !self.excused_since(op.start, op.end, Excuses::failed_calls) {
                let why = format!(
                    "{:?} by {}..{} failed with no fault on: {}",
                    op.action,
                    self.who(op),
                    self.at(op.end),
                    op.origin
                );
                self.tally(Rule::FailedCall, why);
            }
        }
    }

    /// Whether a fault that excuses what `by` asks overlapped the stretch from `since` to
    /// `until` (with its grace).
    fn excused_since(&self, since: u64, until: u64, by: fn(Excuses) -> bool) -> bool {
        self.faults
            .iter()
            .filter(|f| by(f.excuses))
            .any(|f| f.start <= until && f.end.saturating_add(self.bounds.fault_grace) >= since)
    }

    fn count(&mut self, rule: Rule, read: &Op, made: &HashMap<u64, Made>) {
        let written = match made.get(&read.version) {
            Some(&(_, end)) => format!("written by {}", self.at(end)),
            None => "never written".to_owned(),
        };
        let why = format!(
            "read by {}..{} ({}) returned {} ({written})",
            self.who(read),
            self.at(read.end),
            how(read),
            shown(read),
        );
        self.tally(rule, why);
    }

    /// A read that returned a version `writer`'s write had superseded at `superseded`.
    fn stale(&self, read: &Op, writer: u32, superseded: u64) -> String {
        format!(
            "read by {}..{} ({}) returned {}, {:.1} ms after p{writer}'s newer write ended at {}",
            self.who(read),
            self.at(read.end),
            how(read),
            shown(read),
            read.start.saturating_sub(superseded) as f64 / 1e6,
            self.at(superseded),
        )
    }

    fn count_divergent(&mut self, read: &Op, settled: u64) {
        let why = format!(
            "read by {} ({}) returned {} where the others settled on {}",
            self.who(read),
            how(read),
            shown(read),
            shown_version(settled),
        );
        self.tally(Rule::Divergent, why);
    }

    /// Counts one violation of `rule`, and describes it while the rule has few examples.
    fn tally(&mut self, rule: Rule, why: String) {
        let v = &mut self.findings.violations;
        match rule {
            Rule::Phantom => v.phantom += 1,
            Rule::AtLeast => v.at_least += 1,
            Rule::ReadYourWrites => v.read_your_writes += 1,
            Rule::NonMonotonic => v.non_monotonic += 1,
            Rule::StaleAfterWrite => v.stale_after_write += 1,
            Rule::Divergent => v.divergent += 1,
            Rule::ExtraSourceRead => v.extra_source_reads += 1,
            Rule::LostAnswer => v.lost_answer += 1,
            Rule::FailedCall => v.failed_call += 1,
        }
        self.describe(rule, why);
    }

    /// An operation's process, table (with the L1 it keeps there), id and start, for a
    /// description.
    fn who(&self, op: &Op) -> String {
        let losers = match super::tables::losers(op.process, op.table) {
            echostore::LoserPolicy::ServeStale => ", serves stale",
            echostore::LoserPolicy::Default(_) => ", answers a placeholder",
            echostore::LoserPolicy::FailFast => ", fails fast",
            _ => "",
        };
        let fail_safe = match super::tables::fail_safe(op.process, op.table) {
            true => ", fail-safe",
            false => "",
        };
        format!(
            "p{} of t{} ({} L1{losers}{fail_safe}) id {} at {}",
            op.process,
            op.table,
            super::tables::L1::of(op.process, op.table).name(),
            op.id,
            self.at(op.start)
        )
    }

    fn describe(&mut self, rule: Rule, why: String) {
        let n = self.described.entry(rule.name()).or_default();
        if *n < EXAMPLES_PER_RULE {
            *n += 1;
            self.findings
                .examples
                .push(format!("{}: {why}", rule.name()));
        }
    }

    /// A moment of the run, in seconds from its first operation.
    fn at(&self, ns: u64) -> String {
        format!("{:.3} s", ns.saturating_sub(self.origin) as f64 / 1e9)
    }
}

/// How a read was answered, for a description: its origin, and whether it was one id of a batch.
fn how(read: &Op) -> String {
    match read.batch {
        true => format!("{}, batch", read.origin),
        false => read.origin.clone(),
    }
}

/// A read's version for a description: `None` for a row gone at the source, with the gone
/// version it was judged as.
fn shown(read: &Op) -> String {
    match is_gone(read.table, read.version) {
        true => format!("None (judged as v{})", read.version),
        false => shown_version(read.version),
    }
}

fn shown_version(version: u64) -> String {
    match version {
        GONE => "None".to_owned(),
        v => format!("v{v}"),
    }
}

/// The writes of one id that made a version that is a row gone at the source, for judging reads
/// that answered `None` ([`GONE`]): such a read names no version, and is judged as the gone
/// version most in its favour. That is one whose write began before the read ended (else it is
/// `phantom`), at least what the read had to see, and of those the one whose write ended last:
/// every other rule compares that end with what superseded it or what was seen before, so a
/// later end never breaks a rule an earlier one keeps.
struct GoneWrites {
    /// By the start of their write: the version, and the end of its write.
    by_start: Vec<(u64, u64, u64)>,
    /// For each prefix of `by_start`, the position of its latest-ending write.
    latest_end: Vec<usize>,
}

impl GoneWrites {
    fn new(made: &HashMap<u64, Made>, table: u8) -> GoneWrites {
        let mut by_start: Vec<(u64, u64, u64)> = made
            .iter()
            .filter(|(v, _)| is_gone(table, **v))
            .map(|(v, m)| (m.0, *v, m.1))
            .collect();
        by_start.sort_unstable();
        let mut latest_end: Vec<usize> = Vec::with_capacity(by_start.len());
        for (i, w) in by_start.iter().enumerate() {
            let best = match latest_end.last() {
                Some(&b) if by_start[b].2 >= w.2 => b,
                _ => i,
            };
            latest_end.push(best);
        }
        GoneWrites {
            by_start,
            latest_end,
        }
    }

    /// `read` with the version it is judged as: its own, or for a `None` the gone version most
    /// in its favour (left [`GONE`], never written, when there is none: `phantom`).
    fn resolve<'a>(&self, read: &'a Op) -> std::borrow::Cow<'a, Op> {
        use std::borrow::Cow;
        if read.version != GONE {
            return Cow::Borrowed(read);
        }
        let began = self.by_start.partition_point(|w| w.0 <= read.end);
        let best = if read.at_least > 0 {
            // Few reads must see a version: a scan of the candidates for them alone.
            (self.by_start[..began].iter())
                .filter(|w| w.1 >= read.at_least)
                .max_by_key(|w| w.2)
                .or_else(|| self.by_start[..began].iter().max_by_key(|w| w.2))
        } else {
            began
                .checked_sub(1)
                .map(|last| &self.by_start[self.latest_end[last]])
        };
        match best {
            Some(&(_, version, _)) => Cow::Owned(Op {
                version,
                ..read.clone()
            }),
            None => Cow::Borrowed(read),
        }
    }
}

/// The positions in `reads` (in the order of their ends) of the reads that ended after `from`
/// and before `to`: every read that began after `from` and ended before `to` is among them.
fn ending_within(reads: &[&Op], from: u64, to: u64) -> std::ops::Range<usize> {
    let first = reads.partition_point(|r| r.end <= from);
    first..reads.partition_point(|r| r.end < to).max(first)
}

/// A group of overlapping writes of one id: when it began and ended, and the newest version
/// it wrote (what the source holds after it).
struct Group {
    start: u64,
    end: u64,
    top: u64,
    /// The processes whose writes make the group.
    writers: Vec<u32>,
}

/// The version the fleet settled on in a quiet stretch: the one the most processes returned,
/// then the one returned most often.
fn settled_version<'a>(reads: impl Iterator<Item = &'a Op>) -> Option<u64> {
    let mut by_version: HashMap<u64, (Vec<u32>, usize)> = HashMap::new();
    for r in reads {
        let entry = by_version.entry(r.version).or_default();
        if !entry.0.contains(&r.process) {
            entry.0.push(r.process);
        }
        entry.1 += 1;
    }
    by_version
        .into_iter()
        .max_by_key(|(v, (processes, n))| (processes.len(), *n, *v))
        .map(|(v, _)| v)
}

mod covering;
#[cfg(test)]
mod tests;
