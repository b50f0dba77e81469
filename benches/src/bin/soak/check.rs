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

    /// Each bucket, and each way a pair misses one: `(why, the check, the earlier read, the later
    /// read, the bucket)`; a failing row names itself.
    #[test]
    fn each_pair_lands_in_its_bucket() {
        use Bucket::{FailedLoad, FencedOut, LockExpired, Outage, Unexplained};
        #[rustfmt::skip] // a table: one row a line
        let mut cases = vec![
            // A read that started while the failed one still held the lock is not excused by it.
            ("during a failed load", calm(), read(0, 0, 100, Outcome::Failed), loaded(1, 50, 60), Unexplained),
            // Another store may take over a lock once its `PX` (less the slack) has run out, but
            // only if the winner's store lost Valkey meanwhile: otherwise its lease kept the lock.
            ("a lapsed lock taken over", troubled(0, 100, 200), loaded(0, 0, 800), loaded(1, 560, 570), LockExpired),
            ("before the PX ran out", calm(), loaded(0, 0, 800), loaded(1, 540, 550), Unexplained),
            ("the lease keeps a live winner's lock", calm(), loaded(0, 0, 800), loaded(1, 560, 570), Unexplained),
            // A Valkey outage between two reads of one store explains them, overlapping or not:
            // losing coherence flushed its L1 and detached the running flight.
            ("an outage during the read", outage(40, 60), loaded(0, 0, 100), loaded(0, 50, 60), Outage),
            ("an outage after the read", outage(120, 140), loaded(0, 0, 100), loaded(0, 150, 160), Outage),
            // One store never runs two flights for a key: an overlapping same-store pair fails.
            ("one store overlapping itself", calm(), loaded(0, 0, 800), loaded(0, 700, 710), Unexplained),
            ("a load inside its lock", calm(), loaded(0, 0, 540), loaded(1, 580, 585), Unexplained),
            // Two stores may each read once while Valkey is down between their starts.
            ("Valkey down between the starts", outage(100, 300), loaded(0, 0, 5), loaded(1, 150, 155), Outage),
            ("Valkey down after both", outage(400, 600), loaded(0, 0, 5), loaded(1, 150, 155), Unexplained),
            // The earlier store's trouble anywhere between the two starts explains the pair.
            ("the earlier store's trouble", troubled(0, 100, 120), loaded(0, 0, 5), loaded(1, 190, 195), Outage),
            // The later store's trouble explains the pair only if it was in trouble as its read
            // started.
            ("the later store in trouble at its start", troubled(1, 150, 160), loaded(0, 0, 5), loaded(1, 180, 185), Outage),
            ("the later store in trouble before", troubled(1, 20, 30), loaded(0, 0, 5), loaded(1, 180, 185), Unexplained),
            // One store reads a key twice in a window only across an outage: its first load took
            // its lock on the killed server and ended once the new one was up, or losing Valkey
            // (and so coherence) flushed its L1 between the two reads. With no outage between
            // them, never.
            ("a load spanning the restart", outage(100, 300), loaded(0, 50, 350), loaded(0, 360, 365), Outage),
            ("a reread during the outage", outage(100, 300), loaded(0, 0, 5), loaded(0, 150, 155), Outage),
            ("a reread before the outage", outage(100, 300), loaded(0, 0, 5), loaded(0, 20, 25), Unexplained),
        ];
        for store in [0, 1] {
            // After an error, a panic or a cut-off load nothing was cached: the next read is
            // explained.
            for outcome in [Outcome::Failed, Outcome::Panicked, Outcome::CutOff] {
                let failed = read(0, 0, 10, outcome);
                cases.push((
                    "after a failed load",
                    calm(),
                    failed,
                    loaded(store, 20, 25),
                    FailedLoad,
                ));
            }
            // A load that outlived its lock while its store lost Valkey was fenced out and stored
            // nowhere: the next read is explained. With Valkey up, the lease kept the lock: it is
            // not. Two healthy reads inside one value's life, with nothing to excuse them, fail.
            #[rustfmt::skip]
            cases.extend([
                ("after a fenced-out load", troubled(0, 100, 200), loaded(0, 0, 560), loaded(store, 600, 605), FencedOut),
                ("after a load the lease kept", calm(), loaded(0, 0, 560), loaded(store, 600, 605), Unexplained),
                ("no excuse", calm(), loaded(0, 0, 5), loaded(store, 100, 105), Unexplained),
            ]);
        }
        for (why, check, earlier, later, bucket) in cases {
            let got = check.classify(&earlier, &later);
            assert_eq!(got, bucket, "{why}: {earlier:?} then {later:?}");
        }
    }
}
