//! Figures for an operator beside the verdict, which no rule judges: how hard the fleet read its
//! source while Valkey was away (against the rate outside faults), how long after a write
//! that failed (the source moved, the cache was not told) some process still read an older
//! version of the id, and how long after each fault the workers were back to normal
//! ([`recovery_ns`]).

use std::collections::HashMap;

use serde::Serialize;

use super::history::{Action, FaultSpan, Op};

/// The figures of one run.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Figures {
    /// Source reads per second while no fault was on.
    pub(crate) source_reads_per_s_outside_faults: f64,
    /// Source reads per second while an `outage` fault had Valkey down; `None` without one.
    pub(crate) source_reads_per_s_during_outages: Option<f64>,
    /// The longest from a failed write's return to a read (by any process, before the id's next
    /// write) that answered an older version than the failed write's.
    pub(crate) stale_after_failed_writes_ms: f64,
}

/// The figures of the history `ops` with faults `spans`.
pub(crate) fn figures(ops: &[Op], spans: &[FaultSpan]) -> Figures {
    let (Some(first), Some(last)) = (
        ops.iter().map(|o| o.start).min(),
        ops.iter().map(|o| o.end).max(),
    ) else {
        return Figures::default();
    };
    let within = |at: u64, name: Option<&str>| {
        spans
            .iter()
            .filter(|s| name.is_none_or(|n| s.name == n))
            .any(|s| (s.start..=s.end).contains(&at))
    };
    let length = |name: Option<&str>| -> u64 {
        spans
            .iter()
            .filter(|s| name.is_none_or(|n| s.name == n))
            .map(|s| s.end.saturating_sub(s.start))
            .sum()
    };
    let loads = ops.iter().filter(|o| o.action == Action::Load);
    let outside = loads.clone().filter(|o| !within(o.start, None)).count();
    let outside_ns = (last - first).saturating_sub(length(None));
    let outage_ns = length(Some("outage"));
    let during = loads.filter(|o| within(o.start, Some("outage"))).count();
    Figures {
        source_reads_per_s_outside_faults: per_second(outside, outside_ns),
        source_reads_per_s_during_outages: (outage_ns > 0).then(|| per_second(during, outage_ns)),
        stale_after_failed_writes_ms: stale_after_failed_writes(ops) as f64 / 1e6,
    }
}

/// A read that took longer than this is not yet back to normal, for [`recovery_ns`].
pub(crate) const SLOW_READ_NS: u64 = 500_000_000;

/// Per fault of `spans` (in the order injected), how long after it was over
/// ([`FaultSpan::over`]: the cluster serving every slot again, the pause over, the link healed)
/// the workers were back to normal: the end of the last call that failed, or read that took over
/// [`SLOW_READ_NS`], among those that began after the fault was over and ended before the next
/// fault began (a call the next fault held up is that fault's), less the moment it was over; 0
/// if there was none. A read that must see at least a version is slow by design when it meets a
/// `None` another process wrote (it waits out the puts sent before it began: docs/guide.md), so
/// only its failure counts.
pub(crate) fn recovery_ns(ops: &[Op], spans: &[FaultSpan]) -> Vec<u64> {
    spans
        .iter()
        .enumerate()
        .map(|(i, span)| {
            let over = span.over();
            let next = spans.get(i + 1).map_or(u64::MAX, |s| s.start);
            ops.iter()
                .filter(|o| o.action != Action::Load && o.start >= over && o.end < next)
                .filter(|o| {
                    !o.ok
                        || (o.action == Action::Read
                            && o.at_least == 0
                            && o.end.saturating_sub(o.start) > SLOW_READ_NS)
                })
                .map(|o| o.end.saturating_sub(over))
                .max()
                .unwrap_or(0)
        })
        .collect()
}

fn per_second(count: usize, ns: u64) -> f64 {
    if ns == 0 {
        0.0
    } else {
        count as f64 / (ns as f64 / 1e9)
    }
}

/// The longest lag, in ns, from a failed write's return to a read of the id that began after it,
/// before the id's next write began, and answered an older version.
fn stale_after_failed_writes(ops: &[Op]) -> u64 {
    let mut by_id: HashMap<(u8, u32), Vec<&Op>> = HashMap::new();
    for op in ops {
        by_id.entry((op.table, op.id)).or_default().push(op);
    }
    by_id
        .values()
        .map(|ops| stale_after_failed_writes_of(ops))
        .max()
        .unwrap_or(0)
}

/// [`stale_after_failed_writes`] over the operations of one id, by bisection over its writes'
/// and reads' starts: a long run's history is read in time near linear in its length.
fn stale_after_failed_writes_of(ops: &[&Op]) -> u64 {
    let mut write_starts: Vec<u64> = ops
        .iter()
        .filter(|o| o.is_write())
        .map(|o| o.start)
        .collect();
    write_starts.sort_unstable();
    let mut reads: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|o| o.action == Action::Read && o.ok)
        .collect();
    reads.sort_by_key(|r| r.start);
    let mut worst = 0;
    for failed in ops.iter().filter(|o| o.is_write() && !o.ok) {
        let next = write_starts.partition_point(|&s| s <= failed.end);
        let next_write = write_starts.get(next).copied().unwrap_or(u64::MAX);
        let first = reads.partition_point(|r| r.start <= failed.end);
        let past = reads.partition_point(|r| r.start < next_write).max(first);
        // The latest older read of the stretch is the longest lag.
        if let Some(read) = reads[first..past]
            .iter()
            .rev()
            .find(|r| r.version < failed.version)
        {
            worst = worst.max(read.start - failed.end);
        }
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(action: Action, process: u32, version: u64, ok: bool, start_ms: u64, end_ms: u64) -> Op {
        Op {
            process,
            table: 0,
            id: 0,
            action,
            version,
            ok,
            origin: String::new(),
            batch: false,
            at_least: 0,
            start: start_ms * 1_000_000,
            end: end_ms * 1_000_000,
        }
    }

    /// Source reads are counted per second inside and outside the outage; an older version read
    /// after a failed put counts until the id's next write.
    #[test]
    fn rates_and_the_lag_after_a_failed_write() {
        let ops = vec![
            op(Action::Load, 0, 1, true, 0, 1),
            op(Action::Load, 0, 1, true, 1_500, 1_501),
            op(Action::Load, 1, 1, true, 1_600, 1_601),
            op(Action::Put, 0, 2, false, 1_700, 1_800),
            op(Action::Read, 1, 1, true, 1_900, 1_901),
            op(Action::Read, 1, 1, true, 2_300, 2_301),
            op(Action::Put, 0, 3, true, 2_400, 2_410),
            op(Action::Read, 1, 1, true, 2_500, 2_501), // after the next write: not counted here
            op(Action::Load, 0, 3, true, 3_999, 4_000),
        ];
        let spans = [FaultSpan::new("outage", 1_000_000_000, 2_000_000_000)];
        let f = figures(&ops, &spans);
        assert_eq!(f.source_reads_per_s_during_outages, Some(2.0));
        assert!((f.source_reads_per_s_outside_faults - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(f.stale_after_failed_writes_ms, 500.0);
    }

    /// The lag after failed writes, by bisection per id, is what a scan of every operation for
    /// every failed write finds (the scan, kept here as the oracle), over random histories of
    /// a few ids.
    #[test]
    fn the_lag_after_failed_writes_is_what_a_full_scan_finds() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(32);
        let actions = [
            Action::Read,
            Action::Read,
            Action::Put,
            Action::Invalidate,
            Action::Load,
        ];
        for _ in 0..300 {
            let ops: Vec<Op> = (0..rng.random_range(1..120))
                .map(|_| {
                    let start = rng.random_range(0..5_000);
                    let action = actions[rng.random_range(0..actions.len())];
                    let version = rng.random_range(0..20);
                    let mut made = op(action, 0, version, rng.random_bool(0.7), start, start);
                    made.end += rng.random_range(0..3) * 1_000_000;
                    (made.table, made.id) = (rng.random_range(0..2), rng.random_range(0..3));
                    made
                })
                .collect();
            assert_eq!(stale_after_failed_writes(&ops), lag_by_scan(&ops));
        }
    }

    fn lag_by_scan(ops: &[Op]) -> u64 {
        let mut worst = 0;
        for failed in ops.iter().filter(|o| o.is_write() && !o.ok) {
            let same = |o: &&Op| o.table == failed.table && o.id == failed.id;
            let next_write = ops
                .iter()
                .filter(same)
                .filter(|o| o.is_write() && o.start > failed.end)
                .map(|o| o.start)
                .min()
                .unwrap_or(u64::MAX);
            let lag = ops
                .iter()
                .filter(same)
                .filter(|o| o.action == Action::Read && o.ok && o.version < failed.version)
                .filter(|o| o.start > failed.end && o.start < next_write)
                .map(|o| o.start - failed.end)
                .max()
                .unwrap_or(0);
            worst = worst.max(lag);
        }
        worst
    }

    /// Recovery runs from a fault's end (or its healing) to the end of the last failed call or
    /// slow read begun after it, and stops at the next fault: a call it held up is its own.
    #[test]
    fn recovery_ends_with_the_last_failure_after_the_fault() {
        let ops = vec![
            op(Action::Put, 0, 1, false, 900, 1_100), // began during the fault: not counted
            op(Action::Read, 1, 1, false, 1_200, 1_300),
            op(Action::Read, 1, 1, true, 1_400, 2_000), // 600 ms: slow
            op(Action::Read, 1, 1, true, 2_100, 2_150),
            Op {
                at_least: 1, // waits by design: not counted
                ..op(Action::Read, 1, 1, true, 2_100, 3_700)
            },
            op(Action::Load, 1, 1, true, 2_200, 3_000), // a load is no call
            op(Action::Read, 1, 1, false, 4_900, 5_100), // the next fault held it up
            op(Action::Read, 1, 1, false, 5_100, 5_200), // during the next fault's window
            op(Action::Read, 1, 1, true, 7_000, 7_100),
        ];
        let ms = |n: u64| n * 1_000_000;
        let healed = FaultSpan {
            healed: Some(ms(1_000)),
            ..FaultSpan::new("kill-primary", ms(500), ms(1_800))
        };
        let spans = [healed, FaultSpan::new("failover", ms(5_000), ms(6_000))];
        assert_eq!(recovery_ns(&ops, &spans), vec![ms(1_000), 0]);
        let spans = [FaultSpan::new("pause-primary", ms(500), ms(1_000))];
        assert_eq!(recovery_ns(&ops, &spans), vec![ms(4_200)]);
    }
}
