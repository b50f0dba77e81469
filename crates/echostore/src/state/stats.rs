//! The table's counters: atomics inside, a plain [`TableStats`] snapshot outside.
//!
//! The L1 hit counter is bumped on every hit by every caller thread: it has a module of its own
//! ([`hit_counter`]). The other counters move on misses, fills and lock events, which already cost
//! a message or a round trip, so one padded block of plain atomics is enough.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crossbeam_utils::CachePadded;
use serde::Serialize;

mod hit_counter;

use hit_counter::HitCounter;

/// What a named figure of [`TableStats`] is, for the metrics export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Only grows.
    Counter,
    /// Read as it is now: goes up and down.
    Gauge,
}

/// One named figure of a snapshot, with the doc text of its field.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(
    not(feature = "metrics"),
    allow(
        dead_code,
        reason = "the kind and the text are read by the metrics export"
    )
)]
pub(crate) struct Figure {
    /// The field name (`"source_reads"`).
    pub(crate) name: &'static str,
    pub(crate) value: u64,
    pub(crate) kind: Kind,
    /// The field's doc comment, one line.
    pub(crate) about: &'static str,
}

macro_rules! counters {
    (
        per_thread { $(#[doc = $hot_doc:literal])* $hot:ident, }
        counters { $( $(#[doc = $doc:literal])* $name:ident, )* }
        maxima { $( $(#[doc = $max_doc:literal])* $max:ident, )* }
        gauges { $( $(#[doc = $gauge_doc:literal])* $gauge:ident, )* }
    ) => {
        /// The non-hot counters and the maxima, one atomic each.
        #[derive(Default)]
        pub(crate) struct Counters {
            $( pub(crate) $name: AtomicU64, )*
            $( pub(crate) $max: AtomicU64, )*
        }

        /// A snapshot of one table's counters, from [`Table::stats`](crate::Table::stats).
        ///
        /// Counters only grow from the table's start; `in_flight`, `l1_len` and
        /// `connections_replaced` are read at snapshot time. Each counter is read on its own, so a snapshot taken while the table
        /// works may be a few events apart between counters; subtract two snapshots for rates.
        ///
        /// Reading them: the hit ratio is `(l1_hits + l2_hits) / (l1_hits + l2_hits +
        /// source_reads)`; `coalesced` counts misses that did not become source reads;
        /// `lock_won`/`lock_lost` say which process rebuilt keys; `stale_served`,
        /// `defaults_served`, `failed_fast`, `poll_waits` and `push_wakeups` are the loser
        /// policies at work; `errors`, `l2_errors`, `decode_errors` and `load_timeouts` are faults.
        ///
        /// Expected under races, never a sign of lost data: `fenced_write_skipped`,
        /// `release_skipped`, `writes_superseded` and `lease_lost`. They rise with how often
        /// writes and reads of the same ids overlap, across processes.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
        #[non_exhaustive]
        pub struct TableStats {
            $(#[doc = $hot_doc])* pub $hot: u64,
            $( $(#[doc = $doc])* pub $name: u64, )*
            $( $(#[doc = $max_doc])* pub $max: u64, )*
            $( $(#[doc = $gauge_doc])* pub $gauge: u64, )*
        }

        /// How many figures a snapshot names: counters, then gauges.
        pub(crate) const FIGURE_COUNT: usize =
            [stringify!($hot), $( stringify!($name), )* $( stringify!($max), )* $( stringify!($gauge), )*]
                .len();

        impl TableStats {
            /// Every counter and gauge as `(name, value)`, in declaration order: the names are the
            /// field names (`"l1_hits"`, `"source_reads"`, …), so reports and metrics never repeat
            /// the list by hand.
            pub fn counters(&self) -> [(&'static str, u64); FIGURE_COUNT] {
                self.figures().map(|f| (f.name, f.value))
            }

            /// Every figure with its kind and its field's doc text, in declaration order.
            pub(crate) fn figures(&self) -> [Figure; FIGURE_COUNT] {
                [
                    Figure {
                        name: stringify!($hot),
                        value: self.$hot,
                        kind: Kind::Counter,
                        about: concat!($($hot_doc),*),
                    },
                    $( Figure {
                        name: stringify!($name),
                        value: self.$name,
                        kind: Kind::Counter,
                        about: concat!($($doc),*),
                    }, )*
                    // A maximum is no count: exported as a gauge.
                    $( Figure {
                        name: stringify!($max),
                        value: self.$max,
                        kind: Kind::Gauge,
                        about: concat!($($max_doc),*),
                    }, )*
                    $( Figure {
                        name: stringify!($gauge),
                        value: self.$gauge,
                        kind: Kind::Gauge,
                        about: concat!($($gauge_doc),*),
                    }, )*
                ]
            }
        }

        impl std::ops::Add for TableStats {
            type Output = TableStats;

            /// The field-by-field sum of two snapshots (several tables or stores seen as one);
            /// of a maximum, the larger.
            fn add(self, other: TableStats) -> TableStats {
                TableStats {
                    $hot: self.$hot + other.$hot,
                    $( $name: self.$name + other.$name, )*
                    $( $max: self.$max.max(other.$max), )*
                    $( $gauge: self.$gauge + other.$gauge, )*
                }
            }
        }

        impl std::iter::Sum for TableStats {
            fn sum<I: Iterator<Item = TableStats>>(iter: I) -> TableStats {
                iter.fold(TableStats::default(), std::ops::Add::add)
            }
        }

        impl Stats {
            /// Reads every counter once; `l1_len` and `connections_replaced` come from the
            /// caller, which owns L1 and the store's connection.
            pub(crate) fn snapshot(&self, l1_len: u64, connections_replaced: u64) -> TableStats {
                let c = &self.counters;
                TableStats {
                    $hot: self.$hot.sum(),
                    $( $name: c.$name.load(Relaxed), )*
                    $( $max: c.$max.load(Relaxed), )*
                    in_flight: 0,
                    l1_len,
                    connections_replaced,
                }
            }
        }
    };
}

counters! {
    per_thread {
        /// Gets answered from this process's L1 without a miss.
        l1_hits,
    }
    counters {
    /// Reads answered by a fresh value found on Valkey: a caller's own read, a batch read's ids,
    /// or a flight's.
    l2_hits,
    /// Ids read from the source of truth: one per loader call, one per id of a batch loader call.
    source_reads,
    /// Callers that joined a flight already running for their id.
    coalesced,
    /// Regeneration locks this table won.
    lock_won,
    /// Regeneration locks this table found held by another fill.
    lock_lost,
    /// Answers served from a stale copy (serve-stale losers and fail-safe).
    stale_served,
    /// Answers that were the loser policy's default placeholder.
    defaults_served,
    /// Losers that failed fast with `LockBusy`.
    failed_fast,
    /// Sleeps of polling losers.
    poll_waits,
    /// Token-checked releases that deleted this fill's own lock.
    released,
    /// Token-checked releases that found another token (or none) and deleted nothing (expected
    /// when a `put` or `invalidate` dropped the lock mid-fill).
    release_skipped,
    /// Fenced writes refused because the lock no longer held this fill's token (expected when a
    /// `put` or `invalidate` overtakes a fill, or a lock expired while Valkey was away).
    fenced_write_skipped,
    /// Writes (puts and fenced writes) that found a value stamped ahead of Valkey's clock and
    /// changed nothing (such a put answers `Error::Superseded`).
    writes_superseded,
    /// Lease extensions of a winner's lock while its loader ran.
    lease_extended,
    /// Winners whose lease found the lock no longer theirs (a put or invalidate dropped it).
    lease_lost,
    /// Flights that ended in an error for their waiters.
    errors,
    /// Valkey operations of loads and writes that failed (refused, timed out, or skipped while
    /// the breaker is open): a fill's reads, lock calls and fenced writes, a loser's polls, a
    /// `put`, `invalidate`, `delete`, `invalidate_tag` or `clear`. A caller's own read of Valkey that fails is a miss that
    /// goes on to a flight, which counts its own.
    l2_errors,
    /// L2 values that did not decode (treated as misses).
    decode_errors,
    /// Loads cut off by the table's `load_timeout`.
    load_timeouts,
    /// Loader failures answered with a stale copy instead (fail-safe).
    fail_safe_served,
    /// Loads that outran the soft timeout: their waiters got the stale copy while the load went on.
    soft_timeouts,
    /// Times the supervisor restarted this table's owner after it crashed.
    owner_restarts,
    /// Invalidation pushes from Valkey (another process, a script or an expiry changed a value
    /// key) that reached this table, and under key tracking the confirmations that found a value
    /// key changed before it was tracked (each drops the id, as a push would).
    invalidations,
    /// Times this table's L1 was flushed: because a tracking connection of the store was
    /// re-established (invalidations may have been missed meanwhile; not counted for a table
    /// that held nothing), the database was flushed, or a push named a key its key type cannot
    /// parse back.
    coherence_flushes,
    /// Times a tracking connection of the store was lost and this table's L1 kept its entries
    /// for at most `unconfirmed_l1_life` from then on.
    coherence_caps,
    /// Polling losers woken by a push (the winner's write, or its lock going away) rather than
    /// by their safety poll.
    push_wakeups,
    /// Early refreshes (XFetch) started by a read in a value's last stretch.
    early_refreshes,
    /// Early refreshes whose load failed; the current value stayed until its freshness ended.
    early_refresh_failures,
    /// Batch reads (`get_many`, `fetch_many`) that had two or more ids to load: one flight group
    /// each (one id left to load goes as a `get` does).
    batches,
    /// Calls of the batch loader for a batch read (each also counts its ids in `source_reads`).
    /// A single id's load on a table with only a batch loader (a `get`, or a batch read with one
    /// id left to load) calls it with that id and counts as a source read, not here.
    batch_loads,
    /// Ids the batch loader was asked for: `batch_loaded_ids / batch_loads` ids per call.
    batch_loaded_ids,
    /// Clears and tag invalidations this table took in, its own or pushed from another process:
    /// each dropped from L1 what it covers.
    marks_taken,
    /// Copies read from Valkey that a clear or a tag invalidation had made a miss.
    marked_misses,
    /// Reads of the table's marks that failed. Each leaves a full read owed, retried until one
    /// lands (a mark set meanwhile is heard of then).
    marks_read_failures,
    /// L1 entries dropped because no read touched them for the table's `l1_idle`.
    l1_idle_evictions,
    /// Reloader calls that answered `Unchanged`: the copy's life renewed, no value rewritten.
    reloads_unchanged,
    /// Source reads that found the table's `source_budget` spent and waited for a lease (their
    /// callers took the stale copy or the placeholder meanwhile, where the loser policy gives one).
    budget_waits,
    /// Source reads that got no lease of the `source_budget` in time (or at once, failing fast):
    /// their callers got `Error::BudgetExhausted`.
    budget_exhausted,
    /// L1 hits the staleness audit (`audit_sample`) compared with a fresh copy on Valkey.
    audited_hits,
    /// Audited hits that served another value than Valkey held, written before the hit.
    stale_hits,
    }
    maxima {
    /// The largest staleness an audit found, ms: how long before the hit Valkey held the newer
    /// value (of several snapshots added, the largest).
    audit_max_staleness_ms,
    }
    gauges {
        /// Flights running or queued now, counted on the boards where they are (a miss's read of
        /// Valkey on its own task is not one). A flight has left the count before its callers
        /// have their answer.
        in_flight,
        /// Entries in L1 now (fresh or not yet evicted).
        l1_len,
        /// Times the store's data connection to Valkey was replaced by a new one because its calls
        /// kept failing while a new connection's did not (a cluster client that could not repair
        /// itself after a node restarted or failed over); the store's figure, not the table's.
        connections_replaced,
    }
}

/// All counters of one table.
pub(crate) struct Stats {
    /// Bumped on every L1 hit, each thread in a slot of its own.
    pub(crate) l1_hits: HitCounter,
    /// Kept off the hit counter's cache lines.
    pub(crate) counters: CachePadded<Counters>,
}

impl Stats {
    /// A table's counters, all zero.
    pub(crate) fn new() -> Self {
        Stats {
            l1_hits: HitCounter::new(),
            counters: CachePadded::new(Counters::default()),
        }
    }
}

/// Adds one to a counter: `bump(&c.lock_won)`.
#[inline]
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hits from many threads all land in the sum.
    #[test]
    fn hits_from_many_threads_all_land_in_the_sum() {
        let stats = Stats::new();
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| (0..1000).for_each(|_| stats.l1_hits.incr()));
            }
        });
        assert_eq!(stats.snapshot(0, 0).l1_hits, 8000);
    }

    /// The named list covers every field once, and the sum adds field by field.
    #[test]
    fn counters_are_named_once_and_summed() {
        let stats = Stats::new();
        bump(&stats.counters.source_reads);
        stats.l1_hits.incr();
        let one = stats.snapshot(3, 0);
        let two = one + one;
        let names: Vec<_> = two.counters().iter().map(|(n, _)| *n).collect();
        assert_eq!(names.first(), Some(&"l1_hits"));
        assert_eq!(names.last(), Some(&"connections_replaced"));
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "no name twice");
        let value = |n: &str| {
            two.counters()
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| *v)
        };
        assert_eq!(value("source_reads"), Some(2));
        assert_eq!(value("l1_hits"), Some(2));
        assert_eq!(value("l1_len"), Some(6));
        assert_eq!([one, one].into_iter().sum::<TableStats>(), two);
    }

    /// Snapshots added keep the larger of a maximum, not the sum, and export it as a gauge.
    #[test]
    fn a_maximum_is_kept_not_summed() {
        let (a, b) = (Stats::new(), Stats::new());
        a.counters.audit_max_staleness_ms.store(30, Relaxed);
        b.counters.audit_max_staleness_ms.store(20, Relaxed);
        let both = a.snapshot(0, 0) + b.snapshot(0, 0);
        assert_eq!(both.audit_max_staleness_ms, 30);
        let figure = both
            .figures()
            .into_iter()
            .find(|f| f.name == "audit_max_staleness_ms")
            .expect("named");
        assert_eq!(figure.kind, Kind::Gauge);
    }
}
