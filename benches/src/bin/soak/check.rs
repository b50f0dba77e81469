//! The invariant check: source reads per key per expiry window.
//!
//! A value loaded by a read that ended at `end` is fresh on Valkey (and in L1) until `end + ttl`
//! (jitter is 0). So for every key, a later read that starts before an earlier read's
//! `end + ttl - EXPIRY_SLACK` makes a *close pair*: either the later read should have found the
//! value, or the later read started while the earlier one held the lock. Each close pair goes to
//! the first bucket that explains it ([`Check::classify`]); a pair none explains fails the soak.
//! `docs/soak.md` gives the reasoning for each bucket.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::chaos::{Outage, Span, Windows};
use crate::settings::*;
use crate::source::{Outcome, Read};

/// Why a close pair of reads is legitimate, or that it is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Bucket {
    /// The earlier read failed (error, panic, cut off): nothing was cached; the later one began
    /// after it ended.
    FailedLoad,
    /// The later read began, in another store, while the earlier one was still loading but past
    /// its lock's `PX`, and the earlier store could not reach Valkey meanwhile: its lease could not
    /// extend the lock, which expired mid-rebuild, and the later read took it over.
    LockExpired,
    /// The earlier read outlived its lock while its store could not reach Valkey (so its lease
    /// lapsed) and then loaded: its fenced write was refused, so its value was stored nowhere; the
    /// later read began after it ended.
    FencedOut,
    /// Valkey could not coordinate: it was killed (and came back empty) between the two reads, or
    /// one of the two stores could not reach it. For two reads of one store: the earlier read
    /// took its lock on the killed server and ended after the new one was up (fenced out).
    Outage,
    /// Nothing explains it: the invariant failed.
    Unexplained,
}

impl Bucket {
    pub(crate) const ALL: [Bucket; 5] = [
        Bucket::FailedLoad,
        Bucket::LockExpired,
        Bucket::FencedOut,
        Bucket::Outage,
        Bucket::Unexplained,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Bucket::FailedLoad => "(c) after a failed load",
            Bucket::LockExpired => "(b) lock expired mid-rebuild",
            Bucket::FencedOut => "(d) after a fenced-out write",
            Bucket::Outage => "(a) Valkey outage",
            Bucket::Unexplained => "UNEXPLAINED",
        }
    }
}

/// What the check needs besides the reads.
pub(crate) struct Check {
    pub(crate) ttl: Duration,
    /// Per store: when it could not use Valkey (widened by WINDOW_MARGIN).
    pub(crate) troubled: Vec<Windows>,
    /// When Valkey was down, kill to PING (widened by WINDOW_MARGIN).
    pub(crate) down: Windows,
    pub(crate) outages: Vec<Outage>,
}

impl Check {
    pub(crate) fn new(
        ttl: Duration,
        troubled: Vec<Vec<Span>>,
        outages: &[Outage],
        end: Duration,
    ) -> Self {
        let down = outages
            .iter()
            .map(|o| Span {
                from: o.down,
                to: o.up.unwrap_or(end.max(o.down)),
            })
            .collect();
        Check {
            ttl,
            troubled: troubled
                .into_iter()
                .map(|spans| Windows::new(spans, WINDOW_MARGIN))
                .collect(),
            down: Windows::new(down, WINDOW_MARGIN),
            outages: outages.to_vec(),
        }
    }

    /// `later` started before `earlier`'s value (had it been stored) expired.
    pub(crate) fn close(&self, earlier: &Read, later: &Read) -> bool {
        later.start + EXPIRY_SLACK < earlier.end + self.ttl
    }

    pub(crate) fn classify(&self, earlier: &Read, later: &Read) -> Bucket {
        let during = later.start < earlier.end;
        let same_store = earlier.store == later.store;
        let outlived_lock = earlier.end - earlier.start + LOCK_SLACK >= LOCK_TTL;
        // The winner's lease extends its lock while it loads: a lock outlived only when the
        // winner's store could not reach Valkey for a while during the load.
        let lease_lapsed = self.down.meets(earlier.start, earlier.end)
            || self.troubled[earlier.store].meets(earlier.start, earlier.end);
        if !during && earlier.outcome != Outcome::Loaded {
            return Bucket::FailedLoad;
        }
        if during
            && !same_store
            && lease_lapsed
            && later.start - earlier.start + LOCK_SLACK >= LOCK_TTL
        {
            return Bucket::LockExpired;
        }
        if !during && earlier.outcome == Outcome::Loaded && outlived_lock && lease_lapsed {
            return Bucket::FencedOut;
        }
        let outage = if same_store {
            // One store never runs two flights for a key, and keeps what it loads in L1 — until
            // coherence flushes it: losing the tracking connection (Valkey killed) drops every L1
            // entry, and while Valkey is down the next read goes to the source. A load whose lock
            // vanished with a killed Valkey is stored nowhere either.
            // The flush also detaches a running flight, so the next miss may start a second
            // load of the key while the first still runs (at most two: MAX_LOADS_PER_ID).
            (!during && self.spanned_restart(earlier))
                || self.down.meets(earlier.start, later.start)
                || self.troubled[later.store].meets(earlier.start, later.start)
        } else {
            self.down.meets(earlier.start, later.start)
                || self.troubled[earlier.store].meets(earlier.start, later.start)
                || self.troubled[later.store].meets(later.start, later.start)
        };
        if outage {
            Bucket::Outage
        } else {
            Bucket::Unexplained
        }
    }

    /// The read loaded for longer than its lock lived, and its store could use Valkey all along:
    /// its fenced write must have been refused.
    pub(crate) fn outlived_lock_with_valkey_up(&self, read: &Read) -> bool {
        read.end - read.start >= LOCK_TTL + LOCK_SLACK
            && !self.down.meets(read.start, read.end + WINDOW_MARGIN)
            && !self.troubled[read.store].meets(read.start, read.end + WINDOW_MARGIN)
    }

    /// The read took its lock on a server that was then killed, and ended once the new one was up.
    pub(crate) fn spanned_restart(&self, read: &Read) -> bool {
        self.outages.iter().any(|o| {
            o.up.is_some_and(|up| {
                read.start <= o.down + WINDOW_MARGIN && read.end + WINDOW_MARGIN >= up
            })
        })
    }
}

/// The check's findings.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    /// Close pairs by bucket: (all, within one store).
    pub(crate) pairs: BTreeMap<Bucket, (u64, u64)>,
    /// A few unexplained pairs, to show.
    pub(crate) examples: Vec<(Read, Read)>,
    /// Gaps from a read's end to the start of the key's next read, where the first read stored its
    /// value and nothing would have excused a close pair: the gaps the check has teeth on.
    pub(crate) watched: Gaps,
}

/// A summary of watched gaps.
#[derive(Debug, Default)]
pub(crate) struct Gaps {
    pub(crate) count: u64,
    /// Within 20 ms past `ttl`: reads that came right at the end of the window.
    pub(crate) at_the_edge: u64,
    pub(crate) tightest: Option<Duration>,
}

impl Gaps {
    pub(crate) fn add(&mut self, gap: Duration, ttl: Duration) {
        self.count += 1;
        if gap < ttl + Duration::from_millis(20) {
            self.at_the_edge += 1;
        }
        self.tightest = Some(self.tightest.map_or(gap, |g| g.min(gap)));
    }
}

/// How far back a read looks for earlier reads that could make a close pair with it; far longer
/// than any load plus the ttl.
pub(crate) const LOOKBACK: Duration = Duration::from_secs(30);

pub(crate) fn check_reads(mut reads: Vec<Read>, check: &Check) -> Findings {
    reads.sort_by_key(|r| (r.key, r.start));
    let mut found = Findings::default();
    for key_reads in reads.chunk_by(|a, b| a.key == b.key) {
        for (j, later) in key_reads.iter().enumerate() {
            if let Some(previous) = j.checked_sub(1).map(|i| &key_reads[i])
                && previous.outcome == Outcome::Loaded
                && check.classify(previous, later) == Bucket::Unexplained
            {
                found
                    .watched
                    .add(later.start.saturating_sub(previous.end), check.ttl);
            }
            for earlier in key_reads[..j].iter().rev() {
                if earlier.start + check.ttl + LOOKBACK < later.start {
                    break;
                }
                if !check.close(earlier, later) {
                    continue;
                }
                let bucket = check.classify(earlier, later);
                let counts = found.pairs.entry(bucket).or_default();
                counts.0 += 1;
                if earlier.store == later.store {
                    counts.1 += 1;
                }
                if bucket == Bucket::Unexplained && found.examples.len() < 10 {
                    found.examples.push((*earlier, *later));
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    //! [`Check::classify`] decides the soak's verdict: each bucket, and each way a pair misses
    //! one, on hand-made reads (ttl 200 ms; the lock's `PX` and the margins from the settings).

    use super::*;
    use crate::source::Fault;

    const TTL: Duration = Duration::from_millis(200);

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    /// A read of key 1 by `store` from `start` to `end` ms.
    fn read(store: usize, start: u64, end: u64, outcome: Outcome) -> Read {
        Read {
            key: 1,
            store,
            fault: Fault::None,
            start: at(start),
            end: at(end),
            outcome,
        }
    }

    fn loaded(store: usize, start: u64, end: u64) -> Read {
        read(store, start, end, Outcome::Loaded)
    }

    /// Two stores, Valkey up and usable all along.
    fn calm() -> Check {
        Check::new(TTL, vec![Vec::new(), Vec::new()], &[], at(60_000))
    }

    /// Two stores; Valkey killed at `down` ms and answering again at `up` ms.
    fn outage(down: u64, up: u64) -> Check {
        let outages = [Outage {
            down: at(down),
            up: Some(at(up)),
        }];
        Check::new(TTL, vec![Vec::new(), Vec::new()], &outages, at(60_000))
    }

    /// Two stores; `store` could not use Valkey from `from` to `to` ms.
    fn troubled(store: usize, from: u64, to: u64) -> Check {
        let mut spans = vec![Vec::new(), Vec::new()];
        spans[store].push(Span {
            from: at(from),
            to: at(to),
        });
        Check::new(TTL, spans, &[], at(60_000))
    }

    /// A pair is close while the earlier value would still be fresh, less the expiry slack.
    #[test]
    fn close_means_inside_the_earlier_values_life() {
        let earlier = loaded(0, 0, 10);
        assert!(calm().close(&earlier, &loaded(1, 204, 205)));
        assert!(!calm().close(&earlier, &loaded(1, 205, 206)));
    }

    /// After an error, a panic or a cut-off load nothing was cached: the next read is explained.
    #[test]
    fn a_read_after_a_failed_load_is_explained() {
        for outcome in [Outcome::Failed, Outcome::Panicked, Outcome::CutOff] {
            let earlier = read(0, 0, 10, outcome);
            for store in [0, 1] {
                let later = loaded(store, 20, 25);
                assert_eq!(calm().classify(&earlier, &later), Bucket::FailedLoad);
            }
        }
    }

    /// A read that started while the failed one still held the lock is not excused by the failure.
    #[test]
    fn a_read_during_a_failed_load_is_not_excused_by_it() {
        let earlier = read(0, 0, 100, Outcome::Failed);
        let later = loaded(1, 50, 60);
        assert_eq!(calm().classify(&earlier, &later), Bucket::Unexplained);
    }

    /// Another store may take over a lock once its `PX` (less the slack) has run out, but only if
    /// the winner's store lost Valkey meanwhile: otherwise its lease kept the lock.
    #[test]
    fn another_store_takes_over_an_expired_lock() {
        let earlier = loaded(0, 0, 800);
        let after_px = loaded(1, 560, 570);
        let lapsed = troubled(0, 100, 200);
        assert_eq!(lapsed.classify(&earlier, &after_px), Bucket::LockExpired);
        let before_px = loaded(1, 540, 550);
        assert_eq!(calm().classify(&earlier, &before_px), Bucket::Unexplained);
        assert_eq!(
            calm().classify(&earlier, &after_px),
            Bucket::Unexplained,
            "the lease keeps a live winner's lock"
        );
    }

    /// A Valkey outage between two reads of one store explains them, overlapping or not: losing
    /// coherence flushed its L1 and detached the running flight.
    #[test]
    fn an_outage_flushes_a_stores_l1_and_detaches_its_flight() {
        let earlier = loaded(0, 0, 100);
        assert_eq!(
            outage(40, 60).classify(&earlier, &loaded(0, 50, 60)),
            Bucket::Outage
        );
        assert_eq!(
            outage(120, 140).classify(&earlier, &loaded(0, 150, 160)),
            Bucket::Outage
        );
    }

    /// One store never runs two flights for a key: an overlapping same-store pair is a failure.
    #[test]
    fn one_store_never_overlaps_itself() {
        let earlier = loaded(0, 0, 800);
        let later = loaded(0, 700, 710);
        assert_eq!(calm().classify(&earlier, &later), Bucket::Unexplained);
    }

    /// A load that outlived its lock while its store lost Valkey was fenced out and stored
    /// nowhere: the next read is explained. With Valkey up, the lease kept the lock: it is not.
    #[test]
    fn a_read_after_a_fenced_out_load_is_explained() {
        let outlived = loaded(0, 0, 560);
        for store in [0, 1] {
            let later = loaded(store, 600, 605);
            let lapsed = troubled(0, 100, 200);
            assert_eq!(lapsed.classify(&outlived, &later), Bucket::FencedOut);
            assert_eq!(calm().classify(&outlived, &later), Bucket::Unexplained);
        }
        let inside_the_lock = loaded(0, 0, 540);
        let later = loaded(1, 580, 585);
        assert_eq!(
            calm().classify(&inside_the_lock, &later),
            Bucket::Unexplained
        );
    }

    /// Two stores may each read once while Valkey is down between their starts.
    #[test]
    fn two_stores_read_apart_while_valkey_is_down() {
        let earlier = loaded(0, 0, 5);
        let later = loaded(1, 150, 155);
        assert_eq!(outage(100, 300).classify(&earlier, &later), Bucket::Outage);
        assert_eq!(
            outage(400, 600).classify(&earlier, &later),
            Bucket::Unexplained
        );
    }

    /// The earlier store's trouble anywhere between the two starts explains the pair.
    #[test]
    fn the_earlier_stores_trouble_explains_the_pair() {
        let earlier = loaded(0, 0, 5);
        let later = loaded(1, 190, 195);
        assert_eq!(
            troubled(0, 100, 120).classify(&earlier, &later),
            Bucket::Outage
        );
    }

    /// The later store's trouble explains the pair only when it was in trouble as its read started.
    #[test]
    fn the_later_stores_trouble_counts_at_its_start_only() {
        let earlier = loaded(0, 0, 5);
        let later = loaded(1, 180, 185);
        assert_eq!(
            troubled(1, 150, 160).classify(&earlier, &later),
            Bucket::Outage
        );
        assert_eq!(
            troubled(1, 20, 30).classify(&earlier, &later),
            Bucket::Unexplained
        );
    }

    /// One store reads a key twice in a window only across an outage: its first load took its
    /// lock on the killed server and ended once the new one was up, or losing Valkey (and so
    /// coherence) flushed its L1 between the two reads. With no outage between them, never.
    #[test]
    fn one_store_rereads_only_across_an_outage() {
        let spanned = loaded(0, 50, 350);
        let later = loaded(0, 360, 365);
        assert_eq!(outage(100, 300).classify(&spanned, &later), Bucket::Outage);
        let before = loaded(0, 0, 5);
        let during = loaded(0, 150, 155);
        assert_eq!(outage(100, 300).classify(&before, &during), Bucket::Outage);
        let after = loaded(0, 20, 25);
        assert_eq!(
            outage(100, 300).classify(&before, &after),
            Bucket::Unexplained
        );
    }

    /// Two healthy reads of one key inside one value's life, with nothing to excuse them, fail.
    #[test]
    fn a_second_read_with_no_excuse_is_unexplained() {
        let earlier = loaded(0, 0, 5);
        for store in [0, 1] {
            let later = loaded(store, 100, 105);
            assert_eq!(calm().classify(&earlier, &later), Bucket::Unexplained);
        }
    }
}
