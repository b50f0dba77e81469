//! Figures for an operator beside the verdict, which no rule judges: how hard the fleet read its
//! source while Valkey was away (against the rate outside faults), and how long after a write
//! that failed (the source moved, the cache was not told) some process still read an older
//! version of the id.

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
        let spans = [FaultSpan {
            excuses: true,
            name: "outage".to_owned(),
            start: 1_000_000_000,
            end: 2_000_000_000,
        }];
        let f = figures(&ops, &spans);
        assert_eq!(f.source_reads_per_s_during_outages, Some(2.0));
        assert!((f.source_reads_per_s_outside_faults - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(f.stale_after_failed_writes_ms, 500.0);
    }
}
