//! The one-read rule's search: which earlier load or put of an id still covered a load of it
//! (its value fresh, no write in between that could have dropped it). The searches are
//! bisections over sorted arrays, so a long run's history is checked in time near linear in its
//! operations rather than in loads times writes.

use std::collections::HashMap;

use super::{ABSENT, Action, Bounds, Op};

/// The successful loads and puts of one id (the operations that set its value), and every write
/// of it, arranged for [`Setters::covering`].
pub(super) struct Setters<'a> {
    /// Loads and puts, by start.
    by_start: Vec<&'a Op>,
    /// The longest any of them took: how far back a setter can still have ended late.
    longest: u64,
    writes: Writes<'a>,
    reads: Reads,
}

impl<'a> Setters<'a> {
    pub(super) fn new(ops: &[&'a Op]) -> Self {
        let mut by_start: Vec<&Op> = ops
            .iter()
            .copied()
            // A load whose row was left out cached nothing ([`ABSENT`]).
            .filter(|o| o.ok && matches!(o.action, Action::Load | Action::Put))
            .filter(|o| o.origin != ABSENT)
            .collect();
        by_start.sort_by_key(|s| s.start);
        let longest = by_start.iter().map(|s| s.end.saturating_sub(s.start)).max();
        Setters {
            by_start,
            longest: longest.unwrap_or(0),
            writes: Writes::new(ops),
            reads: Reads::new(ops),
        }
    }

    /// The latest setter that began before `load` and whose value `load` should have found: of
    /// the load's schema, a load or a put that ended more than `B` before it, still fresh when
    /// it began (and, for a load, not yet in its early-refresh window: [`Bounds::early_by`]), and
    /// no other write begun before it that ended after the setter began (less `B`).
    ///
    /// A load's flight took its lock, and a put began, up to `B` before the times on record: a
    /// write that ended within `B` before a load began may have dropped that load's lock (and its
    /// value with it), and a put that ended within `B` before a load began may have landed after
    /// the load's flight found nothing. A flight's lock may be older still when its process was
    /// held up between the lock and the loader (a machine short of cores): a read of the
    /// process's own that was waiting when the load began may have started the flight, so a put
    /// must also have ended `B` before the earliest of those began.
    pub(super) fn covering(&self, load: &Op, bounds: &Bounds) -> Option<&'a Op> {
        let schemas = bounds.schemas.max(1);
        let b = bounds.staleness;
        let decided = self.waiting_since(load).unwrap_or(load.start);
        let earlier = self.by_start.partition_point(|s| s.start < load.start);
        self.by_start[..earlier]
            .iter()
            .rev()
            // Earlier still, none can have ended within a fresh life (the longest) of the load.
            .take_while(|set| {
                let latest_end = set.start.saturating_add(self.longest);
                load.start < latest_end.saturating_add(bounds.fresh_for)
            })
            .find(|set| {
                !std::ptr::eq(**set, load)
                    && set.process % schemas == load.process % schemas
                    && (set.action == Action::Load || set.end.saturating_add(b) < decided)
                    && load.start
                        < (set.end.saturating_add(bounds.fresh_for_of(set)))
                            .saturating_sub(bounds.early_by(set))
                    && self
                        .writes
                        .latest_end_before(load.start, set)
                        .is_none_or(|end| end.saturating_add(b) <= set.start)
            })
            .copied()
    }

    /// The start of the earliest read of `load`'s process that began before `load` and had not
    /// ended when it began: the read that may have begun its flight.
    pub(super) fn waiting_since(&self, load: &Op) -> Option<u64> {
        self.reads.earliest_waiting(load)
    }
}

/// The reads of one id, per process by start, with the latest end among the reads up to each:
/// the earliest start of a read still waiting at a moment, in one bisection.
struct Reads {
    by_process: HashMap<u32, Vec<(u64, u64)>>,
}

impl Reads {
    fn new(ops: &[&Op]) -> Self {
        let mut by_process: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
        for read in ops.iter().filter(|o| o.action == Action::Read) {
            let spans = by_process.entry(read.process).or_default();
            spans.push((read.start, read.end));
        }
        for spans in by_process.values_mut() {
            spans.sort_unstable();
            let mut latest = 0;
            for span in spans.iter_mut() {
                latest = latest.max(span.1);
                span.1 = latest;
            }
        }
        Reads { by_process }
    }

    /// The start of the earliest read of `load`'s process that began before `load` and had not
    /// ended when it began.
    fn earliest_waiting(&self, load: &Op) -> Option<u64> {
        let spans = self.by_process.get(&load.process)?;
        // The latest ends only grow: the first read whose running latest end reaches the load's
        // start is the earliest begun of those still waiting then.
        let first = spans.partition_point(|&(_, latest)| latest < load.start);
        let (start, _) = spans.get(first)?;
        (*start <= load.start).then_some(*start)
    }
}

/// The writes of one id by start, with the two latest ends among the writes up to each: the
/// latest end of a write begun before a moment, leaving one write out, in one bisection.
struct Writes<'a> {
    starts: Vec<u64>,
    latest_two: Vec<[Option<(u64, &'a Op)>; 2]>,
}

impl<'a> Writes<'a> {
    fn new(ops: &[&'a Op]) -> Self {
        let mut writes: Vec<&Op> = ops.iter().copied().filter(|o| o.is_write()).collect();
        writes.sort_by_key(|w| w.start);
        let mut top: [Option<(u64, &Op)>; 2] = [None, None];
        let latest_two = writes
            .iter()
            .map(|w| {
                let entry = Some((w.end, *w));
                if top[0].is_none_or(|(end, _)| w.end > end) {
                    top = [entry, top[0]];
                } else if top[1].is_none_or(|(end, _)| w.end > end) {
                    top[1] = entry;
                }
                top
            })
            .collect();
        Writes {
            starts: writes.iter().map(|w| w.start).collect(),
            latest_two,
        }
    }

    /// The latest end among the writes begun before `before`, `except` left out.
    fn latest_end_before(&self, before: u64, except: &Op) -> Option<u64> {
        let n = self.starts.partition_point(|&s| s < before);
        let top = self.latest_two.get(n.checked_sub(1)?)?;
        top.iter()
            .flatten()
            .find(|(_, w)| !std::ptr::eq(*w, except))
            .map(|(end, _)| *end)
    }
}
